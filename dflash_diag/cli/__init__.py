"""The ``dflash-diag`` command line: a thin skin over the library.

:func:`main` is the console script.  The typer app, its error boundary and its commands
are in ``cli/group.py`` (``dflash_diag.cli.app`` is that app, imported when first
asked for); each command in its own module (``cli/parse.py``, ...).

``dflash-diag --help`` (or ``-h``, or no arguments) and ``--version`` are answered here,
before typer is imported: the screen is drawn from ``cli/listing.py`` by
``cli/helpscreen.py``, which imports rich alone, the same screen the typer app draws (a
test holds the two equal).  Importing typer and the command modules would cost more than
twice Python's own start-up (``benchmarks/bench_startup.py``).  ``TYPER_USE_RICH`` set to
a false value leaves every screen to typer, as typer does.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from .listing import COMMANDS, HELP, PROG, VERSION

__all__ = ["COMMANDS", "app", "main"]

#: Commands whose process keeps numpy's huge pages: ``samples`` passes over every one of
#: a run's entries (60M at 10M samples x 6 epochs) many times, in arrays made afresh,
#: and ``spikes`` over every sample of its replays; there the huge pages save more than
#: their first touches cost (docs/performance.md, *Huge pages*).
HUGE_PAGE_COMMANDS = frozenset({"samples", "spikes"})

#: Values of ``TYPER_USE_RICH`` that typer reads as false (typer's ``parse_boolean_env_var``).
_FALSE = frozenset({"n", "no", "f", "false", "off", "0"})
#: The variable click reads for shell completion (``_`` + the program's name + ``_COMPLETE``).
COMPLETE_VAR = "_" + PROG.replace("-", "_").upper() + "_COMPLETE"


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point (``dflash-diag``).

    ``--help``, ``-h``, no arguments and ``--version`` are answered without typer
    (the module docstring); no arguments is a usage error, exit status 2, as the typer
    app has it.  Before numpy is imported, its ``NUMPY_MADVISE_HUGEPAGE`` is set to 0
    unless the environment sets it or the command is one of :data:`HUGE_PAGE_COMMANDS`:
    numpy asks the kernel for transparent huge pages for every large array, and where
    the kernel's ``defrag`` setting is ``madvise`` (Debian's and Ubuntu's default) each
    first touch of such memory may compact memory on the spot, which costs a
    short-lived command more than the huge pages save (docs/performance.md, *Huge
    pages*)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args in ([], [HELP[0]], [HELP[1]]) and _rich_help():
        _top_help(usage_error=not args)
    if args in ([VERSION[0]], [VERSION[1]]):
        from .listing import version_line

        print(version_line())
        sys.exit(0)
    command = next((a for a in args if not a.startswith("-")), None)  # (past --debug)
    if "numpy" not in sys.modules and command not in HUGE_PAGE_COMMANDS:
        os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
    from .group import app

    app(args=argv)


def _rich_help() -> bool:
    """Whether the typer app would draw its screen with rich: ``TYPER_USE_RICH`` not
    false, and no shell completion asked for (click's ``_DFLASH_DIAG_COMPLETE``, which
    the app answers itself)."""
    if COMPLETE_VAR in os.environ:
        return False
    return os.environ.get("TYPER_USE_RICH", "").lower() not in _FALSE


def _top_help(usage_error: bool) -> None:
    """Print ``dflash-diag --help``'s screen and exit: status 0, or 2 when it stands for
    a usage error (no arguments), also when the reader closed the pipe.  After
    ``--help``'s screen, a blank line, as the app prints (click echoes the screen's text,
    empty once rich has drawn it)."""
    from .helpscreen import draw, top_screen

    try:
        draw(top_screen())
        if not usage_error:
            print(flush=True)
    except BrokenPipeError:
        from .consoles import stdout_to_null

        stdout_to_null()
    except SystemExit:  # (a closed pipe while rich drew: :func:`~.consoles.end_at_closed_pipe`)
        pass
    sys.exit(2 if usage_error else 0)


def __getattr__(name: str) -> Any:
    """``app``: the typer app (``cli/group.py``), imported when first asked for."""
    if name == "app":
        from .group import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
