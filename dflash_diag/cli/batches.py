"""``dflash-diag batches MANIFEST``: what a batching strategy does, before the GPUs spend days.

Parses options, calls :mod:`dflash_diag.batchstats` / :mod:`dflash_diag.buckets` /
:mod:`dflash_diag.schedule`, hands the results to :mod:`dflash_diag.render.batches`.
Only typer, rich and light dflash_diag modules are imported at module level.
"""

# No `from __future__ import annotations`: schedule_options reads this signature with
# inspect.signature, and typer needs the Annotated objects, not their strings.
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import InputError
from ..spikes.coverage import MIN_TOKENS_MATCH
from .options import SCHEDULE_PANEL, JsonOpt, PlotOpt, progress, schedule_options

OUTPUT_PANEL = "Analyses and outputs"


def parse_seed_range(text: str) -> range:
    """``"0..100"`` -> ``range(0, 101)`` (both ends included); ``"7"`` -> ``range(7, 8)``."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:\.\.\s*(\d+)\s*)?", text)
    if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
        raise InputError(
            "--search-seed", f"not a seed range: {text!r}", "give it as A..B, e.g. 0..1000"
        )
    lo = int(m.group(1))
    hi = int(m.group(2)) if m.group(2) is not None else lo
    return range(lo, hi + 1)


def register(app: typer.Typer) -> None:
    @app.command("batches")
    @schedule_options
    def batches(
        schedule: dict[str, Any],
        manifest: Annotated[
            Path | None,
            typer.Argument(
                help="Length manifest: parquet, csv, jsonl or npy (default: the config's "
                "manifest).",
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
        length_column: Annotated[
            str | None, typer.Option("--length-column", help="The manifest's length column.")
        ] = None,
        category_column: Annotated[
            str | None,
            typer.Option("--category-column", help="The manifest's category column."),
        ] = None,
        json_out: JsonOpt = False,
        plot: PlotOpt = None,
        config: Annotated[
            Path | None,
            typer.Option(
                "--config",
                help="TOML file with a \\[schedule] section (default: dflash-diag.toml beside "
                "the manifest, else in the working directory).",
                rich_help_panel=SCHEDULE_PANEL,
            ),
        ] = None,
    ) -> None:
        """Replay a batch schedule from a length manifest and measure it: padding
        efficiency, length ICC, adjacent-batch correlation, recurrence; compare
        strategies, optimise bucket edges, verify against a run's log, export it."""
        from ..render.plots import check_plot_path

        # Everything the user typed is checked before the slow work starts.
        if plot is not None:
            check_plot_path(plot)
        names = None
        if compare is not None:
            from ..batchstats import check_strategy_names

            names = check_strategy_names(compare.split(","))
        if optimize_buckets is not None and optimize_buckets < 1:
            raise InputError(
                "--optimize-buckets",
                f"must be 1 or more, got {optimize_buckets}",
                "give the most buckets, e.g. 6",
            )
        rate = None
        if throughput is not None:
            from ..buckets import parse_throughput

            rate = parse_throughput(throughput)
        seeds = parse_seed_range(search_seed) if search_seed is not None else None
        if seeds is not None and log is None:
            raise InputError("--search-seed", "needs a log to match", "add --log RUN.log")

        from ..schedule.config import resolve_schedule

        resolved = resolve_schedule(schedule, config, near=manifest, manifest=manifest)
        if resolved.manifest is None:
            raise InputError(
                "MANIFEST",
                "no manifest given",
                'name one, or set manifest = "..." under [schedule] in dflash-diag.toml',
            )
        if not resolved.manifest.exists():
            raise InputError(str(resolved.manifest), "manifest not found", "check the path")
        if log is not None and str(log) != "-" and not log.is_file():
            raise InputError(str(log), "log not found", "check the --log path")
        if export is not None:
            from ..schedule.export import check_export_path

            inputs = [resolved.manifest, *(x for x in (log, resolved.config_path) if x)]
            check_export_path(export, protect=inputs)
        params = resolved.params
        _run(
            resolved.manifest,
            params,
            config_path=resolved.config_path,
            length_column=length_column or resolved.length_column,
            category_column=category_column or resolved.category_column,
            names=names,
            k_max=optimize_buckets,
            rate=rate,
            log=log,
            seeds=seeds,
            export=export,
            json_out=json_out,
            plot=plot,
        )


