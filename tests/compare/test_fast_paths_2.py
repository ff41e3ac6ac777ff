"""More compare fast paths against their plain versions, bit for bit: the quantile band's
order statistics without a Python call per column."""

from __future__ import annotations

import math
import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.compare.band import nan_order_statistic


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
