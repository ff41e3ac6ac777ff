"""Numbers of one fixed layout, read by 64-bit word arithmetic: the fast path's shortcut
past Arrow's float cast (:func:`~dflash_diag.logs.fast.columns.read_numbers`).

A trainer formats a metric the same way on every line (``{loss:.4f}``, ``{lr:.2e}``, an
integer step), so over a byte range of the log most columns hold numbers of one
*layout*: one length, with the digits, the point, the exponent letter and the signs at
the same places (``0.0000``, ``0.00e-00``, ``000000``).  When every fitting row of a
column has the same length, the layout is taken from the first and every row's number is read
as one or two little-endian 64-bit words, through strided views (no copy per row; rows
that do not fit the template, of another length, break the stride into runs):

- the layout check is :func:`~dflash_diag.logs.fast.layout.mismatch`: literal bytes equal,
  digit bytes ``0``-``9``;
- each run of ``k <= 8`` digits becomes its integer by the SWAR multiply-shift steps,
  on the run placed at the top of the low 2, 4 or 8 bytes:
  ``(x * 2561) >> 8`` joins digit pairs (``2561 = 10 * 2**8 + 1``), ``* 6553601 >> 16``
  pairs of pairs (``100 * 2**16 + 1``), ``* 42949672960001 >> 32`` the two halves
  (``10**4 * 2**32 + 1``);
- the value is ``M * 10**e`` or ``M / 10**-e`` in float64, with ``M`` the mantissa's
  digits as an integer (at most 15 digits: below 2**53, so exact as a double) and ``e``
  the exponent less the number of fraction digits.  For ``|e| <= 22`` both operands are
  exact doubles and IEEE 754 rounds the one operation correctly, so the result is the
  double nearest the decimal, the one Python's ``float()`` gives (Clinger's fast path:
  W. D. Clinger, "How to Read Floating Point Numbers Accurately", PLDI 1990).

A column with a fitting row of another length or layout, or an exponent beyond 22, is
left to Arrow's cast: this is a shortcut, never a second number syntax (the property
tests hold it to ``float()`` bit for bit).  ``benchmarks/bench_parse.py`` times the
whole read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from .template import Pattern

#: A layout longer than this (two words) is left to Arrow.
MAX_BYTES = 16
#: Mantissa digits at most: their integer stays below 2**53.
MAX_DIGITS = 15
#: ``|e|`` at most for the one-operation rounding to be exact (10**22 is a double).
MAX_EXPONENT = 22

_PLAIN = re.compile(rb"([-+]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([-+]?)([0-9]+))?")


@dataclass(frozen=True)
class Layout:
    """Where the parts of a number sit in its bytes (``[start, end)`` byte ranges).

    :param text: the bytes, each digit as ``0``.
    :param digits: the digit positions (any digit there).
    :param negative: a ``-`` leads.
    :param whole: the digits before the point.
    :param fraction: the digits after it.
    :param exponent: the exponent's digits, or None.
    :param exponent_negative: the exponent's sign is ``-``.
    """

    text: bytes
    digits: tuple[int, ...]
    negative: bool
    whole: tuple[int, int]
    fraction: tuple[int, int]
    exponent: tuple[int, int] | None
    exponent_negative: bool


_ZEROS = bytes.maketrans(b"123456789", b"000000000")


def layout_of(span: bytes) -> Layout | None:
    """The layout of a number's bytes, or None when they are no plain decimal number
    (``[-+]digits[.digits][e[-+]digits]``, a digit in the mantissa) of at most
    :data:`MAX_BYTES` bytes and :data:`MAX_DIGITS` mantissa digits.

    >>> layout_of(b"6.00e-04").text, layout_of(b"6.00e-04").exponent
    (b'0.00e-00', (6, 8))
    >>> layout_of(b"nan") is None, layout_of(b"1_000") is None
    (True, True)
    """
    return _layout(span.translate(_ZEROS))  # (cached by shape: a log has few)


@cache
def _layout(span: bytes) -> Layout | None:
    m = _PLAIN.fullmatch(span)
    if m is None or len(span) > MAX_BYTES:
        return None
    sign, whole, fraction, exp_sign, exp = m.groups()
    if not whole and not fraction or len(whole) + len(fraction or b"") > MAX_DIGITS:
        return None
    w0 = len(sign)
    f0 = w0 + len(whole) + 1  # (past the point; an empty range when there is none)
    f1 = f0 + len(fraction) if fraction is not None else f0
    exponent = (len(span) - len(exp), len(span)) if exp is not None else None
    digits = tuple(i for i, c in enumerate(span) if 48 <= c <= 57)
    text = bytes(48 if 48 <= c <= 57 else c for c in span)
    return Layout(text, digits, sign == b"-", (w0, w0 + len(whole)), (f0, f1), exponent,
                  exp_sign == b"-")  # fmt: skip


def read_layout(
    buf: Any,
    runs: list[tuple[int, int, int]],
    stride: int,
    n: int,
    width: int,
    ok: Any,
    suffix: int = 0,
    at: int | None = None,
    integer: bool = False,
) -> Any:
    """The numbers of ``n`` rows of ``width`` bytes laid out in ``runs`` of a fixed
    ``stride`` (``(r0, r1, first)``: rows ``r0 .. r1 - 1``, row ``i``'s bytes at
    ``buf[first + (i - r0) * stride:][:width]``), when the rows that count (``ok``) all
    have the layout of the bytes at ``at`` (default: the first run's first row) and
    exponents within :data:`MAX_EXPONENT`; else None.  A row in no run must not count.

    :param buf: numpy uint8 (the column's bytes).
    :param suffix: the last ``suffix`` bytes of the width are no part of the number but
        must be the first row's in every row (a magnitude letter, ``25.1K``).
    :param integer: only a run of digits is a number here (a rank prefix's, which the
        general parser reads only so): another layout gives None.
    :returns: float64 per row (meaningless where ``ok`` is False), or None.
    """
    import numpy as np

    if not n or not runs or not 0 < width <= MAX_BYTES:
        return None
    if any(r1 <= r0 or first + (r1 - r0 - 1) * stride + width > len(buf) for r0, r1, first in runs):
        return None
    at = runs[0][2] if at is None else at
    head = bytes(buf[at : at + width])
    layout = layout_of(head[: width - suffix])
    if layout is None or integer and len(layout.digits) != len(layout.text):
        return None
    pattern = Pattern(layout.text + head[width - suffix :], layout.digits)
    # one block for every temporary: fresh arrays of this size cost page faults
    scratch = np.empty((5, n), dtype=np.uint64)
    words = [scratch[w] for w in range(-(-width // 8))]
    for w, x in enumerate(words):
        for r0, r1, first in runs:
            _words(buf, first + 8 * w, stride, r1 - r0, x[r0:r1])
    bad = scratch[2]
    bad[:] = 0
    for w, x in enumerate(words):
        mismatch(x, *word_masks(pattern, 8 * w), bad, scratch[3:5])
    if bad.any() and (bad.astype(bool) & ok).any():
        return None
    a, b = layout.fraction
    mantissa = _digits(words, *layout.whole, out=scratch[2])
    if b > a:
        mantissa *= np.uint64(10 ** (b - a))
        mantissa += _digits(words, a, b, out=scratch[3])
    value = mantissa.astype(np.float64)
    e = -(b - a)
    if layout.exponent is None:
        if e:
            value /= 10.0**-e
    else:
        exp = _digits(words, *layout.exponent, out=scratch[3]).view(np.int64)
        e_row = (-exp if layout.exponent_negative else exp) + e
        counted = e_row if ok.all() else e_row[ok]
        lo, hi = (int(counted.min()), int(counted.max())) if len(counted) else (0, 0)
        if max(-lo, hi) > MAX_EXPONENT:
            return None
        if lo == hi:  # (one exponent: a warm learning rate, a fixed scale)
            if lo < 0:
                value /= 10.0**-lo
            else:
                value *= 10.0**lo
        else:
            powers = 10.0 ** np.arange(MAX_EXPONENT + 1)
            scale = powers[np.minimum(np.abs(e_row), MAX_EXPONENT)]
            value = np.where(e_row < 0, value / scale, value * scale)
    if layout.negative:
        np.negative(value, out=value)
    return value


def _words(buf: Any, first: int, stride: int, n: int, out: Any) -> Any:
    """The 8 bytes from ``buf[first + i * stride]`` of each row ``i`` as uint64, into
    ``out`` (bytes past the buffer's end read as 0)."""
    from numpy.lib.stride_tricks import as_strided

    inside = max(0, min(n, (len(buf) - 8 - first) // stride + 1)) if len(buf) >= 8 else 0
    if inside:
        view = as_strided(buf[first:], shape=(inside, 8), strides=(stride, 1))
        out[:inside] = view.view("<u8")[:, 0]
    for i in range(inside, n):  # (the last few rows: their word runs past the end)
        at = first + i * stride
        out[i] = int.from_bytes(bytes(buf[at : at + 8]), "little")
    return out


def _digits(words: list[Any], a: int, b: int, out: Any) -> Any:
    """The integer of the digit bytes ``[a, b)`` of each row (0 for no digits), by the
    SWAR steps of the module docstring, 8 digits at a time; into ``out`` (uint64)."""
    import numpy as np

    if a >= b:
        out[:] = 0
        return out
    if b - a > 8:  # (the leading digits, then the last 8)
        _digits(words, a, b - 8, out)
        out *= np.uint64(10**8)
        out += _digits(words, b - 8, b, np.empty_like(out))
        return out
    k = b - a
    w, s = divmod(a, 8)
    x = np.right_shift(words[w], np.uint64(8 * s), out=out)
    if s and w + 1 < len(words):  # (the run continues in the next word)
        x |= words[w + 1] << np.uint64(64 - 8 * s)
    size = 2 if k <= 2 else 4 if k <= 4 else 8  # bytes the run is placed at the top of
    x <<= np.uint64(8 * (size - k))
    keep = 0x0F0F0F0F0F0F0F0F & ((1 << (8 * size)) - 1)
    x &= np.uint64(keep)
    x *= np.uint64(2561)
    x >>= np.uint64(8)
    if size >= 4:
        x &= np.uint64(0x00FF00FF00FF00FF)
        x *= np.uint64(6553601)
        x >>= np.uint64(16)
    if size == 8:
        x &= np.uint64(0x0000FFFF0000FFFF)
        x *= np.uint64(42949672960001)
        x >>= np.uint64(32)
    x &= np.uint64({2: 0xFF, 4: 0xFFFF, 8: 0xFFFFFFFF}[size])
    return x


def word_masks(p: Pattern, w: int) -> tuple[Any, Any, Any]:
    """``(want, six, mask)`` of the word test (:func:`mismatch`) for the 8 bytes of
    ``p`` from byte ``w`` (a little-endian word; bytes outside the pattern are not
    tested): the pattern's literal bytes must be equal, its digit positions hold an
    ASCII digit."""
    import numpy as np

    want = six = mask = 0
    for j in range(8):
        if not 0 <= w + j < len(p):
            continue  # outside the pattern
        if w + j in p.digits:
            want |= 0x30 << (8 * j)
            six |= 0x06 << (8 * j)
            mask |= 0xF0 << (8 * j)
        else:
            want |= p.text[w + j] << (8 * j)
            mask |= 0xFF << (8 * j)
    return np.uint64(want), np.uint64(six), np.uint64(mask)


def mismatch(got: Any, want: Any, six: Any, mask: Any, out: Any, tmp: Any = None) -> None:
    """OR into ``out`` the bits where words ``got`` miss the pattern of
    :func:`word_masks` (``(got ^ want) | ((got ^ want) + six)``, masked: a digit
    position's ``0x3N`` with N <= 9 leaves no bit); in place, in the two uint64 arrays
    ``tmp`` (of ``out``'s length) when given: fresh temporaries of this size cost page
    faults."""
    import numpy as np

    x = np.bitwise_xor(got, want, out=None if tmp is None else tmp[0])
    if six:
        y = np.add(x, six, out=None if tmp is None else tmp[1])
        x |= y
    x &= mask
    out |= x
