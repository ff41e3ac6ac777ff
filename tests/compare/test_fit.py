"""The band's robust local fit: the fast one against a plain per-window reference, the
grid of long logs, the milestone scan and the rolling median of the scale."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.compare import band
from dflash_diag.compare.band import first_reaching, local_fit, rolling_median


def reference_fit(x: np.ndarray, v: np.ndarray, window: int) -> tuple[np.ndarray, ...]:
    """``local_fit`` written out one window at a time, with ``lstsq`` (the docstring's
    recipe: quadratic in ``u = (x - x_i) / span``, three fits, bisquare weights from
    the median absolute residual, scale and ``[(D'D)^-1]_00``)."""
    n = x.size
    w = min(window, n)
    centre, scale, c00 = np.empty(n), np.empty(n), np.empty(n)
    for i in range(n):
        lo = min(max(i - w // 2, 0), n - w)
        wx, wv = x[lo : lo + w], v[lo : lo + w]
        span = float(np.ptp(wx)) or 1.0
        d = np.column_stack([np.ones(w), (wx - x[i]) / span, ((wx - x[i]) / span) ** 2])
        weights = np.ones(w)
        for _ in range(3):
            root = np.sqrt(weights)
            beta = np.linalg.lstsq(d * root[:, None], wv * root, rcond=None)[0]
            r = wv - d @ beta
            s = float(np.median(np.abs(r)))
            z = r / (6 * 1.4826 * s) if s > 0 else np.zeros(w)
            weights = np.where(np.abs(z) < 1, (1 - z * z) ** 2, 0.0)
        centre[i] = beta[0]
        scale[i] = 1.4826 * s * (math.sqrt(w / (w - 3)) if w > 3 else 1.0)
        c00[i] = np.linalg.inv(d.T @ d)[0, 0]
    return centre, scale, c00


@st.composite
def series(draw: st.DrawFn, most: int = 120) -> tuple[np.ndarray, np.ndarray]:
    """Logged steps (gaps of 1-5) and values: a trend, noise and a few spikes."""
    n = draw(st.integers(5, most))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = np.cumsum(rng.integers(1, 6, n)).astype(float) + draw(st.integers(0, 10**6))
    t = (x - x[0]) / max(float(np.ptp(x)), 1.0)
    v = draw(st.floats(-2, 2)) * t + draw(st.floats(-2, 2)) * t * t
    v = v + rng.normal(0, draw(st.floats(1e-3, 1.0)), n)
    spikes = rng.integers(0, n, draw(st.integers(0, 3)))
    v[spikes] += draw(st.floats(-10, 10))
    return x, v


@settings(max_examples=examples(60), deadline=None)
@given(series(), st.integers(5, 25))
def test_fast_fit_equals_the_reference(data: tuple[np.ndarray, np.ndarray], window: int) -> None:
    # Every point fitted (a log shorter than the grid's threshold): the same numbers as
    # the window-at-a-time reference, to rounding.
    x, v = data
    got = local_fit(x, v, window, grid_from=10**9)
    want = reference_fit(x, v, window)
    size = float(np.ptp(v)) + 1.0
    for g, r in zip(got, want, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-7, atol=1e-9 * size)


@settings(max_examples=examples(40), deadline=None)
@given(series(most=400), st.integers(5, 25), st.integers(10, 80))
def test_grid_points_are_fitted_exactly(
    data: tuple[np.ndarray, np.ndarray], window: int, grid_from: int
) -> None:
    # A long log is fitted on a grid: there, the numbers are those of fitting every point.
    x, v = data
    full = local_fit(x, v, window, grid_from=10**9)
    grid = local_fit(x, v, window, grid_from=grid_from)
    at = band._grid(x.size, min(window, x.size), grid_from)
    for g, f in zip(grid, full, strict=True):
        np.testing.assert_allclose(g[at], f[at], rtol=1e-12, atol=1e-12)


@settings(max_examples=examples(40), deadline=None)
@given(
    st.integers(40, 400),
    st.integers(5, 25),
    st.integers(10, 40),
    st.tuples(*[st.floats(-3, 3)] * 4),
)
def test_grid_reproduces_a_cubic_free_of_noise(
    n: int, window: int, grid_from: int, coef: tuple[float, float, float, float]
) -> None:
    # Between grid points the centre is the cubic through the fits' values and slopes:
    # where the metric is a quadratic, that is the curve itself; a cubic stays within
    # the local quadratics' own error of fitting every point.
    x = np.arange(n, dtype=float) * 10.0
    t = x / x[-1]
    a, b, c, _ = coef
    v = a + b * t + c * t * t
    full = local_fit(x, v, window, grid_from=10**9)[0]
    grid = local_fit(x, v, window, grid_from=grid_from)[0]
    np.testing.assert_allclose(grid, full, atol=1e-8 * (1 + abs(a) + abs(b) + abs(c)))


@settings(max_examples=examples(40), deadline=None)
@given(series(most=300), st.integers(5, 25), st.sampled_from([None, 15, 40]), st.booleans())
def test_milestone_scan_finds_the_first_crossing(
    data: tuple[np.ndarray, np.ndarray], window: int, grid_from: int | None, up: bool
) -> None:
    # Fitting only as far as the last level needs finds what the whole fit finds.
    x, v = data
    centre = local_fit(x, v, window, grid_from=grid_from)[0]
    levels = list(np.quantile(centre, [0.1, 0.5, 0.9])) + [float(centre.max()) + 1.0]
    want = []
    for level in levels:
        hit = centre >= level if up else centre <= level
        want.append(int(np.argmax(hit)) if hit.any() else None)
    old = band.SCAN_CHUNK
    band.SCAN_CHUNK = 7  # several pieces, even on a short series
    try:
        got = first_reaching(x, v, window, levels, up, grid_from=grid_from)
    finally:
        band.SCAN_CHUNK = old
    assert got == want


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=200),
    st.integers(1, 70),
)
def test_rolling_median_is_pandas_centred_rolling_median(values: list[float], size: int) -> None:
    a = np.array(values)
    want = pd.Series(a).rolling(size, center=True, min_periods=1).median().to_numpy()
    np.testing.assert_array_equal(rolling_median(a, size), want)


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=200),
    st.integers(1, 70),
    st.integers(0, 2**32 - 1),
)
def test_grid_medians_are_the_medians_of_the_grid_points_in_each_window(
    values: list[float], size: int, seed: int
) -> None:
    # A long log's scale is smoothed on its grid: per grid point, the median of the
    # scales fitted at the grid points within its window of ``size`` log points; with
    # every point on the grid, the rolling median itself.
    a = np.array(values)
    n = a.size
    every = np.arange(n)
    assert np.array_equal(band.grid_medians(every, a, size), rolling_median(a, size))
    rng = np.random.default_rng(seed)
    at = np.cumsum(rng.integers(1, 9, n))
    before, after = size // 2, size - 1 - size // 2
    want = [np.median(a[(at >= i - before) & (at <= i + after)]) for i in at]
    assert np.array_equal(band.grid_medians(at, a, size), np.array(want))


@settings(max_examples=examples(60), deadline=None)
@given(
    st.integers(30, 3000),
    st.integers(3, 25),
    st.integers(5, 300),
    st.integers(0, 2**32 - 1),
    st.sampled_from(["plain", "zeros", "nan"]),
)
def test_grid_medians_on_the_fits_grid_equal_each_windows_median(
    n: int, window: int, grid_from: int, seed: int, cells: str
) -> None:
    # The grid local_fit uses (evenly spaced, every point near the ends), where most
    # windows take the rank filter's path.
    at = band._grid(n, window, grid_from)
    rng = np.random.default_rng(seed)
    a = rng.random(at.size).round(2)
    if cells == "zeros":
        a[rng.integers(0, a.size, 5)] = -0.0
    elif cells == "nan":
        a[rng.integers(0, a.size, 2)] = np.nan
    size = 3 * window
    before, after = size // 2, size - 1 - size // 2
    with np.errstate(invalid="ignore"):
        want = [np.median(a[(at >= i - before) & (at <= i + after)]) for i in at]
    np.testing.assert_array_equal(band.grid_medians(at, a, size), np.array(want))


def test_long_noisy_log_on_the_grid_stays_near_the_full_fit() -> None:
    # The bound docs/performance.md states, on a log of uniform noise at 15 points per
    # grid step: band centre and edges on average within 0.15 of the band's half-width
    # of those of fitting every point, everywhere within 1, and a like run's points on
    # the same side of the band but for under 0.1% of them.
    rng = np.random.default_rng(3)
    n = 3000
    x, v = np.arange(1.0, n + 1), rng.random(n)
    exact_fit = band.local_fit

    def every_point(x: np.ndarray, v: np.ndarray, window: int, **kw) -> tuple:
        return exact_fit(x, v, window, grid_from=10**9, **kw)

    def on_grid(x: np.ndarray, v: np.ndarray, window: int, **kw) -> tuple:
        return exact_fit(x, v, window, grid_from=n // 15, **kw)

    got = {}
    for name, fit in (("full", every_point), ("grid", on_grid)):
        band.local_fit = fit  # type: ignore[assignment]
        try:
            got[name] = band.robust_band(x, v, 3.0, 21)
        finally:
            band.local_fit = exact_fit
    _, med, lo, hi = got["full"]
    half = (hi - lo) / 2
    for i in (1, 2, 3):
        dev = np.abs(got["grid"][i] - got["full"][i]) / half
        assert float(dev.mean()) < 0.15 and float(dev.max()) < 1.0, (i, dev.mean(), dev.max())
    like = rng.random(n)
    sides = [np.where(like > b[3], 2, np.where(like < b[2], 3, 1)) for b in got.values()]
    assert float(np.mean(sides[0] != sides[1])) < 0.001


@pytest.mark.parametrize("n", [5, 21, 22, 100])
def test_short_logs_fit_every_point(n: int) -> None:
    assert band._grid(n, min(21, n), None).size == n
