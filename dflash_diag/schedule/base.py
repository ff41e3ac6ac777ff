"""The strategy interface, the registry, and the flat batch lists they exchange.

A strategy turns capped lengths into each epoch's micro-batches in schedule order.  It
does that in two parts, so that work shared by every epoch is done once:

- ``prepare(lengths, params)`` does the epoch-independent work (sorted-greedy packs
  its batches here) and returns any object;
- ``epoch(prepared, epoch, shuffler)`` returns an :class:`EpochPlan`: a pool of batches
  and the order in which the epoch visits them.  A strategy whose batches never change
  returns the same pool every epoch, so the replay computes its features once.

Everything the strategies share (epochs, seeding, ranks, grad-accum, steps) lives in
:mod:`dflash_diag.schedule.replay`.  Adding a strategy is one module with a class like
:class:`Strategy` plus one line in :data:`dflash_diag.data.STRATEGIES` (its name, module and
traits); the parametrized tests pick it up.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..data import STRATEGIES, strategy_info
from ..errors import InputError

if TYPE_CHECKING:
    import numpy as np

    from ..data import ScheduleParams
    from .rng import Shuffler


@dataclass(frozen=True, eq=False)
class Batches:
    """A list of batches stored flat: batch ``i`` is ``ids[offsets[i]:offsets[i + 1]]``.

    :param ids: int64 dataset indices.
    :param offsets: int64, ``len(batches) + 1`` boundaries, ``offsets[0] == 0``.
    """

    ids: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def batch(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    def sizes(self) -> np.ndarray:
        import numpy as np

        return np.diff(self.offsets)

    def tolist(self) -> list[list[int]]:
        """The batches as lists of Python ints (for tests and small cases)."""
        ids = self.ids.tolist()
        bounds = self.offsets.tolist()
        return [ids[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]

    @classmethod
    def from_lists(cls, batches: Sequence[Sequence[int]]) -> Batches:
        """Flat storage of a list of index lists."""
        import numpy as np

        sizes = np.fromiter((len(b) for b in batches), dtype=np.int64, count=len(batches))
        offsets = np.zeros(len(batches) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        ids = np.fromiter(
            (int(i) for b in batches for i in b), dtype=np.int64, count=int(offsets[-1])
        )
        return cls(ids, offsets)

    @classmethod
    def from_bounds(cls, ids: np.ndarray, starts: np.ndarray) -> Batches:
        """Batches cut from ``ids`` at the (increasing) start positions ``starts``."""
        import numpy as np

        offsets = np.empty(len(starts) + 1, dtype=np.int64)
        offsets[:-1] = starts
        offsets[-1] = len(ids)
        return cls(np.asarray(ids, dtype=np.int64), offsets)

    def concat(self, other: Batches) -> Batches:
        import numpy as np

        return Batches(
            np.concatenate([self.ids, other.ids]),
            np.concatenate([self.offsets, other.offsets[1:] + self.offsets[-1]]),
        )

    def take(self, order: np.ndarray) -> Batches:
        """The batches in the order given (a gather of whole batches)."""
        import numpy as np

        sizes = self.sizes()[order]
        offsets = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        return Batches(gather_segments(self.ids, self.offsets, order), offsets)


def gather_segments(ids: np.ndarray, offsets: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``concatenate([ids[offsets[k]:offsets[k+1]] for k in order])`` without a Python loop.

    Position p of the result, inside the j-th chosen segment, reads
    ``ids[offsets[order[j]] + (p - start_j)]``: one ``repeat`` and one ``take``.
    """
    return ids.take(segment_positions(offsets, order), axis=0)


