"""The fast paths of the samples package against straightforward references (Hypothesis):
what they compute must be exactly what the plain version computes."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pandas as pd
from budget import examples
from chunking import small_chunks
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import gammaln

from dflash_diag.samples import (
    Membership,
    bh_qvalues,
    order_pvalue,
    sample_evidence,
    separable_groups,
)
from dflash_diag.samples.appearances import appearances
from dflash_diag.samples.decode import Tested as Pass
from dflash_diag.samples.decode import _retest, group_q, group_q_below, singletons
from dflash_diag.samples.evidence import SampleOptions
from dflash_diag.samples.groups import _repeated, number_by_first
from dflash_diag.samples.measured import _per_sample, order_within
from dflash_diag.samples.membership import entries_with
from dflash_diag.samples.nulls import bh_below, bh_qvalues_keyed

from .test_invariants import runs


def bh_reference(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg as written: q_(i) = min over j >= i of p_(j) m / j, by a loop."""
    q = np.full(p.shape, np.nan)
    tested = [i for i in range(p.size) if np.isfinite(p[i])]
    order = sorted(tested, key=lambda i: (p[i], i))
    m = len(order)
    best = np.inf
    for j in range(m, 0, -1):
        best = min(best, p[order[j - 1]] * m / j)
        q[order[j - 1]] = min(best, 1.0)
    return q


# p's drawn from a few values, so ties are common (their order must not matter)
P_VALUES = st.sampled_from([np.nan, 1e-9, 0.001, 0.01, 0.04, 0.2, 0.5, 1.0])


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.one_of(P_VALUES, st.floats(0.0, 1.0)), max_size=80))
def test_bh_equals_the_loop(p: list[float]) -> None:
    arr = np.array(p, dtype=np.float64)
    want = bh_reference(arr)
    got = bh_qvalues(arr)
    # the same products and minima: the same bits, NaN where untested
    assert np.array_equal(got, want, equal_nan=True)
    for level in (0.01, 0.05, 0.25):
        assert np.array_equal(bh_below(arr, level), np.nan_to_num(want, nan=2.0) <= level)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.integers(0, 12), max_size=120))
