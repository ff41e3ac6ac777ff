"""Who always travels together: :func:`separable_groups`.

Samples seen in exactly the same set of points have the same evidence, whatever the
metric does: nothing in the log tells them apart, so the group, not a member, is the unit
of a verdict.  Under sorted-greedy batching with a shuffled batch order every batch is a
group; under a shuffling sampler the groups are the batches of samples seen once.

The set of points of each sample is hashed in one pass: ``h = sum_p w_p`` over its
points, ``w_p`` uniform on [1, 2) from a fixed seed, summed by ``np.bincount`` in the
entries' order (by point), so two samples with the same set add the same numbers in the
same order and get bit-identical sums.  The key ``(h, appearances, lowest point,
highest point)`` then names the set; two different sets share it with probability about
``k * 2**-52`` per pair of samples agreeing on the other three.
"""

from __future__ import annotations

import numpy as np

from .appearances import Appearances, appearances
from .membership import Membership

_SEED = 20261201


def separable_groups(
    membership: Membership, z: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Group the samples by their set of (usable) points.

    :param z: optional float ``[n_points]``: only points with a finite z count (a
        difference only in unusable points separates nothing).
    :returns: ``(group, size)``: int64 ``[n_samples]``, the group of each sample (-1: in no
        point), numbered by first member; int64 ``[n_groups]``, members per group.

    >>> m = Membership.from_entries([0, 0, 1, 1, 2, 2], [0, 1, 0, 1, 2, 0], n_samples=4)
    >>> g, size = separable_groups(m)
    >>> g.tolist(), size.tolist()
    ([0, 1, 2, -1], [1, 1, 1])
    >>> g, size = separable_groups(Membership.from_entries([0, 0, 1, 1], [0, 1, 0, 1]))
    >>> g.tolist(), size.tolist()
    ([0, 0], [2])
    """
    app = appearances(membership, z)
    lowest, _ = app.lowest()
    return group_of(app, app.counts(), lowest, app.highest())


def group_of(
    app: Appearances, k: np.ndarray, lowest: np.ndarray, highest: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`separable_groups` from reductions already made (see the module docstring)."""
    weights = np.random.default_rng(_SEED).uniform(1.0, 2.0, max(app.n_usable, 1))
    h = np.bincount(app.sample, weights=weights[app.rank], minlength=app.n_samples)
    key = h.view(np.uint64).copy()
    for part, mult in ((k, 0x9E3779B97F4A7C15), (lowest, 0xBF58476D1CE4E5B9)):
        key = key * np.uint64(0x94D049BB133111EB) + part.astype(np.uint64) * np.uint64(mult)
    key = key * np.uint64(0x94D049BB133111EB) + highest.astype(np.uint64)
    seen = np.flatnonzero(k > 0)
    group = np.full(app.n_samples, -1, dtype=np.int64)
    group[seen] = number_by_first(key[seen])
    size = np.bincount(group[seen], minlength=int(group.max()) + 1 if seen.size else 0)
    return group, size.astype(np.int64)


def number_by_first(key: np.ndarray) -> np.ndarray:
    """The code of each key, int64, codes numbered by first occurrence (what
    ``pd.factorize(key, sort=False)`` gives).

    Most keys are unique (every sample of a shuffled schedule is a group of its own):
    a sort of the key values (no arg-sort) finds the repeated ones, and only those are
    hashed; the codes then follow from which position first holds each key.
    """
    import pandas as pd

    if key.size == 0:
        return np.zeros(0, dtype=np.int64)
    ordered = np.sort(key)
    repeated = np.unique(ordered[1:][ordered[1:] == ordered[:-1]])
    if repeated.size == 0:
        return np.arange(key.size, dtype=np.int64)
    first = np.ones(key.size, dtype=bool)
    at = np.minimum(np.searchsorted(repeated, key), repeated.size - 1)
    dup = np.flatnonzero(repeated[at] == key)
    codes, _ = pd.factorize(key[dup], sort=False)
    # a code first appears where it exceeds every code before it
    new = np.ones(codes.size, dtype=bool)
    new[1:] = codes[1:] > np.maximum.accumulate(codes)[:-1]
    first[dup] = False
    first[dup[new]] = True
    number = np.cumsum(first) - 1
    out = number.astype(np.int64)
    out[dup] = number[dup[new]][codes]
    return out
