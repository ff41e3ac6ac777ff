"""Which samples each logged point covers: :class:`Membership`, a CSR table.

A logged point (one line of the log: a step, or a logging interval pooling several
steps) covers the samples of every micro-batch it averages.  ``offsets`` has
``n_points + 1`` entries; the samples of point ``p`` are
``samples[offsets[p]:offsets[p + 1]]`` (dataset indices, ``0 <= id < n_samples``), and
``tokens`` (optional) holds each entry's real tokens in that point, so a sample's share
of its point is ``tokens[e] / sum(tokens of the point)``.

Each point lists a sample at most once: an appearance is a distinct point, which is what
the exchangeability null of :mod:`.evidence` counts.  :meth:`Membership.from_entries`
guarantees it (a sample met twice in one point, e.g. in a logging interval spanning an
epoch boundary, becomes one entry with the tokens summed); :meth:`Membership.has_repeats`
checks a table built otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arrays import CHUNK, chunks, group_chunks, rows
from ..errors import InputError

_WHERE = "membership"


@dataclass(frozen=True, eq=False)
class Membership:
    """The samples of each logged point, CSR.

    :param offsets: int64 ``[n_points + 1]``, non-decreasing, ``offsets[0] == 0`` and
        ``offsets[-1] == len(samples)``.
    :param samples: int32 or int64 ``[n_entries]``: dataset indices, point by point.
    :param n_samples: samples in the dataset (ids are ``0 .. n_samples - 1``).
    :param tokens: optional ``[n_entries]``, finite, >= 0: each entry's real tokens in its
        point (for token-weighted shares); None: every entry of a point weighs the same.
    :param sample_tokens: instead of ``tokens``, optional ``[n_samples]``, finite, >= 0:
        each sample's real tokens, an entry's being its sample's (looked up where asked,
        :meth:`tokens_at`: no array as long as the entries).

    >>> m = Membership.from_entries([0, 0, 1, -1, 1], [3, 1, 1, 2, 0], n_samples=4)
    >>> m.offsets.tolist(), m.samples.tolist()
    ([0, 2, 4], [1, 3, 0, 1])
    """

    offsets: np.ndarray
    samples: np.ndarray
    n_samples: int
    tokens: np.ndarray | None = None
    sample_tokens: np.ndarray | None = None

    def __post_init__(self) -> None:
        off, smp = self.offsets, self.samples
        if off.ndim != 1 or off.size < 1 or off.dtype.kind not in "iu":
            raise InputError(_WHERE, "offsets must be a 1-D integer array of n_points + 1")
        if smp.ndim != 1 or smp.dtype.kind not in "iu":
            raise InputError(_WHERE, f"samples must be a 1-D integer array, not {smp.dtype}")
        if off[0] != 0 or off[-1] != smp.size or np.any(np.diff(off) < 0):
            raise InputError(
                _WHERE,
                f"offsets must rise from 0 to {smp.size} (the entries)",
                "build it with Membership.from_entries",
            )
        if self.n_samples < 0:
            raise InputError(_WHERE, f"n_samples is {self.n_samples}", "give a count >= 0")
        if smp.size and (smp.min() < 0 or smp.max() >= self.n_samples):
            raise InputError(
                _WHERE,
                f"sample ids span {smp.min()}..{smp.max()}, outside 0..{self.n_samples - 1}",
                "give n_samples of the whole dataset",
            )
        tok = self.tokens
        finite = tok is None or tok.dtype.kind in "iu" or bool(np.all(np.isfinite(tok)))
        if tok is not None and (tok.shape != smp.shape or not finite):
            raise InputError(_WHERE, "tokens must be finite, one per entry")
        if tok is not None and tok.size and tok.min() < 0:
            raise InputError(_WHERE, f"tokens hold a negative count ({tok.min()})")
        per = self.sample_tokens
        if per is None:
            return
        if tok is not None:
            raise InputError(_WHERE, "give tokens or sample_tokens, not both")
        if per.shape != (self.n_samples,) or not _clean(per):
            raise InputError(_WHERE, "sample_tokens must be finite and >= 0, one per sample")

    @property
    def has_tokens(self) -> bool:
        """Whether entries carry tokens (``tokens`` or ``sample_tokens``)."""
        return self.tokens is not None or self.sample_tokens is not None

    def tokens_at(self, entries: np.ndarray | slice) -> np.ndarray:
        """The tokens of the given entries (``tokens[entries]``, or their samples'
        ``sample_tokens``), in the dtype either holds."""
        if self.tokens is not None:
            return self.tokens[entries]
        assert self.sample_tokens is not None
        return self.sample_tokens[self.samples[entries]]

    @property
    def n_points(self) -> int:
        """Logged points."""
        return int(self.offsets.size - 1)

    @property
    def n_entries(self) -> int:
        """(point, sample) entries."""
        return int(self.samples.size)

    def counts(self) -> np.ndarray:
        """Entries per point, int64 ``[n_points]``."""
        return np.diff(self.offsets)

    def point_of_entry(self) -> np.ndarray:
        """The point of each entry, int64 ``[n_entries]``."""
        return np.repeat(np.arange(self.n_points, dtype=np.int64), self.counts())

    def entry_share(self) -> np.ndarray:
        """Each entry's share of its point, float64 ``[n_entries]``: ``tokens[e] / sum of
        the point's tokens`` (``1 / entries`` without tokens, or where a point has none):
        :meth:`share_of` every entry, whose points are known without a search: each
        point's figures repeated over its entries, not looked up entry by entry."""
        counts = self.counts()
        share = np.repeat(1.0 / np.maximum(counts.astype(np.float64), 1.0), counts)
        if not self.has_tokens:
            return share
        point_totals = self.point_tokens()
        totals = np.repeat(point_totals, counts)
        if bool((point_totals[counts > 0] > 0).all()):
            np.divide(self.tokens_at(slice(None)), totals, out=share)
            return share
        has = np.flatnonzero(totals > 0)
        share[has] = self.tokens_at(has) / totals[has]
        return share

    def share_of(self, entries: np.ndarray) -> np.ndarray:
        """:meth:`entry_share` of the given entry indices only, float64."""
        point = np.searchsorted(self.offsets, entries, side="right") - 1
        counts = self.counts()[point].astype(np.float64)
        share = 1.0 / np.maximum(counts, 1.0)
        if not self.has_tokens:
            return share
        totals = self._tokens_of(point)
        has = totals > 0
        share[has] = self.tokens_at(entries[has]) / totals[has]
        return share

    def _tokens_of(self, point: np.ndarray) -> np.ndarray:
        """:meth:`point_tokens` of the given points only (a pass over their entries,
        not the whole table's), float64 aligned with ``point``."""
        wanted, inverse = np.unique(point, return_inverse=True)
        starts = self.offsets[wanted]
        lengths = self.offsets[wanted + 1] - starts
        if 4 * int(lengths.sum()) > self.n_entries:  # most of the table: one pass
            return self.point_tokens()[point]
        first = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
        entries = first + np.arange(int(lengths.sum()), dtype=np.int64)
        sums = np.zeros(wanted.size)
        nonempty = lengths > 0
        if entries.size:
            at = (np.cumsum(lengths) - lengths)[nonempty]
            sums[nonempty] = np.add.reduceat(self.tokens_at(entries).astype(np.float64), at)
        return sums[inverse]

    def point_tokens(self) -> np.ndarray:
        """Real tokens per point, float64 ``[n_points]`` (entries per point without tokens)."""
        if not self.has_tokens:
            return self.counts().astype(np.float64)
        out = np.zeros(self.n_points)
        nonempty = np.flatnonzero(np.diff(self.offsets) > 0)
        if not nonempty.size:
            return out
        held = self.tokens if self.tokens is not None else self.sample_tokens
        if held is not None and held.dtype.kind not in "iu":
            tok = self.tokens_at(slice(None)).astype(np.float64, copy=False)
            out[nonempty] = np.add.reduceat(tok, self.offsets[nonempty])
            return out
        # whole numbers: summed exactly in any grouping, so a run of whole points at a
        # time, each cast alone (no float64 copy as long as the entries)
        for a, b in group_chunks(self.offsets, CHUNK):
            lo, hi = int(self.offsets[a]), int(self.offsets[b])
            points = nonempty[np.searchsorted(nonempty, a) : np.searchsorted(nonempty, b)]
            if lo < hi:
                tok = self.tokens_at(slice(lo, hi)).astype(np.float64)
                out[points] = np.add.reduceat(tok, self.offsets[points] - lo)
        return out

    def has_repeats(self) -> bool:
        """True when some point lists a sample twice (the table breaks its contract).

        The entries are already grouped by point, so the sort of ``point * n_samples +
        sample`` (stable: a merge of short runs) costs about one pass.
        """
        key = self.point_of_entry() * max(self.n_samples, 1) + self.samples
        key = np.sort(key, kind="stable")
        return bool(np.any(key[1:] == key[:-1]))

    @classmethod
    def from_entries(
        cls,
        point: object,
        sample: object,
        n_samples: int | None = None,
        n_points: int | None = None,
        tokens: object | None = None,
        sample_tokens: object | None = None,
    ) -> Membership:
        """Build the table from one (point, sample) pair per entry, in any order.

        Entries with point ``-1`` (a step no logged point covers) are dropped; a sample
        met twice in one point is one entry (its tokens summed).

        :param point: int ``[n]``, the point of each entry, or -1.
        :param sample: int ``[n]``, the dataset index of each entry.
        :param n_samples: default ``max(sample) + 1``.
        :param n_points: default ``max(point) + 1``.
        :param tokens: optional ``[n]`` real tokens of each entry.
        :param sample_tokens: instead of ``tokens``, ``[n_samples]`` real tokens of each
            sample (an entry's tokens are its sample's, times its repeats in the point):
            the entries are then sorted by their keys' values alone, and, when no sample
            repeats in a point, the table keeps them per sample (no look-up of every
            entry's).
        """
        if sample_tokens is not None and tokens is not None:
            raise InputError(_WHERE, "give tokens or sample_tokens, not both")
        pt, sm = _int_array(point, "point"), _int_array(sample, "sample")
        tok = None if tokens is None else np.asarray(tokens, dtype=np.float64)
        if sm.shape != pt.shape or (tok is not None and tok.shape != pt.shape):
            raise InputError(_WHERE, "point, sample (and tokens) must be equally long")
        if pt.size and pt.min() < -1:
            raise InputError(_WHERE, f"a point index is {pt.min()}", "use -1 for none")
        keep = pt >= 0
        if not keep.all():
            # (e.g. the steps after the last logged one: one block kept, read in place)
            at = rows(keep)
            pt, sm = pt[at], sm[at]
            tok = None if tok is None else tok[at]
        n_s = int(sm.max()) + 1 if n_samples is None and sm.size else int(n_samples or 0)
        n_p = int(pt.max()) + 1 if n_points is None and pt.size else int(n_points or 0)
        if pt.size and pt.max() >= n_p:
            raise InputError(_WHERE, f"a point index is {pt.max()}, n_points is {n_p}")
        if sm.size and (sm.min() < 0 or sm.max() >= n_s):
            raise InputError(_WHERE, f"sample ids span {sm.min()}..{sm.max()}, n is {n_s}")
        pt, sm, tok, repeats = _by_point_then_sample(pt, sm, tok, max(n_s, 1))
        lazy: np.ndarray | None = None
        if sample_tokens is not None:
            per = np.asarray(sample_tokens)
            per = per if per.dtype.kind in "iu" else per.astype(np.float64)
            if per.shape != (n_s,):
                raise InputError(_WHERE, f"sample_tokens has shape {per.shape}, not ({n_s},)")
            if repeats is not None:
                tok = per[sm] * repeats
            elif _clean(per):
                lazy = _narrowed(per)
            else:  # (a bad count: looked up, so the table's check names it as before)
                tok = _narrowed(per)[sm]
        # (pt now rises: each point's first entry is a binary search, no count of them)
        # (in pt's dtype: int64 needles would cast 60M int32 points to int64 first)
        small = pt.dtype if n_p < np.iinfo(pt.dtype).max else np.int64
        offsets = np.searchsorted(pt, np.arange(n_p + 1, dtype=small), side="left")
        dtype = np.int32 if n_s < 2**31 else np.int64
        return cls(offsets.astype(np.int64), sm.astype(dtype, copy=False), n_s, tok, lazy)


