"""``length-grouped``: the Hugging Face Trainer's ``group_by_length``.

``get_length_grouped_indices`` (transformers ``trainer_pt_utils.py``), every epoch::

    B = batch_size * grad_accum            # the sampler's batch size in the Trainer
    mult = mega_batch_mult or min(n // (4 * B), 50) or 1
    perm = shuffle(range(n))               # torch.randperm in HF: use --rng torch
    megabatches = [perm[i:i + mult * B] for i in range(0, n, mult * B)]
    megabatches = [sorted(mb, key=lambda i: lens[i], reverse=True) for mb in megabatches]
    k = argmax(lens[mb[0]] for mb in megabatches)           # first maximum
    megabatches[0][0], megabatches[k][0] = megabatches[k][0], megabatches[0][0]
    order = concatenate(megabatches)       # then cut into --batch-size micro-batches

Python's ``sorted(reverse=True)`` keeps ties in permutation order, as here.  The last
micro-batch may be short (``dataloader_drop_last`` is False by default; ``--drop-last``
drops it).  There is no token budget.  The Trainer's ``LengthGroupedSampler`` (transformers
5.24, no generator) draws its ``randperm`` from the global torch generator after the
DataLoader's base-seed draw: ``--rng torch --seeding global`` (or ``--preset hf-trainer``),
exact for every epoch when nothing else draws from that generator during training, else
for epoch 0 only (``dropout``).  ``DistributedLengthGroupedSampler`` seeds ``seed + epoch``:
``--rng torch --seeding per-epoch``.
"""

from __future__ import annotations

import numpy as np

from ..data import ScheduleParams, registered_strategy
from .base import EpochPlan, need_batch_size
from .random_batches import fixed_size_batches
from .rng import Shuffler


def length_grouped_order(lengths: np.ndarray, perm: np.ndarray, megabatch_size: int) -> np.ndarray:
    """The sample order of ``get_length_grouped_indices`` for a given permutation.

    >>> length_grouped_order(np.array([1, 5, 3, 9]), np.array([0, 1, 2, 3]), 2).tolist()
    [3, 0, 1, 2]
    """
    n = len(perm)
    if n == 0:
        return perm.astype(np.int64)
    mb_of = np.arange(n) // megabatch_size
    # sort by (megabatch, -length), stable: ties keep permutation order
    key = np.lexsort((-lengths[perm], mb_of))
    order = perm[key].astype(np.int64)
    heads = np.arange(0, n, megabatch_size)
    k = int(np.argmax(lengths[order[heads]]))
    order[heads[0]], order[heads[k]] = order[heads[k]], order[heads[0]]
    return order


class LengthGrouped:
    """Random megabatches sorted by length, longest first, then fixed-size batches."""

    name = "length-grouped"
    sized = registered_strategy(name).sized

    def prepare(self, lengths: np.ndarray, params: ScheduleParams) -> tuple:
        batch_size = need_batch_size(params)
        sampler_batch = batch_size * params.grad_accum
        mult = params.mega_batch_mult
        if mult is None:
            mult = min(len(lengths) // (sampler_batch * 4), 50) or 1
        return lengths, batch_size, mult * sampler_batch, params.drop_last

    def epoch(self, prepared: tuple, epoch: int, shuffler: Shuffler) -> EpochPlan:
        lengths, batch_size, megabatch_size, drop_last = prepared
        order = length_grouped_order(lengths, shuffler.permutation(len(lengths)), megabatch_size)
        pool = fixed_size_batches(order, batch_size, drop_last)
        left = len(order) - len(pool.ids)
        dropped = {"drop_last_samples": left} if left else {}
        return EpochPlan(pool, np.arange(len(pool), dtype=np.int64), dropped)
