"""Gradient-variance proxies: noise scale, schedule spread, grad_norm, counterfactual."""

from __future__ import annotations

import numpy as np
import pytest
from budget import examples
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from dflash_diag.data import STORY_BUCKETS, ScheduleParams
from dflash_diag.schedule import replay
from dflash_diag.spikes.attribute import attribute_spikes
from dflash_diag.spikes.detect import detect_spikes
from dflash_diag.spikes.variance import (
    GNS_ASSUMPTIONS,
    GNS_BOOTSTRAP,
    GNS_MIN_POINTS,
    GNS_MIN_SPREAD,
    GNS_STRATA,
    GNS_VALID_DRAWS,
    GNS_WINDOW,
    NO_STRATA,
    NoiseScale,
    _positive_p,
    noise_scale,
    schedule_spread,
    variance_proxies,
)

from .constructed import PARAMS, manifest, run  # tests/ is on sys.path (rootless)


@settings(max_examples=examples(25), deadline=None)
@given(
    g2=st.floats(0.5, 5.0),
    b_true=st.floats(500.0, 8000.0),
    seed=st.integers(0, 1000),
)
def test_noise_scale_recovers_a_known_b_simple(g2: float, b_true: float, seed: int) -> None:
    # grad_norm^2 = |G|^2 + tr(Σ)/B with 3% multiplicative noise; B varies 4x.
    rng = np.random.default_rng(seed)
    b = rng.uniform(1000, 4000, 1000)
    g = np.sqrt((g2 + g2 * b_true / b) * (1 + 0.03 * rng.standard_normal(b.size)))
    ns = noise_scale(g, b)
    assert ns.b_simple is not None and ns.ci is not None
    assert ns.ci[0] <= b_true <= ns.ci[1] or ns.b_simple == pytest.approx(b_true, rel=0.1)
    assert ns.b_simple == pytest.approx(b_true, rel=0.25)
    assert ns.batch_tokens == pytest.approx(np.median(b))
    assert NO_STRATA in ns.assumptions


def test_noise_scale_says_not_enough_data_when_b_barely_varies() -> None:
    rng = np.random.default_rng(1)
    b = 16000 * (1 + 0.2 * GNS_MIN_SPREAD * rng.standard_normal(500))
    g = np.sqrt(1 + 3000 / b) * (1 + 0.01 * rng.standard_normal(500))
    ns = noise_scale(g, b)
    assert ns.b_simple is None and ns.ci is None
    assert ns.reason.startswith("not enough data: batch size B varies too little")


def test_noise_scale_says_not_enough_data_when_the_g_estimate_is_not_positive() -> None:
    # grad_norm^2 = -0.5 + 6000/B: positive norms, but the fitted |G|^2 is below 0.
    b = np.tile(np.linspace(1000, 4000, 50), 4)
    g = np.sqrt(-0.5 + 6000.0 / b)
    ns = noise_scale(g, b)
    assert ns.b_simple is None
    assert "|G|²" in ns.reason


def test_noise_scale_fits_within_length_strata() -> None:
    # Long batches have a different |G|^2: one line over all batches would be biased;
    # strata by mean length fit each population on its own.
    rng = np.random.default_rng(2)
    n = 900
    b = rng.uniform(1000, 4000, n)
    long = rng.random(n) < 0.5
    g2 = np.where(long, 4.0, 1.0)
    g = np.sqrt(g2 + g2 * 2000.0 / b)
    ns = noise_scale(g, b, mean_len=np.where(long, 1500.0, 100.0) + rng.normal(0, 5, n))
    assert ns.b_simple == pytest.approx(2000.0, rel=0.05)
    assert NO_STRATA not in ns.assumptions


def test_schedule_spread_sorted_is_homogeneous_random_is_not() -> None:
    m = manifest(3000)
    base = ScheduleParams(token_budget=16384, seed=3)
    icc_sorted, ci, _, _ = schedule_spread(replay(m, base))
    icc_random, _, _, _ = schedule_spread(replay(m, base.replace(strategy="random", batch_size=30)))
    assert icc_sorted > 0.95 and ci[0] <= icc_sorted <= ci[1]
    assert icc_random < 0.05


