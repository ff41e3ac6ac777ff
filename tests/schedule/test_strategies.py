"""Every strategy against its literal transcription, and the invariants all must keep."""

from __future__ import annotations

from collections import Counter
from unittest import mock

import numpy as np
import pytest
from budget import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dflash_diag import arrays
from dflash_diag.data import ScheduleParams
from dflash_diag.schedule import (
    STRATEGIES,
    bucketed,
    epoch_batches,
    make_shuffler,
    packing,
    replay,
)
from dflash_diag.schedule.bucketed import bucket_codes, bucket_members, bucket_of
from dflash_diag.schedule.fairseq import batch_by_size
from dflash_diag.schedule.length_grouped import length_grouped_order
from dflash_diag.schedule.packing import Budget, pack_in_order, pack_sorted

from . import oracles

lengths_st = st.lists(st.integers(0, 300), min_size=0, max_size=120)
# Lengths with many ties and a long tail, capped like a real max_seq_len.
tailed_st = st.lists(
    st.one_of(st.integers(1, 40), st.integers(100, 120), st.integers(500, 900)),
    min_size=1,
    max_size=150,
)


def as_lists(batches):
    return batches.tolist()


# --- literal transcriptions ---------------------------------------------------------


@settings(max_examples=examples(60), deadline=None)
@given(
    values=st.one_of(
        st.lists(st.integers(0, 40), max_size=300),  # many ties
        st.lists(st.integers(0, 2**16 - 1), max_size=300),
        st.lists(st.integers(0, 2**32 - 1), max_size=300),  # two radix passes
        st.lists(st.integers(2**16 - 3, 2**16 + 3), max_size=300),  # ties across the halves
        st.lists(st.integers(-(2**40), 2**40), max_size=50),
    )
)
def test_stable_argsort_is_numpys_stable_sort(values):
    """The radix sorts of small whole numbers give numpy's stable order."""
    x = np.array(values, dtype=np.int64)
    assert packing.stable_argsort(x).tolist() == np.argsort(x, kind="stable").tolist()


@settings(max_examples=examples(60), deadline=None)
@given(
    lens=lengths_st,
    budget=st.integers(1, 1000),
    mode=st.sampled_from(["padded", "tokens"]),
    max_bs=st.one_of(st.none(), st.integers(1, 9)),
    cap=st.one_of(st.none(), st.integers(1, 300)),
)
def test_sorted_greedy_batches_equal_build_batches(lens, budget, mode, max_bs, cap):
    params = ScheduleParams(
        token_budget=budget, budget_mode=mode, max_batch_size=max_bs, max_seq_len=cap, seed=3
    )
    expected = oracles.build_batches(lens, budget, cap, mode, max_bs)
    strategy = STRATEGIES["sorted-greedy"]()
    capped = np.minimum(np.array(lens, dtype=np.int64), cap if cap else 10**9)
    assert as_lists(strategy.prepare(capped, params)) == expected


@settings(max_examples=examples(40), deadline=None)
@given(
    lens=st.lists(st.integers(0, 40), max_size=120),
    budget=st.integers(1, 200),
    mode=st.sampled_from(["padded", "tokens"]),
    far=st.booleans(),
)
def test_sorted_greedy_packs_from_the_counts_as_from_the_sorted_lengths(lens, budget, mode, far):
    # Token lengths are packed from a count per length; lengths past the counted range
    # (shifted by 2**22, the budget scaled with them) from the sorted lengths: both give
    # the loop's batches.
    from dflash_diag.arrays import COUNTED_BELOW
    from dflash_diag.schedule.sorted_greedy import build_sorted_batches

    shift = COUNTED_BELOW if far else 0
    arr = np.array(lens, dtype=np.int64) + shift
    tokens = budget * (shift + 1)
    expected = oracles.build_batches(arr.tolist(), tokens, None, mode, None)
    assert as_lists(build_sorted_batches(arr, packing.Budget(tokens, mode))) == expected


@settings(max_examples=examples(40), deadline=None)
@given(lens=tailed_st, budget=st.integers(100, 3000), seed=st.integers(0, 2**31))
def test_sorted_greedy_epoch_orders_equal_the_pipeline(lens, budget, seed):
    params = ScheduleParams(token_budget=budget, seed=seed)
    expected = oracles.sorted_greedy_epochs(lens, budget, seed, epochs=3)
    for epoch in range(3):
        assert as_lists(epoch_batches(np.array(lens), params, epoch)) == expected[epoch]


