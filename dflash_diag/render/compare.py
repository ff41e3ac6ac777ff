"""What ``dflash-diag compare`` shows: a :class:`~dflash_diag.compare.Comparison` as rich
text, as one JSON document, or as a plot.  Nothing here computes a figure; it lays out
the ones :func:`dflash_diag.compare.compare_runs` found.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..compare import Comparison, MetricComparison
    from ..lr_phases import Phases


def _num(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{digits}g}"


def _pct(x: float | None) -> str:
    from ..compare import share_text

    return "-" if x is None else share_text(x)


def _progress(x: float | None) -> str:
    if x is None:
        return "-"
    return "done" if x >= 1 else f"{100 * max(x, 0.0):.0f}%"


def _name(path: str, names: dict[str, str] | None = None) -> str:
    """The label of ``path``: ``names[path]`` (see :func:`display_names`), else its short
    name."""
    from ..compare import short_name

    return names[path] if names and path in names else short_name(path)


def display_names(c: Comparison, labels: list[str] | None = None) -> dict[str, str]:
    """A name per file, in the order baselines then run: ``labels`` (``--label``, one per
    file in that order) when given; else the file's short name, with as many of its
    folders as it takes to tell it from the others (``a/train`` and ``b/train``, not
    "train against train")."""
    from collections import Counter
    from pathlib import PurePath

    from ..errors import InputError

    files = [*c.baselines, c.run]
    if labels:
        if len(labels) != len(files):
            raise InputError(
                "--label",
                f"{len(labels)} label{'s' if len(labels) != 1 else ''} for {len(files)} logs",
                "give one --label per log, in the order of the files (baselines, then the run)",
            )
        return dict(zip(files, labels, strict=True))
    names = {f: _name(f) for f in files}
    # (the folders above a name, nearest first, one more each round for the names that
    # still read the same: ``a/csv/version_0/metrics`` and ``b/csv/version_0/metrics``)
    folders = {f: list(PurePath(f).parent.parts[bool(PurePath(f).anchor) :]) for f in files}
    while True:
        clash = Counter(names.values())
        longer = [f for f in files if clash[names[f]] > 1 and folders[f]]
        if not longer:
            return names
        for f in longer:
            names[f] = f"{folders[f].pop()}/{names[f]}"


def relabel(text: str, c: Comparison, names: dict[str, str]) -> str:
    """``text`` (a sentence :mod:`dflash_diag.compare` wrote with short names) with each
    baseline's short name replaced by its label, where the short names are unique."""
    import re

    shorts = {_name(f): names[f] for f in c.baselines if f in names}
    if len(shorts) != len(c.baselines):
        return text
    for short, label in shorts.items():
        if short == label:
            continue
        text = re.sub(rf"(?<![\w/.-]){re.escape(short)}(?='s|[,)])", label, text)
    return text


def phases_json(p: Phases) -> dict[str, Any]:
    """The ``warmup`` entry of one file."""
    return {
        "steps": p.warmup_steps,
        "peak_lr": p.peak_lr,
        "shape": p.shape,
        "found": p.found,
        "reason": p.reason,
        "source": p.source,
        "first_step": p.first_step,
        "end_step": p.warmup_end_step,
        "end_range": list(p.warmup_end_range) if p.warmup_end_range else None,
        "complete": p.warmup_complete,
        "max_lr": p.max_lr,
        "decay_start_step": p.decay_start_step,
        "decay_shape": p.decay_shape,
        "notes": list(p.notes),
    }


def _metric_json(m: MetricComparison) -> dict[str, Any]:
    from .jsonout import to_jsonable

    return {
        "kind": m.kind,
        "verdict": m.verdict,
        "sentence": m.sentence,
        "baselines_used": list(m.baselines_used),
        "phases": to_jsonable(m.phases),
        "milestones": to_jsonable(m.milestones),
        "slope_after_warmup": to_jsonable(m.slopes),
        "nonfinite": to_jsonable(m.nonfinite),
        "notes": list(m.notes),
    }