@pytest.fixture(scope="module")
def composed():
    # the counterfactual's bucketed schedule: the story's wide buckets (the default derives
    # six equal-count ones from the lengths, which here group them as finely as sorting)
    r = run(beta=-0.12, params=PARAMS.replace(buckets=STORY_BUCKETS))
    d = detect_spikes(r.table)
    att = attribute_spikes(d, r.replay)
    return r, d, att, variance_proxies(d, r.table, att, r.replay, r.manifest)


def test_counterfactual_random_batches_remove_most_composition_variance(composed) -> None:
    _, _, _, v = composed
    cf = {c.strategy: c for c in v.counterfactual}
    assert set(cf) == {"bucketed", "random"}
    # Truth: composition is most of the residual variance; random batches average it out,
    # bucketed ones (length-homogeneous within wide buckets) only part of it.
    assert v.mixture_r2_cv > 0.5
    assert cf["random"].share_removed > 0.5
    assert 0 < cf["bucketed"].share_removed < cf["random"].share_removed


def test_variance_panel_has_the_schedule_and_composition_figures(composed) -> None:
    _, _, att, v = composed
    assert v.length_icc > 0.95
    assert v.composition_r2 == att.model.r2 and v.composition_r2_cv == att.model.r2_cv
    assert v.metric_var == pytest.approx(np.nanvar(att.points["residual"]))
    assert v.grad_norm_cv == pytest.approx(0.1, abs=0.03)  # 0.05 sd around 0.5
    assert abs(v.grad_norm_corr["mean_len"]["spearman"]) < 0.2  # grad_norm is pure noise


def test_a_log_alone_gives_the_grad_norm_part_only(composed) -> None:
    r, d, _, _ = composed
    v = variance_proxies(d, r.table)
    assert v.length_icc is None and v.composition_r2 is None and v.counterfactual == ()
    assert v.grad_norm_cv is not None and v.grad_norm_corr is None
    assert v.noise_scale is not None  # tokens come from the log
    no_tokens = variance_proxies(d, r.table.drop(columns="tokens"))
    assert no_tokens.noise_scale.reason == "no batch sizes: the log has no tokens column"


def test_grad_norm_that_ignores_batch_size_rarely_gives_a_noise_scale() -> None:
    # No dependence on B at all (tr(Σ) = 0): an estimate may come out only as often as a
    # one-sided 2.5% test allows.
    found = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        b = rng.uniform(1000, 4000, 600)
        ns = noise_scale(0.5 + 0.05 * rng.standard_normal(600), b)
        if ns.b_simple is None:
            assert ns.reason.startswith("not enough data")
        found += ns.b_simple is not None
    assert found / 200 <= 0.05


def test_grad_norm_cv_of_huge_norms_warns_nothing_and_is_scale_free():
    import warnings

    import numpy as np

    from dflash_diag.spikes.variance import grad_norm_stats

    rng = np.random.default_rng(3)
    g = rng.uniform(1.0, 2.0, 200)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        small, _ = grad_norm_stats(g, None, 20)
        huge, _ = grad_norm_stats(g * 1e200, None, 20)
    assert small is not None and huge is not None
    assert abs(small - huge) < 1e-12


@pytest.mark.parametrize("n", [1, 7, 1000, 213_406])
def test_predictions_in_place_are_the_models(n):
    """The counterfactual predicts its table in place: the same numbers, bit for bit,
    as the model's own prediction (the product over the whole table either way, which
    BLAS may split over threads by its size)."""
    from dflash_diag.spikes.model import fit_model
    from dflash_diag.spikes.variance import predict_in_place

    rng = np.random.default_rng(7)
    x = rng.dirichlet(np.ones(27), size=3000)
    y = x @ rng.normal(size=27) + rng.normal(0, 0.01, 3000)
    names = tuple(f"cell_{k}" for k in range(27))
    model = fit_model(x, names, y, np.ones(3000, dtype=bool), robust=False)
    keep = [names.index(f) for f in model.features]
    table = rng.dirichlet(np.ones(27), size=n)[:, keep] * 1.5  # (some past the fit's range)
    table = table[np.isfinite(table).all(axis=1)]  # (C order, as the counterfactual's)
    expected = model.predict(table).tobytes()
    assert predict_in_place(model, table).tobytes() == expected


