"""The replays' fast paths against the plain ones: every value the same.

- the strided positions of full steps (a grid) and of an epoch in order;
- batch ids of distinct keys (``arange``), against numbering by first appearance;
- sorted-greedy's batch starts laid out in one pass (``_progressions``);
- bucketed's members packed with their lengths (one int64 a sample), against the
  members picked and their lengths gathered after the shuffle;
- the packer over narrow lengths (int16, int32) against int64 ones;
- a pool's tokens and category counts from one sum of bit fields, against plain sums.
"""

from __future__ import annotations

import numpy as np
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.data import ScheduleParams
from dflash_diag.schedule.accelerate import step_positions
from dflash_diag.schedule.base import Batches
from dflash_diag.schedule.bucketed import (
    Bucketed,
    bucket_members,
    packed_members,
    unpacked,
)
from dflash_diag.schedule.packing import Budget, _progressions, pack_in_order
from dflash_diag.schedule.replay import (
    batch_ids,
    coded_samples,
    count_fields,
    in_order,
    micro_positions,
    pool_batch_ids,
    pool_features,
)
from dflash_diag.schedule.rng import make_shuffler


def plain_positions(m: int, w: int, g: int, keep_partial: bool) -> list[list[int]]:
    """(pos, step, rank, micro) row by row, as the module docstring says."""
    per_rank = m // w
    rows = []
    steps = per_rank // g + (1 if keep_partial and per_rank % g else 0)
    for k in range(steps):
        n_micro = min(g, per_rank - k * g)
        for r in range(w):
            for j in range(n_micro):
                rows.append([(k * g + j) * w + r, k, r, j])
    return [list(col) for col in zip(*rows, strict=True)] if rows else [[], [], [], []]


@settings(max_examples=examples(100), deadline=None)
@given(st.integers(0, 60), st.integers(1, 5), st.integers(1, 4), st.booleans())
def test_step_positions_are_the_plain_rows(m, w, g, keep_partial):
    got = step_positions(m, w, g, keep_partial)
    assert [a.tolist() for a in got] == plain_positions(m, w, g, keep_partial)
    assert all(a.dtype == np.int64 and a.flags.writeable for a in got)


@settings(max_examples=examples(60), deadline=None)
@given(
    st.integers(0, 60),
    st.integers(1, 5),
    st.integers(1, 3),
    st.sampled_from(["strided", "contiguous", "accelerate"]),
)
def test_in_order_means_the_positions_are_a_range(m, w, g, shard):
    params = ScheduleParams(world_size=w, grad_accum=g, shard=shard)
    pos = micro_positions(m, params)[0]
    if in_order(params):  # (the rows then take the order's first positions as a view)
        assert pos.tolist() == list(range(len(pos)))


def first_appearance(keys: list[int]) -> list[int]:
    seen: dict[int, int] = {}
    return [seen.setdefault(k, len(seen)) for k in keys]


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=40), st.booleans())
def test_batch_ids_number_keys_by_first_appearance(keys, distinct):
    if distinct:
        keys = list(dict.fromkeys(keys))
    arr = np.asarray(keys, dtype=np.uint64)
    assert batch_ids(arr).tolist() == first_appearance(keys)


@settings(max_examples=examples(100), deadline=None)
@given(st.integers(1, 30), st.data())
def test_pool_batch_ids_of_distinct_keys(n_pool, data):
    # distinct pool keys; rows once each (one epoch: the short path) or repeated
    keys = np.arange(n_pool, dtype=np.uint64) * np.uint64(7919) + np.uint64(3)
    if data.draw(st.booleans()):
        rows = data.draw(st.permutations(range(n_pool)))[: data.draw(st.integers(0, n_pool))]
    else:
        rows = data.draw(st.lists(st.integers(0, n_pool - 1), max_size=60))
    rows_arr = np.asarray(rows, dtype=np.int64)
    expected = first_appearance([int(keys[r]) for r in rows])
    assert pool_batch_ids(keys, rows_arr).tolist() == expected


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(1, 4)), min_size=1, max_size=8))
def test_progressions_are_the_runs_joined(runs):
    firsts, at = [], 0
    for step, count in runs:
        firsts.append(at)
        at += step * count
    steps, counts = [s for s, _ in runs], [c for _, c in runs]
    expected = [f + s * i for f, s, c in zip(firsts, steps, counts, strict=True) for i in range(c)]
    assert _progressions(firsts, steps, counts).tolist() == expected