def comparison_json(c: Comparison, names: dict[str, str] | None = None) -> dict[str, Any]:
    """The ``--json`` document: baselines, run, align, axis, step_source (per file:
    ``line order`` = logging events, not optimizer steps), align_anchors (``warmup``
    alignment: each log's warmup end step), band, warmup, metrics, at, notes, labels
    (a name per file: ``names``, else :func:`display_names`)."""
    return {
        "baselines": list(c.baselines),
        "run": c.run,
        "align": c.align,
        "axis": c.axis,
        "step_source": dict(c.step_sources),
        "align_anchors": dict(c.anchors),
        "band": {"method": c.band_method, "k": c.band_k, "window": c.window},
        "warmup": {path: phases_json(p) for path, p in c.warmup.items()},
        "metrics": {name: _metric_json(m) for name, m in c.metrics.items()},
        "at": [
            {
                "step": a.step,
                "metric": a.metric,
                "value": a.value,
                "lr": a.lr,
                "warmup_progress": a.warmup_progress,
                "baseline_median": a.baseline_median,
                "band": list(a.band) if a.band is not None else None,
                "verdict": a.verdict,
                "sentence": a.sentence,
            }
            for a in c.at
        ],
        "notes": list(c.notes),
        "labels": names or display_names(c),
    }


def render_text(
    c: Comparison,
    console: Any,
    names: dict[str, str] | None = None,
    steps: tuple[int | None, int | None] | None = None,
    verbose: bool = False,
) -> None:
    """Print a comparison on a rich console: the answer first (one paragraph per metric,
    the ``--at`` answers), then the warmups and one block per metric (its phases and
    milestones; ``verbose`` adds the largest departures, logged nan/inf and the slopes).
    ``names``: a label per file (:func:`display_names`); ``steps``: the plot's range."""
    names = names or display_names(c)
    _compare_header(c, console, names, steps)
    for m in c.metrics.values():
        console.print(_answer(m, c, names), markup=False)
    if c.at:
        console.print()
        console.print(_at_table(c, narrow=console.width < 100))
    console.print()
    console.print(_warmup_table(c, names))
    for m in c.metrics.values():
        console.print()
        _metric_block(m, c, console, names, verbose)
    notes = list(c.notes) + [f"{n}" for m in c.metrics.values() for n in m.notes]
    notes += [f"{_name(path, names)}: {n}" for path, p in c.warmup.items() for n in p.notes]
    if notes:
        console.print()
        console.print("notes:")
        for n in notes:
            console.print(f"  - {n}", markup=False)
    adds = [] if verbose else _verbose_adds(c)
    if adds:
        console.print()
        listed = adds[0] if len(adds) == 1 else ", ".join(adds[:-1]) + " and " + adds[-1]
        console.print(f"--verbose adds each metric's {listed}", style="dim", markup=False)


def _verbose_adds(c: Comparison) -> list[str]:
    """What ``--verbose`` would add to the metric blocks, of what this comparison has."""
    ms = list(c.metrics.values())
    adds = []
    if any(ph.largest_departure is not None for m in ms for ph in m.phases):
        adds.append("largest departures")
    if any(bad.count for m in ms for bad in m.nonfinite.values()):
        adds.append("nan/inf per log")
    if any(m.slopes for m in ms):
        adds.append("slopes after warmup")
    return adds


def _compare_header(
    c: Comparison,
    console: Any,
    names: dict[str, str],
    steps: tuple[int | None, int | None] | None,
) -> None:
    """Who is compared with whom, on what axis, with which band."""
    from rich.text import Text

    against = ", ".join(_name(b, names) for b in c.baselines)
    console.print(
        Text.assemble(
            (_name(c.run, names), "bold"), f" against {against}  (align: {_align_words(c, names)})"
        )
    )
    if steps is not None:
        lo, hi = steps
        shown = f"{'' if lo is None else lo}-{'' if hi is None else hi}"
        console.print(
            f"plot: steps {shown} (the bands, shares and slopes cover the whole runs)",
            markup=False,
        )
    if c.step_sources and all(v == "line order" for v in c.step_sources.values()):
        console.print(
            "steps: logging events numbered in line order (the records carry no step), "
            "not optimizer steps",
            markup=False,
        )
    console.print(f"band: {c.band_method}", markup=False)
    console.print()


