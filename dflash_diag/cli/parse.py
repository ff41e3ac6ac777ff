"""``dflash-diag parse LOG``: read a training log and say what is in it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..outpath import write_table
from .listing import command_help
from .options import FormatOpt, JsonOpt, RankOpt, StepEveryOpt, StepsOpt, parse_rank, parse_steps

TO_SUFFIXES = (".parquet", ".csv", ".jsonl")

_HELP = command_help(
    "parse",
    """Prints the format, rows, step range, each column with its non-null count and range,
restarts (how many times the step counter went back, and to which steps), the ranks
in the log (and whose rows the table holds) and skipped lines by reason.

Formats (--format; detected when not given): text (key=value / 'step 10/100 | loss 2.3'
lines: SpecForge, NeMo, DeepSpec, Megatron, nanoGPT, llm.c, RichHandler), hf-dict
(Trainer {'loss': ...} lines), jsonl, csv (also TSV, Lightning metrics.csv, W&B
export), hf-state (trainer_state.json), tensorboard (extra). gzip and '-' (stdin) work.
A file of several runs appended one after another is told apart from a resume: the
last run is read (--run N for another), the others' rows counted as other_run.
""",
)


def check_to(to: Path, log: str) -> Path:
    """Validate ``--to``: a known suffix, an existing folder, and not the input itself."""
    from ..outpath import check_output_path

    return check_output_path(
        to,
        TO_SUFFIXES,
        "output",
        protect=[log],
        clash=("--to is the input log itself", "write the table elsewhere"),
    )


def parse(
    log: Annotated[str, typer.Argument(help="The log file ('-' for standard input).")],
    format: FormatOpt = None,
    rank: RankOpt = "0",
    step_every: StepEveryOpt = None,
    to: Annotated[
        Path | None,
        typer.Option("--to", help="Write the per-step table: .parquet, .csv or .jsonl."),
    ] = None,
    json: JsonOpt = False,
    steps: StepsOpt = None,
    run: Annotated[
        int | None,
        typer.Option(
            "--run",
            help="A file of several runs appended one after another: read run N "
            "(from 1, in file order); the last when not given.",
        ),
    ] = None,
    tracking_uri: Annotated[
        str | None,
        typer.Option(
            "--tracking-uri",
            help="An MLflow tracking server (http://HOST:PORT); LOG is then a run id "
            "(needs the 'mlflow' extra). Or give LOG as mlflow://HOST:PORT/RUN_ID.",
        ),
    ] = None,
) -> None:
    from ..render.jsonout import dumps
    from ..render.parse import render_text
    from ..reports import parse_report
    from .consoles import out_console
    from .outputs import stages

    which = parse_rank(rank)
    shown = parse_steps(steps)
    if to is not None:
        check_to(to, log)
    report = parse_report(
        log,
        format,
        which,
        step_every,
        stage=stages(not json),
        steps=shown,
        run=run,
        tracking_uri=tracking_uri,
    )
    if to is not None:
        write_table(report.run.table, to)
    if json:
        doc = dict(report.summary)
        if to is not None:
            doc["written"] = str(to)
        typer.echo(dumps(doc))
    else:
        render_text(report.summary, out_console, written=str(to) if to is not None else None)


def register(app: typer.Typer) -> None:
    """Add ``parse`` to ``app``."""
    from typer.core import TyperCommand

    from .outputs import plain_help_types

    PLAIN = plain_help_types(TyperCommand)
    app.command("parse", help=_HELP, cls=PLAIN)(parse)