def _cv_of(x: np.ndarray) -> float:
    """The plain path: one window's ``std / mean`` of ``x / max|x|``."""
    top = float(np.max(np.abs(x)))
    if not top > 0:
        return float("nan")
    y = x / top
    return float(np.std(y) / np.mean(y))


@settings(max_examples=examples(60), deadline=None)
@given(
    w=st.integers(1, 40),
    n_windows=st.integers(0, 6),
    extra=st.integers(0, 39),
    data=st.data(),
    zeros=st.booleans(),
)
def test_window_cvs_are_each_windows_own_bit_for_bit(w, n_windows, extra, data, zeros):
    """The table of windows gives each window's CV as the window alone gives it (a
    partial last window left out, an all-zero one NaN, norms past 1e154 included)."""
    from dflash_diag.spikes.variance import window_cvs

    value = st.one_of(st.floats(0.0, 1e6), st.just(0.0), st.floats(1e150, 1e200))
    n = max(1, w * n_windows + extra % w)
    x = np.asarray(data.draw(st.lists(value, min_size=n, max_size=n)), dtype=np.float64)
    if zeros and x.size >= w:
        x[:w] = 0.0
    with np.errstate(all="ignore"):
        got = window_cvs(x, w)
        plain = [_cv_of(x[i : i + w]) for i in range(0, x.size - w + 1, w)]
    assert np.asarray(plain, dtype=np.float64).tobytes() == got.tobytes()


@settings(max_examples=examples(30), deadline=None)
@given(
    n=st.integers(1, 400),
    n_cat=st.sampled_from([1, 3, 40, 200]),
    seed=st.integers(0, 1000),
    strategy=st.sampled_from(["sorted-greedy", "bucketed", "random"]),
)
def test_coded_shares_with_many_cells_are_the_plain_ones(n, n_cat, seed, strategy):
    """Coded cells are summed from a narrowed table of each code's cell (a byte a
    sample up to 127 cells, two past it): the same shares as the plain cells'."""
    from dflash_diag.spikes.features import micro_points
    from dflash_diag.spikes.model import MixtureCells, mixture_cells, sample_cells
    from dflash_diag.spikes.variance import point_shares

    rng = np.random.default_rng(seed)
    lengths, cats = rng.integers(1, 3000, n), rng.integers(0, n_cat, n)
    params = ScheduleParams(strategy=strategy, seed=seed, token_budget=8000, batch_size=3)
    rep = replay(lengths, params, epochs=2)
    logged = rep.steps["step"].to_numpy()
    idx = micro_points(rep, logged, 1, "step", None)
    coded = mixture_cells(rep.lengths, cats)
    assert coded.code is not None
    cells, n_cells = sample_cells(rep.lengths, cats)
    plain = MixtureCells(cells, rep.lengths, n_cells, rep.lengths)
    want = point_shares(rep, idx, logged.shape[0], plain)
    got = point_shares(rep, idx, logged.shape[0], coded)
    assert got.tobytes() == want.tobytes()


def _plain_fits(x: np.ndarray, y: np.ndarray, key: np.ndarray):
    """The plain path: each group's count, ``np.std / np.mean`` of x and ``np.polyfit``."""
    out = []
    for k in range(int(key.max()) + 1):
        xs, ys = x[key == k], y[key == k]
        if xs.size < 2 or np.ptp(xs) == 0:
            out.append((xs.size, None, None, None))
            continue
        slope, icpt = np.polyfit(xs, ys, 1)
        out.append((xs.size, np.std(xs) / np.mean(xs), icpt, slope))
    return out


