"""The measured ground's fast paths against their plain ones: each sorts less, and each
must give the same table to the bit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import dflash_diag.samples.measured as measured
from dflash_diag.samples import Membership, SampleOptions, measured_evidence
from dflash_diag.samples.measured import FEW_LENGTHS, _cell_medians, order_within

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
@given(st.lists(st.tuples(st.integers(0, 40), VALUES.filter(lambda v: v == v)), min_size=1))
def test_cell_medians_are_pandas_group_by(pairs):
    code = np.array([c for c, _ in pairs], dtype=np.int64)
    values = np.array([v for _, v in pairs], dtype=np.float64)
    size, med = _cell_medians(code, values)
    g = pd.Series(values).groupby(code, sort=False)
    assert size.tolist() == g.transform("size").tolist()
    assert med.tolist() == g.transform("median").tolist()


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
