"""What ``dflash-diag --help`` lists: the app's text, its own options, and each command
with the first paragraph of its help (the command's summary).

This is their one home: the typer app (``cli/group.py``) and each command's module read
them from here, and :func:`dflash_diag.cli.main` draws the screen from them alone,
without importing typer or the command modules (``cli/helpscreen.py``,
:func:`~dflash_diag.cli.helpscreen.top_screen`).  Nothing but the standard library is
imported here.
"""

from __future__ import annotations

PROG = "dflash-diag"

APP_HELP = (
    "Is that loss spike your data pipeline or your optimizer?  Read a training log, "
    "replay the batch schedule from a length manifest, and find out."
)

#: command -> the module of this package that defines it (its ``register(app)``), in the
#: order ``--help`` lists them.
COMMANDS: dict[str, str] = {
    "parse": "parse",
    "spikes": "spikes",
    "samples": "samples",
    "batches": "batches",
    "compare": "compare",
    "manifest": "manifest",
    "watch": "watch",
}

#: command -> its summary, the first paragraph of its help (one line of text; the
#: screen wraps it).
SUMMARIES: dict[str, str] = {
    "parse": "Read a training log into one row per step and say what was found.",
    "spikes": (
        "Find spikes in a logged metric and say, with evidence, whether batch composition "
        "explains them."
    ),
    "samples": (
        "Rank every sample of the run by how high its batches are wherever it goes, and "
        "name the ones that make the loss spike."
    ),
    "batches": (
        "Replay a batch schedule from a length manifest and measure it: padding efficiency, "
        "length ICC, adjacent-batch correlation, recurrence; compare strategies, optimise "
        "bucket edges, verify against a run's log, export it."
    ),
    "compare": "Compare a run with earlier runs at the same point of training.",
    "manifest": "Write a length manifest (sample_id, length[, category]) from a dataset.",
    "watch": (
        "Follow a training log as it is written and report each spike when its point "
        "arrives, with its verdict when the batches are known."
    ),
}

#: The app's own options as ``--help`` lists them: long name, short name, help.
DEBUG = ("--debug", "", "Show tracebacks (for bug reports).")
VERSION = ("--version", "-V", "Print the version and exit.")
HELP = ("--help", "-h", "Show this message and exit.")
OPTIONS = (DEBUG, VERSION, HELP)


def command_help(name: str, details: str) -> str:
    """The help of command ``name``: its summary, then the paragraphs ``details``."""
    return f"{SUMMARIES[name]}\n\n{details.strip(chr(10))}\n"


def version_line() -> str:
    """What ``--version`` prints: ``dflash-diag 0.1.0``."""
    from .. import __version__

    return f"{PROG} {__version__}"