def _answer(m: MetricComparison, c: Comparison, names: dict[str, str]) -> str:
    """One metric's answer: its sentence (which says any nan/inf too), with the labels."""
    return relabel(m.sentence, c, names)


def _warmup_table(c: Comparison, names: dict[str, str]) -> Any:
    """Each log's lr schedule: warmup length and end, peak lr, shape, decay."""
    from rich.table import Table

    warm = Table(title="lr schedule", title_justify="left", show_edge=False)
    for col in ("file", "warmup steps", "ends at", "peak lr", "shape", "decay from", "decay"):
        warm.add_column(col, justify="left" if col in ("file", "shape", "decay") else "right")
    for path, p in c.warmup.items():
        if not p.found and p.peak_lr is None:
            warm.add_row(_name(path, names), "-", "-", "-", p.reason, "-", "-")
            continue
        end = "-" if p.warmup_end_step is None else str(p.warmup_end_step)
        if not p.warmup_complete:
            end += " (not reached)"
        warm.add_row(
            _name(path, names),
            "-" if p.warmup_steps is None else str(p.warmup_steps),
            end,
            _num(p.peak_lr),
            p.shape,
            "-" if p.decay_start_step is None else str(p.decay_start_step),
            p.decay_shape,
        )
    return warm


#: The ``--at`` table's columns; a narrow terminal leaves out lr and median (the warmup
#: progress and the band say what matters; the sentences above carry both).
AT_COLUMNS = ("step", "metric", "value", "lr", "warmup", "median", "band", "verdict")


def _at_table(c: Comparison, narrow: bool = False) -> Any:
    """The ``--at`` answers: value, lr, warmup progress, the baselines' median and band."""
    from rich.table import Table

    at = Table(title="at steps", title_justify="left", show_edge=False)
    keep = [i for i, col in enumerate(AT_COLUMNS) if not (narrow and col in ("lr", "median"))]
    for i in keep:
        col = AT_COLUMNS[i]
        at.add_column(col, justify="left" if col in ("metric", "verdict") else "right")
    for a in c.at:
        band = "-" if a.band is None else f"[{_num(a.band[0])}, {_num(a.band[1])}]"
        cells = (
            str(a.step),
            a.metric,
            _num(a.value),
            _num(a.lr),
            _progress(a.warmup_progress),
            _num(a.baseline_median),
            band,
            a.verdict,
        )
        at.add_row(*(cells[i] for i in keep))
    return at


def _align_words(c: Comparison, names: dict[str, str] | None = None) -> str:
    """What the alignment did: ``step``, ``tokens``, or for ``warmup`` the warmup ends
    it lined up (``warmup end, run step 1200 <-> v1 step 600``)."""
    unit = "logging event" if c.step_sources.get(c.run) == "line order" else "step"
    if c.align == "step":
        return unit
    if c.align == "tokens":
        return "cumulative tokens"
    run = c.anchors.get(c.run)
    pairs = [f"{_name(p, names)} {unit} {s}" for p, s in c.anchors.items() if p != c.run]
    if run is None or not pairs:
        return "warmup end"
    return f"warmup end, {_name(c.run, names)} {unit} {run} <-> {', '.join(pairs)}"


def _reached(
    path: str, step: int | None, x: float | None, align: str, names: dict[str, str]
) -> str:
    if step is None:
        return f"{_name(path, names)} not reached"
    if align == "step" or x is None:
        return f"{_name(path, names)} step {step}"
    unit = " tokens" if align == "tokens" else " aligned"
    return f"{_name(path, names)} step {step} ({_num(x, 4)}{unit})"


