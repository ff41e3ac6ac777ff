"""Rendering for ``dflash-diag batches``: rich tables, the JSON document, the plot.

Nothing here computes a statistic: the numbers come from
:mod:`dflash_diag.batchstats` and :mod:`dflash_diag.buckets`; this module only lays
them out (and formats durations).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from rich.console import Console

    from ..batchstats import ScheduleStats
    from ..buckets import BucketPlan


@dataclass(frozen=True)
class BatchesReport:
    """Everything ``batches`` shows, gathered by the CLI from the library's results.

    :param manifest: the manifest read; ``config``: the TOML file used, if any.
    :param stats: the chosen strategy's statistics.
    :param strategies: ``--compare``'s statistics, in the order asked.
    :param plan: ``--optimize-buckets``'s options.
    :param verification: ``--log``'s check (a ``Verification``), if asked.
    :param training_seconds: per strategy name, the training time at ``--throughput``.
    :param throughput: padded tokens per second, if given.
    :param export: the file written by ``--export``, if any.
    """

    manifest: str
    config: str | None
    stats: ScheduleStats
    strategies: tuple[ScheduleStats, ...] = ()
    plan: BucketPlan | None = None
    verification: Any = None
    training_seconds: dict[str, float] = field(default_factory=dict)
    throughput: float | None = None
    export: str | None = None


def duration(seconds: float | None) -> str:
    """``443000`` -> ``"5.1 days"``; hours below two days, minutes below two hours.

    >>> duration(5.1 * 86400), duration(7200), duration(90)
    ('5.1 days', '2.0 h', '1.5 min')
    """
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"


def _pct(x: float | None) -> str:
    return "not enough data" if x is None or not math.isfinite(x) else f"{100 * x:.1f}%"


def _num(x: float | None, digits: int = 2) -> str:
    return "not enough data" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def _icc(s: ScheduleStats) -> str:
    if s.length_icc is None:
        return "not enough data"
    lo, hi = s.length_icc_ci or (math.nan, math.nan)
    return f"{s.length_icc:.3f} [{lo:.3f}, {hi:.3f}]"


def _corr(s: ScheduleStats) -> str:
    if s.adjacent_length_corr is None:
        return "not enough data"
    return f"{s.adjacent_length_corr:+.3f} (p={s.adjacent_length_corr_p:.2g})"


def _metric_rows(s: ScheduleStats, seconds: float | None) -> list[tuple[str, str]]:
    rows = [
        ("samples", f"{s.n_samples:,}"),
        ("epochs replayed", str(s.epochs)),
        ("batches per epoch", f"{s.batches_per_epoch:,}"),
        ("steps per epoch", f"{s.steps_per_epoch:,} ({s.micro_per_step} micro-batches each)"),
        ("padding efficiency", _pct(s.padding_efficiency)),
        (
            "tokens per step min/median/max",
            f"{s.tokens_per_step_min:,.0f} / {s.tokens_per_step_median:,.0f} / "
            f"{s.tokens_per_step_max:,.0f}",
        ),
        (
            "within-batch length std (CV)",
            f"{_num(s.within_batch_std, 1)} ({_num(s.within_batch_cv)}) of {_num(s.length_std, 1)}",
        ),
        ("length ICC [95% CI]", _icc(s)),
        ("adjacent-batch length corr", _corr(s)),
        ("recurrence next epoch", _pct(s.recurrence)),
    ]
    if s.category_dispersion is not None:
        rows.append(("category mix dispersion", f"{s.category_dispersion:.2f}x random"))
    if seconds is not None:
        rows.append(("training time", duration(seconds)))
    return rows


NOTES = {
    "padding efficiency": "real / (samples x longest) tokens",
    "length ICC [95% CI]": "share of length variance between batches (1 sorted, 0 random)",
    "adjacent-batch length corr": "lag-1 autocorrelation of batch mean length",
    "recurrence next epoch": "batches whose exact samples come back next epoch",
    "category mix dispersion": "variance of category shares / random batches'",
    "within-batch length std (CV)": "mean over batches, beside the overall std",
}


def render_text(report: BatchesReport, console: Console) -> None:
    """Print the summary, the comparison, the bucket table and the verification."""
    from rich.table import Table

    s = report.stats
    console.print(
        f"manifest: {report.manifest}  strategy: {s.strategy}  "
        f"config: {report.config or 'none (flags and defaults)'}"
    )
    table = Table(title="Batch schedule", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("how", style="dim")
    for name, value in _metric_rows(s, report.training_seconds.get(s.strategy)):
        table.add_row(name, value, NOTES.get(name, ""))
    console.print(table)
    if s.dropped and any(s.dropped.values()):
        dropped = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in s.dropped.items() if v)
        console.print(f"left out by the replay: {dropped}")

    if report.strategies:
        cmp = Table(title="Strategies compared", title_justify="left")
        cmp.add_column("metric")
        for st in report.strategies:
            cmp.add_column(st.strategy, justify="right")
        columns = [
            dict(_metric_rows(st, report.training_seconds.get(st.strategy)))
            for st in report.strategies
        ]
        for name in columns[0]:
            if name in ("samples",):
                continue
            cmp.add_row(name, *(c.get(name, "-") for c in columns))
        console.print(cmp)

    if report.plan is not None:
        _render_plan(report.plan, console)

    v = report.verification
    if v is not None:
        console.print(
            f"verification against the log: tokens match {_pct(v.tokens_match)} of "
            f"{v.n_compared} steps (seed {v.seed}, first step {v.first_step}, "
            f"logged as {v.basis}); first mismatch: "
            f"{'none' if v.first_mismatch is None else v.first_mismatch}"
        )
    if report.export:
        console.print(f"schedule written to {report.export}")


def _render_plan(plan: BucketPlan, console: Console) -> None:
    from rich.table import Table

    sim = (
        f"simulated on {plan.simulated_samples:,} samples"
        if plan.simulated_samples
        else "not simulated"
    )
    table = Table(
        title=(
            f"Bucket edges for 'bucketed' ({plan.n_distinct:,} distinct lengths; {sim}; "
            f"model = pad to bucket edge, simulated = pad to batch max)"
        ),
        title_justify="left",
    )
    for col, justify in (
        ("method", "left"),
        ("k", "right"),
        ("boundaries", "left"),
        ("model", "right"),
        ("simulated", "right"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    if plan.throughput is not None:
        table.add_column(f"time, {plan.epochs} epochs", justify="right")
    previous = None
    for o in plan.options:
        if previous is not None and o.method != previous:
            table.add_section()
        previous = o.method
        row = [
            o.method,
            str(o.k),
            ",".join(str(e) for e in o.boundaries),
            _pct(o.model_efficiency),
            _pct(o.padding_efficiency),
        ]
        if plan.throughput is not None:
            row.append(duration(o.training_seconds))
        table.add_row(*row)
    console.print(table)


def _stats_json(s: ScheduleStats, seconds: float | None) -> dict[str, Any]:
    out = asdict(s)
    if seconds is not None:
        out["training_seconds"] = seconds
    return out


def report_document(report: BatchesReport) -> dict[str, Any]:
    """The ``--json`` document: the summary's keys at the top, options below."""
    s = report.stats
    doc: dict[str, Any] = {"manifest": report.manifest, "config": report.config}
    doc.update(_stats_json(s, report.training_seconds.get(s.strategy)))
    if report.strategies:
        doc["strategies"] = [
            _stats_json(st, report.training_seconds.get(st.strategy)) for st in report.strategies
        ]
    if report.plan is not None:
        plan = report.plan

        def option(o: Any, method: bool) -> dict[str, Any]:
            d = {
                "k": o.k,
                "boundaries": list(o.boundaries),
                "padding_efficiency": o.padding_efficiency,
                "model_padding_efficiency": o.model_efficiency,
                "training_seconds": o.training_seconds,
            }
            return {"method": o.method, **d} if method else d

        doc["buckets"] = [option(o, False) for o in plan.best("optimal")]
        doc["bucket_alternatives"] = [
            option(o, True) for o in plan.options if o.method != "optimal"
        ]
        doc["bucket_simulated_samples"] = plan.simulated_samples
    if report.verification is not None:
        doc["verification"] = report.verification
    if report.throughput is not None:
        doc["throughput"] = report.throughput
    if report.export:
        doc["export"] = report.export
    return doc


