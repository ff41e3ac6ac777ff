"""The Hugging Face Trainer's console output cut into segments at every ``\\r`` and
``\\n``, each told by its bytes (see :func:`cut_segments`), for
:mod:`~dflash_diag.logs.fast.console`.

What a segment is, as the regexes say it: :data:`SEGMENT` (blank, a bare tqdm bar, a
dict line, a bar with a dict line glued to it) and :data:`ESCAPED_BLANK` (spaces and
cursor moves).  Most segments are told without them (a byte test over all at once);
the regexes read the bars, and the few segments the byte tests cannot tell.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

_NOT = "\r\n\u2022"  # (no segment the console path reads holds a rich bar's bullet)
#: tqdm's bar with no postfix, spaces before it (``pre``: what comes before its count).
BARE_BAR = (
    rf"^(?P<pre> *\d{{1,3}}%\|[^|{_NOT}]*\| *)(?P<n>\d{{1,15}})/(?P<total>\d{{1,15}}) *"
    rf"\[[^\],{_NOT}]*(?:,[^\],{_NOT}]*)?\]"
)
#: A segment the console path reads, with its ``\\r`` or ``\\n``: spaces only, a bare bar,
#: a dict line (``{'``, no ``%|``, ``}``; its ``\\n`` is checked apart), or a bare bar
#: with a dict line glued to it (a stdout lump written right after a redraw).
DICT_LINE = rf"\{{'(?:[^%{_NOT}]|%[^|{_NOT}])*\}}"
SEGMENT = rf"^(?: *|{BARE_BAR[1:]}(?:{DICT_LINE})?|{DICT_LINE})[\r\n]?$"

#: Spaces and cursor moves (``\\x1b[A``: tqdm's nested bars): blank once the line
#: parser has taken the codes off, but no clear (the raw text has no ``\\r`` after the
#: spaces).
ESCAPED_BLANK = "^(?: |\x1b\\[[0-9;]*[A-Za-z])*[\r\n]?$"

OTHER, BLANK, BAR, DICT, BAR_DICT, ESCAPED = 0, 1, 2, 3, 4, 5


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's garbage collector paused while the log is read, and numpy's huge pages
    asked for, then both as they were.

    No cycles are made here, and a collection walks every object of pandas.  The
    command line turns numpy's ``madvise(MADV_HUGEPAGE)`` off for the whole process
    (``NUMPY_MADVISE_HUGEPAGE=0``, for the replays' large arrays): here the segments'
    masks and positions, a few bytes a segment, are many fresh arrays of megabytes,
    each of which would then cost a page fault every 4 KB (docs/performance.md has the
    figures).  Arrow keeps its own pool (mimalloc), which serves the path's many
    short-lived buffers (bar chunks, the CSV reader's blocks) from memory it already
    holds: the C heap, tried instead, took fresh pages for them."""
    import gc

    collecting = gc.isenabled()
    gc.disable()
    huge = _madvise_hugepage(True)
    try:
        yield
    finally:
        _madvise_hugepage(huge)
        if collecting:
            gc.enable()


def _madvise_hugepage(enabled: bool) -> bool:
    """Set whether numpy asks for huge pages for its large arrays (numpy's own switch,
    which ``NUMPY_MADVISE_HUGEPAGE`` sets at import); returns what it was.  A numpy
    without the switch is left as it is (and ``enabled`` returned)."""
    import numpy as np

    core = getattr(np, "_core", None) or getattr(np, "core", None)  # (numpy 2, numpy 1)
    switch = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    return enabled if switch is None else bool(switch(enabled))


