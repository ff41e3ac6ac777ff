"""The plots' elements, read from the figure objects: labels, legends, annotations, limits.

Each plot was also looked at as a picture (PNG) when it was made; these tests keep what
makes it readable from silently going away.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from dflash_diag.composition import Request
from dflash_diag.render.batches import batches_figure
from dflash_diag.render.compare import comparison_figure, run_labels
from dflash_diag.render.spikes_plot import VERDICT_COLOURS, labelled, spikes_figure
from dflash_diag.reports import (
    BatchesOptions,
    SpikesOptions,
    batches_report,
    compare_report,
    spikes_report,
)

SAMPLE_MANIFEST = "sample_logs/manifest.parquet"
SAMPLE_CONFIG = "sample_logs/dflash-diag.toml"

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spikes():
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        yield spikes_report("sample_logs/run.log")


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def _legend(ax_or_fig) -> list[str]:
    legends = getattr(ax_or_fig, "legends", None) or [ax_or_fig.get_legend()]
    return [t.get_text() for lg in legends if lg is not None for t in lg.get_texts()]


@pytest.mark.slow
def test_spikes_plot_tells_the_story(spikes):
    fig = spikes_figure(spikes)
    main, strip, lengths = fig.axes[:3]
    # title: the file and the share composition explains (held out)
    share = f"{spikes.variance.composition_r2_cv:.0%}"
    assert "sample_logs/run.log" in main.get_title() and share in main.get_title()
    # a legend entry for every mark: the line, the baseline, the band, each verdict
    legend = _legend(main)
    assert {"loss", "baseline"} <= set(legend)
    assert any(t.startswith("flag line") for t in legend)
    for verdict in {s.verdict for s in spikes.spikes}:
        assert any(t.startswith(f"spike: {verdict}") for t in legend), verdict
    # 254 and 258 labelled apart; 1999 (unexplained) labelled
    texts = _texts(main)
    for step in ("254", "258", "1999"):
        assert any(t.split("\n")[0] == step for t in texts), step
    fig.canvas.draw()
    box = {t.get_text(): t.get_window_extent() for t in main.texts}
    assert not box["254"].overlaps(box["258"])
    # the band is visible: its median top takes a fair share of the panel's height
    d = spikes.detection
    top = float(np.nanmedian(d.baseline + d.threshold * d.scale))
    lo, hi = main.get_ylim()
    scale = np.log if main.get_yscale() == "log" else (lambda x: x)
    assert (scale(top) - scale(lo)) / (scale(hi) - scale(lo)) > 0.2
    # and nothing is cut: the highest spike is inside the axis
    assert max(s.event.value for s in spikes.spikes) <= hi
    # the optimizer strip and the length panel
    assert strip.get_ylabel() == "grad_norm" and strip.get_xlabel() == "step"
    assert any("1999: grad_norm" in t for t in _texts(strip))
    assert lengths.get_xlabel() == "batch mean length (tokens)"
    assert lengths.get_ylabel() == "detrended loss"
    assert {"ordinary points", "spike: composition", "spike: unexplained"} <= set(_legend(lengths))


@pytest.mark.slow
def test_spike_markers_are_coloured_by_verdict(spikes):
    import matplotlib.colors as mcolors

    fig = spikes_figure(spikes)
    main = fig.axes[0]
    want = {mcolors.to_hex(c) for c in VERDICT_COLOURS.values()}
    got = {mcolors.to_hex(c.get_facecolor()[0]) for c in main.collections if len(c.get_offsets())}
    assert (
        {mcolors.to_hex(VERDICT_COLOURS[s.verdict]) for s in spikes.spikes}
        <= got
        <= want | {mcolors.to_hex("C1")}
    )


@pytest.mark.slow
def test_the_labelled_spikes_include_the_largest_and_every_unexplained(spikes):
    assert any(s.verdict == "unexplained" for s in spikes.spikes)
    named = labelled(spikes)
    biggest = max(spikes.spikes, key=lambda s: s.rise if math.isfinite(s.rise) else -1)
    assert biggest.event.peak_step in named
    assert {s.event.peak_step for s in spikes.spikes if s.verdict == "unexplained"} <= named


@pytest.mark.slow
def test_without_a_manifest_two_panels_and_no_verdict_legend(tmp_path):
    log = tmp_path / "run.log"
    log.write_text((ROOT / "sample_logs/run.log").read_text())
    report = spikes_report(log)
    fig = spikes_figure(report)
    assert len([a for a in fig.axes if a.get_ylabel() != "lr"]) == 2
    legend = _legend(fig.axes[0])
    assert "spike (no manifest: --manifest attributes it)" in legend
    assert not any(t.startswith("spike: ") for t in legend)
    # only the largest rises are labelled, not all 39
    steps = {str(s.event.peak_step) for s in report.spikes}
    assert 0 < len([t for t in _texts(fig.axes[0]) if t in steps]) <= len(labelled(report))


@pytest.fixture(scope="module")
def comparison():
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        yield compare_report(
            ["sample_logs/v1.log", "sample_logs/run.log"], at=(349, 1000), metrics=["acc", "loss"]
        )


def test_compare_plot_has_one_legend_annotated_answers_and_the_baselines_end(comparison):
    fig = comparison_figure(comparison)
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    legend = _legend(fig)
    assert {"baseline band", "baseline median", "v1", "run", "--at answer"} <= set(legend)
    acc, loss = fig.axes
    assert (acc.get_ylabel(), loss.get_ylabel(), loss.get_xlabel()) == ("acc", "loss", "step")
    for ax, metric in ((acc, "acc"), (loss, "loss")):
        notes = _texts(ax)
        for a in comparison.at:
            if a.metric == metric:
                assert any(t.startswith(f"step {a.step}: ") and a.verdict in t for t in notes)
        assert any(t.startswith("baselines end") for t in notes)
    # robust limits: the loss spikes do not set the axis; the panel says how many are cut
    assert loss.get_ylim()[1] < max(comparison.metrics["loss"].curves.run[1])
    assert "beyond the axis" in loss.get_title()


def test_two_files_of_the_same_name_get_their_folders():
    c = SimpleNamespace(baselines=("a/train.log",), run="b/train.log")
    assert run_labels(c) == {"a/train.log": "a/train", "b/train.log": "b/train (run)"}
    c = SimpleNamespace(baselines=("runs/v1.log",), run="runs/v2.log")
    assert run_labels(c) == {"runs/v1.log": "v1", "runs/v2.log": "v2 (run)"}


@pytest.mark.slow
def test_batches_plot_draws_every_compared_strategy(monkeypatch):
    monkeypatch.chdir(ROOT)
    r = batches_report(
        Request(manifest=SAMPLE_MANIFEST, config=SAMPLE_CONFIG, flags={"epochs": 1}),
        BatchesOptions(compare=["sorted-greedy", "bucketed", "random"], plots=True),
    )
    fig = batches_figure(r)
    panels = [ax for ax in fig.axes if ax.get_title(loc="left")]
    assert [ax.get_title(loc="left").split(":")[0] for ax in panels] == [
        "sorted-greedy",
        "bucketed",
        "random",
    ]
    for ax, st in zip(panels, r.strategies, strict=True):
        assert f"{st.padding_efficiency:.1%}" in ax.get_title(loc="left")
        assert ax.get_ylabel().startswith("mean length")
    diversity = fig.axes[-1]
    assert diversity.get_xlabel() == "diversity: 1 - length ICC"
    notes = _texts(diversity)
    for st in r.strategies:
        assert any(t.startswith(st.strategy) and f"{st.padding_efficiency:.1%}" in t for t in notes)


def test_one_strategy_has_no_lone_dot(monkeypatch):
    monkeypatch.chdir(ROOT)
    r = batches_report(
        Request(manifest=SAMPLE_MANIFEST, config=SAMPLE_CONFIG, flags={"epochs": 1}),
        BatchesOptions(plots=True),
    )
    fig = batches_figure(r)
    assert len(fig.axes) == 1 and "--compare" in fig._suptitle.get_text()


# -- --smooth, --log-y, --label, --steps (looked at as PNGs when they were made) -------------


@pytest.mark.slow
def test_spikes_plot_smooths_over_the_faint_raw_curve_and_takes_a_label(spikes):
    from dataclasses import replace

    from dflash_diag.render.plots import ema

    labelled_report = replace(spikes, context=replace(spikes.context, label="v2 (sorted)"))
    fig = spikes_figure(labelled_report, smooth=0.9, log_y=True)
    main = fig.axes[0]
    d = spikes.detection
    drawn = {id(ln): ln for ln in main.get_lines()}.values()
    smoothed = [
        ln for ln in drawn if np.allclose(ln.get_ydata(), ema(d.values, 0.9), equal_nan=True)
    ]
    raw = [ln for ln in drawn if np.array_equal(ln.get_ydata(), d.values, equal_nan=True)]
    assert smoothed and raw and (raw[0].get_alpha() or 1) < 0.5
    assert "loss, smoothed (EMA 0.9)" in _legend(main) and "loss, raw" in _legend(main)
    assert main.get_yscale() == "log"
    assert main.get_title().startswith("v2 (sorted): 39 spikes in loss")


@pytest.mark.slow
def test_spikes_plot_of_a_step_range():
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        report = spikes_report("sample_logs/run.log", SpikesOptions(steps=(200, 300)))
    fig = spikes_figure(report)
    main, strip, lengths = fig.axes[:3]
    lo, hi = main.get_xlim()
    assert 195 <= lo <= 200 and 300 <= hi <= 305
    assert "steps 200-300 of 1-2961" in main.get_title()
    # the spikes of the range are marked and labelled, the band still visible
    assert {"254", "258"} <= {t.split("\n")[0] for t in _texts(main)}
    y0, y1 = main.get_ylim()
    assert y1 >= max(s.event.value for s in report.spikes) and y1 < 20
    # the length panel holds only the range's points (101 steps, 2 spikes)
    n = sum(len(c.get_offsets()) for c in lengths.collections)
    assert n <= 101


@pytest.mark.slow
def test_compare_plot_with_labels_smoothing_log_axes_and_a_step_range(comparison):
    from dflash_diag.render.compare import display_names

    names = display_names(comparison, ["v1 (sorted)", "v2"])
    fig = comparison_figure(comparison, names=names, smooth=0.8, log_y=True, steps=(200, 600))
    legend = _legend(fig)
    assert {"v1 (sorted)", "v2 (run)", "raw values (curves: EMA 0.8)"} <= set(legend)
    assert fig.legends[0].get_title().get_text() == "v2 (run) against v1 (sorted)"
    for ax in fig.axes:
        assert ax.get_yscale() == "log"
        lo, hi = ax.get_xlim()
        assert 190 <= lo <= 200 and 600 <= hi <= 610
        # the raw run faint, its EMA drawn over it
        alphas = sorted((ln.get_alpha() or 1) for ln in ax.get_lines() if ln.get_color() == "black")
        assert alphas[0] < 0.5 and alphas[-1] == 1
    fig.canvas.draw()  # (the baselines-end note lies outside the range: clipped, not drawn far off)
    assert fig.get_tightbbox().width < 2 * fig.get_figwidth()  # (inches)


@pytest.mark.parametrize(
    "baselines, run",
    [
        (("s4a/csv/version_0/metrics.csv",), "s4b/csv/version_0/metrics.csv"),
        (("p/a/m.log", "q/a/m.log"), "p/b/m.log"),
        (("/runs/x/train.log",), "/runs/y/train.log"),
        (("v1.log", "old/v1.log"), "v2.log"),
    ],
)
def test_each_file_gets_as_many_folders_as_tell_it_apart(baselines, run):
    """Two Lightning runs' ``csv/version_0/metrics.csv`` are not "version_0/metrics
    against version_0/metrics"."""
    names = run_labels(SimpleNamespace(baselines=baselines, run=run))
    shown = [names[f].removesuffix(" (run)") for f in (*baselines, run)]
    assert len(set(shown)) == len(shown), shown
    for f, label in zip((*baselines, run), shown, strict=True):
        assert f.removesuffix(".log").removesuffix(".csv").endswith(label), (f, label)
