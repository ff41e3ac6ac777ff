"""The replay maps each epoch's micro-batches onto ranks and optimizer steps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.data import Manifest, ScheduleParams
from dflash_diag.errors import InputError
from dflash_diag.schedule import STRATEGIES, epoch_batches, replay

USER = Path(__file__).resolve().parents[1] / "data" / "manifests" / "user_batches.py"


def ten_batches():
    # 10 samples of distinct lengths 10..19 with a budget that fits one sample each:
    # sorted-greedy gives 10 singleton batches, batch k = sample k.
    return np.arange(10, 20), ScheduleParams(token_budget=19)


def test_strided_ranks_take_every_world_size_th_micro_batch():
    lens, params = ten_batches()
    params = params.replace(world_size=2, grad_accum=2, first_step=1)
    order = [b[0] for b in epoch_batches(lens, params, 0).tolist()]
    r = replay(lens, params)
    # step k holds order[4k:4k+4]; rank r, micro m takes order[4k + 2m + r]
    got = [
        (s, rk, m, int(r.batch(i)[0]))
        for i, (s, rk, m) in enumerate(r.micro[["step", "rank", "micro"]].itertuples(index=False))
    ]
    expected = [
        (1 + k, rk, m, order[4 * k + 2 * m + rk])
        for k in range(2)
        for rk in range(2)
        for m in range(2)
    ]
    assert got == expected
    assert r.dropped["incomplete_last_step_micro_batches"] == 2
    assert r.dropped["incomplete_last_step_samples"] == 2


def test_contiguous_ranks_take_blocks():
    lens, params = ten_batches()
    params = params.replace(world_size=2, grad_accum=2, shard="contiguous")
    order = [b[0] for b in epoch_batches(lens, params, 0).tolist()]
    r = replay(lens, params)
    # each rank gets a block of 10 // 2 = 5; 5 // 2 = 2 steps; rank r micro m of step k
    # is order[5r + 2k + m]
    got = [int(r.batch(i)[0]) for i in range(len(r.micro))]
    expected = [order[5 * rk + 2 * k + m] for k in range(2) for rk in range(2) for m in range(2)]
    assert got == expected
    assert r.dropped["incomplete_last_step_micro_batches"] == 2


def test_steps_keep_counting_across_epochs_and_pool_the_micro_batches():
    lens = np.random.default_rng(0).integers(1, 500, 300)
    params = ScheduleParams(token_budget=1000, world_size=3, grad_accum=2, first_step=5)
    r = replay(lens, params, epochs=3)
    steps = r.steps
    assert steps.step.tolist() == list(range(5, 5 + len(steps)))
    assert (np.diff(steps.step) == 1).all()
    per_epoch = steps.groupby("epoch").size()
    n_batches = len(epoch_batches(lens, params, 0))
    assert per_epoch.tolist() == [n_batches // 6] * 3
    # step tables pool their micro-batches
    pooled = r.micro.groupby("step").agg(
        tokens=("tokens", "sum"),
        padded=("padded_tokens", "sum"),
        n=("n_samples", "sum"),
        mx=("max_len", "max"),
        mn=("min_len", "min"),
    )
    assert (pooled.tokens.to_numpy() == steps.tokens.to_numpy()).all()
    assert (pooled.padded.to_numpy() == steps.padded_tokens.to_numpy()).all()
    assert (pooled.n.to_numpy() == steps.n_samples.to_numpy()).all()
    assert (pooled.mx.to_numpy() == steps.max_len.to_numpy()).all()
    assert (pooled.mn.to_numpy() == steps.min_len.to_numpy()).all()
    assert (steps.n_micro == 6).all()


@settings(max_examples=examples(30), deadline=None)
@given(
    lens=st.lists(st.integers(0, 3000), min_size=1, max_size=200),
    name=st.sampled_from(sorted(STRATEGIES)),
    world=st.integers(1, 3),
    accum=st.integers(1, 3),
    cap=st.one_of(st.none(), st.integers(1, 2000)),
    shard=st.sampled_from(["strided", "contiguous", "accelerate"]),
)
def test_micro_rows_describe_their_samples(lens, name, world, accum, cap, shard):
    params = ScheduleParams(
        strategy=name,
        token_budget=4000,
        batch_size=3,
        max_seq_len=cap,
        world_size=world,
        grad_accum=accum,
        shard=shard,
        epochs=2,
        buckets=(0, 500, 4000),
    )
    r = replay(np.array(lens), params)
    capped = np.minimum(np.array(lens), cap or 10**9)
    assert np.array_equal(r.lengths, capped)
    assert len(r.offsets) == len(r.micro) + 1
    for i, row in enumerate(r.micro.itertuples(index=False)):
        ls = capped[r.batch(i)]
        assert row.n_samples == len(ls)
        assert row.tokens == ls.sum()
        assert row.padded_tokens == len(ls) * ls.max()
        assert (row.min_len, row.max_len) == (ls.min(), ls.max())
        assert row.mean_len == pytest.approx(ls.mean())
        assert row.len_std == pytest.approx(ls.std(), abs=1e-6)
    # samples used + samples dropped = all samples, every epoch (fairseq: its own drops;
    # padding by DistributedSampler and accelerate's even batches counts negative)
    dropped = sum(r.dropped.values()) - r.dropped["incomplete_last_step_micro_batches"]
    assert r.micro.n_samples.sum() + dropped == 2 * len(lens)


def test_category_shares_from_a_manifest():
    m = Manifest(
        path="m.parquet",
        lengths=np.array([5, 5, 9, 9]),
        ids=np.arange(4),
        categories=np.array([0, 1, 1, 1], dtype=np.int32),
        category_names=("chat", "code"),
    )
    r = replay(m, ScheduleParams(token_budget=10, seed=1))
    by_len = r.micro.set_index("max_len")
    assert by_len.loc[5, "cat_chat"] == 0.5
    assert by_len.loc[5, "cat_code"] == 0.5
    assert (by_len.loc[9, "cat_code"] == 1.0).all()
    assert r.category_names == ("chat", "code")
    assert r.steps["cat_code"].tolist() == r.micro["cat_code"].tolist()


def test_categories_given_as_labels():
    r = replay(np.array([1, 1, 1, 1]), ScheduleParams(token_budget=4), categories=list("aaba"))
    assert r.micro[["cat_a", "cat_b"]].values.tolist() == [[0.75, 0.25]]


def test_bad_lengths_are_input_errors():
    with pytest.raises(InputError, match="negative lengths at rows 1, 3"):
        replay(np.array([1, -1, 2, -5]), ScheduleParams())
    with pytest.raises(InputError, match="not whole numbers at rows 0"):
        replay(np.array([1.5, 2.0]), ScheduleParams())


def test_fixed_size_strategies_need_a_batch_size():
    with pytest.raises(InputError) as e:
        replay(np.array([1, 2]), ScheduleParams(strategy="random"))
    assert str(e.value) == (
        "--batch-size: strategy 'random' needs a batch size in samples; give --batch-size N"
    )


def test_progress_is_called_per_epoch():
    calls = []
    replay(
        np.arange(1, 50),
        ScheduleParams(token_budget=100, epochs=3),
        progress=lambda d, t: calls.append((d, t)),
    )
    assert calls == [(0, 3), (1, 3), (2, 3), (3, 3)]


def test_replay_columns_are_the_contract():
    r = replay(np.arange(1, 50), ScheduleParams(token_budget=100), categories=["x"] * 49)
    assert list(r.micro.columns) == [
        "epoch",
        "step",
        "rank",
        "micro",
        "batch_id",
        "n_samples",
        "tokens",
        "padded_tokens",
        "min_len",
        "mean_len",
        "max_len",
        "len_std",
        "padding_eff",
        "cat_x",
    ]
    assert list(r.steps.columns) == [
        "step",
        "epoch",
        "n_micro",
        "n_samples",
        "tokens",
        "padded_tokens",
        "min_len",
        "mean_len",
        "max_len",
        "len_std",
        "padding_eff",
        "cat_x",
    ]
    assert r.sample_ids.dtype == np.int64 and r.offsets.dtype == np.int64
    assert isinstance(r.micro, pd.DataFrame)


# --- a user's own function ----------------------------------------------------------


def test_user_function_from_a_file_is_called_per_epoch():
    import random

    params = ScheduleParams(strategy=f"{USER}:build_batches", seed=3, epochs=2)
    r = replay(np.arange(1, 8), params)
    for epoch in range(2):
        order = list(range(7))
        random.Random(3000 + epoch).shuffle(order)
        rows = np.flatnonzero(r.micro.epoch.to_numpy() == epoch)
        assert [r.batch(i).tolist() for i in rows] == [order[i : i + 2] for i in range(0, 7, 2)]


def test_user_function_from_a_module():
    params = ScheduleParams(strategy="dflash_diag.schedule.custom:load_function")
    with pytest.raises(InputError, match="load_function"):
        replay(np.arange(3), params)


@pytest.mark.parametrize(
    ("func", "message"),
    [
        ("out_of_range", "out_of_range: batch 0 has indices out of range 0..4: 5"),
        ("empty_batch", "empty_batch: batch 1 is empty"),
        ("not_a_list", "not_a_list returned int, not a list of batches"),
        ("raises", "IndexError while calling raises: list index out of range"),
        ("missing", "no function 'missing'"),
    ],
)
def test_user_function_errors_name_the_problem(func, message):
    with pytest.raises(InputError) as e:
        replay(np.arange(5), ScheduleParams(strategy=f"{USER}:{func}"))
    assert message in str(e.value)
    assert e.value.path.endswith("user_batches.py")


def test_user_function_error_points_at_the_line():
    with pytest.raises(InputError) as e:
        replay(np.arange(5), ScheduleParams(strategy=f"{USER}:raises"))
    assert e.value.line == 26  # the failing line of user_batches.py


def test_user_file_missing():
    with pytest.raises(InputError) as e:
        replay(np.arange(5), ScheduleParams(strategy="nowhere/train.py:build_batches"))
    assert str(e.value) == "nowhere/train.py: file not found; check the --strategy path"


@settings(max_examples=examples(60), deadline=None)
@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=40),
    n_cat=st.integers(1, 5),
    outside=st.booleans(),
    data=st.data(),
)
def test_pool_features_count_categories_as_a_pass_a_category(sizes, n_cat, outside, data):
    """A pool's category counts, from one count of batch x category (or, with codes
    outside the categories, a pass a category that leaves them out), are the counts a
    pass a category makes."""
    from dflash_diag.schedule.base import Batches
    from dflash_diag.schedule.replay import pool_features

    n = sum(sizes)
    top = n_cat + 2 if outside else n_cat - 1
    codes = np.array(data.draw(st.lists(st.integers(0, top), min_size=n, max_size=n)))
    codes = codes.astype(data.draw(st.sampled_from([np.int8, np.int32, np.int64])))
    ids = np.random.default_rng(len(sizes)).permutation(n)
    pool = Batches.from_bounds(ids, np.cumsum([0, *sizes[:-1]]))
    feats = pool_features(pool, np.ones(n, dtype=np.int64), codes, n_cat)
    c = codes[ids]
    for k in range(n_cat):
        expected = np.add.reduceat((c == k).astype(np.int64), pool.offsets[:-1])
        assert feats[f"cat{k}"].tolist() == expected.tolist()
        assert feats[f"cat{k}"].dtype == np.int64


@settings(max_examples=examples(60), deadline=None)
@given(
    lengths=st.lists(st.integers(0, 12_000), min_size=1, max_size=60),
    n_cat=st.integers(1, 4),
    seed=st.integers(0, 100),
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=30),
)
def test_pool_features_through_codes_are_the_plain_ones(lengths, n_cat, seed, sizes):
    """A pool holding most of the samples reads each one's length and category behind
    one code (:func:`coded_samples`): the same features as the plain look-ups, which a
    pool of few samples (or codes past the table's bound) still makes."""
    from importlib import import_module
    from unittest import mock

    from dflash_diag.schedule.base import Batches

    r = import_module("dflash_diag.schedule.replay")  # (the module, not its function)

    ls = np.array(lengths, dtype=np.int64)
    codes = np.random.default_rng(seed).integers(0, n_cat, ls.size).astype(np.int32)
    take = min(ls.size, sum(sizes))
    ids = np.random.default_rng(seed + 1).permutation(ls.size)[:take]
    bounds = np.minimum(np.cumsum([0, *sizes[:-1]]), take)
    pool = Batches.from_bounds(ids, np.unique(bounds[bounds < take]))
    fast = r.pool_features(pool, ls, codes, n_cat)
    with mock.patch.object(r, "coded_samples", lambda *_: None):
        plain = r.pool_features(pool, ls, codes, n_cat)
    assert fast.keys() == plain.keys()
    for name in fast:
        assert np.array_equal(fast[name], plain[name]), name
        assert fast[name].dtype == plain[name].dtype, name
    code, length, cat = r.coded_samples(ls, codes, n_cat)
    assert np.array_equal(length[code], ls) and np.array_equal(cat[code], codes)
