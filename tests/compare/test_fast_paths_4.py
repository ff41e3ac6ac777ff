"""Compare's arithmetic that is not the plain version's to the bit (docs/performance.md,
*compare on long logs*): the band's 3x3 solves in closed form, and the slope's
Newey-West variance as one series' autocovariances.  Each is held to the plain version
within a relative 1e-12, and to an exact (``fractions``) or 64-bit-mantissa reference at
least as near as the plain version is."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.compare import band, summary
from dflash_diag.compare.band import _normal_matrix, solve_3x3

RTOL = 1e-12


def exact_solve(a: np.ndarray, rhs: np.ndarray) -> list[Fraction]:
    """``a^-1 rhs`` of one 3x3 system of floats, in exact rational arithmetic."""
    m = [[Fraction(float(a[i, j])) for j in range(3)] + [Fraction(float(rhs[i]))] for i in range(3)]
    for k in range(3):
        p = max(range(k, 3), key=lambda i: abs(m[i][k]))
        m[k], m[p] = m[p], m[k]
        for i in range(k + 1, 3):
            f = m[i][k] / m[k][k]
            m[i] = [x - f * y for x, y in zip(m[i], m[k], strict=True)]
    x = [Fraction(0)] * 3
    for i in (2, 1, 0):
        x[i] = (m[i][3] - sum(m[i][j] * x[j] for j in range(i + 1, 3))) / m[i][i]
    return x


def window_systems(seed: int, n: int, w: int, spikes: float) -> tuple[np.ndarray, np.ndarray]:
    """``n`` normal matrices and right-hand sides as a fit's weighted rounds make them:
    a window's offsets in ``[-1, 1]``, bisquare weights of noisy residuals."""
    rng = np.random.default_rng(seed)
    u = np.sort(rng.uniform(-1, 1, (n, w)), axis=1)
    u2 = u * u
    r = rng.normal(size=(n, w))
    r[rng.random((n, w)) < spikes] *= 50.0
    s = np.median(np.abs(r), axis=1, keepdims=True)
    z = r / (6 * band.MAD_SCALE * s)
    weights = np.where(np.abs(z) < 1, (1 - z * z) ** 2, 0.0)
    wv = 3.0 + 0.5 * u - 0.2 * u2 + 0.01 * r
    wwv = weights * wv
    rhs = np.stack(
        [wwv.sum(axis=1), np.einsum("ij,ij->i", wwv, u), np.einsum("ij,ij->i", wwv, u2)], axis=1
    )
    return _normal_matrix(weights, u, u2), rhs


@settings(max_examples=examples(100), deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(3, 41),
    st.sampled_from([0.0, 0.1, 0.3]),
)
def test_closed_form_solves_are_lapacks_within_1e_12_and_no_farther_from_exact(
    seed: int, w: int, spikes: float
) -> None:
    a, rhs = window_systems(seed, 8, w, spikes)
    got, lapack = solve_3x3(a, rhs), np.linalg.solve(a, rhs[:, :, None])[:, :, 0]
    size = np.abs(lapack).max(axis=1, keepdims=True)
    assert (np.abs(got - lapack) <= RTOL * size).all()
    for i in range(a.shape[0]):
        exact = exact_solve(a[i], rhs[i])
        for j in range(3):
            ulp = math.ulp(float(exact[j]))
            ours = abs(Fraction(got[i, j]) - exact[j])
            theirs = abs(Fraction(lapack[i, j]) - exact[j])
            # (rounded once from 64-bit-mantissa arithmetic: within half a unit in the last
            # place, and a hair more; LAPACK's float64 elimination is no nearer than that)
            assert ours <= max(theirs, Fraction(ulp) * Fraction(5, 8)), (i, j)


def test_closed_form_solves_are_nearer_exact_than_lapack_on_a_fits_systems() -> None:
    """Over a thousand systems of the benchmark's shape: the mean and the largest error,
    in units of the exact solution's last place, are no larger than LAPACK's."""
    a, rhs = window_systems(7, 1000, 21, 0.1)
    got, lapack = solve_3x3(a, rhs), np.linalg.solve(a, rhs[:, :, None])[:, :, 0]
    ours, theirs = [], []
    for i in range(a.shape[0]):
        exact = exact_solve(a[i], rhs[i])
        for j in range(3):
            ulp = Fraction(math.ulp(float(exact[j])))
            ours.append(float(abs(Fraction(got[i, j]) - exact[j]) / ulp))
            theirs.append(float(abs(Fraction(lapack[i, j]) - exact[j]) / ulp))
    assert np.mean(ours) <= np.mean(theirs) and max(ours) <= max(theirs)
    assert max(ours) <= 0.6  # (rounded once, from 64-bit mantissas: a hair over half)


