"""The reader table: one row per format ``read_log`` and ``--format`` accept.

A row names the format, says in a line what writes it, and gives the function that
reads a log of it.  A new line format is one entry in
:data:`~dflash_diag.logs.grammar.LINE_FORMATS` (the message shapes it accepts) and one
row here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..data import Progress, RunLog
from ..errors import InputError
from .csv import read_csv
from .hf_state import read_hf_state
from .io import RawLog
from .json_rows import is_rows_document, read_json_rows
from .tensorboard import read_tensorboard
from .text import read_lines

#: ``(raw log, forced format or None, rank, progress, fast)`` -> RunLog
ReadFn = Callable[[RawLog, "str | None", "int | str", "Progress | None", bool], RunLog]


@dataclass(frozen=True)
class Reader:
    """One format: what writes it, and how a log of it is read.

    :param help: one line for ``--help`` and the README.
    :param read: the reader of a log's bytes, or None for a format read from its path
        (TensorBoard event files and folders).
    """

    help: str
    read: ReadFn | None


def _lines(
    raw: RawLog, fmt: str | None, rank: int | str, progress: Progress | None, fast: bool
) -> RunLog:
    if fmt in (None, "jsonl") and is_rows_document(raw.data):
        return read_json_rows(raw, rank)  # one JSON document of rows (a W&B export)
    return read_lines(raw, fmt, rank, progress, fast=fast)


def _csv(
    raw: RawLog, fmt: str | None, rank: int | str, progress: Progress | None, fast: bool
) -> RunLog:
    return read_csv(raw, rank)


def _hf_state(
    raw: RawLog, fmt: str | None, rank: int | str, progress: Progress | None, fast: bool
) -> RunLog:
    return read_hf_state(raw, rank)


READERS: dict[str, Reader] = {
    "text": Reader(
        "free-text trainer lines (key=value, key: value, 'step 10/100 | loss 2.3')", _lines
    ),
    "hf-dict": Reader(
        "Hugging Face Trainer dict lines ({'loss': 0.87, 'learning_rate': ...})", _lines
    ),
    "jsonl": Reader("one JSON object per line, or one JSON document of rows", _lines),
    "csv": Reader("CSV/TSV table: Lightning metrics.csv, W&B export, step<TAB>loss", _csv),
    "hf-state": Reader("Hugging Face trainer_state.json (log_history)", _hf_state),
    "tensorboard": Reader("TensorBoard event file or folder (needs the 'tensorboard' extra)", None),
}

#: Format names ``read_log`` and ``--format`` accept.
FORMATS: tuple[str, ...] = tuple(READERS)
FORMAT_HELP: dict[str, str] = {name: r.help for name, r in READERS.items()}


def check_format(fmt: str | None) -> str | None:
    """Validate a ``--format`` value (None or ``auto`` = detect)."""
    if fmt is None or fmt == "auto":
        return None
    if fmt not in READERS:
        raise InputError("--format", f"unknown format {fmt!r}", f"choose from {', '.join(FORMATS)}")
    return fmt


def read_as(
    fmt: str,
    name: str,
    raw: RawLog,
    forced: str | None,
    rank: int | str,
    progress: Progress | None,
    fast: bool = True,
) -> RunLog:
    """Read a log of format ``fmt`` (``raw``: its bytes; ``name``: its path, for a
    format read from its path).  ``forced``: the format the caller asked for, or None
    when ``fmt`` was detected (a line reader then takes every message shape)."""
    reader = READERS[fmt].read
    if reader is None:
        return read_tensorboard(name, rank)
    return reader(raw, forced, rank, progress, fast)