def test_number_by_first_equals_factorize(values: list[int]) -> None:
    key = np.array(values, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    want = pd.factorize(key, sort=False)[0] if key.size else np.zeros(0, dtype=np.int64)
    got = number_by_first(key)
    assert got.dtype == np.int64 and np.array_equal(got, want)


@settings(max_examples=examples(60), deadline=None)
@given(runs())
def test_groups_are_numbered_like_a_dict_of_point_sets(run) -> None:
    # reference: each sample's frozenset of usable points; groups numbered in the order
    # of their lowest member, samples in no usable point -1
    m, z = run
    numbers: dict[frozenset[int], int] = {}
    want = []
    for s in range(m.n_samples):
        pts = frozenset(
            int(p)
            for p in range(m.n_points)
            if np.isfinite(z[p]) and s in m.samples[m.offsets[p] : m.offsets[p + 1]]
        )
        want.append(numbers.setdefault(pts, len(numbers)) if pts else -1)
    group, size = separable_groups(m, z)
    assert group.tolist() == want
    assert size.tolist() == [want.count(g) for g in range(len(numbers))]


@settings(max_examples=examples(50), deadline=None)
@given(st.integers(1, 3000), st.integers(1, 12), st.integers(0, 2**32 - 1))
def test_the_log_gamma_table_gives_the_same_bits(n: int, k_max: int, seed: int) -> None:
    # enough samples for the table path (more samples than half the table)
    rng = np.random.default_rng(seed)
    size = 2 * n + 8
    k = rng.integers(1, min(k_max, n) + 1, size)
    n_ge = rng.integers(0, n + 1, size)
    got = order_pvalue(k, n_ge, n)
    kf = k.astype(np.float64)
    ge = np.maximum(n_ge.astype(np.float64), kf)
    logp = gammaln(ge + 1) - gammaln(ge - kf + 1) - gammaln(n + 1) + gammaln(n - kf + 1)
    want = np.minimum(np.exp(np.minimum(logp, 0.0)), 1.0)
    assert np.array_equal(got, want)


def test_groups_of_a_greedy_schedule_are_its_batches() -> None:
    # the same 4 batches of 3 every epoch, in another order: 4 groups of 3, numbered by
    # their lowest member, whatever the hash does with 12 repeated keys
    rng = np.random.default_rng(0)
    batches = rng.permutation(12).reshape(4, 3)
    samples = np.concatenate([batches[rng.permutation(4)].ravel() for _ in range(3)])
    m = Membership.from_entries(np.arange(samples.size) // 3, samples)
    group, size = separable_groups(m)
    first = {int(b.min()): b for b in batches}
    for number, low in enumerate(sorted(first)):
        assert (group[first[low]] == number).all()
    assert size.tolist() == [3, 3, 3, 3]


@settings(max_examples=examples(80), deadline=None)
@given(runs(), st.integers(1, 7), st.integers(0, 3))
def test_chunked_counts_rank_sums_and_order_statistics_are_the_plain_ones(
    run, chunk, allow_low
) -> None:
    # (chunks of a few entries, so that the passes cross chunk boundaries)
    m, z = run
    app = appearances(m, z)
    with small_chunks(chunk):
        k, rank_sum = app.counts_and_rank_sums()
        lowest, nth = app.lowest(allow_low)
    assert k.tolist() == np.bincount(app.sample, minlength=m.n_samples).tolist()
    ranks = [sorted(app.rank[app.sample == s].tolist()) for s in range(m.n_samples)]
    assert rank_sum.tolist() == [sum(r) for r in ranks]
    none = app.n_usable
    assert lowest.tolist() == [r[0] if r else none for r in ranks]
    assert nth.tolist() == [r[allow_low] if len(r) > allow_low else none for r in ranks]


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(st.one_of(P_VALUES, st.floats(0.0, 1.0)), min_size=1, max_size=12),
    st.lists(st.tuples(st.integers(-1, 11), st.booleans(), P_VALUES), max_size=80),
)
def test_keyed_bh_equals_bh(table: list[float], rows: list[tuple[int, bool, float]]) -> None:
    # p is the key's value (or its own where key is -1; NaN rows untested); the keyed
    # version must give bh_qvalues' bits
    keys = np.array([k % len(table) if k >= 0 else -1 for k, _, _ in rows], dtype=np.int64)
    p = np.array([table[k] if k >= 0 else own for k, (_, _, own) in zip(keys, rows, strict=True)])
    p[np.array([untested for _, untested, _ in rows], dtype=bool)] = np.nan
    want = bh_qvalues(p)
    assert np.array_equal(bh_qvalues_keyed(p, keys, len(table)), want, equal_nan=True)


@settings(max_examples=examples(100), deadline=None)
@given(
    st.sampled_from([50, 2**16, 2**16 + 1, 3 * 2**16 + 7]),
    st.lists(st.integers(0, 2**20), max_size=200),
    st.lists(st.integers(0, 2**20), max_size=40),
    st.integers(1, 9),
)
def test_entries_with_equals_a_mask_look_up(n: int, entries: list[int], ids: list[int], chunk):
    # ids that agree in their low 16 bits with other samples must not slip through, and
    # none is lost at a chunk's edge
    samples = np.array([e % n for e in entries], dtype=np.int32)
    wanted = np.unique(np.array([i % n for i in ids], dtype=np.int64))
    mask = np.zeros(n, dtype=bool)
    mask[wanted] = True
    with small_chunks(chunk):
        got = entries_with(samples, wanted, n)
    assert got.dtype == np.int64
    assert got.tolist() == np.flatnonzero(mask[samples]).tolist()


@settings(max_examples=examples(80), deadline=None)
@given(
    pairs=st.lists(
        st.tuples(
            st.integers(0, 6),
            st.sampled_from([np.nan, -0.0, 0.0, 1.0, -2.5]) | st.floats(-1e9, 1e9),
        ),
        max_size=80,
    )
)
def test_order_within_is_lexsort(pairs):
    # by group, then value, NaN last, ties (-0.0 and 0.0 too) in entry order
    group = np.array([g for g, _ in pairs], dtype=np.int64)
    values = np.array([v for _, v in pairs], dtype=np.float64)
    assert order_within(group, values).tolist() == np.lexsort((values, group)).tolist()


def test_per_sample_statistics_are_pandas_group_by():
    # the measured ground's per-sample table against pandas' group-by of the same entries
    rng = np.random.default_rng(3)
    n = 40
    frame = pd.DataFrame(
        {
            "s": rng.integers(0, n - 5, 400),
            "u": rng.normal(size=400).round(1),
            "r": rng.normal(size=400),
            "share": np.where(rng.random(400) < 0.1, np.nan, rng.random(400)),
        }
    )
    opts = SampleOptions(allow_low=1)
    got = _per_sample(frame, n, opts)
    g = frame.sort_values(["s", "u"], kind="stable").groupby("s")
    want = pd.DataFrame(index=pd.RangeIndex(n))
    want["appearances"] = g.size().reindex(want.index, fill_value=0)
    want["high"] = (
        (frame["u"] >= opts.high_z).groupby(frame["s"]).sum().reindex(want.index, fill_value=0)
    )
    want["min_z"] = g["u"].min().reindex(want.index)
    want["t"] = g["u"].nth(1).set_axis(g["s"].nth(1)).reindex(want.index)
    want["median_r"] = g["r"].median().reindex(want.index)
    want["share"] = g["share"].mean().reindex(want.index)
    want["median_z"] = g["u"].median().reindex(want.index)
    pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-12)