@settings(max_examples=examples(40), deadline=None)
@given(
    lens=st.lists(st.integers(0, 1000), min_size=0, max_size=120),
    budget=st.integers(50, 3000),
    seed=st.integers(0, 2**31),
    mode=st.sampled_from(["padded", "tokens"]),
)
def test_bucketed_equals_its_written_procedure(lens, budget, seed, mode):
    edges = (0, 100, 250, 600, 1000)
    params = ScheduleParams(
        strategy="bucketed", token_budget=budget, seed=seed, buckets=edges, budget_mode=mode
    )
    expected = oracles.bucketed_epochs(lens, edges, budget, seed, epochs=2, mode=mode)
    for epoch in range(2):
        assert as_lists(epoch_batches(np.array(lens), params, epoch)) == expected[epoch]


@settings(max_examples=examples(60), deadline=None)
@given(
    lens=st.lists(st.integers(1, 50), min_size=0, max_size=80),
    max_tokens=st.integers(50, 400),
    max_sentences=st.one_of(st.none(), st.integers(1, 12)),
    mult=st.integers(1, 8),
    ascending=st.booleans(),
)
def test_fairseq_batch_by_size_equals_fairseq_baseline(
    lens, max_tokens, max_sentences, mult, ascending
):
    lens = sorted(lens) if ascending else lens
    starts = batch_by_size(np.array(lens, dtype=np.int64), max_tokens, max_sentences, mult)
    bounds = [*starts.tolist(), len(lens)]
    mine = [list(range(a, b)) for a, b in zip(bounds, bounds[1:], strict=False)]
    if mult > 1 and mine and len(mine[-1]) % mult != 0:
        mine = mine[:-1]
    assert mine == oracles.fairseq_baseline(lens, max_tokens, max_sentences or 0, mult)


def test_fairseq_epoch_is_numpy_seeded_shuffle_of_frozen_batches():
    lens = np.array([5, 3, 5, 8, 1, 3, 5, 2, 9, 9, 4])
    params = ScheduleParams(strategy="fairseq", token_budget=16, seed=7)
    rs = np.random.RandomState(7)
    perm = rs.permutation(len(lens))
    indices = perm[np.argsort(lens[perm], kind="mergesort")]
    frozen = [
        [int(indices[p]) for p in b]
        for b in oracles.fairseq_baseline(lens[indices].tolist(), 16, 0, 1)
    ]
    for epoch in range(2):
        shuffled = list(frozen)
        np.random.RandomState(7 + epoch + 1).shuffle(shuffled)
        assert as_lists(epoch_batches(lens, params, epoch)) == shuffled


@settings(max_examples=examples(40), deadline=None)
@given(
    lens=st.lists(st.integers(0, 30), min_size=1, max_size=100),
    batch_size=st.integers(1, 6),
    mult=st.integers(1, 5),
    seed=st.integers(0, 1000),
)
def test_length_grouped_equals_hf_code(lens, batch_size, mult, seed):
    perm = make_shuffler("python", seed).permutation(len(lens))
    expected = oracles.hf_length_grouped(lens, perm.tolist(), batch_size, mult)
    got = length_grouped_order(np.array(lens), perm, mult * batch_size)
    assert got.tolist() == expected


