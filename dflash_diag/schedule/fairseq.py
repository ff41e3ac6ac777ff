"""``fairseq``: fairseq's ``batch_by_size`` schedule, batches built once.

What ``fairseq_task.get_batch_iterator`` and ``EpochBatchIterator`` do for a
``LanguagePairDataset`` with one size array (``facebookresearch/fairseq``,
``fairseq/data/data_utils.py``, ``data_utils_fast.pyx``, ``iterators.py``)::

    with numpy_seed(seed):                              # np.random.seed(seed)
        perm = np.random.permutation(n)
        indices = perm[np.argsort(lens[perm], kind="mergesort")]   # random tie order
    batches = batch_by_size(indices, lens, max_tokens=token_budget,
                            max_sentences=max_batch_size,
                            required_batch_size_multiple=m)
    for epoch in 1, 2, ...:                             # fairseq counts epochs from 1
        with numpy_seed(seed + epoch):
            np.random.shuffle(batches)                  # only the batch order changes

``batch_by_size`` (the reference ``batch_by_size_baseline`` in fairseq's tests): grow
``[start, end)`` while ``count * max(lens) <= max_tokens`` and ``count <= max_sentences``
(padded tokens, always: ``--budget-mode`` is not used); on overflow the last sample is
taken back, and a batch of more than ``m`` samples is cut down to a multiple of ``m``,
the rest carrying into the next batch.  Quirk kept: when ``m > 1`` and the final batch's
size is not a multiple of ``m`` that batch is dropped (``dropped["batch_size_multiple_tail
_samples"]``).  A sample longer than ``max_tokens`` fails fairseq's assert; here it is
left out before batching, as ``--skip-invalid-size-inputs-valid-test`` would
(``dropped["samples_over_budget"]``).  ``--rng`` and ``--seeding`` are not used: fairseq's
convention is fixed (legacy ``RandomState``, ``seed + epoch`` for the shuffle).  Shard
``r`` of ``W`` takes ``batches[r::W]`` and ``update_freq`` groups consecutive ones: that
is ``--shard strided`` with ``--grad-accum``; fairseq pads the last step with empty
batches where the replay drops it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..data import ScheduleParams, registered_strategy
from .base import Batches, EpochPlan
from .rng import LegacyNumpyShuffler, Shuffler


def batch_by_size(
    lengths_in_order: np.ndarray,
    max_tokens: int,
    max_sentences: int | None = None,
    multiple: int = 1,
) -> np.ndarray:
    """Batch start positions of fairseq's ``batch_by_size`` over lengths in order (every
    length must be at most ``max_tokens``).  The final-batch quirk is applied by the
    caller.

    >>> batch_by_size(np.array([1, 1, 1, 2, 2, 3, 3]), max_tokens=6, multiple=2).tolist()
    [0, 2, 4, 6]
    """
    ls = np.asarray(lengths_in_order, dtype=np.int64).tolist()
    n = len(ls)
    limit = max_sentences if max_sentences else n + 1
    starts: list[int] = []
    start = 0
    while start < n:
        starts.append(start)
        longest = 0
        end = start
        count = 0
        # extend while [start, end] still fits; stop at the first overflow
        while end < n:
            nxt = ls[end]
            longest_next = longest if longest > nxt else nxt
            if (count + 1) * longest_next > max_tokens or count + 1 > limit:
                break
            longest = longest_next
            count += 1
            end += 1
        if count > multiple:
            count -= count % multiple
        start += count
    return np.array(starts, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class _Prepared:
    pool: Batches
    seed: int
    dropped: dict[str, int]


class Fairseq:
    """Batches from fairseq's ordered indices and ``batch_by_size``, built once; each epoch
    ``np.random.shuffle`` of the batch list under ``numpy_seed(seed + epoch)``."""

    name = "fairseq"
    sized = registered_strategy(name).sized
    #: the batches themselves depend on the seed (the tie order of the sort)
    prepare_uses_seed = registered_strategy(name).prepare_uses_seed

    def prepare(self, lengths: np.ndarray, params: ScheduleParams) -> _Prepared:
        perm = LegacyNumpyShuffler(params.seed).permutation(len(lengths))
        indices = perm[np.argsort(lengths[perm], kind="mergesort")]
        fits = lengths[indices] <= params.token_budget
        over = int((~fits).sum())
        indices = indices[fits]
        m = params.required_batch_size_multiple
        starts = batch_by_size(lengths[indices], params.token_budget, params.max_batch_size, m)
        pool = Batches.from_bounds(indices, starts)
        tail = 0
        if m > 1 and len(pool) and pool.sizes()[-1] % m != 0:
            tail = int(pool.sizes()[-1])
            pool = Batches(pool.ids[: pool.offsets[-2]], pool.offsets[:-1])
        dropped = {"samples_over_budget": over, "batch_size_multiple_tail_samples": tail}
        return _Prepared(pool, params.seed, dropped)

    def epoch(self, prepared: _Prepared, epoch: int, shuffler: Shuffler) -> EpochPlan:
        # fairseq's own convention, whatever --rng says: its epochs count from 1
        order = LegacyNumpyShuffler(prepared.seed + epoch + 1).permutation(len(prepared.pool))
        return EpochPlan(prepared.pool, order, dict(prepared.dropped))

    def pool(self, prepared: _Prepared) -> Batches:
        """The run's batches, every one of which each epoch visits."""
        return prepared.pool
