"""The compare fast paths give the plain ones' numbers bit for bit: knots found once for
several curves (and kept between metrics), the identity of a log with itself, fits that
reuse the geometry of the same points, the milestone scan reading a kept fit, the print
step tried on a few values first, the largest departure among the outside points."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.compare import align, band, summary
from dflash_diag.compare.align import Memo, _Spots, interp, interp_many
from dflash_diag.compare.band import BandAt, band_at, first_reaching, local_fit, robust_band
from dflash_diag.compare.results import Departure
from dflash_diag.data import RunLog


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit (NaN is NaN, ``-0.0`` is not ``0.0``), same dtype and shape."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def plain_interp(xp: np.ndarray, fp: np.ndarray, x: np.ndarray, max_gap: float) -> np.ndarray:
    """:func:`interp` written out plainly: finite knots, sorted, ``np.interp`` inside
    them, NaN across a gap wider than ``max_gap`` but at a knot."""
    ok = np.isfinite(xp) & np.isfinite(fp)
    xp, fp = xp[ok], fp[ok]
    out = np.full(np.shape(x), np.nan)
    if xp.size == 0:
        return out
    order = np.argsort(xp, kind="stable")
    xp, fp = xp[order], fp[order]
    x = np.asarray(x, dtype=float)
    for i, xv in enumerate(x):
        if not (math.isfinite(xv) and xp[0] <= xv <= xp[-1]):
            continue
        value = float(np.interp(xv, xp, fp))
        if xp.size > 1 and xv not in xp:
            hi = int(np.searchsorted(xp, xv, side="left"))
            if xp[hi] - xp[hi - 1] > max_gap:
                value = math.nan
        out[i] = value
    return out


finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
cell = st.one_of(finite, st.just(math.nan), st.just(-0.0), st.just(0.0))


@st.composite
def knots(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Knots (sorted, unsorted, repeated, with NaN), values (some NaN) and points: the
    knots themselves, some of them, others, or a mixture."""
    n = draw(st.integers(0, 30))
    xp = np.array(draw(st.lists(st.integers(-20, 20), min_size=n, max_size=n)), dtype=float)
    if draw(st.booleans()):
        xp = np.unique(xp)  # strictly increasing: the identity path
    if xp.size and draw(st.booleans()):
        xp[draw(st.integers(0, xp.size - 1))] = math.nan
    fp = np.array(draw(st.lists(cell, min_size=xp.size, max_size=xp.size)), dtype=float)
    if draw(st.booleans()):
        fp = np.nan_to_num(fp, nan=1.5)  # every curve finite: the knots found once
    kind = draw(st.sampled_from(["same", "subset", "other"]))
    if kind == "same":
        x = xp.copy()
        if draw(st.booleans()):
            x[x == 0] = -0.0  # (equal to the knot 0.0, not the same bits)
    elif kind == "subset":
        x = xp[:: draw(st.integers(1, 3))].copy()
    else:
        x = np.array(draw(st.lists(st.one_of(finite, st.just(math.nan)), max_size=20)))
        x = np.round(x / 1e5, 1) if draw(st.booleans()) else x
    gap = draw(st.sampled_from([0.5, 1.0, 3.0, math.inf]))
    return xp, fp, x, gap


@settings(max_examples=examples(300), deadline=None)
@given(knots())
def test_interp_equals_the_plain_interpolation(case: tuple) -> None:
    xp, fp, x, gap = case
    assert same_bits(interp(xp, fp, x, gap), plain_interp(xp, fp, x, gap))


@settings(max_examples=examples(200), deadline=None)
@given(knots(), st.integers(0, 2**32 - 1))
def test_curves_on_shared_knots_equal_one_at_a_time(case: tuple, seed: int) -> None:
    xp, fp, x, gap = case
    rng = np.random.default_rng(seed)
    curves = [fp, fp * 2.0 - 1.0, rng.normal(size=fp.size)]
    memo = Memo()
    for _ in range(2):  # (the second call finds the knots kept)
        got = interp_many(xp, curves, x, gap, memo)
        for g, c in zip(got, curves, strict=True):
            assert same_bits(g, interp(xp, c, x, gap))


