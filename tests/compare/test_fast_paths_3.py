"""More compare fast paths against their plain versions, bit for bit: a round of the
band's fit worked out over arrays already made; the plain fits' matrices and factors
once a run of windows with the same offsets; the grid cubic's intervals from a running
count; points that are a stretch of the knots; curves that are the log's own arrays;
the side codes counted as they are."""

from __future__ import annotations

import math

import numpy as np
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.compare import band
from dflash_diag.compare.align import Memo, interp, interp_many
from dflash_diag.compare.band import MAD_SCALE, _normal_matrix, _Windows, solve_3x3

from .test_fast_paths import plain_interp


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit (NaN is NaN, ``-0.0`` is not ``0.0``), same dtype and shape."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def plain_solve(
    a: np.ndarray, weights: np.ndarray, wv: np.ndarray, u: np.ndarray, u2: np.ndarray
) -> np.ndarray:
    """Per window, ``a^-1 D'W v``, written out plainly."""
    wwv = weights * wv
    rhs = np.stack(
        [wwv.sum(axis=1), np.einsum("ij,ij->i", wwv, u), np.einsum("ij,ij->i", wwv, u2)],
        axis=1,
    )
    if u.shape[1] < band.CLOSED_FORM_FROM:  # (short windows: LAPACK's, as always)
        return np.linalg.solve(a, rhs[:, :, None])[:, :, 0]
    return solve_3x3(a, rhs)  # (held to LAPACK's solve in test_fast_paths_4.py)