@dataclass
class Segments:
    """The log cut into segments (see :func:`cut_segments`), one entry per segment but
    where said.  Positions are int32 for a log under 2 GiB, else int64.

    :param kinds: int8, ``OTHER``, ``BLANK``, ``BAR``, ``DICT``, ``BAR_DICT`` or
        ``ESCAPED``.
    :param term: uint8, the terminator byte (13, 10, or 0 at the end of the log).
    :param line_of: the segment's line (from 0).
    :param offsets: where each segment starts (and the last ends), ``n + 1``.
    :param strings: the segments as one Arrow string array over the log's bytes, each
        with its terminator.
    :param bars: the segments that are bars (``BAR``, ``BAR_DICT``), ascending, and
        per bar its ``n`` and ``total`` of ``n/total`` (int64).
    :param newlines: the byte positions of the log's ``\\n``.
    :param odd: the segments holding a control byte (a tab, an escape), ascending.
    :param first: uint8, the segment's first byte.
    :param end_byte: uint8, its last byte before the terminator (0 when it has none).
    :param by_bytes: whether the ``DICT`` segments were told by their bytes only (see
        :func:`cut_segments`), not yet by :data:`SEGMENT`.
    """

    kinds: Any
    term: Any
    line_of: Any
    offsets: Any
    strings: Any
    bars: tuple[Any, Any, Any]
    newlines: Any
    odd: Any
    first: Any
    end_byte: Any
    by_bytes: bool = True

    def retell_dicts(self) -> None:
        """Tell the ``DICT`` segments by :data:`SEGMENT` (one holds a ``%``)."""
        import numpy as np

        rows = np.flatnonzero(self.kinds == DICT)
        tell_by_regex(self.strings, rows, self.first, self.end_byte, self.kinds)
        self.by_bytes = False


#: Bytes scanned at once for control bytes (bounds the temporaries, which then stay in
#: the allocator's cache instead of being mapped and faulted in afresh).
SCAN_CHUNK = 1 << 20
#: Bars read by RE2 at once (their copy bounded likewise).
BAR_CHUNK = 1 << 16


def _controls(buf: Any, dtype: Any) -> tuple[Any, Any]:
    """The positions of the bytes below 32 (``\\r``, ``\\n``, tabs, escapes), chunk by
    chunk, as ``dtype``; and per such byte the four bytes from the one before it, as a
    little-endian 32-bit word (the byte before it lowest, then the byte itself, the two
    after it; 0 past either end of the log), read while the chunk is in the cache (read
    afterwards from all over the log, they cost several times more)."""
    import numpy as np

    size = len(buf)
    padded = buf if size >= 4 else np.r_[buf, np.zeros(4 - size, np.uint8)]
    words = np.ndarray((len(padded) - 3,), "<u4", buffer=padded, strides=(1,))
    out = np.empty(min(size, SCAN_CHUNK), dtype=bool)
    found: list[list[Any]] = [[np.zeros(0, dtype)], [np.zeros(0, np.uint32)]]
    for lo in range(0, size, SCAN_CHUNK):
        hi = min(lo + SCAN_CHUNK, size)
        below = out[: hi - lo]
        np.less(buf[lo:hi], 32, out=below)
        at = np.flatnonzero(below)
        at += lo
        found[0].append(at.astype(dtype))
        at -= 1
        np.clip(at, 0, len(words) - 1, out=at)  # (the log's first bytes and last: below)
        found[1].append(words[at])
    low, around = (np.concatenate(parts) for parts in found)
    for i in np.flatnonzero((low < 1) | (low > size - 3)).tolist():  # (a word clipped)
        pos = int(low[i])
        near = [int(buf[j]) if 0 <= j < size else 0 for j in range(pos - 1, pos + 3)]
        around[i] = sum(b << (8 * k) for k, b in enumerate(near))
    return low, around


def _byte(around: Any, k: int) -> Any:
    """Byte ``k`` (0: the one before) of :func:`_controls`' words, as uint8."""
    import numpy as np

    return (around >> np.uint32(8 * k)).astype(np.uint8)


def _edge_bytes(
    buf: Any, sep_around: Any, starts: Any, ends: Any, term: Any
) -> tuple[Any, Any, Any, Any]:
    """Per segment its first byte, its last before its terminator (0 when it has
    none), whether it has any, and its second byte (0 past the log's end), from the
    bytes around the separators (``sep_around``: :func:`_controls`' words): a segment
    starts right after the separator before it and its content ends right before its
    own."""
    import numpy as np

    n = len(starts)
    first = np.empty(n, np.uint8)
    first[0] = buf[0]
    first[1:] = _byte(sep_around[: n - 1], 2)
    second = np.empty(n, np.uint8)
    second[0] = buf[1] if len(buf) > 1 else 0
    second[1:] = _byte(sep_around[: n - 1], 3)
    has_content = (ends - starts) > (term > 0)
    end_byte = np.zeros(n, np.uint8)
    end_byte[: len(sep_around)] = _byte(sep_around[:n], 0)
    if n > len(sep_around):  # (a last segment without a terminator: not empty)
        end_byte[-1] = buf[-1]
    end_byte[~has_content] = 0
    return first, end_byte, has_content, second


