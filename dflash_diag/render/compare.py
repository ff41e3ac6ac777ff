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
    from ..phases import Phases


def _num(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{digits}g}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _progress(x: float | None) -> str:
    if x is None:
        return "-"
    return "done" if x >= 1 else f"{100 * max(x, 0.0):.0f}%"


def _name(path: str) -> str:
    from ..compare import short_name

    return short_name(path)


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
        "notes": list(m.notes),
    }


def comparison_json(c: Comparison) -> dict[str, Any]:
    """The ``--json`` document: baselines, run, align, band, warmup, metrics, at, notes."""
    return {
        "baselines": list(c.baselines),
        "run": c.run,
        "align": c.align,
        "axis": c.axis,
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
    }


def render_text(c: Comparison, console: Any) -> None:
    """Print a comparison on a rich console: warmups, one block per metric, --at answers."""
    from rich.table import Table

    names = ", ".join(_name(b) for b in c.baselines)
    console.print(f"[bold]{_name(c.run)}[/bold] against {names}  (align: {c.axis})")
    console.print(f"band: {c.band_method}", markup=False)
    console.print()

    warm = Table(title="lr schedule", title_justify="left", show_edge=False)
    for col in ("file", "warmup steps", "ends at", "peak lr", "shape", "decay from", "decay"):
        warm.add_column(col, justify="left" if col in ("file", "shape", "decay") else "right")
    for path, p in c.warmup.items():
        if not p.found and p.peak_lr is None:
            warm.add_row(_name(path), "-", "-", "-", p.reason, "-", "-")
            continue
        end = "-" if p.warmup_end_step is None else str(p.warmup_end_step)
        if not p.warmup_complete:
            end += " (not reached)"
        warm.add_row(
            _name(path),
            "-" if p.warmup_steps is None else str(p.warmup_steps),
            end,
            _num(p.peak_lr),
            p.shape,
            "-" if p.decay_start_step is None else str(p.decay_start_step),
            p.decay_shape,
        )
    console.print(warm)

    for m in c.metrics.values():
        console.print()
        _metric_block(m, c, console)

    if c.at:
        console.print()
        at = Table(title="at steps", title_justify="left", show_edge=False)
        for col in ("step", "metric", "value", "lr", "warmup", "median", "band", "verdict"):
            at.add_column(col, justify="left" if col in ("metric", "verdict") else "right")
        for a in c.at:
            band = "-" if a.band is None else f"[{_num(a.band[0])}, {_num(a.band[1])}]"
            at.add_row(
                str(a.step),
                a.metric,
                _num(a.value),
                _num(a.lr),
                _progress(a.warmup_progress),
                _num(a.baseline_median),
                band,
                a.verdict,
            )
        console.print(at)
    notes = list(c.notes) + [f"{n}" for m in c.metrics.values() for n in m.notes]
    notes += [f"{_name(path)}: {n}" for path, p in c.warmup.items() for n in p.notes]
    if notes:
        console.print()
        console.print("notes:")
        for n in notes:
            console.print(f"  - {n}", markup=False)


def _reached(path: str, step: int | None, x: float | None, align: str) -> str:
    if step is None:
        return f"{_name(path)} not reached"
    if align == "step" or x is None:
        return f"{_name(path)} step {step}"
    unit = " tokens" if align == "tokens" else " aligned"
    return f"{_name(path)} step {step} ({_num(x, 4)}{unit})"


def _metric_block(m: MetricComparison, c: Comparison, console: Any) -> None:
    from rich.table import Table

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
    for line in departures:
        console.print(line, markup=False)
    for ms in m.milestones:
        sign = ">=" if ms.direction == "up" else "<="
        who = ", ".join(_reached(f, s, ms.aligned.get(f), c.align) for f, s in ms.steps.items())
        console.print(f"  first {m.name} {sign} {ms.level:g}: {who}", markup=False)
    slopes = m.slopes if m.slopes and m.slopes[0].value is not None else m.slopes[:1]
    for s in slopes:
        if s.value is None or s.ci is None:
            console.print(f"  slope after warmup, {_name(s.file)}: {s.reason}", markup=False)
        else:
            diff = ""
            if s.run_minus is not None and s.run_minus_ci is not None:
                lo, hi = s.run_minus_ci
                diff = f"; run minus it {s.run_minus:+.3g} [{lo:+.3g}, {hi:+.3g}]"
            over = f" over {s.span[0]:.6g}-{s.span[1]:.6g}" if s.span else ""
            console.print(
                f"  slope after warmup, {_name(s.file)}{over}: {s.value:+.3g} per {s.per} "
                f"[{s.ci[0]:+.3g}, {s.ci[1]:+.3g}] (95%, n={s.n}){diff}",
                markup=False,
            )
    console.print(f"  {m.sentence}", markup=False)


def plot_comparison(c: Comparison, path: str | Path) -> Path:
    """The run over the baselines per metric, the band shaded and warmup ends marked."""
    from .plots import pyplot, save_figure

    plt = pyplot()
    n = max(len(c.metrics), 1)
    fig, axes = plt.subplots(n, 1, figsize=(9, 2.8 * n), squeeze=False, sharex=True)
    for ax, m in zip(axes[:, 0], c.metrics.values(), strict=False):
        cv = m.curves
        gx, med, lo, hi = cv.band
        if len(gx):
            ax.fill_between(gx, lo, hi, color="tab:blue", alpha=0.2, lw=0, label="baseline band")
            ax.plot(gx, med, color="tab:blue", lw=1, ls="--", label="baseline median")
        for f, (bx, bv) in cv.baselines.items():
            ax.plot(bx, bv, lw=0.6, alpha=0.6, label=_name(f))
        rx, rv = cv.run
        ax.plot(rx, rv, color="black", lw=1.2, label=_name(c.run))
        for f, x in cv.warmup_ends.items():
            style = "-" if f == c.run else ":"
            ax.axvline(x, color="tab:red", ls=style, lw=0.8, alpha=0.8)
        for a in c.at:
            if a.metric == m.name and a.x is not None and a.value is not None:
                ax.plot([a.x], [a.value], "o", color="tab:red", ms=4)
        ax.set_ylabel(m.name)
        ax.set_title(f"{m.name}: {m.verdict}  (red lines: warmup ends; solid = run)", fontsize=9)
        ax.legend(fontsize=7, loc="best")
    axes[-1, 0].set_xlabel(c.axis)
    fig.tight_layout()
    return save_figure(fig, path)