@settings(max_examples=examples(60), deadline=None)
@given(
    n=st.integers(2, 400),
    groups=st.integers(1, 12),
    spread=st.floats(0.02, 0.6),
    noise=st.floats(0.0, 2.0),
    scale=st.sampled_from([1e-6, 1.0, 1e6, 1e150]),
    seed=st.integers(0, 10_000),
)
def test_line_fits_are_polyfits(n, groups, spread, noise, scale, seed):
    """Every group's closed-form line is ``np.polyfit``'s (to rounding: another order
    of operations), its spread ``np.std / np.mean``'s, its count the group's."""
    from dflash_diag.spikes.variance import line_fits

    rng = np.random.default_rng(seed)
    key = np.sort(rng.integers(0, groups, n))
    x = (1 + spread * rng.standard_normal(n)) / 3000.0
    y = scale * (0.5 + 2000.0 * x + noise * rng.standard_normal(n))
    count, spreads, icpt, slope = line_fits(x, y, key)
    assert count.shape == (int(key.max()) + 1,)
    for k, (size, sp, a, b) in enumerate(_plain_fits(x, y, key)):
        assert count[k] == size
        if sp is None:
            continue
        assert spreads[k] == pytest.approx(sp, rel=1e-12)
        # (the line's size: what its rounding errors are relative to)
        size_a = abs(float(np.mean(y[key == k]))) + abs(b) * float(np.mean(x[key == k]))
        assert abs(icpt[k] - a) <= 1e-9 * size_a
        assert abs(slope[k] - b) <= 1e-9 * size_a / float(np.mean(x[key == k]))


def test_line_fits_are_as_accurate_as_polyfit():
    """Against the exact least-squares line (fractions) of float inputs whose x spread
    only 2%: the closed form's error is no larger than ``np.polyfit``'s."""
    from fractions import Fraction

    from dflash_diag.spikes.variance import line_fits

    rng = np.random.default_rng(11)
    worst_fast = worst_plain = 0.0
    for _ in range(20):
        x = (1 + 0.02 * rng.standard_normal(100)) / 120000.0
        y = 0.25 + 0.5 * rng.standard_normal(100) ** 2
        fx, fy = [Fraction(v) for v in x.tolist()], [Fraction(v) for v in y.tolist()]
        mx, my = sum(fx) / 100, sum(fy) / 100
        sxy = sum((a - mx) * (b - my) for a, b in zip(fx, fy, strict=True))
        slope = sxy / sum((a - mx) ** 2 for a in fx)
        icpt = my - slope * mx
        _, _, got_a, got_s = line_fits(x, y, np.zeros(100, dtype=np.int64))
        plain_s, plain_a = np.polyfit(x, y, 1)
        for exact, fast, plain in ((icpt, got_a[0], plain_a), (slope, got_s[0], plain_s)):
            worst_fast = max(worst_fast, abs(float((Fraction(float(fast)) - exact) / exact)))
            worst_plain = max(worst_plain, abs(float((Fraction(float(plain)) - exact) / exact)))
    assert worst_fast <= max(worst_plain, 1e-14)


@settings(max_examples=examples(40), deadline=None)
@given(
    n=st.integers(5, 700),
    window=st.integers(10, 120),
    strata=st.booleans(),
    slope=st.floats(-3000.0, 9000.0),
    noise=st.floats(0.0, 0.3),
    spread=st.floats(0.0, 0.5),
    seed=st.integers(0, 10_000),
)
def test_noise_scale_of_line_fits_is_the_windows_polyfits(
    n, window, strata, slope, noise, spread, seed
):
    """The noise scale from the vectorised cells: every verdict, count and reason of the
    window-by-window polyfits (the cells in the same order, so the same bootstrap), the
    numbers to rounding."""
    # (a grad_norm that is exactly constant leaves every slope's sign to rounding)
    assume(abs(slope) >= 1.0 or noise >= 1e-6)
    rng = np.random.default_rng(seed)
    b = 2000.0 * np.exp(spread * rng.standard_normal(n))
    g = np.sqrt(np.abs(1.0 + slope / b) * (1 + noise * rng.standard_normal(n)) ** 2)
    g[rng.random(n) < 0.05] = np.nan
    ml = rng.uniform(100, 2000, n) if strata else None
    fast = noise_scale(g, b, ml, window=window, n_boot=200, seed=seed)
    with np.errstate(all="ignore"):  # (np.polyfit of a cell of one x: a warning)
        plain = _plain_noise_scale(g, b, ml, window=window, n_boot=200, seed=seed)
    assert (fast.n_cells, fast.reason, fast.assumptions) == (
        plain.n_cells, plain.reason, plain.assumptions,
    )  # fmt: skip
    for name in ("b_simple", "g2", "trace_sigma", "batch_tokens"):
        got, want = getattr(fast, name), getattr(plain, name)
        assert (got is None) == (want is None)
        if got is not None:
            assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert (fast.ci is None) == (plain.ci is None)
    if fast.ci is not None:
        assert fast.ci == pytest.approx(plain.ci, rel=1e-9)