def cut_segments(data: Any) -> Segments | None:
    """The log cut at every ``\\r`` and ``\\n`` (a last piece without one counts),
    each segment's kind told as :data:`SEGMENT` and :data:`ESCAPED_BLANK` tell it, and
    the bars' counts; None when the bytes are not UTF-8.

    Most segments are told by their bytes, without a regex: blank when Arrow's
    ``ascii_is_space`` holds (spaces only: no control byte but the terminator), a dict
    line when it starts with ``{'`` and ends with ``}`` (and no ``%`` nor bullet is in
    any: else :data:`SEGMENT` tells each); only the segments ending in ``]`` go through
    RE2 (:data:`BARE_BAR`, which also gives the counts).  A segment holding a control
    byte (a tab, an escape) or a dict glued to a bar is told by the regexes."""
    import numpy as np
    import pyarrow as pa

    buf = np.frombuffer(data, np.uint8)
    small = len(buf) < 2**31 - 1
    ix = np.int32 if small else np.int64
    low, around = _controls(buf, ix)
    low_byte = _byte(around, 1)
    is_sep = (low_byte == 13) | (low_byte == 10)
    sep = low[is_sep]
    sep_byte = low_byte[is_sep]
    offsets: Any = np.empty(len(sep) + 2, dtype=ix)
    offsets[0], offsets[1:-1], offsets[-1] = 0, sep, len(buf)
    offsets[1:-1] += 1
    if offsets[-1] == offsets[-2]:
        offsets = offsets[:-1]  # (the log ends in a separator: no empty last segment)
    n = len(offsets) - 1
    strings = pa.Array.from_buffers(
        pa.utf8() if small else pa.large_utf8(),
        n,
        [None, pa.py_buffer(offsets), pa.py_buffer(buf)],
    )
    try:  # (the log as one string: cut at ASCII bytes, it is UTF-8 where each piece is)
        pa.Array.from_buffers(
            strings.type, 1, [None, pa.py_buffer(offsets[[0, -1]]), pa.py_buffer(buf)]
        ).validate(full=True)
    except pa.ArrowInvalid:
        return None
    starts, ends = offsets[:-1], offsets[1:]
    term = np.zeros(n, dtype=np.uint8)  # (segment i ends at separator i; a last one at 0)
    term[: len(sep)] = sep_byte
    line_of = np.zeros(n, dtype=ix)
    np.cumsum(term[:-1] == 10, out=line_of[1:])
    first, end_byte, has_content, second = _edge_bytes(buf, around[is_sep], starts, ends, term)
    kinds = _kinds_by_bytes(buf, strings, starts, ends, (first, second, end_byte, has_content))
    bars = _BarCounts()
    digit_or_space = ((first >= ord("0")) & (first <= ord("9"))) | (first == ord(" "))
    rows = np.flatnonzero(digit_or_space & (end_byte == ord("]")))
    bars.read(strings, rows, BARE_BAR + "[\r\n]?$", BAR, kinds)
    rows = np.flatnonzero(digit_or_space & (end_byte == ord("}")))
    bars.read(strings, rows, BARE_BAR + DICT_LINE + "[\r\n]?$", BAR_DICT, kinds)
    odd = np.unique(np.searchsorted(offsets, low[~is_sep], side="right") - 1)
    if len(odd):
        bars.drop(odd)
        tell_by_regex(strings, odd, first, end_byte, kinds)
        bars.read(strings, odd[kinds[odd] == BAR], BARE_BAR, BAR, kinds)
        bars.read(strings, odd[kinds[odd] == BAR_DICT], BARE_BAR, BAR_DICT, kinds)
    newlines = sep[sep_byte == 10]
    return Segments(
        kinds, term, line_of, offsets, strings, bars.done(), newlines, odd, first, end_byte
    )


