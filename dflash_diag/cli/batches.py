"""``dflash-diag batches MANIFEST``: what a batching strategy does, before the GPUs spend days.

Parses options, calls :mod:`dflash_diag.batches.stats` / :mod:`dflash_diag.batches.buckets` /
:mod:`dflash_diag.schedule`, hands the results to :mod:`dflash_diag.render.batches`.
Only typer, rich and light dflash_diag modules are imported at module level.
"""

# No `from __future__ import annotations`: schedule_options reads this signature with
# inspect.signature, and typer needs the Annotated objects, not their strings.
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from ..composition.ground import MIN_TOKENS_MATCH
from ..errors import InputError
from .listing import command_help
from .options import (
    CategoryColumnOpt,
    CompositionOpt,
    ConfigOpt,
    JsonOpt,
    LengthColumnOpt,
    PlotOpt,
    VerboseOpt,
    schedule_options,
)
from .outputs import HtmlOpt, check_outputs, say_written, stages

OUTPUT_PANEL = "Analyses and outputs"

_HELP = command_help(
    "batches",
    """With --composition FILE the batches a run recorded (dflash_diag.record) are
measured the same way, no replay; MANIFEST is then optional (--compare and
--optimize-buckets replay it).
""",
)


def parse_seed_range(text: str) -> range:
    """``"0..100"`` -> ``range(0, 101)`` (both ends included); ``"7"`` -> ``range(7, 8)``."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:\.\.\s*(\d+)\s*)?", text)
    if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
        raise InputError(
            "--search-seed",
            f"not a seed range: {text[:40]!r}",
            "give it as A..B, e.g. 0..1000",
        )
    lo = int(m.group(1))
    hi = int(m.group(2)) if m.group(2) is not None else lo
    if hi - lo + 1 > MAX_SEEDS:
        raise InputError(
            "--search-seed",
            f"{hi - lo + 1} seeds is more than one search replays ({MAX_SEEDS:,})",
            "search a narrower range, e.g. 0..1000",
        )
    return range(lo, hi + 1)


#: Most seeds one ``--search-seed`` replays (each is a replay of the first epoch).
MAX_SEEDS = 1_000_000


@schedule_options
def batches(
    schedule: dict[str, Any],
    manifest: Annotated[
        Path | None,
        typer.Argument(
            help="Length manifest: parquet, csv, jsonl or npy (default: the config's manifest).",
            metavar="MANIFEST",
            show_default=False,
        ),
    ] = None,
    compare: Annotated[
        str | None,
        typer.Option(
            "--compare",
            help="Strategies to compare side by side, e.g. sorted-greedy,bucketed,random.",
            rich_help_panel=OUTPUT_PANEL,
        ),
    ] = None,
    optimize_buckets: Annotated[
        int | None,
        typer.Option(
            "--optimize-buckets",
            help="Find the K bucket edges that pad least under 'bucketed' (exact DP on "
            "the length histogram, checked by simulation), for 1..K buckets, beside "
            "lhotse's equal-token and equal-count buckets.",
            metavar="K",
            rich_help_panel=OUTPUT_PANEL,
        ),
    ] = None,
    throughput: Annotated[
        str | None,
        typer.Option(
            "--throughput",
            help="Tokens/s at 100% padding efficiency (e.g. 25.1k): adds training "
            "time = real tokens x epochs / (throughput x efficiency).",
            rich_help_panel=OUTPUT_PANEL,
        ),
    ] = None,
    log: Annotated[
        Path | None,
        typer.Option(
            "--log",
            help="A run's log with tokens per step: check the replay against it.",
            rich_help_panel=OUTPUT_PANEL,
        ),
    ] = None,
    search_seed: Annotated[
        str | None,
        typer.Option(
            "--search-seed",
            help="With --log, find the seed in A..B (and first step 0 or 1) whose "
            "replay matches the log. A seed is found when its tokens match at "
            f"{MIN_TOKENS_MATCH:.0%} or more of the compared steps (what `spikes` needs "
            "to accept a schedule); every figure is then for that seed. Else the output "
            "says no seed in A..B reproduces the log, and names the best candidate.",
            metavar="A..B",
            rich_help_panel=OUTPUT_PANEL,
        ),
    ] = None,
    export: Annotated[
        Path | None,
        typer.Option(
            "--export",
            help="Write one row per (epoch, step, rank, micro, sample_id) with batch_id "
            "to FILE.parquet or FILE.csv.",
            rich_help_panel=OUTPUT_PANEL,
        ),
    ] = None,
    length_column: LengthColumnOpt = None,
    category_column: CategoryColumnOpt = None,
    composition: CompositionOpt = None,
    json_out: JsonOpt = False,
    plot: PlotOpt = None,
    html: HtmlOpt = None,
    config: ConfigOpt = None,
    label: Annotated[
        str | None,
        typer.Option(
            "--label",
            help="A name for the header, the plot's title and the HTML's title "
            "(default: the manifest's path).",
            metavar="NAME",
            rich_help_panel=OUTPUT_PANEL,
        ),
    ] = None,
    verbose: VerboseOpt = False,
) -> None:
    """``dflash-diag batches`` (its help: :data:`_HELP`)."""

    # Everything the user typed is checked before the slow work starts.
    check_outputs(plot, html, (manifest, log, config, composition))
    names = None
    if compare is not None:
        from ..batches.stats import check_strategy_names

        names = check_strategy_names(compare.split(","))
    if optimize_buckets is not None and optimize_buckets < 1:
        raise InputError(
            "--optimize-buckets",
            f"must be 1 or more, got {optimize_buckets}",
            "give the most buckets, e.g. 6",
        )
    rate = None
    if throughput is not None:
        from ..batches.buckets import parse_throughput

        rate = parse_throughput(throughput)
    seeds = parse_seed_range(search_seed) if search_seed is not None else None

    from ..composition import Request
    from ..reports import BatchesOptions, batches_report

    batches = Request(
        flags=schedule,
        config=config,
        manifest=manifest,
        composition=composition,
        columns=(length_column, category_column),
    )
    options = BatchesOptions(
        compare=names,
        optimize_buckets=optimize_buckets,
        throughput=rate,
        log=log,
        search_seed=seeds,
        export=export,
        plots=plot is not None or html is not None,
        label=label,
    )
    report = batches_report(batches, options, stage=stages(not json_out))
    _show(report, json_out, plot, html, verbose)


def register(app: typer.Typer) -> None:
    """Add ``batches`` to ``app``."""
    from typer.core import TyperCommand

    from .outputs import plain_help_types

    PLAIN = plain_help_types(TyperCommand)
    app.command("batches", help=_HELP, cls=PLAIN)(batches)


def _show(
    report: Any, json_out: bool, plot: Path | None, html: Path | None, verbose: bool = False
) -> None:
    """Write the plot and the HTML, print the JSON or the text."""
    from ..render.batches import plot_batches, render_text, report_document
    from ..render.jsonout import dumps
    from .consoles import out_console

    if plot is not None:
        plot_batches(report, plot)
    if html is not None:
        from ..render.html import batches_html

        batches_html(report, html)
    if json_out:
        out_console.print(
            dumps(report_document(report)), markup=False, highlight=False, soft_wrap=True
        )
    else:
        render_text(report, out_console, verbose)
        say_written(out_console, plot, html)
