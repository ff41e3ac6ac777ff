"""Rendering for ``dflash-diag batches``: rich tables, the JSON document, the plot.

Nothing here computes a statistic: the numbers come from
:mod:`dflash_diag.batches.stats` and :mod:`dflash_diag.batches.buckets`; this module only lays
them out (and formats durations).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..reports import BatchesReport

if TYPE_CHECKING:
    from rich.console import Console

    from ..batches.buckets import BucketPlan
    from ..batches.stats import ScheduleStats


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


def _metric_rows(s: ScheduleStats, seconds: float | None) -> list[tuple[str, str, str]]:
    """(name, long value, short value for the comparison table) per metric."""
    if s.within_batch_std is None or not math.isfinite(s.within_batch_std):
        spread = "not enough data"
    else:
        spread = f"{s.within_batch_std:.1f} (CV {_num(s.within_batch_cv)})"
    icc_short = "not enough data" if s.length_icc is None else f"{s.length_icc:.3f}"
    corr_short = (
        "not enough data" if s.adjacent_length_corr is None else f"{s.adjacent_length_corr:+.3f}"
    )
    each = f" ({s.micro_per_step} micro-batches each)" if s.micro_per_step > 1 else ""
    tokens = median = "not enough data"
    if math.isfinite(s.tokens_per_step_median):
        median = f"{s.tokens_per_step_median:,.0f}"
        tokens = (
            f"{s.tokens_per_step_min:,.0f} / {s.tokens_per_step_median:,.0f} / "
            f"{s.tokens_per_step_max:,.0f}"
        )
    recur = _pct(s.recurrence)
    if s.recurrence is None and s.epochs < 2:
        recur = "not enough data (needs --epochs 2+)"
    overall = f" of {s.length_std:.1f}" if math.isfinite(s.within_batch_std) else ""
    rows = [
        ("samples", f"{s.n_samples:,}", f"{s.n_samples:,}"),
        (_epochs_word(s), str(s.epochs), str(s.epochs)),
        ("batches per epoch", f"{s.batches_per_epoch:,}", f"{s.batches_per_epoch:,}"),
        ("steps per epoch", f"{s.steps_per_epoch:,}{each}", f"{s.steps_per_epoch:,}"),
        ("padding efficiency", _pct(s.padding_efficiency), _pct(s.padding_efficiency)),
        ("tokens per step min/med/max", tokens, median),
        ("within-batch length std", f"{spread}{overall}", spread),
        ("length ICC", _icc(s), icc_short),
        ("adjacent-batch length corr", _corr(s), corr_short),
        ("recurrence next epoch", recur, _pct(s.recurrence)),
    ]
    if s.batch_size is not None:
        rows.append(("batch size (samples)", str(s.batch_size), str(s.batch_size)))
    if s.category_dispersion is not None:
        mix = f"{s.category_dispersion:.2f}x random"
        rows.append(("category mix dispersion", mix, mix))
    if seconds is not None:
        rows.append(("training time", duration(seconds), duration(seconds)))
    return rows


def _epochs_word(s: ScheduleStats) -> str:
    """``epochs recorded`` for a recording measured (``--composition``), else replayed."""
    return "epochs recorded" if s.strategy == "recorded" else "epochs replayed"


CAPTION = (
    "padding efficiency = real / (samples x longest) tokens; length ICC [95% CI] = share "
    "of length variance between micro-batches (1 sorted, 0 random); adjacent corr = lag-1 "
    "autocorrelation of batch (step) mean length; recurrence = batches whose exact samples "
    "come back next epoch; category dispersion = variance of batches' category shares "
    "/ that of random batches (1 = as mixed as random)"
)


def render_text(report: BatchesReport, console: Console, verbose: bool = False) -> None:
    """Print the summary, the comparison, the bucket table and the verification.

    With ``--compare`` naming the chosen strategy, its column says what its own table
    would, so that table (with min/max tokens per step, the ICC's CI and p-values) is
    ``verbose``'s; the default ends by saying so."""
    s = report.stats
    _header(report, console)
    compared = [st.strategy for st in report.strategies]
    own = verbose or s.strategy not in compared
    if own:
        console.print(_schedule_table(report))
    if s.dropped and any(s.dropped.values()):
        dropped = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in s.dropped.items() if v)
        whose = "the replay" if own else f"the {s.strategy} replay"
        console.print(f"left out by {whose}: {dropped}")
    if report.strategies:
        console.print(_comparison_table(report, caption=not own))
    if report.plan is not None:
        _render_plan(report.plan, console)
    for line in _verification_lines(report):
        console.print(line)
    if report.export:
        console.print(f"schedule written to {report.export}")
    if not own:
        console.print(
            f"--verbose adds {s.strategy}'s own table (tokens per step min/max, the ICC's "
            "95% CI, p-values)",
            style="dim",
            markup=False,
        )


