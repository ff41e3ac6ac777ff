"""The ``spikes`` figure: the metric with its spikes, the optimizer's strip, the batches.

Three panels, one story:

1. the metric (grey) with its baseline (orange) and the flag line (baseline + critical
   z x scale, the shaded band), y-limits set by the ordinary points so the band is
   visible; every spike marked in its verdict's colour and labelled by step; spikes
   above the axis are drawn at its top edge as ``^`` with their value;
2. grad_norm (and lr, right axis) under it, on the same steps;
3. the detrended metric against the batch mean length (log axis), spikes coloured by
   verdict: where composition explains spikes, they sit at the long end.

The title names the run (``--label``, else the file) and the share of the variance
composition explains.  ``--steps A:B`` limits the x-range (and the y-limits and the
length panel's points) to those steps; ``--smooth ALPHA`` draws the metric's EMA over the
raw curve, drawn faint; ``--log-y`` puts the metric on a log axis.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..reports import SpikesReport

#: One colour per verdict (the same in every panel and in the HTML).
VERDICT_COLOURS = {
    "composition": "#1a7f37",
    "data": "#8250df",
    "unexplained": "#c0262d",
    "inconclusive": "#8a8a8a",
}
#: Spikes labelled by step: this many of the largest rises (and every unexplained one).
LABELLED = 8


def _limits(
    values: Any, band_top: Any, flagged: Any, log_y: bool = False
) -> tuple[float, float, bool]:
    """``(low, high, log)``: y-limits that keep the baseline band visible.  With positive
    values and spikes over 3x the ordinary points' median (or ``log_y``), a log axis from
    the lowest point to the highest spike (nothing is cut); else the ordinary points'
    1-99% range and the band's 99th percentile, with a margin (spikes above it are drawn
    at the top edge)."""
    import numpy as np

    finite = values[np.isfinite(values)]
    ordinary = values[~flagged & np.isfinite(values)]
    if ordinary.size == 0:
        ordinary = finite
    if ordinary.size == 0:
        return 0.0, 1.0, False
    median = float(np.median(ordinary))
    if log_y and (finite > 0).any():
        pos = finite[finite > 0]
        return float(pos.min()) / 1.15, float(pos.max()) * 1.35, True
    if finite.min() > 0 and median > 0 and finite.max() > 3 * median:
        return float(finite.min()) / 1.15, float(finite.max()) * 1.35, True
    lo, hi = np.nanpercentile(ordinary, [1, 99])
    top = band_top[np.isfinite(band_top)]
    if top.size:
        hi = max(hi, float(np.nanpercentile(top, 99)))
    pad = 0.08 * (hi - lo) if hi > lo else 0.5 * abs(hi) + 1e-9
    return float(lo - pad), float(hi + 3 * pad), False


def _title(report: SpikesReport) -> str:
    d, v = report.detection, report.variance
    counts: dict[str, int] = {}
    for s in report.spikes:
        counts[s.verdict] = counts.get(s.verdict, 0) + 1
    parts = [f"{n} {k}" for k, n in sorted(counts.items())]
    ctx = report.context
    head = f"{ctx.label or ctx.log}: {len(report.spikes)} spikes in {d.metric}"
    if ctx.steps is not None and ctx.span is not None:
        lo, hi = ctx.steps
        word = "events" if ctx.line_order else "steps"
        a = ctx.span[0] if lo is None else lo
        b = ctx.span[1] if hi is None else hi
        head += f", {word} {a}-{b} of {ctx.span[0]}-{ctx.span[1]}"
    if parts and report.attribution is not None:
        head += " (" + ", ".join(parts) + ")"
    if v is not None and v.composition_r2_cv is not None:
        head += f"\nbatch composition explains {v.composition_r2_cv:.0%} of its variance (held out)"
    return head


#: Offsets (points) of a label above its spike's marker, nearest first.
_ABOVE = tuple(
    (dx, dy, {0: "center", 6: "left", -6: "right"}[dx], "bottom")
    for dy in (5, 14, 23, 32)
    for dx in (0, 6, -6)
)
#: Offsets of a label under the top edge, for a spike above the axis (``^``).
_UNDER_TOP = tuple(
    (dx, dy, {0: "center", 10: "left", -10: "right"}[dx], "top")
    for dy in (-14, -34, -54, -74)
    for dx in (0, 10, -10)
)

Labels = list[tuple[Any, tuple[tuple[float, float, str, str], ...]]]


def _mark_spikes(ax: Any, report: SpikesReport, top: float) -> tuple[Labels, list[Any]]:
    """Each spike at its value in its verdict's colour, the labelled ones (by step)
    placed later by :func:`~dflash_diag.render.plots.place_labels`; above ``top``: a
    ``^`` at the top edge, the label with the value.

    :returns: the labels with their offsets (largest rise first) and the markers'
        data positions."""
    step_word = "event " if report.context.line_order else ""
    named = labelled(report)
    labels: list[tuple[float, Any, tuple[tuple[float, float, str, str], ...]]] = []
    marks: list[Any] = []
    for s in sorted(report.spikes, key=lambda s: s.event.peak_step):
        x, y = s.event.peak_step, s.event.value
        colour = VERDICT_COLOURS.get(s.verdict, "#8a8a8a")
        above = not math.isfinite(y) or y > top
        if above:
            ax.scatter([x], [top], marker="^", s=55, color=colour, zorder=4, clip_on=False)
            text = f"{step_word}{x}\n{y:.3g}" if math.isfinite(y) else f"{step_word}{x}\n{y}"
        else:
            ax.scatter([x], [y], marker="o", s=28, color=colour, zorder=4)
            text = f"{step_word}{x}"
        marks.append((x, top if above else y))
        if x in named:
            ann = ax.annotate(
                text,
                (x, top if above else y),
                xytext=(0, -14) if above else (0, 5),
                textcoords="offset points",
                ha="center",
                va="top" if above else "bottom",
                fontsize=7,
                color=colour,
                zorder=5,
            )
            rise = abs(s.rise) if math.isfinite(s.rise) else math.inf
            labels.append((rise, ann, _UNDER_TOP if above else _ABOVE))
    labels.sort(key=lambda t: -t[0])
    return [(ann, offsets) for _, ann, offsets in labels], marks


def labelled(report: SpikesReport) -> set[int]:
    """Peak steps labelled in the plots: the :data:`LABELLED` largest rises, and every
    unexplained spike."""
    ranked = sorted(report.spikes, key=lambda s: -abs(s.rise) if math.isfinite(s.rise) else 0)
    named = {s.event.peak_step for s in ranked[:LABELLED]}
    return named | {s.event.peak_step for s in report.spikes if s.verdict == "unexplained"}


def _legend(ax: Any, report: SpikesReport, clipped: bool, smooth: float | None = None) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    d = report.detection
    handles: list[Any] = [Line2D([], [], color="0.55", lw=0.8, label=d.metric)]
    if smooth is not None:
        handles = [
            Line2D([], [], color="0.25", lw=1.1, label=f"{d.metric}, smoothed (EMA {smooth:g})"),
            Line2D([], [], color="0.55", lw=0.8, alpha=0.35, label=f"{d.metric}, raw"),
        ]
    handles.append(Line2D([], [], color="C1", lw=1.2, label="baseline"))
    if math.isfinite(d.threshold):
        label = f"flag line: baseline + {d.threshold:.3g} x scale"
        handles.append(Patch(color="C1", alpha=0.18, label=label))
    present = {s.verdict for s in report.spikes}
    words = {
        "composition": "spike: composition (its batch explains it)",
        "data": "spike: data (a named sample in its batch)",
        "unexplained": "spike: unexplained (look at the optimizer)",
        "inconclusive": "spike: inconclusive (too little data, or in between)",
    }
    if report.attribution is None:  # no manifest: nothing was attributed
        words["inconclusive"] = "spike (no manifest: --manifest attributes it)"
    for verdict, colour in VERDICT_COLOURS.items():
        if verdict in present:
            handles.append(Line2D([], [], marker="o", ls="", color=colour, label=words[verdict]))
    if clipped:
        handles.append(
            Line2D([], [], marker="^", ls="", color="0.3", label="above the axis (value in label)")
        )
    if report.spikes:
        words_ = f"labels: the {LABELLED} largest rises and\nevery unexplained spike"
        handles.append(Line2D([], [], ls="", label=words_))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)


def _optimizer_strip(ax: Any, report: SpikesReport, inside: Any = None) -> None:
    """grad_norm (left, log scale when it spans a decade) and lr (right) per step; with
    ``inside`` (the --steps range), only the steps there."""
    import numpy as np

    table = report.run.table
    if inside is not None:
        steps = report.detection.steps[inside]
        table = table[table["step"].between(steps.min(), steps.max())]
    ax.set_ylabel("grad_norm")
    if "grad_norm" in table.columns and table["grad_norm"].notna().any():
        g = table["grad_norm"].to_numpy(dtype=float)
        ax.plot(table["step"], g, color="0.35", lw=0.6, label="grad_norm")
        pos = g[np.isfinite(g) & (g > 0)]
        if pos.size and pos.max() / pos.min() > 10:
            from matplotlib.ticker import LogLocator, ScalarFormatter

            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(ScalarFormatter())
            ax.yaxis.set_minor_formatter("")
            ax.tick_params(axis="y", which="both", labelsize=7)
    else:
        ax.text(0.5, 0.5, "grad_norm not logged", transform=ax.transAxes, ha="center")
    for s in report.spikes:
        if s.verdict == "unexplained" and s.event.grad_norm_ratio is not None:
            ax.annotate(
                f"{s.event.peak_step}: grad_norm {s.event.grad_norm_ratio:.1f}x its baseline",
                (s.event.peak_step, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(6, -10),
                textcoords="offset points",
                fontsize=7,
                color=VERDICT_COLOURS["unexplained"],
            )
    if "lr" in table.columns and table["lr"].notna().any():
        lx = ax.twinx()
        lx.plot(table["step"], table["lr"], color="C0", lw=0.9, label="lr")
        lx.set_ylabel("lr", color="C0")
        lx.tick_params(axis="y", colors="C0", labelsize=7)
    ax.set_title("the optimizer: grad_norm (grey, left) and lr (blue, right)", fontsize=9)
    ax.set_xlabel("event" if report.context.line_order else "step")


def _length_panel(ax: Any, report: SpikesReport) -> tuple[Labels, list[Any]]:
    """Detrended metric against batch mean length, spikes coloured by verdict (only the
    ``--steps`` range's points, when one is given).

    :returns: the labels to place (highest first) and the spikes' markers."""
    import numpy as np

    from .plots import POINT_OFFSETS

    pts = report.attribution.points  # type: ignore[union-attr]
    d = report.detection
    if report.context.steps is not None:
        lo, hi = report.context.steps
        keep = np.ones(len(pts), dtype=bool)
        if lo is not None:
            keep &= pts["step"].to_numpy() >= lo
        if hi is not None:
            keep &= pts["step"].to_numpy() <= hi
        pts = pts[keep]
    plain = pts[~pts["flagged"]]
    ax.scatter(
        plain["mean_len"],
        plain["residual"],
        s=4,
        color="0.6",
        alpha=0.5,
        label="ordinary points",
        rasterized=True,
    )
    residual = dict(zip(pts["step"].astype(int), pts["residual"], strict=True))
    length = dict(zip(pts["step"].astype(int), pts["mean_len"], strict=True))
    named = labelled(report)
    shown: list[tuple[float, Any]] = []
    marks: list[Any] = []
    for verdict, colour in VERDICT_COLOURS.items():
        group = [s for s in report.spikes if s.verdict == verdict]
        xs = [length.get(s.event.peak_step, np.nan) for s in group]
        ys = [residual.get(s.event.peak_step, np.nan) for s in group]
        if group:
            ax.scatter(xs, ys, s=22, color=colour, label=f"spike: {verdict}", zorder=3)
        for s, x, y in zip(group, xs, ys, strict=True):
            if not (np.isfinite(x) and np.isfinite(y)):
                continue
            marks.append((x, y))
            if s.event.peak_step in named:
                ann = ax.annotate(
                    str(s.event.peak_step),
                    (x, y),
                    xytext=(6, 0),
                    ha="left",
                    va="center",
                    fontsize=7,
                    textcoords="offset points",
                    color=colour,
                    zorder=5,
                )
                shown.append((y, ann))
    from matplotlib.ticker import LogLocator, ScalarFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter("")
    ax.tick_params(axis="x", which="both", labelsize=7)
    ax.set_xlabel("batch mean length (tokens)")
    ax.set_ylabel(f"detrended {d.metric}")
    ax.set_title("the metric above its trend, against the length of the batch", fontsize=9)
    ax.legend(loc="upper left", fontsize=7)
    ax.grid(alpha=0.25)
    # (the highest first: they are the largest rises)
    return [(ann, POINT_OFFSETS) for _, ann in sorted(shown, key=lambda t: -t[0])], marks


def spikes_figure(report: SpikesReport, smooth: float | None = None, log_y: bool = False) -> Any:
    """The figure described in the module docstring (a matplotlib Figure)."""
    import numpy as np

    from .plots import ema, place_labels, printable_texts, pyplot, step_limits

    plt = pyplot()
    d = report.detection
    with_batches = report.attribution is not None
    heights = [3.0, 1.1, 2.6] if with_batches else [3.0, 1.1]
    fig, axes = plt.subplots(
        len(heights),
        1,
        figsize=(13, sum(heights) * 1.45 + 0.6),
        squeeze=False,
        gridspec_kw={"height_ratios": heights},
    )
    ax, gx = axes[0][0], axes[1][0]
    gx.sharex(ax)
    band_top = d.baseline + d.threshold * d.scale
    xlim = step_limits(d.steps, *(report.context.steps or (None, None)))
    inside = np.ones(len(d.steps), dtype=bool)
    if xlim is not None:
        inside = (d.steps >= xlim[0]) & (d.steps <= xlim[1])
    lo, hi, log = _limits(d.values[inside], band_top[inside], d.flagged[inside], log_y)
    if log:
        from matplotlib.ticker import LogLocator, ScalarFormatter

        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(ScalarFormatter() if hi / lo < 30 else "")
    if smooth is None:
        ax.plot(d.steps, d.values, color="0.55", lw=0.6, zorder=1)
    else:  # the raw curve faint behind its EMA (detection used the raw values)
        ax.plot(d.steps, d.values, color="0.55", lw=0.6, alpha=0.35, zorder=1)
        ax.plot(d.steps, ema(d.values, smooth), color="0.25", lw=1.1, zorder=2)
    ax.plot(d.steps, d.baseline, color="C1", lw=1.2, zorder=2)
    if np.isfinite(d.scale).any():
        ax.fill_between(d.steps, d.baseline, band_top, color="C1", alpha=0.18, lw=0, zorder=1)
    ax.set_ylim(lo, hi)
    if xlim is not None:
        ax.set_xlim(*xlim)
    placing = [(ax, *_mark_spikes(ax, report, hi))]
    clipped = any(not math.isfinite(s.event.value) or s.event.value > hi for s in report.spikes)
    _legend(ax, report, clipped, smooth)
    ax.set_ylabel(d.metric)
    ax.set_title(_title(report), fontsize=10)
    ax.grid(alpha=0.25)
    _optimizer_strip(gx, report, inside if xlim is not None else None)
    if with_batches:
        placing.append((axes[2][0], *_length_panel(axes[2][0], report)))
    printable_texts(fig)  # (before the layout measures the text)
    fig.tight_layout()
    for panel, labels, marks in placing:  # (after the layout: boxes in final pixels)
        place_labels(panel, labels, marks)
    return fig