def test_samples_seen_once_or_twice_are_grouped_by_their_points_alone():
    # (no set hash for them: one or two points are told by the lowest and the rank sum)
    once = Membership.from_entries([0, 0, 1, 1, 1, 2], [4, 1, 0, 2, 3, 5], n_samples=7)
    group, size = separable_groups(once)
    assert group.tolist() == [0, 1, 0, 0, 1, 2, -1] and size.tolist() == [3, 2, 1]
    # seen twice: samples 0 and 1 in points {0, 2}, together; 2 in {0, 1} and 3 in
    # {1, 2}, each apart
    twice = Membership.from_entries([0, 0, 0, 1, 1, 2, 2, 2], [0, 1, 2, 2, 3, 0, 1, 3], n_samples=4)
    group, size = separable_groups(twice)
    assert group.tolist() == [0, 0, 1, 2] and size.tolist() == [2, 1, 1]


@settings(max_examples=examples(80), deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(-1, 5), st.integers(0, 9)), max_size=60),
    seed=st.integers(0, 2**16),
)
def test_entries_in_order_need_no_sort_and_give_the_same_table(pairs, seed):
    # (the same entries in their (point, sample) order take the path without a sort)
    point = np.array([p for p, _ in pairs], dtype=np.int64)
    sample = np.array([s for _, s in pairs], dtype=np.int64)
    tokens = np.arange(len(pairs), dtype=np.float64) + 1
    shuffled = np.random.default_rng(seed).permutation(len(pairs))
    a = Membership.from_entries(point[shuffled], sample[shuffled], 10, 6, tokens[shuffled])
    key = point * 10 + sample
    keep = np.flatnonzero(point >= 0)
    keep = keep[np.argsort(key[keep], kind="stable")]
    once = keep[np.r_[True, key[keep][1:] != key[keep][:-1]]] if keep.size else keep
    b = Membership.from_entries(point[once], sample[once], 10, 6, tokens[once])
    assert a.offsets.tolist() == b.offsets.tolist()
    assert a.samples.tolist() == b.samples.tolist()
    repeated = len(once) < len(keep)
    if not repeated:  # (tokens of an entry met twice are summed in a; b keeps one)
        assert a.tokens.tolist() == b.tokens.tolist()


@settings(max_examples=examples(120), deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(-1, 5), st.integers(0, 9)), max_size=60),
    grouped=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_a_table_without_tokens_or_with_sample_tokens_is_the_plain_one(pairs, grouped, seed):
    # (keys sorted by value, point and sample read back from them; tokens of a sample
    # repeated in a point are its tokens times the repeats, as summing them would give)
    point = np.array([p for p, _ in pairs], dtype=np.int64)
    sample = np.array([s for _, s in pairs], dtype=np.int32)
    order = np.random.default_rng(seed).permutation(len(pairs))
    if grouped:  # by point, samples in any order within it (a shuffled replay)
        order = order[np.argsort(point[order], kind="stable")]
    point, sample = point[order], sample[order]
    per_sample = np.arange(10, dtype=np.float64) * 7 + 3
    plain = Membership.from_entries(point, sample, 10, 6, per_sample[sample])
    bare = Membership.from_entries(point, sample, 10, 6)
    fed = Membership.from_entries(point, sample, 10, 6, sample_tokens=per_sample)
    for m in (bare, fed):
        assert m.offsets.tolist() == plain.offsets.tolist()
        assert m.samples.tolist() == plain.samples.tolist()
    assert bare.tokens is None and not bare.has_tokens
    # (kept per sample, looked up where asked, unless a sample repeats in a point)
    assert (fed.tokens is None) == (fed.sample_tokens is not None)
    assert fed.tokens_at(slice(None)).tolist() == plain.tokens.tolist()
    some = np.arange(0, plain.n_entries, 3)
    assert fed.tokens_at(some).tolist() == plain.tokens[some].tolist()
    assert fed.point_tokens().tolist() == plain.point_tokens().tolist()
    assert fed.entry_share().tolist() == plain.entry_share().tolist()


