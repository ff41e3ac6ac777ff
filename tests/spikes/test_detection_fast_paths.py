"""The detection side's fast paths give the numbers of the plain code they replace.

Each plain reference below is the computation as first written (``np.median`` per
window, one tree query per point, a stable argsort to pack neighbours, fresh arrays in
every IRLS pass); the fast path must equal it exactly, NaN for NaN, on random inputs
with ties, NaNs, short series and windows cut at the ends.
"""

from __future__ import annotations

import numpy as np
import pytest
from budget import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dflash_diag.spikes.calibrate import t_quantiles_of_df
from dflash_diag.spikes.detect import log_interval
from dflash_diag.spikes.model import _huber
from dflash_diag.spikes.neighbours import neighbour_values
from dflash_diag.spikes.windows import (
    MIN_LINE_HALF,
    median_of,
    median_rows,
    row_mad,
    row_median,
    trend_baseline,
)
from dflash_diag.stattests import t_quantiles


def same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal values, shapes and dtypes; NaN where the other has NaN."""
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


# Values from a few levels (ties), a continuous range and NaN.
values = st.one_of(
    st.sampled_from([0.0, 1.0, 2.0, 2.5]), st.floats(-1e3, 1e3, width=64), st.just(np.nan)
)
finite_values = st.one_of(st.sampled_from([0.0, 1.0, 2.0, 2.5]), st.floats(-1e3, 1e3))


def plain_level(w: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """The windows' robust-line median and MAD, one ``np.median`` per quantity."""
    k = w.shape[1]
    half = k // 2
    if half >= MIN_LINE_HALF:
        gap = float(np.median(rel[k - half :]) - np.median(rel[:half]))
        slope = (np.median(w[:, k - half :], axis=1) - np.median(w[:, :half], axis=1)) / gap
        proj = w - slope[:, None] * rel[None, :]
    else:
        proj = w
    med = np.median(proj, axis=1)
    mad = np.median(np.abs(proj - med[:, None]), axis=1)
    return np.column_stack([med, mad])


