"""compare_runs on constructed runs whose truth is known (no log reader involved)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.compare import (
    NonFinite,
    Slope,
    apply_step_every,
    compare_runs,
    logged_nonfinite,
    metric_kind,
    parse_milestones,
    slope_with_ci,
    versus_figures,
)
from dflash_diag.data import CANONICAL_COLUMNS, RunLog
from dflash_diag.errors import InputError

PEAK = 6e-4


def curve_acc(x):
    """acc on the baseline's clock ``x``: near 0 in warmup (600 steps), rising after."""
    x = np.asarray(x, dtype=float)
    return (
        0.005 + 0.04 * (x / 600) ** 2 + np.where(x > 600, 0.5 * (1 - np.exp(-(x - 600) / 400)), 0)
    )


def curve_loss(x):
    return 0.9 + 2.5 * np.exp(-np.asarray(x, dtype=float) / 300)


def make_run(
    path="run.log",
    steps=None,
    warmup=600,
    seed=0,
    noise=0.004,
    acc_shift=0.0,
    shift_from=0,
    tokens=None,
    columns=None,
    lr=True,
    speed=1.0,
):
    """A RunLog whose acc and loss follow the curves on a clock set by its warmup.

    ``speed``: how many of the baseline's steps one step of this run is worth (its batches
    are ``speed`` times larger); the warmup is in this run's steps.
    """
    rng = np.random.default_rng(seed)
    s = np.arange(1, 1501, 5) if steps is None else np.asarray(steps)
    frac = s / warmup
    x = np.where(frac <= 1, frac * 600, 600 + (s - warmup) * speed)
    table = pd.DataFrame({c: np.nan for c in CANONICAL_COLUMNS}, index=range(s.size))
    table["step"] = s
    table["acc"] = (
        curve_acc(x) + rng.normal(0, noise, s.size) + np.where(s >= shift_from, acc_shift, 0)
    )
    table["loss"] = curve_loss(x) + rng.normal(0, 5 * noise, s.size)
    if lr:
        table["lr"] = PEAK * np.minimum(frac, 1.0)
    if tokens is not None:
        table["tokens"] = tokens
    for name, values in (columns or {}).items():
        table[name] = values
    return RunLog(table, path, "test")


def phase(comparison, metric, name):
    return next(p for p in comparison.metrics[metric].phases if p.phase == name)


def test_same_distribution_is_within_in_every_phase():
    c = compare_runs([make_run("v1.log", seed=1)], make_run(seed=2))
    for metric in ("acc", "loss"):
        assert c.metrics[metric].verdict == "within"
        for p in c.metrics[metric].phases:
            assert p.verdict == "within" and p.inside >= 0.9
    assert c.metrics["acc"].sentence.startswith("acc is within v1's band: ")
    assert c.warmup["run.log"].warmup_end_step == 600


def test_shifted_run_is_below_from_the_shift_on():
    c = compare_runs(
        [make_run("v1.log", seed=1)], make_run(seed=2, acc_shift=-0.05, shift_from=800)
    )
    post = phase(c, "acc", "post_warmup")
    warm = phase(c, "acc", "warmup")
    assert warm.verdict == "within"  # the shift starts after warmup
    assert post.below > 0.6 and post.above < 0.05
    dep = post.largest_departure
    assert dep.side == "below" and dep.step >= 800
    assert c.metrics["loss"].verdict == "within"
    assert ": behind." in c.metrics["acc"].sentence


def _bent(metric: str, per_1k: float):
    """A run (seed 2) whose ``metric`` moves ``per_1k`` more per 1k steps after step 600."""
    run = make_run(seed=2)
    late = run.table.step > 600
    run.table.loc[late, metric] += per_1k * (run.table.step[late] - 600) / 1000
    return run


def test_a_slower_climb_after_warmup_is_said_with_its_interval():
    base = make_run("v1.log", seed=1)
    c = compare_runs([base], _bent("acc", -0.1), metrics=["acc"])
    run_slope, v1_slope = c.metrics["acc"].slopes
    lo, hi = v1_slope.run_minus_ci
    assert lo < -0.1 < hi and hi < 0
    assert v1_slope.run_minus == pytest.approx(run_slope.value - v1_slope.value)
    assert ": rises more slowly (difference" in c.metrics["acc"].sentence
    same = compare_runs([base], make_run(seed=3), metrics=["acc"])
    assert ": no clear difference (difference" in same.metrics["acc"].sentence


