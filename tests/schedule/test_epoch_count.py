"""How many micro-batches an epoch holds, counted without drawing the epoch's order where
the batches are fixed for the run: always the epoch's own count."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.batches.stats import params_for
from dflash_diag.data import STRATEGY_NAMES, ScheduleParams, strategy_info
from dflash_diag.schedule import epoch_batches
from dflash_diag.schedule.replay import micro_batches_per_epoch


@settings(max_examples=examples(60), deadline=None)
@given(
    lengths=st.lists(st.integers(0, 900), min_size=1, max_size=150),
    budget=st.integers(1, 2000),
    cap=st.none() | st.integers(1, 900),
    seed=st.integers(0, 2**16),
    strategy=st.sampled_from(STRATEGY_NAMES),
)
def test_the_count_is_the_first_epochs(lengths, budget, cap, seed, strategy):
    arr = np.array(lengths)
    params = ScheduleParams(token_budget=budget, max_seq_len=cap, seed=seed)
    params = params_for(strategy, params, arr)
    assert micro_batches_per_epoch(arr, params) == len(epoch_batches(arr, params, 0))


@pytest.mark.parametrize("strategy", [s for s in STRATEGY_NAMES if strategy_info(s).fixed_batches])
def test_fixed_batches_are_counted_without_a_shuffle(strategy, monkeypatch):
    # (the count of a fixed pool needs no draw: an epoch order drawn would fail here)
    replay_module = importlib.import_module("dflash_diag.schedule.replay")

    def no_shuffle(*args, **kwargs):
        raise AssertionError("an epoch's order was drawn")

    monkeypatch.setattr(replay_module, "epoch_batches", no_shuffle)
    lengths = np.arange(1, 400) % 97 + 1
    params = params_for(strategy, ScheduleParams(token_budget=512), lengths)
    assert micro_batches_per_epoch(lengths, params) > 1


@settings(max_examples=examples(100), deadline=None)
@given(
    lengths=st.lists(st.integers(0, 300), max_size=200),
    budget=st.integers(1, 1200),
    mode=st.sampled_from(["padded", "tokens"]),
    most=st.none() | st.integers(1, 9),
)
def test_sorted_greedy_counts_its_batches_from_the_counts_per_length(lengths, budget, mode, most):
    # (pack_runs over a count per length against the batches built from the sort)
    from dflash_diag.schedule.sorted_greedy import SortedGreedy

    arr = np.array(lengths, dtype=np.int64)
    params = ScheduleParams(token_budget=budget, budget_mode=mode, max_batch_size=most)
    strategy = SortedGreedy()
    assert strategy.pool_size(arr, params) == len(strategy.prepare(arr, params))
