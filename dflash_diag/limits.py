"""What an input may claim of this machine, checked before it is taken.

A small file can ask for a lot: a 10 MB gzip of 4 GiB of lines, a 2 GB line of JSON,
a Parquet of a few KB whose row count says 4e8.  Everything that turns a count or a
size read from a file into memory asks here first, and what cannot fit is refused with
one line (``needs ~N GB; this machine has M GB available``) rather than a MemoryError
half-way through.

- :func:`check_fits`: a size in bytes against the memory available (``MemAvailable``
  of ``/proc/meminfo``, else physical pages), with :data:`HEADROOM`;
- :func:`gunzip`: stream decompression that stops at a budget instead of inflating a
  bomb whole;
- :func:`check_lines`: no line longer than :data:`MAX_LINE_BYTES` (a training log's
  records are short; a line that long is not one);
- :func:`check_line_claims`: the same for lines that are each parsed whole (a JSON
  lines manifest's rows), where a line's claim is its bytes times what parsing a byte
  costs: one line may take at most :data:`MAX_LINE_BYTES` and what fits.
"""

from __future__ import annotations

import os
import zlib

from .errors import InputError

#: A line longer than this is not a log record (bytes).
MAX_LINE_BYTES = 64 << 20
#: Share of the available memory one input may take.
HEADROOM = 0.5
#: Decompressed bytes a log may be, as a multiple of what reading it costs per byte
#: (a parsed log takes several times its text).
PARSE_COST = 6
#: Bytes of memory a manifest row takes while it is read (ids, lengths, a category, and
#: the Arrow and pandas copies made on the way).
ROW_BYTES = 64
#: Bytes of memory a byte of JSON lines takes while Arrow's reader parses it (the text,
#: the parsed block, the columns).
JSON_COST = 4
#: ... while pandas parses it (a Python object per cell: one 200 MB string cell took
#: 7.1 GB, ~36 per byte).
JSON_OBJECT_COST = 40
#: Bytes decompressed per step of :func:`gunzip`.
_PIECE = 1 << 22

_GB = float(1 << 30)


def available_memory() -> int:
    """Bytes of memory this process may still take (``MemAvailable``; else all of it)."""
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):
        return 1 << 34


def _gb(n: float) -> str:
    return f"{n / _GB:.1f}" if n < 10 * _GB else f"{n / _GB:,.0f}"


def check_fits(nbytes: float, path: str, what: str, hint: str = "") -> None:
    """Refuse (InputError) when ``what`` of ``path`` needs more than :data:`HEADROOM` of
    the memory available.

    >>> check_fits(1024, "run.log", "reading it")
    """
    have = available_memory()
    if nbytes > HEADROOM * have:
        raise InputError(
            path,
            f"{what} needs ~{_gb(nbytes)} GB; this machine has {_gb(have)} GB available",
            hint or "split the input, or run this on a machine with more memory",
        )


def gunzip(data: bytes, path: str, budget: int | None = None) -> tuple[bytes, bool]:
    """Decompress gzip ``data`` (members one after another, as ``gzip`` writes them),
    in pieces, stopping with an InputError once the output passes ``budget`` bytes
    (default: what :func:`check_fits` allows at :data:`PARSE_COST` per byte).

    :returns: ``(bytes, complete)``; ``complete`` is False for a stream cut short (a
        log still being written), whose readable part is returned.
    :raises InputError: past the budget, or not gzip data at all.
    """
    if budget is None:
        budget = int(HEADROOM * available_memory() / PARSE_COST)
    out: list[bytes] = []
    size = 0
    rest = data
    while rest:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        piece = rest
        try:
            while piece or not d.eof:
                got = d.decompress(piece, _PIECE)
                piece = d.unconsumed_tail
                size += len(got)
                if size > budget:
                    raise InputError(
                        path,
                        f"decompresses to more than {_gb(budget)} GB (reading it needs "
                        f"~{_gb(size * PARSE_COST)} GB or more; this machine has "
                        f"{_gb(available_memory())} GB available)",
                        "decompress a part of it (zcat | head), or use a bigger machine",
                    )
                out.append(got)
                if not got and not piece:
                    break
        except zlib.error as e:
            if not out:
                raise InputError(path, f"broken gzip data ({e})", "re-copy the file") from None
            return b"".join(out), False
        if not d.eof:
            return b"".join(out), False
        rest = d.unused_data
        if rest[:2] != b"\x1f\x8b":
            break  # (trailing garbage after the last member: ignored, as gzip does)
    return b"".join(out), True


def check_lines(data: bytes, path: str, limit: int = MAX_LINE_BYTES) -> None:
    """Refuse data holding a line of about ``limit`` bytes or more: every aligned
    window of ``limit`` bytes must hold a newline (so a line of ``2 x limit`` is always
    caught, and one shorter than ``limit`` never is), at one ``memchr`` per window."""
    if len(data) <= limit:
        return
    for start in range(0, len(data) - limit + 1, limit):
        if data.find(b"\n", start, start + limit) < 0:
            line = data.count(b"\n", 0, start) + 1
            raise InputError(
                path,
                f"a line longer than {limit >> 20} MB (no training record is that long)",
                "check the file is a training log, or split that line",
                line=line,
            )


def check_line_claims(
    data: bytes, path: str, cost: float, what: str, limit: int | None = None
) -> None:
    """Refuse ``data`` holding a line that claims too much: longer than ``limit`` bytes,
    or whose parse (``len(line) x cost`` bytes) does not fit in :data:`HEADROOM` of the
    memory available.  Aligned windows of the allowance are scanned as in
    :func:`check_lines`; the line found is then measured (its newlines, one ``memchr``
    each way) and named with its size, its need and the machine's memory.

    :param cost: bytes of memory one byte of the line takes while it is parsed.
    :param what: what a line is (``manifest row``), for the message.
    :param limit: bytes a line may be (default :data:`MAX_LINE_BYTES`).

    >>> check_line_claims(b'{"length": 3}\\n' * 10, "m.jsonl", JSON_COST, "manifest row")
    """
    limit = MAX_LINE_BYTES if limit is None else limit
    have = available_memory()
    allowance = max(1, int(min(limit, HEADROOM * have / cost)))
    if len(data) <= allowance:
        return
    for start in range(0, len(data) - allowance + 1, allowance):
        if data.find(b"\n", start, start + allowance) >= 0:
            continue
        first = data.rfind(b"\n", 0, start) + 1
        end = data.find(b"\n", start)
        size = (len(data) if end < 0 else end) - first
        need = f"parsing it needs ~{_size(size * cost)}; this machine has {_size(have)} available"
        raise InputError(
            path,
            f"a line of {_size(size)}, over the {_size(limit)} a {what} may be ({need})"
            if size > limit
            else f"a line of {_size(size)}: {need}",
            f"check the file is one {what} a line, or split that line",
            line=data.count(b"\n", 0, first) + 1,
        )


def _size(n: float) -> str:
    """``n`` bytes as people say them: ``64 MB``, ``2.0 GB``."""
    return f"{_gb(n)} GB" if n >= _GB else f"{n / (1 << 20):,.0f} MB"