def _check_log(
    manifest: Any, params: Any, log: Path, seeds: range | None, bar: bool
) -> tuple[Any, Any, Any]:
    """Read the log; with ``seeds``, search them.  Returns ``(params, run, search)``:
    the params with the found seed and first step when the search found one (else as
    given), the RunLog, and the SeedSearch (None without ``seeds``)."""
    from ..logs import read_log
    from ..schedule import search_seed

    run = read_log(log)
    if seeds is None:
        return params, run, None
    with progress("searching seeds", bar) as tick:
        search = search_seed(
            manifest, params, run.table, seeds, progress=tick, min_match=MIN_TOKENS_MATCH
        )
    if search.seed_found:
        # every figure below is for the seed the log was run with
        params = params.replace(seed=search.best.seed, first_step=search.best.first_step)
    return params, run, search


def _run(
    manifest_path: Path,
    params: Any,
    *,
    config_path: Path | None,
    length_column: str | None,
    category_column: str | None,
    names: list[str] | None,
    k_max: int | None,
    rate: float | None,
    log: Path | None,
    seeds: range | None,
    export: Path | None,
    json_out: bool,
    plot: Path | None,
) -> None:
    from ..batchstats import compare_strategies, length_strip, schedule_stats, schedule_warnings
    from ..buckets import optimize_buckets, training_time
    from ..manifest import read_manifest
    from ..render.batches import (
        BatchesReport,
        display_path,
        plot_batches,
        render_text,
        report_document,
    )
    from ..render.jsonout import dumps
    from ..schedule import replay, verify_tokens
    from ..schedule.export import export_schedule
    from .consoles import out_console

    bar = not json_out
    with progress("reading manifest", bar) as tick:
        manifest = read_manifest(manifest_path, length_column, category_column, progress=tick)
    run = search = None
    if log is not None:
        params, run, search = _check_log(manifest, params, log, seeds, bar)
    with progress("replaying", bar) as tick:
        schedule = replay(manifest, params, progress=tick)
    stats = schedule_stats(schedule)
    compared: tuple[Any, ...] = ()
    if names:
        with progress("comparing strategies", bar) as tick:
            compared = tuple(
                compare_strategies(manifest, params, names, progress=tick, reuse=stats)
            )
    plan = None
    if k_max is not None:
        with progress("optimising buckets", bar) as tick:
            plan = optimize_buckets(manifest, params, k_max, rate, progress=tick)
    # the schedule the tables describe (the given one unless a seed was found), checked
    check = verify_tokens(schedule, run.table) if run is not None else None
    verification = search.best if search is not None else check
    unfound = search is not None and not search.seed_found
    seconds: dict[str, float] = {}
    if rate is not None:
        for st in (stats, *compared):
            seconds[st.strategy] = training_time(
                st.tokens_per_epoch, st.epochs, st.padding_efficiency, rate
            )
    written = None
    if export is not None:
        inputs = [manifest_path, *(x for x in (log, config_path) if x is not None)]
        export_schedule(schedule, export, manifest.ids, protect=inputs)
        written = display_path(export)
    report = BatchesReport(
        manifest=display_path(manifest_path),
        config=display_path(config_path) if config_path is not None else None,
        stats=stats,
        strategies=compared,
        plan=plan,
        verification=verification,
        training_seconds=seconds,
        throughput=rate,
        export=written,
        search=search,
        seed=params.seed,
        warnings=tuple(schedule_warnings(manifest, params)),
        given_check=check if unfound else None,
    )
    if plot is not None:
        strip, steps = length_strip(schedule)
        plot_batches(strip, steps, compared or (stats,), plot)
    if json_out:
        out_console.print(
            dumps(report_document(report)), markup=False, highlight=False, soft_wrap=True
        )
    else:
        render_text(report, out_console)