def _header(report: BatchesReport, console: Console) -> None:
    """The label, what was replayed, warnings, derived buckets."""
    s = report.stats
    if report.label:
        console.print(report.label, style="bold", markup=False)
    if report.composition is not None:
        console.print(f"composition: recorded in {report.composition}  manifest: {report.manifest}")
    else:
        console.print(
            f"manifest: {report.manifest}  strategy: {s.strategy}  "
            f"config: {report.config or 'none (flags and defaults)'}"
        )
    for w in report.warnings:
        console.print(f"{w.level}: {w.message}", soft_wrap=True)
    for line in report.provenance:
        console.print(line, markup=False, soft_wrap=True)
    if report.bucket_edges:
        edges = ",".join(str(e) for e in report.bucket_edges)
        console.print(
            f"buckets: {edges} (bucketed, no --buckets given: six equal-count buckets of "
            "this manifest's lengths)",
            markup=False,
        )
    if s.batches_per_epoch == 0:
        console.print(
            "no complete optimizer step: every micro-batch was left out (too few batches for "
            "world_size x grad_accum?)"
        )


def _schedule_table(report: BatchesReport) -> Any:
    """The chosen strategy's table, the metrics explained in its caption."""
    from rich.table import Table

    s = report.stats
    table = Table(title=_title(report), title_justify="left", caption=CAPTION)
    table.caption_justify = "left"
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value, _ in _metric_rows(s, report.training_seconds.get(s.strategy)):
        table.add_row(name, value)
    return table


def _comparison_table(report: BatchesReport, caption: bool = False) -> Any:
    """``--compare``'s table, one column per strategy; with ``caption`` (no schedule table
    above it) the samples, the epochs and the metrics' explanation too."""
    from rich.table import Table

    cmp = Table(
        title="Strategies compared", title_justify="left", caption=CAPTION if caption else None
    )
    cmp.caption_justify = "left"
    cmp.add_column("metric")
    for st in report.strategies:
        cmp.add_column(st.strategy, justify="right")
    columns = [
        {
            name: short
            for name, _, short in _metric_rows(st, report.training_seconds.get(st.strategy))
        }
        for st in report.strategies
    ]
    names = list(dict.fromkeys(name for c in columns for name in c))
    for name in names:
        if name in ("samples", "epochs replayed", "epochs recorded") and not caption:
            continue
        label = "tokens per step (median)" if name.startswith("tokens per step") else name
        cmp.add_row(label, *(c.get(name, "-") for c in columns))
    return cmp


def _title(report: BatchesReport) -> str:
    """The summary table's title; after a seed search it names the seed it describes."""
    if report.composition is not None:
        return "Batch schedule (recorded)"
    if report.search is None:
        return "Batch schedule"
    how = "found by --search-seed" if report.search.seed_found else _seed_from(report)
    return f"Batch schedule of seed {report.seed} ({how})"


def _seed_from(report: BatchesReport) -> str:
    """Where the schedule's seed came from, in words (never "as given" for a default)."""
    origin = report.seed_origin
    return "the default seed" if origin == "default" else f"from {origin}"


def _match(v: Any) -> str:
    mismatch = "none" if v.first_mismatch is None else v.first_mismatch
    return (
        f"tokens match {_pct(v.tokens_match)} of {v.n_compared} steps (logged as "
        f"{_basis(v)}); first mismatch: {mismatch}"
    )


def _basis(v: Any) -> str:
    """What the log's tokens were matched as, in words (``step``, ``rank0 with
    padding``, ...)."""
    from ..schedule.verify import PADDED

    return f"{v.basis.removesuffix(PADDED)} with padding" if v.padded else str(v.basis)


