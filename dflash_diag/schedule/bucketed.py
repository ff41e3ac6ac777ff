"""``bucketed``: the story's fix, a shuffle inside length buckets before packing.

The procedure, every epoch (lengths capped at ``max_seq_len``, edges ``e_0 < ... < e_K``
from ``--buckets``; without them six equal-count buckets of the manifest's capped lengths,
:func:`dflash_diag.schedule.edges.default_edges`; the story's were
0,770,1216,1728,2432,3296,8192)::

    bucket(L) = i such that e_i <= L < e_(i+1)   # the last bucket is closed above;
                                                 # L < e_0 goes to the first bucket and
                                                 # L >= e_K to the last
    batches = []
    for i in range(K):                           # buckets in ascending order
        members = [j for j in range(n) if bucket(lens[j]) == i]   # dataset order
        shuffle(members)                         # one shuffle per bucket, even if empty
        batches += greedy_pack(members)          # the packing rule of packing.Budget
    shuffle(batches)                             # interleave: one shuffle of the pooled list

``shuffle`` is the epoch's shuffler (``--rng``, ``--seeding``), drawn from in exactly that
order: K + 1 shuffles per epoch.  Batches therefore mix samples of one bucket in a new
composition every epoch; they stay length-homogeneous within a bucket's range.  A sample
over the budget forms a batch of its own (never dropped), as in sorted-greedy.
"""

from __future__ import annotations

import numpy as np

from ..data import ScheduleParams, registered_strategy
from .base import Batches, EpochPlan
from .edges import default_edges
from .packing import Budget, pack_in_order
from .rng import Shuffler


def bucket_of(lengths: np.ndarray, edges: tuple[int, ...]) -> np.ndarray:
    """Bucket number of each length: ``i`` with ``edges[i] <= L < edges[i+1]``, clipped to
    ``0..len(edges)-2`` (so the last bucket is closed above and takes anything longer).

    >>> bucket_of(np.array([0, 769, 770, 8192, 9000]), (0, 770, 1216, 8192)).tolist()
    [0, 0, 1, 2, 2]
    """
    idx = np.searchsorted(np.asarray(edges), lengths, side="right")
    idx -= 1
    return np.clip(idx, 0, len(edges) - 2, out=idx)


class Bucketed:
    """Shuffle within buckets, pack each bucket, shuffle the pooled batches (every epoch)."""

    name = "bucketed"
    sized = registered_strategy(name).sized

    def prepare(self, lengths: np.ndarray, params: ScheduleParams) -> tuple:
        edges = params.buckets or default_edges(lengths)
        n_buckets = len(edges) - 1
        buckets = bucket_of(lengths, edges)
        # members of each bucket in dataset order: a stable sort by bucket number, of
        # int16 numbers (a radix sort, one pass), the bounds from the counts
        small = buckets.astype(np.int16) if n_buckets < 1 << 15 else buckets
        del buckets
        order = np.argsort(small, kind="stable")
        if len(order) < 1 << 31:  # (held all run: int32 halves it)
            order = order.astype(np.int32)
        bounds = np.zeros(n_buckets + 1, dtype=np.int64)
        np.cumsum(np.bincount(small, minlength=n_buckets), out=bounds[1:])
        members = [order[bounds[i] : bounds[i + 1]] for i in range(n_buckets)]
        return lengths, members, Budget.from_params(params)

    def epoch(self, prepared: tuple, epoch: int, shuffler: Shuffler) -> EpochPlan:
        lengths, members, budget = prepared
        # each bucket's shuffled ids written in place: one array, not pieces joined
        ids = np.empty(sum(len(m) for m in members), dtype=np.int64)
        starts: list[np.ndarray] = []
        done = 0
        for m in members:
            shuffled = ids[done : done + len(m)]
            shuffled[:] = m[shuffler.permutation(len(m))]
            starts.append(pack_in_order(lengths[shuffled], budget) + done)
            done += len(m)
        pool = Batches.from_bounds(ids, np.concatenate(starts) if starts else np.zeros(0, np.int64))
        return EpochPlan(pool, shuffler.permutation(len(pool)))