def test_the_memo_tells_bits_apart() -> None:
    memo = Memo()
    memo.put(("k", np.array([0.0, math.nan])), "zero")
    assert memo.find(("k", np.array([0.0, math.nan]))) == "zero"
    assert memo.find(("k", np.array([-0.0, math.nan]))) is None
    assert memo.find(("k", np.array([0.0, math.nan], dtype=np.float32))) is None
    assert memo.find(("k", np.array([0.0, math.nan]), 1)) is None
    memo.put(("other", 1), "one")
    memo.forget("k")
    assert memo.find(("k", np.array([0.0, math.nan]))) is None
    assert memo.find(("other", 1)) == "one"


@st.composite
def logs(draw: st.DrawFn, most: int = 400) -> tuple[np.ndarray, list[np.ndarray]]:
    """Logged steps (gaps of 1-5) and three metrics logged at them."""
    n = draw(st.integers(10, most))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = np.cumsum(rng.integers(1, 6, n)).astype(float)
    t = x / x[-1]
    metrics = [
        np.round(a + b * t + rng.normal(0, 0.05, n), 4) for a, b in ((4, -2), (0, 1), (1, 0))
    ]
    return x, metrics


@settings(max_examples=examples(60), deadline=None)
@given(logs(), st.integers(3, 25), st.sampled_from([None, 7, 40, 10**9]))
def test_fits_sharing_the_points_geometry_equal_fresh_ones(
    data: tuple[np.ndarray, list[np.ndarray]], window: int, grid_from: int | None
) -> None:
    x, metrics = data
    memo = Memo()
    for v in metrics:
        kept = local_fit(x, v, window, grid_from=grid_from, memo=memo)
        fresh = local_fit(x, v, window, grid_from=grid_from)
        assert all(same_bits(a, b) for a, b in zip(kept, fresh, strict=True))


@settings(max_examples=examples(60), deadline=None)
@given(logs(), st.integers(3, 25), st.sampled_from([None, 7, 40]), st.booleans())
def test_milestones_from_a_kept_fit_equal_the_scan(
    data: tuple[np.ndarray, list[np.ndarray]], window: int, grid_from: int | None, up: bool
) -> None:
    x, metrics = data
    v = metrics[1]
    memo = Memo()
    centre = local_fit(x, v, window, grid_from=grid_from, memo=memo)[0]
    levels = [*np.quantile(centre, [0.0, 0.3, 0.7, 1.0]), float(centre.max()) + 1.0]
    old = band.SCAN_FIRST, band.SCAN_CHUNK
    scans = []
    # several pieces, even on a short series: of one size, and growing
    for first, most in ((5, 5), (1, 9), (2, 3)):
        band.SCAN_FIRST, band.SCAN_CHUNK = first, most
        try:
            scans.append(first_reaching(x, v, window, levels, up, grid_from=grid_from))
        finally:
            band.SCAN_FIRST, band.SCAN_CHUNK = old
    kept = first_reaching(x, v, window, levels, up, grid_from=grid_from, memo=memo)
    assert all(scanned == kept for scanned in scans)


