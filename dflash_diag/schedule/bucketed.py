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
        codes = bucket_codes(lengths, edges)
        n_buckets = len(edges) - 1
        sizes = bucket_sizes(codes, n_buckets) if packable(lengths, n_buckets) else None
        return lengths, codes, n_buckets, Budget.from_params(params), sizes

    def epoch(self, prepared: tuple, epoch: int, shuffler: Shuffler) -> EpochPlan:
        lengths, codes, n_buckets, budget, sizes = prepared
        # each bucket's shuffled ids written in place: one array, not pieces joined
        # (every sample is in one bucket)
        if sizes is not None:
            return _packed_epoch(lengths, codes, sizes, budget, shuffler)
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


#: A sample's index and length are packed as ``index << LENGTH_BITS | length`` when
#: every length is below ``2**(LENGTH_BITS - 1)`` (an int16) and every index below
#: ``2**(63 - LENGTH_BITS)``.
LENGTH_BITS = 16

#: Samples :func:`packed_members` and :func:`unpacked` handle at once (in cache).
PACK_PIECE = 1 << 16


def packable(lengths: np.ndarray, n_buckets: int) -> bool:
    """Whether :func:`_packed_epoch` applies: lengths that fit an int16 beside their
    index, up to :data:`PICKED_BUCKETS` buckets."""
    return (
        0 < len(lengths) < 1 << (63 - LENGTH_BITS)
        and n_buckets <= PICKED_BUCKETS
        and lengths.dtype.kind in "iu"
        and 0 <= int(lengths.min())
        and int(lengths.max()) < 1 << (LENGTH_BITS - 1)
    )


def bucket_sizes(codes: np.ndarray, n_buckets: int) -> list[int]:
    """How many samples each bucket holds (counted a piece at a time: no int64 copy of
    the codes)."""
    total = np.zeros(n_buckets, dtype=np.int64)
    for lo in range(0, len(codes), PACK_PIECE):
        total += np.bincount(codes[lo : lo + PACK_PIECE], minlength=n_buckets)
    return [int(x) for x in total]


def packed_members(lengths: np.ndarray, codes: np.ndarray, sizes: list[int]) -> np.ndarray:
    """Every bucket's members in dataset order, bucket after bucket, each as ``index <<
    LENGTH_BITS | length`` (int64): a shuffle of these moves each sample's length with
    its index (no gather of the lengths after it).  Made a piece of samples at a time:
    the piece's values ordered by bucket (a stable radix sort of its codes), each
    bucket's run copied to that bucket's place.

    >>> packed_members(np.array([5, 7, 9]), np.array([1, 0, 1], dtype=np.int8), [1, 2]).tolist()
    [65543, 5, 131081]
    """
    out = np.empty(len(codes), dtype=np.int64)
    fill = [0]
    for size in sizes[:-1]:
        fill.append(fill[-1] + size)
    for lo in range(0, len(codes), PACK_PIECE):
        hi = min(len(codes), lo + PACK_PIECE)
        piece = codes[lo:hi]
        value = np.arange(lo, hi, dtype=np.int64)
        value <<= LENGTH_BITS
        value |= lengths[lo:hi]
        value = value.take(np.argsort(piece, kind="stable"))
        at = 0
        for i, k in enumerate(np.bincount(piece, minlength=len(sizes)).tolist()):
            out[fill[i] : fill[i] + k] = value[at : at + k]
            fill[i] += k
            at += k
    return out


def unpacked(values: np.ndarray) -> np.ndarray:
    """The lengths of :func:`packed_members` values (int16); ``values`` become the
    indices, in place."""
    ls = np.empty(len(values), dtype=np.int16)
    low = np.empty(min(PACK_PIECE, len(values)), dtype=np.int64)
    for lo in range(0, len(values), PACK_PIECE):
        part = values[lo : lo + PACK_PIECE]
        k = len(part)
        np.bitwise_and(part, (1 << LENGTH_BITS) - 1, out=low[:k])
        ls[lo : lo + k] = low[:k]
        part >>= LENGTH_BITS
    return ls


def _packed_epoch(
    lengths: np.ndarray, codes: np.ndarray, sizes: list[int], budget: Budget, shuffler: Shuffler
) -> EpochPlan:
    """:meth:`Bucketed.epoch` over :func:`packed_members`: the same shuffles, in the same
    order and of the same sizes, move the same samples."""
    ids = packed_members(lengths, codes, sizes)
    starts: list[np.ndarray] = []
    done = 0
    for size in sizes:
        shuffled = ids[done : done + size]
        shuffle_in_place(shuffler, shuffled)
        starts.append(pack_in_order(unpacked(shuffled), budget) + done)
        done += size
    pool = Batches.from_bounds(ids, np.concatenate(starts))
    return EpochPlan(pool, shuffler.permutation(len(pool)))
