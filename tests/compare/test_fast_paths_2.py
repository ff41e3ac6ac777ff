"""More compare fast paths against their plain versions, bit for bit: the quantile band's
order statistics without a Python call per column."""

from __future__ import annotations

import math
import warnings

import numpy as np
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


@settings(max_examples=400, deadline=None)
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


@settings(max_examples=100, deadline=None)
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


@settings(max_examples=400, deadline=None)
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


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 400), st.integers(1, 70), st.integers(0, 2**32 - 1))
def test_rolling_median_of_noise_scales_equals_one_at_a_time(n: int, size: int, seed: int) -> None:
    """Scales as the band smooths them: positive, rounded (ties), some exactly 0."""
    rng = np.random.default_rng(seed)
    a = np.maximum(np.round(rng.normal(0.05, 0.03, n), 3), 0.0)
    assert same_bits(rolling_median(a, size), plain_rolling_median(a, size))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 60), st.integers(0, 60), st.integers(0, 60), st.booleans())
def test_a_phase_as_a_slice_selects_what_its_mask_does(
    before: int, inside: int, after: int, holes: bool
) -> None:
    mask = np.r_[np.zeros(before, bool), np.ones(inside, bool), np.zeros(after, bool)]
    if holes and inside > 2:
        mask[before + 1] = False
    rows = runs._rows(mask)
    a = np.arange(mask.size) * 1.5
    assert same_bits(a[rows], a[mask])
    assert isinstance(rows, slice) == (inside > 0 and not (holes and inside > 2))


@settings(max_examples=200, deadline=None)
@given(st.lists(cell, max_size=30), st.integers(0, 2**32 - 1))
def test_present_points_equal_the_selection(cells: list, seed: int) -> None:
    v = np.array(cells, dtype=float)
    x = np.random.default_rng(seed).normal(size=v.size)
    ok = np.isfinite(x) & np.isfinite(v)
    got = runs._present(x, v)
    assert same_bits(got[0], x[ok]) and same_bits(got[1], v[ok])
    assert got[0] is not x and got[1] is not v
