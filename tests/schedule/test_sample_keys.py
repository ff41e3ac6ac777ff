"""The composition keys: splitmix64 of each index plus one, worked out in pieces."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

# (the module: the package's name ``replay`` is its function)
replay = importlib.import_module("dflash_diag.schedule.replay")


def plain_keys(ids: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser of ``i + 1``, one whole-array step at a time."""
    with np.errstate(over="ignore"):
        z = (np.asarray(ids).astype(np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


@settings(max_examples=examples(80), deadline=None)
@given(
    ids=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=50),
    piece=st.integers(1, 8),
    wide=st.booleans(),
)
def test_keys_in_pieces_are_the_whole_arrays_keys(ids, piece, wide):
    a = np.array(ids, dtype=np.int64)
    if not wide:  # (an int32 index array, as a small manifest's may be)
        a = (a % (2**31)).astype(np.int32)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(replay, "KEY_PIECE", piece)
        got = replay.sample_keys(a)
    assert got.dtype == np.uint64 and got.shape == a.shape
    assert got.tolist() == plain_keys(a).tolist()


def test_a_batch_key_is_the_same_in_any_order():
    keys = replay.sample_keys(np.array([[3, 9, 4], [4, 3, 9]]))
    with np.errstate(over="ignore"):
        sums = keys.sum(axis=1, dtype=np.uint64)
    assert sums[0] == sums[1]
    assert len(set(replay.sample_keys(np.arange(10_000)).tolist())) == 10_000
