"""Hugging Face ``trainer_state.json``: the Trainer's ``log_history``.

Each ``log_history`` entry is one logging event with an explicit ``step``: training
entries (``loss``, ``grad_norm``, ``learning_rate``, ``epoch``), evaluation entries
(``eval_*``, kept in their own columns at the same step) and a final summary
(``train_runtime``, ``train_loss`` = the mean over the run), which is skipped.
"""

from __future__ import annotations

from typing import Any

from ..data import RunLog
from ..errors import InputError
from .documents import load_document, mapping_records
from .io import RawLog
from .normalise import build_table


def looks_like_state(obj: Any) -> bool:
    """A ``trainer_state.json`` document: an object with a ``log_history`` list."""
    return isinstance(obj, dict) and isinstance(obj.get("log_history"), list)


def read_hf_state(raw: RawLog, rank: int | str = 0) -> RunLog:
    """Read a ``trainer_state.json`` into a RunLog (one row per logged step).

    :raises InputError: not JSON, or no ``log_history`` list.
    """
    obj = load_document(raw, "give the trainer_state.json the Trainer wrote")
    if not looks_like_state(obj):
        raise InputError(
            raw.path,
            "no 'log_history' list in this JSON document",
            "give a Hugging Face trainer_state.json, or --format jsonl for JSON lines",
        )
    records, skipped = mapping_records(obj["log_history"], lambda entry: list(entry.items()))
    return build_table(
        records,
        path=raw.path,
        fmt="hf-state",
        rank=rank,
        skipped=skipped,
        n_lines=len(obj["log_history"]),
    )