@settings(max_examples=examples(40), deadline=None)
@given(logs(most=200), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_bands_with_a_memo_equal_bands_without(
    data: tuple[np.ndarray, list[np.ndarray]], n_bases: int, seed: int
) -> None:
    x, metrics = data
    rng = np.random.default_rng(seed)
    run_x = np.unique(np.round(rng.uniform(x[0] - 5, x[-1] + 5, 50))) if seed % 2 else x
    memo = Memo()
    for v in metrics:
        plain, kept = [], []
        for i in range(n_bases):
            bx = x if i % 2 == 0 else x[::2]
            bv = v if i % 2 == 0 else v[::2] + 0.01 * i
            plain.append(robust_band(bx, bv, 3.0, 9))
            kept.append(robust_band(bx, bv, 3.0, 9, memo))
        for p, k in zip(plain, kept, strict=True):
            assert p is not None and k is not None
            assert all(same_bits(a, b) for a, b in zip(p, k, strict=True))
        bands = [b for b in plain if b is not None]
        for at in (run_x, bands[0][0]):
            want = band_at(bands, at)
            got = band_at(bands, at, memo)
            assert all(same_bits(a, b) for a, b in zip(want, got, strict=True))


def plain_print_step(values: np.ndarray) -> float:
    """:func:`~dflash_diag.compare.band.print_step`, each step tried on every value."""
    v = np.abs(values[np.isfinite(values) & (values != 0)])
    for k in range(0, 9) if v.size else ():
        scaled = v * 10.0**k
        if np.all(np.abs(scaled - np.round(scaled)) <= 1e-6 + 1e-9 * scaled):
            return 10.0**-k
    return 0.0


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(st.integers(-(10**6), 10**6), min_size=0, max_size=60),
    st.lists(st.integers(0, 8), min_size=1, max_size=60),
    st.integers(1, 10),
    st.integers(1, 7),
)
def test_print_step_tried_on_a_few_first_equals_every_value(
    ints: list[int], decimals: list[int], sample: int, piece: int
) -> None:
    """A few first values, then all of them in pieces of ``piece``: the step of every value
    tried at once."""
    values = np.array([i / 10.0 ** decimals[j % len(decimals)] for j, i in enumerate(ints)])
    old = band._STEP_SAMPLE, band._STEP_PIECE
    band._STEP_SAMPLE, band._STEP_PIECE = sample, piece
    try:
        assert band.print_step(values) == plain_print_step(values)
    finally:
        band._STEP_SAMPLE, band._STEP_PIECE = old


def plain_departure(steps: np.ndarray, v: np.ndarray, b: BandAt) -> Departure | None:
    """The largest departure, by widths out of the band, over every point."""
    side = band.side_codes(v, b)
    up, out = side == 2, (side == 2) | (side == 3)
    if not out.any():
        return None
    with np.errstate(all="ignore"):
        widths = np.where(
            up,
            (v - b.hi) / np.maximum(b.hi - b.med, 1e-12),
            (b.lo - v) / np.maximum(b.med - b.lo, 1e-12),
        )
    i = int(np.argmax(np.where(out, widths, -np.inf)))
    return Departure(
        step=int(steps[i]),
        value=float(v[i]),
        baseline_median=float(b.med[i]),
        band=(float(b.lo[i]), float(b.hi[i])),
        side="above" if up[i] else "below",
        excess=float(v[i] - b.hi[i] if up[i] else v[i] - b.lo[i]),
        widths=float(widths[i]),
    )


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(1, 80), st.integers(0, 2**32 - 1))
def test_largest_departure_among_outside_points_equals_over_all(n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    med = rng.normal(size=n)
    lo, hi = med - rng.uniform(0, 1, n), med + rng.uniform(0, 1, n)
    lo[rng.random(n) < 0.1] = np.nan
    med[rng.random(n) < 0.05] = np.nan  # (a median missing where the edges are known)
    v = np.round(med + rng.normal(0, 1, n), 1)
    v[rng.random(n) < 0.1] = np.nan
    b, steps = BandAt(med, lo, hi), np.arange(n) * 10
    side = band.side_codes(v, b)
    # (repr: a NaN field is the same NaN)
    got = summary._largest_departure(steps, v, b, side)
    assert repr(got) == repr(plain_departure(steps, v, b))
    whole = summary.summarise_phase("all", steps, v, b)
    assert repr(summary.summarise_phase("all", steps, v, b, side)) == repr(whole)


def plain_table(log: RunLog) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """``align._table`` done in full on every log: number the rows, lowest rank, finite
    steps, last of a repeated step, sorted by step."""
    t = log.table.assign(row=np.arange(len(log.table)))
    if "rank" in t.columns and t["rank"].nunique() > 1:
        t = t[t["rank"] == t["rank"].min()]
    t = t[np.isfinite(t["step"].to_numpy(dtype=float))]
    t = t.drop_duplicates("step", keep="last").sort_values("step", kind="stable")
    rows = t.pop("row").to_numpy()
    marks = {c: np.asarray(m, dtype=bool)[rows] for c, m in log.logged_nan.items()}
    return t.reset_index(drop=True), marks


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(st.integers(0, 40), min_size=0, max_size=30),
    st.booleans(),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_a_table_in_step_order_is_kept_as_the_full_pass_leaves_it(
    steps: list[int], in_order: bool, ranks: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    step = np.unique(steps) if in_order else np.array(steps, dtype=np.int64)
    n = step.size
    table = pd.DataFrame({"step": step.astype(np.int64), "loss": rng.normal(size=n)})
    if ranks:
        table["rank"] = rng.integers(0, 2, n)
    table.index = table.index * 3 + 7  # (not the rows' numbers)
    log = RunLog(table, "run.log", "test", logged_nan={"loss": rng.random(n) < 0.2})
    got, marks = align._table(log, [])
    want, want_marks = plain_table(log)
    pd.testing.assert_frame_equal(got, want)
    assert marks.keys() == want_marks.keys()
    assert all(same_bits(marks[c], want_marks[c]) for c in marks)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.integers(-20, 40), min_size=2, max_size=30, unique=True), st.data())
