"""``sorted-greedy``: the DFlash pipeline's ``build_batches``, batches fixed for the run.

The procedure, exactly (``lens`` already capped at ``max_seq_len``)::

    indexed = sorted(enumerate(lens), key=lambda x: x[1])   # stable: ties keep index order
    batches, cur, cur_max = [], [], 0
    for i, L in indexed:
        if cur and (len(cur) + 1) * max(cur_max, L) > token_budget:   # padded mode
            batches.append(cur); cur, cur_max = [], 0
        cur.append(i); cur_max = max(cur_max, L)
    batches.append(cur)
    # every epoch, with the run's shuffler (random.seed(seed) once, by default):
    order = list(range(len(batches))); random.shuffle(order)

``tokens`` mode closes on ``sum(cur) + L > token_budget`` instead, and
``--max-batch-size`` closes on ``len(cur) + 1 > max_batch_size`` (see
:mod:`dflash_diag.schedule.packing`).  A sample over the budget is never dropped: it forms
a batch of its own, as the loop above does.  Each batch is stored in sorted order.

The same scheme with a frame budget and a torch shuffle is F5-TTS's DynamicBatchSampler.
"""

from __future__ import annotations

import numpy as np

from ..arrays import length_counts
from ..data import ScheduleParams, registered_strategy
from .base import Batches, EpochPlan
from .packing import Budget, pack_runs, pack_sorted, stable_argsort
from .rng import Shuffler


def build_sorted_batches(lengths: np.ndarray, budget: Budget) -> Batches:
    """Sort (stable) then pack greedily: the batches of ``build_batches``.

    >>> build_sorted_batches(np.array([4, 1, 3, 1, 9]), Budget(6)).tolist()
    [[1, 3], [2], [0], [4]]
    """
    order = stable_argsort(lengths)
    counts = length_counts(lengths)
    if counts is None:
        starts = pack_sorted(np.asarray(lengths)[order], budget)
    else:
        # token lengths: the runs of the sorted lengths are the counts per length, so
        # the same starts without gathering the sorted lengths (pack_runs = pack_sorted)
        values = np.flatnonzero(counts)
        starts = pack_runs(values, counts[values], budget)
    return Batches.from_bounds(order, starts)


class SortedGreedy:
    """Batches built once by :func:`build_sorted_batches`; each epoch only their order is
    shuffled, with one ``permutation(n_batches)`` draw from the epoch's shuffler."""

    name = "sorted-greedy"
    sized = registered_strategy(name).sized

    def prepare(self, lengths: np.ndarray, params: ScheduleParams) -> Batches:
        return build_sorted_batches(lengths, Budget.from_params(params))

    def epoch(self, prepared: Batches, epoch: int, shuffler: Shuffler) -> EpochPlan:
        return EpochPlan(prepared, shuffler.permutation(len(prepared)))

    def pool_size(self, lengths: np.ndarray, params: ScheduleParams) -> int:
        """``len(self.prepare(lengths, params))``, from the count of each length (the
        runs of the sorted lengths) when the lengths are token counts: no sort, no
        batches built."""
        counts = length_counts(lengths)
        if counts is None:
            return len(self.prepare(lengths, params))
        values = np.flatnonzero(counts)
        return len(pack_runs(values, counts[values], Budget.from_params(params)))

    def pool(self, prepared: Batches) -> Batches:
        """The run's batches, every one of which each epoch visits."""
        return prepared
