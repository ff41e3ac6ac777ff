"""The vectorised fast path for large free-text logs whose lines share one shape.

A trainer prints the same line template millions of times.  Parsing each line with the
general regex parser costs microseconds per line; here the template is learned once
(:mod:`~dflash_diag.logs.fast.template`) and applied to the raw bytes by pyarrow's C++ CSV
tokenizer and compute kernels, without a Python object per line:

1. the template is cut at one delimiter byte into segments holding at most one number
   each (``=`` for ``key=value`` lines: ``... | INFO | dflash.train | epoch`` /
   ``0 step`` / ``254/3000 loss`` / ``4.8123 acc`` ...);
2. the log is cut into byte ranges of whole lines (:data:`PART_BYTES`), read by a few
   threads (Arrow releases the GIL); each range is split into rows and columns at that
   byte by ``pyarrow.csv`` (:mod:`~dflash_diag.logs.fast.rows`: lines with another number of
   delimiters are handed back by the reader's invalid-row handler or, when the sample
   shows many, set aside by counting delimiters first);
3. each column is checked against its segment (:mod:`~dflash_diag.logs.fast.columns`): its
   fixed bytes by Arrow's ``starts_with``/``ends_with`` (memcmp) and, where the template
   has digits that vary, by 64-bit word tests; the number between head and tail is read
   by word arithmetic when the column's fitting rows share one layout
   (:mod:`~dflash_diag.logs.fast.layout`: ``{loss:.4f}`` over a range of the log, exact to
   the bit), else cast to float64 by Arrow (one cast per column, through a zero-copy
   array of the number spans), and a magnitude letter (``25.1K``) is read from the
   span's last byte (a rank prefix's number, ``[rank3]:``, is a ``rank`` value of
   digits only);
4. a line fits when every column fits and every number parses; a cast is checked
   against the general parser's number syntax (an unparsable span, or a ``nan``/``inf``
   Arrow reads but the parser would not, sends the line to the general parser);
5. the lines left over (:class:`~dflash_diag.logs.fast.leftover.Leftover`, one Arrow array)
   are read the same way when enough of them share a template of their own, up to
   :data:`MAX_TEMPLATES` templates, and the rest go to the general parser.

Costs on a 1M-line, 150 MB log: the CSV tokenizer and its copies of the columns take
about half the CPU (larger blocks, or one block per range, came out slower); the
numbers, the checks and the numpy bookkeeping most of the rest.  With two threads the
whole ``read_log`` takes about 2.9x ``pandas.read_csv`` on the same metrics written as
CSV, and the CSV split with the numbers alone about 2.1x (``benchmarks/bench_parse.py``,
``--floor``; figures in the README).
The bytes are not checked for UTF-8 up front: a fitting line is the template's bytes
and ASCII numbers, and a line that is not UTF-8 fails the CSV reader's decoding (a line
of another shape), :func:`~dflash_diag.logs.fast.rows.misfit_texts` (a misfit) or
:meth:`~dflash_diag.logs.fast.leftover.Leftover.pairs` (a line no template reads), and the
general parser reads the log.

Every line that does not fit goes through the general parser, so the result is the
same table the general parser gives (the test suite checks this on every fixture and on
randomly mutated logs).  Used only for logs of at least :data:`FAST_MIN_LINES` lines,
valid UTF-8, without bare carriage returns or RichHandler layout; ANSI colour codes are
stripped from the bytes first (:func:`~dflash_diag.logs.io.strip_ansi_bytes`) when the
log has them.
"""

from __future__ import annotations

from typing import Any

from ...data import Progress
from ..grammar import is_rich_bytes
from ..io import strip_ansi_bytes
from .columns import read_numbers, segment_fits
from .leftover import Leftover, NotUtf8
from .rows import (
    NotFast,
    Part,
    by_count_share,
    misfit_texts,
    quiet_decode_errors,
    split_part,
)
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
#: Above this share of sampled lines with another number of delimiters than the
#: template's, ranges are split by delimiter count before the CSV reader (two byte scans,
#: about 1 ms per MB, against about 3 us per line of another shape without them;
#: :mod:`~dflash_diag.logs.fast.rows`).
BY_COUNT_SHARE = 0.05


def fast_records(
    data: Any,
    skipped: dict[str, int],
    progress: Progress | None = None,
) -> tuple[list[Any], list[tuple[int, str]]] | None:
    """Records of the lines that fit the log's dominant template, or None.

    Works on the bytes (``bytes`` or a read-only ``mmap``): the text is never decoded
    into one Python string, and no Python object is made per fitting line.  When enough
    of the other lines share a template of their own (a trainer that prints a timing
    line beside its metrics line), those are read the same way, up to
    :data:`MAX_TEMPLATES` templates.

    :returns: ``(frames, rest)``: a DataFrame of raw records per template (``line``,
        ``rank``, ``step_source``, ``is_eval``, value columns) and the ``(line number,
        text)`` of every line they do not cover, in order (so the log has as many lines
        as the frames have rows, plus ``len(rest)``).  None when the fast path does not
        apply.
    """
    import pyarrow as pa

    got = _records(data, progress, 0)
    if got is None and data.find(b"\x1b") >= 0:
        # colour codes (no template holds one): stripped, as the general reader strips
        # them; looked for only here, so a log without them is not scanned once more
        stripped = strip_ansi_bytes(data)
        if stripped is not None:
            got = _records(stripped, progress, 0)
    if got is None:
        return None
    frames, rest = got
    if len(frames) > 1:  # before the table of several templates' records is built
        pa.default_memory_pool().release_unused()  # (Arrow's pool keeps what was freed)
    try:
        return frames, rest.pairs()
    except NotUtf8:  # (the general parser counts and replaces the bad bytes)
        return None


