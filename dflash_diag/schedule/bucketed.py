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

from collections.abc import Iterator

import numpy as np

from ..data import ScheduleParams, registered_strategy
from .base import Batches, EpochPlan
from .edges import default_edges
from .packing import Budget, pack_in_order
from .rng import Shuffler, shuffle_in_place


def bucket_of(lengths: np.ndarray, edges: tuple[int, ...]) -> np.ndarray:
    """Bucket number of each length: ``i`` with ``edges[i] <= L < edges[i+1]``, clipped to
    ``0..len(edges)-2`` (so the last bucket is closed above and takes anything longer).

    >>> bucket_of(np.array([0, 769, 770, 8192, 9000]), (0, 770, 1216, 8192)).tolist()
    [0, 0, 1, 2, 2]
    """
    idx = np.searchsorted(np.asarray(edges), lengths, side="right")
    idx -= 1
    return np.clip(idx, 0, len(edges) - 2, out=idx)


def bucket_codes(lengths: np.ndarray, edges: tuple[int, ...]) -> np.ndarray:
    """:func:`bucket_of` in the smallest integer type that holds the bucket numbers
    (int8 below 128 buckets), found a chunk of lengths at a time (no int64 number a
    sample): one byte a sample held by the prepared strategy.  Token lengths (whole
    numbers below :data:`~dflash_diag.arrays.COUNTED_BELOW`) read theirs from a table
    of every length's bucket (a gather, no search a sample).

    >>> bucket_codes(np.array([900, 5, 800, 0]), (0, 770, 8192)).tolist()
    [1, 0, 1, 0]
    """
    from ..arrays import chunks

    n_buckets = len(edges) - 1
    dtype = np.int8 if n_buckets < 1 << 7 else np.int16 if n_buckets < 1 << 15 else np.int64
    lengths = np.asarray(lengths)
    if lengths.size and lengths.dtype.kind in "iu" and table_fits(lengths):
        return bucket_of(np.arange(int(lengths.max()) + 1), edges).astype(dtype)[lengths]
    codes = np.empty(len(lengths), dtype=dtype)
    for part in chunks(len(lengths)):
        codes[part] = bucket_of(lengths[part], edges)
    return codes


def table_fits(lengths: np.ndarray) -> bool:
    """Whether whole-number ``lengths`` are all in ``[0, COUNTED_BELOW)``: a table with
    an entry per length is then small."""
    from ..arrays import COUNTED_BELOW

    return 0 <= int(lengths.min()) and int(lengths.max()) < COUNTED_BELOW


def bucket_members(codes: np.ndarray, n_buckets: int) -> Iterator[np.ndarray]:
    """The members of each bucket in turn (``codes``: :func:`bucket_codes`), in dataset
    order: int64 indices, picked a bucket at a time in a pass of their own (up to
    :data:`PICKED_BUCKETS` buckets), so only one bucket's are made at once.

    >>> [m.tolist() for m in bucket_members(np.array([1, 0, 1, 0], dtype=np.int8), 2)]
    [[1, 3], [0, 2]]
    """
    if n_buckets <= PICKED_BUCKETS:
        for i in range(n_buckets):
            yield np.flatnonzero(codes == i)
        return
    # many buckets: a pass each would cost more than one stable sort of the numbers (a
    # radix sort of small integers), the bounds from the counts
    order = np.argsort(codes, kind="stable")
    bounds = np.zeros(n_buckets + 1, dtype=np.int64)
    np.cumsum(np.bincount(codes, minlength=n_buckets), out=bounds[1:])
    for i in range(n_buckets):
        yield order[bounds[i] : bounds[i + 1]]


#: Up to this many buckets, :func:`bucket_members` picks each bucket's members in a pass
#: of its own; more are sorted.
PICKED_BUCKETS = 16


class Bucketed:
    """Shuffle within buckets, pack each bucket, shuffle the pooled batches (every epoch)."""

    name = "bucketed"
    sized = registered_strategy(name).sized

    def prepare(self, lengths: np.ndarray, params: ScheduleParams) -> tuple:
        edges = params.buckets or default_edges(lengths)
        return lengths, bucket_codes(lengths, edges), len(edges) - 1, Budget.from_params(params)

    def epoch(self, prepared: tuple, epoch: int, shuffler: Shuffler) -> EpochPlan:
        lengths, codes, n_buckets, budget = prepared
        # each bucket's shuffled ids written in place: one array, not pieces joined
        # (every sample is in one bucket)
        ids = np.empty(len(codes), dtype=np.int64)
        starts: list[np.ndarray] = []
        done = 0
        for m in bucket_members(codes, n_buckets):
            shuffled = ids[done : done + len(m)]
            shuffled[:] = m
            del m
            shuffle_in_place(shuffler, shuffled)
            starts.append(pack_in_order(lengths[shuffled], budget) + done)
            done += len(shuffled)
        pool = Batches.from_bounds(ids, np.concatenate(starts) if starts else np.zeros(0, np.int64))
        return EpochPlan(pool, shuffler.permutation(len(pool)))