def slope_variance_plain(e: np.ndarray, xc: np.ndarray, bread: np.ndarray, lag: int) -> float:
    """The slope's Newey-West variance as first written: ``(B S B)[1, 1]`` with ``S``'s four
    entries each a sum of one long ``einsum`` a lag."""
    cols = (e, xc * e)
    meat = np.array([[np.einsum("i,i->", a, b) for b in cols] for a in cols])
    for lag_i in range(1, min(lag, e.size - 1) + 1):
        g = np.array([[np.einsum("i,i->", a[lag_i:], b[:-lag_i]) for b in cols] for a in cols])
        meat += (1 - lag_i / (lag + 1)) * (g + g.T)
    return float((bread @ meat @ bread)[1, 1])


def slope_variance_exact(e: np.ndarray, xc: np.ndarray, bread: np.ndarray, lag: int) -> float:
    """The same sum in ``np.longdouble`` from the same float64 inputs."""
    ld = np.longdouble
    b0, b1 = ld(bread[1, 0]), ld(bread[1, 1])
    u = b0 * e.astype(ld) + b1 * (xc.astype(ld) * e.astype(ld))
    var = (u * u).sum()
    for lag_i in range(1, min(lag, e.size - 1) + 1):
        var += 2 * (1 - ld(lag_i) / ld(lag + 1)) * (u[lag_i:] * u[:-lag_i]).sum()
    return float(var)


def slope_inputs(seed: int, n: int, walk: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Residuals, centred x, ``(X'X)^-1`` and the lag of a slope of ``n`` points."""
    rng = np.random.default_rng(seed)
    x = np.cumsum(rng.integers(1, 5, n)).astype(float) / 1000.0
    v = np.cumsum(rng.normal(size=n)) if walk else 2.0 + x + rng.normal(size=n)
    xc = x - x.mean()
    xtx = np.array([[float(n), xc.sum()], [xc.sum(), xc @ xc]])
    beta = np.linalg.solve(xtx, np.array([v.sum(), xc @ v]))
    e = v - (beta[0] + beta[1] * xc)
    return e, xc, np.linalg.inv(xtx), int(math.floor(4 * (n / 100) ** (2 / 9)))


@settings(max_examples=examples(100), deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(10, 30_000), st.booleans())
def test_slope_variance_is_the_four_sums_within_1e_12(seed: int, n: int, walk: bool) -> None:
    e, xc, bread, lag = slope_inputs(seed, n, walk)
    want = slope_variance_plain(e, xc, bread, lag)
    got = summary._slope_variance(e.copy(), xc.copy(), bread[1], lag)
    assert abs(got - want) <= RTOL * abs(want)


def test_slope_variance_is_no_farther_from_exact_than_the_four_sums() -> None:
    """On noise and on random walks of up to 300k points, the largest and the mean
    relative error against the longdouble sum are no larger than the plain version's."""
    ours, theirs = [], []
    for seed, n in enumerate([50, 400, 5_000, 40_000, 100_000, 300_000] * 2):
        e, xc, bread, lag = slope_inputs(seed, n, walk=seed % 2 == 1)
        exact = slope_variance_exact(e, xc, bread, lag)
        ours.append(abs(summary._slope_variance(e.copy(), xc.copy(), bread[1], lag) - exact))
        theirs.append(abs(slope_variance_plain(e, xc, bread, lag) - exact))
        ours[-1] /= exact
        theirs[-1] /= exact
    assert max(ours) <= max(theirs) and np.mean(ours) <= np.mean(theirs), (ours, theirs)


def test_lag_products_in_pieces_are_the_whole_sums() -> None:
    """Pieces of :data:`~dflash_diag.compare.summary.LAG_PIECE` products, every lag, both
    ends: the same sums as one long one (to rounding)."""
    u = np.random.default_rng(3).normal(size=3 * summary.LAG_PIECE + 17)
    for lag in (0, 1, 5, summary.LAG_PIECE - 1, summary.LAG_PIECE + 3):
        want = math.fsum(u[lag:] * u[: u.size - lag])
        assert math.isclose(summary._lag_product(u, lag), want, rel_tol=1e-13)


def test_short_windows_are_solved_by_lapack_bit_for_bit() -> None:
    """Under ``CLOSED_FORM_FROM`` points a window's fit is LAPACK's, to the bit: there
    the weights may follow the residuals' last bits (``band.CLOSED_FORM_FROM``)."""
    rng = np.random.default_rng(5)
    for w in range(3, band.CLOSED_FORM_FROM + 2):
        wv = rng.normal(size=(50, w))
        u = np.sort(rng.uniform(-1, 1, (50, w)), axis=1)
        weights = rng.uniform(0, 1, (50, w))
        a = _normal_matrix(weights, u, u * u)
        got = band._solve(a, weights, wv, u, u * u)
        wwv = weights * wv
        rhs = np.stack(
            [wwv.sum(axis=1), np.einsum("ij,ij->i", wwv, u), np.einsum("ij,ij->i", wwv, u * u)],
            axis=1,
        )
        lapack = np.linalg.solve(a, rhs[:, :, None])[:, :, 0]
        closed = solve_3x3(a, rhs)
        want = lapack if w < band.CLOSED_FORM_FROM else closed
        assert got.tobytes() == want.tobytes(), w
        assert w < band.CLOSED_FORM_FROM or lapack.tobytes() != closed.tobytes()
