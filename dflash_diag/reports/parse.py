"""``dflash-diag parse``: what a log holds."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..data import RunLog

from .common import Stage, check_steps_in, in_steps, quiet


@dataclass(frozen=True, eq=False)
class ParseReport:
    """What ``parse`` shows: the log read and its summary (the ``--json`` document)."""

    run: RunLog
    summary: dict[str, Any]


def parse_report(
    log: str | Path,
    format: str | None = None,
    rank: int | str = 0,
    step_every: int | None = None,
    stage: Stage = quiet,
    steps: tuple[int | None, int | None] | None = None,
    run: int | None = None,
    tracking_uri: str | None = None,
) -> ParseReport:
    """Read ``log`` and summarise it (``dflash-diag parse``); with ``steps`` (first, last;
    None = open), only the rows of those steps (the summary's ``steps_shown`` says which,
    and ``of_steps`` the log's whole range); with ``run``, run ``run`` (from 1) of a file
    of several runs (the summary's ``runs`` lists them all: first and last step, rows);
    with ``tracking_uri``, ``log`` is a run id on that MLflow server."""
    from ..logs import MultiRunLog, check_format, pick_run, read_log, with_interval
    from ..render.parse import summarise

    fmt = check_format(format)
    with stage("reading log") as bar:
        whole = read_log(str(log), fmt, rank, bar, tracking_uri=tracking_uri)
    runs = whole.runs if isinstance(whole, MultiRunLog) else (whole,)
    chosen = len(runs) if run is None else run
    picked = whole if run is None else pick_run(whole, run)
    run_log = picked if step_every is None else with_interval(picked, step_every)
    check_has_loss(run_log)
    extra: dict[str, Any] = {}
    if len(runs) > 1:
        extra = {"run": chosen, "runs": [_run_span(i + 1, r) for i, r in enumerate(runs)]}
    if steps is None:
        return ParseReport(run_log, summarise(run_log, rank) | extra)
    logged = run_log.table["step"].to_numpy()
    check_steps_in(logged, steps)
    keep = [in_steps(int(x), steps) for x in logged]
    shown = replace(run_log, table=run_log.table[keep].reset_index(drop=True))
    whole_range = [int(logged.min()), int(logged.max())]
    return ParseReport(
        shown,
        summarise(shown, rank) | extra | {"steps_shown": list(steps), "of_steps": whole_range},
    )


def check_has_loss(run: RunLog) -> None:
    """A log read with no loss at all is bad input, not a table to show in silence:
    say what was found (rows, the columns with values, lines skipped) and what is needed.

    :raises InputError: no column named ``loss`` or ending in ``loss`` has a value.
    """
    from ..errors import InputError

    table = run.table
    found = [c for c in table.columns if c != "step" and table[c].notna().any()]
    if any(c.endswith("loss") for c in found):
        return
    skipped = ", ".join(f"{k} {v}" for k, v in run.skipped.items()) or "none"
    cols = ", ".join(found[:8]) + (", ..." if len(found) > 8 else "") if found else "no metric"
    raise InputError(
        run.path,
        f"no loss found: {len(table)} rows with {cols} (lines skipped: {skipped})",
        "parse needs records with a step and a loss, such as 'step=10 loss=2.3' or "
        '{"step": 10, "loss": 2.3}; --format names the format if it was misread',
    )


def _run_span(number: int, run: RunLog) -> dict[str, Any]:
    """One run of a file of several: its number, first and last step, rows."""
    steps = run.table["step"]
    return {"run": number, "steps": [int(steps.min()), int(steps.max())], "rows": len(steps)}
