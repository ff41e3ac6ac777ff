"""``random``: a full shuffle every epoch, fixed batch size: the diversity reference.

Every epoch: ``perm = shuffle(range(n))`` with the epoch's shuffler, then consecutive
batches of ``--batch-size`` samples; the last, shorter batch is kept (``drop_last=False``,
as a DataLoader over a RandomSampler).  There is no token budget: a batch holds
``batch_size`` samples whatever their lengths, so "over budget" does not arise.
"""

from __future__ import annotations

import numpy as np

from ..records import ScheduleParams
from .base import Batches, EpochPlan, need_batch_size
from .rng import Shuffler


def fixed_size_batches(ids: np.ndarray, batch_size: int) -> Batches:
    """``ids`` cut into consecutive batches of ``batch_size`` (the last may be shorter)."""
    return Batches.from_bounds(ids, np.arange(0, len(ids), batch_size, dtype=np.int64))


class RandomBatches:
    """Shuffle all samples every epoch, then cut fixed-size batches."""

    name = "random"

    def prepare(self, lengths: np.ndarray, params: ScheduleParams) -> tuple[int, int]:
        return len(lengths), need_batch_size(params)

    def epoch(self, prepared: tuple[int, int], epoch: int, shuffler: Shuffler) -> EpochPlan:
        n, batch_size = prepared
        pool = fixed_size_batches(shuffler.permutation(n), batch_size)
        return EpochPlan(pool, np.arange(len(pool), dtype=np.int64))
