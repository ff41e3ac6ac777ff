"""A membership reduced to its usable entries, each point replaced by its z's rank.

Every per-sample statistic of :mod:`.evidence` is a reduction over the entries grouped by
sample (a count, a minimum, a sum), never a sort of the entries: at 60M entries one
``argsort`` costs more than all the reductions together.  When the entries fall into a
few windows in which no sample repeats (a shuffling sampler's epochs) they come from a
dense table of each sample's entries (:mod:`.layout`), in column passes; otherwise from
``np.add.at`` and ``np.minimum.at``, one pass over the entries each.  Replacing each
point by the rank of its z among the usable points makes "the lowest z of a sample" an
integer minimum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arrays import chunks
from ..errors import InputError
from .layout import Layout, dense_layout
from .membership import Membership


@dataclass(frozen=True, eq=False)
class Appearances:
    """The usable entries of a membership, in its order (grouped by point).

    :param sample: int ``[n_kept]``, the sample of each kept entry.
    :param rank: int ``[n_kept]``, the rank of its point's z among the usable points
        (0 = lowest; distinct points have distinct ranks, ties broken by point index).
    :param z_sorted: float64 ``[n_usable]``, the usable z's in ascending order.
    :param point_of_rank: int64 ``[n_usable]``, the point of each rank.
    :param rank_of_point: int ``[n_points]``, the rank of each point (-1: unusable).
    :param kept: bool ``[n_entries]`` mask of the kept entries, None when all are.
    :param n_samples: samples in the dataset.
    :param layout: each sample's entries in a dense table, with its counts, rank sums
        and two lowest ranks (:mod:`.layout`), when the entries fall into a few
        duplicate-free windows; None: the passes over the entries compute them.
    """

    sample: np.ndarray
    rank: np.ndarray
    z_sorted: np.ndarray
    point_of_rank: np.ndarray
    rank_of_point: np.ndarray
    kept: np.ndarray | None
    n_samples: int
    layout: Layout | None = None

    @property
    def n_usable(self) -> int:
        """Usable points (finite z)."""
        return int(self.z_sorted.size)

    def counts(self) -> np.ndarray:
        """Appearances per sample (distinct usable points), int64 ``[n_samples]``.

        ``np.add.at`` a chunk of entries at a time: ``np.bincount`` would first copy
        int32 samples into an int64 array as long as the entries (480 MB at 60M).  With
        a layout, its count (a copy: the caller's to keep)."""
        if self.layout is not None:
            return self.layout.k.copy()
        if self.sample.dtype == np.intp:
            return np.bincount(self.sample, minlength=self.n_samples).astype(np.int64)
        k = np.zeros(self.n_samples, dtype=np.int64)
        for part in chunks(self.sample.size):
            np.add.at(k, self.sample[part], 1)
        return k

    def counts_and_rank_sums(self, k: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Appearances and the sum of the ranks per sample, int64 ``[n_samples]`` each:
        a ``np.bincount`` of the samples and integer sums by ``np.add.at`` a chunk of
        entries at a time (exact, and no float array as long as the entries).

        :param k: the appearances, if already counted; when no sample has two, each
            sum is the sample's one rank, put in place (no ``np.add.at``).  With a
            layout, its sums (read-only).
        """
        if self.layout is not None:
            return (self.layout.k.copy() if k is None else k), self.layout.rank_sum
        k = self.counts() if k is None else k
        sums = np.zeros(self.n_samples, dtype=np.int64)
        if seen_at_most_once(k):
            sums[self.sample] = self.rank
            return k, sums
        for part in chunks(self.sample.size):
            np.add.at(sums, self.sample[part], self.rank[part].astype(np.int64))
        return k, sums

    def lowest(
        self, allow_low: int = 0, k: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The lowest and the ``(allow_low + 1)``-th lowest rank of each sample.

        int64 ``[n_samples]`` each; ``n_usable`` for a sample with fewer appearances.
        Each further order costs one pass: the entries at their sample's current lowest
        rank are left out (a sample's ranks are distinct) and the minimum taken again, a
        chunk of entries at a time.  (``ufunc.at`` is fast only when the output has the
        values' dtype.)

        :param k: the appearances (:meth:`counts`), if known: when no sample has two
            (a sorted-greedy epoch), the lowest rank is each sample's one rank, put in
            place, and every higher order is ``n_usable`` (no pass; a read-only view of
            one value).

        With a layout and ``allow_low <= 1``, its two lowest ranks (read-only).
        """
        n = self.n_usable
        if self.layout is not None and allow_low <= 1:
            # (read-only: the layout's own arrays)
            nth = self.layout.second if allow_low else self.layout.lowest.copy()
            return self.layout.lowest, nth
        if k is not None and seen_at_most_once(k):
            lowest = np.full(self.n_samples, n, dtype=np.int64)
            lowest[self.sample] = self.rank
            if not allow_low:
                return lowest, lowest.copy()
            return lowest, np.broadcast_to(np.array(n, dtype=np.int64), (self.n_samples,))
        lowest = np.full(self.n_samples, n, dtype=self.rank.dtype)
        np.minimum.at(lowest, self.sample, self.rank)
        current = lowest
        for _ in range(allow_low):
            below, current = current, np.full(self.n_samples, n, dtype=self.rank.dtype)
            for part in chunks(self.sample.size):
                s, r = self.sample[part], self.rank[part]
                rest = r > below[s]
                np.minimum.at(current, s[rest], r[rest])
        return lowest.astype(np.int64), current.astype(np.int64)


def seen_at_most_once(k: np.ndarray) -> bool:
    """Whether no sample has two appearances (``k`` per sample)."""
    return int(k.max(initial=0)) <= 1


def appearances(membership: Membership, z: np.ndarray | None = None) -> Appearances:
    """Reduce ``membership`` to the entries of usable points (``z`` finite).

    :param z: float ``[n_points]``; None: every point usable, ranked by its index.
    """
    n_points = membership.n_points
    if z is None:
        z = np.arange(n_points, dtype=np.float64)
    z = point_array(z, n_points, "z")
    usable = np.flatnonzero(np.isfinite(z))
    order = np.argsort(z[usable], kind="stable")
    small = np.int32 if usable.size < 2**31 else np.int64
    rank_of_point = np.full(n_points, -1, dtype=small)
    rank_of_point[usable[order]] = np.arange(usable.size, dtype=small)
    rank = np.repeat(rank_of_point, membership.counts())
    kept: np.ndarray | None = None
    sample = membership.samples
    layout = dense_layout(sample, rank, membership.n_samples, usable.size, usable.size < n_points)
    if usable.size < n_points:
        kept = rank >= 0
        rank, sample = rank[kept], sample[kept]
    z_sorted, n = z[usable][order], membership.n_samples
    return Appearances(sample, rank, z_sorted, usable[order], rank_of_point, kept, n, layout)


def point_array(values: object, n_points: int, name: str) -> np.ndarray:
    """``values`` as float64 ``[n_points]`` (NaN allowed; +-inf read as NaN: unusable)."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise InputError(name, f"is not numeric ({err})", "give one float per point") from None
    if arr.shape != (n_points,):
        raise InputError(
            name, f"has shape {arr.shape}, the membership has {n_points} points", "align it"
        )
    return np.where(np.isinf(arr), np.nan, arr)
