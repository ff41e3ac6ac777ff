"""The two consoles: stdout for results, stderr for errors and progress.

On a terminal rich uses its width; in a pipe or a file (where rich would assume 80
columns) tables get 120 columns, or ``$COLUMNS`` when it is set, so reports pasted into
issues and notebooks keep one row per line.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

from rich.console import ConsoleDimensions

from ..printable import PrintableConsole

#: Columns of the results in a pipe or a file, where ``$COLUMNS`` is not set.
PIPE_WIDTH = 120


class _Results(PrintableConsole):
    """stdout's console: a reader that closed the pipe (``| head``) is not a failure;
    in a pipe or a file it is :data:`PIPE_WIDTH` wide unless ``$COLUMNS`` says.

    rich's default ends the process with status 1, which this tool reserves for bugs;
    here the rest of the output goes to the null device and the command ends with 0.
    The width is decided at each print, not when this module is imported (a notebook or
    a test that runs a command with ``$COLUMNS`` set for it gets that width then only)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if kwargs.get("width") is None:
            self._width = None  # (rich fixes $COLUMNS at construction; here it is read live)

    @property
    def size(self) -> ConsoleDimensions:
        dims = super().size
        if self._width is None and not (os.environ.get("COLUMNS") or self.is_terminal):
            return ConsoleDimensions(PIPE_WIDTH, dims.height)
        return dims

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size

    def on_broken_pipe(self) -> None:
        end_at_closed_pipe(self)


def end_at_closed_pipe(console: Any) -> NoReturn:
    """What a console on stdout does when its reader closed the pipe (``| head``): it
    goes quiet, the rest of the output goes to the null device, and the command ends
    with status 0 (rich's default, status 1, is this tool's status for a bug)."""
    console.quiet = True
    stdout_to_null()
    raise SystemExit(0)


def stdout_to_null() -> None:
    """Point standard output at the null device (its reader closed the pipe: what is
    still buffered, flushed at exit, goes nowhere rather than raise again)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


out_console = _Results(highlight=False)
err_console = PrintableConsole(stderr=True, highlight=False)
