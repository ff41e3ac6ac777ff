"""``dflash-diag spikes LOG``: find spikes and say whether their batches explain them."""

# No `from __future__ import annotations`: schedule_options reads this signature with
# inspect.signature, and typer needs the Annotated objects, not their strings.
from enum import StrEnum
from typing import Annotated, Any

import typer

from .listing import command_help
from .options import (
    CategoryColumnOpt,
    CompositionOpt,
    ConfigOpt,
    Covers,
    CoversOpt,
    ForceOpt,
    FormatOpt,
    Ground,
    GroundOpt,
    JsonOpt,
    LengthColumnOpt,
    LogYOpt,
    ManifestOpt,
    MetricOpt,
    MetricRankOpt,
    PlotOpt,
    RankOpt,
    SmoothOpt,
    StepEveryOpt,
    VerboseOpt,
    parse_metric_rank,
    parse_rank,
    parse_smooth,
    parse_steps,
    schedule_options,
)
from .outputs import HtmlOpt, check_outputs, say_written, stages

_HELP = command_help(
    "spikes",
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
    "projects' production rules instead.  For accuracy metrics (acc, val_acc, "
    "eval_accuracy, ...), drops are the spikes.\n\n"
    "With a manifest (--manifest, or 'manifest' in --config / a dflash-diag.toml beside the "
    "log) the schedule is replayed once, checked against the logged tokens, and every "
    "logged point is lined up with its batches: correlations of the detrended metric with "
    "batch features, a robust composition model (R² in-sample and cross-validated), and "
    "for every spike its batch, the model's prediction and the steps where the same batch "
    "came back.\n\n"
    "With --composition FILE (or the recording beside the log: run.log -> run.batches; "
    "see dflash_diag.record) every logged step is lined up with the batches the run recorded: "
    "no schedule and no replay; the recorded tokens are checked against the logged ones, "
    "and every verdict rests on the recording (schedule check: recorded).\n\n"
    "Verdicts: composition (the batch predicts >= 50% of the rise, or the same batch was "
    "high again), unexplained (an ordinary batch: < 25%, and none of the longest samples; "
    "look at the optimizer), "
    "inconclusive (too little data, or in between).",
)


class DetectorName(StrEnum):
    robust = "robust"
    olmo = "olmo"
    foundry = "foundry"
    megatron = "megatron"


@schedule_options
def spikes(
    log: Annotated[str, typer.Argument(help="The training log ('-' for standard input).")],
    metric: MetricOpt = "loss",
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
    manifest: ManifestOpt = None,
    length_column: LengthColumnOpt = None,
    category_column: CategoryColumnOpt = None,
    composition: CompositionOpt = None,
    covers: CoversOpt = Covers.window,
    ground: GroundOpt = Ground.auto,
    metric_rank: MetricRankOpt = None,
    force: ForceOpt = False,
    json: JsonOpt = False,
    plot: PlotOpt = None,
    html: HtmlOpt = None,
    format: FormatOpt = None,
    rank: RankOpt = "0",
    step_every: StepEveryOpt = None,
    verbose: VerboseOpt = False,
    steps: Annotated[
        str | None,
        typer.Option(
            "--steps",
            help="Report and plot only the spikes at steps A to B, both included, as the "
            "log numbers them (A: or :B leave that end open), e.g. 200:300. Detection, the "
            "composition model and the variance figures still use the whole log.",
            metavar="STEPS",
        ),
    ] = None,
    label: Annotated[
        str | None,
        typer.Option(
            "--label",
            help="The run's name in the header, the plot's title and the HTML's title "
            "(default: the log's path).",
            metavar="NAME",
        ),
    ] = None,
    smooth: SmoothOpt = None,
    log_y: LogYOpt = False,
    config: ConfigOpt = None,
    *,
    schedule: dict[str, Any],
) -> None:
    from ..composition import Request
    from ..render.jsonout import dumps
    from ..render.spikes import plot_spikes, spikes_json, spikes_text
    from ..reports import SpikesOptions, spikes_report
    from .consoles import out_console

    which = parse_rank(rank)
    shown = parse_steps(steps)
    alpha = parse_smooth(smooth)
    check_outputs(plot, html, (log, manifest, config, composition))
    options = SpikesOptions(
        metric=metric,
        window=window,
        threshold=threshold,
        detector=detector.value,
        covers=covers.value,
        metric_rank=parse_metric_rank(metric_rank) if metric_rank is not None else None,
        format=format,
        rank=which,
        step_every=step_every,
        steps=shown,
        label=label,
        ground=ground.value,
    )
    batches = Request(
        flags=schedule,
        config=config,
        manifest=manifest,
        composition=composition,
        force=force,
        columns=(length_column, category_column),
    )
    report = spikes_report(log, options, batches, stage=stages(not json))
    if plot is not None:
        plot_spikes(plot, report, smooth=alpha, log_y=log_y)
    if html is not None:
        from ..render.html import spikes_html

        spikes_html(report, html, smooth=alpha, log_y=log_y)
    if json:
        typer.echo(dumps(spikes_json(report)))
    else:
        spikes_text(out_console, report, verbose)
        say_written(out_console, plot, html)


def register(app: typer.Typer) -> None:
    """Add ``spikes`` to ``app``."""
    from typer.core import TyperCommand

    from .outputs import plain_help_types

    PLAIN = plain_help_types(TyperCommand)
    app.command("spikes", help=_HELP, cls=PLAIN)(spikes)
