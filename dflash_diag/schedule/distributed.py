"""``distributed``: torch's ``DistributedSampler``, then a DataLoader's batches on each rank.

Every epoch, with ``n`` samples and ``W = --world-size`` ranks (``torch.utils.data
.distributed.DistributedSampler(shuffle=True)``)::

    perm = shuffle(range(n))         # randperm on a generator seeded seed + epoch:
                                     # --rng torch --seeding per-epoch
    if sampler_drop_last:            # cut to a multiple of W
        perm = perm[: n // W * W]
    else:                            # pad to a multiple of W by repeating the head
        total = ceil(n / W) * W
        perm = (perm * ceil(total / n))[:total]
    rank_r = perm[r::W]              # every rank holds total / W samples

and each rank's DataLoader cuts its list into batches of ``--batch-size`` (the last may be
short, or dropped with ``--drop-last``).  So that the replay's ``strided`` sharding gives
rank ``r`` its own batches, the epoch's order interleaves them: position ``j * W + r`` is
rank ``r``'s ``j``-th batch (with ``--shard contiguous`` the ranks would not get their own
batches).  Padded samples appear twice in an epoch, as in the run, and are counted
(negative) in ``Replay.dropped["distributed_padding_samples"]``.
"""

from __future__ import annotations

import numpy as np

from ..data import ScheduleParams, registered_strategy
from .base import Batches, EpochPlan, need_batch_size
from .rng import Shuffler


def distributed_indices(perm: np.ndarray, world_size: int, drop_last: bool) -> np.ndarray:
    """Each rank's indices, one row per rank: ``DistributedSampler``'s padding or cut,
    then ``[r::W]``.

    >>> distributed_indices(np.array([4, 1, 3, 0, 2]), 2, False).tolist()
    [[4, 3, 2], [1, 0, 4]]
    >>> distributed_indices(np.array([4, 1, 3, 0, 2]), 2, True).tolist()
    [[4, 3], [1, 0]]
    """
    n = len(perm)
    if drop_last:
        total = n // world_size * world_size
        ids = perm[:total]
    else:
        total = -(-n // world_size) * world_size
        ids = np.resize(perm, total) if n else perm[:0]  # resize repeats the head
    return np.asarray(ids, dtype=np.int64).reshape(-1, world_size).T.copy()


def interleave_rank_batches(ranks: np.ndarray, batch_size: int, drop_last: bool) -> Batches:
    """Each row of ``ranks`` cut into batches; batch ``j`` of rank ``r`` at ``j * W + r``.

    >>> interleave_rank_batches(np.array([[0, 1, 2], [3, 4, 5]]), 2, False).tolist()
    [[0, 1], [3, 4], [2], [5]]
    """
    w, per = ranks.shape
    full = per // batch_size * batch_size
    head = ranks[:, :full].reshape(w, full // batch_size, batch_size).transpose(1, 0, 2)
    sizes = [batch_size] * (w * (full // batch_size))
    ids = [head.reshape(-1)]
    if full < per and not drop_last:
        ids.append(ranks[:, full:].reshape(-1))
        sizes += [per - full] * w
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(np.asarray(sizes, dtype=np.int64), out=offsets[1:])
    return Batches(np.concatenate(ids).astype(np.int64, copy=False), offsets)


class Distributed:
    """``DistributedSampler`` on every rank, each rank's samples cut into batches."""

    name = "distributed"
    sized = registered_strategy(name).sized

    def prepare(self, lengths: np.ndarray, params: ScheduleParams) -> tuple:
        batch_size = need_batch_size(params)
        return (
            len(lengths),
            batch_size,
            params.world_size,
            params.drop_last,
            params.sampler_drop_last,
        )

    def epoch(self, prepared: tuple, epoch: int, shuffler: Shuffler) -> EpochPlan:
        n, batch_size, world_size, drop_last, sampler_drop_last = prepared
        ranks = distributed_indices(shuffler.permutation(n), world_size, sampler_drop_last)
        pool = interleave_rank_batches(ranks, batch_size, drop_last)
        dropped = {}
        if sampler_drop_last and n % world_size:
            dropped["sampler_drop_last_samples"] = n % world_size
        elif ranks.size > n:
            dropped["distributed_padding_samples"] = n - ranks.size  # added: negative
        left = ranks.size - len(pool.ids)
        if left:
            dropped["drop_last_samples"] = left
        return EpochPlan(pool, np.arange(len(pool), dtype=np.int64), dropped)
