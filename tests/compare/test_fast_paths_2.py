"""More compare fast paths against their plain versions, bit for bit: the quantile band's
order statistics without a Python call per column."""

from __future__ import annotations

import math
import warnings

import numpy as np
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.compare import runs
from dflash_diag.compare.band import nan_order_statistic, rolling_median


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit (NaN is NaN, ``-0.0`` is not ``0.0``), same dtype and shape."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# (few distinct values: ties, both zeros, infinities and NaN in one column)
cell = st.sampled_from([math.nan, -0.0, 0.0, 1.0, -1.0, 2.5, math.inf, -math.inf, 1e-300])


@settings(max_examples=examples(400), deadline=None)
@given(
    st.integers(1, 12),
    st.integers(0, 30),
    st.data(),
    st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0, 1 / 3]),
    st.sampled_from(["lower", "higher", "nearest"]),
)
def test_order_statistics_equal_nanquantile(
    rows: int, cols: int, data: st.DataObject, q: float, method: str
) -> None:
    cells = data.draw(st.lists(cell, min_size=rows * cols, max_size=rows * cols))
    a = np.array(cells, dtype=float).reshape(rows, cols)
    with warnings.catch_warnings(record=True) as plain_warned:
        warnings.simplefilter("always")
        want = np.nanquantile(a, q, axis=0, method=method)
    with warnings.catch_warnings(record=True) as fast_warned:
        warnings.simplefilter("always")
        got = nan_order_statistic(a, q, method)
    assert same_bits(got, want)
    assert [str(w.message) for w in fast_warned] == [str(w.message) for w in plain_warned]