lengths_and_codes = st.integers(1, 60).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 2**15 - 1), min_size=n, max_size=n),
        st.lists(st.integers(0, 3), min_size=n, max_size=n),
    )
)


@settings(max_examples=examples(100), deadline=None)
@given(lengths_and_codes)
def test_packed_members_are_the_members_with_their_lengths(lc):
    lengths, codes = np.asarray(lc[0], dtype=np.int64), np.asarray(lc[1], dtype=np.int8)
    sizes = np.bincount(codes, minlength=4).tolist()
    values = packed_members(lengths, codes, sizes)
    members = np.concatenate(list(bucket_members(codes, 4)))
    ls = unpacked(values)
    assert values.tolist() == members.tolist() and ls.tolist() == lengths[members].tolist()


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(st.integers(0, 3000), min_size=1, max_size=80),
    st.sampled_from(["numpy", "python", "torch", "numpy-legacy"]),
    st.sampled_from([None, (0, 100, 1000, 3001), (0, 5)]),
    st.integers(0, 5),
)
def test_bucketed_packed_epoch_is_the_plain_one(lengths, rng, buckets, seed):
    arr = np.asarray(lengths, dtype=np.int64)
    params = ScheduleParams(strategy="bucketed", token_budget=4096, rng=rng)
    if buckets is not None:
        params = params.replace(buckets=buckets)
    strategy = Bucketed()
    prepared = strategy.prepare(arr, params)
    assert prepared[-1] is not None  # (the packed path applies)
    plain = (*prepared[:-1], None)
    fast = strategy.epoch(prepared, 0, make_shuffler(rng, seed))
    plan = strategy.epoch(plain, 0, make_shuffler(rng, seed))
    assert fast.pool.tolist() == plan.pool.tolist()
    assert fast.order.tolist() == plan.order.tolist()


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(st.integers(0, 9000), min_size=1, max_size=100),
    st.sampled_from([1, 50, 4096, 20000, 40000]),
    st.sampled_from(["padded", "tokens"]),
    st.sampled_from([None, 3]),
    st.sampled_from([np.int16, np.int32, np.uint16]),
)
def test_pack_in_order_reads_narrow_lengths_alike(lengths, budget, mode, max_bs, dtype):
    b = Budget(budget, mode, max_bs)
    wide = np.asarray(lengths, dtype=np.int64)
    narrow = wide.astype(dtype)
    assert pack_in_order(narrow, b).tolist() == pack_in_order(wide, b).tolist()


@settings(max_examples=examples(100), deadline=None)
@given(
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(0, 9000), min_size=n, max_size=n),
            st.lists(st.integers(0, 2), min_size=n, max_size=n),
            st.lists(st.integers(0, n - 1), min_size=1, max_size=3 * n),
        )
    ),
    st.integers(1, 6),
)
def test_pool_features_sum_tokens_and_categories_per_batch(data, cut):
    # one sum of length + a bit field a category (count_fields), against plain sums
    lengths, cats, ids = (np.asarray(x, dtype=np.int64) for x in data)
    starts = np.arange(0, len(ids), cut)
    pool = Batches.from_bounds(ids, starts)
    feats = pool_features(pool, lengths, cats.astype(np.int32), 3)
    batches = pool.tolist()
    assert feats["tokens"].tolist() == [int(lengths[b].sum()) for b in batches]
    for k in range(3):
        assert feats[f"cat{k}"].tolist() == [int((cats[b] == k).sum()) for b in batches]
    assert feats["min"].tolist() == [int(lengths[b].min()) for b in batches]
    assert feats["max"].tolist() == [int(lengths[b].max()) for b in batches]


def test_count_fields_give_up_past_63_bits():
    coded = coded_samples(np.array([2**16]), np.array([0]), 3)
    assert coded is not None
    assert count_fields(coded, np.array([2**14]), 3) is None
    assert count_fields(coded, np.array([2**10]), 3) is not None