def _plain_noise_scale(
    grad: np.ndarray,
    tokens: np.ndarray,
    mean_len: np.ndarray | None = None,
    window: int = GNS_WINDOW,
    n_boot: int = GNS_BOOTSTRAP,
    seed: int = 0,
) -> NoiseScale:
    """The plain path: :func:`noise_scale` as first written, a window and stratum at a
    time, each cell fitted by ``np.polyfit``."""
    with np.errstate(over="ignore"):  # (a norm past 1e154 squares to inf: left out below)
        g2 = np.asarray(grad, dtype=np.float64) ** 2
    b = np.asarray(tokens, dtype=np.float64)
    ok = np.isfinite(g2) & np.isfinite(b) & (b > 0)
    med_b = float(np.median(b[ok])) if ok.any() else None
    strata = np.zeros(b.shape[0], dtype=np.int64)
    if mean_len is not None and np.isfinite(mean_len).sum() >= GNS_STRATA * GNS_MIN_POINTS:
        ml = np.asarray(mean_len, dtype=np.float64)
        ok &= np.isfinite(ml)
        edges = np.quantile(ml[ok], np.linspace(0, 1, GNS_STRATA + 1)[1:-1])
        strata = np.searchsorted(edges, ml, side="right")
    idx = np.flatnonzero(ok)
    cells: list[tuple[float, float]] = []
    best_spread = 0.0
    for lo in range(0, idx.size, window):
        part = idx[lo : lo + window]
        for s in np.unique(strata[part]):
            rows = part[strata[part] == s]
            if rows.size < GNS_MIN_POINTS:
                continue
            x = 1.0 / b[rows]
            spread = float(np.std(x) / np.mean(x))
            best_spread = max(best_spread, spread)
            if spread < GNS_MIN_SPREAD:
                continue
            slope, icpt = np.polyfit(x, g2[rows], 1)
            cells.append((float(icpt), float(slope)))
    if not cells:
        return NoiseScale(
            None, None, None, None, 0, med_b,
            f"not enough data: batch size B varies too little (1/B varies by at most "
            f"{best_spread:.1%} within a window and stratum; needs {GNS_MIN_SPREAD:.0%})",
        )  # fmt: skip
    a = np.array([c[0] for c in cells])
    sl = np.array([c[1] for c in cells])
    if a.sum() <= 0:
        return NoiseScale(
            None, None, float(a.mean()), float(sl.mean()), len(cells), med_b,
            "not enough data: the |G|² estimate is <= 0 (noise dominates the fit)",
        )  # fmt: skip
    if sl.sum() <= 0:
        return NoiseScale(
            None, None, float(a.mean()), float(sl.mean()), len(cells), med_b,
            "not enough data: grad_norm² does not fall as B grows (the tr(Σ) estimate is <= 0)",
        )  # fmt: skip
    # With few windows a bootstrap CI is too narrow; a one-sided t test of the windows'
    # slopes says whether tr(Σ) > 0 is supported at all.
    p_slope = _positive_p(sl)
    if p_slope >= 0.025:
        return NoiseScale(
            None, None, float(a.mean()), float(sl.mean()), len(cells), med_b,
            f"not enough data: tr(Σ) > 0 is not supported (one-sided t test over "
            f"{len(cells)} windows, p = {p_slope:.2g})",
        )  # fmt: skip
    est = float(sl.sum() / a.sum())
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(cells), size=(n_boot, len(cells)))
    sa, ss = a[draws].sum(axis=1), sl[draws].sum(axis=1)
    valid = (sa > 0) & (ss > 0)
    notes = GNS_ASSUMPTIONS if mean_len is not None else (*GNS_ASSUMPTIONS, NO_STRATA)
    if valid.mean() < GNS_VALID_DRAWS or len(cells) < 2:
        return NoiseScale(
            None, None, float(a.mean()), float(sl.mean()), len(cells), med_b,
            f"not enough data: {len(cells)} usable window(s), and |G|² or tr(Σ) <= 0 in "
            f"{1 - valid.mean():.0%} of bootstrap draws (a CI needs 2+ windows and <= 2.5%)",
            notes,
        )  # fmt: skip
    q = np.quantile(ss[valid] / sa[valid], [0.025, 0.975])
    ci = (float(q[0]), float(q[1]))
    return NoiseScale(est, ci, float(a.mean()), float(sl.mean()), len(cells), med_b, "", notes)


