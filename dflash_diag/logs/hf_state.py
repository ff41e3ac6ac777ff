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
from .fields import fields_from_mapping, load_json
from .io import RawLog, decode
from .normalise import build_table


def looks_like_state(obj: Any) -> bool:
    """A ``trainer_state.json`` document: an object with a ``log_history`` list."""
    return isinstance(obj, dict) and isinstance(obj.get("log_history"), list)


def read_hf_state(raw: RawLog, rank: int | str = 0) -> RunLog:
    """Read a ``trainer_state.json`` into a RunLog (one row per logged step).

    :raises InputError: not JSON, or no ``log_history`` list.
    """
    text, _ = decode(raw.data)
    try:
        obj = load_json(text)
    except RecursionError:
        raise InputError(
            raw.path,
            "JSON nested too deep to read (over about 1000 levels)",
            "give the trainer_state.json the Trainer wrote",
        ) from None
    except ValueError as e:
        line = getattr(e, "lineno", None)
        raise InputError(
            raw.path, f"not valid JSON ({getattr(e, 'msg', e)})", "is the file complete?", line
        ) from None
    if not looks_like_state(obj):
        raise InputError(
            raw.path,
            "no 'log_history' list in this JSON document",
            "give a Hugging Face trainer_state.json, or --format jsonl for JSON lines",
        )
    records: list[dict[str, Any]] = []
    skipped: dict[str, int] = {}
    for i, entry in enumerate(obj["log_history"], 1):
        if not isinstance(entry, dict):
            skipped["bad_record"] = skipped.get("bad_record", 0) + 1
            continue
        msg = fields_from_mapping(list(entry.items()))
        if msg.summary:
            skipped["summary"] = skipped.get("summary", 0) + 1
            continue
        if not msg.metrics:
            skipped["text"] = skipped.get("text", 0) + 1
            continue
        rec: dict[str, Any] = {"line": i, "rank": 0, "is_eval": msg.is_eval}
        rec.update(msg.fields)
        rec["step_source"] = "field" if "step" in msg.fields else "none"
        rec["attach"] = True
        records.append(rec)
    return build_table(
        records,
        path=raw.path,
        fmt="hf-state",
        rank=rank,
        skipped=skipped,
        n_lines=len(obj["log_history"]),
    )
