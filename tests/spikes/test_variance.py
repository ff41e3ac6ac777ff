"""Gradient-variance proxies: noise scale, schedule spread, grad_norm, counterfactual."""

from __future__ import annotations

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.data import STORY_BUCKETS, ScheduleParams
from dflash_diag.schedule import replay
from dflash_diag.spikes.attribute import attribute_spikes
from dflash_diag.spikes.detect import detect_spikes
from dflash_diag.spikes.variance import (
    GNS_MIN_SPREAD,
    NO_STRATA,
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
