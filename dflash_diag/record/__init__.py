"""Record each optimizer step's batch composition while a run trains.

A training loop adds a few lines::

    from dflash_diag.record import BatchRecorder

    with BatchRecorder("train.batches", settings={"seed": 1234}) as rec:
        for step, batch in enumerate(loader):
            ...
            rec.log(step, batch["idx"], batch["lengths"])  # dataset indices, real lengths

and ``read_recording("train.batches").to_replay(manifest)`` gives the schedule the run
really saw as the :class:`~dflash_diag.data.Replay` every analysis takes.

Importing this package imports neither torch, transformers nor lightning (nor numpy
until a recorder is made): ``record_trainer`` (``.hf``) and ``LightningRecorder``
(``.lightning``) load when first used.
"""

from __future__ import annotations

import importlib
from typing import Any

from .recorder import RECORD_SUFFIX, BatchRecorder, RecordingBusy, rank_path
from .recording import Recording, find_recording, read_recording

_LAZY: dict[str, str] = {"record_trainer": "hf", "LightningRecorder": "lightning"}

__all__ = [
    "BatchRecorder",
    "LightningRecorder",
    "RECORD_SUFFIX",
    "Recording",
    "RecordingBusy",
    "find_recording",
    "rank_path",
    "read_recording",
    "record_trainer",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # (the lazy names left out: a tool that reads every name dir() lists, as pytest's
    # doctest collection does, would import torch and lightning for nothing)
    return sorted(set(globals()) | (set(__all__) - set(_LAZY)))