def _by_point_then_sample(
    pt: np.ndarray, sm: np.ndarray, tok: np.ndarray | None, width: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The entries ordered by ``key = point * width + sample``, each key once (its
    tokens summed, in entry order), and how many entries each one merged (None: one
    each).

    Entries already in that order (a replay of one micro-batch a step, its samples
    sorted) need no sort.  Without tokens only the keys are sorted (their values, no
    arg-sort), and point and sample read back from them; entries already grouped by
    point keep their points, as a sort by key leaves them."""
    if _keys_rise(pt, sm, width):
        return pt, sm, tok, None
    grouped = bool((pt[1:] >= pt[:-1]).all())
    if grouped and tok is None:
        within = _sorted_within_points(pt, sm, width)
        if within is not None:
            return pt, within, None, None
    key = pt.astype(np.int64)
    key *= width
    key += sm
    if tok is None:
        key.sort()
    else:
        order = np.argsort(key, kind="stable")
        key, tok = key[order], tok[order]
    repeats = None
    if bool((key[1:] == key[:-1]).any()):
        starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
        tok = None if tok is None else np.add.reduceat(tok, starts)
        repeats = np.diff(np.append(starts, key.size))
        key, grouped = key[starts], False
    if not grouped:
        pt = key // width
    key %= width  # (key - point x width, in place)
    return pt, key, tok, repeats


def _sorted_within_points(pt: np.ndarray, sm: np.ndarray, width: int) -> np.ndarray | None:
    """The samples sorted within each point, ``pt`` non-decreasing: what sorting the
    keys ``point * width + sample`` gives, a run of whole points at a time (each run's
    keys sorted alone, no array of keys as long as the entries); in the dtype
    :meth:`Membership.from_entries` keeps.  None when a point lists a sample twice."""
    firsts = pt[[part.start for part in chunks(pt.size)]]
    cuts = np.unique(np.append(np.searchsorted(pt, firsts, side="left"), pt.size))
    out = np.empty(sm.size, dtype=np.int32 if width < 2**31 else np.int64)
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
        rows = _equal_points(pt[a:b])
        if rows is not None:  # (points of one size: a sort of each row)
            ordered = np.sort(sm[a:b].reshape(rows, -1), axis=1)
            if bool((ordered[:, 1:] == ordered[:, :-1]).any()):
                return None
            out[a:b] = ordered.reshape(-1)
            continue
        key = pt[a:b].astype(np.int64)
        key *= width
        key += sm[a:b]
        key.sort(kind="stable")  # (runs of sorted points: a merge, 4x a quicksort's speed)
        if bool((key[1:] == key[:-1]).any()):
            return None
        key %= width
        out[a:b] = key
    return out


def _equal_points(pt: np.ndarray) -> int | None:
    """How many points ``pt`` (non-decreasing, not empty) covers when each holds the same
    number of entries, else None."""
    size = int(np.searchsorted(pt, pt[0], side="right"))
    if pt.size % size:
        return None
    rows = pt.reshape(-1, size)
    if not bool((rows[:, 0] == rows[:, -1]).all() and (rows[1:, 0] != rows[:-1, 0]).all()):
        return None
    return pt.size // size


def _clean(per: np.ndarray) -> bool:
    """Whether every sample's tokens are finite and >= 0."""
    finite = per.dtype.kind in "iu" or bool(np.all(np.isfinite(per)))
    return finite and not (per.size and per.min() < 0)


def _narrowed(per: np.ndarray) -> np.ndarray:
    """``per`` as int32 when it holds whole numbers that fit (a sample's tokens): a table
    half as large, so fewer cache misses where entries look it up."""
    if per.dtype.kind not in "iu" or per.dtype.itemsize <= 4 or not per.size:
        return per
    if int(per.min()) < 0 or int(per.max()) >= 2**31:
        return per
    return per.astype(np.int32)


def _keys_rise(pt: np.ndarray, sm: np.ndarray, width: int) -> bool:
    """Whether ``point * width + sample`` rises strictly from entry to entry, checked a
    chunk at a time (no array of keys as long as the entries)."""
    last = -1
    for part in chunks(pt.size):
        key = pt[part].astype(np.int64) * width
        key += sm[part]
        if key[0] <= last or not bool((key[1:] > key[:-1]).all()):
            return False
        last = int(key[-1])
    return True


def entries_with(samples: np.ndarray, ids: np.ndarray, n_samples: int) -> np.ndarray:
    """The positions in ``samples`` holding one of ``ids``, int64, ascending.

    A look-up of a ``[n_samples]`` mask per entry is random access over it; for a few
    ids the entries are first screened by a 64 KiB mask of the ids' low 16 bits (it
    stays in cache), and only the survivors looked up in the full one.  Either way a
    chunk of entries at a time: no temporary as long as the entries.
    """
    mask = np.zeros(n_samples, dtype=bool)
    mask[ids] = True
    few = n_samples > 2**16 and ids.size * 32 <= 2**16
    low = np.zeros(2**16, dtype=bool)
    low[ids & 0xFFFF] = True
    found = []
    for at in chunks(samples.size):
        part = samples[at]
        if few:
            maybe = np.flatnonzero(low[part & 0xFFFF])
            hits = maybe[mask[part[maybe]]]
        else:
            hits = np.flatnonzero(mask[part])
        found.append(hits + at.start)
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def _int_array(values: object, name: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise InputError(_WHERE, f"{name} must be 1-D, not of shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise InputError(_WHERE, f"{name} must hold integers, not {arr.dtype}")
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8:  # (with int64: float)
        return arr.astype(np.int64)
    return arr if arr.size else arr.astype(np.int64)