@settings(max_examples=examples(60), deadline=None)
@given(
    n=st.integers(1, 3000),
    k_max=st.integers(2, 12),
    allow_low=st.integers(0, 3),
    size=st.integers(1, 5000),
    seed=st.integers(0, 2**32 - 1),
)
def test_p_values_by_distinct_pair_and_table_give_the_same_bits(n, k_max, allow_low, size, seed):
    # (each distinct (k, n_ge) computed once, log-gamma looked up in a table: the same
    # bits as every sample on its own with scipy's gammaln)
    from dflash_diag.samples.nulls import _tail_terms

    rng = np.random.default_rng(seed)
    k = rng.integers(allow_low + 1, max(min(k_max, n), allow_low + 1) + 1, size)
    n_ge = rng.integers(0, n + 1, size)
    got = order_pvalue(k, n_ge, n, allow_low)
    kf = k.astype(np.float64)
    if allow_low == 0:
        ge = np.maximum(n_ge.astype(np.float64), kf)
        logp = gammaln(ge + 1) - gammaln(ge - kf + 1) - gammaln(n + 1) + gammaln(n - kf + 1)
        want = np.minimum(np.exp(np.minimum(logp, 0.0)), 1.0)
    else:
        ge = np.maximum(n_ge.astype(np.float64), kf - allow_low)
        nf = np.asarray(float(n))
        want = _tail_terms(kf, ge, nf, allow_low, lambda x: gammaln(x + 1))
        want = np.clip(want, np.finfo(np.float64).tiny, 1.0)
    assert np.array_equal(got, want, equal_nan=True)


@settings(max_examples=examples(100), deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 2**31 - 2)), max_size=80),
    chunk=st.integers(1, 9),
    sort=st.booleans(),
)
def test_keys_rise_a_chunk_at_a_time_as_over_the_whole(pairs, chunk, sort):
    # (int32 points times a width past 2**31: the keys must not wrap)
    from dflash_diag.samples.membership import _keys_rise

    if sort:
        pairs = sorted(set(pairs))
    point = np.array([p for p, _ in pairs], dtype=np.int32)
    sample = np.array([s for _, s in pairs], dtype=np.int32)
    key = point.astype(np.int64) * 2**31 + sample
    with small_chunks(chunk):
        rise = _keys_rise(point, sample, 2**31)
    assert rise == bool(np.all(key[1:] > key[:-1]))
    if pairs:
        m = Membership.from_entries(point, sample, 2**31 - 1)
        want = np.unique(key)
        assert (m.samples.astype(np.int64) + 2**31 * m.point_of_entry()).tolist() == want.tolist()


@settings(max_examples=examples(80), deadline=None)
@given(st.integers(1, 40), st.integers(1, 8), st.integers(0, 2**16), st.integers(0, 2))
def test_samples_seen_at_most_once_take_a_short_path_to_the_same_figures(
    n_samples, n_points, seed, allow_low
):
    # each sample in at most one point (a sorted-greedy epoch), some points unusable:
    # the ranks, groups and the whole evidence as the general passes give them, and the
    # groups those of a dict of points
    rng = np.random.default_rng(seed)
    point = rng.integers(-1, n_points, n_samples)
    m = Membership.from_entries(point, np.arange(n_samples), n_samples, n_points)
    z = rng.normal(size=n_points)
    z[rng.random(n_points) < 0.2] = np.nan
    opts = SampleOptions(allow_low=allow_low, min_appearances=1)
    app = appearances(m, z)
    k = app.counts()
    assert k.max(initial=0) <= 1
    short = (app.counts_and_rank_sums(k), app.lowest(allow_low, k), separable_groups(m, z))
    table = sample_evidence(m, z, excess=z, options=opts).table
    with (
        mock.patch("dflash_diag.samples.appearances.seen_at_most_once", lambda k: False),
        mock.patch("dflash_diag.samples.groups.seen_at_most_once", lambda k: False),
    ):
        plain = (app.counts_and_rank_sums(), app.lowest(allow_low), separable_groups(m, z))
        want_table = sample_evidence(m, z, excess=z, options=opts).table
    for got, want in zip(sum(short, ()), sum(plain, ()), strict=True):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    pd.testing.assert_frame_equal(table, want_table)
    numbers: dict[int, int] = {}
    usable = (point >= 0) & np.isfinite(z[np.maximum(point, 0)])
    want_group = [
        numbers.setdefault(int(p), len(numbers)) if u else -1
        for p, u in zip(point, usable, strict=True)
    ]
    assert short[2][0].tolist() == want_group


