"""The Hugging Face Trainer's console output (dict lines among tqdm redraws), read
vectorised.

The line parser reads such a log in ~50 us a line: each ``\\r``-separated tqdm redraw
and clear goes through the bar regex and the bar bookkeeping, each dict line through
the dict regex and the field rules, and :func:`~dflash_diag.logs.bars.write_steps`
scans the whole text once more in Python for the ``tqdm.write`` clears that date the
dicts.  Here the log is cut at every ``\\r`` and ``\\n`` into segments (one Arrow
string array over the log's bytes, found by one pass of numpy for the bytes below 32)
and each is told by its bytes, RE2 reading only the bars:

- blank: spaces only (a clear of ``tqdm.write`` when ``\\r`` is on both sides):
  Arrow's ``ascii_is_space``, and no control byte but its terminator;
- a bare tqdm bar: ``  5%|▌         | 10/200 [00:00<00:03, 53.95it/s]``, spaces at most
  before it, at most two ``,``-parts in its brackets (no postfix: the line parser makes
  no record of it, it only counts it as ``progress_bar``): :data:`~.segments.BARE_BAR`, which
  also captures the counts;
- a dict line (``{'loss': ...}``), last on its line, the line ending right after it:
  ``{'`` first, ``}`` last, and no ``%`` nor bullet in it (where one is, :data:`~.segments.SEGMENT`
  tells the dict segments, as it tells those holding a control byte).

A line made only of those (and at least one ``\\r``, or a dict line alone) is this
module's: its dict is read by Arrow (cut at its quotes by the CSV reader,
:func:`~.quoted.quoted_columns`, when every key and value is quoted, as a Trainer
prints them; else as JSON, :func:`~.jsonlines.json_records`, as
:func:`~.jsonlines.dict_line_records` does) and dated by the write order; every other
line goes to the line parser.  The clears and bars of the whole log, in byte order,
make the write steps as :func:`~dflash_diag.logs.bars.write_steps` makes them: the
training bar is the total most often drawn right after a clear (ties: the first seen),
and a draw of it is a write's step when a clear came since its previous draw.

Where that could differ from the line parser, None is returned and the line parser
reads the log: a bar with a postfix or a rich progress bar anywhere, a ``{`` on a line
left to the line parser (its dicts would interleave with this module's in the write
order), no clear before any bar, RichHandler layout, an OSC escape, bytes that are not
UTF-8, or a dict Arrow does not read as the dict regex would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..grammar import continues, is_rich_bytes, logical_lines
from ..io import strip_ansi
from . import jsonlines, quoted
from .segments import (
    BAR,
    BAR_DICT,
    BLANK,
    DICT,
    ESCAPED,
    Segments,
    collector_paused,
    cut_segments,
    offsets_of,
    text_bytes,
)


@dataclass
class Console:
    """What :func:`console_records` read.

    :param frame: the dict lines' raw records (``line`` in the log), dated.
    :param skipped: lines and bars skipped by reason (``progress_bar``, ``summary``..).
    :param others: ``(line number, text)`` of the lines left to the line parser, ANSI
        codes taken off.
    :param quiet: line numbers (ascending) of this module's lines that hold no dict:
        bars and clears only, which leave the line parser's state as it was.
    :param n_lines: the log's lines (a last line without a newline counts).
    """

    frame: Any
    skipped: dict[str, int]
    others: list[tuple[int, str]]
    quiet: Any
    n_lines: int


def console_records(data: Any) -> Console | None:
    """The HF Trainer's console log read vectorised (see the module docstring), or
    None when the line parser must read it.  ``data``: bytes or a read-only mmap."""
    if (
        len(data) < jsonlines.MIN_BYTES
        or data.find(b"\r") < 0
        or data.find(b"%|") < 0
        or is_rich_bytes(data)
    ):
        return None
    with collector_paused():
        seg = cut_segments(data)
        # (an escape is a control byte: only a log with such segments can hold an OSC)
        if seg is None or (len(seg.odd) and data.find(b"\x1b]") >= 0):
            return None
        try:
            return _console(data, seg)
        except _Retell:
            seg.retell_dicts()
            return _console(data, seg)


def _console(data: Any, seg: Segments) -> Console | None:
    """:func:`console_records` once the log is cut into segments."""
    import numpy as np

    kinds, line_of = seg.kinds, seg.line_of
    mine = _my_lines(kinds, seg.term, line_of, data[-1:] == b"\n")
    in_mine = mine[line_of]
    is_dict = ((kinds == DICT) | (kinds == BAR_DICT)) & in_mine
    if not is_dict.any():
        return None
    others = _other_lines(data, mine, seg.newlines)
    if others is None:
        return None
    other_pairs, other_tokens = others
    writes = write_steps_of(*_tokens(seg, in_mine, other_tokens))
    if writes is None:
        return None
    dict_lines = line_of[is_dict] + 1
    got = _dicts(data, seg, is_dict, dict_lines)
    if got is None:
        return None
    frame, skipped, nth = got
    _date(frame, nth, len(dict_lines), writes, skipped)
    bars = int((((kinds == BAR) | (kinds == BAR_DICT)) & in_mine).sum())
    if bars:
        skipped["progress_bar"] = skipped.get("progress_bar", 0) + bars
    has_dict = np.zeros(len(mine), dtype=bool)
    has_dict[dict_lines - 1] = True
    quiet = np.flatnonzero(mine & ~has_dict) + 1
    return Console(frame, skipped, other_pairs, quiet, len(mine))


def _my_lines(kinds: Any, term: Any, line_of: Any, ends_cleanly: bool) -> Any:
    """Per line, whether it is this module's: blanks and bare bars with a ``\\r``
    among them, a dict only as the line's last segment (or the line's one segment);
    never an unterminated last line.  (A line's segments are consecutive: each line is
    read at once by ``reduceat`` from its first segment, the one after a ``\\n``.)"""
    import numpy as np

    ok = (kinds == BLANK) | (kinds == BAR) | (kinds == ESCAPED)
    ok |= ((kinds == DICT) | (kinds == BAR_DICT)) & (term == 10)
    first = np.flatnonzero(term[:-1] == 10)
    first += 1
    first = np.r_[0, first]
    bad = np.logical_or.reduceat(~ok, first)
    cr = np.logical_or.reduceat(term == 13, first)
    lone_dict = kinds[first] == DICT  # (a line of one segment: its first is its only)
    lone_dict &= np.diff(np.r_[first, len(kinds)]) == 1
    mine = ~bad & (cr | lone_dict)
    if not ends_cleanly:
        mine[-1] = False
    return mine


def _other_lines(
    data: Any, mine: Any, ends: Any
) -> tuple[list[tuple[int, str]], tuple[list[int], list[int], list[int]]] | None:
    """The line parser's lines, ANSI codes off and joined into records as
    :func:`~dflash_diag.logs.grammar.logical_lines` joins them, and their clears and bars
    as tokens (byte position, count or -1 for a clear, total), found by the regex of
    :func:`~dflash_diag.logs.bars.write_steps` line by line; None when a line holds a
    ``{`` or a bar with a postfix, a ``%|`` that is not a whole bar on its line, or a
    record would join one of this module's lines with another."""
    import numpy as np

    starts = np.concatenate([[0], ends + 1])

    def text_of(i: int) -> str | None:
        hi = int(ends[i]) if i < len(ends) else len(data)
        try:
            return bytes(data[int(starts[i]) : hi]).decode("utf-8")
        except UnicodeDecodeError:
            return None

    tokens: tuple[list[int], list[int], list[int]] = ([], [], [])
    parts: list[str] = []  # the other lines, a "" for each run of this module's lines
    numbers: list[int] = []  # their line numbers (0 for a "")
    n_lines = len(mine)
    for i in np.flatnonzero(~mine).tolist():
        text = text_of(i)
        if text is None or "{" in text or "\u2022" in text:
            return None
        if not _line_tokens(text, int(starts[i]), tokens):
            return None
        if i > 0 and mine[i - 1] and not _apart(text_of(i - 1), text):
            return None
        if i + 1 < n_lines and mine[i + 1] and not _apart(text, text_of(i + 1)):
            return None
        if i > 0 and mine[i - 1]:
            parts.append("")
            numbers.append(0)
        parts.append(strip_ansi(text))
        numbers.append(i + 1)
    if not _mine_apart(data, mine, starts, ends, text_of):
        return None
    joined = logical_lines("\n".join(parts) + "\n") if parts else iter(())
    pairs = [(numbers[k - 1], line) for k, line in joined if numbers[k - 1]]
    return pairs, tokens


def _line_tokens(text: str, at: int, out: tuple[list[int], list[int], list[int]]) -> bool:
    """The clears and bars of one line starting at byte ``at``, appended to ``out``;
    False for a bar with a postfix (the line parser's bar bookkeeping makes records of
    it) or a ``%|`` that is not a whole bar on the line (a match of the whole text
    could run on past the line's end)."""
    from ..bars import CLEAR_OR_BAR

    pos, counts, totals = out
    found = 0
    for m in CLEAR_OR_BAR.finditer(text):
        pos.append(at + len(text[: m.start()].encode()))
        if m.group("n") is None:
            counts.append(-1)
            totals.append(-1)
            continue
        found += 1
        if len(m.group("info").split(",")) > 2:
            return False
        counts.append(int(m.group("n")))
        totals.append(int(m.group("total")))
    return found == text.count("%|")


def _apart(head: str | None, line: str | None) -> bool:
    """Whether ``line`` starts a record of its own after the one-line record ``head``
    (:func:`~dflash_diag.logs.grammar.continues` says no)."""
    if head is None or line is None:
        return False
    head, line = strip_ansi(head).removesuffix("\r"), strip_ansi(line).removesuffix("\r")
    if not (line[:1] in " \t)]}" or line[-1:] == " "):
        return True  # (the line joiner's own first test: no continuation)
    return not continues(head, line, head)


def _mine_apart(data: Any, mine: Any, starts: Any, ends: Any, text_of: Any) -> bool:
    """Whether each of this module's lines right after another of them starts a record
    of its own.  Only a line that starts with a space, a tab or a closing bracket, or
    ends with a space (its last ``\r`` off), can continue one (the line joiner's own
    first test); those few are asked :func:`_apart`."""
    import numpy as np

    buf = np.frombuffer(data, np.uint8)
    ends_at = np.r_[ends, len(buf)][: len(mine)]
    lo, hi = starts[: len(mine)], ends_at
    wide = hi > lo
    first = buf[np.minimum(lo, len(buf) - 1)]
    last_at = hi - 1 - (buf[np.maximum(hi - 1, 0)] == 13)
    last = buf[np.clip(last_at, 0, len(buf) - 1)]
    maybe = wide & (np.isin(first, list(b" \t)]}")) | ((last == 32) & (last_at >= lo)))
    follows = np.r_[False, mine[:-1]] & mine & maybe
    return all(_apart(text_of(i - 1), text_of(i)) for i in np.flatnonzero(follows).tolist())


def _tokens(
    seg: Segments, in_mine: Any, other: tuple[list[int], list[int], list[int]]
) -> tuple[Any, Any, Any]:
    """Every clear and bar of the log in byte order: position, count (-1: a clear),
    total.  A clear is a blank segment of spaces with ``\\r`` on both sides.  (A
    segment holds one token at most, so this module's are in order already; the few of
    the other lines are put in among them.)"""
    import numpy as np

    kinds, term = seg.kinds, seg.term
    clear = (kinds == BLANK) & (term == 13)
    clear[1:] &= term[:-1] == 13  # (a \\r before it)
    clear[0] = False
    clear &= np.diff(seg.offsets) > 1  # (spaces between the two)
    clear &= in_mine
    bar = (kinds == BAR) | (kinds == BAR_DICT)
    bar &= in_mine
    index = np.flatnonzero(clear | bar)
    is_bar = bar[index]
    rows, counts, totals = seg.bars
    count = np.full(len(index), -1, dtype=np.int64)
    total = np.full(len(index), -1, dtype=np.int64)
    if len(rows) == int(is_bar.sum()):  # (every bar is on this module's lines)
        count[is_bar], total[is_bar] = counts, totals
    else:
        at = np.searchsorted(rows, index[is_bar])
        count[is_bar], total[is_bar] = counts[at], totals[at]
    # (a clear from its \\r, a bar from its first byte)
    pos = seg.offsets[index].astype(np.int64) - 1 + is_bar
    if not other[0]:
        return pos, count, total
    at = np.searchsorted(pos, np.asarray(other[0], np.int64))
    return (
        np.insert(pos, at, np.asarray(other[0], np.int64)),
        np.insert(count, at, np.asarray(other[1], np.int64)),
        np.insert(total, at, np.asarray(other[2], np.int64)),
    )


def write_steps_of(pos: Any, count: Any, total: Any) -> Any:
    """:func:`~dflash_diag.logs.bars.write_steps` over tokens in order (``count`` -1:
    a clear), as an int64 array; None when no bar is drawn right after a clear."""
    import numpy as np

    is_clear = count < 0
    after = np.r_[False, is_clear[:-1]] & ~is_clear
    if not after.any():
        return None
    drawn = total[after]
    if (drawn == drawn[0]).all():  # (one bar drawn after the clears: a Trainer's)
        training = drawn[0]
    else:
        seen, first, times = np.unique(drawn, return_index=True, return_counts=True)
        training = seen[np.lexsort((first, -times))[0]]  # most drawn; then the first seen
    train = np.flatnonzero(~is_clear & (total == training))
    clears_before = np.cumsum(is_clear)[train]  # (a bar is no clear: those before it)
    # (a draw is a write's step when a clear came since the training bar's last draw)
    return count[train[clears_before > np.r_[0, clears_before[:-1]]]]


class _Retell(Exception):
    """A dict line taken by its bytes holds a ``%`` or a bullet: :data:`~.segments.SEGMENT` must
    tell each (:func:`console_records` reads the log again after)."""


def _dicts(
    log: Any, seg: Segments, is_dict: Any, lines_of: Any
) -> tuple[Any, dict[str, int], Any] | None:
    """The dict lines (each with its newline; a dict glued to a bar without the bar)
    read by Arrow, ``line`` their line in the log, and which dict line each record is
    (from 0); None where the dict regex could read otherwise.  Dicts of quoted strings
    are cut at their quotes (:func:`~.quoted.quoted_columns`; what the dict lines must
    not hold is looked for in their cells' distinct strings), others read as JSON once
    every ``'`` is a ``"``.

    :raises _Retell: a dict line holds a ``%`` or a bullet and the dict lines were told
        by their bytes."""
    import numpy as np

    rows = np.flatnonzero(is_dict)
    got = None
    if not np.isin(rows, seg.odd).any():  # (no tab, no escape: as JSON would read them)
        lines = _DictLines(seg, rows)
        cut = quoted.quoted_columns(lines, lines.first())
        if cut is not None and '"' in cut.cells:  # (all but the fixed bytes are cells)
            return None
        if cut is not None and seg.by_bytes and ("%" in cut.cells or "\u2022" in cut.cells):
            raise _Retell
        if cut is not None and not any(w in cut.cells for w in _NOT_QUOTED):
            got = jsonlines.column_records(cut.columns, cut.n_lines, dicts=True)
            if got is None:
                return None
    if got is None:
        if log.find(b'"') >= 0 and _QUOTE.search(memoryview(_dict_bytes(seg, rows))):
            return None
        view = memoryview(_dict_bytes(seg, rows))
        if seg.by_bytes and (_PERCENT.search(view) or _BULLET.search(view)):
            raise _Retell
        got = jsonlines.json_records(bytes(view).replace(b"'", b'"'), dicts=True)
    if got is None:
        return None
    frame, skipped = got
    nth = frame["line"].to_numpy() - 1
    frame["line"] = lines_of[nth]
    return frame, skipped, nth


class _DictLines:
    """The dict lines of segments ``rows`` as a file (``read``), taken from the log a
    block at a time: whole lines, as many as fit in the bytes asked for (a copy of
    them all at once would cost memory touched for the first time, which is what
    costs)."""

    closed = False

    def __init__(self, seg: Segments, rows: Any) -> None:
        import numpy as np

        self.seg, self.rows, self.next = seg, rows, 0
        sizes = (seg.offsets[rows + 1] - seg.offsets[rows]).astype(np.int64)
        self.ends = np.cumsum(sizes)  # (bytes up to each line's end, bars included)

    def first(self) -> str:
        """The first dict line, without its newline."""
        text = bytes(_dict_bytes(self.seg, self.rows[:1]))
        return text.decode("utf-8").removesuffix("\n")

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> Any:
        """Whole lines, at most ``size`` bytes of them but at least one line (all that
        is left when ``size`` is negative); nothing at the end."""
        import numpy as np

        if self.next >= len(self.rows):
            return b""
        done = int(self.ends[self.next - 1]) if self.next else 0
        upto = len(self.rows)
        if size is not None and size >= 0:
            upto = int(np.searchsorted(self.ends, done + size, side="right"))
        upto = max(upto, self.next + 1)
        part = self.rows[self.next : upto]
        self.next = upto
        return _dict_bytes(self.seg, part)

    def close(self) -> None:
        self.closed = True


def _dict_bytes(seg: Segments, rows: Any) -> Any:
    """The dict lines of segments ``rows``, one after another, a bar a dict is glued to
    taken off (bytes, or an Arrow buffer)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    kept = seg.strings.take(pa.array(rows))
    glued = seg.kinds[rows] == BAR_DICT
    if not glued.any():
        return text_bytes(kept)
    data = text_bytes(kept).to_pybytes()  # (a few glued, one a stdout lump: bars off)
    at = offsets_of(kept)
    which = np.flatnonzero(glued)
    starts = at[which] - at[0]
    bar_ends = pc.find_substring(kept.take(pa.array(which)), "]").to_numpy() + 1
    pieces, lo = [], 0
    for start, n in zip(starts.tolist(), bar_ends.tolist(), strict=True):
        pieces.append(data[lo:start])
        lo = start + n
    return b"".join([*pieces, data[lo:]])


#: What no cell of a dict line read cut at its quotes may hold: an escape (JSON reads it
#: otherwise), warning text (the line parser skips such a line).
_NOT_QUOTED = ("\\", "Warning:", "warnings.warn(")
#: What the dict lines are searched for (in Arrow's buffer: ``re`` reads any buffer).
_QUOTE = re.compile(b'"')
_PERCENT = re.compile(b"%")
_BULLET = re.compile("\u2022".encode())


def _date(frame: Any, nth: Any, n_dicts: int, writes: Any, skipped: dict[str, int]) -> None:
    """Steps of the records without a step field: the ``k``-th dict line (``nth``: each
    record's ``k``, from 0) was written at the ``k``-th write
    (:func:`~dflash_diag.logs.lines.read_records`'s rule: a log with more dicts than
    writes dates none of them, and counts them ``undated_dict``)."""
    import numpy as np
    import pandas as pd

    undated = (frame["step_source"] == "none").to_numpy()
    if "step" not in frame:
        frame["step"] = np.nan
    source = np.where(undated, 0, 1).astype(np.int8)  # none, field, progress
    if n_dicts <= len(writes):
        step = frame["step"].to_numpy(dtype=np.float64, copy=True)
        step[undated] = writes[nth[undated]]
        frame["step"] = step
        source[undated] = 2
    elif undated.any():
        skipped["undated_dict"] = skipped.get("undated_dict", 0) + int(undated.sum())
    frame["step_source"] = pd.Categorical.from_codes(source, ["none", "field", "progress"])