def test_a_loss_that_falls_faster_is_said_to_fall_faster():
    # a lower slope of a falling metric is a faster fall, not a slower pace
    base = make_run("v1.log", seed=1)
    c = compare_runs([base], _bent("loss", -0.5), metrics=["loss"])
    v1_slope = c.metrics["loss"].slopes[1]
    assert v1_slope.value < 0 and v1_slope.run_minus_ci[1] < 0
    assert ": falls faster (difference" in c.metrics["loss"].sentence
    for added, words in ((0.2, "falls more slowly"), (0.5, "rises where v1 falls")):
        c = compare_runs([base], _bent("loss", added), metrics=["loss"])
        assert c.metrics["loss"].slopes[1].run_minus_ci[0] > 0
        assert f": {words} (difference" in c.metrics["loss"].sentence


def _spiky(seed: int, rate: float, path: str = "run.log", height: float = 0.5):
    """A run whose loss jumps by ``height`` at a ``rate`` of its steps, drawn at random
    (a bad sample's batch under a shuffling sampler)."""
    run = make_run(path, seed=seed)
    hit = np.random.default_rng(seed + 100).random(len(run.table)) < rate
    run.table.loc[hit, "loss"] += height
    return run


def test_a_run_as_spiky_as_its_baseline_is_within_its_band():
    # A spiky baseline's spikes lie outside its own robust band (12% of its points
    # here): a run with as many spikes, the same one or another seed's, is a like run.
    base = _spiky(1, 0.12, "v1.log")
    for run in (base, _spiky(1, 0.12), _spiky(2, 0.12)):
        c = compare_runs([base], run, metrics=["loss"])
        m = c.metrics["loss"]
        post = next(p for p in m.phases if p.phase == "post_warmup")
        assert post.inside < 0.9 and post.baseline_above > 0.07
        assert m.verdict == "within" and post.verdict == "within"
        assert "v1's own points: " in m.sentence
    # three times the spikes is not a like run, nor a spiky run against a steady one
    assert compare_runs([base], _spiky(2, 0.3), metrics=["loss"]).metrics["loss"].verdict == "above"
    steady_base = make_run("v1.log", seed=1)
    assert compare_runs([steady_base], base, metrics=["loss"]).metrics["loss"].verdict == "above"


def test_of_five_baselines_the_spikiest_does_not_set_what_a_like_run_shows():
    # a quantile band leaves the most extreme baseline out, and so does the share a like
    # run may have outside it: the median baseline's, not the spikiest's
    bases = [_spiky(10 + i, 0.02, f"v{i}.log") for i in range(4)] + [_spiky(20, 0.4, "wild.log")]
    c = compare_runs(bases, _spiky(3, 0.25), metrics=["loss"])
    post = next(p for p in c.metrics["loss"].phases if p.phase == "post_warmup")
    assert post.baseline_above < 0.1 and post.verdict == "above"
    like = compare_runs(bases, _spiky(4, 0.02), metrics=["loss"])
    assert like.metrics["loss"].verdict == "within"


def test_slower_warmup_is_below_by_step_and_within_by_warmup():
    base = make_run("v1.log", seed=1)
    slow = make_run("slow.log", steps=np.arange(1, 2001, 5), warmup=1200, seed=2)
    by_step = compare_runs([base], slow, metrics=["acc"], at=[900])
    # v1 finished warmup at 600 and is climbing; the slow run is still near 0 at 900.
    assert by_step.at[0].verdict == "below"
    assert phase(by_step, "acc", "warmup").below > 0.3
    by_warmup = compare_runs([base], slow, metrics=["acc"], align="warmup", at=[900])
    assert by_warmup.metrics["acc"].verdict == "within"
    assert by_warmup.at[0].verdict == "within"
    assert by_warmup.at[0].warmup_progress == pytest.approx(900 / 1200)
    assert by_warmup.axis == "run step (baselines mapped by fraction of warmup)"
    # The points lined up: each log's warmup end, in its own steps.
    assert by_warmup.anchors == {"v1.log": 600, "slow.log": 1200}


