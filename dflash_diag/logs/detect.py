"""Which reader a log needs, from its name and its first bytes."""

from __future__ import annotations

import json
import os
import re

from ..errors import InputError
from .io import decode
from .json_rows import rows_of

_HEAD = 65536
_NAME = re.compile(r"^[A-Za-z_\"'][\w ./@()\-\"']*$")


def detect_format(path: str | os.PathLike[str], data: bytes | None = None) -> str:
    """Name the format of the log at ``path`` (or of ``data``, its bytes, if given).

    Event files by name (``tfevents``) or by their first record; ``trainer_state.json``
    by its ``log_history`` key; a header row of names over rows of numbers is CSV/TSV; a
    file of JSON objects, or one JSON document of rows (a list of objects, pandas'
    ``{column: {row: value}}``), is ``jsonl``; of ``{'...': ...}`` dict
    lines, ``hf-dict``; everything else ``text``.

    >>> detect_format("log.txt", b"step\\tloss\\n10\\t8.46\\n20\\t7.69\\n")
    'csv'
    >>> detect_format("log.txt", b"epoch=0 step=1 loss=2.5\\n")
    'text'
    """
    from .tensorboard import is_event_path, looks_like_events

    name = os.fspath(path)
    if data is None:
        if name != "-" and is_event_path(name):
            return "tensorboard"
        from .io import read_bytes

        data = read_bytes(name).data
    elif "tfevents" in os.path.basename(name):
        return "tensorboard"
    if looks_like_events(data):  # an event file under another name
        if name == "-":
            raise InputError(
                "-", "TensorBoard event data cannot be read from standard input", "give its path"
            )
        return "tensorboard"
    refuse_binary(name, data)
    head, _ = decode(data[:_HEAD])
    stripped = head.lstrip("\ufeff \t\r\n")
    if stripped.startswith("{") and '"log_history"' in head:
        return "hf-state"
    rows = stripped.startswith("[") and stripped[1:].lstrip().startswith("{")
    if (rows or stripped.startswith("{")) and not stripped.startswith("{'"):
        try:
            obj = json.loads(data.decode("utf-8", "replace"))
        except (ValueError, RecursionError):  # (not JSON, or nested past ~1000 levels)
            pass
        else:
            if stripped.startswith("{") or rows_of(obj) is not None:
                # a single JSON object (one record) reads as JSON lines; a document of
                # rows (a W&B history export) is read by the same reader
                return "jsonl"
    lines = [x.rstrip("\r") for x in stripped.split("\n")[:200] if x.strip()]
    if not lines:
        return "text"
    if _is_table(lines):
        return "csv"
    json_lines = sum(1 for x in lines if x.lstrip().startswith('{"'))
    dict_lines = sum(1 for x in lines if "{'" in x)
    if json_lines >= max(1, len(lines) // 2):
        return "jsonl"
    if dict_lines and dict_lines >= sum(1 for x in lines if "=" in x or ": " in x) // 2:
        return "hf-dict"
    return "text"


#: File signatures of binary formats people hand to ``parse`` by mistake.
_MAGIC: tuple[tuple[bytes, str, str], ...] = (
    (b"PAR1", "a Parquet file", "for a length manifest use 'dflash-diag batches'"),
    (b"\x93NUMPY", "a NumPy .npy file", "for a length manifest use 'dflash-diag batches'"),
    (b"PK\x03\x04", "a zip archive (or a PyTorch checkpoint)", "give the training log"),
    (b"\x89HDF", "an HDF5 file", "give the training log"),
    (b"\x80\x04", "a Python pickle", "give the training log"),
    (b"\x80\x05", "a Python pickle", "give the training log"),
    (
        b"DFDBATCH",  # (dflash_diag.record.frames.MAGIC: this layer imports no recorder)
        "a recording of the batches a run held",
        "give the run's training log, and this file as --composition (or leave it beside "
        "the log as LOG.batches)",
    ),
)


def refuse_binary(name: str, data: bytes) -> None:
    """A binary file is bad input, not a log of junk rows.

    Known signatures are named; otherwise a head (first 8 KiB) that is more than 10% NUL
    bytes is binary.  A NUL-filled *tail* (a log cut by a crash) is not looked at here.
    """
    for magic, what, hint in _MAGIC:
        if data.startswith(magic):
            raise InputError(name, f"this is {what}, not a training log", hint)
    head = data[:8192].rstrip(b"\x00")  # a short log's own NUL-filled tail is no sign
    if head and head.count(0) > len(head) // 10:
        raise InputError(name, "this is a binary file, not a training log", "give the text log")


def _is_table(lines: list[str]) -> bool:
    """A header of names, then rows with as many cells, mostly numbers."""
    from .csv import sniff_delimiter

    sep = sniff_delimiter(lines[0])
    header = [c.strip().strip('"') for c in lines[0].split(sep)]
    if len(header) < 2 or not all(_NAME.match(c) for c in header if c):
        return False
    if any("=" in c for c in header):
        return False
    rows = [x.split(sep) for x in lines[1:50]]
    if not rows:
        return False
    same = sum(1 for r in rows if len(r) == len(header))
    if same < max(1, int(0.8 * len(rows))):
        return False
    cells = [c.strip().strip('"') for r in rows for c in r if c.strip().strip('"')]
    numeric = sum(1 for c in cells if _float(c))
    return numeric >= 0.5 * max(1, len(cells))


def _float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
