"""Array helpers numpy lacks, or does slowly.

- :func:`unique_values`: ``np.unique(x)`` of a 1-D array (its sorted distinct values)
  from one sort and a mask.  NumPy 2.3 and later answer a plain ``np.unique`` (no
  ``return_*`` flag) by hashing, which on a million distinct integers costs about 1 s
  where a sort costs 10 ms; with a flag they still sort.
- :func:`length_counts`: how many samples have each token length, where the lengths
  are small whole numbers (a sort of every sample replaced by a count per length).
- :func:`group_chunks`: ranges of whole groups (batches, points) of about a chunk of
  entries each, given the groups' offsets.
- :func:`rows`: the rows a boolean mask selects, as a slice when they are one run (a
  view, not a copy).
- :func:`chunks`: ``0 .. n`` in slices of :data:`CHUNK`, for passes over arrays as long
  as a recording's rows (60M at 10M samples x 6 epochs) whose temporaries should stay
  near the caches instead of each being a fresh array as long as the rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

#: Elements a chunked pass (:func:`chunks`) takes at a time.
CHUNK = 2**20


def chunks(n: int) -> list[slice]:
    """``0 .. n`` in slices of :data:`CHUNK` (read at each call).

    >>> [(s.start, s.stop) for s in chunks(3 * CHUNK // 2)] == [(0, CHUNK), (CHUNK, 2 * CHUNK)]
    True
    """
    return [slice(start, start + CHUNK) for start in range(0, n, CHUNK)]


#: Whole numbers below this are counted per value by :func:`length_counts` (at most
#: 32 MB of counts).
COUNTED_BELOW = 1 << 22


def none_twice(parts: Iterable[np.ndarray], n: int) -> bool:
    """Whether no value in ``[0, n)`` stands twice among ``parts`` (arrays of such
    values, taken in turn): a mask of the values seen, each part put in place, then
    its count against the values read.

    >>> none_twice([np.array([3, 0]), np.array([2])], 4), none_twice([np.array([1, 1])], 4)
    (True, False)
    """
    seen = np.zeros(n, dtype=bool)
    read = 0
    for part in parts:
        seen[part] = True
        read += part.size
    return int(np.count_nonzero(seen)) == read


def length_counts(x: Any) -> np.ndarray | None:
    """``np.bincount(x)``: how many of ``x`` hold each value ``0 .. max``, when ``x`` are
    whole numbers in ``[0, COUNTED_BELOW)`` (token lengths); else None.

    >>> length_counts(np.array([2, 0, 2])).tolist()
    [1, 0, 2]
    >>> length_counts(np.array([1.5])) is None
    True
    """
    x = np.asarray(x)
    if not (x.size and x.dtype.kind in "iu" and 0 <= x.min() and x.max() < COUNTED_BELOW):
        return None
    return np.bincount(x)


def group_chunks(offsets: np.ndarray, chunk: int = CHUNK) -> list[tuple[int, int]]:
    """Ranges ``[a, b)`` of groups covering about ``chunk`` entries each (at least one
    group each), given the groups' offsets (``n_groups + 1``, non-decreasing).

    >>> group_chunks(np.array([0, 2, 3, 7, 8]), 3)
    [(0, 2), (2, 3), (3, 4)]
    """
    n_groups = len(offsets) - 1
    out = []
    a = 0
    while a < n_groups:
        b = int(np.searchsorted(offsets, offsets[a] + chunk, side="right")) - 1
        b = min(max(b, a + 1), n_groups)
        out.append((a, b))
        a = b
    return out


def rows(mask: np.ndarray) -> slice | np.ndarray:
    """The rows a 1-D boolean ``mask`` selects: a slice when they are consecutive (a phase
    of a log in step order, the entries before a cut; ``a[rows(m)]`` is then a view, not
    a copy), else ``mask``.

    >>> rows(np.array([False, True, True, False])), rows(np.array([True, False, True]))
    (slice(1, 3, None), array([ True, False,  True]))
    """
    n = int(np.count_nonzero(mask))
    if n == 0:
        return mask
    first = int(np.argmax(mask))
    if n == 1 or bool(mask[first : first + n].all()):
        return slice(first, first + n)
    return mask


def unique_values(x: Any) -> np.ndarray:
    """The sorted distinct values of ``x`` (flattened), as ``np.unique(x)`` gives them:
    the same values and dtype, NaN once at the end.

    >>> unique_values([3, 1, 3, 2]).tolist()
    [1, 2, 3]
    >>> unique_values([np.nan, 1.0, np.nan]).tolist()
    [1.0, nan]
    """
    ordered = np.sort(np.asarray(x).reshape(-1))
    if ordered.size < 2:
        return ordered
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    if ordered.dtype.kind in "fc" and np.isnan(ordered[-1]):
        first_nan = int(np.searchsorted(np.isnan(ordered), True))  # (NaNs sort last)
        keep[first_nan + 1 :] = False
    return ordered[keep]
