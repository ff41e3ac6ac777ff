"""TensorBoard event files (scalars only); needs the optional ``tensorboard`` package.

``pip install 'dflash-diag[tensorboard]'``.  Without it, reading an event file raises
:class:`~dflash_diag.errors.MissingDependency` (exit status 2, one line saying what to
install).  Scalar tags become columns (``train/loss`` -> ``loss``), event steps the step.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import InputError, MissingDependency
from ..records import RunLog
from .normalise import build_table

MARKER = "tfevents"


def is_event_path(path: str | os.PathLike[str]) -> bool:
    """An event file (``events.out.tfevents.*``) or a folder holding some."""
    p = Path(path)
    if p.is_dir():
        return any(MARKER in f.name for f in p.iterdir() if f.is_file())
    return MARKER in p.name


def event_files(path: str | os.PathLike[str]) -> list[Path]:
    p = Path(path)
    if p.is_dir():
        return sorted(f for f in p.iterdir() if f.is_file() and MARKER in f.name)
    return [p]


def _loader() -> Any:
    try:
        from tensorboard.backend.event_processing import event_file_loader
    except ImportError:
        return None
    return event_file_loader


def _scalar(value: Any) -> float | None:
    if value.HasField("simple_value"):
        return float(value.simple_value)
    if value.HasField("tensor"):
        from tensorboard.util import tensor_util

        arr = tensor_util.make_ndarray(value.tensor)
        if arr.size == 1:
            try:
                return float(arr.reshape(-1)[0])
            except (TypeError, ValueError):
                return None
    return None


def read_tensorboard(path: str | os.PathLike[str], rank: int | str = 0) -> RunLog:
    """Scalars of one event file, or of every event file in a folder, as a RunLog.

    :raises MissingDependency: the ``tensorboard`` package is not installed.
    """
    name = os.fspath(path)
    loader = _loader()
    if loader is None:
        raise MissingDependency(name, "tensorboard", "tensorboard")
    from .normalise import canonical_name

    records: list[dict[str, Any]] = []
    skipped: dict[str, int] = {}
    n = 0
    for f in event_files(path):
        try:
            for event in loader.EventFileLoader(str(f)).Load():
                n += 1
                if not event.HasField("summary"):
                    continue
                fields: dict[str, float] = {}
                for value in event.summary.value:
                    v = _scalar(value)
                    if v is None:
                        continue
                    fields[canonical_name(value.tag)] = v
                if not fields:
                    skipped["text"] = skipped.get("text", 0) + 1
                    continue
                is_eval = all(k.startswith(("eval_", "val_", "test_")) for k in fields)
                rec: dict[str, Any] = {"line": n, "rank": 0, "is_eval": is_eval}
                rec.update(fields)
                rec["step"] = float(event.step)
                rec["step_source"] = "field"
                records.append(rec)
        except Exception as e:  # noqa: BLE001 - a corrupt event file is bad input
            raise InputError(
                str(f), f"cannot read the event file ({e})", "is it complete?"
            ) from None
    return build_table(records, path=name, fmt="tensorboard", rank=rank, skipped=skipped, n_lines=n)