def _records(data: Any, progress: Progress | None, depth: int) -> tuple[list[Any], Leftover] | None:
    """:func:`fast_records`, the lines left over as a :class:`Leftover` (``depth``:
    templates read before, by the caller)."""
    if len(data) < 10 * FAST_MIN_LINES or is_rich_bytes(data):
        return None
    sample = sample_lines(data)
    if not sample or len(data) * len(sample) < FAST_MIN_LINES * sum(len(x) + 1 for x in sample):
        return None  # fewer lines than that, going by the sample's mean length
    template = sample_template(sample)
    if template is None or template.n_tokens < 2:
        return None
    try:
        got = _apply(data, template, sample, progress)
    except Exception:  # noqa: BLE001 - any surprise (bad UTF-8...): the general parser reads all
        return None
    if got is None:
        return None
    frame, rest = got
    return _more_templates(data, [frame], rest, depth)


def _more_templates(
    data: Any, frames: list[Any], rest: Leftover, depth: int
) -> tuple[list[Any], Leftover]:
    """``(frames, rest)`` with the lines of ``rest`` that share a template of their own
    read by the fast path too: their bytes (:meth:`Leftover.data`) are read again, and
    their line numbers mapped back.  The log's last line stays in ``rest`` when it has
    no newline (the general parser judges whether it was cut short)."""
    if depth + 1 >= MAX_TEMPLATES or len(rest) < FAST_MIN_LINES:
        return frames, rest
    last = sum(len(f) for f in frames) + len(rest)  # the log's last line number
    cut = Leftover.empty()
    if data[-1:] != b"\n" and rest.numbers[-1] == last:
        rest, cut = rest.split_last()
    if not len(rest):
        return frames, cut
    import pyarrow as pa

    pa.default_memory_pool().release_unused()  # (what the first read freed: numpy's now)
    got = _records(rest.data(), None, depth + 1)
    if got is None:
        return frames, Leftover.merge([rest, cut])
    more, left = got
    for f in more:
        f["line"] = rest.numbers[f["line"].to_numpy() - 1]
    return frames + more, Leftover.merge([left.renumbered(rest.numbers), cut])


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
    sample: list[str],
    progress: Progress | None = None,
) -> tuple[Any, Leftover] | None:
    """The template's records in ``data`` and the lines that do not fit (for another
    template or the general parser), or None when the fast path declines."""
    split = split_template(template)
    if split is None:
        return None
    delimiter, segments = split
    by_count = by_count_share(sample, delimiter, len(segments)) > BY_COUNT_SHARE
    try:
        got = _read_parts(data, template, delimiter, segments, by_count, progress)
        if got is None:
            return None
        parts, values, lines = got
        rest = _other_lines(data, parts, delimiter)
        del parts, got  # (the ranges' rows, kept for the lines that did not fit)
    except NotFast:
        return None
    if rest.holds_byte(0x1B):
        return None  # ANSI codes (no fitting line has one): the general reader strips them
    return _frame(template, values, lines), rest


def _read_parts(
    data: Any,
    template: Template,
    delimiter: bytes,
    segments: tuple[Segment, ...],
    by_count: bool,
    progress: Progress | None,
) -> tuple[list[Part], Any, Any] | None:
    """Read every byte range in a worker thread (split into rows by pyarrow's CSV reader,
    then each column checked and cast: long Arrow and numpy calls, which release the
    GIL), then join the ranges' numbers into one block, a row per value, and the line
    numbers of the fitting lines (threads again).

    :returns: ``(parts, values, lines)``, or None when too few lines fit.
    :raises NotFast: a range has what the fast path does not reproduce.
    """
    import os
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    cut_end = data[-1:] != b"\n"  # the last line may be cut short: never read here
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = max(1, min(cpus or 1, 4))
    ranges = _parts(data, workers)

    def read(r: tuple[int, int]) -> Part:
        last = cut_end and r[1] == len(data)
        part = split_part(data, r[0], r[1], delimiter, len(segments), last, by_count)
        _read_part(part, segments, template)
        return part

    parts: list[Part] = []
    # (the hook stays set until every thread has stopped)
    with quiet_decode_errors():
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
            for p in parts:
                p.values = None  # (views of Arrow's cast results: twice the numbers' size)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # after a failure, skip the rest
    return parts, values, lines


def _other_lines(data: Any, parts: list[Part], delimiter: bytes) -> Leftover:
    """Every line that does not fit, in order: those of another shape and the rows that
    did not fit the template."""
    import numpy as np

    rest = []
    for p in parts:
        misfits = np.flatnonzero(~p.fits)
        odd = p.odd
        if len(misfits):
            texts = misfit_texts(p, misfits, delimiter, data)
            odd = Leftover.merge([odd, Leftover.of_pairs(texts)])
        rest.append(odd.shifted(p.line0))
    return Leftover.merge(rest)


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


def _read_part(part: Part, segments: tuple[Segment, ...], template: Template) -> None:
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
