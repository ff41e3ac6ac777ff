"""Splitting byte ranges by delimiter count, and the lines the fast path leaves over."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.logs.fast import lineshape as fastpath
from dflash_diag.logs.fast import rows
from dflash_diag.logs.fast.leftover import Leftover, NotUtf8
from dflash_diag.logs.io import RawLog
from dflash_diag.logs.text import read_lines

_LINE = st.text(alphabet="ab=1 .\r\xe9", max_size=12).map(lambda s: s.replace("\r", ""))


@settings(max_examples=examples(200), deadline=None)
@given(lines=st.lists(_LINE, min_size=1, max_size=30), k=st.integers(0, 3), cut=st.booleans())
def test_lines_are_split_by_their_number_of_delimiters(lines, k, cut):
    cut = cut and lines[-1] != ""  # (a log that ends in a newline has no cut last line)
    text = "\n".join(lines) + ("" if cut else "\n")
    data = b"xx\n" + text.encode()  # (a range that does not start the log)
    raw, numbers, other = rows.split_by_count(data, 3, len(data), b"=", k + 1, cut)
    last = len(lines)
    want = [
        i for i, line in enumerate(lines, 1) if line.count("=") == k and not (cut and i == last)
    ]
    assert numbers.tolist() == want
    assert raw.to_pybytes() == b"".join(lines[i - 1].encode() + b"\n" for i in want)
    assert other.numbers.tolist() == [i for i in range(1, last + 1) if i not in want]
    assert other.pairs() == [(i, lines[i - 1]) for i in other.numbers.tolist()]
    if cut and lines:  # the unterminated last line keeps no newline
        assert other.text[-1].as_py() == lines[-1].encode()


@settings(max_examples=examples(100), deadline=None)
@given(
    pairs=st.dictionaries(st.integers(1, 10_000), _LINE, max_size=40),
    cuts=st.lists(st.integers(0, 40), max_size=3),
)
def test_leftovers_merge_in_line_order(pairs, cuts):
    items = list(pairs.items())
    bounds = sorted({0, len(items), *(min(c, len(items)) for c in cuts)})
    pieces = [Leftover.of_pairs(items[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    merged = Leftover.merge(pieces[::-1])
    assert merged.pairs() == sorted(items)
    assert merged.data() == b"".join(t.encode() + b"\n" for _, t in sorted(items))


def test_a_leftover_renumbered_shifted_and_cut():
    left = Leftover.of_pairs([(1, "a"), (2, "b=1"), (3, "c")])
    assert left.shifted(10).numbers.tolist() == [11, 12, 13]
    assert left.renumbered(np.array([5, 7, 9])).numbers.tolist() == [5, 7, 9]
    head, last = left.split_last()
    assert head.pairs() == [(1, "a"), (2, "b=1")] and last.pairs() == [(3, "c")]
    assert head.data() == b"a\nb=1\n"
    assert left.holds_byte(ord("=")) and not left.holds_byte(0x1B)


def test_a_leftover_line_that_is_not_utf8_is_refused():
    left = Leftover(np.array([4]), pa.array([b"\xff\n"], pa.large_binary()))
    with pytest.raises(NotUtf8, match="line 4"):
        left.pairs()


def test_the_sample_decides_how_ranges_are_split():
    sample = ["a=1 b=2", "a=3 b=4", "t=5", "a=6 b=7"]
    assert rows.by_count_share(sample, b"=", 3) == 0.25


def test_a_log_of_two_line_shapes_is_split_by_delimiter_count(monkeypatch):
    monkeypatch.setattr(fastpath, "FAST_MIN_LINES", 10)
    monkeypatch.setattr(fastpath, "MIN_MATCHES", 5)
    monkeypatch.setattr(fastpath, "PART_BYTES", 2000)
    calls = []
    split = rows.split_by_count
    monkeypatch.setattr(rows, "split_by_count", lambda *a: calls.append(a) or split(*a))
    lines = []
    for i in range(300):
        lines.append(f"step={i} loss={4 - i / 100:.4f} acc={i / 300:.4f} lr=1e-4")
        lines.append(f"step={i} fwd={10 + i % 7}.5ms bwd={20 + i % 5}.5ms")
    raw = RawLog("two.log", ("\n".join(lines) + "\n").encode())
    fast = read_lines(raw, fast=True)
    assert calls, "ranges of a two-shape log are split by delimiter count"
    slow = read_lines(raw, fast=False)
    assert fast.table.equals(slow.table)
    assert fast.table.shape[0] == 300
    assert {"loss", "acc", "lr", "fwd", "bwd"} <= set(fast.table.columns)