def _verification_lines(report: BatchesReport) -> list[str]:
    """``--log``'s lines: the match of the replay, or the outcome of the seed search
    (and, when it found none, the match of the schedule as given)."""
    v, search = report.verification, report.search
    if v is None:
        return []
    if v.n_compared == 0 and search is None:
        return [
            "verification against the log: not enough data: no step of the log has a token "
            "count to compare with (it logs no tokens per step)"
        ]
    if report.composition is not None:
        return [f"verification against the log: recorded {_match(v)}"]
    if search is None:
        return [
            f"verification against the log: tokens match {_pct(v.tokens_match)} of "
            f"{v.n_compared} steps (seed {v.seed}, first step {v.first_step}, "
            f"logged as {_basis(v)}); first mismatch: "
            f"{'none' if v.first_mismatch is None else v.first_mismatch}"
        ]
    span = f"{search.first_seed}..{search.last_seed}"
    if search.seed_found:
        return [
            f"verification against the log: seed {v.seed} (first step {v.first_step}) "
            f"found in {span}: {_match(v)}"
        ]
    failed = (
        f"verification against the log: no seed in {span} reproduces the log (best: seed "
        f"{v.seed}, tokens match at {_pct(v.tokens_match)} of steps)"
    )
    g = report.given_check
    if g is not None and search.reproduces(g):
        return [
            f"{failed}, but seed {g.seed} ({_seed_from(report)}) does (first step "
            f"{g.first_step}): {_match(g)}"
        ]
    lines = [
        f"{failed}; found means tokens match at {search.min_match:.0%} or more of the "
        f"{v.n_compared} compared steps; check --strategy, --token-budget, --max-seq-len, "
        "--world-size, --grad-accum and the manifest"
    ]
    if g is not None:
        lines.append(
            f"the schedule with seed {g.seed} ({_seed_from(report)}, first step "
            f"{g.first_step}): {_match(g)}"
        )
    return lines


def _render_plan(plan: BucketPlan, console: Console) -> None:
    from rich.table import Table

    from ..batches.buckets import METHODS

    sim = (
        f"simulated on {plan.simulated_samples:,} samples, 1 epoch"
        if plan.simulated_samples
        else "not simulated: batch-max model"
    )
    best = Table(
        title=f"Bucket edges for 'bucketed', best per k ({sim})",
        title_justify="left",
    )
    best.add_column("k", justify="right", no_wrap=True)
    best.add_column("boundaries (--buckets)", overflow="fold")
    best.add_column("method", no_wrap=True)
    best.add_column("padding eff.", justify="right", no_wrap=True)
    if plan.throughput is not None:
        best.add_column(
            f"time, {plan.epochs} epoch{'s' if plan.epochs != 1 else ''}",
            justify="right",
            no_wrap=True,
        )
    for o in plan.recommended():
        eff = o.padding_efficiency if o.padding_efficiency is not None else o.batch_max_efficiency
        row = [str(o.k), ",".join(str(e) for e in o.boundaries), o.method, _pct(eff)]
        if plan.throughput is not None:
            row.append(duration(o.training_seconds))
        best.add_row(*row)
    console.print(best)

    by = Table(
        title="Padding efficiency by method: simulated (pad-to-edge bound)",
        title_justify="left",
        caption=(
            f"{plan.n_distinct:,} distinct lengths. dp-batch-max / dp-edge: exact DP on the "
            "length histogram, padding modelled per batch / to the bucket edge; lhotse: equal "
            "tokens per bucket; quantile: equal samples per bucket. --json has every edge set."
        ),
        caption_justify="left",
    )
    by.add_column("k", justify="right")
    for method in METHODS:
        by.add_column(method, justify="right")
    cells = {(o.method, o.k): o for o in plan.options}
    for k in sorted({o.k for o in plan.options}):
        row = [str(k)]
        for method in METHODS:
            o = cells[(method, k)]
            row.append(f"{_pct(o.padding_efficiency)} ({_pct(o.model_efficiency)})")
        by.add_row(*row)
    console.print(by)


def _stats_json(s: ScheduleStats, seconds: float | None) -> dict[str, Any]:
    out = asdict(s)
    if seconds is not None:
        out["training_seconds"] = seconds
    return out


def report_document(report: BatchesReport) -> dict[str, Any]:
    """The ``--json`` document: the summary's keys at the top, options below."""
    s = report.stats
    doc: dict[str, Any] = {"manifest": report.manifest, "config": report.config}
    if report.composition is not None:
        doc["composition"] = report.composition
    if report.seed is not None:
        doc["seed"] = report.seed
    doc.update(_stats_json(s, report.training_seconds.get(s.strategy)))
    doc["warnings"] = [asdict(w) for w in report.warnings]
    if report.bucket_edges:  # bucketed without --buckets: the edges it derived
        doc["bucket_edges"] = list(report.bucket_edges)
    if report.strategies:
        doc["strategies"] = [
            _stats_json(st, report.training_seconds.get(st.strategy)) for st in report.strategies
        ]
    if report.plan is not None:
        plan = report.plan

        def option(o: Any) -> dict[str, Any]:
            return {
                "method": o.method,
                "k": o.k,
                "boundaries": list(o.boundaries),
                "padding_efficiency": o.padding_efficiency,
                "edge_padding_efficiency": o.model_efficiency,
                "batch_max_padding_efficiency": o.batch_max_efficiency,
                "training_seconds": o.training_seconds,
            }

        doc["buckets"] = [option(o) for o in plan.recommended()]
        doc["bucket_options"] = [option(o) for o in plan.options]
        doc["bucket_simulated_samples"] = plan.simulated_samples
    if report.verification is not None:
        doc["verification"] = _verification_json(report)
    if report.throughput is not None:
        doc["throughput"] = report.throughput
    if report.export:
        doc["export"] = report.export
    return doc