def test_faster_run_is_above_at_the_right_steps():
    base = make_run("v1.log", seed=1)
    fast = make_run("fast.log", warmup=300, seed=2)
    c = compare_runs([base], fast, metrics=["acc"], at=[400, 1400])
    # From step ~300 on the fast run is ahead; by 1400 both have nearly levelled off.
    first, late = c.at
    assert first.verdict == "above"
    assert first.value > first.band[1]
    assert late.value > late.baseline_median


def test_story_point_in_an_unfinished_warmup():
    # v1 warmed up over 2380 steps; the run is at step 349 with lr 8.8e-5.
    base = make_run("v1.log", steps=np.arange(1, 4001, 4), warmup=2380, seed=1)
    run = make_run(steps=np.arange(1, 350), warmup=2380, seed=2)
    c = compare_runs([base], run, metrics=["acc"], at=[349])
    p = c.warmup["run.log"]
    assert not p.warmup_complete and p.warmup_end_step == 2380 and p.peak_lr == PEAK
    assert "run: peak lr taken from the baselines" in c.notes
    a = c.at[0]
    assert a.lr == pytest.approx(PEAK * 349 / 2380)
    assert a.verdict == "within"
    assert a.sentence.endswith(": normal at 15% of warmup.")
    assert a.sentence.startswith(f"At step 349 it is {a.value:.3g} against v1's ")


def test_logs_of_different_lengths_and_intervals_never_extrapolate():
    base = make_run("v1.log", steps=np.arange(1, 801, 10), seed=1)
    run = make_run(steps=np.arange(1, 1501, 3), seed=2)
    c = compare_runs([base], run, metrics=["acc"])
    n_inside_range = int(((run.table.step >= 1) & (run.table.step <= 791)).sum())
    total = sum(p.n_compared for p in c.metrics["acc"].phases)
    assert total == n_inside_range
    assert sum(p.n_points for p in c.metrics["acc"].phases) == len(run.table)
    assert c.metrics["acc"].verdict == "within"


def test_a_missing_stretch_is_not_interpolated_across():
    steps = np.concatenate([np.arange(1, 400, 5), np.arange(1000, 1500, 5)])
    c = compare_runs([make_run("v1.log", steps=steps, seed=1)], make_run(seed=2), at=[700])
    assert c.at[0].verdict == "not enough data"
    assert "do not cover that point" in c.at[0].sentence


def test_restart_rows_keep_the_values_logged_last():
    clean = make_run(seed=2)
    t = clean.table
    # A first pass over steps 500-700 logged garbage, then the resume logged them again.
    garbage = t[(t.step >= 500) & (t.step <= 700)].assign(acc=0.9, loss=9.0)
    cut = t[t.step < 500]
    resumed = RunLog(pd.concat([cut, garbage, t[t.step >= 500]]), "run.log", "test")
    base = [make_run("v1.log", seed=1)]
    a = compare_runs(base, clean)
    b = compare_runs(base, resumed)
    assert a.metrics["acc"].phases == b.metrics["acc"].phases


def test_all_ranks_in_one_table_use_the_lowest_with_a_note():
    run = make_run(seed=2)
    other = run.table.assign(rank=1, acc=run.table.acc + 0.3)
    both = RunLog(pd.concat([run.table.assign(rank=0), other]), "run.log", "test", ranks=(0, 1))
    base = [make_run("v1.log", seed=1)]
    c = compare_runs(base, both)
    assert "run: several ranks logged; rank 0 used" in c.notes
    assert c.metrics["acc"].phases == compare_runs(base, run).metrics["acc"].phases


def test_a_metric_missing_in_one_baseline_is_said_and_the_rest_compared():
    v2 = make_run("v2.log", seed=3)
    v2.table["acc"] = np.nan
    c = compare_runs([make_run("v1.log", seed=1), v2], make_run(seed=2))
    assert c.metrics["acc"].baselines_used == ("v1.log",)
    assert c.metrics["loss"].baselines_used == ("v1.log", "v2.log")
    assert "acc: not logged in v2; compared with v1 only" in c.notes


def test_a_metric_missing_in_the_run_is_skipped_with_a_note():
    run = make_run(seed=2)
    run.table["acc"] = np.nan
    c = compare_runs([make_run("v1.log", seed=1)], run)
    assert list(c.metrics) == ["loss"]
    assert "acc: not logged in run; skipped" in c.notes


