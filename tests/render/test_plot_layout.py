"""What the plots draw does not hide itself: spike labels, measured as the renderer
draws them, overlap no other label and no spike marker; the compare run line lies under
the band's edges and median; two warmup ends on one step are one line, said so."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from matplotlib.collections import PathCollection
from matplotlib.text import Annotation
from matplotlib.transforms import Bbox

from dflash_diag.render.compare import comparison_figure
from dflash_diag.render.spikes_plot import spikes_figure
from dflash_diag.reports import compare_report, spikes_report

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # (a replay of the sample: seconds)


def _label_boxes(ax, renderer) -> list[tuple[str, Bbox]]:
    return [
        (t.get_text(), t.get_window_extent(renderer))
        for t in ax.texts
        if isinstance(t, Annotation) and t.get_text().split("\n")[0].isdigit()
    ]


def _marker_boxes(ax, renderer) -> list[Bbox]:
    """Each scatter point of a spike (the coloured collections, not the grey points) as
    its drawn box."""
    out = []
    for coll in ax.collections:
        if not isinstance(coll, PathCollection) or coll.get_label() == "ordinary points":
            continue
        r = (coll.get_sizes()[0] ** 0.5) / 2 * ax.figure.dpi / 72
        for px, py in coll.get_offset_transform().transform(coll.get_offsets()):
            out.append(Bbox.from_extents(px - r, py - r, px + r, py + r))
    return out


@pytest.fixture(scope="module")
def figures():
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        yield {
            "run": spikes_figure(spikes_report("sample_logs/run.log")),
            "compare": comparison_figure(
                compare_report(["sample_logs/v1.log", "sample_logs/run.log"])
            ),
        }


def test_spike_labels_overlap_no_label_and_no_marker(figures):
    fig = figures["run"]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    main, lengths = fig.axes[0], fig.axes[2]
    for ax in (main, lengths):
        labels = _label_boxes(ax, renderer)
        assert len(labels) >= 8
        for (a, box_a), (b, box_b) in itertools.combinations(labels, 2):
            assert not box_a.overlaps(box_b), (a, b)
        for text, box in labels:
            assert not any(box.overlaps(m) for m in _marker_boxes(ax, renderer)), text
        spikes = [c for c in ax.collections if isinstance(c, PathCollection)]
        assert all(t.get_zorder() > c.get_zorder() for t in ax.texts for c in spikes)


def test_the_compare_band_edges_and_median_are_drawn_over_the_run(figures):
    for ax in figures["compare"].axes:
        run = [ln for ln in ax.lines if ln.get_color() == "black"]
        median = [ln for ln in ax.lines if ln.get_linestyle() == "--"]
        edges = [
            ln for ln in ax.lines if ln.get_color() == "tab:blue" and ln.get_linestyle() == "-"
        ]
        assert run and len(median) == 1 and len(edges) == 2
        top_run = max(ln.get_zorder() for ln in run)
        assert median[0].get_zorder() > top_run and min(e.get_zorder() for e in edges) > top_run
        assert max(ln.get_alpha() or 1.0 for ln in run) < 1.0  # (the band shows through)


def test_warmup_ends_on_one_step_are_one_line_and_the_legend_says_so(figures):
    fig = figures["compare"]
    fig.canvas.draw()
    for ax in fig.axes:
        reds = [ln for ln in ax.lines if ln.get_color() == "tab:red"]
        xs = sorted(ax.transData.transform((ln.get_xdata()[0], 0))[0] for ln in reds)
        assert len(xs) >= 1 and all(b - a >= 3 for a, b in itertools.pairwise(xs))
    legend = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert "warmup end: run and baselines" in legend
    assert "warmup end: baselines" not in legend  # (v1's ends on the run's step, 2379)
