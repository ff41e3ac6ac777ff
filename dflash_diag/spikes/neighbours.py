"""Similar batches: each point's ``k`` nearest other batches in the composition model's
standardised regressors (Euclidean), and the median of their residuals, the prediction
that follows any shape of "which batches are hard" (:mod:`.model` fits the linear one).

On one regressor (the similar-length neighbours) the nearest are merged along the sorted
values; elsewhere, and where a merge cannot be sure, ``scipy.spatial.cKDTree`` finds them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


#: Similar batches whose residuals predict a point's (k nearest neighbours).
NEIGHBOURS = 10


def neighbour_predict(
    design: np.ndarray, y: np.ndarray, groups: np.ndarray, k: int = NEIGHBOURS
) -> np.ndarray:
    """For each point, the median residual of the ``k`` most similar other batches
    (:func:`neighbour_values`)."""
    import numpy as np

    vals = neighbour_values(design, y, groups, k)
    out = np.full(y.shape[0], np.nan)
    ok = np.isfinite(vals).any(axis=1)
    out[ok] = np.nanmedian(vals[ok], axis=1)
    return out


def neighbour_values(
    design: np.ndarray, y: np.ndarray, groups: np.ndarray, k: int = NEIGHBOURS
) -> np.ndarray:
    """For each point, the residuals of the ``k`` most similar other batches: an
    ``(n, k)`` array, nearest first (batches as near in any order), NaN-padded (rows
    of points without regressors are all NaN).

    Similar: nearest in the standardised regressors (Euclidean).  Points of the same
    ``groups`` label (the same batch coming back) are left out, so a recurring batch does
    not predict itself: recurrence is its own line of evidence.  Unlike the linear model,
    this follows any shape, e.g. a difficulty that jumps for the longest few batches, and
    a median of several batches cannot be made by one spike.  The prediction for a point
    never uses the point itself, so it is out-of-sample.  NaN where regressors are missing.
    """
    import numpy as np

    ok = np.isfinite(y) & np.isfinite(design).all(axis=1)
    out = np.full((y.shape[0], k), np.nan)
    if ok.sum() <= k + 1:
        return out
    x = design[ok]
    sd = x.std(axis=0)
    x = (x[:, sd > 0] - x[:, sd > 0].mean(axis=0)) / sd[sd > 0]
    yy, gg = y[ok], groups[ok]
    _, counts = np.unique(gg, return_counts=True)
    extra = int(counts.max())  # room for every other point of the same group
    q = min(k + extra, int(ok.sum()))
    # Points at the same place (the same bytes) get the same answer from the tree: each
    # place is asked once (a log of 1M points has some 80K distinct mean lengths).
    first, inverse = _distinct_rows(x)
    near = _nearest(x, first, q, k, gg, inverse)
    # Neighbour by point, (q, m): each neighbour rank is a contiguous row.
    idx = near.T[:, inverse]
    vals = yy[idx]
    other = gg[idx] != gg[None, :]  # not the point itself nor one of its recurrences
    del idx
    # The first k usable neighbours of each point, packed in their order: the j-th
    # usable one goes to row j - 1, the rest to a row dropped after.
    rank = np.cumsum(other, axis=0, dtype=np.int32)
    dest = np.where(other & (rank <= k), rank - 1, k).astype(np.intp)
    del rank, other
    m = dest.shape[1]
    dest *= m
    dest += np.arange(m)
    packed = np.full((k + 1) * m, np.nan)
    packed[dest.ravel()] = vals.ravel()
    out[ok] = packed.reshape(k + 1, m)[:k].T
    return out


def _nearest(
    x: np.ndarray, first: np.ndarray, q: int, k: int, groups: np.ndarray, inverse: np.ndarray
) -> np.ndarray:
    """The ``q`` nearest rows of ``x`` to each row ``x[first]`` (Euclidean), nearest
    first: an ``(first.size, q)`` array of row positions, whose first ``k`` of other
    ``groups`` than each point's (``inverse``: each point's place in ``first``) are
    those ``scipy.spatial.cKDTree`` finds, ties in distance in any order.

    On one regressor (the similar-length neighbours), by :func:`_nearest_on_a_line`
    where it is sure, the tree for the other places: sure, the ``q`` nearest are the
    only ``q`` nearest (the tree finds that set) and no point there has more than ``k``
    of other groups among them (all of them are kept, in any order)."""
    import numpy as np
    from scipy.spatial import cKDTree

    if x.shape[1] != 1:
        return np.asarray(cKDTree(x).query(x[first], k=q)[1]).reshape(first.size, q)
    near, sure = _nearest_on_a_line(x[:, 0], first, q)
    if q > k + 1:  # (with groups of several points, count each point's others)
        others = (groups[near.T[:, inverse]] != groups[None, :]).sum(axis=0)
        sure[inverse[others > k]] = False
    unsure = np.flatnonzero(~sure)
    if unsure.size:
        _, idx = cKDTree(x).query(x[first[unsure]], k=q)
        near[unsure] = np.asarray(idx).reshape(unsure.size, q)
    return near


#: Places :func:`_nearest_on_a_line` merges at a time (bounded memory on long logs).
LINE_BLOCK = 1 << 18


def _nearest_on_a_line(v: np.ndarray, at: np.ndarray, q: int) -> tuple[np.ndarray, np.ndarray]:
    """For each ``v[at]``, the positions of its ``q`` nearest values of ``v``, nearest
    first (``(at.size, q)``), and whether they are sure: the ``q``-th strictly nearer
    than the next (squared distances ``(v_j - v)^2``, as the tree compares them), so no
    other ``q`` are as near.

    The nearest values lie on either side of ``v`` in sorted order: a merge of the two
    sides, ``q + 1`` steps (the last to compare the next one), each taking the nearer
    (the right one on a tie).

    >>> import numpy as np
    >>> near, sure = _nearest_on_a_line(np.array([0.0, 10.0, 1.0, 3.0]), np.array([0, 3]), 2)
    >>> near.tolist(), sure.tolist()
    ([[0, 2], [3, 2]], [True, True])
    """
    import numpy as np

    order = np.argsort(v, kind="stable")
    pad = q + 1  # (infinities either side: a side run out is never the nearer)
    line = np.concatenate([np.full(pad, -np.inf), v[order], np.full(pad, np.inf)])
    near = np.empty((at.size, q), dtype=np.intp)
    sure = np.empty(at.size, dtype=bool)
    for lo in range(0, at.size, LINE_BLOCK):
        part = slice(lo, lo + LINE_BLOCK)
        near[part], sure[part] = _merge_sides(line, v[at[part]], q)
    near -= pad
    return order[near], sure


def _merge_sides(line: np.ndarray, v: np.ndarray, q: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_nearest_on_a_line`'s merge for the values ``v`` on the padded sorted
    ``line``: positions on it, and sure."""
    import numpy as np

    right = np.searchsorted(line, v, side="left")
    left = right - 1
    picked = np.empty((q, v.size), dtype=np.intp)
    taken = np.zeros(v.size)
    for j in range(q + 1):
        dl = line[left] - v
        dl *= dl
        dr = line[right] - v
        dr *= dr
        go_right = dr <= dl
        d = np.where(go_right, dr, dl)
        if j == q:
            return picked.T, d > taken
        np.copyto(picked[j], left)
        np.copyto(picked[j], right, where=go_right)
        right += go_right
        left -= ~go_right
        taken = d
    raise AssertionError  # (the loop returns at j == q)


def _distinct_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(first, inverse)``: the index of the first row of each distinct row of ``x``
    (equal bytes) and, per row, which of them it is (``x[first][inverse]`` is ``x``)."""
    import numpy as np

    rows = np.ascontiguousarray(x)
    if rows.shape[1] == 0:  # (no regressor varies: every row is the same, empty)
        return np.zeros(min(1, rows.shape[0]), dtype=np.intp), np.zeros(rows.shape[0], np.intp)
    keys: np.ndarray
    if rows.shape[1] == 1 and rows.dtype.itemsize == 8:
        keys = rows.view(np.int64)[:, 0]
    else:
        keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1])))[:, 0]
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)
