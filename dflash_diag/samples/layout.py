"""Each sample's entries in a dense table: :class:`Layout`, built when the entries fall
into a few runs in which no sample repeats.

Under a shuffling sampler each epoch is (nearly) a permutation of the samples, so the
entries, in their order, split into runs ("windows") in which every sample occurs at most
once.  Within a window the entries can be put in place with plain fancy indexing,
``slots[w][sample] = entry``, and each sample's appearances become a column of a
``[n_windows, n_samples]`` table: its lowest and second-lowest rank, its count and its
rank sum are then passes over ``n_windows`` columns of ``n_samples``, and the entries of
a few samples a look-up of their columns, where the plain reductions are a
``ufunc.at`` pass over every entry each and a look-up of a mask per entry.

The windows are found greedily, a chunk of entries at a time: a chunk is gathered
(``pre = slots[w][ids]``: a sample already in the window), put in place and gathered again
(``slots[w][ids] == entry``: two entries of one sample in the chunk, one of which was
overwritten); the window ends at the first entry that repeats a sample, and that chunk's
writes from there on are undone.  So a window is exactly duplicate-free, whatever the
sampler, and a run that does not fall into few windows (more than :data:`BUDGET` slots
an entry) gets no layout: the plain passes serve it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arrays import chunks
from .membership import entries_with

#: At most this many slots (windows x samples) an entry; beyond, no layout.
BUDGET = 2
#: A layout is built only with at least this many entries a sample (below, most samples
#: are seen once, and the plain passes with their short paths cost less).
DENSE_FROM = 2


@dataclass(frozen=True, eq=False)
class Layout:
    """The entries of each sample, one window a row.

    :param slots: ``n_windows`` arrays of int32 (int64 past 2**31 entries)
        ``[n_samples]``: the entry (index into the membership's ``samples``) of each
        sample in that window, -1 where it has none.
    :param k: int64 ``[n_samples]``, usable appearances (entries of usable points).
    :param rank_sum: int64 ``[n_samples]``, the sum of their ranks.
    :param lowest: int64 ``[n_samples]``, the lowest rank (``n_usable``: none);
        ``second``: the second-lowest.
    :param seen: bool ``[n_samples]``, in some point, usable or not.
    """

    slots: tuple[np.ndarray, ...]
    k: np.ndarray
    rank_sum: np.ndarray
    lowest: np.ndarray
    second: np.ndarray
    seen: np.ndarray

    def entries(self, ids: np.ndarray) -> np.ndarray:
        """The entries of the samples ``ids`` (distinct), int64 ascending: what
        :func:`.membership.entries_with` finds by a pass over every entry."""
        ids = np.asarray(ids, dtype=np.int64)
        found = np.concatenate([ids[:0], *(col[ids] for col in self.slots)])
        found = found[found >= 0].astype(np.int64, copy=False)
        found.sort()
        return found

    def few(self, ids: np.ndarray, n_entries: int) -> bool:
        """Whether :meth:`entries` of ``ids`` costs less than a pass over the
        ``n_entries`` (a look-up of a column each, against a mask look-up each entry)."""
        return ids.size * len(self.slots) * 8 <= n_entries


def windows(samples: np.ndarray, n_samples: int) -> tuple[np.ndarray, ...] | None:
    """The slots of :class:`Layout` (see the module docstring), None past the budget.

    A window after the first is first tried at the length of the one before (epochs of
    one length): its entries put in place, a chunk at a time, and checked all at once by
    a count (the window is duplicate-free exactly when it fills as many slots as it has
    entries); only when that fails is it grown by :func:`_grow`."""
    n = samples.size
    dtype = np.int32 if n < 2**31 else np.int64
    cols: list[np.ndarray] = []
    start, guess = 0, 0
    while start < n:
        if (len(cols) + 1) * n_samples > BUDGET * n + 1024:
            return None
        col = np.full(n_samples, -1, dtype=dtype)
        stop = min(start + guess, n)
        if not (guess and _put(col, samples, start, stop)):
            col.fill(-1)
            stop = _grow(col, samples, start)
        cols.append(col)
        start, guess = stop, stop - start
    return tuple(cols)


def _put(col: np.ndarray, samples: np.ndarray, start: int, stop: int) -> bool:
    """Put the entries ``start .. stop`` in ``col`` (empty); whether they held distinct
    samples (each filled a slot of its own)."""
    for part in chunks(stop - start):
        at, end = start + part.start, min(start + part.stop, stop)
        col[samples[at:end]] = np.arange(at, end, dtype=col.dtype)
    return int(np.count_nonzero(col >= 0)) == stop - start


def _grow(col: np.ndarray, samples: np.ndarray, start: int) -> int:
    """Fill ``col`` (empty) from entry ``start`` to the first entry whose sample is
    already in it, a chunk at a time; returns that entry (or the end).

    A chunk is gathered first (``pre``: samples put by an earlier chunk), put, and
    gathered again (an entry overwritten by another of its sample in the chunk); at a
    repeat, the chunk's writes from the cut on are undone and the entries before it put
    back (distinct samples: they win)."""
    n, first = samples.size, start
    for part in chunks(n - first):
        start, stop = first + part.start, min(first + part.stop, n)
        ids = samples[start:stop]
        entry = np.arange(start, stop, dtype=col.dtype)
        pre = col[ids]
        col[ids] = entry
        post = col[ids]
        if bool((pre < 0).all()) and bool((post == entry).all()):
            continue
        cut = _first_repeat(ids, pre, post - start, post != entry)
        col[ids[cut:]] = pre[cut:]
        col[ids[:cut]] = entry[:cut]
        return start + cut
    return n


def _first_repeat(ids: np.ndarray, pre: np.ndarray, winner: np.ndarray, lost: np.ndarray) -> int:
    """The first position of the chunk ``ids`` whose sample is already in the window:
    put by an earlier chunk (``pre >= 0``), or earlier in this one.  An id twice in the
    chunk lost all its writes but one (``lost``; ``winner``: the position that kept the
    slot), so only the lost positions and their winners are searched."""
    cut = int(np.argmax(pre >= 0)) if bool((pre >= 0).any()) else ids.size
    lost_at = np.flatnonzero(lost)
    if lost_at.size:
        twice = np.union1d(lost_at, winner[lost_at])
        order = np.argsort(ids[twice], kind="stable")
        by_id = ids[twice][order]
        later = np.zeros(by_id.size, dtype=bool)
        later[1:] = by_id[1:] == by_id[:-1]  # (not the first position of its id)
        if later.any():
            cut = min(cut, int(twice[order][later].min()))
    return cut


def dense_layout(
    samples: np.ndarray, rank: np.ndarray, n_samples: int, n_usable: int, unusable: bool = True
) -> Layout | None:
    """The layout of a membership's entries, or None (too few entries a sample, or not
    a few duplicate-free windows).

    :param samples: int ``[n_entries]``, the membership's samples.
    :param rank: int ``[n_entries]``, each entry's point's rank (-1: unusable point).
    :param unusable: whether some point is unusable (False: no rank is -1).
    """
    n = samples.size
    if n_samples == 0 or n == 0 or n < DENSE_FROM * n_samples:
        return None
    slots = windows(samples, n_samples)
    if slots is None:
        return None
    return Layout(slots, *_reduced(slots, rank, n_samples, n_usable, unusable))


def _reduced(
    slots: tuple[np.ndarray, ...], rank: np.ndarray, n_samples: int, n_usable: int, unusable: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(k, rank_sum, lowest, second, seen)`` from the slots: column passes.

    Each slot's rank is looked up (none, or an unusable point: ``n_usable``); ``k`` is
    ``n_windows`` less the slots without a usable rank, ``rank_sum = sum(ranks) -
    (n_windows - k) n_usable``, and the two lowest are kept by ``second = min(second,
    max(lowest, r))``, ``lowest = min(lowest, r)`` (exact integers, any order)."""
    small = np.int32 if n_usable < 2**31 - 1 else np.int64
    none = small(n_usable)
    gone = np.zeros(n_samples, dtype=np.int32)  # (slots without a usable rank)
    empty = np.zeros(n_samples, dtype=np.int32) if unusable else gone  # (without entry)
    total = np.zeros(n_samples, dtype=np.int64)
    lowest = np.full(n_samples, none, dtype=small)
    second = np.full(n_samples, none, dtype=small)
    high = np.empty(n_samples, dtype=small)
    for col in slots:
        absent = col < 0
        r = rank[col].astype(small, copy=False)  # (-1: the last entry's; set below)
        if unusable:
            empty += absent
            absent |= r < 0
        r[absent] = none
        gone += absent
        total += r
        np.maximum(lowest, r, out=high)
        np.minimum(lowest, r, out=lowest)
        np.minimum(second, high, out=second)
    k = len(slots) - gone.astype(np.int64)
    total -= gone * np.int64(n_usable)
    out = (k, total, lowest.astype(np.int64), second.astype(np.int64), empty < len(slots))
    for arr in out:  # (shared with the callers: none may write into them)
        arr.flags.writeable = False
    return out


def sample_entries(
    samples: np.ndarray, ids: np.ndarray, n_samples: int, layout: Layout | None
) -> np.ndarray:
    """The entries of the samples ``ids`` (distinct), int64 ascending, as positions in
    ``samples``: from ``layout``'s columns for a few samples (``layout`` built over these
    same entries, or None), else by a pass over every entry (:func:`.entries_with`)."""
    if layout is not None and layout.few(ids, samples.size):
        return layout.entries(ids)
    return entries_with(samples, ids, n_samples)