def test_length_grouped_default_multiplier_and_batches():
    lens = np.arange(100) % 17
    params = ScheduleParams(strategy="length-grouped", batch_size=4, seed=1, grad_accum=2)
    perm = make_shuffler("python", 1).permutation(100)
    mult = min(100 // (4 * 2 * 4), 50)  # the sampler's batch size is batch_size x grad_accum
    order = oracles.hf_length_grouped(lens.tolist(), perm.tolist(), 8, mult)
    expected = [order[i : i + 4] for i in range(0, 100, 4)]
    assert as_lists(epoch_batches(lens, params, 0)) == expected


def test_random_is_a_shuffle_cut_into_batches():
    params = ScheduleParams(strategy="random", batch_size=3, seed=9, rng="numpy")
    perm = np.random.default_rng(9).permutation(10).tolist()
    assert as_lists(epoch_batches(np.ones(10, int), params, 0)) == [
        perm[0:3],
        perm[3:6],
        perm[6:9],
        perm[9:],
    ]


@settings(max_examples=examples(60), deadline=None)
@given(
    lens=lengths_st,
    budget=st.integers(1, 1000),
    mode=st.sampled_from(["padded", "tokens"]),
    max_bs=st.one_of(st.none(), st.integers(1, 9)),
)
def test_vectorised_packer_equals_the_loop(lens, budget, mode, max_bs):
    ls = np.sort(np.array(lens, dtype=np.int64))
    b = Budget(budget, mode, max_bs)
    assert pack_sorted(ls, b).tolist() == pack_in_order(ls, b).tolist()


@settings(max_examples=examples(150), deadline=None)
@given(
    lens=st.one_of(
        lengths_st,
        tailed_st,
        st.lists(st.integers(0, 20), max_size=200),  # batches of dozens: many doublings
        st.lists(st.integers(0, 2**40), max_size=60),
    ),
    budget=st.one_of(st.integers(1, 1000), st.integers(1, 2**70)),
    mode=st.sampled_from(["padded", "tokens"]),
    max_bs=st.one_of(st.none(), st.integers(1, 9)),
    chunk=st.sampled_from([1, 3, 16, packing.ENDS_CHUNK]),
    window=st.sampled_from([1, 2, 5, packing.CHAIN_WINDOW]),
    sweep=st.sampled_from([0, 1, 3, packing.SWEEP_SIZES]),
    jump=st.sampled_from([1, 2, 4, packing.CHAIN_JUMP]),
)
# 5 x 3 = 15 fits, though no window of 4 has a maximum below 15 // 4 = 3: the doubling
# levels must not stop at 4
@example(
    lens=[3] * 6,
    budget=15,
    mode="padded",
    max_bs=None,
    chunk=packing.ENDS_CHUNK,
    window=packing.CHAIN_WINDOW,
    sweep=packing.SWEEP_SIZES,
    jump=packing.CHAIN_JUMP,
)
def test_packing_in_any_order_equals_the_literal_loop(
    lens, budget, mode, max_bs, chunk, window, sweep, jump
):
    """The vectorised packer (batch ends by prefix sums, a sweep over batch sizes or
    binary lifting, positions in chunks, the chain of batches read a window at a time,
    by jumps over several batches) builds the literal loop's batches, budgets far
    beyond any run included."""
    with (
        mock.patch.object(packing, "ENDS_CHUNK", chunk),
        mock.patch.object(packing, "CHAIN_WINDOW", window),
        mock.patch.object(packing, "SWEEP_SIZES", sweep),
        mock.patch.object(packing, "CHAIN_JUMP", jump),
    ):
        got = pack_in_order(np.array(lens, dtype=np.int64), Budget(budget, mode, max_bs))
    expected = oracles.greedy_pack(list(enumerate(lens)), budget, mode, max_bs)
    assert got.tolist() == [b[0] for b in expected]


@pytest.mark.parametrize("jump", [1, 4, packing.CHAIN_JUMP])
@pytest.mark.parametrize("seed", range(3))
def test_long_orders_pack_as_the_literal_loop(seed, jump):
    """Thousands of lengths in random order, whose batches are dozens long and often
    exactly at the budget (``c x longest == budget``): the sweep over batch sizes and
    the chain's jumps over many windows' batches build the literal loop's batches."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 13, 5000) * 10
    with mock.patch.object(packing, "CHAIN_JUMP", jump):
        for budget in (120, 600, 2400):
            got = pack_in_order(lens, Budget(budget))
            expected = oracles.greedy_pack(list(enumerate(lens.tolist())), budget)
            assert got.tolist() == [b[0] for b in expected]


# --- invariants, for every registered strategy ----------------------------------------


def params_for(name, **kw):
    base = dict(strategy=name, token_budget=600, batch_size=4, buckets=(0, 50, 200, 1000))
    base.update(kw)
    return ScheduleParams(**base)


BUDGETED = {"sorted-greedy", "bucketed", "fairseq"}


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@settings(max_examples=examples(25), deadline=None)
@given(
    lens=st.lists(st.integers(0, 800), min_size=0, max_size=120),
    seed=st.integers(0, 10_000),
    rng=st.sampled_from(["python", "numpy", "numpy-legacy", "torch"]),
    seeding=st.sampled_from(["once", "per-epoch"]),
    mode=st.sampled_from(["padded", "tokens"]),
)
def test_every_sample_once_per_epoch_and_budget_kept(name, lens, seed, rng, seeding, mode):
    params = params_for(name, seed=seed, rng=rng, seeding=seeding, budget_mode=mode)
    lens_arr = np.array(lens, dtype=np.int64)
    for epoch in range(2):
        batches = as_lists(epoch_batches(lens_arr, params, epoch))
        seen = Counter(i for b in batches for i in b)
        # every sample exactly once per epoch ...
        assert all(c == 1 for c in seen.values())
        missing = set(range(len(lens))) - set(seen)
        if name == "fairseq":
            # ... or left out by fairseq's documented rules: over max_tokens, or the
            # final batch whose size is not a multiple (multiple is 1 here: never)
            assert missing == {i for i, L in enumerate(lens) if L > params.token_budget}
        else:
            assert missing == set()
        assert all(len(b) > 0 for b in batches)
        if name in BUDGETED:
            for b in batches:
                ls = [lens[i] for i in b]
                cost = len(ls) * max(ls) if (mode == "padded" or name == "fairseq") else sum(ls)
                # no batch over budget unless one sample alone is
                assert cost <= params.token_budget or len(b) == 1


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_replay_is_deterministic(name):
    lens = np.random.default_rng(1).integers(1, 700, 500)
    params = params_for(name, seed=11, epochs=3, world_size=2, grad_accum=2)
    a, b = replay(lens, params), replay(lens, params)
    assert a.micro.equals(b.micro)
    assert a.steps.equals(b.steps)
    assert np.array_equal(a.sample_ids, b.sample_ids)


@settings(max_examples=examples(30), deadline=None)
@given(lens=tailed_st, seed=st.integers(0, 2**31), budget=st.integers(900, 5000))
def test_sorted_greedy_compositions_recur_every_epoch_with_the_same_batch_id(lens, seed, budget):
    r = replay(np.array(lens), ScheduleParams(token_budget=budget, seed=seed, epochs=3))
    ids_by_epoch = [set(g.batch_id) for _, g in r.micro.groupby("epoch")]
    assert ids_by_epoch[0] == ids_by_epoch[1] == ids_by_epoch[2]
    # same batch_id <=> same set of samples
    sets = {}
    for i, bid in enumerate(r.micro.batch_id):
        s = frozenset(r.batch(i).tolist())
        assert sets.setdefault(bid, s) == s
    assert len(set(sets.values())) == len(sets)


def test_bucketed_compositions_do_not_recur():
    lens = np.random.default_rng(2).integers(1, 1000, 2000)
    r = replay(lens, params_for("bucketed", epochs=2, seed=4, token_budget=8000))
    first = set(r.micro.batch_id[r.micro.epoch == 0])
    second = set(r.micro.batch_id[r.micro.epoch == 1])
    assert len(first & second) < 0.05 * len(first)


def test_every_strategy_name_is_registered_and_named_alike():
    from dflash_diag.data import STRATEGY_NAMES

    # --strategy is validated against STRATEGY_NAMES; each must have a class, and back
    assert set(STRATEGIES) == set(STRATEGY_NAMES)
    assert all(cls.name == name for name, cls in STRATEGIES.items())


@settings(max_examples=examples(60), deadline=None)
@given(
    lens=st.lists(st.integers(0, 3000), max_size=300),
    edges=st.lists(st.integers(0, 3000), min_size=2, max_size=200, unique=True).map(sorted),
    picked=st.booleans(),
    table=st.booleans(),
)
@example(
    lens=[0, 769, 770, 1215, 1216, 8191, 9000], edges=[0, 770, 1216, 8192], picked=True, table=True
)
def test_bucket_members_are_a_stable_sort_by_bucket(lens, edges, picked, table):
    """Each bucket's members picked in a pass of their own (or, many buckets, sorted),
    from the small bucket codes (read from a table of every length's, or searched), are
    the plain stable sort's, in dataset order."""
    ls = np.array(lens, dtype=np.int64)
    edges = tuple(edges)
    buckets = bucket_of(ls, edges)
    order = np.argsort(buckets, kind="stable")
    plain = [order[buckets[order] == i].tolist() for i in range(len(edges) - 1)]
    with mock.patch.object(arrays, "COUNTED_BELOW", arrays.COUNTED_BELOW if table else 0):
        codes = bucket_codes(ls, edges)
    assert codes.tolist() == buckets.tolist()
    assert codes.itemsize == (1 if len(edges) - 1 < 128 else 2)
    with mock.patch.object(bucketed, "PICKED_BUCKETS", 1 << 20 if picked else 0):
        got = list(bucket_members(codes, len(edges) - 1))
    assert [m.tolist() for m in got] == plain


def test_replay_epochs_hand_each_epoch_over():
    """The generator keeps no reference to an epoch it yielded: what the caller drops of
    it (a column it does not read) is freed at once."""
    import weakref

    from dflash_diag.schedule.replay import new_dropped, replay_epochs, replay_setup

    params = ScheduleParams(strategy="bucketed", token_budget=600, buckets=(0, 50, 200, 1000))
    lengths = np.random.default_rng(0).integers(1, 900, 500)
    setup = replay_setup(lengths, params, 2)
    epochs = replay_epochs(setup, params, new_dropped(), features=False)
    ep = next(epochs)
    gone = [weakref.ref(ep.rows["epoch"]), weakref.ref(ep.chosen), weakref.ref(ep.pool)]
    del ep
    assert all(ref() is None for ref in gone)
    assert next(epochs).epoch == 1
