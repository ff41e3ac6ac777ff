"""The replay's memory savings keep every value: pool-numbered batch ids, shared step
columns, constant columns stored once, lengths not copied when the cap cuts nothing."""

from __future__ import annotations

import numpy as np
import pandas as pd
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.data import ScheduleParams
from dflash_diag.schedule import replay
from dflash_diag.schedule.replay import batch_ids, capped, constant_view, pool_batch_ids


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=30),
    st.data(),
)
def test_pool_batch_ids_are_the_ids_of_the_rows_keys(pool, data):
    # keys repeat inside the pool (two batches of one composition) and rows repeat
    # (epochs); some pool batches are never used (a dropped last step)
    keys = np.asarray(pool, dtype=np.uint64)
    rows = np.asarray(
        data.draw(st.lists(st.integers(0, len(pool) - 1), max_size=60)), dtype=np.int64
    )
    expected = batch_ids(keys[rows])
    assert pool_batch_ids(keys, rows.copy()).tolist() == expected.tolist()


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(st.integers(-3, 3), max_size=20))
def test_constant_view_keeps_the_values(values):
    a = np.asarray(values, dtype=np.int64)
    v = constant_view(a)
    assert v.tolist() == a.tolist() and v.dtype == a.dtype
    if len(a) > 1:  # (an empty or one-row array's stride means nothing)
        assert (v.strides == (0,)) == (len(set(values)) == 1)


def test_capped_copies_only_when_the_cap_cuts():
    x = np.array([3, 7, 5], dtype=np.int64)
    assert capped(x, 7) is x and capped(x, None) is x
    assert capped(x, 4).tolist() == [3, 4, 4] and x.tolist() == [3, 7, 5]


def test_one_micro_steps_equal_the_steps_summed_from_the_micro_table():
    # one rank, no grad-accum: the step table shares the micro table's columns; it must
    # equal the sums a groupby over the micro-batches gives
    lengths = np.random.default_rng(0).integers(1, 900, 500)
    cats = np.array(["a", "b"])[np.arange(500) % 2]
    r = replay(lengths, ScheduleParams(token_budget=2048, epochs=2), categories=cats)
    g = r.micro.groupby("step", sort=True)
    assert r.steps["n_micro"].tolist() == g.size().tolist() == [1] * len(r.steps)
    for col in ("n_samples", "tokens", "padded_tokens", "min_len", "max_len", "epoch"):
        assert r.steps[col].tolist() == g[col].first().tolist()
    assert np.array_equal(r.steps["mean_len"], r.steps["tokens"] / r.steps["n_samples"])
    pd.testing.assert_series_equal(r.steps["cat_a"], r.micro["cat_a"])
