"""The measured ground's fast paths against their plain ones: each sorts less, and each
must give the same table to the bit."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pandas as pd
import pytest
from budget import examples
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import dflash_diag.samples.measured as measured
from dflash_diag.samples import Membership, SampleOptions, measured_evidence
from dflash_diag.samples.measured import FEW_LENGTHS, order_within

VALUES = st.sampled_from([np.nan, -0.0, 0.0, 1.0, -2.5]) | st.floats(-1e9, 1e9)


@settings(max_examples=examples(80), deadline=None)
@given(
    runs=st.lists(
        st.tuples(st.integers(1, 9), st.lists(VALUES, min_size=9, max_size=9)),
        min_size=1,
        max_size=30,
    ),
    gaps=st.integers(1, 3),
)
def test_order_within_runs_of_sorted_groups_is_lexsort(runs, gaps):
    # a membership's entries, point by point: each run of one group sorted alone
    group = np.concatenate([np.full(n, gaps * i) for i, (n, _) in enumerate(runs)])
    values = np.concatenate([np.array(v[:n]) for n, v in runs])
    assert order_within(group, values).tolist() == np.lexsort((values, group)).tolist()


def test_order_within_many_run_lengths_takes_the_whole_sorts():
    # more distinct run lengths than FEW_LENGTHS: the plain sorts, the same order
    lengths = np.arange(1, FEW_LENGTHS + 3)
    group = np.repeat(np.arange(lengths.size), lengths)
    values = np.random.default_rng(0).normal(size=group.size).round(1)
    assert measured._within_runs(group, values) is None
    assert order_within(group, values).tolist() == np.lexsort((values, group)).tolist()


@settings(max_examples=examples(80), deadline=None)
@given(
    sizes=st.lists(st.integers(0, 12), min_size=1, max_size=40),
    seed=st.integers(0, 2**32 - 1),
    nan_share=st.sampled_from([0.0, 0.2, 0.7]),
    min_entries=st.integers(0, 4),
    chunk=st.sampled_from([3, 7, 2**20]),
)
def test_point_medians_by_row_sorts_are_the_order_path(sizes, seed, nan_share, min_entries, chunk):
    # points of a few sizes (empty ones too), NaN losses, ties, chunks cutting a size's
    # rows anywhere: the row sorts give each point's median as the order path does
    assume(sum(sizes) > 0)  # (the order path needs an entry)
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    m = Membership(offsets, rng.integers(0, 50, int(offsets[-1])), 50)
    loss = rng.choice(np.array([-0.5, 0.0, 1.0, 2.25]), m.n_entries) + rng.integers(
        0, 2, m.n_entries
    ) * rng.normal(size=m.n_entries)
    loss[rng.random(loss.size) < nan_share] = np.nan
    with patch("dflash_diag.arrays.CHUNK", chunk):
        got = measured.point_medians(m, loss, min_entries)
    want = measured._medians_by_order(m, loss, max(min_entries, 1))
    assert np.array_equal(got, want, equal_nan=True)


def test_point_medians_of_many_sizes_take_the_order_path():
    sizes = np.arange(1, FEW_LENGTHS + 3)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    m = Membership(offsets, np.zeros(int(offsets[-1]), dtype=np.int64), 1)
    loss = np.random.default_rng(1).normal(size=m.n_entries)
    want = [np.median(loss[a:b]) for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
    assert np.allclose(measured.point_medians(m, loss, 1), want, rtol=0, atol=1e-15)


def against_kind_by_pandas(m: Membership, r: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """Step 2 as written: pandas' group-by medians of every level, then the kind's MAD."""
    point = m.point_of_entry()
    window = (point * measured.WINDOWS) // max(m.n_points, 1)
    tokens = m.tokens if m.tokens is not None else np.ones(r.size)
    lbin = np.floor(2 * np.log2(np.maximum(tokens, 1.0))).astype(np.int64)
    good = np.isfinite(r)
    k = kind[m.samples]
    frame = pd.DataFrame({"k": k[good], "w": window[good], "l": lbin[good], "r": r[good]})
    center = np.full(int(good.sum()), np.nan)
    for keys in (["k", "l", "w"], ["k", "w"], ["k"]):
        g = frame.groupby(keys, sort=False)["r"]
        size = g.transform("size").to_numpy()
        med = g.transform("median").to_numpy()
        fill = np.isnan(center) & ((size >= measured.MIN_CELL) | (keys == ["k"]))
        center[fill] = med[fill]
    d = frame["r"].to_numpy() - center
    mad = pd.Series(np.abs(d)).groupby(frame["k"].to_numpy()).transform("median").to_numpy()
    out = np.full(r.size, np.nan)
    out[good] = d / np.where(mad > 0, 1.4826 * mad, np.nan)
    return out


@settings(max_examples=examples(60), deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(5, 300),
    per=st.integers(2, 40),
    n_kinds=st.integers(1, 4),
    nan_share=st.sampled_from([0.0, 0.1, 0.6]),
    rounded=st.booleans(),
)
def test_cells_against_their_kind_are_pandas_group_by(seed, n, per, n_kinds, nan_share, rounded):
    # cells of every size (under and over MIN_CELL), ties (rounded r), NaN r, kinds
    rng = np.random.default_rng(seed)
    m = _shuffled(rng, n, 3, per)
    r = rng.normal(size=m.n_entries)
    r = r.round(1) if rounded else r
    r[rng.random(r.size) < nan_share] = np.nan
    kind = rng.integers(0, n_kinds, n)
    got = measured._against_kind(m, r, kind)
    assert np.array_equal(got, against_kind_by_pandas(m, r, kind), equal_nan=True)


def _shuffled(rng: np.random.Generator, n: int, epochs: int, per: int) -> Membership:
    """Epochs of a shuffled dataset cut into points of ``per`` (the last one shorter)."""
    samples = np.concatenate([rng.permutation(n) for _ in range(epochs)])
    n_points = -(-samples.size // per)
    offsets = np.minimum(np.arange(n_points + 1) * per, samples.size)
    tokens = rng.integers(1, 3000, n)[samples].astype(np.float64)
    return Membership(offsets.astype(np.int64), samples.astype(np.int32), n, tokens)


@pytest.mark.parametrize("allow_low", [0, 1, 3])
@settings(max_examples=examples(15), deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(40, 400),
    epochs=st.integers(2, 6),
    per=st.integers(3, 16),
    nan_share=st.sampled_from([0.0, 0.05, 0.5]),
    with_kinds=st.booleans(),
)
def test_dense_per_sample_table_is_the_frame_path(
    allow_low, seed, n, epochs, per, nan_share, with_kinds
):
    rng = np.random.default_rng(seed)
    m = _shuffled(rng, n, epochs, per)
    loss = rng.normal(2.0, 0.3, n)[m.samples] + rng.normal(0.0, 0.2, m.n_entries)
    loss[rng.random(loss.size) < nan_share] = np.nan
    kinds = rng.integers(-1, 3, n) if with_kinds else None
    opts = SampleOptions(allow_low=allow_low)
    try:
        fast = measured_evidence(m, loss, opts, kinds=kinds)
    except Exception as err:  # (too few finite losses: both paths refuse alike)
        with pytest.raises(type(err)):
            _plain(m, loss, opts, kinds)
        return
    plain = _plain(m, loss, opts, kinds)
    pd.testing.assert_frame_equal(fast.table, plain.table, check_exact=True)


def _plain(m, loss, opts, kinds):
    real = measured.windows
    measured.windows = lambda samples, n: None
    try:
        return measured_evidence(m, loss, opts, kinds=kinds)
    finally:
        measured.windows = real


@settings(max_examples=examples(60), deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    tokens=st.sampled_from(["none", "whole", "fractional", "zeros"]),
)
def test_entry_share_is_share_of_every_entry(seed, tokens):
    rng = np.random.default_rng(seed)
    n_points, n = int(rng.integers(1, 30)), int(rng.integers(1, 50))
    point = rng.integers(-1, n_points, int(rng.integers(0, 200)))
    sample = rng.integers(0, n, point.size)
    tok = {
        "none": None,
        "whole": rng.integers(0, 5, point.size).astype(np.float64),
        "fractional": rng.random(point.size) * 3,
        "zeros": np.zeros(point.size),
    }[tokens]
    m = Membership.from_entries(point, sample, n, n_points, tokens=tok)
    got, want = m.entry_share(), m.share_of(np.arange(m.n_entries))
    assert got.tolist() == want.tolist() or np.array_equal(got, want, equal_nan=True)


def test_a_cell_of_exactly_min_cell_entries_is_its_own_centre():
    # each stretch (one point here) holds MIN_CELL short samples and 5 long, harder ones:
    # the short ones' cell is just big enough to be its own centre
    short, long_ = measured.MIN_CELL, 5
    per = short + long_
    n_points = measured.WINDOWS
    offsets = np.arange(n_points + 1, dtype=np.int64) * per
    samples = np.arange(n_points * per, dtype=np.int32)
    tokens = np.tile(np.r_[np.full(short, 100.0), np.full(long_, 3000.0)], n_points)
    m = Membership(offsets, samples, samples.size, tokens)
    rng = np.random.default_rng(0)
    r = rng.normal(size=samples.size) + 5.0 * (tokens > 1000)
    kind = np.zeros(samples.size, dtype=np.int64)
    got = measured._against_kind(m, r, kind)
    assert np.array_equal(got, against_kind_by_pandas(m, r, kind), equal_nan=True)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(VALUES | st.sampled_from([1.0, 2.0, 2.0]), min_size=1, max_size=60))
def test_first_at_or_above_is_a_search_of_the_sorted_values(values):
    x = np.array(values, dtype=np.float64)
    want = np.searchsorted(np.sort(x), x, side="left")
    assert measured._first_at_or_above(x).tolist() == want.tolist()


@settings(max_examples=examples(60), deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 60),
    epochs=st.integers(1, 5),
    shuffled=st.booleans(),
    nan_share=st.sampled_from([0.0, 0.3, 1.0]),
)
def test_sample_medians_are_pandas_group_by_median(seed, n, epochs, shuffled, nan_share):
    # epochs of a permutation (the windows' table) or entries drawn at random (the
    # order path), NaN, infinities, signed zeros and ties among the values
    rng = np.random.default_rng(seed)
    if shuffled:
        samples = np.concatenate([rng.permutation(n) for _ in range(epochs)])
    else:
        samples = rng.integers(0, n, n * epochs)
    values = rng.choice(np.array([-0.0, 0.0, 1.5, np.inf, -np.inf, 2.0]), samples.size)
    values = np.where(rng.random(samples.size) < 0.5, rng.normal(size=samples.size), values)
    values[rng.random(samples.size) < nan_share] = np.nan
    want = np.full(n, np.nan)
    per = pd.Series(values).groupby(samples).median()
    want[per.index.to_numpy()] = per.to_numpy()
    got = measured.sample_medians(samples, values, n)
    assert np.array_equal(got, want, equal_nan=True)
