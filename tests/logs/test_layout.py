"""Numbers of one layout, read by word arithmetic, are the doubles ``float()`` gives."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from budget import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dflash_diag.logs.fast.layout import MAX_DIGITS, MAX_EXPONENT, layout_of, read_layout


@st.composite
def _layout(draw) -> str:
    """A plain number's shape, each digit as ``0``: sign, digits, point, exponent."""
    sign = draw(st.sampled_from(["", "-", "+"]))
    whole = "0" * draw(st.integers(0, 9))
    point = draw(st.booleans())
    fraction = "0" * draw(st.integers(0 if whole else 1, 9)) if point or not whole else ""
    exponent = ""
    if draw(st.booleans()):
        exponent = draw(st.sampled_from("eE")) + draw(st.sampled_from(["", "-", "+"]))
        exponent += "0" * draw(st.integers(1, 3))
    return sign + whole + ("." if point or not whole else "") + fraction + exponent


def _fill(layout: str, digits: list[int]) -> str:
    it = iter(digits)
    return "".join(str(next(it)) if c == "0" else c for c in layout)


def _exponent(text: str) -> int:
    """The exponent less the fraction digits (the power of ten the mantissa is scaled by)."""
    mantissa, _, exp = text.lower().partition("e")
    frac = len(mantissa.partition(".")[2])
    return (int(exp) if exp else 0) - frac


@pytest.mark.slow
@settings(max_examples=examples(300), deadline=None)
@given(
    layout=_layout(),
    data=st.data(),
    head=st.sampled_from(["", "x=", "loss="]),
    tail=st.sampled_from(["", " ", " acc", "/0000 loss"]),
)
@example(layout="0.00e-00", data=None, head="", tail="")  # the last row's word runs past the end
def test_a_column_of_one_layout_reads_as_float_reads_it(layout, data, head, tail):
    n_digits = layout.count("0")
    if data is None:
        rows = ["6.00e-04", "1.25e-05", "9.99e-07"]
    else:
        rows = [
            _fill(
                layout, data.draw(st.lists(st.integers(0, 9), min_size=n_digits, max_size=n_digits))
            )
            for _ in range(data.draw(st.integers(1, 30)))
        ]
    buf = np.frombuffer("".join(head + r + tail for r in rows).encode(), np.uint8)
    width, stride = len(rows[0]), len(head) + len(rows[0]) + len(tail)
    ok = np.ones(len(rows), dtype=bool)
    got = read_layout(buf, [(0, len(rows), len(head))], stride, len(rows), width, ok)
    want = np.array([float(r) for r in rows])
    mantissa_digits = sum(c.isdigit() for c in rows[0].lower().partition("e")[0])
    readable = (
        len(rows[0]) <= 16
        and mantissa_digits <= MAX_DIGITS
        and all(abs(_exponent(r)) <= MAX_EXPONENT for r in rows)
    )
    if not readable:
        assert got is None  # declined, never a guess
        return
    assert got is not None
    # bit for bit (the sign of zero too): the doubles nearest the decimals
    assert np.array_equal(got.view(np.int64), want.view(np.int64)), (rows, got, want)


@settings(max_examples=examples(100), deadline=None)
@given(
    good=st.lists(st.sampled_from(["4.8123", "0.0460", "9.9999"]), min_size=1, max_size=10),
    odd=st.sampled_from(["4.8e-3", "-1.234", "48123.", "nan123", "4.81.3", "4:8123", "4.8 23"]),
    at=st.integers(0, 10),
    counted=st.booleans(),
)
def test_a_row_of_another_layout_leaves_the_column_to_arrow(good, odd, at, counted):
    rows = good[:at] + [odd] + good[at:]  # (all of one width: one stride)
    raw = "".join(r + " acc" for r in rows).encode()
    buf = np.frombuffer(raw, np.uint8)
    ok = np.ones(len(rows), dtype=bool)
    ok[min(at, len(good))] = counted  # a row that does not fit the template does not count
    got = read_layout(buf, [(0, len(rows), 0)], 10, len(rows), 6, ok)
    if counted or min(at, len(good)) == 0:  # (the first row's layout is the column's)
        assert got is None
    else:
        counted_rows = [(g, r) for g, r, k in zip(got.tolist(), rows, ok, strict=True) if k]
        assert [g for g, _ in counted_rows] == [float(r) for _, r in counted_rows]


def test_a_magnitude_letter_is_checked_and_left_to_the_caller():
    rows = [b"25.1K", b"28.3K", b"20.0K"]
    buf = np.frombuffer(b"".join(rows), np.uint8)
    ok = np.ones(3, dtype=bool)
    assert read_layout(buf, [(0, 3, 0)], 5, 3, 5, ok, suffix=1).tolist() == [25.1, 28.3, 20.0]
    other = np.frombuffer(b"25.1K28.3M20.0K", np.uint8)
    assert read_layout(other, [(0, 3, 0)], 5, 3, 5, ok, suffix=1) is None


def test_layouts_are_plain_decimal_numbers_only():
    assert layout_of(b"-12.50").text == b"-00.00"
    assert layout_of(b"1.5E+03").exponent == (5, 7)
    for text in [b"", b"-", b".", b"e5", b"1e", b"0x1F", b"inf", b"1,5", b"1 5", b"9" * 16]:
        assert layout_of(text) is None, text


def test_rows_that_do_not_fit_break_the_stride_into_runs(monkeypatch):
    """A banner with the template's delimiter count (`==== run ====` among `key=value`
    lines) is a row of another length that does not fit: the rows around it are still
    read by their layout, in runs; a fitting row of another length leaves it to Arrow."""
    from dflash_diag.logs.fast import columns, layout
    from dflash_diag.logs.fast.template import Pattern, Segment, ValueToken

    took = []
    real = layout.read_layout
    monkeypatch.setattr(layout, "read_layout", lambda *a: took.append(real(*a)) or took[-1])
    seg = Segment(Pattern(b""), 0, Pattern(b" acc"))
    v = ValueToken("loss", Pattern(b""), 1.0, False, True)
    rows = [b"4.8123 acc", b"", b"4.1000 acc", b"3.9999 acc", b"== x", b"3.5000 acc"]
    col = pa.array(rows, pa.binary())
    ok, off = columns.segment_fits(col, seg)
    assert ok.tolist() == [True, False, True, True, False, True]
    vals = columns.read_numbers(col, off, seg, v, ok)
    assert took and took[-1] is not None  # the layout path read it
    assert vals[ok].tolist() == [4.8123, 4.1, 3.9999, 3.5]
    rows[3] = b"13.9999 acc"  # a fitting row of another length
    col = pa.array(rows, pa.binary())
    ok, off = columns.segment_fits(col, seg)
    took.clear()
    vals = columns.read_numbers(col, off, seg, v, ok)
    assert not took or took[-1] is None  # Arrow's cast read it
    assert vals[ok].tolist() == [4.8123, 4.1, 13.9999, 3.5]
