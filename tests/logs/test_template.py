"""The line template the fast path learns, and the byte checks that apply it."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.logs.fast import columns
from dflash_diag.logs.fast.template import (
    Pattern,
    Segment,
    ValueToken,
    sample_template,
    split_template,
)

DFLASH = (
    "2026-03-02 14:03:11,204 | INFO | dflash.train | epoch=0 step=254/3000 loss=4.8123 "
    "acc=0.4601 lr=6.00e-04 grad_norm=1.25 ntok=60000 tok/s=25.1K"
)
SPECFORGE = (
    "02/14/2026 10:21:05 - INFO - specforge.utils - Train - Step 50 [50/187500?], "
    "Loss: 6.0000, Acc: 0.0500"
)
NEMO = "2026-02-14 10:21:05 | INFO | nemo | epoch=0 step=100 loss=2.3456 acc=0.4567 lr=0.0006"


def test_pattern_generalises_free_digit_runs_only():
    p = Pattern.of("14:03:11,204 acc_0 dflash2 /3000")
    text = p.text.decode()
    assert text == "00:00:00,000 acc_0 dflash2 /0000"
    assert [text[i] for i in p.digits] == ["0"] * 13
    assert 17 not in p.digits  # the 0 of acc_0 stays literal


def test_sample_template_learns_the_dflash_line():
    t = sample_template([DFLASH.replace("254", str(s)) for s in range(250, 270)])
    assert t is not None
    assert [v.name for v in t.values] == [
        "epoch",
        "step",
        "loss",
        "acc",
        "lr",
        "grad_norm",
        "tokens",
        "tok_per_s",
    ]
    tps = t.values[-1]
    assert tps.magnitude and tps.finite and not len(tps.tail)
    assert t.values[1].tail.text == b"/0000"  # the total generalised to any 4 digits


@pytest.mark.parametrize(
    "line, delimiter", [(DFLASH, b"="), (NEMO, b"="), (SPECFORGE, b",")], ids=str
)
def test_the_delimiter_gives_few_segments_of_at_most_one_value(line, delimiter):
    t = sample_template([line] * 10)
    assert t is not None
    d, segments = split_template(t)
    assert d == delimiter
    assert [s.value for s in segments if s.value is not None] == list(range(len(t.values)))
    # a line of the template is its segments joined at the delimiter: as many pieces
    assert len(segments) == line.count(d.decode()) + 1


def test_a_space_always_splits_a_template():
    t = sample_template(["step 5 loss 2.5 acc 0.5"] * 5)
    assert t is not None
    d, segments = split_template(t)
    assert d == b" " and len(segments) == 6


# --- the byte checks: Arrow memcmp plus 64-bit word tests, against a plain oracle ---


def _oracle(row: bytes, seg: Segment) -> bool:
    """Does ``row`` hold the segment: head, then (for a value) at least one byte and
    the tail; exactly the head otherwise."""

    def fit(got: bytes, p: Pattern) -> bool:
        return len(got) == len(p) and all(
            48 <= c <= 57 if j in p.digits else c == p.text[j] for j, c in enumerate(got)
        )

    h, t = len(seg.head), len(seg.tail)
    if seg.value is None:
        return fit(row, seg.head)
    return len(row) > h + t and fit(row[:h], seg.head) and fit(row[len(row) - t :], seg.tail)


_CHARS = b"0123456789:-|, =abXY"


@st.composite
def _pattern(draw, max_size=30):
    text = draw(
        st.binary(min_size=0, max_size=max_size).map(lambda b: bytes(_CHARS[x % 20] for x in b))
    )
    digits = tuple(i for i, c in enumerate(text) if 48 <= c <= 57 and draw(st.booleans()))
    return Pattern(text, digits)


@st.composite
def _rows(draw, seg):
    def instance() -> bytes:
        def fill(p: Pattern) -> bytes:
            return bytes(
                draw(st.sampled_from(b"0123456789")) if j in p.digits else c
                for j, c in enumerate(p.text)
            )

        number = b"" if seg.value is None else draw(st.sampled_from([b"1", b"2.5", b"-0.125e3"]))
        return fill(seg.head) + number + (b"" if seg.value is None else fill(seg.tail))

    rows = []
    for _ in range(draw(st.integers(1, 40))):
        row = instance()
        if row and draw(st.booleans()):  # a near miss: one byte changed, or cut short
            i = draw(st.integers(0, len(row) - 1))
            if draw(st.booleans()):
                row = row[:i] + bytes([draw(st.sampled_from(_CHARS))]) + row[i + 1 :]
            else:
                row = row[:i]
        rows.append(row)
    return rows


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None)
@given(data=st.data(), value=st.booleans())
def test_segment_checks_agree_with_a_byte_by_byte_oracle(data, value):
    head = data.draw(_pattern())
    tail = data.draw(_pattern(12)) if value else Pattern(b"")
    seg = Segment(head, 0 if value else None, tail)
    rows = data.draw(_rows(seg))
    col = pa.array(rows, pa.binary())
    ok, _ = columns.segment_fits(col, seg)
    assert ok.tolist() == [_oracle(r, seg) for r in rows]


def test_equal_length_rows_are_checked_through_strided_views():
    p = Pattern.of("2026-03-02 14:03:11,204 | INFO | x")
    seg = Segment(p, None, Pattern(b""))
    good = [f"2026-03-02 14:{m:02d}:11,204 | INFO | x".encode() for m in range(60)]
    rows = good[:20] + [good[0].replace(b"INFO", b"WARN")] + good[20:] + [b""] + good[:5]
    ok, _ = columns.segment_fits(pa.array(rows, pa.binary()), seg)
    assert ok.tolist() == [_oracle(r, seg) for r in rows]
    assert not ok[20] and not ok[61] and ok.sum() == 65


@pytest.mark.parametrize("text", ["1.5", "nan", "Infinity", "1e400", "-0", "+.5", "1.2.3", ""])
@pytest.mark.parametrize("finite", [False, True])
def test_numbers_follow_the_general_parsers_syntax(text, finite):
    seg = Segment(Pattern(b""), 0, Pattern(b" acc"))
    v = ValueToken("loss", Pattern(b""), 1.0, False, finite)
    col = pa.array([b"2.5 acc", f"{text} acc".encode(), b"3 acc"], pa.binary())
    ok, off = columns.segment_fits(col, seg)
    vals = columns.read_numbers(col, off, seg, v, ok)
    syntax = columns._FINITE_RE2 if finite else columns._NUM_RE2
    readable = bool(text) and re.fullmatch(syntax, text) is not None
    assert ok.tolist() == [True, readable, True]
    assert vals[0] == 2.5 and vals[2] == 3.0
    if readable:
        assert np.array_equal(vals[1], float(text), equal_nan=True)
