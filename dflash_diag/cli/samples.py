"""``dflash-diag samples LOG``: which samples make the loss spike, wherever they go."""

# No `from __future__ import annotations`: schedule_options reads this signature with
# inspect.signature, and typer needs the Annotated objects, not their strings.
from pathlib import Path
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
    ManifestOpt,
    MetricOpt,
    MetricRankOpt,
    RankOpt,
    StepEveryOpt,
    parse_metric_rank,
    parse_rank,
    schedule_options,
)
from .outputs import stages

_HELP = command_help(
    "samples",
    "Under a shuffling sampler each sample comes back once an epoch in another batch: a "
    "sample whose batches are high every time is the cause (group testing); one whose "
    "other batches are ordinary is not.  Each logged point's z is what is left of the "
    "loss once the composition model has predicted the batch; a sample is tested on its "
    "second-lowest z over its appearances (one may be ordinary: before the model has "
    "learned the rest, a corrupt sample is no worse than any other), exactly against "
    "shuffled points, and named at a 5% false-discovery rate (Benjamini-Hochberg).  "
    "Samples that always travel together (fixed batches, a sample seen once) cannot be "
    "told apart: they are a group, named whole, never one member.\n\n"
    "Needs the batches: --composition FILE (a recording), or --manifest and the run's "
    "schedule, as for 'spikes'.  --to FILE writes every sample (Parquet or CSV) to join "
    "to your dataset and filter it.",
)


@schedule_options
def samples(
    log: Annotated[str, typer.Argument(help="The training log ('-' for standard input).")],
    metric: MetricOpt = "loss",
    manifest: ManifestOpt = None,
    length_column: LengthColumnOpt = None,
    category_column: CategoryColumnOpt = None,
    composition: CompositionOpt = None,
    covers: CoversOpt = Covers.window,
    ground: GroundOpt = Ground.auto,
    metric_rank: MetricRankOpt = None,
    force: ForceOpt = False,
    to: Annotated[
        Path | None,
        typer.Option("--to", help="Write every sample's evidence: .parquet or .csv."),
    ] = None,
    top: Annotated[
        int, typer.Option("--top", min=1, help="Rows of the ranking shown (and in --json).")
    ] = 20,
    json: JsonOpt = False,
    format: FormatOpt = None,
    rank: RankOpt = "0",
    step_every: StepEveryOpt = None,
    config: ConfigOpt = None,
    *,
    schedule: dict[str, Any],
) -> None:
    from ..composition import Request
    from ..render.jsonout import dumps
    from ..render.samples import render_text, samples_json
    from ..reports import SpikesOptions, samples_report
    from .consoles import out_console

    options = SpikesOptions(
        metric=metric,
        covers=covers.value,
        metric_rank=parse_metric_rank(metric_rank) if metric_rank is not None else None,
        format=format,
        rank=parse_rank(rank),
        step_every=step_every,
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
    report = samples_report(log, options, batches, to=to, stage=stages(not json))
    if json:
        typer.echo(dumps(samples_json(report, top)))
    else:
        render_text(report, out_console, top)


def register(app: typer.Typer) -> None:
    """Add ``samples`` to ``app``."""
    from typer.core import TyperCommand

    from .outputs import plain_help_types

    PLAIN = plain_help_types(TyperCommand)
    app.command("samples", help=_HELP, cls=PLAIN)(samples)
