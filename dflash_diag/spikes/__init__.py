"""Spike detection and attribution: is a loss spike the data or the optimizer?

- :func:`detect_spikes` (``detect.py``): robust-z detector and the production rules;
- :func:`point_features` (``features.py``): batch features of every logged point;
- :func:`attribute_spikes` (``attribute.py``): evidence and a verdict per spike, on the
  composition model of ``model.py``, the detrended correlations of ``correlate.py`` and
  the recurring batches of ``recurrence.py``;
- the replay must reach and match the log before attribution runs:
  :func:`~dflash_diag.composition.check_schedule`, in :mod:`dflash_diag.composition`;
- ``windows.py``: the rolling baselines; the variance panel is
  :mod:`dflash_diag.spikes.variance`.

Names load lazily so that importing this package pulls in neither numpy nor pandas.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "DETECTORS": "detect",
    "Detection": "detect",
    "SpikeEvent": "detect",
    "detect_spikes": "detect",
    "log_interval": "detect",
    "point_features": "features",
    "rank_features": "features",
    "Attribution": "attribute",
    "SpikeEvidence": "attribute",
    "Recurrence": "recurrence",
    "Correlation": "correlate",
    "attribute_spikes": "attribute",
    "detrend": "correlate",
    "CompositionModel": "model",
    "fit_model": "model",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