@settings(max_examples=examples(100), deadline=None)
@given(st.integers(5, 11), st.integers(1, 500), st.integers(0, 2**32 - 1))
def test_order_statistics_of_bands_equal_nanquantile(rows: int, cols: int, seed: int) -> None:
    """Band edges as the quantile band sees them: baselines that end early (NaN tails),
    edges clipped at 0."""
    rng = np.random.default_rng(seed)
    a = np.maximum(np.round(rng.normal(0.1, 0.2, (rows, cols)), 3), 0.0)
    for r in range(rows):
        a[r, rng.integers(0, cols + 1) :] = np.nan
    for q, method in ((0.1, "higher"), (0.9, "lower")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = np.nanquantile(a, q, axis=0, method=method)
            got = nan_order_statistic(a, q, method)
        assert same_bits(got, want)


def plain_rolling_median(a: np.ndarray, size: int) -> np.ndarray:
    """:func:`~dflash_diag.compare.band.rolling_median` with each cut-short window at the
    ends taken by ``np.median`` on its own."""
    from scipy.ndimage import rank_filter

    n, before = a.size, size // 2
    after = size - 1 - before
    mid = [size // 2] if size % 2 else [size // 2 - 1, size // 2]
    ranks = [rank_filter(a, r, size=size, mode="nearest") for r in mid]
    out = ranks[0] if len(ranks) == 1 else 0.5 * (ranks[0] + ranks[1])
    for i in [*range(min(before, n)), *range(max(n - after, 0), n)]:
        out[i] = np.median(a[max(i - before, 0) : i + after + 1])
    return out


wide = st.one_of(
    cell, st.floats(allow_nan=False), st.sampled_from([1e308, -1e308, 5e-324, -5e-324])
)


@settings(max_examples=examples(400), deadline=None)
@given(st.lists(wide, min_size=1, max_size=40), st.integers(1, 50))
def test_rolling_median_ends_in_one_sort_equal_one_at_a_time(cells: list, size: int) -> None:
    a = np.array(cells, dtype=float)
    with warnings.catch_warnings(record=True) as plain_warned:
        warnings.simplefilter("always")
        want = plain_rolling_median(a, size)
    with warnings.catch_warnings(record=True) as fast_warned:
        warnings.simplefilter("always")
        got = rolling_median(a, size)
    assert same_bits(got, want)
    assert [str(w.message) for w in fast_warned] == [str(w.message) for w in plain_warned]


@settings(max_examples=examples(100), deadline=None)
@given(st.integers(1, 400), st.integers(1, 70), st.integers(0, 2**32 - 1))
def test_rolling_median_of_noise_scales_equals_one_at_a_time(n: int, size: int, seed: int) -> None:
    """Scales as the band smooths them: positive, rounded (ties), some exactly 0."""
    rng = np.random.default_rng(seed)
    a = np.maximum(np.round(rng.normal(0.05, 0.03, n), 3), 0.0)
    assert same_bits(rolling_median(a, size), plain_rolling_median(a, size))


@settings(max_examples=examples(300), deadline=None)
@given(st.integers(0, 60), st.integers(0, 60), st.integers(0, 60), st.booleans())
def test_a_phase_as_a_slice_selects_what_its_mask_does(
    before: int, inside: int, after: int, holes: bool
) -> None:
    mask = np.r_[np.zeros(before, bool), np.ones(inside, bool), np.zeros(after, bool)]
    if holes and inside > 2:
        mask[before + 1] = False
    from dflash_diag.arrays import rows as rows_of

    rows = rows_of(mask)
    a = np.arange(mask.size) * 1.5
    assert same_bits(a[rows], a[mask])
    assert isinstance(rows, slice) == (inside > 0 and not (holes and inside > 2))


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(cell, max_size=30), st.integers(0, 2**32 - 1))
def test_present_points_equal_the_selection(cells: list, seed: int) -> None:
    v = np.array(cells, dtype=float)
    x = np.random.default_rng(seed).normal(size=v.size)
    ok = np.isfinite(x) & np.isfinite(v)
    got = runs._present(x, v)
    assert same_bits(got[0], x[ok]) and same_bits(got[1], v[ok])
    assert got[0] is not x and got[1] is not v


def slope_plain(x: np.ndarray, v: np.ndarray, scale: float) -> tuple[float, float] | None:
    """The Newey-West slope and its standard error as first written: copies of the
    finite points, a new array for each step."""
    from dflash_diag.compare.summary import MIN_SLOPE_POINTS, _lag_product

    ok = np.isfinite(x) & np.isfinite(v)
    x, v = x[ok] / scale, v[ok]
    n = int(x.size)
    if n < MIN_SLOPE_POINTS or np.ptp(x) == 0:
        return None
    xc = x - x.mean()
    sx, sxx = np.einsum("i->", xc), np.einsum("i,i->", xc, xc)
    xtx = np.array([[float(n), sx], [sx, sxx]])
    beta = np.linalg.solve(xtx, np.array([np.einsum("i->", v), np.einsum("i,i->", xc, v)]))
    e = v - (beta[0] + beta[1] * xc)
    bread = np.linalg.inv(xtx)
    lag = int(math.floor(4 * (n / 100) ** (2 / 9)))
    # (the variance as ``_slope_variance`` sums it: one series' autocovariances;
    # test_fast_paths_4.py holds that to the four sums of ``S`` first written)
    u = bread[1, 0] * e + bread[1, 1] * (xc * e)
    var = _lag_product(u, 0)
    for lag_i in range(1, min(lag, n - 1) + 1):
        var += 2 * (1 - lag_i / (lag + 1)) * _lag_product(u, lag_i)
    return float(beta[1]), float(math.sqrt(max(var, 0.0)))


@settings(max_examples=examples(200), deadline=None)
@given(
    st.integers(0, 400),
    st.integers(0, 2**32 - 1),
    st.sampled_from([0.0, 0.05]),
    st.sampled_from([1.0, 1000.0, 1e9]),
)
def test_slope_writing_over_its_arrays_is_the_plain_slope(
    n: int, seed: int, holes: float, scale: float
) -> None:
    from dflash_diag.compare import slope_with_ci

    rng = np.random.default_rng(seed)
    x = np.cumsum(rng.integers(1, 5, n)).astype(float)
    v = 2.0 + 1e-3 * x + rng.normal(size=n)
    v[rng.random(n) < holes] = math.nan
    x[rng.random(n) < holes] = math.inf
    x0, v0 = x.copy(), v.copy()
    # (a table's column: a strided view, as pandas gives a block's column)
    block = np.stack([x, v, x], axis=1)
    cols = (block[:, 0], block[:, 1])
    got = slope_with_ci(*cols, scale=scale)
    want = slope_plain(x0, v0, scale)
    assert (got.value, got.se) == ((None, None) if want is None else want)
    for off in (0, 1, 3):  # (views that start anywhere: a stretch after warmup)
        got, want = (
            slope_with_ci(x[off:], v[off:], scale=scale),
            slope_plain(x0[off:], v0[off:], scale),
        )
        assert same_bits(x, x0) and same_bits(v, v0)  # (the caller's arrays untouched)
        if want is None:
            assert got.value is None
        else:
            assert (got.value, got.se) == want


@settings(max_examples=examples(60), deadline=None)
@given(
    st.integers(8, 300),
    st.integers(0, 2**32 - 1),
    st.sampled_from([None, 7, 40]),
    st.sampled_from([3.0, 2, 0.5]),
    st.booleans(),
)
def test_band_worked_out_in_place_is_the_plain_band(
    n: int, seed: int, grid_from: int | None, k: float, negative: bool
) -> None:
    """robust_band's edges and the grid's cubic, worked out over arrays already made,
    equal the plain expressions bit for bit."""
    from dflash_diag.compare import band

    rng = np.random.default_rng(seed)
    x = np.cumsum(rng.integers(1, 4, n)).astype(float)
    v = np.round(1.0 + np.sin(x / 30.0) + rng.normal(0, 0.1, n), 4) - (2.0 if negative else 0.0)
    old = band.GRID_FROM
    band.GRID_FROM = grid_from or old
    try:
        got = band.robust_band(x, v, k, 9)
        centre, scale, c00 = band.local_fit(x, v, 9)
    finally:
        band.GRID_FROM = old
    # The scale: each fitted point's, the median of those fitted within 27 points
    # (13 before, 13 after), linear in between.
    at = band._grid(n, 9, grid_from or old)
    fitted = scale[at]  # (the grid's own scales: the line between them meets them)
    smooth = np.array([np.median(fitted[np.abs(at - i) <= 13]) for i in at])
    scale = smooth if at.size == n else np.interp(x, x[at], smooth)
    scale = np.maximum(scale, band.print_step(v))
    half = k * scale * np.sqrt(1.0 + c00)
    lo = centre - half
    if (v >= 0).all():
        lo = np.maximum(lo, 0.0)
    assert got is not None
    for a, b in zip(got, (x, centre, lo, centre + half), strict=True):
        assert same_bits(a, b)
    # The cubic between grid points, against its formula written out.
    xa = x[:: max(n // 7, 1)]
    if negative:  # (a repeated knot: an interval of length 0)
        xa = np.sort(np.concatenate([xa, xa[1:2]]))
    ya, da = rng.normal(size=xa.size), rng.normal(size=xa.size)
    if xa.size >= 2:
        pts = x[x <= xa[-1]]
        h = band._Hermite.of(xa, pts)
        j = np.clip(np.searchsorted(xa, pts, side="right") - 1, 0, xa.size - 2)
        w = xa[j + 1] - xa[j]
        w = np.where(w > 0, w, 1.0)
        t = (pts - xa[j]) / w
        t2, t3 = t * t, t * t * t
        basis = (2 * t3 - 3 * t2 + 1, (t3 - 2 * t2 + t) * w, 3 * t2 - 2 * t3, (t3 - t2) * w)
        assert same_bits(h.j, j)
        assert all(same_bits(a, b) for a, b in zip(h[1:], basis, strict=True))
        plain = h.y0 * ya[j] + h.d0 * da[j] + h.y1 * ya[j + 1] + h.d1 * da[j + 1]
        assert same_bits(h.at(ya, da), plain)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.booleans(), max_size=40))
def test_rows_select_what_the_mask_selects(mask: list) -> None:
    from dflash_diag.arrays import rows

    m = np.array(mask, dtype=bool)
    a = np.arange(m.size, dtype=float)
    r = rows(m)
    assert same_bits(a[r], a[m])
    idx = np.flatnonzero(m)
    assert isinstance(r, slice) == bool(idx.size and idx[-1] - idx[0] + 1 == idx.size)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(cell, min_size=0, max_size=30), st.integers(0, 2**32 - 1))
def test_a_phases_first_and_last_are_its_first_and_last_values(cells: list, seed: int) -> None:
    from dflash_diag.compare.band import BandAt
    from dflash_diag.compare.summary import summarise_phase

    v = np.array(cells, dtype=float)
    v[~np.isfinite(v)] = math.nan  # (the run's values: nan/inf are compared as absent)
    steps = np.cumsum(np.random.default_rng(seed).integers(1, 4, v.size))
    band = BandAt(np.zeros(v.size), np.full(v.size, -1.0), np.ones(v.size))
    s = summarise_phase("all", steps, v, band)
    has = np.isfinite(v)
    assert (s.first_step, s.last_step) == (
        (int(steps[has][0]), int(steps[has][-1])) if has.any() else (None, None)
    )
