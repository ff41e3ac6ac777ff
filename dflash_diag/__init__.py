"""dflash-diag: is that loss spike your data pipeline or your optimizer?

The library behind the ``dflash-diag`` command, usable from a notebook::

    from dflash_diag import read_log, read_manifest, replay, ScheduleParams

    run = read_log("sample_logs/run.log")          # RunLog: .table is one row per step
    manifest = read_manifest("sample_logs/manifest.parquet")
    sched = replay(manifest, ScheduleParams(strategy="sorted-greedy", seed=1234))

Names are imported lazily, so ``import dflash_diag`` stays fast and the heavy libraries
(pandas, scipy, matplotlib, pyarrow) load only when a function that needs them is used.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "InputError": "dflash_diag.errors",
    "RunLog": "dflash_diag.data",
    "Manifest": "dflash_diag.data",
    "ScheduleParams": "dflash_diag.data",
    "Replay": "dflash_diag.data",
    "read_log": "dflash_diag.logs",
    "detect_format": "dflash_diag.logs",
    "read_manifest": "dflash_diag.manifest",
    "replay": "dflash_diag.schedule",
    "verify_tokens": "dflash_diag.schedule",
    "search_seed": "dflash_diag.schedule",
    "resolve_schedule": "dflash_diag.schedule.config",
    "compare_runs": "dflash_diag.compare",
    "lr_phases": "dflash_diag.lr_phases",
    "phase_labels": "dflash_diag.lr_phases",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dflash_diag' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