def plain_fit_windows(v: np.ndarray, win: _Windows) -> tuple[np.ndarray, ...]:
    """``band._fit_windows`` written out plainly: a new array for each step."""
    u, u2, plain = win.u, win.u2, win.plain
    wv = v[win.idx]
    ones = np.ones_like(u)
    beta = plain_solve(plain, ones, wv, u, u2)
    w = u.shape[1]
    mid = [w // 2] if w % 2 else [w // 2 - 1, w // 2]
    weights = ones
    for it in range(3):
        if it:
            beta = plain_solve(_normal_matrix(weights, u, u2), weights, wv, u, u2)
        r = wv - (beta[:, :1] + beta[:, 1:2] * u + beta[:, 2:3] * u2)
        s = np.partition(np.abs(r), mid, axis=1)[:, mid].mean(axis=1, keepdims=True)
        if it == 2:
            break
        with np.errstate(all="ignore"):
            z = np.where(s > 0, r / (6 * MAD_SCALE * s), 0.0)
        weights = np.where(np.abs(z) < 1, (1 - z * z) ** 2, 0.0)
    dof = math.sqrt(w / (w - 3)) if w > 3 else 1.0
    return beta[:, 0], beta[:, 1] / win.span, MAD_SCALE * s[:, 0] * dof, win.c00


# (few distinct values, so windows hold ties, flat stretches (a zero MAD), both zeros and
# spikes far out of the rest (zero weights))
level = st.sampled_from([0.0, -0.0, 0.5, 1.0, 1.0001, 2.0, 40.0, 1e6])


@settings(max_examples=examples(200), deadline=None)
@given(
    st.integers(4, 120),
    st.integers(3, 25),
    st.integers(0, 2**32 - 1),
    st.lists(level, min_size=1, max_size=6),
    st.booleans(),
)
def test_fit_rounds_over_arrays_already_made_equal_the_plain_rounds(
    n: int, window: int, seed: int, levels: list[float], gaps: bool
) -> None:
    rng = np.random.default_rng(seed)
    x = np.cumsum(rng.integers(1, 6, n) if gaps else np.ones(n)).astype(float)
    # (noise, or values drawn among a few levels; now and then a NaN, as a scan may meet)
    v = rng.normal(0.0, 1.0, n) if seed % 3 == 0 else rng.choice(np.array(levels), n)
    if seed % 5 == 0:
        v[rng.integers(0, n)] = math.nan
    w = min(window, n)
    start = np.clip(np.arange(n) - w // 2, 0, n - w)
    win = _Windows.of(x, start, np.arange(n), w)
    with np.errstate(all="ignore"):
        got, want = band._fit_windows(v, win), plain_fit_windows(v, win)
    assert all(same_bits(a, b) for a, b in zip(got, want, strict=True))


@settings(max_examples=examples(200), deadline=None)
@given(
    st.integers(1, 150),
    st.integers(1, 25),
    st.lists(st.sampled_from([1.0, 1.0, 1.0, 2.0, 0.0, 0.5, 10.0]), min_size=1, max_size=8),
    st.integers(0, 2**32 - 1),
)
def test_plain_fits_worked_out_once_a_run_of_like_windows_equal_every_window(
    n: int, window: int, steps: list[float], seed: int
) -> None:
    # (steps drawn among a few gaps, mostly even: long runs of like windows, a resume's
    # repeated step, a stretch logged every 10)
    rng = np.random.default_rng(seed)
    x = np.cumsum(rng.choice(np.array(steps), n)) + 1000.0
    w = min(window, n)
    start = np.clip(np.arange(n) - w // 2, 0, n - w)
    win = _Windows.of(x, start, np.arange(n), w)
    plain = _normal_matrix(np.ones_like(win.u), win.u, win.u2)
    assert same_bits(win.plain, plain)
    assert same_bits(win.c00, np.linalg.inv(plain)[:, 0, 0])


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.sampled_from([math.nan, math.inf, 0.0, 1.5, -2.0]), max_size=30))
def test_present_points_are_the_logs_own_read_only_or_a_selection(cells: list) -> None:
    # Every point present: the log's arrays themselves, through views that cannot write
    # into them; else the selection (a copy).
    from dflash_diag.compare import runs

    v = np.array(cells, dtype=float)
    x = np.arange(v.size, dtype=float)
    got = runs._present(x, v)
    ok = np.isfinite(v)
    assert same_bits(got[0], x[ok]) and same_bits(got[1], v[ok])
    for a, own in zip(got, (x, v), strict=True):
        assert not np.shares_memory(a, own) or not a.flags.writeable
    assert x.flags.writeable and v.flags.writeable


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(st.integers(-50, 50), min_size=2, max_size=40, unique=True),
    st.data(),
    st.sampled_from([0.5, 1.0, 3.0, math.inf]),
)
def test_points_that_are_a_stretch_of_the_knots_equal_the_plain_interpolation(
    knot_list: list, data: st.DataObject, gap: float
) -> None:
    # A run logged at its baseline's steps over a part of them: one search, the knots'
    # values; as the plain interpolation, bit for bit (and a stretch that is not quite
    # one, a point off or out of order, the search's way).
    xp = np.array(sorted(knot_list), dtype=float)
    lo = data.draw(st.integers(0, xp.size - 1))
    hi = data.draw(st.integers(lo + 1, xp.size))
    x = xp[lo:hi].copy()
    how = data.draw(st.sampled_from(["stretch", "minus zero", "off", "reversed"]))
    if how == "minus zero":
        x[x == 0] = -0.0
    elif how == "off":
        x[data.draw(st.integers(0, x.size - 1))] += 0.5
    elif how == "reversed":
        x = x[::-1].copy()
    fp = np.array(data.draw(st.lists(st.floats(-1e3, 1e3), min_size=xp.size, max_size=xp.size)))
    assert same_bits(interp(xp, fp, x, gap), plain_interp(xp, fp, x, gap))
    memo = Memo()
    for _ in range(2):  # (the second call finds the spots kept)
        got = interp_many(xp, [fp, fp * 3.0], x, gap, memo)
        assert same_bits(got[1], plain_interp(xp, fp * 3.0, x, gap))


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(2, 400), st.integers(1, 60), st.integers(0, 2**32 - 1), st.booleans())
def test_grid_intervals_from_a_running_count_equal_the_search(
    n: int, grid_from: int, seed: int, repeats: bool
) -> None:
    # The cubic's basis between grid points, its intervals counted along the points
    # instead of searched; steps that repeat (a resume) take the search.
    rng = np.random.default_rng(seed)
    x = np.cumsum(rng.integers(0 if repeats else 1, 4, n)).astype(float)
    at = band._grid(n, min(21, n), grid_from)
    if at.size < 2:
        return
    xa = x[at]
    got, want = band._Hermite.of(xa, x, at), band._Hermite.of(xa, x)
    assert all(same_bits(a, b) for a, b in zip(got, want, strict=True))


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.integers(0, 3), max_size=200))
def test_side_counts_equal_bincount(codes: list) -> None:
    from dflash_diag.compare.summary import side_counts

    side = np.array(codes, dtype=np.int8)
    assert same_bits(side_counts(side), np.bincount(side, minlength=4))
