"""`replay_rows`: the schedule statistics of a replay without its sample ids.

Every statistic is made from the same numbers by the same operations as from the whole
replay, so the two must agree to the last bit (compared by `repr`), for every strategy,
rank count, grad-accum, sharding, cap and with categories."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.batches.stats import params_for, schedule_stats
from dflash_diag.data import STRATEGY_NAMES, ScheduleParams
from dflash_diag.schedule import replay
from dflash_diag.schedule.rows import count_in, replay_rows

RNG = np.random.default_rng(7)
LENGTHS = np.minimum(RNG.lognormal(np.log(300), 0.9, 1500).astype(np.int64) + 1, 4000)
CATS = RNG.choice(["code", "chat", "math"], size=len(LENGTHS))

CASES = list(
    itertools.product(
        STRATEGY_NAMES, (1, 3), (1, 2), ("strided", "contiguous", "accelerate"), (None, 1024)
    )
)


@pytest.mark.parametrize(("strategy", "world", "accum", "shard", "cap"), CASES)
def test_rows_give_the_replays_statistics(strategy, world, accum, shard, cap):
    params = ScheduleParams(
        token_budget=4096, world_size=world, grad_accum=accum, shard=shard, max_seq_len=cap
    )
    params = params_for(strategy, params.replace(epochs=3), LENGTHS)
    whole = schedule_stats(replay(LENGTHS, params))
    assert repr(schedule_stats(replay_rows(LENGTHS, params))) == repr(whole)


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_rows_with_categories(strategy):
    params = params_for(strategy, ScheduleParams(token_budget=4096, epochs=2), LENGTHS)
    whole = schedule_stats(replay(LENGTHS, params, categories=CATS))
    rows = schedule_stats(replay_rows(LENGTHS, params, categories=CATS))
    assert whole.category_share_std is not None  # (the case compares something)
    assert repr(rows) == repr(whole)


@settings(max_examples=examples(40), deadline=None)
@given(
    lengths=st.lists(st.integers(0, 900), min_size=1, max_size=120),
    budget=st.integers(1, 2000),
    epochs=st.integers(1, 4),
    world=st.integers(1, 3),
    seeding=st.sampled_from(["once", "per-epoch"]),
    strategy=st.sampled_from(["sorted-greedy", "bucketed", "random", "fairseq"]),
)
def test_rows_agree_on_any_manifest(lengths, budget, epochs, world, seeding, strategy):
    # tiny manifests: empty epochs, one-sample batches, steps dropped whole
    arr = np.array(lengths)
    params = ScheduleParams(
        token_budget=budget, epochs=epochs, world_size=world, seeding=seeding, seed=3
    )
    params = params_for(strategy, params, arr)
    assert repr(schedule_stats(replay_rows(arr, params))) == repr(
        schedule_stats(replay(arr, params))
    )


def test_rows_hold_no_sample_ids():
    params = ScheduleParams(token_budget=4096, epochs=6)
    rows = replay_rows(LENGTHS, params)
    micro = replay(LENGTHS, params).micro
    assert len(rows.n) == len(micro)
    assert rows.n.tolist() == micro["n_samples"].tolist()
    assert rows.step is None  # one micro-batch a step, counting up: not stored
    assert not hasattr(rows, "sample_ids")


def test_steps_are_stored_once_they_stop_counting_up():
    params = ScheduleParams(token_budget=4096, epochs=2, grad_accum=2)
    rows = replay_rows(LENGTHS, params)
    assert rows.step is not None
    assert rows.step.tolist() == replay(LENGTHS, params).micro["step"].tolist()


@settings(max_examples=examples(100), deadline=None)
@given(
    values=st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 20), max_size=30),
    pool=st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 20), max_size=30),
)
def test_count_in_is_isin(values, pool):
    a, b = np.array(values, dtype=np.uint64), np.array(pool, dtype=np.uint64)
    assert count_in(a, b) == int(np.isin(a, b).sum())
