"""The vectorised fast path for large free-text logs whose lines share one shape.

A trainer prints the same line template millions of times.  Parsing each line with the
general regex parser costs microseconds per line; here the template is learned once
(:mod:`~dflash_diag.logs.template`) and applied to the raw bytes by pyarrow's C++ CSV
tokenizer and compute kernels, without a Python object per line:

1. the template is cut at one delimiter byte into segments holding at most one number
   each (``=`` for ``key=value`` lines: ``... | INFO | dflash.train | epoch`` /
   ``0 step`` / ``254/3000 loss`` / ``4.8123 acc`` ...);
2. the log is cut into byte ranges of whole lines (:data:`PART_BYTES`), read by a few
   threads (Arrow releases the GIL); each range is split into rows and columns at that
   byte by ``pyarrow.csv`` (no quoting; a line with another number of delimiters is
   handed back, with its line number, by the invalid-row handler);
3. each column is checked against its segment: its fixed bytes by Arrow's
   ``starts_with``/``ends_with`` (memcmp) and, where the template has digits that vary,
   by a numpy gather of those few bytes; the number between head and tail is cast to
   float64 by Arrow (one cast per column, through a zero-copy array of the number
   spans), and a magnitude letter (``25.1K``) is read from the span's last byte;
4. a line fits when every column fits and every number parses; the cast is checked
   against the general parser's number syntax (an unparsable span, or a ``nan``/``inf``
   Arrow reads but the parser would not, sends the line to the general parser).

Costs on a 1M-line, 150 MB log, in CPU time: the CSV tokenizer 0.18 s plus 0.03 s to
join its 1 MiB blocks into one array per column (larger blocks parse slower), the casts
0.11 s, the checks and numpy bookkeeping about 0.15 s.  With two threads the whole
``read_log`` takes 0.32-0.37 s, 3.5-4x ``pandas.read_csv`` on the same metrics written as
CSV (``benchmarks/bench_parse.py``); most of the gap is the tokenizer and the casts,
which read_csv does in one C pass over a third of the bytes.

Every line that does not fit goes through the general parser, so the result is the
same table the general parser gives (the test suite checks this on every fixture and on
randomly mutated logs).  Used only for logs of at least :data:`FAST_MIN_LINES` lines,
valid UTF-8, without ANSI codes, bare carriage returns or RichHandler layout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .normalise import MAGNITUDE
from .template import (
    Pattern,
    Segment,
    Template,
    ValueToken,
    sample_lines,
    sample_template,
    split_template,
)

#: Logs shorter than this take the general path (its per-line cost does not matter).
FAST_MIN_LINES = 20_000
#: Fewer lines than this fit the template: not worth it, the general parser reads all.
MIN_MATCHES = 1_000
#: The log is read in byte ranges of about this size, by up to 4 threads (progress is
#: reported after each range).
PART_BYTES = 1 << 24
#: A column of equal-length rows is read through strided views, one per run of such
#: rows, when the other rows break it into at most this many runs.
MAX_RUNS = 64

_FINITE_RE2 = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_NUM_RE2 = rf"(?:{_FINITE_RE2}|[-+]?(?:nan|NaN|NAN|inf|Inf|INF))"


def _byte_tables() -> tuple[list[float], list[int]]:
    factor, letter = [1.0] * 256, [0] * 256
    for k, f in MAGNITUDE.items():
        factor[ord(k)], letter[ord(k)] = f, 1
    return factor, letter


#: by last byte of a magnitude span: its factor (1.0 for a digit), whether it is a letter
_MAG_FACTOR, _MAG_LETTER = _byte_tables()


def _rich(data: Any) -> bool:
    """The general reader's RichHandler test, on the same first 500 lines."""
    from .text import is_rich

    end = -1
    for _ in range(500):
        end = data.find(b"\n", end + 1)
        if end < 0:
            break
    head = data if end < 0 else data[:end]
    return is_rich(bytes(head).decode("utf-8", errors="replace").split("\n"))


