"""Batch-schedule replay: strategies, shuffle conventions, replay, verification.

>>> from dflash_diag.schedule import replay, STRATEGIES
>>> sorted(STRATEGIES)[:2]
['bucketed', 'distributed']

Names load lazily so that importing :mod:`dflash_diag.schedule.config` (the CLI does, at
start-up) pulls in neither numpy nor pandas.
"""

from __future__ import annotations

import importlib
from typing import Any

# Eager on purpose: the function ``replay`` must shadow the submodule of the same name,
# which the import system would otherwise leave as the package attribute.  The module
# imports numpy and pandas only inside its functions.
from .replay import epoch_batches as epoch_batches
from .replay import replay as replay

_EXPORTS: dict[str, str] = {
    "verify_tokens": "verify",
    "search_seed": "verify",
    "Verification": "verify",
    "SeedSearch": "verify",
    "Batches": "base",
    "EpochPlan": "base",
    "Strategy": "base",
    "get_strategy": "base",
    "make_shuffler": "rng",
}

__all__ = sorted([*_EXPORTS, "STRATEGIES", "epoch_batches", "replay"])


def __getattr__(name: str) -> Any:
    if name == "STRATEGIES":
        from .base import load_strategies

        value: Any = load_strategies()
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
