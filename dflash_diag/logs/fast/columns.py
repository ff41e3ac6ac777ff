"""Checking one column of the fast path's split rows against its template segment, and
reading its numbers (:mod:`~dflash_diag.logs.fast.lineshape`).

A column holds, per row, the bytes between two delimiters of a line
(:class:`~dflash_diag.logs.fast.template.Segment`): a fixed head, then (for a value) the
number and a fixed tail.  :func:`segment_fits` tests the fixed bytes of every row at once
(Arrow's ``starts_with``/``ends_with`` for literal runs at an end of the row, 64-bit word
tests for digit positions and what lies between); :func:`read_numbers` reads the spans
between head and tail as float64: by word arithmetic when the fitting rows share one
layout (:mod:`~dflash_diag.logs.fast.layout`), else with one Arrow cast, held to the general
parser's number syntax.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from ..names import LOGGED_NAN, MAGNITUDE
from . import layout
from .layout import mismatch, word_masks
from .template import Pattern, Segment, ValueToken

#: A column of equal-length rows is read through strided views, one per run of such
#: rows, when the other rows break it into at most this many runs.
MAX_RUNS = 64

_FINITE_RE2 = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_NUM_RE2 = rf"(?:{_FINITE_RE2}|[-+]?(?:nan|NaN|NAN|inf|Inf|INF))"


@cache
def _magnitude_tables() -> tuple[Any, Any]:
    """By last byte of a magnitude span: its factor (1.0 for a digit), and 1 where it
    is a letter (int32, the offsets' type)."""
    import numpy as np

    factor, letter = np.ones(256), np.zeros(256, dtype=np.int32)
    for k, f in MAGNITUDE.items():
        factor[ord(k)], letter[ord(k)] = f, 1
    return factor, letter


def segment_fits(col: Any, seg: Segment) -> tuple[Any, Any]:
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
    # rows of one length lie at a fixed stride: words are read through views (runs of
    # such rows; a column of many lengths falls back to gathers)
    step = len(head) if exact else int(lengths[0])
    if len(head):
        ok &= _fits(col, buf, off[:-1], 0, head, at_start=True, at_end=exact, step=step)
    if len(tail):
        ok &= _fits(col, buf, off[1:], -len(tail), tail, at_start=False, at_end=True, step=step)
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
        ok = _bools(pc.starts_with(col, p.text[:first].decode()))
        a = first
    if at_end and b > a and width - last >= min(4, width - a):
        tail = p.text[max(last, a) :].decode()
        got = _bools(pc.ends_with(col, tail))
        ok = got if ok is None else ok & got
        b = max(last, a)
    if a < b:
        pos = base + np.int32(shift + a) if shift + a else base
        got = _words_fit(buf, pos, _sub(p, a, b), at_end=at_end and b == width, step=step)
        ok = got if ok is None else ok & got
    return ok


def _bools(got: Any) -> Any:
    """An Arrow boolean result as numpy bools (null as False), unpacking its bits."""
    import numpy as np

    if got.null_count:
        return got.fill_null(False).to_numpy(zero_copy_only=False)
    bits = np.frombuffer(got.buffers()[1], np.uint8)
    return np.unpackbits(bits, count=got.offset + len(got), bitorder="little")[got.offset :].view(
        bool
    )


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
    ``x + 6`` has a high nibble there.  So a word fits when ``(x | (x + six)) & mask``
    is 0 (``six``: 6 at digits; ``mask``: 0xFF at literal bytes, 0xF0 at digits).  A
    carry out of a byte of ``x + six`` needs that byte of ``x`` to be at least 250, a
    miss already, so it never hides one.  Words are gathered by row, or, where rows lie
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
    bad = np.zeros(len(inner), dtype=np.uint64)  # per row: its mismatch bits, all words
    tmp = np.empty((2, len(inner)), dtype=np.uint64)  # (the checks' temporaries)
    for w in at:
        masks = word_masks(p, w)
        if runs is not None and step is not None:
            for r0, r1 in runs:
                got = as_strided(words[int(inner[r0]) + w :], shape=(r1 - r0,), strides=(step,))
                mismatch(got, *masks, out=bad[r0:r1], tmp=tmp[:, r0:r1])
        else:
            mismatch(words[inner + w], *masks, out=bad, tmp=tmp)
    ok[first:stop] = bad == 0
    if edge:
        ok[edge] = _bytes_fit(buf, pos[edge], p)
    return ok


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


def read_numbers(col: Any, off: Any, seg: Segment, v: ValueToken, ok: Any) -> Any:
    """The number between head and tail of each row, as ``float(text) * factor``; rows
    whose span is not a number the general parser reads are cleared in ``ok``.

    A column whose fitting rows all have one length is first tried by
    :func:`~dflash_diag.logs.fast.layout.read_layout` (the same doubles, by word arithmetic);
    else, or when such a row has another layout, Arrow casts the spans."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(col)
    if not n:
        return np.zeros(0)
    b = col.buffers()[2]
    buf = np.frombuffer(b, np.uint8) if b is not None else np.zeros(0, np.uint8)
    if not v.padded:
        fixed = _one_layout(buf, off, seg, ok, v.magnitude, v.digits)
        if fixed is not None:
            return fixed * v.factor if v.factor != 1.0 else fixed
    lo = off[:-1] + np.int32(len(seg.head)) if len(seg.head) else off[:-1]
    hi = off[1:] - np.int32(len(seg.tail)) if len(seg.tail) else off[1:]
    scale = None
    if v.magnitude and len(buf):
        factor, letter = _magnitude_tables()
        last = buf[hi - 1]  # (an empty row reads the byte before it: it does not fit anyway)
        scale = factor[last]
        hi = hi - letter[last]
        ok &= hi > lo
    # Arrow reads the spans through one array whose elements alternate span / the bytes
    # up to the next span, the latter null; a row that does not fit is an empty null.
    offsets = np.empty(2 * n + 1, dtype=np.int32)

    def span_offsets() -> None:
        every = bool(ok.all())
        offsets[0 : 2 * n : 2] = lo if every else np.where(ok, lo, off[:-1])
        offsets[1 : 2 * n : 2] = hi if every else np.where(ok, hi, off[:-1])
        offsets[2 * n] = offsets[2 * n - 1]

    span_offsets()

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

    if v.padded:  # the number starts after the padding: the span without its spaces
        trimmed = pc.ascii_ltrim(spans(pa.string(), ok), characters=" ")
        kept = pc.binary_length(trimmed).to_numpy(zero_copy_only=False)[0::2]
        lo = np.where(ok, hi - np.nan_to_num(kept).astype(np.int32), lo)
        ok &= hi > lo
        span_offsets()
    number = "[0-9]+" if v.digits else _FINITE_RE2 if v.finite or v.magnitude else _NUM_RE2
    if v.digits:  # (a rank prefix: short spans, and Arrow reads `+3` and `3.`)
        ok &= syntax(ok, number)
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
    with np.errstate(over="ignore"):  # (1e308K is inf, as float() * 1e3 makes it)
        if scale is not None:
            vals = vals * scale
        elif v.factor != 1.0:
            vals = vals * v.factor
    if not finite.all():  # a printed nan is a logged one (names.LOGGED_NAN)
        vals = np.where(np.isnan(vals), LOGGED_NAN, vals)
    return vals  # (in the common case a strided view of Arrow's result)


def _one_layout(buf: Any, off: Any, seg: Segment, ok: Any, magnitude: bool, integer: bool) -> Any:
    """:func:`~dflash_diag.logs.fast.layout.read_layout` on a column whose rows that fit
    (``ok``) all have one length: runs of such rows lie at a fixed stride (rows that do
    not fit, of another length, break them into at most :data:`MAX_RUNS`); else None.
    ``magnitude``: the first fitting row's last byte, when a magnitude letter, is every
    row's and scales the number (``25.1K``); ``integer``: digits only (a rank prefix)."""
    import numpy as np

    if not ok.any():
        return None
    lengths = off[1:] - off[:-1]
    i0 = int(np.argmax(ok))  # the first row that fits: its layout is the column's
    row = int(lengths[i0])
    same = lengths == row
    bounds = [0, len(same)]
    if not same.all():
        if (ok & ~same).any():
            return None
        bounds = [0, *(np.flatnonzero(same[1:] != same[:-1]) + 1).tolist(), len(same)]
    spans = [(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if same[a]]
    if len(spans) > MAX_RUNS:
        return None
    head = len(seg.head)
    runs = [(a, b, int(off[a]) + head) for a, b in spans]
    width = row - head - len(seg.tail)
    at = int(off[i0]) + head
    letter = chr(buf[at + width - 1]) if magnitude and width > 0 else ""
    suffix = int(letter in MAGNITUDE)
    got = layout.read_layout(buf, runs, row, len(same), width, ok, suffix, at, integer)
    return got * MAGNITUDE[letter] if suffix and got is not None else got