def _bare_return(data: Any, lo: int, hi: int) -> bool:
    """Whether a ``\\r`` in ``data[lo:hi]`` is anywhere but before a ``\\n`` (tqdm
    refreshes, several records a line: the general reader splits those)."""
    import numpy as np

    if data.find(b"\r", lo, hi) < 0:
        return False
    buf = np.frombuffer(data, dtype=np.uint8)
    at = np.flatnonzero(buf[lo:hi] == 13) + lo
    return bool(at[-1] + 1 == hi or (buf[at + 1] != 10).any())


def fast_records(
    data: Any,
    skipped: dict[str, int],
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Any, Any] | None:
    """Records of the lines that fit the log's dominant template, or None.

    Works on the bytes (``bytes`` or a read-only ``mmap``): the text is never decoded
    into one Python string, and no Python object is made per fitting line.

    :returns: ``(frame, rest)``: a DataFrame of raw records (``line``, ``rank``,
        ``step_source``, ``is_eval``, value columns) and the ``(line number, text)`` of
        every line the frame does not cover, in order (so the log has ``len(frame) +
        len(rest)`` lines).  None when the fast path does not apply.
    """
    if len(data) < 10 * FAST_MIN_LINES or _rich(data):
        return None
    template = sample_template(sample_lines(data))
    if template is None or template.n_tokens < 2:
        return None
    try:
        return _apply(data, template, progress)
    except Exception:  # noqa: BLE001 - any surprise (bad UTF-8...): the general parser reads all
        return None


class _NotFast(Exception):
    """The log has something the fast path does not reproduce: the general parser reads all."""


@dataclass
class _Part:
    """One byte range of the log split into rows by :func:`_split_part`."""

    lo: int
    hi: int
    table: Any  # pyarrow Table, one binary column per segment
    row_line: Any  # line number (from 1, in the range) of each row
    odd: list[tuple[int, str]]  # (line number in the range, text) of other-shaped lines
    cut_last: bool  # the range's last line is the log's unterminated last line
    fits: Any = None  # per row: it fits the template (by :func:`_read_part`)
    values: Any = None  # (values, fitting rows) float64 (by :func:`_read_part`)

    @property
    def n_lines(self) -> int:
        return len(self.row_line) + len(self.odd)