def plot_batches(
    strip: np.ndarray,
    steps: np.ndarray,
    strategies: Sequence[ScheduleStats],
    path: str | Path,
) -> Path:
    """The heat strip of each step's sample lengths, and padding efficiency against
    diversity (1 - length ICC) for the strategies given."""
    import numpy as np

    from .plots import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(
        1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [2.2, 1]}, squeeze=False
    )
    ax = axes[0, 0]
    if strip.size:
        extent = (float(steps[0]), float(steps[-1]) + 1, 0, strip.shape[0])
        image = ax.imshow(
            np.ma.masked_invalid(strip),
            aspect="auto",
            origin="lower",
            interpolation="nearest",
            extent=extent,
            cmap="viridis",
        )
        fig.colorbar(image, ax=ax, label="sample length (tokens)")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("samples in the step, shortest first")
    ax.set_title("lengths of each step's samples")

    ax = axes[0, 1]
    for st in strategies:
        icc = st.length_icc
        if icc is None:
            continue
        ax.scatter(1 - icc, st.padding_efficiency, s=40)
        ax.annotate(
            st.strategy,
            (1 - icc, st.padding_efficiency),
            xytext=(4, 4),
            textcoords="offset points",
            fontsize=9,
        )
    ax.set_xlim(-0.05, 1.05)
    ax.set_xlabel("diversity: 1 - length ICC")
    ax.set_ylabel("padding efficiency")
    ax.set_title("padding against batch diversity")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path)
