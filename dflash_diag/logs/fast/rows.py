"""Splitting a byte range of a log into rows and columns at the template's delimiter
(the fast path's step 2, :mod:`~dflash_diag.logs.fast.lineshape`).

Two ways, both through ``pyarrow.csv`` (no quoting: every delimiter byte cuts):

- **by the CSV reader alone**, for a log of one line shape with a few others (banners,
  warnings): a line with another number of delimiters is handed back, with its line
  number and text, by the reader's invalid-row handler, a Python call per such line
  (about 3 us);
- **by delimiter count first**, for a log of several line shapes (a trainer printing a
  timing line beside each metrics line): numpy finds the range's newlines and delimiter
  bytes, ``searchsorted`` counts the delimiters per line, and Arrow's ``filter`` writes
  the lines with the template's count into one buffer for the CSV reader and the others
  into a :class:`~dflash_diag.logs.fast.leftover.Leftover`, without a Python object per
  line.  It costs two byte scans of the range (about 1 ms per MB), so the fast path
  chooses it when its sample shows enough lines of other counts
  (:data:`~dflash_diag.logs.fast.lineshape.BY_COUNT_SHARE`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .leftover import Leftover


class NotFast(Exception):
    """The log has something the fast path does not reproduce: the general parser reads all."""


@dataclass
class Part:
    """One byte range of the log split into rows."""

    lo: int
    hi: int
    table: Any  # pyarrow Table, one binary column per segment
    row_line: Any  # line number (from 1, in the range) of each row
    odd: Leftover  # the range's lines of other shapes (numbers in the range)
    cut_last: bool  # the range's last line is the log's unterminated last line
    line0: int = 0  # lines of the log before this range (by the fast path)
    fits: Any = None  # per row: it fits the template (by the fast path)
    every: bool = False  # every row fits (by the fast path)
    values: Any = None  # per value: float64 per row, a view (by the fast path)

    @property
    def n_lines(self) -> int:
        return len(self.row_line) + len(self.odd)

    @property
    def n_fit(self) -> int:
        return len(self.row_line) if self.every else int(self.fits.sum())

    def fitting(self, per_row: Any) -> Any:
        """The items of ``per_row`` (one per row) of the rows that fit."""
        return per_row if self.every else per_row[self.fits]


def by_count_share(sample: list[str], delimiter: bytes, n_columns: int) -> float:
    """The share of sample lines whose number of delimiters is not the template's."""
    d = delimiter.decode()
    return sum(line.count(d) != n_columns - 1 for line in sample) / max(1, len(sample))


def bare_return(data: Any, lo: int, hi: int) -> bool:
    """Whether a ``\\r`` in ``data[lo:hi]`` is anywhere but before a ``\\n`` (tqdm
    refreshes, several records a line: the general reader splits those)."""
    import numpy as np

    if data.find(b"\r", lo, hi) < 0:
        return False
    buf = np.frombuffer(data, dtype=np.uint8)
    at = np.flatnonzero(buf[lo:hi] == 13) + lo
    return bool(at[-1] + 1 == hi or (buf[at + 1] != 10).any())