def test_no_shared_metric_is_an_input_error():
    run = make_run(seed=2)
    with pytest.raises(InputError) as info:
        compare_runs([make_run("v1.log", seed=1)], run, metrics=["eval_loss"])
    assert str(info.value) == (
        "run.log: no metric is logged by both the run and a baseline (asked for eval_loss); "
        "choose with --metric from: acc, loss"
    )


def test_runs_sharing_no_step_range_are_an_input_error():
    late = make_run(steps=np.arange(2000, 2501, 5), seed=2)
    with pytest.raises(InputError) as info:
        compare_runs([make_run("v1.log", seed=1)], late)
    assert str(info.value) == (
        "run.log: shares no steps range with the baselines: it covers 2000-2500, "
        "v1 1-1496; compare runs that overlap, or try --align warmup"
    )


def test_a_single_baseline_point_gives_not_enough_data():
    one = make_run("v1.log", steps=np.array([300]), seed=1)
    c = compare_runs([one], make_run(seed=2), metrics=["acc"])
    m = c.metrics["acc"]
    assert m.verdict == "not enough data"
    assert all(p.inside is None for p in m.phases)
    assert "v1 logs acc at fewer than 5 points: no band from it" in m.notes
    assert "cannot yet be judged" in m.sentence


def test_nans_are_left_out_not_counted():
    # NaN holes on rows that have no training record (another record's row): absent.
    run = make_run(seed=2)
    rng = np.random.default_rng(0)
    holes = rng.random(len(run.table)) < 0.2
    run.table.loc[holes, ["acc", "loss", "lr"]] = np.nan
    base = make_run("v1.log", seed=1)
    base.table.loc[rng.random(len(base.table)) < 0.2, ["acc", "loss", "lr"]] = np.nan
    c = compare_runs([base], run, metrics=["acc"])
    assert sum(p.n_points for p in c.metrics["acc"].phases) == int((~holes).sum())
    assert c.metrics["acc"].verdict == "within"
    assert c.metrics["acc"].nonfinite["run.log"] == NonFinite(0, None)


def test_logged_nan_and_inf_are_failures_counted_from_their_first_step():
    run = make_run(seed=2)
    steps = run.table.step.to_numpy()
    # acc=nan on rows whose loss and lr were logged, and one acc=inf: logged failures.
    rows = [30, 31, 200]
    run.table.loc[rows[:2], "acc"] = np.nan
    run.table.loc[rows[2], "acc"] = np.inf
    # the reader marks a printed nan (RunLog.logged_nan); an unmarked NaN is absent
    printed = np.zeros(len(run.table), dtype=bool)
    printed[rows[:2]] = True
    run = replace(run, logged_nan={"acc": printed})
    c = compare_runs([make_run("v1.log", seed=1)], run, metrics=["acc"], at=[int(steps[31])])
    m = c.metrics["acc"]
    assert m.nonfinite["run.log"] == NonFinite(3, int(steps[30]))
    assert m.nonfinite["v1.log"] == NonFinite(0, None)
    assert sum(p.n_points for p in m.phases) == len(steps) - 3  # not compared as values
    assert m.verdict == "within"
    assert f"nan/inf at 3 steps (first at step {steps[30]})" in m.sentence
    assert c.at[0].verdict == "non-finite" and c.at[0].value is None
    assert np.isfinite(m.curves.run[1]).all()


def test_eval_metric_between_evaluations_is_absent_and_plotted_at_its_points():
    # eval_loss every 50 steps (NaN on the rows between): absent, not a failure.
    def with_eval(path, seed):
        r = make_run(path, seed=seed)
        every = (r.table.step - 1) % 50 == 0
        r.table["eval_loss"] = np.where(every, r.table.loss + 0.05, np.nan)
        return r

    c = compare_runs([with_eval("v1.log", 1)], with_eval("run.log", 2), metrics=["eval_loss"])
    m = c.metrics["eval_loss"]
    assert all(v == NonFinite(0, None) for v in m.nonfinite.values())
    assert sum(p.n_points for p in m.phases) == 30  # steps 1, 51, ..., 1451
    assert m.verdict == "within"
    x, v = m.curves.run
    assert len(x) == 30 and np.isfinite(v).all()  # a line through its points, not NaN gaps
    assert "nan/inf" not in m.sentence


def _table(**cols):
    return pd.DataFrame({"step": np.arange(1, len(next(iter(cols.values()))) + 1), **cols})


