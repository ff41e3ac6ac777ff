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
3. each column is checked against its segment (:mod:`~dflash_diag.logs.columns`): its
   fixed bytes by Arrow's ``starts_with``/``ends_with`` (memcmp) and, where the template
   has digits that vary, by 64-bit word tests; the number between head and tail is cast
   to float64 by Arrow (one cast per column, through a zero-copy array of the number
   spans), and a magnitude letter (``25.1K``) is read from the span's last byte (a rank
   prefix's number, ``[rank3]:``, is a ``rank`` value of digits only);
4. a line fits when every column fits and every number parses; the cast is checked
   against the general parser's number syntax (an unparsable span, or a ``nan``/``inf``
   Arrow reads but the parser would not, sends the line to the general parser).

Costs on a 1M-line, 150 MB log, in CPU time: the CSV tokenizer about 0.19 s plus
0.03 s to join its 1 MiB blocks into one array per column (larger blocks, or one block
per range, came out slower), the casts 0.12 s, the checks and numpy bookkeeping about
0.15 s, and the kernel's zeroing of fresh pages for all of these about 0.05 s.  With
two threads the whole ``read_log`` takes 0.29-0.33 s, 3.4-4.0x ``pandas.read_csv`` on the
same metrics written as CSV (``benchmarks/bench_parse.py``); most of the gap is the
tokenizer and the casts, which read_csv does in one C pass over a third of the bytes.
The bytes are not checked for UTF-8 up front: a fitting line is the template's bytes
and ASCII numbers, and a line that is not UTF-8 fails the CSV reader's decoding (a line
of another shape) or :func:`_texts` (a misfit), and the general parser reads the log.

Every line that does not fit goes through the general parser, so the result is the
same table the general parser gives (the test suite checks this on every fixture and on
randomly mutated logs).  Used only for logs of at least :data:`FAST_MIN_LINES` lines,
valid UTF-8, without ANSI codes, bare carriage returns or RichHandler layout.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .columns import read_numbers, segment_fits
from .template import Segment, Template, sample_lines, sample_template, split_template

#: Logs shorter than this take the general path (its per-line cost does not matter).
FAST_MIN_LINES = 2_000
#: Fewer lines than this fit the template: not worth it, the general parser reads all.
MIN_MATCHES = 500
#: Templates read by the fast path at most (the dominant one, then one among the lines
#: it left, and so on).
MAX_TEMPLATES = 4
#: The log is read in byte ranges of about this size, by up to 4 threads (progress is
#: reported after each range).
PART_BYTES = 1 << 24


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
    depth: int = 0,
) -> tuple[list[Any], list[tuple[int, str]]] | None:
    """Records of the lines that fit the log's dominant template, or None.

    Works on the bytes (``bytes`` or a read-only ``mmap``): the text is never decoded
    into one Python string, and no Python object is made per fitting line.  When enough
    of the other lines share a template of their own (a trainer that prints a timing
    line beside its metrics line), those are read the same way, up to
    :data:`MAX_TEMPLATES` templates (``depth``: how many came before).

    :returns: ``(frames, rest)``: a DataFrame of raw records per template (``line``,
        ``rank``, ``step_source``, ``is_eval``, value columns) and the ``(line number,
        text)`` of every line they do not cover, in order (so the log has as many lines
        as the frames have rows, plus ``len(rest)``).  None when the fast path does not
        apply.
    """
    if len(data) < 10 * FAST_MIN_LINES or _rich(data):
        return None
    sample = sample_lines(data)
    if not sample or len(data) * len(sample) < FAST_MIN_LINES * sum(len(x) + 1 for x in sample):
        return None  # fewer lines than that, going by the sample's mean length
    template = sample_template(sample)
    if template is None or template.n_tokens < 2:
        return None
    try:
        got = _apply(data, template, progress)
    except Exception:  # noqa: BLE001 - any surprise (bad UTF-8...): the general parser reads all
        return None
    if got is None:
        return None
    frame, rest = got
    return _more_templates(data, [frame], rest, depth)


