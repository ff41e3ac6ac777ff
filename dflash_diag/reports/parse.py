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
) -> ParseReport:
    """Read ``log`` and summarise it (``dflash-diag parse``); with ``steps`` (first, last;
    None = open), only the rows of those steps (the summary's ``steps_shown`` says which,
    and ``of_steps`` the log's whole range)."""
    from ..logs import check_format, read_log
    from ..render.parse import summarise

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