def plain_trend_baseline(x: np.ndarray, window: int, centred: bool) -> np.ndarray:
    """:func:`trend_baseline` window by window, ``(n, 2)``."""
    n = x.shape[0]
    out = np.full((n, 2), np.nan)
    h = max(1, window // 2)
    for i in range(n):
        if not centred:
            lo = max(0, i - window)
            rel = np.arange(lo - i, 0, dtype=float)
            w = x[lo:i]
        else:
            lo, hi = max(0, i - h), min(n, i + 1 + h)
            rel = np.concatenate([np.arange(lo - i, 0), np.arange(1, hi - i)]).astype(float)
            w = np.concatenate([x[lo:i], x[i + 1 : hi]])
        if w.size:
            out[i] = plain_level(w[None, :], rel)[0]
    return out


@settings(max_examples=examples(200), deadline=None)
@given(
    x=arrays(np.float64, st.integers(0, 140), elements=values),
    window=st.integers(2, 40),
    centred=st.booleans(),
)
@example(x=np.arange(30, dtype=float) % 4, window=12, centred=False)  # a line, ties
@example(x=np.ones(25), window=24, centred=True)  # every window cut at the ends
@example(x=np.r_[np.ones(20), np.nan, np.ones(20)], window=20, centred=True)
def test_trend_baseline_equals_the_window_by_window_medians(x, window, centred):
    med, mad = trend_baseline(x, window, centred)
    want = plain_trend_baseline(x, window, centred)
    same(med, want[:, 0])
    same(mad, want[:, 1])


@pytest.mark.slow  # (4 s in the local loop: the plain baseline of up to 3000 points)
@settings(max_examples=examples(60), deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(300, 3000), window=st.sampled_from([20, 50]))
def test_trend_baseline_over_many_blocks_equals_the_plain_one(seed, n, window):
    """Blocks of full windows (small ones here) join without a seam."""
    import dflash_diag.spikes.windows as windows

    rng = np.random.default_rng(seed)
    x = np.round(2 + 0.01 * np.arange(n) * rng.normal() + rng.normal(0, 0.05, n), 3)
    block = windows.LEVEL_BLOCK
    try:
        windows.LEVEL_BLOCK = int(rng.integers(window, 40 * window))
        for centred in (False, True):
            med, mad = trend_baseline(x, window, centred)
            want = plain_trend_baseline(x, window, centred)
            same(med, want[:, 0])
            same(mad, want[:, 1])
    finally:
        windows.LEVEL_BLOCK = block


@settings(max_examples=examples(300), deadline=None)
@given(
    w=arrays(
        np.float64,
        st.tuples(st.integers(0, 30), st.integers(1, 60)),
        elements=st.one_of(values, st.sampled_from([np.inf, -np.inf, -0.0])),
    )
)
def test_median_rows_equals_numpy_median(w):
    with np.errstate(invalid="ignore"):  # (inf - inf in both)
        same(median_rows(w), np.median(w, axis=1))
        same(row_median(w), np.median(w, axis=1))
        want_mad = np.median(np.abs(w - np.median(w, axis=1, keepdims=True)), axis=1)
        same(row_mad(w), want_mad)


@settings(max_examples=examples(300), deadline=None)
@given(
    v=arrays(
        np.float64,
        st.integers(1, 200),
        elements=st.one_of(values, st.sampled_from([np.inf, -np.inf])),
    )
)
@example(v=np.array([np.nan]))
@example(v=np.array([1.0, np.nan]))
def test_median_of_equals_numpy_median(v):
    with np.errstate(invalid="ignore"):
        want = float(np.median(v))
        got = median_of(v)
    assert got == want or (np.isnan(got) and np.isnan(want))


def plain_neighbour_values(design, y, groups, k=10):
    """One tree query per point and a stable argsort to pack the usable neighbours."""
    from scipy.spatial import cKDTree

    ok = np.isfinite(y) & np.isfinite(design).all(axis=1)
    out = np.full((y.shape[0], k), np.nan)
    if ok.sum() <= k + 1:
        return out
    x = design[ok]
    sd = x.std(axis=0)
    x = (x[:, sd > 0] - x[:, sd > 0].mean(axis=0)) / sd[sd > 0]
    yy, gg = y[ok], groups[ok]
    _, counts = np.unique(gg, return_counts=True)
    q = min(k + int(counts.max()), int(ok.sum()))
    _, idx = cKDTree(x).query(x, k=q)
    same_group = gg[idx] == gg[:, None]
    vals = np.where(same_group, np.nan, yy[idx])
    usable = (np.cumsum(~same_group, axis=1) <= k) & ~same_group
    order = np.argsort(~usable, axis=1, kind="stable")[:, :k]
    packed = np.take_along_axis(np.where(usable, vals, np.nan), order, axis=1)
    out[ok, : packed.shape[1]] = packed
    return out


@settings(max_examples=examples(150), deadline=None)
@given(
    n=st.integers(0, 120),
    dims=st.integers(1, 3),
    levels=st.integers(1, 12),
    n_groups=st.integers(1, 200),
    nan_share=st.sampled_from([0.0, 0.1, 0.5]),
    k=st.integers(1, 12),
    seed=st.integers(0, 10_000),
)
def test_neighbour_values_equal_one_query_per_point(n, dims, levels, n_groups, nan_share, k, seed):
    """Few distinct places (many ties, many points at one place), recurring groups,
    missing regressors and residuals, fewer points than neighbours."""
    rng = np.random.default_rng(seed)
    design = rng.integers(0, levels, (n, dims)).astype(float) * 0.37
    design[rng.random((n, dims)) < nan_share / 2] = np.nan
    y = np.round(rng.normal(size=n), 2)
    y[rng.random(n) < nan_share / 2] = np.nan
    groups = rng.integers(0, n_groups, n)
    try:
        want = plain_neighbour_values(design, y, groups, k)
    except IndexError:  # no regressor varies: the tree cannot be built, in both
        with pytest.raises(IndexError):
            neighbour_values(design, y, groups, k)
        return
    got = neighbour_values(design, y, groups, k)
    ok = np.isfinite(y) & np.isfinite(design).all(axis=1)
    if ok.any() and (design[ok].std(axis=0) > 0).sum() == 1:  # (a merge: ties in any order)
        got, want = np.sort(got, axis=1), np.sort(want, axis=1)
    same(got, want)


@settings(max_examples=examples(60), deadline=None)
@given(
    n=st.integers(1, 300),
    seed=st.integers(0, 10_000),
    digits=st.sampled_from([0, 1, 2, 12]),
    repeats=st.integers(1, 4),
    k=st.sampled_from([1, 3, 10]),
    columns=st.sampled_from([1, 1, 2]),
    missing=st.floats(0.0, 0.3),
)
def test_neighbours_merged_along_a_line_are_the_trees(
    n: int, seed: int, digits: int, repeats: int, k: int, columns: int, missing: float
) -> None:
    """Each point's neighbours' residuals are the tree's (as a set: ties in distance in
    any order; on two regressors, the tree's own, in its order), with values tied
    often (few digits) and batches coming back (groups of several points)."""
    rng = np.random.default_rng(seed)
    design = np.round(np.exp(rng.standard_normal((n, columns))), digits)
    design[rng.random(n) < missing, 0] = np.nan
    y = rng.standard_normal(n)
    groups = rng.integers(0, max(1, n // repeats), n) if repeats > 1 else np.arange(n)
    try:
        plain = plain_neighbour_values(design, y, groups, k)
    except IndexError:  # no regressor varies: the tree cannot be built, in both
        with pytest.raises(IndexError):
            neighbour_values(design, y, groups, k)
        return
    fast = neighbour_values(design, y, groups, k)
    if columns == 1:
        fast, plain = np.sort(fast, axis=1), np.sort(plain, axis=1)
    assert np.array_equal(fast, plain, equal_nan=True)


def plain_huber(x, y, iters=30):
    """The IRLS with ``np.median`` and fresh arrays in every pass."""
    n, k = x.shape
    a = np.column_stack([np.ones(n), x])
    pen = np.eye(k + 1) * 1e-3 * n
    pen[0, 0] = 0.0
    w = np.ones(n)
    beta = np.zeros(k + 1)
    for _ in range(iters):
        aw = a * w[:, None]
        beta_new = np.linalg.solve(a.T @ aw + pen, aw.T @ y)
        r = y - a @ beta_new
        s = 1.4826 * np.median(np.abs(r - np.median(r)))
        s = s if s > 0 else (np.std(r) or 1.0)
        w = np.minimum(1.0, 1.345 * s / np.maximum(np.abs(r), 1e-300))
        if np.allclose(beta_new, beta, rtol=1e-8, atol=1e-12):
            beta = beta_new
            break
        beta = beta_new
    return float(beta[0]), beta[1:]


@settings(max_examples=examples(100), deadline=None)
@given(
    n=st.integers(2, 400),
    k=st.integers(1, 5),
    iters=st.sampled_from([1, 2, 3, 30]),  # (2, 3: stopped by the limit, unconverged)
    outliers=st.booleans(),
    exact=st.booleans(),
    zero=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_huber_equals_the_plain_irls(n, k, iters, outliers, exact, zero, seed):
    """Noisy, with gross outliers, or fitted exactly (MAD 0: the std fallback), or a
    metric of zeros (its std 0 too: the scale 1)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, k))
    y = x @ rng.normal(size=k) + (0.0 if exact else rng.standard_t(3, n) * 0.1)
    if zero:
        y = np.zeros(n)
    if outliers:
        y[rng.integers(0, n, max(1, n // 20))] += 50.0
    b0, b = _huber(x, y, iters)
    w0, w = plain_huber(x, y, iters)
    assert b0 == w0 or (np.isnan(b0) and np.isnan(w0))
    same(b, w)


@settings(max_examples=examples(100), deadline=None)
@given(
    df=arrays(np.float64, st.integers(0, 300), elements=st.sampled_from([1.0, 1.8, 7.35, 18.375])),
    q=st.floats(0.5, 1 - 1e-9),
)
def test_t_quantiles_of_df_equal_one_per_point(df, q):
    same(t_quantiles_of_df(q, df), np.asarray(t_quantiles(q, df), dtype=np.float64))


@settings(max_examples=examples(200), deadline=None)
@given(steps=arrays(np.int64, st.integers(0, 200), elements=st.integers(-5, 10**12)))
@example(steps=np.array([50, 100, 100, 150, 260], dtype=np.int64))
def test_log_interval_equals_the_one_from_numpy_unique(steps):
    gaps = np.diff(np.unique(steps))
    gaps = gaps[gaps > 0]
    assert log_interval(steps) == (int(np.median(gaps)) if gaps.size else 1)