def _parts(data: Any, workers: int = 1) -> list[tuple[int, int]]:
    """Byte ranges of at most about :data:`PART_BYTES`, each ending just after a newline,
    as many as a multiple of ``workers`` and of about equal size (so the threads finish
    together)."""
    n = -(-len(data) // PART_BYTES)
    n = -(-n // workers) * workers
    size = max(1, len(data) // n)
    bounds = [0]
    while len(data) - bounds[-1] > size:
        cut = data.find(b"\n", bounds[-1] + size - 1) + 1
        if cut == 0 or cut == len(data):
            break
        bounds.append(cut)
    bounds.append(len(data))
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _apply(
    data: Any,
    template: Template,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Any, Any] | None:
    """Read every byte range in a worker thread (split into rows by pyarrow's CSV reader,
    then each column checked and cast: long Arrow and numpy calls, which release the
    GIL), then join the ranges' numbers into one block (a row per value, threads again)
    and gather the lines that did not fit, with their text, for the general parser."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import pandas as pd

    delimiter, segments = split_template(template)
    cut_end = data[-1:] != b"\n"  # the last line may be cut short: never read here
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = max(1, min(cpus or 1, 4))
    ranges = _parts(data, workers)

    def read(r: tuple[int, int]) -> _Part:
        last = cut_end and r[1] == len(data)
        part = _split_part(data, r[0], r[1], delimiter, len(segments), last)
        _read_part(part, segments, template)
        return part

    parts: list[_Part] = []
    pool = ThreadPoolExecutor(workers)
    try:
        done = 0
        for (_, hi), part in zip(ranges, pool.map(read, ranges), strict=True):
            parts.append(part)
            done += part.n_lines
            if progress is not None:  # lines so far, of a total guessed from the bytes
                progress(done, max(done, round(done * len(data) / hi)))
        n_lines = sum(p.n_lines for p in parts)
        n_fit = sum(p.values.shape[1] for p in parts)
        if n_lines < FAST_MIN_LINES or n_fit < MIN_MATCHES:
            return None
        # one row per value: transposed, it is the layout of a DataFrame's float block
        values = np.empty((len(template.values), n_fit), dtype=np.float64)

        def join(j: int) -> None:
            np.concatenate([p.values[j] for p in parts], out=values[j])

        list(pool.map(join, range(len(template.values))))
    except _NotFast:
        return None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # after a failure, skip the rest
    line0 = np.cumsum([0, *[p.n_lines for p in parts[:-1]]]).tolist()
    lines = np.concatenate([p.row_line[p.fits] + o for p, o in zip(parts, line0, strict=True)])
    rest: list[tuple[int, str]] = []
    for p, o in zip(parts, line0, strict=True):
        misfits = np.flatnonzero(~p.fits)
        odd = p.odd + _texts(p, misfits, delimiter, data) if len(misfits) else p.odd
        rest += [(no + o, text) for no, text in sorted(odd)]
    if any("\x1b" in text for _, text in rest):
        return None  # ANSI codes (no fitting line has one): the general reader strips them
    frame = pd.DataFrame(values.T, columns=[v.name for v in template.values], copy=False)
    frame.insert(0, "line", lines)
    if "rank" not in frame:  # a `rank=3` field varies by line; a prefix does not match others
        frame["rank"] = template.rank
    # (categorical: build_table compares it to "field" over every row)
    frame["step_source"] = pd.Categorical.from_codes(np.zeros(len(frame), np.int8), ["field"])
    frame["is_eval"] = template.is_eval
    frame["attach"] = False
    return frame, rest


def _split_part(
    data: Any, lo: int, hi: int, delimiter: bytes, n_columns: int, cut_last: bool
) -> _Part:
    """Split ``data[lo:hi]`` (whole lines) into rows at the delimiter; a line with another
    number of delimiters is kept aside with its line number.  Runs in a worker thread."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pcsv

    if _bare_return(data, lo, hi):
        raise _NotFast("a \\r not ending a line")
    raw = pa.py_buffer(memoryview(data)[lo:hi])
    whole = np.array([0, hi - lo], dtype=np.int64)
    # bad UTF-8 raises here (the general parser counts and replaces it)
    pa.Array.from_buffers(pa.large_string(), 1, [None, pa.py_buffer(whole), raw]).validate(
        full=True
    )
    odd: list[tuple[int, str]] = []

    def other_shape(row: Any) -> str:
        odd.append((row.number, row.text))
        return "skip"

    names = [f"s{i}" for i in range(n_columns)]
    table = pcsv.read_csv(
        raw,
        # blocks of 1 MiB parse faster than larger ones (cache); a longer line fails
        read_options=pcsv.ReadOptions(column_names=names, use_threads=False, block_size=1 << 20),
        parse_options=pcsv.ParseOptions(
            delimiter=delimiter.decode(),
            quote_char=False,
            escape_char=False,
            newlines_in_values=False,
            ignore_empty_lines=False,
            invalid_row_handler=other_shape,
        ),
        convert_options=pcsv.ConvertOptions(column_types=dict.fromkeys(names, pa.binary())),
    )
    table = table.combine_chunks()  # one array per column
    n_lines = table.num_rows + len(odd)
    is_row = np.ones(n_lines + 1, dtype=bool)
    is_row[0] = False
    if odd:
        numbers = np.array([no for no, _ in odd])
        if (numbers < 1).any() or (numbers > n_lines).any():
            raise _NotFast("the CSV reader did not number its rows")
        is_row[numbers] = False
    row_line = np.flatnonzero(is_row)
    if len(row_line) != table.num_rows:
        raise _NotFast("rows and lines do not line up")
    return _Part(lo, hi, table, row_line, odd, cut_last)


def _read_part(part: _Part, segments: tuple[Segment, ...], template: Template) -> None:
    """Check each column of the part against its segment and read its numbers: sets
    ``part.fits`` and ``part.values``."""
    import numpy as np

    n = len(part.row_line)
    fits = np.ones(n, dtype=bool)
    raw = {j: np.zeros(0) for j in range(len(template.values))}  # (a part of no rows)
    for k, seg in enumerate(segments if n else ()):
        col = part.table.column(k).chunks[0]
        ok, off = _segment_fits(col, seg)
        if seg.value is not None:
            raw[seg.value] = _numbers(col, off, seg, template.values[seg.value], ok)
        fits &= ok
    if part.cut_last and n and part.row_line[-1] == part.n_lines:
        fits[-1] = False  # the log's last line, unterminated: it may be cut short
    every = bool(fits.all())
    values = np.empty((len(template.values), int(fits.sum())), dtype=np.float64)
    for j, vals in raw.items():
        values[j] = vals if every else vals[fits]
    part.fits, part.values = fits, values
    if every:
        part.table = None  # only a part with misfits needs its rows again (their text)


def _texts(part: _Part, rows: Any, delimiter: bytes, data: Any) -> list[tuple[int, str]]:
    """``(line number, text)`` of the given rows of a part: their columns joined again,
    but for a row of empty columns, whose line may be empty or all delimiters: that one
    is looked up in the bytes."""
    import numpy as np

    cols = [c.to_pylist() for c in part.table.take(rows).columns]
    out = []
    starts = None
    for row, cells in zip(rows.tolist(), zip(*cols, strict=True), strict=True):
        no = int(part.row_line[row])
        if any(cells):
            line = delimiter.join(cells)
        else:
            lo, hi = part.lo, part.hi
            if starts is None:
                nl = np.flatnonzero(np.frombuffer(data, np.uint8, hi - lo, lo) == 10)
                starts = np.concatenate([[0], nl + 1]) + lo
            s, e = int(starts[no - 1]), (int(starts[no]) if no < len(starts) else hi)
            line = bytes(data[s:e]).rstrip(b"\n").removesuffix(b"\r")
        out.append((no, line.decode("utf-8")))
    return out


def _segment_fits(col: Any, seg: Segment) -> tuple[Any, Any]:
    """Per row: whether the column's bytes fit the segment's head and tail (with room
    for a number between them, or exactly the head when the segment has no number).

    :returns: ``(ok, offsets)``, the column's int32 offsets as a numpy view.
    """
    import numpy as np

    off = np.frombuffer(col.buffers()[1], np.int32, len(col) + 1, 4 * col.offset)
    lengths = off[1:] - off[:-1]
    head, tail = seg.head, seg.tail
    exact = seg.value is None
    ok = lengths == len(head) if exact else lengths > len(head) + len(tail)
    if not ok.any():
        return ok, off
    b = col.buffers()[2]
    buf = np.frombuffer(b, np.uint8) if b is not None else np.zeros(0, np.uint8)
    if len(head):
        # rows of one length lie at a fixed stride: words are read through views
        step = len(head) if exact else None
        ok &= _fits(col, buf, off[:-1], 0, head, at_start=True, at_end=exact, step=step)
    if len(tail):
        ok &= _fits(col, buf, off[1:], -len(tail), tail, at_start=False, at_end=True)
    return ok, off


def _fits(
    col: Any,
    buf: Any,
    base: Any,
    shift: int,
    p: Pattern,
    at_start: bool,
    at_end: bool,
    step: int | None = None,
) -> Any:
    """Per row: the bytes from ``base + shift`` fit pattern ``p``.  ``at_start`` /
    ``at_end``: the pattern starts/ends where the row's bytes do, so a literal run at
    that end is compared by Arrow's ``starts_with``/``ends_with`` (memcmp); the rest by
    :func:`_words_fit`."""
    import numpy as np
    import pyarrow.compute as pc

    width = len(p)
    first = p.digits[0] if p.digits else width
    last = p.digits[-1] + 1 if p.digits else 0
    a, b = 0, width
    ok: Any = None
    if at_start and first >= min(4, width):
        ok = pc.starts_with(col, p.text[:first].decode()).to_numpy(zero_copy_only=False)
        a = first
    if at_end and b > a and width - last >= min(4, width - a):
        tail = p.text[max(last, a) :].decode()
        got = pc.ends_with(col, tail).to_numpy(zero_copy_only=False)
        ok = got if ok is None else ok & got
        b = max(last, a)
    if a < b:
        pos = base + np.int32(shift + a) if shift + a else base
        got = _words_fit(buf, pos, _sub(p, a, b), at_end=at_end and b == width, step=step)
        ok = got if ok is None else ok & got
    return ok


def _sub(p: Pattern, a: int, b: int) -> Pattern:
    return Pattern(p.text[a:b], tuple(d - a for d in p.digits if a <= d < b))


def _words_fit(buf: Any, pos: Any, p: Pattern, at_end: bool, step: int | None = None) -> Any:
    """Per row: the bytes from ``pos`` fit pattern ``p`` (any digit at a digit
    position), read as little-endian 64-bit words and tested with masks.

    Words are read at 0, 8, ... and one ending at the pattern's end; a pattern shorter
    than 8 bytes is read in one word reaching past its start (``at_end``: it ends a
    row) or past its end (it starts one), the extra bytes ignored.  ``x = word ^ want``
    (``want``: the literal bytes, ``0x30`` at digits): a literal byte fits when its byte
    of ``x`` is 0, a digit when its byte of ``x`` is at most 9, i.e. neither ``x`` nor
    ``x + 6`` has a high nibble there.  Words are gathered by row, or, where rows lie
    ``step`` bytes apart (a column of equal-length rows), read through strided views.
    """
    import numpy as np
    from numpy.lib.stride_tricks import as_strided

    n, width = len(pos), len(p)
    ok = np.ones(n, dtype=bool)
    if not n or not width:
        return ok
    if width < 8:
        at = [width - 8] if at_end else [0]
    else:
        at = sorted({*range(0, width - 7, 8), width - 8})
    lo, hi = min(at), max(at) + 8
    if len(buf) < 8:
        return _bytes_fit(buf, pos, p)
    # words[i] is the 8 bytes from buf[i] (unaligned reads through a strided view)
    words = as_strided(buf, shape=(len(buf) - 7, 8), strides=(1, 1)).view("<u8")[:, 0]
    # rows whose words would reach outside the buffer (at most a few at either end)
    first = int(np.searchsorted(pos, -lo, side="left"))
    stop = int(np.searchsorted(pos, len(buf) - hi, side="right"))
    edge = [*range(first), *range(stop, n)]
    inner = pos[first:stop]
    runs = None
    if step is not None and len(inner):
        breaks = (np.flatnonzero(np.diff(inner) != step) + 1).tolist()
        if len(breaks) <= MAX_RUNS:
            runs = list(zip([0, *breaks], [*breaks, len(inner)], strict=True))
    digits = set(p.digits)
    part = ok[first:stop]
    for w in at:
        want = lit = six = high = 0
        for j in range(8):
            if not 0 <= w + j < width:
                continue  # outside the pattern
            if w + j in digits:
                want |= 0x30 << (8 * j)
                six |= 0x06 << (8 * j)
                high |= 0xF0 << (8 * j)
            else:
                want |= p.text[w + j] << (8 * j)
                lit |= 0xFF << (8 * j)
        masks = np.uint64(want), np.uint64(lit), np.uint64(six), np.uint64(high)
        if runs is not None and step is not None:
            for r0, r1 in runs:
                got = as_strided(words[int(inner[r0]) + w :], shape=(r1 - r0,), strides=(step,))
                part[r0:r1] &= _word_ok(got, *masks)
        else:
            part &= _word_ok(words[inner + w], *masks)
    if edge:
        ok[edge] = _bytes_fit(buf, pos[edge], p)
    return ok


def _word_ok(got: Any, want: Any, lit: Any, six: Any, high: Any) -> Any:
    x = got ^ want
    if not high:
        return (x & lit) == 0
    return ((x & lit) | ((x | (x + six)) & high)) == 0


def _bytes_fit(buf: Any, pos: Any, p: Pattern) -> Any:
    """:func:`_fits` a byte at a time (rows at the buffer's edges)."""
    import numpy as np

    out = np.zeros(len(pos), dtype=bool)
    digits = set(p.digits)
    for i, at in enumerate(pos.tolist()):
        if 0 <= at and at + len(p) <= len(buf):
            got = bytes(buf[at : at + len(p)])
            out[i] = all(
                48 <= c <= 57 if j in digits else c == p.text[j] for j, c in enumerate(got)
            )
    return out


def _numbers(col: Any, off: Any, seg: Segment, v: ValueToken, ok: Any) -> Any:
    """The number between head and tail of each row, as ``float(text) * factor``; rows
    whose span is not a number the general parser reads are cleared in ``ok``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(col)
    if not n:
        return np.zeros(0)
    b = col.buffers()[2]
    buf = np.frombuffer(b, np.uint8) if b is not None else np.zeros(0, np.uint8)
    lo = off[:-1] + np.int32(len(seg.head)) if len(seg.head) else off[:-1]
    hi = off[1:] - np.int32(len(seg.tail)) if len(seg.tail) else off[1:]
    scale = None
    if v.magnitude and len(buf):
        last = buf[np.clip(hi - 1, 0, len(buf) - 1)]
        scale = np.asarray(_MAG_FACTOR)[last]
        hi = hi - np.asarray(_MAG_LETTER, dtype=np.int64)[last]
        ok &= hi > lo
    # Arrow reads the spans through one array whose elements alternate span / the bytes
    # up to the next span, the latter null; a row that does not fit is an empty null.
    offsets = np.empty(2 * n + 1, dtype=np.int32)
    every = bool(ok.all())
    offsets[0 : 2 * n : 2] = lo if every else np.where(ok, lo, off[:-1])
    offsets[1 : 2 * n : 2] = hi if every else np.where(ok, hi, off[:-1])
    offsets[2 * n] = offsets[2 * n - 1]

    def spans(kind: Any, valid: Any) -> Any:
        if valid.all():
            mask = np.full((2 * n + 7) // 8, 0x55, dtype=np.uint8)  # bits 0, 2, 4 ...
        else:
            bits = np.zeros(2 * n, dtype=bool)
            bits[0::2] = valid
            mask = np.packbits(bits, bitorder="little")
        return pa.Array.from_buffers(
            kind, 2 * n, [pa.py_buffer(mask), pa.py_buffer(offsets), col.buffers()[2]]
        )

    def syntax(valid: Any, regex: str) -> Any:
        got = pc.match_substring_regex(spans(pa.binary(), valid), f"^(?:{regex})$")
        return got.fill_null(False).to_numpy(zero_copy_only=False)[0::2]

    number = _FINITE_RE2 if v.finite or v.magnitude else _NUM_RE2
    try:
        got = pc.cast(spans(pa.string(), ok), pa.float64())
    except pa.ArrowInvalid:  # a span that is no number: find those, cast the others
        ok &= syntax(ok, number)
        got = pc.cast(spans(pa.string(), ok), pa.float64())
    vals = np.frombuffer(got.buffers()[1], np.float64, 2 * n, 8 * got.offset)[0::2]
    finite = np.isfinite(vals)
    if not finite.all():  # Arrow reads `Infinity`, `Nan`, `infK`...: keep the parser's
        odd = ok & ~finite
        ok &= ~odd | syntax(odd, number)
    if scale is not None:
        return vals * scale
    if v.factor != 1.0:
        return vals * v.factor
    return vals  # a strided view of Arrow's result
