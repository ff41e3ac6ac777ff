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
) -> ParseReport:
    """Read ``log`` and summarise it (``dflash-diag parse``); with ``steps`` (first, last;
    None = open), only the rows of those steps (the summary's ``steps_shown`` says which,
    and ``of_steps`` the log's whole range)."""
    from ..logs import check_format, read_log

    fmt = check_format(format)
    with stage("reading log") as bar:
        run = read_log(str(log), format=fmt, rank=rank, progress=bar, step_every=step_every)
    if steps is None:
        return ParseReport(run, summarise(run, rank))
    logged = run.table["step"].to_numpy()
    check_steps_in(logged, steps)
    keep = [in_steps(int(x), steps) for x in logged]
    shown = replace(run, table=run.table[keep].reset_index(drop=True))
    whole = [int(logged.min()), int(logged.max())]
    return ParseReport(
        shown, summarise(shown, rank) | {"steps_shown": list(steps), "of_steps": whole}
    )


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
