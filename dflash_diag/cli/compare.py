"""``dflash-diag compare BASELINE.log [MORE ...] RUN.log``: is this run normal for its point?"""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import InputError
from .listing import command_help
from .options import (
    FormatOpt,
    JsonOpt,
    LogYOpt,
    PlotOpt,
    RankOpt,
    SmoothOpt,
    VerboseOpt,
    parse_rank,
    parse_smooth,
    parse_steps,
)
from .outputs import HtmlOpt, check_outputs, say_written, stages

_HELP = command_help(
    "compare",
    """The last file is the run in question (or --run FILE); the others are baselines.  Each
log's lr gives its warmup (length, shape, peak) and decay.  At every point of the run the
baselines give a band: from one baseline a robust local quadratic over --window logged
points +- K x 1.4826 x MAD of its residuals; from 2-4 the envelope of their bands; from 5
or more the 10th-90th percentiles of them.  Baselines are interpolated onto the run's
points on the aligned axis, never extrapolated.

Per metric and phase (warmup, post-warmup): the share of points inside, above and below
the band and the largest departure; the steps at which each log first reaches the
milestone levels; the run's slope after warmup with a 95% confidence interval and, per
baseline, both slopes over the stretch after warmup they share and their difference;
values logged as nan/inf (a numerical failure: how many, the first step); one sentence.
A metric not logged at a step (eval_loss between evaluations) is absent there.
--at STEP answers for one step: value, lr, warmup progress, band and verdict.
""",
)


#: compare's --step-every: the same flag as parse's and spikes', for several logs.
CompareStepEveryOpt = Annotated[
    int | None,
    typer.Option(
        "--step-every",
        help="For the logs whose records carry no step (HF dict lines without the progress "
        "bar, numbered 1, 2, ... by logging event): they logged every N optimizer steps "
        "(logging_steps), so record i is step i x N. Applies to every such log; logs that "
        "number their own steps keep them. Without it such logs are compared only with each "
        "other (by logging event), never with stepped logs.",
    ),
]


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v.strip() for text in values for v in text.split(",") if v.strip()]


def compare(
    files: Annotated[
        list[str],
        typer.Argument(
            help="BASELINE.log [MORE ...] RUN.log (the last is the run).",
            metavar="LOG",
        ),
    ],
    run: Annotated[
        str | None,
        typer.Option("--run", help="The run in question; then every FILE is a baseline."),
    ] = None,
    align: Annotated[
        str,
        typer.Option(
            "--align",
            help="step | tokens (cumulative) | warmup (fraction of warmup done, "
            "for warmups of different lengths).",
        ),
    ] = "step",
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            help="Metrics to compare, e.g. acc,loss (default: those of loss, acc, "
            "grad_norm, acc_N, loss_N logged by the run and a baseline).",
        ),
    ] = None,
    milestones: Annotated[
        list[str] | None,
        typer.Option(
            "--milestones",
            help="Levels to report the first step reaching: 0.1,0.3,0.5 for acc-like "
            "metrics (the default), NAME=L1,L2 for one metric (loss=2,1.5: first "
            "step at or below). Repeatable.",
        ),
    ] = None,
    at: Annotated[
        list[int] | None,
        typer.Option("--at", help="A run step to answer for. Repeatable."),
    ] = None,
    warmup_steps: Annotated[
        int | None,
        typer.Option("--warmup-steps", help="Warmup length for logs whose lr does not show one."),
    ] = None,
    band_k: Annotated[
        float,
        typer.Option("--band-k", help="Band half-width in robust SDs (1.4826 x MAD)."),
    ] = 3.0,
    window: Annotated[int, typer.Option("--window", help="Band window, in logged points.")] = 21,
    json: JsonOpt = False,
    plot: PlotOpt = None,
    html: HtmlOpt = None,
    format: FormatOpt = None,
    rank: RankOpt = "0",
    step_every: CompareStepEveryOpt = None,
    fail_on: Annotated[
        str | None,
        typer.Option(
            "--fail-on",
            help="above | below | outside: exit 3 when the run leaves the band on that "
            "side, at the --at steps (or, without them, in a phase of any metric).",
        ),
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label",
            help="A name per log, in the order of the files (baselines, then the run): "
            "--label v1 --label v2. Default: the file's name, with its folder when two "
            "files share a name.",
            metavar="NAME",
        ),
    ] = None,
    steps: Annotated[
        str | None,
        typer.Option(
            "--steps",
            help="The plot's x-range: steps A to B, both included (A: or :B leave that "
            "end open), with --align step. The bands, shares and slopes cover the whole "
            "runs.",
            metavar="STEPS",
        ),
    ] = None,
    smooth: SmoothOpt = None,
    log_y: LogYOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    from ..compare.gate import FAIL_MODES, band_failures
    from ..render.compare import (
        comparison_json,
        display_names,
        fail_on_line,
        plot_comparison,
        render_text,
    )
    from ..render.jsonout import dumps
    from ..reports import compare_report
    from .consoles import out_console

    which = parse_rank(rank)
    shown = parse_steps(steps)
    if shown is not None and align != "step":
        raise InputError(
            "--steps", f"the axis is {align}, not steps", "use --steps with --align step"
        )
    alpha = parse_smooth(smooth)
    check_outputs(plot, html, tuple(files))
    if fail_on is not None and fail_on not in FAIL_MODES:
        raise InputError(
            "--fail-on", f"unknown side {fail_on[:20]!r}", "choose above, below or outside"
        )
    result = compare_report(
        files,
        run=run,
        align=align,
        metrics=_split(metric),
        milestones=milestones,
        at=tuple(at or ()),
        warmup_steps=warmup_steps,
        band_k=band_k,
        window=window,
        format=format,
        rank=which,
        step_every=step_every,
        stage=stages(not json),
    )
    names = display_names(result, label)
    style = {"names": names, "smooth": alpha, "log_y": log_y, "steps": shown}
    if plot is not None:
        plot_comparison(result, plot, **style)
    if html is not None:
        from ..render.html import compare_html

        compare_html(result, html, **style)
    failures = band_failures(result, fail_on) if fail_on is not None else ()
    if json:
        doc = comparison_json(result, names)
        if fail_on is not None:
            doc["fail_on"] = {"mode": fail_on, "failed": bool(failures), "why": failures}
        typer.echo(dumps(doc))
    else:
        render_text(result, out_console, names, shown, verbose)
        say_written(out_console, plot, html)
        if fail_on is not None:
            out_console.print(fail_on_line(fail_on, failures), soft_wrap=True, markup=False)
    if failures:
        raise typer.Exit(3)


def register(app: typer.Typer) -> None:
    """Add ``compare`` to ``app``."""
    from typer.core import TyperCommand

    from .outputs import plain_help_types

    PLAIN = plain_help_types(TyperCommand)
    app.command("compare", help=_HELP, cls=PLAIN)(compare)
