"""Options and helpers the analysing commands share for their outputs: ``--html``."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Annotated, Any

import typer

HtmlOpt = Annotated[
    Path | None,
    typer.Option(
        "--html",
        help="Write one self-contained HTML report (summary, tables, every spike with its "
        "samples, the plots; opens without a network).",
        metavar="FILE",
    ),
]


def check_html_path(path: str | Path, protect: tuple[str | Path, ...] = ()) -> Path:
    """Validate ``--html FILE`` before any work is done: an ``.html`` file whose folder
    exists and that is not an input."""
    from ..outpath import check_output_path

    return check_output_path(path, (".html", ".htm"), "report", protect=protect)


def stages(enabled: bool) -> Any:
    """A :data:`~dflash_diag.reports.Stage` drawing progress bars on stderr (off when
    ``enabled`` is false, e.g. under ``--json``)."""
    from .options import progress

    def stage(description: str) -> AbstractContextManager[Any]:
        return progress(description, enabled=enabled)

    return stage