def _metric_block(
    m: MetricComparison, c: Comparison, console: Any, names: dict[str, str], verbose: bool = True
) -> None:
    """A metric's verdict, its phase table and milestones; ``verbose``: the largest
    departures, the logged nan/inf and the slopes after warmup too (its sentence is the
    answer at the top)."""
    from rich.table import Table

    failed = m.nonfinite.get(c.run)
    if failed is not None and failed.count:
        steps = "step" if failed.count == 1 else "steps"
        console.print(
            f"[bold]{m.name}[/bold]: {m.verdict} on its finite values; logged as nan/inf at "
            f"{failed.count} {steps} from step {failed.first_step}"
        )
    else:
        console.print(f"[bold]{m.name}[/bold]: {m.verdict}")
    t = Table(show_edge=False)
    for col in ("phase", "points", "compared", "inside", "above", "below", "verdict"):
        t.add_column(col, justify="left" if col in ("phase", "verdict") else "right")
    departures = []
    for ph in m.phases:
        d = ph.largest_departure
        if d is not None:
            departures.append(
                f"  largest departure, {ph.phase.replace('_', '-')}: {_num(d.value)} at step "
                f"{d.step}, {d.side} the band [{_num(d.band[0])}, {_num(d.band[1])}] "
                f"(median {_num(d.baseline_median)})"
            )
        t.add_row(
            ph.phase.replace("_", "-"),
            str(ph.n_points),
            str(ph.n_compared),
            _pct(ph.inside),
            _pct(ph.above),
            _pct(ph.below),
            ph.verdict,
        )
    console.print(t)
    for line in departures if verbose else ():
        console.print(line, markup=False)
    for ms in m.milestones:
        sign = ">=" if ms.direction == "up" else "<="
        who = ", ".join(
            _reached(f, s, ms.aligned.get(f), c.align, names) for f, s in ms.steps.items()
        )
        console.print(f"  first {m.name} {sign} {ms.level:g}: {who}", markup=False)
    for f, bad in m.nonfinite.items() if verbose else ():
        if bad.count:
            steps = "step" if bad.count == 1 else "steps"
            console.print(
                f"  logged as nan/inf: {_name(f, names)}, {bad.count} {steps}, first at step "
                f"{bad.first_step} (numerical failure; left out of the band and shares)",
                markup=False,
            )
    if verbose:
        _slope_lines(m, console, names)


def _slope_lines(m: MetricComparison, console: Any, names: dict[str, str]) -> None:
    """The run's slope over its span after warmup; per baseline, both slopes over the
    span they share and the difference of those two printed numbers."""
    from ..compare import span_text, versus_figures

    run, *bases = m.slopes
    name = _name(run.file, names)
    if run.value is None or run.ci is None:
        console.print(f"  slope after warmup, {name}: {run.reason}", markup=False)
        return
    console.print(
        f"  slope after warmup, {name} over {span_text(run.span)}: {run.value:+.3g} per "
        f"{run.per} [{run.ci[0]:+.3g}, {run.ci[1]:+.3g}] (95%, n={run.n})",
        markup=False,
    )
    for b in bases:
        base = _name(b.file, names)
        if b.span is None or b.value is None or b.ci is None:
            console.print(f"  slope after warmup, {base}: {b.reason}", markup=False)
            continue
        console.print(
            f"  slope over {span_text(b.span)} (after warmup in {name} and {base}), "
            f"per {b.per}, 95%:",
            markup=False,
        )
        f = versus_figures(b)
        if f is None:
            why = f"{name}: not enough data over this span (n={b.run_n})"
            console.print(
                f"    {base} {b.value:+.3g} [{b.ci[0]:+.3g}, {b.ci[1]:+.3g}] (n={b.n}); {why}",
                markup=False,
            )
            continue
        diff = f"difference, {name} - {base}"
        width = max(len(name), len(base), len(diff))
        for label, value in (
            (name, f"{f.run} {f.run_ci} (n={b.run_n})"),
            (base, f"{f.base} {f.base_ci} (n={b.n})"),
            (diff, f"{f.diff} {f.diff_ci}"),
        ):
            console.print(f"    {label:<{width}}  {value}", markup=False)


