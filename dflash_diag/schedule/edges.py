"""Bucket edges from lengths: what ``bucketed`` uses when none are given, and the
helpers :mod:`dflash_diag.batches.buckets` optimises edges with.

An edge set ``e_0 < e_1 < ... < e_K`` makes buckets ``[e_i, e_(i+1))``, the last closed
above; an inclusive upper length ``u`` is the edge ``u + 1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Histogram:
    """Distinct lengths (ascending, int64) and how many samples have each (int64)."""

    values: np.ndarray
    counts: np.ndarray

    @property
    def n_samples(self) -> int:
        return int(self.counts.sum())

    @property
    def tokens(self) -> int:
        return int((self.values * self.counts).sum())


def length_histogram(lengths: np.ndarray, max_seq_len: int | None = None) -> Histogram:
    """Histogram of the lengths capped at ``max_seq_len`` (bincount when they are small).

    >>> import numpy as np
    >>> h = length_histogram(np.array([5, 3, 5, 9]), max_seq_len=8)
    >>> h.values.tolist(), h.counts.tolist()
    ([3, 5, 8], [1, 2, 1])
    """
    import numpy as np

    x = np.asarray(lengths, dtype=np.int64)
    if max_seq_len is not None:
        x = np.minimum(x, max_seq_len)
    if x.shape[0] == 0:
        return Histogram(np.zeros(0, np.int64), np.zeros(0, np.int64))
    if int(x.min()) >= 0 and int(x.max()) < (1 << 24):
        full = np.bincount(x)
        values = np.flatnonzero(full)
        return Histogram(values.astype(np.int64), full[values].astype(np.int64))
    values, counts = np.unique(x, return_counts=True)
    return Histogram(values.astype(np.int64), counts.astype(np.int64))


def quantile_uppers(hist: Histogram, k: int) -> list[int]:
    """Equal-count buckets: upper lengths at the ``j/k`` quantiles (the length of the
    ``ceil(j N / k)``-th shortest sample), ``j = 1..k``."""
    import numpy as np

    if hist.values.shape[0] == 0:
        return []
    n = hist.n_samples
    ranks = np.ceil(np.arange(1, k + 1) * n / k).astype(np.int64)
    pos = np.searchsorted(np.cumsum(hist.counts), ranks, side="left")
    return sorted(set(hist.values[np.minimum(pos, hist.values.shape[0] - 1)].tolist()))


#: Buckets of a ``bucketed`` schedule given no ``--buckets``: equal-count length buckets.
DEFAULT_BUCKET_COUNT = 6


def default_edges(lengths: np.ndarray, k: int = DEFAULT_BUCKET_COUNT) -> tuple[int, ...]:
    """The edges ``bucketed`` uses when none are given: ``k`` equal-count buckets of
    ``lengths`` (already capped at max_seq_len), their upper lengths at the ``j/k``
    quantiles (:func:`quantile_uppers`), as edges (:func:`edges_from_uppers`).  Fewer
    when lengths repeat; ``(0, 1)`` for no samples.

    >>> import numpy as np
    >>> default_edges(np.array([10, 20, 30, 40, 50, 60]), k=3)
    (0, 21, 41, 60)
    """
    uppers = quantile_uppers(length_histogram(lengths), k)
    return edges_from_uppers(uppers) if uppers else (0, 1)


def edges_from_uppers(uppers: list[int], top: int | None = None) -> tuple[int, ...]:
    """``--buckets`` edges from inclusive bucket upper lengths.

    An upper length ``u`` becomes the edge ``u + 1`` (so ``u`` stays below it); the
    first edge is 0 and the last ``max(top, longest)`` (closed above).

    >>> edges_from_uppers([770, 1215, 8192], top=8192)
    (0, 771, 1216, 8192)
    """
    longest = uppers[-1]
    inner = [u + 1 for u in uppers[:-1]]
    last = max(longest, top or 0)
    if inner and last <= inner[-1]:
        last = inner[-1] + 1
    if not inner and last == 0:
        last = 1
    return (0, *inner, last)