def segment_positions(offsets: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The positions :func:`gather_segments` reads: ``concatenate([arange(offsets[k],
    offsets[k+1]) for k in order])``, for arrays aligned with the segments' entries.

    >>> import numpy as np
    >>> segment_positions(np.array([0, 2, 5]), np.array([1, 0])).tolist()
    [2, 3, 4, 0, 1]
    """
    import numpy as np

    order = np.asarray(order, dtype=np.int64)
    starts = offsets[order]
    sizes = offsets[order + 1] - starts
    total = int(sizes.sum())
    out_starts = np.zeros(len(order), dtype=np.int64)
    np.cumsum(sizes[:-1], out=out_starts[1:])
    index = np.arange(total, dtype=np.int64)
    index += np.repeat(starts - out_starts, sizes)
    return index


@dataclass(frozen=True, eq=False)
class EpochPlan:
    """One epoch of a strategy: visit ``pool``'s batches in ``order``.

    :param pool: the batches (shared between epochs when the composition is fixed).
    :param order: int64 indices into ``pool``, the epoch's micro-batch order.
    :param dropped: samples the strategy left out this epoch, by documented reason.
    """

    pool: Batches
    order: np.ndarray
    dropped: dict[str, int] = field(default_factory=dict)


class Strategy(Protocol):
    """One batching scheme.  ``name`` is its ``--strategy`` value; ``sized`` is its
    declared trait: True when it cuts batches of ``--batch-size`` samples and never reads
    the token budget (False: it packs under the budget).

    ``epoch`` is called for epochs 0, 1, 2, ... in order with the shuffler of that epoch
    (the same object every epoch under ``--seeding once``), and must draw from it exactly
    as the original pipeline does, so the stream stays in step.
    """

    name: str
    sized: bool

    def prepare(self, lengths: np.ndarray, params: ScheduleParams) -> Any: ...

    def epoch(self, prepared: Any, epoch: int, shuffler: Shuffler) -> EpochPlan: ...


class FixedStrategy(Strategy, Protocol):
    """A strategy whose batches are built once for the run (its ``fixed_batches`` trait):
    every epoch visits all of ``pool(prepared)``, only in another order."""

    def pool(self, prepared: Any) -> Batches: ...


def need_batch_size(params: ScheduleParams) -> int:
    """``params.batch_size``, or an InputError saying the strategy needs it."""
    if params.batch_size is None:
        raise InputError(
            "--batch-size",
            f"strategy {params.strategy!r} needs a batch size in samples",
            "give --batch-size N",
        )
    return int(params.batch_size)


#: ``--strategy`` name -> ``module:Class`` implementing it, from the one registry
#: (:data:`dflash_diag.data.STRATEGIES`); a ``FILE.py:FUNC`` / ``module:FUNC`` value is a
#: user's own function instead (:mod:`dflash_diag.schedule.custom`).
STRATEGY_CLASSES: dict[str, str] = {s.name: s.implementation for s in STRATEGIES}


def strategy_class(name: str) -> type:
    """The class registered for ``name`` (imports its module)."""
    module, cls = STRATEGY_CLASSES[name].split(":")
    found: type = getattr(importlib.import_module(f"{__package__}.{module}"), cls)
    return found


def is_sized(name: str) -> bool:
    """The ``sized`` trait of a registered strategy (False for a user's function).

    >>> is_sized("length-grouped"), is_sized("bucketed"), is_sized("train.py:build")
    (True, False, False)
    """
    info = strategy_info(name)
    return info is not None and info.sized


def load_strategies() -> dict[str, type]:
    """Name -> strategy class for every registered strategy (imports their modules)."""
    return {name: strategy_class(name) for name in STRATEGY_CLASSES}


def get_strategy(name: str) -> Strategy:
    """The strategy for a ``--strategy`` value (a registered name or ``FILE:FUNC``)."""
    if name in STRATEGY_CLASSES:
        strategy: Strategy = strategy_class(name)()
        return strategy
    if ":" in name:
        from .custom import Custom

        return Custom(name)
    raise InputError(
        "--strategy", f"unknown strategy {name!r}", f"choose from {', '.join(STRATEGY_CLASSES)}"
    )