def plot_comparison(c: Comparison, path: str | Path, **style: Any) -> Path:
    """Save :func:`comparison_figure` (``style``: its keyword options) as PNG, SVG or PDF
    by ``path``'s extension."""
    from .plots import save_figure

    return save_figure(comparison_figure(c, **style), path)


def run_labels(c: Comparison, names: dict[str, str] | None = None) -> dict[str, str]:
    """A label per file (:func:`display_names`), the run marked ``(run)``."""
    names = names or display_names(c)
    return {
        f: f"{name} (run)" if f == c.run and name != "run" else name for f, name in names.items()
    }


def _robust_ylim(ax: Any, band: list[Any], run: Any, log_y: bool = False) -> int:
    """Set y-limits from the band's 1-99% range and the run's running median (21 points:
    its course without its spikes), plus a margin (a factor on a log axis); returns how
    many run points lie outside (spikes), to say so on the panel."""
    import numpy as np
    import pandas as pd

    run = np.asarray(run, dtype=float)
    course = pd.Series(run).rolling(21, center=True, min_periods=1).median().to_numpy()
    values = np.concatenate([*(np.asarray(b, dtype=float) for b in band), course])
    values = values[np.isfinite(values) & ((values > 0) if log_y else True)]
    if values.size == 0:
        return 0
    lo, hi = np.percentile(values, [0.5, 99.5])
    if log_y:
        bottom, top = lo / 1.3, hi * 1.3
    else:
        pad = 0.12 * (hi - lo) if hi > lo else 0.5 * abs(hi) + 1e-9
        bottom, top = lo - pad, hi + pad
    ax.set_ylim(bottom, top)
    return int(((run < bottom) | (run > top)).sum())


def _at_marks(ax: Any, c: Comparison, metric: str) -> None:
    """Each ``--at`` answer: the value, the band as an error bar, a label with verdict."""
    mine = [a for a in c.at if a.metric == metric and a.x is not None and a.value is not None]
    for k, a in enumerate(mine):
        if a.x is None or a.value is None:  # (filtered above; says so to mypy)
            continue
        colour = {"within": "tab:green"}.get(a.verdict, "tab:purple")
        if a.band is not None:
            ax.vlines(a.x, a.band[0], a.band[1], color=colour, lw=3, alpha=0.5)
        ax.plot([a.x], [a.value], "D", color=colour, ms=6, mec="black", mew=0.6, zorder=5)
        band = f" in band [{a.band[0]:.3g}, {a.band[1]:.3g}]" if a.band is not None else ""
        ax.annotate(
            f"step {a.step}: {a.value:.3g}{band}: {a.verdict}",
            (a.x, a.value),
            xytext=(8, 14 + 16 * (k % 3)),
            textcoords="offset points",
            fontsize=8,
            color=colour,
            arrowprops={"arrowstyle": "-", "color": colour, "lw": 0.6},
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": colour, "lw": 0.6},
        )


def comparison_figure(
    c: Comparison,
    names: dict[str, str] | None = None,
    smooth: float | None = None,
    log_y: bool = False,
    steps: tuple[int | None, int | None] | None = None,
) -> Any:
    """The run over the baselines per metric: the band shaded, robust y-limits, warmup
    ends and the baselines' end marked, ``--at`` answers annotated, one legend.

    :param names: a label per file (:func:`display_names`).
    :param smooth: draw each curve's EMA of this weight (:func:`~dflash_diag.render.
        plots.ema`) over the raw curve, drawn faint; the band is the baselines' as computed.
    :param log_y: the metrics on log axes.
    :param steps: the x-range (``--steps``; the axis is steps with ``--align step``).
    """
    from .plots import printable_texts, pyplot

    plt = pyplot()
    labels = run_labels(c, names)
    n = max(len(c.metrics), 1)
    fig, axes = plt.subplots(n, 1, figsize=(11, 3.0 * n + 0.8), squeeze=False, sharex=True)
    colours = {f: f"C{i + 1}" for i, f in enumerate(c.baselines)}
    for ax, m in zip(axes[:, 0], c.metrics.values(), strict=False):
        _metric_panel(ax, m, c, colours, smooth, log_y, steps)
    axes[-1, 0].set_xlabel(c.axis)
    _figure_legend(fig, c, labels, colours, smooth)
    printable_texts(fig)  # (before the layout measures the text)
    fig.tight_layout(rect=(0, 0, 1, 0.86 if n == 1 else 0.92))
    return fig


