"""A membership reduced to its usable entries, each point replaced by its z's rank.

Every per-sample statistic of :mod:`.evidence` is a reduction over the entries grouped by
sample (a count, a minimum, a sum), done with ``np.bincount`` and ``np.minimum.at`` in
one pass each, never a sort of the entries: at 60M entries one ``argsort`` costs more
than all the reductions together.  Replacing each point by the rank of its z among the
usable points makes "the lowest z of a sample" an integer minimum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
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
    """

    sample: np.ndarray
    rank: np.ndarray
    z_sorted: np.ndarray
    point_of_rank: np.ndarray
    rank_of_point: np.ndarray
    kept: np.ndarray | None
    n_samples: int

    @property
    def n_usable(self) -> int:
        """Usable points (finite z)."""
        return int(self.z_sorted.size)

    def counts(self) -> np.ndarray:
        """Appearances per sample (distinct usable points), int64 ``[n_samples]``."""
        return np.bincount(self.sample, minlength=self.n_samples).astype(np.int64)

    def counts_and_rank_sums(self) -> tuple[np.ndarray, np.ndarray]:
        """Appearances and the sum of the ranks per sample, int64 ``[n_samples]`` each.

        One pass: ``np.bincount`` weighted by ``2**32 + rank`` sums integers, exact in
        float64 in any order below ``2**53``; ``k = sum // 2**32`` and the rest is the
        rank sum while that stays below ``2**32``.  Both hold when the ``k`` so read
        has ``max k < 2**20`` and ``max k * n_usable < 2**32`` (a larger true ``k`` or
        rank sum would make the ``k`` read larger); otherwise two passes.
        """
        shift = float(2**32)
        both = np.bincount(self.sample, weights=self.rank + shift, minlength=self.n_samples)
        k = (both // shift).astype(np.int64)
        top = int(k.max(initial=0))
        if top < 2**20 and top * max(self.n_usable, 1) < 2**32:
            return k, (both - k * shift).astype(np.int64)
        ranks = np.bincount(self.sample, weights=self.rank, minlength=self.n_samples)
        return self.counts(), ranks.astype(np.int64)

    def lowest(self, allow_low: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """The lowest and the ``(allow_low + 1)``-th lowest rank of each sample.

        int64 ``[n_samples]`` each; ``n_usable`` for a sample with fewer appearances.
        Each further order costs one pass: the entries at their sample's current lowest
        rank are dropped (a sample's ranks are distinct) and the minimum taken again.
        (``ufunc.at`` is fast only when the output has the values' dtype.)
        """
        n = self.n_usable
        lowest = np.full(self.n_samples, n, dtype=self.rank.dtype)
        np.minimum.at(lowest, self.sample, self.rank)
        current, s, r = lowest, self.sample, self.rank
        for _ in range(allow_low):
            rest = r != current[s]
            s, r = s[rest], r[rest]
            current = np.full(self.n_samples, n, dtype=self.rank.dtype)
            np.minimum.at(current, s, r)
        return lowest.astype(np.int64), current.astype(np.int64)


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
    if usable.size < n_points:
        kept = rank >= 0
        rank, sample = rank[kept], sample[kept]
    return Appearances(
        sample, rank, z[usable][order], usable[order], rank_of_point, kept, membership.n_samples
    )


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
