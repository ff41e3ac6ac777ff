"""The two consoles: stdout for results, stderr for errors and progress.

On a terminal rich uses its width; in a pipe or a file (where rich would assume 80
columns) tables get 120 columns, or ``$COLUMNS`` when it is set, so reports pasted into
issues and notebooks keep one row per line.
"""

from __future__ import annotations

import os
import sys

from ..printable import PrintableConsole


def _width() -> int | None:
    if os.environ.get("COLUMNS") or sys.stdout.isatty():
        return None
    return 120


class _Results(PrintableConsole):
    """stdout's console: a reader that closed the pipe (``| head``) is not a failure.

    rich's default ends the process with status 1, which this tool reserves for bugs;
    here the rest of the output goes to the null device and the command ends with 0."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(0)


out_console = _Results(highlight=False, width=_width())
err_console = PrintableConsole(stderr=True, highlight=False)