#: Drawing order of the compare panels (matplotlib zorder).
Z_BAND, Z_RUN, Z_BAND_LINES = 1, 3, 4
#: How each warmup-end line is drawn: the run's, the baselines', and one line for both
#: where they fall on the same step.
WARMUP_STYLES: dict[str, dict[str, Any]] = {
    "run": {"ls": "-", "lw": 0.9},
    "baselines": {"ls": ":", "lw": 0.9},
    "run and baselines": {"ls": "-.", "lw": 1.6},
}


def warmup_lines(ends: dict[str, float], run: str, run_x: Any) -> list[tuple[float, str]]:
    """The warmup-end lines to draw, as ``(x, whose)``: a baseline's end within 0.5% of
    the run's x-span of the run's own is not drawn over it; the run's line then says it
    holds both (``run and baselines``), and each other x is drawn once.

    >>> warmup_lines({"r": 2379.0, "v1": 2379.0, "v2": 1000.0}, "r", [0, 3000])
    [(2379.0, 'run and baselines'), (1000.0, 'baselines')]
    """
    import numpy as np

    x = np.asarray(run_x, dtype=float)
    span = float(np.nanmax(x) - np.nanmin(x)) if x.size and np.isfinite(x).any() else 0.0
    near = max(0.005 * span, 1e-9)
    mine = ends.get(run)
    out: list[tuple[float, str]] = []
    others: list[float] = []
    for f, end in ends.items():
        if f == run or any(abs(end - o) <= near for o in others):
            continue
        others.append(end)
    if mine is not None:
        both = any(abs(o - mine) <= near for o in others)
        out.append((mine, "run and baselines" if both else "run"))
        others = [o for o in others if abs(o - mine) > near]
    out += [(o, "baselines") for o in others]
    return out


