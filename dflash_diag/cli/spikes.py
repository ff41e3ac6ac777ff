"""``dflash-diag spikes LOG``: find spikes and say whether their batches explain them."""

# No `from __future__ import annotations`: schedule_options reads this signature with
# inspect.signature, and typer needs the Annotated objects, not their strings.
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from .options import (
    SCHEDULE_PANEL,
    FormatOpt,
    JsonOpt,
    PlotOpt,
    RankOpt,
    StepEveryOpt,
    parse_rank,
    schedule_options,
)

_HELP = (
    "Find spikes in a logged metric and say, with evidence, whether batch composition "
    "explains them.\n\n"
    "Detection works on the log alone.  The default robust detector flags a point whose "
    "robust z = (x - baseline) / (1.4826 MAD) is >= its critical z and that is >= 5% over "
    "its baseline, the median of the --window (50) logged points before it or around it "
    "(the lower), straightened by a robust line.  The critical z is calibrated on the log: "
    "a Student t for the error of a 50-point MAD, scaled by the spread of the log's own "
    "z's, at a tail probability of 0.5 / (points tested), so noise alone makes about 0.5 "
    "false events per log (lower, Benjamini-Hochberg at 10%, when the log holds more high "
    "z's than noise makes); docs/detection.md has the formula.  --threshold Z replaces it "
    "by a fixed z (3.5 is the rule before calibration).  The output says how many flags "
    "this log's own noise would make by chance.  Consecutive points form one event; "
    "NaN/inf are events of their own.  --detector olmo|foundry|megatron applies those "
    "projects' production rules instead.  For acc* metrics, drops are the spikes.\n\n"
    "With a manifest (--manifest, or 'manifest' in --config / a dflash-diag.toml beside the "
    "log) the schedule is replayed once, checked against the logged tokens, and every "
    "logged point is lined up with its batches: correlations of the detrended metric with "
    "batch features, a robust composition model (R² in-sample and cross-validated), and "
    "for every spike its batch, the model's prediction and the steps where the same batch "
    "came back.\n\n"
    "Verdicts: composition (the batch predicts >= 50% of the rise, or the same batch was "
    "high again), unexplained (an ordinary batch: < 25%, and none of the longest samples; "
    "look at the optimizer), "
    "inconclusive (too little data, or in between)."
)


class DetectorName(StrEnum):
    robust = "robust"
    olmo = "olmo"
    foundry = "foundry"
    megatron = "megatron"


class Covers(StrEnum):
    window = "window"
    step = "step"


