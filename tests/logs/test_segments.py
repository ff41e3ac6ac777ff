"""The console path's segments told by their bytes (:mod:`dflash_diag.logs.fast.segments`)
as RE2 and Arrow tell them one string at a time: bars read once per shape, blanks
asked only where a space starts and ends a segment."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.logs.fast import segments
from dflash_diag.logs.fast.segments import BARE_BAR, DICT_LINE, digits_as_zeros, read_bars

#: The patterns the console path reads bars with (a bar alone, a bar with a dict glued
#: to it, a bar among other bytes).
PATTERNS = [BARE_BAR + "[\r\n]?$", BARE_BAR + DICT_LINE + "[\r\n]?$", BARE_BAR]


@settings(max_examples=examples(200), deadline=None)
@given(st.binary(max_size=300))
def test_digits_as_zeros_makes_every_ascii_digit_a_zero(raw):
    want = raw.translate(bytes(48 if 48 <= b <= 57 else b for b in range(256)))
    assert digits_as_zeros(raw).tobytes() == want


def _digits(lo: int, hi: int) -> st.SearchStrategy[str]:
    return st.text("0123456789", min_size=lo, max_size=hi)


@st.composite
def bar_texts(draw) -> str:
    """tqdm's bars and near misses: counts of 0-17 digits (leading zeros, over 15),
    bodies with blocks, digits, a ``/`` or a ``|``, brackets with 0-2 commas, a dict
    glued after, a terminator."""
    body = draw(st.text("# 0123456789/|\u2588\u258f\u2022", max_size=12))
    n, total = draw(_digits(0, 17)), draw(_digits(0, 17))
    info = draw(st.text("0123456789:<,. ?its/]", max_size=24))
    spaces = " " * draw(st.integers(0, 3))
    pct = draw(_digits(0, 4))
    text = f"{spaces}{pct}%|{body}|{spaces}{n}/{total}{spaces}[{info}]"
    if draw(st.booleans()):
        text += draw(st.sampled_from(["{'loss': '2.5'}", "{'a': '5%|'}", "{'x': '1'} "]))
    return text + draw(st.sampled_from(["", "\r", "\n", "\r\n", " "]))


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(bar_texts(), max_size=30), st.sampled_from(PATTERNS))
def test_bars_read_by_shape_are_what_re2_reads_from_each(texts, pattern):
    bars = pa.array(texts, pa.string())
    ok, counts, totals = read_bars(bars, pattern)
    got = pc.extract_regex(bars, pattern)  # (each bar on its own, as the plain reading)
    want_ok = got.is_valid().to_numpy(zero_copy_only=False)
    assert ok.tolist() == want_ok.tolist()
    kept = got.filter(pa.array(want_ok))
    assert counts.tolist() == [int(x) for x in kept.field("n").to_pylist()]
    assert totals.tolist() == [int(x) for x in kept.field("total").to_pylist()]


def test_a_bar_of_every_shape_is_read_as_its_own():
    # (shapes shared by many bars, and one bar of each: the counts are each bar's own)
    texts = [
        f"{p:3d}%|{'#' * (p // 10):<10}| {n}/500 [00:01<00:02, 7.5it/s]\r"
        for p, n in [(0, 1), (0, 9), (1, 10), (1, 99), (20, 100), (99, 499), (100, 500)]
    ]
    texts.append("  5%|| 000000000000007/123456789012345 []\n")
    ok, counts, totals = read_bars(pa.array(texts), PATTERNS[0])
    assert ok.all()
    assert counts.tolist() == [1, 9, 10, 99, 100, 499, 500, 7]
    assert totals.tolist() == [500] * 7 + [123456789012345]


@st.composite
def logs(draw) -> bytes:
    pieces = st.sampled_from(
        ["", " ", "   ", " x ", "x ", " x", "\t ", " \t", " \x0b ", "{'a': '1'}", "{}", "{'", "é "]
    )
    parts = draw(st.lists(st.tuples(pieces, st.sampled_from(["\r", "\n"])), max_size=30))
    return "".join(a + b for a, b in parts).encode() + draw(st.sampled_from([b"", b"  ", b"x"]))


@settings(max_examples=examples(300), deadline=None)
@given(logs(), st.sampled_from([1, 2, 5, 1 << 20]))
def test_segments_told_by_their_bytes_are_what_each_segments_bytes_say(data, chunk):
    # (the bytes either side of each separator are read chunk by chunk, a chunk's
    # first and last separators included)
    if not data:
        return
    keep, segments.SCAN_CHUNK = segments.SCAN_CHUNK, chunk
    try:
        seg = segments.cut_segments(data)
    finally:
        segments.SCAN_CHUNK = keep
    assert seg is not None
    buf = np.frombuffer(data, np.uint8)
    starts, ends = seg.offsets[:-1], seg.offsets[1:]
    content = ends - starts - (seg.term > 0)
    assert seg.first.tolist() == buf[starts].tolist()
    assert seg.end_byte.tolist() == np.where(content > 0, buf[starts + content - 1], 0).tolist()
    # (a segment with a control byte but its terminator is told by the regexes instead)
    plain = ~np.isin(np.arange(len(seg.kinds)), seg.odd)
    space = pc.ascii_is_space(seg.strings).to_numpy(zero_copy_only=False)
    assert ((seg.kinds == segments.BLANK) == space)[plain].all()
    second = buf[np.minimum(starts + 1, len(buf) - 1)]
    braced = (buf[starts] == ord("{")) & (second == ord("'")) & (seg.end_byte == ord("}"))
    assert ((seg.kinds == segments.DICT) == braced)[plain].all()


@settings(max_examples=examples(200), deadline=None)
@given(
    logs(), st.lists(st.tuples(st.integers(0, 400), st.sampled_from([b"\xc3", b"\xa9", b"\xff"])))
)
def test_a_log_is_cut_exactly_when_it_is_utf8(data, bad):
    for at, piece in bad:  # (a lone lead byte, a lone continuation byte, a byte no UTF-8 holds)
        data = data[:at] + piece + data[at:]
    if not data:
        return
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        assert segments.cut_segments(data) is None
    else:
        assert segments.cut_segments(data) is not None


def test_the_console_is_read_with_huge_pages_and_the_switch_put_back():
    # (the command line turns numpy's huge pages off; the console path asks for them
    # while it reads, and leaves the switch and the collector as it found them)
    import gc

    from numpy._core import multiarray

    was = multiarray._set_madvise_hugepage(False)
    try:
        with segments.collector_paused():
            assert multiarray._set_madvise_hugepage(True) is True  # (on while reading)
            assert not gc.isenabled()
        assert multiarray._set_madvise_hugepage(False) is False  # (off again after)
        assert gc.isenabled()
    finally:
        multiarray._set_madvise_hugepage(was)