def _metric_panel(
    ax: Any,
    m: MetricComparison,
    c: Comparison,
    colours: dict[str, str],
    smooth: float | None,
    log_y: bool,
    steps: tuple[int | None, int | None] | None,
) -> None:
    """One metric's panel of :func:`comparison_figure`."""
    import numpy as np

    from .plots import ema, step_limits

    cv = m.curves
    gx, med, lo, hi = cv.band
    # Layers, bottom to top: the band's fill, the baselines, the run, then the band's
    # edges and its median, so a run inside the band never hides where the band is.
    if len(gx):
        ax.fill_between(gx, lo, hi, color="tab:blue", alpha=0.2, lw=0, zorder=Z_BAND)
        for edge in (lo, hi):
            ax.plot(gx, edge, color="tab:blue", lw=0.5, alpha=0.7, zorder=Z_BAND_LINES)
        from matplotlib.patheffects import withStroke

        halo = [withStroke(linewidth=3.0, foreground="white", alpha=0.8)]
        ax.plot(gx, med, color="tab:blue", lw=1.3, ls="--", zorder=Z_BAND_LINES, path_effects=halo)
    for f, (bx, bv) in cv.baselines.items():
        colour = colours.get(f, "0.5")
        ax.plot(bx, bv, lw=0.6, alpha=0.6 if smooth is None else 0.2, color=colour, zorder=2)
        if smooth is not None:
            ax.plot(bx, ema(bv, smooth), lw=1.0, color=colour, zorder=2)
    rx, rv = cv.run
    if smooth is None:
        ax.plot(rx, rv, color="black", lw=0.8, alpha=0.8, zorder=Z_RUN)
    else:  # the raw run faint behind its EMA; verdicts use the raw values
        ax.plot(rx, rv, color="black", lw=0.6, alpha=0.25, zorder=Z_RUN)
        ax.plot(rx, ema(rv, smooth), color="black", lw=1.3, zorder=Z_RUN)
    for x, whose in warmup_lines(cv.warmup_ends, c.run, rx):
        style = WARMUP_STYLES[whose]
        ax.axvline(x, color="tab:red", ls=style["ls"], lw=style["lw"], alpha=0.8, zorder=Z_RUN)
    if len(gx) and len(rx) and np.nanmax(gx) < np.nanmax(rx):
        ax.axvline(np.nanmax(gx), color="tab:blue", ls="-.", lw=1.0)
        ax.annotate(
            f"baselines end ({c.axis} {np.nanmax(gx):.0f}): no band after",
            (np.nanmax(gx), 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(-4, -12),  # left of the line, inside the panel
            textcoords="offset points",
            ha="right",
            fontsize=7,
            color="tab:blue",
            annotation_clip=True,
        )
    xlim = step_limits(rx, *(steps or (None, None)))
    if xlim is not None:  # limits from what the range shows
        inside = (np.asarray(rx) >= xlim[0]) & (np.asarray(rx) <= xlim[1])
        gin = (np.asarray(gx) >= xlim[0]) & (np.asarray(gx) <= xlim[1])
        lo, hi, rv = np.asarray(lo)[gin], np.asarray(hi)[gin], np.asarray(rv)[inside]
    if log_y:
        from matplotlib.ticker import LogLocator, ScalarFormatter

        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter("")
    outside = _robust_ylim(ax, [lo, hi], rv, log_y)
    if xlim is not None:
        ax.set_xlim(*xlim)
    _at_marks(ax, c, m.name)
    ax.set_ylabel(m.name)
    cut = f"; {outside} run points beyond the axis" if outside else ""
    ax.set_title(f"{m.name}: {m.verdict}{cut}", fontsize=9)
    ax.grid(alpha=0.25)


def _figure_legend(
    fig: Any, c: Comparison, labels: dict[str, str], colours: dict[str, str], smooth: float | None
) -> None:
    """The one legend of :func:`comparison_figure`, titled "RUN against BASELINES"."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Patch(color="tab:blue", alpha=0.2, label="baseline band"),
        Line2D([], [], color="tab:blue", ls="--", label="baseline median"),
        *(Line2D([], [], color=colours[f], lw=0.8, label=labels[f]) for f in c.baselines),
        Line2D([], [], color="black", label=labels[c.run]),
    ]
    if smooth is not None:
        raw = f"raw values (curves: EMA {smooth:g})"
        handles.append(Line2D([], [], color="black", lw=0.6, alpha=0.25, label=raw))
    drawn = {
        whose
        for m in c.metrics.values()
        for _, whose in warmup_lines(m.curves.warmup_ends, c.run, m.curves.run[0])
    }
    handles += [
        Line2D([], [], color="tab:red", label=f"warmup end: {whose}", **WARMUP_STYLES[whose])
        for whose in WARMUP_STYLES
        if whose in drawn
    ]
    if c.at:
        handles.append(Line2D([], [], marker="D", ls="", color="tab:green", label="--at answer"))
    fig.legend(
        handles=handles,
        loc="upper center",
        ncol=min(len(handles), 5),
        fontsize=8,
        title=f"{labels[c.run]} against {', '.join(labels[f] for f in c.baselines)}",
    )


def fail_on_line(mode: str, failures: tuple[str, ...]) -> str:
    """The ``--fail-on`` verdict in one line (the command then exits 3 when it failed)."""
    if not failures:
        return f"fail-on {mode}: passed: the run stays in the band"
    shown = "; ".join(failures[:4]) + (
        f"; and {len(failures) - 4} more" if len(failures) > 4 else ""
    )
    return f"fail-on {mode}: FAILED (exit 3): {shown}"
