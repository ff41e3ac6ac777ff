"""What each step held, and on what ground: the one home of the tool's central idea.

- :mod:`~dflash_diag.composition.ground`: the checks and what a verdict rests on
  (``verified`` / ``recorded`` / ``given`` / ``refuted``);
- :mod:`~dflash_diag.composition.source`: :class:`Composition` (per step the
  micro-batches and their samples, the manifest, the ground) and the :class:`Source`
  base, with :class:`~dflash_diag.composition.replayed.ReplayedSource` and
  :class:`~dflash_diag.composition.recorded.RecordedSource` as its two real origins;
- :mod:`~dflash_diag.composition.request`: :func:`resolve`, the one rule that turns a
  command's options into a source; ``spikes``, ``batches``, ``watch`` and ``samples``
  call it.

Names load lazily so that importing this package pulls in neither numpy nor pandas.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "Composition": "source",
    "Source": "source",
    "ReplayedSource": "replayed",
    "RecordedSource": "recorded",
    "Request": "request",
    "Resolution": "request",
    "resolve": "request",
    "recording_to_use": "request",
    "ScheduleGround": "ground",
    "GROUNDS": "ground",
    "check_schedule": "ground",
    "check_recording": "ground",
    "check_steps": "ground",
    "epochs_to_cover": "ground",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)


def __dir__() -> list[str]:
    return __all__
