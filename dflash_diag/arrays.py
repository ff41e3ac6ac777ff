"""Array helpers numpy lacks, or does slowly.

- :func:`unique_values`: ``np.unique(x)`` of a 1-D array (its sorted distinct values)
  from one sort and a mask.  NumPy 2.3 and later answer a plain ``np.unique`` (no
  ``return_*`` flag) by hashing, which on a million distinct integers costs about 1 s
  where a sort costs 10 ms; with a flag they still sort.
- :func:`chunks`: ``0 .. n`` in slices of :data:`CHUNK`, for passes over arrays as long
  as a recording's rows (60M at 10M samples x 6 epochs) whose temporaries should stay
  near the caches instead of each being a fresh array as long as the rows.
"""

from __future__ import annotations

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