@settings(max_examples=examples(120), deadline=None)
@given(
    sizes=st.lists(st.integers(0, 6), min_size=1, max_size=12),
    equal=st.booleans(),
    chunk=st.integers(1, 9),
    seed=st.integers(0, 2**16),
)
def test_a_replay_sorted_within_its_points_by_chunks_is_the_plain_table(sizes, equal, chunk, seed):
    # (points of one size: each a row sorted alone; else each run of points' keys; a
    # sample twice in a point falls back to the whole sort; integer tokens summed by
    # runs of points)
    rng = np.random.default_rng(seed)
    sizes = [sizes[0]] * len(sizes) if equal else sizes
    point = np.repeat(np.arange(len(sizes)), sizes).astype(np.int32)
    sample = rng.integers(0, 10, point.size).astype(np.int32)
    per_sample = rng.integers(0, 9000, 10)
    plain = Membership.from_entries(point, sample, 10, len(sizes), per_sample[sample] * 1.0)
    with small_chunks(chunk):
        fed = Membership.from_entries(point, sample, 10, len(sizes), sample_tokens=per_sample)
        point_tokens = fed.point_tokens()
        counts = appearances(fed).counts()
    assert fed.offsets.tolist() == plain.offsets.tolist()
    assert fed.samples.tolist() == plain.samples.tolist()
    assert fed.samples.dtype == np.int32
    assert fed.tokens_at(slice(None)).tolist() == plain.tokens.tolist()
    if fed.tokens is None:  # (a sample's whole tokens, as int32)
        assert fed.tokens_at(slice(None)).dtype == np.int32
    assert point_tokens.tolist() == plain.point_tokens().tolist()
    assert counts.tolist() == np.bincount(plain.samples, minlength=10).tolist()


@settings(max_examples=examples(150), deadline=None)
@given(
    st.lists(st.tuples(P_VALUES, st.integers(0, 5), st.booleans()), min_size=1, max_size=40),
    st.integers(8, 12),
)
def test_singleton_groups_take_the_q_of_their_sample_without_a_gather(rows, n_usable):
    # every sample its own group (group = 0 .. n - 1): the q-values and the cut at a
    # level are those of the gather into groups and back
    p = np.array([r[0] for r in rows])
    tested = Pass(
        k=np.array([r[1] for r in rows], dtype=np.int64),
        explained=np.zeros(len(rows), dtype=np.int64),
        score_rank=np.zeros(len(rows), dtype=np.int64),
        score=np.zeros(len(rows)),
        n_ge=np.array([r[1] + 2 for r in rows], dtype=np.int64),
        p=p,
        reason=np.zeros(len(rows), dtype=np.int8),
        n_null=n_usable,
        own=np.array([r[2] for r in rows]),
    )
    group = np.arange(len(rows), dtype=np.int64)
    assert singletons(group)
    fast = group_q(tested, group, n_usable), group_q_below(p, group, 0.25)
    with mock.patch("dflash_diag.samples.decode.singletons", lambda g: False):
        slow = group_q(tested, group, n_usable), group_q_below(p, group, 0.25)
    assert np.array_equal(fast[0][0], slow[0][0], equal_nan=True)
    assert fast[0][1] == slow[0][1]
    assert fast[1].tolist() == slow[1].tolist()
    assert not singletons(np.array([0, 0, 1])) and not singletons(np.array([-1, 0, 1]))


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5)), max_size=80),
    st.integers(1, 9),
    st.sampled_from([np.uint64, np.int64]),
)
def test_repeated_keys_screened_by_their_low_bits_are_the_duplicated_ones(pairs, chunk, dtype):
    # keys that share their low 16 bits with a repeated one but are not repeated must
    # not slip through the screen, and none is lost at a chunk's edge
    key = np.array([(hi << 40) + lo for hi, lo in pairs], dtype=dtype)
    want = pd.Series(key).duplicated(keep=False).to_numpy()
    with small_chunks(chunk):
        got = _repeated(key)
    assert got.tolist() == want.tolist()