def _verification_json(report: BatchesReport) -> dict[str, Any]:
    """The verification's fields; after a search, also whether the seed was found
    (``seed_found``), the range searched, the seeds tried and the share needed."""
    out = asdict(report.verification)
    search = report.search
    if search is not None:
        out["seed_found"] = search.seed_found
        out["seeds_searched"] = [search.first_seed, search.last_seed]
        out["seeds_tried"] = search.tried
        out["min_match"] = search.min_match
    if search is not None and report.given_check is not None:
        out["as_given"] = asdict(report.given_check)
        out["as_given"]["reproduces_log"] = search.reproduces(report.given_check)
    return out


def plot_batches(report: BatchesReport, path: str | Path) -> Path:
    """Save :func:`batches_figure` as PNG, SVG or PDF by ``path``'s extension."""
    from .plots import save_figure

    return save_figure(batches_figure(report), path)


def batches_figure(report: BatchesReport) -> Any:
    """Per strategy drawn (each ``--compare``d one, else the chosen one): rank 0's
    micro-batches, mean sample length against step (log axis), titled with its padding
    efficiency and length ICC; beside them, padding efficiency against diversity
    (1 - length ICC) for every strategy, labelled with percentages."""
    from .plots import printable_texts, pyplot

    plt = pyplot()
    from matplotlib.ticker import LogLocator, ScalarFormatter

    drawn = report.micro
    stats = {st.strategy: st for st in (report.strategies or (report.stats,))}
    rows = max(len(drawn), 1)
    beside = len(stats) > 1  # one strategy: a lone dot says nothing, so no diversity panel
    fig = plt.figure(figsize=(13 if beside else 10, 1.9 * rows + 1.6))
    grid = fig.add_gridspec(rows, 2 if beside else 1, width_ratios=[2.4, 1] if beside else [1])
    colours = {name: f"C{i}" for i, name in enumerate(stats)}
    first = None
    for i, ml in enumerate(drawn):
        ax = fig.add_subplot(grid[i, 0], sharex=first, sharey=first)
        first = first or ax
        colour = colours.get(ml.strategy, "C0")
        ax.scatter(ml.steps, ml.mean_len, s=2, color=colour, rasterized=True)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter("")
        st = stats.get(ml.strategy)
        icc = f", length ICC {st.length_icc:.3f}" if st and st.length_icc is not None else ""
        ax.set_title(
            f"{ml.strategy}: padding efficiency {ml.padding_efficiency:.1%}{icc}",
            fontsize=9,
            loc="left",
        )
        ax.set_ylabel("mean length\n(tokens)", fontsize=8)
        ax.grid(alpha=0.25)
        if i == len(drawn) - 1:
            ax.set_xlabel("optimizer step (rank 0's micro-batches, one dot each)")
    if beside:
        _diversity_panel(fig.add_subplot(grid[:, 1]), list(stats.values()), colours)
    more = "" if beside else " (--compare A,B,... draws strategies side by side)"
    what = report.manifest if report.composition is None else report.composition
    name = report.label or what
    fig.suptitle(f"{name}: what each schedule feeds one GPU{more}", fontsize=10)
    printable_texts(fig)  # (before the layout measures the text)
    fig.tight_layout()
    return fig


def _diversity_panel(ax: Any, strategies: list[ScheduleStats], colours: dict[str, str]) -> None:
    """Padding efficiency against diversity (1 - length ICC), one labelled dot each."""
    placed: dict[tuple[float, float], int] = {}
    for st in strategies:
        icc = st.length_icc
        if icc is None:
            continue
        ax.scatter(1 - icc, st.padding_efficiency, s=60, color=colours.get(st.strategy, "C0"))
        # strategies at the same point (fairseq and sorted-greedy often are) stack labels
        spot = (round(1 - icc, 2), round(st.padding_efficiency, 2))
        placed[spot] = placed.get(spot, -1) + 1
        ax.annotate(
            f"{st.strategy}\n{st.padding_efficiency:.1%} padding eff., ICC {icc:.2f}",
            (1 - icc, st.padding_efficiency),
            xytext=(6, -4 - 22 * placed[spot]),
            textcoords="offset points",
            fontsize=8,
        )
    ax.set_xlim(-0.05, 1.25)
    ax.set_ylim(0.0, 1.05)
    ax.set_xlabel("diversity: 1 - length ICC")
    ax.set_ylabel("padding efficiency")
    ax.set_title("padding against batch diversity", fontsize=9)
    ax.grid(alpha=0.3)