def test_logged_nonfinite_tells_absent_from_failed():
    nan, inf = np.nan, np.inf
    t = _table(
        loss=[2.0, nan, 1.9, 1.8, 1.7, nan, 1.6, -inf],
        lr=[1e-4, 1e-4, 1e-4, 1e-4, 1e-4, nan, 1e-4, 1e-4],
        grad_norm=[1.0, 1.0, 1.0, 1.0, 1.0, nan, 1.0, 1.0],
        eval_loss=[nan, nan, nan, nan, nan, 2.1, nan, nan],
        acc_0=[0.1, nan, nan, nan, 0.2, nan, nan, inf],
    )
    # Row 1: loss nan beside lr, a failure; row 5: an eval record, loss absent there.
    assert logged_nonfinite(t, "loss").tolist() == [0, 1, 0, 0, 0, 0, 0, 1]
    assert not logged_nonfinite(t, "eval_loss").any()
    # acc_0 is logged every 4th training row: NaN between is absent; inf is a failure.
    assert logged_nonfinite(t, "acc_0").tolist() == [0, 0, 0, 0, 0, 0, 0, 1]
    assert not logged_nonfinite(t, "nope").any()


@given(
    n=st.integers(12, 80),
    holes=st.lists(st.integers(0, 79), max_size=5),
    infs=st.lists(st.integers(0, 79), max_size=3),
    every=st.integers(2, 9),
)
@settings(max_examples=examples(200), deadline=None)
def test_logged_nonfinite_flags_exactly_the_failures(n, holes, infs, every):
    # Invariant: on a metric logged with every training record (nan in at most a third of
    # them, so most of its gaps are one row), the failures flagged are exactly its nan
    # cells beside a logged lr and its inf cells; an eval metric logged every few rows is
    # never flagged for its NaN cells.
    holes = sorted({h % n for h in holes})[: (n - 1) // 3]
    infs = sorted({i % n for i in infs} - set(holes))
    loss = np.linspace(3, 1, n)
    loss[holes] = np.nan
    loss[infs] = np.inf
    evals = np.where(np.arange(n) % every == 0, 2.0, np.nan)
    t = _table(loss=loss, lr=np.full(n, 1e-4), eval_loss=evals)
    assert np.flatnonzero(logged_nonfinite(t, "loss")).tolist() == sorted(holes + infs)
    assert not logged_nonfinite(t, "eval_loss").any()


def test_tokens_alignment_lines_up_runs_with_different_batch_sizes():
    # The run's steps hold twice the tokens: by tokens it is v1 at twice the step.
    base = make_run("v1.log", steps=np.arange(1, 3001, 5), seed=1, tokens=1000.0)
    big = make_run("big.log", steps=np.arange(1, 1501, 5), warmup=300, speed=2, seed=2, tokens=2e3)
    assert compare_runs([base], big, align="step", metrics=["acc"]).metrics["acc"].verdict != (
        "within"
    )
    c = compare_runs([base], big, align="tokens", metrics=["acc"])
    assert c.metrics["acc"].verdict == "within"
    assert c.metrics["acc"].slopes[0].per == "1B tokens"


def test_cumulative_tokens_column_is_read_as_such():
    steps = np.arange(1, 1501, 5)
    base = make_run("v1.log", seed=1, tokens=1000.0 * steps)  # "tokens seen"
    run = make_run(seed=2, tokens=1000.0)
    c = compare_runs([base], run, align="tokens", metrics=["acc"])
    assert c.metrics["acc"].verdict == "within"


def test_tokens_alignment_without_tokens_is_an_input_error():
    with pytest.raises(InputError, match=r"^v1.log: no tokens logged; --align tokens needs"):
        compare_runs([make_run("v1.log", seed=1)], make_run(seed=2), align="tokens")


def test_warmup_alignment_needs_the_run_warmup():
    run = make_run(seed=2, lr=False)
    with pytest.raises(InputError) as info:
        compare_runs([make_run("v1.log", seed=1)], run, align="warmup")
    assert str(info.value) == (
        "run.log: --align warmup needs the run's warmup: lr is not logged; give --warmup-steps N"
    )
    c = compare_runs([make_run("v1.log", seed=1)], run, align="warmup", warmup_steps=599)
    assert c.warmup["run.log"].source == "given"
    assert c.metrics["acc"].verdict == "within"


def test_at_answers_logged_interpolated_and_outside_steps():
    run = make_run(seed=2)
    c = compare_runs([make_run("v1.log", seed=1)], run, metrics=["acc"], at=[501, 503, 9999])
    logged, between, outside = c.at
    assert logged.value == pytest.approx(float(run.table.loc[run.table.step == 501, "acc"].iloc[0]))
    a, b = run.table.loc[run.table.step.isin([501, 506]), "acc"]
    assert between.value == pytest.approx(a + (b - a) * 2 / 5)
    assert outside.verdict == "not logged" and outside.value is None
    assert logged.band[0] <= logged.baseline_median <= logged.band[1]


def test_milestones_up_for_acc_down_for_loss():
    base = make_run("v1.log", seed=1, noise=0.0)
    run = make_run(seed=2, noise=0.0, warmup=300)
    levels = parse_milestones(["0.3", "loss=1.5"])
    c = compare_runs([base], run, milestones=levels)
    (acc30,) = c.metrics["acc"].milestones
    # First step where the noiseless curve reaches 0.3, on each log's 5-step grid.
    x = np.arange(1, 1501, 5)
    truth_v1 = int(x[np.argmax(curve_acc(x) >= 0.3)])
    assert acc30.direction == "up" and abs(acc30.steps["v1.log"] - truth_v1) <= 5
    assert acc30.steps["run.log"] < acc30.steps["v1.log"]
    (loss15,) = c.metrics["loss"].milestones
    truth_loss = int(x[np.argmax(curve_loss(x) <= 1.5)])
    assert loss15.direction == "down" and abs(loss15.steps["v1.log"] - truth_loss) <= 5


def test_default_milestones_are_for_acc_like_metrics_only():
    c = compare_runs([make_run("v1.log", seed=1)], make_run(seed=2))
    assert [m.level for m in c.metrics["acc"].milestones] == [0.1, 0.3, 0.5]
    assert c.metrics["loss"].milestones == ()


def test_per_position_metrics_are_compared_by_default():
    n = len(np.arange(1, 1501, 5))
    rng = np.random.default_rng(5)
    cols = {f"acc_{i}": 0.5 + rng.normal(0, 0.01, n) for i in (0, 1, 10)}
    c = compare_runs([make_run("v1.log", seed=1, columns=cols)], make_run(seed=2, columns=cols))
    assert list(c.metrics) == ["loss", "acc", "acc_0", "acc_1", "acc_10"]


def test_several_baselines_envelope_and_quantile_band():
    run = make_run(seed=2)
    odd = make_run("odd.log", seed=9, acc_shift=0.2)
    few = compare_runs([make_run("v1.log", seed=1), odd], run, metrics=["acc"], at=[1000])
    # Two baselines: the envelope reaches up to the odd one.
    assert few.at[0].band[1] > 0.2 + few.at[0].value - 0.05
    many = [make_run(f"v{i}.log", seed=i) for i in range(1, 6)] + [odd]
    c = compare_runs(many, run, metrics=["acc"], at=[1000])
    # Six baselines: the 90th percentile trims the odd one.
    assert c.at[0].band[1] < few.at[0].band[1] - 0.1
    assert c.at[0].verdict == "within"
    assert "quantiles of 6 baselines" in c.band_method


def test_bad_options_are_input_errors():
    base, run = [make_run("v1.log", seed=1)], make_run(seed=2)
    with pytest.raises(InputError, match="^--align: unknown value 'epoch'; choose from step"):
        compare_runs(base, run, align="epoch")
    with pytest.raises(InputError, match="^--band-k: must be a positive number, got 0"):
        compare_runs(base, run, band_k=0)
    with pytest.raises(InputError, match="^run.log: no baseline to compare with"):
        compare_runs([], run)
    with pytest.raises(InputError, match="^--milestones: not a list of numbers: 'acc=a'"):
        parse_milestones(["acc=a"])


def test_slope_ci_covers_the_true_slope():
    rng = np.random.default_rng(3)
    x = np.arange(0, 5000, 10.0)
    noise = np.convolve(rng.normal(0, 0.02, x.size + 9), np.ones(10) / 10, mode="valid")
    s = slope_with_ci(x, 0.1 + 4e-5 * x + noise)
    assert s.ci[0] < 0.04 < s.ci[1]
    assert s.ci[1] - s.ci[0] < 0.01
    few = slope_with_ci(x[:5], x[:5])
    assert few.value is None and few.reason == "not enough data: 5 points after warmup"


def test_metric_kinds():
    assert [metric_kind(m) for m in ("acc", "acc_7", "loss", "loss_2", "grad_norm")] == [
        "acc",
        "acc",
        "loss",
        "loss",
        "other",
    ]


@settings(max_examples=examples(25), deadline=None)
@given(
    seed=st.integers(0, 10_000),
    every=st.integers(1, 20),
    shift=st.floats(-0.1, 0.1),
    n=st.integers(5, 200),
)
def test_shares_and_bands_are_consistent(seed, every, shift, n):
    run = make_run(steps=np.arange(1, 1 + n * every, every), seed=seed, acc_shift=shift)
    c = compare_runs([make_run("v1.log", seed=seed + 1)], run, metrics=["acc"], at=[every * 3])
    for p in c.metrics["acc"].phases:
        # Invariant: compared points are a subset; the three shares make the whole.
        assert p.n_compared <= p.n_points
        if p.inside is not None:
            assert p.inside + p.above + p.below == pytest.approx(1.0)
    _, med, lo, hi = c.metrics["acc"].curves.band
    assert np.all(lo <= med) and np.all(med <= hi)


# --- steps that are line numbers ---------------------------------------------------------


def events(path, seed, every=10):
    """A run logged every ``every`` steps as a reader sees HF dict lines without steps:
    its records numbered 1, 2, ... (``step_source`` "line order")."""
    r = make_run(path, steps=np.arange(every, 1501, every), seed=seed)
    table = r.table.assign(step=np.arange(1, len(r.table) + 1))
    return RunLog(table, path, "test", step_source="line order")


def test_line_numbers_are_not_lined_up_with_steps():
    stepped = make_run("v1.log", steps=np.arange(10, 1501, 10), seed=1)
    for baselines, run in (([stepped], events("hf.log", 1)), ([events("hf.log", 1)], stepped)):
        with pytest.raises(InputError) as e:
            compare_runs(baselines, run)
        assert str(e.value) == (
            "hf.log: its records carry no step (numbered 1, 2, ... by logging event), so "
            "they cannot be lined up with v1's optimizer steps; pass --step-every N (the "
            "trainer's logging_steps)"
        )


def test_step_every_renumbers_the_line_numbered_logs_only():
    stepped = make_run("v1.log", steps=np.arange(10, 1501, 10), seed=1)
    logs = apply_step_every([stepped, events("hf.log", 1)], 10)
    assert logs[0] is stepped
    assert logs[1].step_source == "given interval"
    assert logs[1].table.step.tolist() == list(range(10, 1501, 10))
    # The same numbers, now on the same steps: nothing to tell apart.
    c = compare_runs(logs[:1], logs[1])
    assert all(m.verdict == "within" for m in c.metrics.values())
    assert apply_step_every([stepped], None) == [stepped]
    with pytest.raises(InputError, match="every log numbers its own steps"):
        apply_step_every([stepped, stepped], 10)
    with pytest.raises(InputError, match="must be a positive whole number, got 0"):
        apply_step_every([events("hf.log", 1)], 0)


def test_line_numbered_logs_are_compared_as_logging_events_and_said_so():
    c = compare_runs([events("v1.log", 1)], events("run.log", 2), at=[100])
    assert c.step_sources == {"v1.log": "line order", "run.log": "line order"}
    assert c.axis == "logging event"
    assert any(n.startswith("steps are logging events") for n in c.notes)
    slopes = c.metrics["acc"].slopes
    assert slopes[0].per == "1k logging events"
    assert c.metrics["acc"].verdict == "within"
    # The sentences never call an event a step.
    assert c.at[0].sentence.startswith("At logging event 100 it is ")
    assert c.at[0].sentence.endswith("40 logging events past the end of warmup (logging event 60).")
    assert " step" not in c.metrics["acc"].sentence
    stepped = compare_runs([make_run("v1.log", seed=1)], make_run(seed=2))
    assert set(stepped.step_sources.values()) == {"field"} and stepped.axis == "step"


# --- what is printed adds up --------------------------------------------------------------


def test_each_baseline_slope_comes_with_the_run_slope_over_the_same_span():
    # The run's whole post-warmup range (to 1496) is longer than v1's (to 996): the
    # difference is over 601-996 and the run's slope there is given with it.
    base = make_run("v1.log", steps=np.arange(1, 1001, 5), seed=1)
    c = compare_runs([base], make_run(seed=2), metrics=["acc"])
    run, v1 = c.metrics["acc"].slopes
    assert run.span == (601.0, 1496.0) and v1.span == (601.0, 996.0)
    shared = make_run(steps=np.arange(1, 1001, 5), seed=2)
    same_span = compare_runs([base], shared, metrics=["acc"]).metrics["acc"].slopes[0]
    assert v1.run_value == pytest.approx(same_span.value)
    assert v1.run_n == same_span.n and v1.run_ci == pytest.approx(same_span.ci)
    assert v1.run_minus == v1.run_value - v1.value
    assert abs(v1.run_value - run.value) > 0.05  # the curve flattens: spans matter


@pytest.mark.parametrize(
    "run, base, diff",
    [(1.0312, 1.1204, -0.0892), (0.0, 0.0, 0.0), (-0.21, -0.2099, -0.0001), (123.4, 5.6, 117.8)],
)
def test_versus_figures_difference_is_of_the_printed_slopes(run, base, diff):
    from decimal import Decimal

    s = Slope("v1", base, (base - 1, base + 1), 50, "1k steps", run_value=run)
    s = replace(s, run_ci=(run - 1, run + 1), run_minus=diff, run_minus_ci=(diff - 1, diff + 1))
    f = versus_figures(s)
    assert Decimal(f.run) - Decimal(f.base) == Decimal(f.diff)
    assert abs(float(f.diff) - diff) <= 10.0 ** -len(f.diff.partition(".")[2])


# --- positions, not durations ---------------------------------------------------------------


def test_a_point_after_warmup_is_a_position_past_its_end():
    c = compare_runs(
        [make_run("v1.log", seed=1)],
        make_run(seed=2, acc_shift=-0.1, shift_from=800),
        metrics=["acc"],
        at=[901, 600],
    )
    late, end = sorted(c.at, key=lambda a: -a.step)
    assert late.verdict == "below"
    assert late.sentence.endswith(
        ": below the band at 301 steps past the end of warmup (step 600): behind."
    )
    assert end.sentence.endswith(": normal at the end of warmup (step 600).")


def test_a_printed_nan_read_from_a_log_is_a_failure_and_an_absent_eval_is_not(tmp_path):
    # end to end through the reader's marks: loss=nan printed at step 120 of the run
    def write(name: str, nan_at: int) -> str:
        lines = []
        for s in range(1, 401):
            loss = "nan" if s == nan_at else f"{3.0 - s / 400:.4f}"
            lines.append(f"step={s} loss={loss} lr={min(s, 100) * 1e-6:.2e}")
            if s % 50 == 0:
                lines.append(f"step={s} eval_loss={3.1 - s / 400:.4f}")
        (tmp_path / name).write_text("\n".join(lines) + "\n")
        return str(tmp_path / name)

    from dflash_diag.logs import read_log

    base, run = read_log(write("v1.log", 0)), read_log(write("run.log", 120))
    c = compare_runs([base], run, metrics=["loss", "eval_loss"])
    assert c.metrics["loss"].nonfinite[run.path] == NonFinite(1, 120)
    assert c.metrics["eval_loss"].nonfinite[run.path] == NonFinite(0, None)


def test_a_run_given_as_its_own_baseline_says_so(tmp_path):
    """Its spikes lie outside the band it helps make: true, and the note says why."""
    c = compare_runs([make_run("run.log", seed=1)], make_run("run.log", seed=1))
    assert any("is also one of its own baselines" in n for n in c.notes)
    (tmp_path / "a.log").write_text("x")
    (tmp_path / "b.log").symlink_to(tmp_path / "a.log")
    linked = compare_runs(
        [make_run(str(tmp_path / "a.log"), seed=1)], make_run(str(tmp_path / "b.log"), seed=1)
    )
    assert any("is also one of its own baselines" in n for n in linked.notes)
    other = compare_runs([make_run("v1.log", seed=1)], make_run(seed=2))
    assert not any("own baselines" in n for n in other.notes)