def _more_templates(
    data: Any, frames: list[Any], rest: list[tuple[int, str]], depth: int
) -> tuple[list[Any], list[tuple[int, str]]]:
    """``(frames, rest)`` with the lines of ``rest`` that share a template of their own
    read by the fast path too: they are written out one per line and read again, and
    their line numbers mapped back.  The log's last line stays in ``rest`` when it has
    no newline (the general parser judges whether it was cut short).

    ``rest`` is emptied as it is written out (a million Python strings of the other
    shapes hold more memory than the whole table), and rebuilt from what is written
    when no template is found.
    """
    import numpy as np

    if depth + 1 >= MAX_TEMPLATES or len(rest) < FAST_MIN_LINES:
        return frames, rest
    last = sum(len(f) for f in frames) + len(rest)  # the log's last line number
    cut = rest[-1:] if data[-1:] != b"\n" and rest[-1][0] == last else []
    if cut:
        rest.pop()
    if not rest:
        return frames, cut
    numbers = np.array([no for no, _ in rest])
    joined = "\n".join(text for _, text in rest) + "\n"
    rest.clear()
    again = joined.encode()
    del joined
    got = fast_records(again, {}, None, depth + 1)
    if got is None:
        texts = again.decode().split("\n")[:-1]
        return frames, [*zip(numbers.tolist(), texts, strict=True), *cut]
    more, left = got
    for f in more:
        f["line"] = numbers[f["line"].to_numpy() - 1]
    return frames + more, [(int(numbers[i - 1]), text) for i, text in left] + cut


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
    line0: int = 0  # lines of the log before this range (by :func:`_read_parts`)
    fits: Any = None  # per row: it fits the template (by :func:`_read_part`)
    every: bool = False  # every row fits (by :func:`_read_part`)
    values: Any = None  # per value: float64 per row, a view (by :func:`_read_part`)

    @property
    def n_lines(self) -> int:
        return len(self.row_line) + len(self.odd)

    @property
    def n_fit(self) -> int:
        return len(self.row_line) if self.every else int(self.fits.sum())

    def fitting(self, per_row: Any) -> Any:
        """The items of ``per_row`` (one per row) of the rows that fit."""
        return per_row if self.every else per_row[self.fits]


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
    """The template's records in ``data`` and the ``(line number, text)`` of the lines
    that do not fit (for the general parser), or None when the fast path declines."""
    split = split_template(template)
    if split is None:
        return None
    delimiter, segments = split
    try:
        got = _read_parts(data, template, delimiter, segments, progress)
    except _NotFast:
        return None
    if got is None:
        return None
    parts, values, lines = got
    rest = _other_lines(data, parts, delimiter)
    if any("\x1b" in text for _, text in rest):
        return None  # ANSI codes (no fitting line has one): the general reader strips them
    return _frame(template, values, lines), rest


def _read_parts(
    data: Any,
    template: Template,
    delimiter: bytes,
    segments: tuple[Segment, ...],
    progress: Callable[[int, int], None] | None,
) -> tuple[list[_Part], Any, Any] | None:
    """Read every byte range in a worker thread (split into rows by pyarrow's CSV reader,
    then each column checked and cast: long Arrow and numpy calls, which release the
    GIL), then join the ranges' numbers into one block, a row per value, and the line
    numbers of the fitting lines (threads again).

    :returns: ``(parts, values, lines)``, or None when too few lines fit.
    :raises _NotFast: a range has what the fast path does not reproduce.
    """
    import os
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

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
    # (the hook stays set until every thread has stopped)
    with _quiet_decode_errors():
        pool = ThreadPoolExecutor(workers)
        try:
            done = 0
            for (_, hi), part in zip(ranges, pool.map(read, ranges), strict=True):
                parts.append(part)
                done += part.n_lines
                if progress is not None:  # lines so far, of a total guessed from the bytes
                    progress(done, max(done, round(done * len(data) / hi)))
            n_lines = sum(p.n_lines for p in parts)
            n_fit = sum(p.n_fit for p in parts)
            if n_lines < FAST_MIN_LINES or n_fit < MIN_MATCHES:
                return None
            # one row per value: transposed, it is the layout of a DataFrame's float block
            values = np.empty((len(template.values), n_fit), dtype=np.float64)
            lines = np.empty(n_fit, dtype=np.int64)

            def join(j: int) -> None:
                if j < len(values):
                    np.concatenate([p.fitting(p.values[j]) for p in parts], out=values[j])
                    return
                at = 0
                for p in parts:
                    got = p.fitting(p.row_line)
                    np.add(got, p.line0, out=lines[at : at + len(got)])
                    at += len(got)

            for p, before in zip(parts[1:], parts, strict=False):
                p.line0 = before.line0 + before.n_lines
            list(pool.map(join, range(len(values) + 1)))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # after a failure, skip the rest
    return parts, values, lines


