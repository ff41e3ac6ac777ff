"""The composition model's building blocks."""

from __future__ import annotations

import numpy as np
from budget import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dflash_diag.spikes import model
from dflash_diag.spikes.model import MIXTURE_BINS, MIXTURE_TOP, mixture_cells, sample_cells

token_lengths = arrays(
    np.int64,
    st.integers(1, 400),
    elements=st.one_of(st.integers(0, 12), st.integers(1, 9000), st.sampled_from([8192])),
)


@settings(max_examples=examples(150), deadline=None)
@given(lengths=token_lengths, n_cat=st.one_of(st.none(), st.integers(1, 4)), seed=st.integers(0, 9))
# a quantile exactly at a length's end: 40 x 1 token are half of all 80 tokens
@example(lengths=np.array([1] * 40 + [2] * 2 + [36], dtype=np.int64), n_cat=None, seed=0)
def test_cells_from_counts_per_length_equal_the_sorted_quantiles(lengths, n_cat, seed):
    """Integer token lengths take their bins from counts per length (no sort); the bins
    are the token-weighted quantiles the sorted path finds (a float array takes it)."""
    cats = None if n_cat is None else np.random.default_rng(seed).integers(0, n_cat, lengths.size)
    cells, n = sample_cells(lengths, cats)
    want, want_n = sample_cells(lengths.astype(np.float64), cats)
    assert n == want_n
    np.testing.assert_array_equal(cells, want)


@settings(max_examples=examples(100), deadline=None)
@given(
    lengths=token_lengths,
    n_cat=st.one_of(st.none(), st.integers(1, 4)),
    seed=st.integers(0, 9),
    free=st.sampled_from([0, 1 << 20]),
    picks=st.lists(st.integers(0, 399), max_size=60),
)
def test_coded_cells_read_each_samples_cell_and_length(lengths, n_cat, seed, free, picks):
    """The mixture cells behind one code a sample (``length x n_cat + category``) read
    every sample's cell and length as :func:`sample_cells` and the lengths give them,
    sample by sample and entry by entry; past :data:`CODES_FREE` codes (and more than
    one a sample) they are plain, the same."""
    from unittest import mock

    cats = None if n_cat is None else np.random.default_rng(seed).integers(0, n_cat, lengths.size)
    cells, n = sample_cells(lengths, cats)
    with mock.patch.object(model, "CODES_FREE", free):
        mixture = mixture_cells(lengths, cats)
    if free:  # (at most 9001 x 4 codes: coded, in int16 up to 2**15 codes; none free: plain)
        small = (int(lengths.max()) + 1) * (n_cat or 1) <= 1 << 15
        assert mixture.code is not None
        assert mixture.code.dtype == (np.int16 if small else np.int32)
    assert mixture.n_cells == n
    cell, tokens = mixture.at(slice(None))
    np.testing.assert_array_equal(cell, cells)
    assert tokens.dtype == np.float64
    np.testing.assert_array_equal(tokens, lengths.astype(np.float64))
    ids = np.array([p % lengths.size for p in picks], dtype=np.int64)
    cell, tokens = mixture.entries(ids).at(slice(None))
    np.testing.assert_array_equal(cell, cells[ids])
    np.testing.assert_array_equal(tokens, lengths[ids].astype(np.float64))


def test_cells_with_a_negative_category_are_plain():
    """A negative category code has no place in a code: the cells are then plain."""
    lengths, cats = np.array([3, 5, 5]), np.array([0, -1, 1])
    mixture = mixture_cells(lengths, cats)
    assert mixture.code is None
    np.testing.assert_array_equal(mixture.at(slice(None))[0], sample_cells(lengths, cats)[0])


def test_length_bins_hold_equal_shares_of_tokens():
    """The bins are token-weighted: the 1,000 samples of 10 tokens and the 10 of 1,000
    tokens each hold half the tokens, so the ten long ones get a bin of their own."""
    lengths = np.array([10] * 1000 + [1000] * 10, dtype=np.int64)
    cells, n = sample_cells(lengths, None)
    assert n <= MIXTURE_BINS + len(MIXTURE_TOP)
    assert len(set(cells[:1000])) == 1 and len(set(cells[1000:])) == 1
    assert cells[0] != cells[-1]


@settings(max_examples=examples(25), deadline=None)
@given(
    n=st.integers(60, 400),
    k=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
    outliers=st.integers(0, 10),
)
def test_a_fit_without_its_held_out_refits_predicts_the_same(n, k, seed, outliers):
    """``cross_validate=False`` (what ``samples`` asks) skips the K-fold refits only:
    the fit, its residual scale and its predictions are the same to the bit."""
    from dflash_diag.spikes.model import fit_model

    rng = np.random.default_rng(seed)
    design = rng.normal(size=(n, k))
    y = design @ rng.normal(size=k) + rng.standard_t(3, size=n)
    y[rng.choice(n, outliers, replace=False)] += 20.0
    names = tuple(f"x{j}" for j in range(k))
    quiet = np.ones(n, dtype=bool)
    full = fit_model(design, names, y, quiet)
    alone = fit_model(design, names, y, quiet, cross_validate=False)
    assert full is not None and alone is not None
    assert (alone.coef, alone.intercept, alone.resid_scale) == (
        full.coef,
        full.intercept,
        full.resid_scale,
    )
    assert np.array_equal(alone.predict(design), full.predict(design))
    assert (alone.r2, alone.r2_quiet) == (full.r2, full.r2_quiet)
    assert np.isnan(alone.r2_cv) and alone.r2_cv_folds == ()
    assert np.isfinite(full.r2_cv) and len(full.r2_cv_folds) > 0


def test_a_handful_of_outliers_is_left_out_of_r2_but_not_a_fifth_of_the_run():
    """Six gross outliers (a blow-up) say nothing about the other steps; a fifth of the
    points far out, each a batch holding one of the longest samples, are what the model
    is asked to explain, and R² is scored on them too."""
    rng = np.random.default_rng(0)
    n = 250
    y = rng.normal(0.0, 0.1, n)
    few = np.zeros(n, dtype=bool)
    few[rng.choice(n, 6, replace=False)] = True
    assert (~model.regular_points(np.where(few, 50.0, y))).sum() == 6
    many = rng.random(n) < 0.2  # the batches that hold one of the long samples
    y_many = y + 2.0 * many
    assert model.regular_points(y_many).all()
    design = np.column_stack([many + rng.normal(0.0, 0.01, n), rng.normal(0.0, 1.0, n)])
    fit = model.fit_model(design, ("long_share", "other"), y_many, np.ones(n, dtype=bool))
    assert fit is not None and fit.n_outliers == 0
    assert fit.r2 > 0.9 and fit.r2_cv > 0.9
