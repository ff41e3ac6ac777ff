"""The band fit's normal matrices written in place, and its 3x3 solves with the plain
fit's factors made once a geometry, against their plain versions, bit for bit."""

from __future__ import annotations

import math

import numpy as np
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.compare import band
from dflash_diag.compare.band import _normal_matrix, _Windows, factor_3x3, solve_3x3

from .test_fast_paths_3 import same_bits
from .test_fast_paths_4 import window_systems


def same_wide(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal as values, NaN as NaN and each zero's sign too (``np.longdouble``'s bytes
    hold padding, which ``tobytes`` would compare)."""
    return (
        a.dtype == b.dtype
        and np.array_equal(a, b, equal_nan=True)
        and bool((np.signbit(a) == np.signbit(b)).all())
    )


def plain_normal_matrix(weights: np.ndarray, u: np.ndarray, u2: np.ndarray) -> np.ndarray:
    """``D'WD`` plus the ridge, as stacks of the moments."""
    wu, wu2 = weights * u, weights * u2
    m = [
        weights.sum(axis=1),
        wu.sum(axis=1),
        wu2.sum(axis=1),
        np.einsum("ij,ij->i", wu, u2),
        np.einsum("ij,ij->i", wu2, u2),
    ]
    ridge = 1e-12 * np.eye(3)
    return np.stack([np.stack(m[i : i + 3], axis=1) for i in range(3)], axis=1) + ridge


def plain_solve_3x3(a: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``solve_3x3`` written out plainly: the whole matrix widened, the answer stacked."""
    m = a.reshape(-1, 9).astype(np.longdouble)
    a00, a01, a02, a11, a12, a22 = (m[:, i] for i in (0, 1, 2, 4, 5, 8))
    l10, l20 = a01 / a00, a02 / a00
    t = a12 - l20 * a01
    d1 = a11 - l10 * a01
    l21 = t / d1
    d2 = a22 - l20 * a02 - l21 * t
    y = rhs.astype(np.longdouble)
    y1 = y[:, 1] - l10 * y[:, 0]
    x2 = (y[:, 2] - l20 * y[:, 0] - l21 * y1) / d2
    x1 = y1 / d1 - l21 * x2
    x0 = y[:, 0] / a00 - l10 * x1 - l20 * x2
    out = np.stack([x0, x1, x2], axis=1).astype(np.float64)
    weak = ~((d1 >= band.PIVOT_SHARE * a00) & (d2 >= band.PIVOT_SHARE * a00))
    if weak.any():
        out[weak] = np.linalg.solve(a[weak], rhs[weak][:, :, None])[:, :, 0]
    return out


@settings(max_examples=examples(100), deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(3, 41), st.sampled_from([0.0, 0.05, 0.4]))
def test_normal_matrices_written_in_place_equal_the_stacked_ones(
    seed: int, w: int, spikes: float
) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    u = np.sort(rng.uniform(-1, 1, (n, w)), axis=1)
    u[rng.random((n, w)) < 0.1] *= -0.0  # (signed zeros: the ridge's + 0.0 is kept)
    weights = np.where(rng.random((n, w)) < spikes, 0.0, rng.random((n, w)))
    assert same_bits(_normal_matrix(weights, u, u * u), plain_normal_matrix(weights, u, u * u))


@settings(max_examples=examples(100), deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(3, 41), st.sampled_from([0.0, 0.05, 0.4, 0.9]))
def test_solves_with_factors_made_before_equal_the_plain_solve(
    seed: int, w: int, spikes: float
) -> None:
    # (bisquare-weighted systems; many spikes leave windows nearly singular: LAPACK's rows)
    a, rhs = window_systems(seed, 40, w, spikes)
    with np.errstate(all="ignore"):
        want = plain_solve_3x3(a, rhs)
        assert same_bits(solve_3x3(a, rhs), want)
        assert same_bits(solve_3x3(a, rhs, factor_3x3(a)), want)


@settings(max_examples=examples(100), deadline=None)
@given(st.integers(4, 90), st.integers(3, 25), st.integers(0, 2**32 - 1), st.booleans())
def test_the_plain_fits_factors_are_those_of_their_matrices(
    n: int, window: int, seed: int, gaps: bool
) -> None:
    # (``_fit_windows`` solves its first round with them: tests/compare/test_fast_paths_3.py
    # holds it to the plain rounds, which factor each matrix afresh)
    rng = np.random.default_rng(seed)
    x = np.cumsum(rng.integers(1, 6, n) if gaps else np.ones(n)).astype(float)
    w = min(window, n)
    start = np.clip(np.arange(n) - w // 2, 0, n - w)
    win = _Windows.of(x, start, np.arange(n), w)
    if w < band.CLOSED_FORM_FROM:
        assert win.ldl is None  # (short windows: LAPACK's)
        return
    assert win.ldl is not None
    with np.errstate(all="ignore"):
        fresh = factor_3x3(win.plain)
    assert all(same_wide(a, b) for a, b in zip(win.ldl, fresh, strict=True))
    assert not math.isnan(float(win.c00[0]))
