"""Who always travels together: :func:`separable_groups`.

Samples seen in exactly the same set of points have the same evidence, whatever the
metric does: nothing in the log tells them apart, so the group, not a member, is the unit
of a verdict.  Under sorted-greedy batching with a shuffled batch order every batch is a
group; under a shuffling sampler the groups are the batches of samples seen once.

The set of points of each sample is named by a key: ``(appearances, lowest rank, sum
of ranks)`` (the ranks of :mod:`.appearances`), and, for the samples whose triple
another sample shares (only those can have a twin), also ``h = sum_p w_p`` over its
points, ``w_p`` uniform on [1, 2) from a fixed seed, summed by ``np.bincount`` in the
entries' order (by point), so two samples with the same set add the same numbers in the
same order and get bit-identical sums.  Two different sets share the key with
probability about ``k * 2**-52`` per pair of samples agreeing on the triple.  Under a
shuffling sampler few samples share a triple, so ``h`` costs a pass over their entries
only.
"""

from __future__ import annotations

import numpy as np

from ..arrays import chunks, unique_values
from .appearances import Appearances, appearances, seen_at_most_once
from .layout import sample_entries
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
    k, rank_sum = app.counts_and_rank_sums()
    return group_of(app, k, lowest, rank_sum)


def group_of(
    app: Appearances, k: np.ndarray, lowest: np.ndarray, spread: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`separable_groups` from reductions already made (see the module docstring):
    ``k`` appearances, ``lowest`` rank and ``spread`` the highest rank or the sum of
    the ranks (with ``lowest`` either fixes a set of one or two points), int
    ``[n_samples]`` each (``spread`` None: the rank sums, counted here if needed)."""
    import pandas as pd

    if seen_at_most_once(k):
        return _by_one_point(app)
    if spread is None:
        spread = app.counts_and_rank_sums(k)[1]
    seen = np.flatnonzero(k > 0)
    key = _at(k, seen).astype(np.uint64)  # (one array of keys, made in place)
    key *= np.uint64(0x9E3779B97F4A7C15)
    for part in (lowest, spread):
        key *= np.uint64(0x94D049BB133111EB)
        key += _as_uint64(_at(part, seen))
    # only the samples sharing their triple with another can have a twin: they alone
    # need h, and their codes are those of the pair (triple, h)
    shared = np.flatnonzero(_repeated(key))
    codes = np.zeros(0, dtype=np.int64)
    if shared.size:
        # a set of one or two points is its triple (lowest and highest, or the sum less
        # the lowest): h is needed only for the samples seen three times or more
        big = k[seen[shared]] > 2
        if not big.any():  # (every sample seen once or twice: sorted-greedy's one epoch)
            codes = pd.factorize(key[shared], sort=False)[0].astype(np.int64)
        else:
            h = np.zeros(shared.size)
            h[big] = _point_sums(app, seen[shared[big]])
            pair = pd.DataFrame({"key": key[shared], "h": h.view(np.uint64)}, copy=False)
            codes = pair.groupby(["key", "h"], sort=False).ngroup().to_numpy().astype(np.int64)
    group = np.full(app.n_samples, -1, dtype=np.int64)
    group[seen] = _renumber(seen.size, shared, codes)
    size = np.bincount(group[seen], minlength=int(group.max()) + 1 if seen.size else 0)
    return group, size.astype(np.int64)


def _at(values: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """``values[seen]``, ``values`` itself when ``seen`` is every position (ascending)."""
    return values if seen.size == values.size else values[seen]


def _as_uint64(values: np.ndarray) -> np.ndarray:
    """``values.astype(np.uint64)``: a view when they are int64 (the same bits)."""
    if values.dtype == np.int64 and values.flags.c_contiguous:
        return values.view(np.uint64)
    return values.astype(np.uint64)


def _by_one_point(app: Appearances) -> tuple[np.ndarray, np.ndarray]:
    """:func:`group_of` when no sample is seen twice: a sample's set is its one point,
    so the samples of a point are a group, numbered by first member as the keys would
    number them.  The kept entries are grouped by point (a run of one rank each, its
    length the point's count): the lowest sample of each run names its group; no key,
    no pass over the samples."""
    n_kept = app.sample.size
    # the runs: the usable points in index order (the entries' order), the empty left out
    points = np.flatnonzero(app.rank_of_point >= 0)
    runs = np.bincount(app.rank, minlength=app.n_usable)[app.rank_of_point[points]]
    starts, runs = (np.cumsum(runs) - runs)[runs > 0], runs[runs > 0]
    first = np.minimum.reduceat(app.sample, starts) if n_kept else starts
    code = np.zeros(max(app.n_usable, 1), dtype=np.int64)
    order = np.argsort(first, kind="stable")
    code[app.rank[starts[order]]] = np.arange(starts.size, dtype=np.int64)
    group = np.full(app.n_samples, -1, dtype=np.int64)
    group[app.sample] = code[app.rank]
    size = np.zeros(starts.size, dtype=np.int64)
    size[code[app.rank[starts]]] = runs
    return group, size


def _point_sums(app: Appearances, ids: np.ndarray) -> np.ndarray:
    """``h`` of the given samples (float64 aligned with ``ids``): a pass over their
    entries, in the entries' order."""
    # (the layout's entries are the membership's: app.sample's only when all are kept)
    layout = app.layout if app.kept is None else None
    entries = sample_entries(app.sample, ids, app.n_samples, layout)
    weights = np.random.default_rng(_SEED).uniform(1.0, 2.0, max(app.n_usable, 1))
    sample = app.sample[entries]
    h = np.bincount(sample, weights=weights[app.rank[entries]], minlength=app.n_samples)
    return h[ids]


def _repeated(key: np.ndarray) -> np.ndarray:
    """bool ``[n]``: the keys another position holds too (a sort of the values, then a
    search of the few repeated ones).

    With few repeated keys, a chunk of keys at a time is first screened by a 64 KiB
    mask of the repeated keys' low 16 bits (it stays in cache), and only the survivors
    searched: a binary search of every key costs more than the sort."""
    out = np.zeros(key.size, dtype=bool)
    if key.size < 2:
        return out
    ordered = np.sort(key)
    repeated = unique_values(ordered[1:][ordered[1:] == ordered[:-1]])
    del ordered
    if not repeated.size:
        return out
    if repeated.size * 32 > 2**16 or key.dtype.kind not in "iu":
        at = np.minimum(np.searchsorted(repeated, key), repeated.size - 1)
        return repeated[at] == key
    low = np.zeros(2**16, dtype=bool)
    low[(repeated & 0xFFFF).astype(np.intp)] = True
    for part in chunks(key.size):
        some = key[part]
        maybe = np.flatnonzero(low[(some & 0xFFFF).astype(np.intp)])
        at = np.minimum(np.searchsorted(repeated, some[maybe]), repeated.size - 1)
        out[part.start + maybe[repeated[at] == some[maybe]]] = True
    return out


def _renumber(n: int, dup: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Codes numbered by first position, int64 ``[n]``: every position not in ``dup`` a
    code of its own, those in ``dup`` (ascending) sharing ``codes`` (numbered by first
    occurrence among them)."""
    first = np.ones(n, dtype=bool)
    new = np.ones(codes.size, dtype=bool)
    # a code first appears where it exceeds every code before it
    new[1:] = codes[1:] > np.maximum.accumulate(codes)[:-1]
    first[dup] = False
    first[dup[new]] = True
    number = np.cumsum(first) - 1
    number[dup] = number[dup[new]][codes]
    return number.astype(np.int64, copy=False)


def number_by_first(key: np.ndarray) -> np.ndarray:
    """The code of each key, int64, numbered by first occurrence (what
    ``pd.factorize(key, sort=False)`` gives): a sort of the key values finds the
    repeated ones, and only those are hashed."""
    import pandas as pd

    dup = np.flatnonzero(_repeated(key))
    codes = pd.factorize(key[dup], sort=False)[0].astype(np.int64) if dup.size else dup
    return _renumber(key.size, dup, codes)