def register(app: typer.Typer) -> None:
    @app.command("spikes", help=_HELP)
    @schedule_options
    def spikes(
        log: Annotated[str, typer.Argument(help="The training log ('-' for standard input).")],
        metric: Annotated[
            str, typer.Option("--metric", help="Column to examine: loss, acc, grad_norm, ...")
        ] = "loss",
        window: Annotated[
            int | None,
            typer.Option(
                "--window",
                help="Baseline window in logged points (robust 50, olmo 128, foundry 100).",
            ),
        ] = None,
        threshold: Annotated[
            float | None,
            typer.Option(
                "--threshold",
                help="robust: a fixed critical z instead of the calibrated one (3.5: the old "
                "rule); "
                "olmo: sigmas (6); foundry/megatron: multiple (2 / 10).",
            ),
        ] = None,
        detector: Annotated[
            DetectorName, typer.Option("--detector", help="Which rule flags spikes.")
        ] = DetectorName.robust,
        manifest: Annotated[
            Path | None,
            typer.Option("--manifest", help="Per-sample lengths (parquet/csv/jsonl/npy)."),
        ] = None,
        covers: Annotated[
            Covers,
            typer.Option(
                "--covers",
                help="With a point every N steps: 'window' (a mean over the N steps up to it) "
                "or 'step' (that step only).",
            ),
        ] = Covers.window,
        metric_rank: Annotated[
            str | None,
            typer.Option(
                "--metric-rank",
                help="Whose batches the logged metric describes: 'auto' (the pooled step or "
                "the rank that fits best; the default), 'all' (a mean over ranks, e.g. "
                "all-reduced) or a rank number (printed by that rank alone). Also "
                "metric_rank in \\[schedule].",
            ),
        ] = None,
        force: Annotated[
            bool,
            typer.Option("--force", help="Attribute even when the replayed tokens mismatch."),
        ] = False,
        json: JsonOpt = False,
        plot: PlotOpt = None,
        format: FormatOpt = None,
        rank: RankOpt = "0",
        step_every: StepEveryOpt = None,
        config: Annotated[
            Path | None,
            typer.Option(
                "--config",
                help="TOML file with a \\[schedule] section (default: dflash-diag.toml beside "
                "the log, else in the working directory).",
                rich_help_panel=SCHEDULE_PANEL,
            ),
        ] = None,
        *,
        schedule: dict[str, Any],
    ) -> None:
        from ..logs import check_format, read_log
        from ..render.jsonout import dumps
        from ..render.plots import check_plot_path
        from ..render.spikes import Context, plot_spikes, render_text, to_json
        from ..schedule.config import resolve_schedule
        from ..spikes.attribute import log_only_evidence
        from ..spikes.detect import detect_spikes
        from .consoles import out_console
        from .options import progress

        fmt = check_format(format)
        which = parse_rank(rank)
        if plot is not None:
            check_plot_path(plot)
        resolved = resolve_schedule(schedule, config, near=log, manifest=manifest)
        if metric_rank is not None:
            resolved = replace(resolved, metric_rank=_metric_rank(metric_rank))
        with progress("reading log", enabled=not json) as bar:
            run = read_log(log, format=fmt, rank=which, progress=bar, step_every=step_every)
        logged = run.logged(metric) if metric in run.table.columns else None
        detection = detect_spikes(
            run.table, metric, detector.value, window, threshold, path=log, logged=logged
        )
        attribution = replayed = None
        evidence = log_only_evidence(detection)
        epochs = None
        if resolved.manifest is not None:
            from ..spikes.coverage import check_steps, schedule_source

            check_steps(run.step_source, log, force)
            source = schedule_source(resolved.config_path, config, bool(resolved.given), log)
            attribution, replayed, m, epochs = _attribute(
                log, run.table, detection, resolved, covers.value, force, not json, source
            )
            evidence = attribution.spikes
        else:
            m = None
        from ..schedule.replay import undetermined_notes
        from ..variance import variance_proxies

        with progress("variance proxies", enabled=not json) as bar:
            variance = variance_proxies(
                detection, run.table, attribution, replayed, m, progress=bar
            )
        ctx = Context(
            log=log,
            log_format=run.format,
            config=str(resolved.config_path) if resolved.config_path else None,
            manifest=str(resolved.manifest) if resolved.manifest else None,
            schedule=_params(resolved.params) if resolved.manifest else None,
            epochs=epochs,
            step_source=run.step_source,
            notes=undetermined_notes(replayed),
        )
        if plot is not None:
            plot_spikes(plot, detection, evidence, attribution)
        if json:
            typer.echo(dumps(to_json(ctx, detection, evidence, attribution, variance)))
        else:
            render_text(out_console, ctx, detection, evidence, attribution, variance)
            if plot is not None:
                out_console.print(f"plot written to {plot}")


def _metric_rank(value: str) -> int | str:
    """``--metric-rank`` text -> ``"auto"``, ``"all"`` or a rank number."""
    from ..errors import InputError

    if value in ("auto", "all"):
        return value
    if value.isdigit():
        return int(value)
    raise InputError(
        "--metric-rank", f"not a rank: {value!r}", "give 'auto', 'all' or a rank number like 0"
    )


def _params(params: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(params)


def _attribute(
    log: str,
    table: Any,
    detection: Any,
    resolved: Any,
    covers: str,
    force: bool,
    bar_on: bool,
    source: str,
) -> tuple[Any, Any, Any, int]:
    """Read the manifest, replay once (enough epochs for the log), check, attribute."""
    from ..manifest import read_manifest
    from ..schedule import replay
    from ..spikes.attribute import attribute_spikes
    from ..spikes.coverage import check_schedule, epochs_to_cover
    from ..spikes.optimizer import lr_at
    from .options import progress

    with progress("reading manifest", enabled=bar_on) as bar:
        m = read_manifest(
            resolved.manifest, resolved.length_column, resolved.category_column, progress=bar
        )
    params = resolved.params
    last = int(detection.steps[-1])
    epochs = params.epochs if "epochs" in resolved.given else epochs_to_cover(m, params, last, log)
    with progress("replaying schedule", enabled=bar_on) as bar:
        rep = replay(m, params, epochs=epochs, progress=bar)
    named = "strategy" in resolved.given
    check = check_schedule(rep, table, force=force, path=log, named_by=source, named=named)
    lr = lr_at(table, detection.steps)
    with progress("attributing spikes", enabled=bar_on) as bar:
        att = attribute_spikes(
            detection, rep, covers, check, resolved.metric_rank, progress=bar, lr=lr
        )
    return att, rep, m, epochs