def test_many_repeated_keys_are_searched_without_the_screen():
    key = np.random.default_rng(0).integers(0, 6000, 20000).astype(np.uint64) << np.uint64(20)
    want = pd.Series(key).duplicated(keep=False).to_numpy()
    assert _repeated(key).tolist() == want.tolist()


@settings(max_examples=examples(120), deadline=None)
@given(runs(), st.integers(0, 2), st.integers(0, 2**16))
def test_a_retest_of_some_samples_is_their_figures_over_the_points_left(run, allow_low, seed):
    # the touched samples renumbered 0 .. len(ids) - 1: each one's count, score rank and
    # points reaching its score, over its usable entries not lost, as a loop gives them
    m, z = run
    rng = np.random.default_rng(seed)
    app = appearances(m, z)
    ids = np.flatnonzero(rng.random(m.n_samples) < 0.5)
    lost = np.flatnonzero(rng.random(m.n_entries) < 0.3)
    k, score_rank, at_least = _retest(m, app, ids, lost, allow_low)
    point = m.point_of_entry()
    zs = np.append(app.z_sorted, np.inf)
    for j, s in enumerate(ids):
        mine = [e for e in np.flatnonzero(m.samples == s) if e not in set(lost.tolist())]
        ranks = sorted(int(app.rank_of_point[point[e]]) for e in mine)
        ranks = [r for r in ranks if r >= 0]
        want = ranks[allow_low] if len(ranks) > allow_low else app.n_usable
        assert (k[j], score_rank[j]) == (len(ranks), want)
        assert at_least[j] == sum(zs[r] >= zs[want] for r in ranks)


@settings(max_examples=examples(100), deadline=None)
@given(
    n_samples=st.integers(1, 60),
    n_points=st.integers(1, 12),
    seed=st.integers(0, 10_000),
    allow_low=st.integers(0, 2),
    min_appearances=st.integers(1, 3),
    with_excess=st.booleans(),
)
def test_evidence_left_untested_is_the_evidence(
    n_samples, n_points, seed, allow_low, min_appearances, with_excess
) -> None:
    """Each sample in one point at most: the evidence is known without its table, and
    the table made when read, the names and the separability are the plain path's."""
    from dflash_diag.samples import evidence, name_culprits
    from dflash_diag.spikes.culprits import SampleFindings, ordinary_elsewhere, separable

    rng = np.random.default_rng(seed)
    who = rng.permutation(n_samples)[: rng.integers(0, n_samples + 1)]
    point = np.sort(rng.integers(0, n_points, who.size))
    m = Membership.from_entries(point, who, n_samples=n_samples, n_points=n_points)
    z = rng.choice([np.nan, np.inf, -1.0, 0.5, 2.5, 4.0], n_points)
    excess = rng.normal(size=n_points) if with_excess else None
    opts = SampleOptions(allow_low=allow_low, min_appearances=min_appearances)
    fast = sample_evidence(m, z, excess=excess, options=opts)
    with mock.patch.object(evidence, "each_sample_once", lambda _: False):
        plain = sample_evidence(m, z, excess=excess, options=opts)
    assert not plain.untested
    assert fast.untested == (max(min_appearances, allow_low + 1) >= 2)
    for name in ("ground", "n_points", "n_usable", "n_tested", "n_null", "rounds", "method"):
        assert getattr(fast, name) == getattr(plain, name), name
    pd.testing.assert_frame_equal(name_culprits(fast), name_culprits(plain), check_exact=True)
    assert separable(fast, m, z) == separable(plain, m, z)
    found = [SampleFindings(e, name_culprits(e), m, None, "", False) for e in (fast, plain)]
    for p in range(n_points):
        assert ordinary_elsewhere(found[0], p) == ordinary_elsewhere(found[1], p)
    pd.testing.assert_frame_equal(fast.table, plain.table, check_exact=True)


def test_a_sample_seen_twice_is_not_left_untested() -> None:
    from dflash_diag.samples.evidence import each_sample_once

    assert each_sample_once(Membership.from_entries([0, 1], [3, 2], n_samples=5))
    assert not each_sample_once(Membership.from_entries([0, 1], [3, 3], n_samples=5))