def _kinds_by_bytes(
    buf: Any, strings: Any, starts: Any, ends: Any, edges: tuple[Any, Any, Any, Any]
) -> Any:
    """Per segment its kind as far as its bytes tell it (``BLANK``: only whitespace,
    Arrow's ``ascii_is_space``, its terminator included; ``DICT``: ``{'`` first, ``}``
    last; else ``OTHER``), from its first byte and its last before the terminator
    (``edges``: :func:`_edge_bytes`'s first, second and last bytes, and whether it has
    content).  Whitespace but the terminator is a control byte, but for
    the space: so only a segment of the terminator alone, or one with a space first
    and last, is asked ``ascii_is_space`` (those with a control byte are told again by
    the caller)."""
    import numpy as np

    first, second, end_byte, has_content = edges
    kinds = np.full(len(starts), OTHER, dtype=np.int8)
    kinds[~has_content] = BLANK
    spaced = np.flatnonzero(has_content & (first == ord(" ")) & (end_byte == ord(" ")))
    content_end = ends[spaced] - 1  # (its terminator, or its last space at the log's end)
    content_end += buf[content_end] == ord(" ")
    kinds[spaced[_only_spaces(buf, strings.type, starts[spaced], content_end)]] = BLANK
    kinds[(first == ord("{")) & (second == ord("'")) & (end_byte == ord("}"))] = DICT
    return kinds


def _only_spaces(buf: Any, kind: Any, lo: Any, hi: Any) -> Any:
    """Whether each ``buf[lo:hi]`` (ascending, apart) is whitespace, by Arrow's
    ``ascii_is_space`` over one string array of them and the bytes between them (no
    copy)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if not len(lo):
        return np.zeros(0, dtype=bool)
    bounds = np.empty((len(lo), 2), lo.dtype)
    bounds[:, 0], bounds[:, 1] = lo, hi
    pieces = pa.Array.from_buffers(
        kind, bounds.size - 1, [None, pa.py_buffer(bounds), pa.py_buffer(buf)]
    )
    return pc.ascii_is_space(pieces).to_numpy(zero_copy_only=False)[0::2]


class _BarCounts:
    """The bars found, segment by segment: their rows, counts and totals, gathered in
    pieces and put in row order at the end."""

    def __init__(self) -> None:
        self.rows: list[Any] = []
        self.counts: list[Any] = []
        self.totals: list[Any] = []

    def read(self, strings: Any, rows: Any, pattern: str, kind: int, kinds: Any) -> None:
        """Segments ``rows`` that match ``pattern`` (:data:`BARE_BAR` and what follows
        it) made ``kind``, their counts and totals kept; the others made ``OTHER``."""
        import numpy as np
        import pyarrow as pa

        for lo in range(0, len(rows), BAR_CHUNK):  # (small copies, reused memory)
            part = rows[lo : lo + BAR_CHUNK]
            ok, counts, totals = read_bars(strings.take(pa.array(part)), pattern)
            kinds[part] = np.where(ok, kind, OTHER)
            self.rows.append(part[ok])
            self.counts.append(counts)
            self.totals.append(totals)

    def drop(self, rows: Any) -> None:
        """Forget what was read of segments ``rows`` (to be read again)."""
        import numpy as np

        for k, have in enumerate(self.rows):
            keep = ~np.isin(have, rows)
            self.rows[k], self.counts[k] = have[keep], self.counts[k][keep]
            self.totals[k] = self.totals[k][keep]

    def done(self) -> tuple[Any, Any, Any]:
        """Rows (ascending), counts and totals of every bar read."""
        import numpy as np

        rows = np.concatenate([np.zeros(0, np.int64), *self.rows])
        counts = np.concatenate([np.zeros(0, np.int64), *self.counts])
        totals = np.concatenate([np.zeros(0, np.int64), *self.totals])
        if (rows[1:] > rows[:-1]).all():  # (read in order already: the bare bars alone)
            return rows, counts, totals
        order = np.argsort(rows, kind="stable")
        return rows[order], counts[order], totals[order]


def read_bars(bars: Any, pattern: str) -> tuple[Any, Any, Any]:
    """Which of the strings ``bars`` match ``pattern`` (:data:`BARE_BAR`, then what
    follows it), and the ``n`` and ``total`` of those that do (int64).

    Each distinct shape is read once by RE2: a bar's shape is its text with every
    ASCII digit made ``0`` (:func:`digits_as_zeros`), and a tqdm bar's draws share a
    few shapes.  ``pattern`` tells digits from other bytes only by ``\\d`` (ASCII
    digits), so it matches a bar exactly when it matches the bar's shape, and its
    groups (``pre``, ``n``, ``total``) span the same bytes in both: the counts are read
    from the bar's own digits there, by Arrow's cast to int64."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    at = offsets_of(bars)
    raw = text_bytes(bars)
    starts = at - at[0]
    shapes = pa.Array.from_buffers(
        bars.type, len(bars), [None, pa.py_buffer(starts), pa.py_buffer(digits_as_zeros(raw))]
    )
    encoded = pc.dictionary_encode(shapes)
    which = encoded.indices.to_numpy(zero_copy_only=False)
    got = pc.extract_regex(encoded.dictionary, pattern)
    ok = got.is_valid().to_numpy(zero_copy_only=False)[which]
    pre, n, total = (
        pc.binary_length(got.field(g)).fill_null(0).to_numpy(zero_copy_only=False)
        for g in ("pre", "n", "total")
    )
    which = which[ok]
    if not len(which):
        return ok, np.zeros(0, np.int64), np.zeros(0, np.int64)
    cut = np.empty((len(which), 4), starts.dtype)  # (per bar: n's first byte and end, total's)
    cut[:, 0] = starts[:-1][ok] + pre[which]
    cut[:, 1] = cut[:, 0] + n[which]
    cut[:, 2] = cut[:, 1] + 1  # (the "/")
    cut[:, 3] = cut[:, 2] + total[which]
    numbers = pa.Array.from_buffers(bars.type, cut.size - 1, [None, pa.py_buffer(cut), raw])
    both = pc.cast(numbers.take(pa.array(np.arange(0, cut.size, 2))), pa.int64())
    both = both.to_numpy(zero_copy_only=False)
    return ok, both[0::2], both[1::2]


