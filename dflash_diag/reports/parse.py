"""``dflash-diag parse``: what a log holds."""

from __future__ import annotations

import math
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


def summarise(run: RunLog, rank: int | str = 0) -> dict[str, Any]:
    """The facts ``parse`` reports, as plain data (the ``--json`` document).

    Per column: non-null count, min and max (NaN-skipping); steps as int.
    ``restarts`` lists the steps the counter went back to (one per resume; the later
    lines replace the earlier ones), ``n_restarts`` counts them; ``ranks`` lists the
    ranks seen in the log, ``n_ranks`` counts them, and ``rows_rank`` says whose rows the
    table holds: a rank number, or ``"all"`` (a ``rank`` column).

    :param rank: the ``rank`` given to :func:`~dflash_diag.logs.read_log` (``"all"`` or
        a number; a log without rank 0 was read for its only or lowest rank).

    >>> import pandas as pd
    >>> from dflash_diag.data import RunLog
    >>> t = pd.DataFrame({"step": [1, 2], "loss": [2.5, float("nan")]})
    >>> summarise(RunLog(t, "x.log", "text"))["columns_detail"][1]
    {'name': 'loss', 'non_null': 1, 'min': 2.5, 'max': 2.5}
    """
    t = run.table
    detail = []
    for c in t.columns:
        s = t[c]
        n = int(s.notna().sum())
        lo = float(s.min()) if n else math.nan
        hi = float(s.max()) if n else math.nan
        detail.append({"name": str(c), "non_null": n, "min": lo, "max": hi})
    steps = t["step"] if "step" in t else None
    return {
        "path": run.path,
        "format": run.format,
        "rows": int(len(t)),
        "first_step": int(steps.min()) if steps is not None and len(t) else None,
        "last_step": int(steps.max()) if steps is not None and len(t) else None,
        "columns": [str(c) for c in t.columns],
        "columns_detail": detail,
        "restarts": [int(s) for s in run.restarts],
        "n_restarts": len(run.restarts),
        "ranks": [int(r) for r in run.ranks],
        "n_ranks": len(run.ranks),
        "rows_rank": _rows_rank(run, rank),
        "skipped": {k: int(v) for k, v in run.skipped.items()},
        "n_lines": int(run.n_lines),
        "step_source": run.step_source,
    }


def _rows_rank(run: RunLog, rank: int | str) -> int | str | None:
    """Whose rows the table holds: ``"all"`` with a rank column, else the rank read
    (read_log falls back to the lowest rank when rank 0 was asked for and is absent)."""
    if "rank" in run.table.columns or rank == "all":
        return "all"
    if not run.ranks:
        return None
    return int(rank) if int(rank) in run.ranks else int(run.ranks[0])