def _other_lines(data: Any, parts: list[_Part], delimiter: bytes) -> list[tuple[int, str]]:
    """``(line number, text)`` of every line that does not fit, in order: those of
    another shape and the rows that did not fit the template."""
    import numpy as np

    rest: list[tuple[int, str]] = []
    for p in parts:
        misfits = np.flatnonzero(~p.fits)
        odd = p.odd + _texts(p, misfits, delimiter, data) if len(misfits) else p.odd
        rest += [(no + p.line0, text) for no, text in sorted(odd)]
    return rest


def _frame(template: Template, values: Any, lines: Any) -> Any:
    """The records of the fitting lines: a DataFrame of ``line``, the values, and the
    bookkeeping columns the general parser's records carry."""
    import numpy as np
    import pandas as pd

    n = len(lines)
    columns: dict[str, Any] = {"line": lines}
    columns.update(zip((v.name for v in template.values), values, strict=True))
    if "rank" not in columns:  # a `rank=3` field varies by line; a prefix does not match others
        columns["rank"] = np.full(n, template.rank, dtype=np.int64)
    # (categorical: build_table compares it to "field" over every row)
    columns["step_source"] = pd.Categorical.from_codes(np.zeros(n, np.int8), ["field"])
    columns["is_eval"] = np.full(n, template.is_eval)
    columns["attach"] = np.zeros(n, dtype=bool)
    # one block per column, none copied (a 2-D block would be copied to insert into)
    frame = pd.DataFrame(columns, copy=False)
    return frame


@contextmanager
def _quiet_decode_errors() -> Iterator[None]:
    """Keep one report off stderr while the fast path runs: pyarrow decodes a line of
    another shape to text before the invalid-row handler sees it, and a line that is
    not UTF-8 raises there, inside Arrow, which reports it as "Exception ignored" and
    fails the read (:func:`_split_part` then declines the log; the general parser
    counts and replaces the bad bytes).  Every other unraisable exception goes to the
    hook that was set before (the hook is process-wide)."""
    previous = sys.unraisablehook

    def hook(report: Any) -> None:
        ours = getattr(report.object, "__qualname__", "").endswith("other_shape")
        if not (ours and isinstance(report.exc_value, UnicodeDecodeError)):
            previous(report)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        if sys.unraisablehook is hook:
            sys.unraisablehook = previous


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
    odd: list[tuple[int, str]] = []

    def other_shape(row: Any) -> str:
        odd.append((row.number, row.text))
        return "skip"

    names = [f"s{i}" for i in range(n_columns)]

    def read(block: int) -> Any:
        odd.clear()
        return pcsv.read_csv(
            raw,
            read_options=pcsv.ReadOptions(column_names=names, use_threads=False, block_size=block),
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

    try:
        table = read(1 << 20)  # blocks of 1 MiB parse faster than larger ones (cache)
    except pa.ArrowInvalid:  # a line longer than a block (a config dump): one block
        whole = np.array([0, hi - lo], dtype=np.int64)
        text = pa.Array.from_buffers(pa.large_string(), 1, [None, pa.py_buffer(whole), raw])
        try:
            text.validate(full=True)
        except pa.ArrowInvalid:  # (a line of another shape could not be decoded)
            raise _NotFast("not UTF-8") from None
        table = read(hi - lo + 1)
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
        ok, off = segment_fits(col, seg)
        if seg.value is not None:
            raw[seg.value] = read_numbers(col, off, seg, template.values[seg.value], ok)
        fits &= ok
    if part.cut_last and n and part.row_line[-1] == part.n_lines:
        fits[-1] = False  # the log's last line, unterminated: it may be cut short
    part.fits, part.every = fits, bool(fits.all())
    part.values = [raw[j] for j in range(len(template.values))]
    if part.every:
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
        try:
            out.append((no, line.decode("utf-8")))
        except UnicodeDecodeError:
            raise _NotFast("not UTF-8") from None
    return out