def digits_as_zeros(raw: Any) -> Any:
    """A copy of the bytes ``raw`` with every ASCII digit made ``0`` (numpy uint8), in
    three passes over bytes: ``d = b - 0x30`` (wrapping below 0), so exactly the digits
    have ``d < 10``; ``d`` kept there and made 0 elsewhere; ``b - d`` is then ``0x30``
    for a digit and ``b`` for any other byte."""
    import numpy as np

    src = np.frombuffer(raw, np.uint8)
    d = np.subtract(src, np.uint8(0x30))
    d *= d < 10
    return np.subtract(src, d, out=d)


def offsets_of(text: Any) -> Any:
    """An Arrow string array's offsets (numpy, ``len + 1``)."""
    import numpy as np
    import pyarrow as pa

    wide = pa.types.is_large_string(text.type) or pa.types.is_large_binary(text.type)
    dtype = np.int64 if wide else np.int32
    return np.frombuffer(text.buffers()[1], dtype, len(text) + 1, text.offset * (8 if wide else 4))


def text_bytes(text: Any) -> Any:
    """The bytes of an Arrow string array's elements, one after another (an Arrow
    buffer, not copied)."""
    at = offsets_of(text)
    return text.buffers()[2].slice(int(at[0]), int(at[-1] - at[0]))


def tell_by_regex(strings: Any, rows: Any, first: Any, end_byte: Any, kinds: Any) -> None:
    """The kinds of segments ``rows`` as the regexes tell them: one holding an escape is
    ``ESCAPED`` when :data:`ESCAPED_BLANK` matches it, else ``OTHER``; the others by
    :data:`SEGMENT`, then their first and last bytes."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if not len(rows):
        return
    some = strings.take(pa.array(rows))
    ok = pc.match_substring_regex(some, SEGMENT).to_numpy(zero_copy_only=False)
    escaped = pc.match_substring(some, "\x1b").to_numpy(zero_copy_only=False)
    ok &= ~escaped
    escaped &= pc.match_substring_regex(some, ESCAPED_BLANK).to_numpy(zero_copy_only=False)
    f, e = first[rows], end_byte[rows]
    kinds[rows] = np.select(
        [escaped, ~ok, f == ord("{"), e == ord("]"), e == ord("}")],
        [ESCAPED, OTHER, DICT, BAR, BAR_DICT],
        BLANK,
    )