@settings(max_examples=examples(60), deadline=None)
@given(
    sizes=st.lists(st.integers(0, 9), min_size=1, max_size=80),
    n_cat=st.sampled_from([0, 2, 200]),
    coded=st.booleans(),
    seed=st.integers(0, 10_000),
    share=st.floats(0.0, 1.0),
    twice=st.booleans(),
    per_row=st.integers(1, 5),
    chunk=st.sampled_from([1, 6, 1 << 19]),
)
def test_tokens_added_by_batch_are_those_added_in_row_order(
    sizes, n_cat, coded, seed, share, twice, per_row, chunk
):
    """Read in the batches' own order, the tokens by row and cell are those read in
    ``chosen``'s order (or nothing is done, and False says so: ``chosen`` in order, a
    batch used twice, fewer than half of them used)."""
    from unittest import mock

    import dflash_diag.spikes.variance as variance
    from dflash_diag.spikes.model import MixtureCells, mixture_cells, sample_cells
    from dflash_diag.spikes.variance import _add_tokens, _add_tokens_by_batch

    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = max(int(offsets[-1]), 1)  # (cells of one sample at least)
    lengths = rng.integers(1, 3000, n)
    cats = rng.integers(0, n_cat, n) if n_cat else None
    if coded:
        cells = mixture_cells(lengths, cats)
    else:
        cell, n_cells = sample_cells(lengths, cats)
        cells = MixtureCells(cell, lengths, n_cells, lengths)
    chosen = rng.permutation(len(sizes))[: max(1, round(share * len(sizes)))]
    if twice:
        chosen = np.concatenate([chosen, chosen[:1]])
    row = np.arange(len(chosen)) // per_row
    want = np.zeros((int(row.max()) + 1, cells.n_cells))
    got = np.zeros_like(want)
    _add_tokens(want, offsets, row, chosen, cells)
    with mock.patch.object(variance, "SHARE_CHUNK", chunk):  # (samples a chunk)
        done = _add_tokens_by_batch(got, offsets, row, chosen, cells)
    in_order = bool((np.diff(chosen) == 1).all())
    assert done == (not twice and 2 * len(chosen) >= len(sizes) and not in_order)
    if done:
        assert got.tobytes() == want.tobytes()
    else:
        assert not got.any()


@settings(max_examples=examples(40), deadline=None)
@given(
    rows=st.integers(0, 30),
    cols=st.integers(1, 6),
    seed=st.integers(0, 1000),
    nan_rows=st.integers(0, 3),
    drop=st.booleans(),
    fortran=st.booleans(),
)
@example(rows=5, cols=3, seed=0, nan_rows=0, drop=False, fortran=True)
def test_finite_rows_are_the_picked_finite_rows_in_c_order(
    rows, cols, seed, nan_rows, drop, fortran
):
    """The counterfactual's table to predict: ``x[:, keep]``'s finite rows, in C order;
    ``x`` itself (no copy) only when it is all of them already."""
    from dflash_diag.spikes.variance import _finite_rows

    rng = np.random.default_rng(seed)
    x = rng.random((rows, cols))
    if rows:
        x[rng.integers(0, rows, nan_rows)] = np.nan
    if fortran:
        x = np.asfortranarray(x)
    keep = sorted(rng.choice(cols, max(1, cols - 1), replace=False).tolist()) if drop else []
    keep = keep or list(range(cols))
    plain = x[:, keep]
    plain = plain[np.isfinite(plain).all(axis=1)]
    got = _finite_rows(x, keep)
    assert got.tobytes() == plain.tobytes() and got.shape == plain.shape
    assert got.flags.c_contiguous
    whole = keep == list(range(cols)) and bool(np.isfinite(x).all())
    assert (got is x) == (whole and x.flags.c_contiguous)
