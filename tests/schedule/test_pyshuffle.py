"""The vectorised `random.shuffle` (dflash_diag.schedule.pyshuffle) against
`random.shuffle` itself: the same list and the same generator state after, call after
call, at every size (small, around the block sizes and powers of two, large)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.schedule.pyshuffle import SMALL, apply_swaps, is_exact, shuffled_range
from dflash_diag.schedule.rng import PythonShuffler


def reference(rnd: random.Random, n: int) -> list[int]:
    x = list(range(n))
    rnd.shuffle(x)
    return x


@settings(max_examples=examples(60), deadline=None)
@given(seed=st.integers(-(2**70), 2**70), sizes=st.lists(st.integers(0, 20_000), max_size=4))
def test_same_lists_and_state_as_random_shuffle(seed, sizes):
    mine, theirs = random.Random(seed), random.Random(seed)
    for n in sizes:
        assert shuffled_range(mine, n).tolist() == reference(theirs, n)
    assert mine.getstate() == theirs.getstate()
    assert mine.random() == theirs.random()  # (the stream goes on the same)


@pytest.mark.parametrize("n", [SMALL, SMALL + 1, 2**13, 2**13 + 1, 2**16 - 1, 300_001])
def test_at_the_edges_of_the_blocks(n):
    mine, theirs = random.Random(n), random.Random(n)
    for _ in range(2):
        assert shuffled_range(mine, n).tolist() == reference(theirs, n)
    assert mine.getstate() == theirs.getstate()


@settings(max_examples=examples(100), deadline=None)
@given(data=st.data(), n=st.integers(1, 60))
def test_any_swaps_give_the_loops_list(data, n):
    # not only the swaps a generator draws: any j_i <= i
    js = [data.draw(st.integers(0, i)) for i in range(n - 1, 0, -1)]
    x = list(range(n))
    for i, j in zip(range(n - 1, 0, -1), js, strict=True):
        x[i], x[j] = x[j], x[i]
    assert apply_swaps(np.array(js, dtype=np.int64), n).tolist() == x


def test_the_shuffler_uses_it_with_the_same_results():
    assert is_exact()
    shuffler, theirs = PythonShuffler(7), random.Random(7)
    for n in (0, 1, 2, 50_000, 3):
        assert shuffler.permutation(n).tolist() == reference(theirs, n)
    assert shuffler.random.getstate() == theirs.getstate()