@contextmanager
def quiet_decode_errors() -> Iterator[None]:
    """Keep one report off stderr while the fast path runs: pyarrow decodes a line of
    another shape to text before the invalid-row handler sees it, and a line that is
    not UTF-8 raises there, inside Arrow, which reports it as "Exception ignored" and
    fails the read (:func:`split_part` then declines the log; the general parser
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


def split_part(
    data: Any,
    lo: int,
    hi: int,
    delimiter: bytes,
    n_columns: int,
    cut_last: bool,
    by_count: bool = False,
) -> Part:
    """Split ``data[lo:hi]`` (whole lines) into rows at the delimiter; a line with another
    number of delimiters is kept aside with its line number (``by_count``: counted
    first, see the module's docstring).  Runs in a worker thread.

    :raises NotFast: a ``\\r`` inside a line, a line of another shape that is not UTF-8
        (read by the CSV reader alone), or rows the reader did not number as expected.
    """
    import numpy as np
    import pyarrow as pa

    if bare_return(data, lo, hi):
        raise NotFast("a \\r not ending a line")
    if by_count:
        raw, row_line, odd = split_by_count(data, lo, hi, delimiter, n_columns, cut_last)
        table, got = _csv_rows(raw, delimiter, n_columns)
        if got or table.num_rows != len(row_line):
            raise NotFast("the CSV reader split a line the count did not")
        return Part(lo, hi, table, row_line, odd, cut_last)
    table, pairs = _csv_rows(pa.py_buffer(memoryview(data)[lo:hi]), delimiter, n_columns)
    n_lines = table.num_rows + len(pairs)
    is_row = np.ones(n_lines + 1, dtype=bool)
    is_row[0] = False
    odd = Leftover.of_pairs(pairs)
    if len(odd):
        if odd.numbers[0] < 1 or odd.numbers[-1] > n_lines:
            raise NotFast("the CSV reader did not number its rows")
        is_row[odd.numbers] = False
    row_line = np.flatnonzero(is_row)
    if len(row_line) != table.num_rows:
        raise NotFast("rows and lines do not line up")
    return Part(lo, hi, table, row_line, odd, cut_last)


def split_by_count(
    data: Any, lo: int, hi: int, delimiter: bytes, n_columns: int, cut_last: bool
) -> tuple[Any, Any, Leftover]:
    """The lines of ``data[lo:hi]`` with ``n_columns - 1`` delimiters, written into one
    buffer; their line numbers (from 1, in the range); and the other lines.  The log's
    unterminated last line (``cut_last``) is always among the others: it may be cut
    short, and the general parser judges that.

    The delimiters of line ``i`` are those between newline ``i - 1`` and newline ``i``:
    with the sorted positions of both, ``searchsorted`` gives each line's count.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    buf = np.frombuffer(data, np.uint8, hi - lo, lo)
    lines = lines_of(buf)
    ends = np.frombuffer(lines.buffers()[1], np.int64, len(lines) + 1)[1:]
    marks = np.flatnonzero(buf == delimiter[0])
    before = np.searchsorted(marks, ends)  # delimiters before each line's end
    counts = np.diff(before, prepend=0)
    fit = counts == n_columns - 1
    if cut_last:
        fit[-1] = False
    mask = pa.array(fit)
    kept = pc.filter(lines, mask)
    kept_offsets = np.frombuffer(kept.buffers()[1], np.int64, len(kept) + 1, 8 * kept.offset)
    raw = kept.buffers()[2].slice(int(kept_offsets[0]), int(kept_offsets[-1] - kept_offsets[0]))
    other = pc.filter(lines, pc.invert(mask))
    return raw, np.flatnonzero(fit) + 1, Leftover(np.flatnonzero(~fit) + 1, other)


def lines_of(buf: Any) -> Any:
    """The lines of ``buf`` (a numpy uint8 view of whole lines) as one Arrow
    ``large_binary`` array over the same bytes, each line with its ``\\n`` (but a last
    line without one)."""
    import numpy as np
    import pyarrow as pa

    ends = np.flatnonzero(buf == 10) + 1  # where each line ends, its newline included
    if not len(ends) or ends[-1] != len(buf):
        ends = np.append(ends, len(buf))
    offsets = np.concatenate([[0], ends])
    return pa.Array.from_buffers(
        pa.large_binary(), len(ends), [None, pa.py_buffer(offsets), pa.py_buffer(buf)]
    )


def _csv_rows(raw: Any, delimiter: bytes, n_columns: int) -> tuple[Any, list[tuple[int, str]]]:
    """``raw`` split into rows (one binary column per segment) by ``pyarrow.csv``, and the
    ``(line number, text)`` of its lines with another number of delimiters."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pcsv

    names = [f"s{i}" for i in range(n_columns)]
    if raw.size == 0:
        return pa.table({n: pa.array([], pa.binary()) for n in names}), []
    odd: list[tuple[int, str]] = []

    def other_shape(row: Any) -> str:
        odd.append((row.number, row.text))
        return "skip"

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
        whole = np.array([0, raw.size], dtype=np.int64)
        text = pa.Array.from_buffers(pa.large_string(), 1, [None, pa.py_buffer(whole), raw])
        try:
            text.validate(full=True)
        except pa.ArrowInvalid:  # (a line of another shape could not be decoded)
            raise NotFast("not UTF-8") from None
        table = read(raw.size + 1)
    return table.combine_chunks(), odd  # one array per column


def misfit_texts(part: Part, rows: Any, delimiter: bytes, data: Any) -> list[tuple[int, str]]:
    """``(line number, text)`` of the given rows of a part: their columns joined again,
    but for a row of empty columns, whose line may be empty or all delimiters: that one
    is looked up in the bytes.

    :raises NotFast: a line is not UTF-8.
    """
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
            raise NotFast("not UTF-8") from None
    return out