def test_points_at_knots_read_the_knots_as_np_interp(knot_list: list, data: st.DataObject) -> None:
    """A run logged at its baseline's steps (every point a knot, in any order, repeated,
    ``-0.0`` for ``0.0``) reads the knots' values, as ``np.interp`` gives them."""
    xp = np.array(sorted(knot_list), dtype=float)
    fp = np.array(data.draw(st.lists(finite, min_size=xp.size, max_size=xp.size)))
    x = np.array(data.draw(st.lists(st.sampled_from(xp.tolist()), max_size=40)), dtype=float)
    if data.draw(st.booleans()):
        x[x == 0] = -0.0
    gap = data.draw(st.sampled_from([0.5, 3.0, math.inf]))
    spots = _Spots.find(xp, None, x, gap)
    assert spots.at is not None or spots.inside is None or spots.same
    assert same_bits(spots.values(fp), plain_interp(xp, fp, x, gap))


@settings(max_examples=examples(40), deadline=None)
@given(logs(most=200), st.booleans())
def test_one_bands_curve_on_its_points_is_band_at_there(
    data: tuple[np.ndarray, list[np.ndarray]], overflow: bool
) -> None:
    """One baseline's band on its own points (taken as it is) equals band_at there, bit
    for bit, and the grid is not the log's own array."""
    from dflash_diag.compare import runs
    from dflash_diag.compare.align import AlignedLog
    from dflash_diag.lr_phases import Phases

    x, metrics = data
    v = metrics[0]
    table = pd.DataFrame({"step": x, "loss": v})
    log = AlignedLog("b.log", "b", table, x, x, Phases(False))
    band = robust_band(x, v, 3.0, 9)
    assert band is not None
    if overflow:  # (a band with inf in it: band_at's own way)
        band = (*band[:3], np.where(np.arange(x.size) == 1, math.inf, band[3]))
    curves = runs._curves("loss", [log], log, v, [band])
    want = band_at([band], band[0])
    assert same_bits(curves.band[0], band[0]) and curves.band[0] is not x
    assert all(same_bits(a, b) for a, b in zip(curves.band[1:], want, strict=True))
