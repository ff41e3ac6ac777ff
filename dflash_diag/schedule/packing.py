"""Greedy packing under a token budget: the budget rule, and two packers that apply it.

The rule (one object for every strategy that packs, :class:`Budget`): samples are taken
in a given order; sample ``L`` joins the open batch of ``c`` samples, longest ``m`` and
sum ``S`` unless

- ``padded`` mode: ``(c + 1) * max(m, L) > token_budget`` (samples x longest), or
- ``tokens`` mode: ``S + L > token_budget`` (real tokens), or
- ``c + 1 > max_batch_size``,

in which case the open batch is closed and ``L`` starts a new one.  A batch always takes
its first sample, so a sample longer than the budget forms a batch of its own (it is
never dropped).  This is the story's ``build_batches`` loop (``if cur and (len(cur) + 1)
* max(cur_max, L) > budget: flush``).

:func:`pack_sorted` applies it to lengths sorted ascending without a per-sample loop;
:func:`pack_in_order` to any order, from where a batch starting at each position would
end (:func:`batch_ends`, vectorised).  Both return batch start positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from ..data import ScheduleParams


@dataclass(frozen=True)
class Budget:
    """What may go into one micro-batch.

    :param tokens: the token budget (``--token-budget``).
    :param mode: ``padded`` (samples x longest <= tokens) or ``tokens`` (sum <= tokens).
    :param max_batch_size: at most this many samples (None: no limit).
    """

    tokens: int
    mode: str = "padded"
    max_batch_size: int | None = None

    @classmethod
    def from_params(cls, params: ScheduleParams) -> Budget:
        return cls(params.token_budget, params.budget_mode, params.max_batch_size)

    def fits(self, n: int, longest: int, total: int) -> bool:
        """Whether a batch of ``n`` samples, longest ``longest``, sum ``total`` is within
        the budget (a single sample always is)."""
        if n <= 1:
            return True
        if self.max_batch_size is not None and n > self.max_batch_size:
            return False
        cost = n * longest if self.mode == "padded" else total
        return cost <= self.tokens


def stable_argsort(values: np.ndarray) -> np.ndarray:
    """Indices that sort ``values`` ascending, equal values keeping index order, as
    Python's ``sorted(enumerate(lens), key=lambda x: x[1])``.

    Whole numbers below 2**16 are sorted as uint16, where numpy's stable sort is a radix
    sort (several times faster than the merge sort it uses for int64); below 2**32 by
    two of those, the low 16 bits then the high (a stable sort by the high bits keeps
    the order of the low ones among equals: least significant digit first).

    >>> stable_argsort(np.array([70000, 3, 65539, 3])).tolist()
    [1, 3, 2, 0]
    """
    values = np.asarray(values)
    low, high = (int(values.min()), int(values.max())) if values.size else (0, 0)
    if values.dtype.kind not in "iu" or low < 0 or high >= 1 << 32:
        order = np.argsort(values, kind="stable")
    elif high < 1 << 16:
        order = np.argsort(values.astype(np.uint16), kind="stable")
    else:
        order = np.argsort(values.astype(np.uint16), kind="stable")  # (mod 2**16)
        upper = np.right_shift(values[order], 16).astype(np.uint16)
        order = order[np.argsort(upper, kind="stable")]
    return order.astype(np.int64, copy=False)


def pack_sorted(sorted_lengths: np.ndarray, budget: Budget) -> np.ndarray:
    """Batch start positions of the greedy packing of ``sorted_lengths`` (ascending).

    Sorted ascending, the next sample is the longest so far, so the rule only depends on
    the open batch's count (and sum in ``tokens`` mode).  Inside a run of ``k`` equal
    lengths ``L`` the open batch first takes what it still can, then the rest splits into
    full batches of ``cap`` samples (``cap = token_budget // L``, at least 1, at most
    ``max_batch_size``) and one partial batch that stays open for the next run.  The loop
    is over distinct lengths (at most ``max_seq_len`` of them), not over samples.

    >>> pack_sorted(np.array([1, 1, 2, 2, 2, 5, 9]), Budget(6)).tolist()
    [0, 3, 5, 6]
    """
    ls = np.asarray(sorted_lengths, dtype=np.int64)
    n = len(ls)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    change = np.flatnonzero(ls[1:] != ls[:-1]) + 1
    run_starts = np.concatenate([[0], change])
    run_counts = np.diff(np.concatenate([run_starts, [n]]))
    return pack_runs(ls[run_starts], run_counts, budget)


def pack_runs(values: np.ndarray, counts: np.ndarray, budget: Budget) -> np.ndarray:
    """:func:`pack_sorted` of the sorted lengths made of ``counts[i]`` samples of length
    ``values[i]`` each (``values`` ascending, distinct; ``counts`` >= 1): the same batch
    starts, from the runs alone (e.g. a count per length, no sort of the samples).

    >>> pack_runs(np.array([1, 2, 5, 9]), np.array([2, 3, 1, 1]), Budget(6)).tolist()
    [0, 3, 5, 6]
    """
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    run_starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    run_values = np.asarray(values, dtype=np.int64).tolist()
    limit = budget.max_batch_size if budget.max_batch_size is not None else n
    padded = budget.mode == "padded"
    total_budget = budget.tokens
    # each run opens n_new batches, the first at `first`, then every `cap` samples
    firsts: list[int] = []
    caps: list[int] = []
    news: list[int] = []
    count = 0  # samples in the open batch
    total = 0  # their sum (tokens mode)
    for pos, length, k in zip(run_starts.tolist(), run_values, counts.tolist(), strict=True):
        per_budget = total_budget // length if length > 0 else n
        if padded:
            # (c + 1) * L <= budget  <=>  c + 1 <= budget // L
            room = min(per_budget, limit) - count
        else:
            room = min((total_budget - total) // length if length > 0 else n, limit - count)
        take = min(k, max(room, 0)) if count else 0
        count += take
        total += take * length
        rest = k - take
        if rest:
            cap = max(1, min(per_budget, limit))
            n_new = -(-rest // cap)
            firsts.append(pos + take)
            caps.append(cap)
            news.append(n_new)
            count = rest - (n_new - 1) * cap
            total = count * length
    return _progressions(firsts, caps, news)


def _progressions(firsts: list[int], steps: list[int], counts: list[int]) -> np.ndarray:
    """``concatenate([f + s * arange(c) for f, s, c in zip(...)])`` (every ``c >= 1``)
    in one pass: each value is the one before plus its run's step, a run's first
    value its own.

    >>> _progressions([0, 10], [3, 1], [3, 2]).tolist()
    [0, 3, 6, 10, 11]
    """
    step = np.repeat(np.asarray(steps, dtype=np.int64), np.asarray(counts, dtype=np.int64))
    heads = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(np.asarray(counts[:-1], dtype=np.int64), out=heads[1:])
    first = np.asarray(firsts, dtype=np.int64)
    # at a run's head: its first value minus the last value of the run before
    step[heads[1:]] = first[1:] - (first[:-1] + step[heads[1:] - 1] * (np.asarray(counts[:-1]) - 1))
    step[0] = first[0] if len(first) else 0
    return np.cumsum(step, out=step)


def pack_in_order(lengths_in_order: np.ndarray, budget: Budget) -> np.ndarray:
    """Batch start positions of the greedy packing of lengths taken in the given order.

    Every position ``i`` first gets the end of the batch that would start there
    (:func:`batch_ends`, vectorised); the batches are then the chain ``0, end[0],
    end[end[0]], ...`` (:func:`chain_in`).  The ends are found a window of
    :data:`CHAIN_WINDOW` positions at a time, as the chain reaches it: their work
    arrays are a window's, not the whole order's (fresh memory costs a page fault a
    page).

    >>> pack_in_order(np.array([5, 1, 1, 9, 2]), Budget(6)).tolist()
    [0, 1, 3, 4]
    """
    ls = np.asarray(lengths_in_order)
    if ls.dtype.kind not in "iu":  # (whole numbers of any width are read as they are)
        ls = ls.astype(np.int64)
    n = len(ls)
    if not n:
        return np.zeros(0, dtype=np.int64)
    ends = BatchEnds(ls, budget)
    pieces = []
    # the chain only moves forward: a window's ends, counted from its first position,
    # are followed until the chain leaves it
    lo = 0
    while lo < n:
        hi = min(n, lo + CHAIN_WINDOW)
        local = ends.between(lo, hi)
        local -= lo
        starts, past = chain_in(local)
        starts += lo
        pieces.append(starts)
        lo += past
    return np.concatenate(pieces)


def chain_in(local: np.ndarray) -> tuple[np.ndarray, int]:
    """The chain ``0, local[0], local[local[0]], ...`` while it stays below ``top =
    len(local)`` (``local[p] > p``: the end of the batch from ``p``), and the first of
    it at or past ``top``.

    Python follows only every :data:`CHAIN_JUMP`-th link, in a table of jumps over that
    many batches (by doubling: ``jump_2k = jump_k[jump_k]``, ``top`` absorbing); the
    links between are gathers, one per batch of a jump, over all the jumps at once.
    The last few batches, whose jump would leave the window, are followed one by one.

    >>> [x.tolist() if hasattr(x, "tolist") else x for x in chain_in(np.array([2, 3, 4, 5, 7]))]
    [[0, 2, 4], 7]
    """
    top = len(local)
    link = np.empty(top + 1, dtype=np.int64)
    np.minimum(local, top, out=link[:top])
    link[top] = top
    jump, size = link, 1
    while size < CHAIN_JUMP:
        jump = jump[jump]
        size *= 2
    heads = []
    pos = 0
    while (after := jump.item(pos)) < top:  # every batch of the jump inside the window
        heads.append(pos)
        pos = after
    rows = np.empty((len(heads), size), dtype=np.int64)
    if heads:
        rows[:, 0] = heads
        for k in range(1, size):
            rows[:, k] = link[rows[:, k - 1]]
    tail = []
    while pos < top:
        tail.append(pos)
        pos = local.item(pos)
    return np.concatenate([rows.reshape(-1), np.array(tail, dtype=np.int64)]), pos


#: Batches :func:`chain_in` jumps over at once (a power of 2).
CHAIN_JUMP = 16


#: Positions whose batch ends :func:`pack_in_order` finds at once, as it follows the
#: chain of batches.
CHAIN_WINDOW = 1 << 16


#: Batch sizes past the least one (``kmin``) that ``padded`` mode's sweep tries before it
#: leaves a range to binary lifting (:meth:`BatchEnds._swept`).
SWEEP_SIZES = 64


#: Positions handled at once by :func:`batch_ends` in ``padded`` mode (memory: about
#: 8 bytes x this x the number of doubling levels).
ENDS_CHUNK = 1 << 19


def batch_ends(ls: np.ndarray, budget: Budget) -> np.ndarray:
    """Per position ``i``: the end (exclusive) of the batch the rule would build from
    ``ls[i]`` on, i.e. ``i + c`` with ``c`` the most samples that fit (at least 1).

    Whether ``c`` samples fit is monotone in ``c`` (their sum, or count x longest, only
    grows), so: ``tokens`` mode finds ``c`` by a search in the prefix sums; ``padded``
    mode by binary lifting: range maxima ``M_j[p] = max(ls[p : p + 2^j])`` are built by
    doubling, and from ``c = 1`` each ``2^j``, largest first, is added when ``(c + 2^j)
    x max(longest so far, M_j[i + c]) <= budget``.  The levels stop at the first size
    ``2^j`` that no window of the data can hold (``2^j x M_j > budget`` everywhere).
    """
    n = len(ls)
    ends = BatchEnds(np.asarray(ls, dtype=np.int64), budget)
    if budget.mode != "padded":
        return ends.between(0, n)
    out = np.empty(n, dtype=np.int64)
    for a in range(0, n, ENDS_CHUNK):
        b = min(n, a + ENDS_CHUNK)
        out[a:b] = ends.between(a, b)
    return out


class BatchEnds:
    """:func:`batch_ends` of ``ls`` (whole numbers, none negative, of any integer type)
    for any range of positions, what the ranges share (the capped lengths; in
    ``tokens`` mode their prefix sums) made once."""

    def __init__(self, ls: np.ndarray, budget: Budget) -> None:
        n = len(ls)
        self.n = n
        self.limit = budget.max_batch_size if budget.max_batch_size is not None else n
        # A budget of n x the longest sample or more lets every batch through, as that
        # one does; a sample longer than the budget is alone in its batch whatever its
        # length, as one of budget + 1.  So the sums and products below stay within
        # int64 (for fewer than 2^62 tokens in all).
        top = int(ls.max())
        self.cap = cap = min(budget.tokens, n * top, 1 << 62)
        if top > cap + 1:  # (else they are their own capped lengths: no copy)
            ls = np.minimum(ls, np.asarray(cap + 1, dtype=ls.dtype))
        self.capped = ls
        self._wide: np.ndarray | None = None
        self.padded = budget.mode == "padded"
        if not self.padded:
            self.sums = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(ls, out=self.sums[1:])
            return
        low = int(ls.min())
        self.kmax = max(1, min(self.limit, n, cap // low if low > 0 else n))
        self.too_long = cap + 1  # stands for the positions past the end: nothing fits beside it
        self.small = self.too_long * 2 * self.kmax < 1 << 62  # count x longest fits in int64
        # every batch away from the end takes kmin samples: kmin x the longest of all fits
        high = min(top, cap + 1)
        self.kmin = max(1, min(self.limit, n, cap // high if high > 0 else n))
        narrow = (
            np.int16 if self.too_long < 1 << 15 else np.int32 if self.too_long < 1 << 31 else None
        )
        self.narrow = ls.astype(narrow, copy=False) if narrow is not None else None

    @property
    def ls(self) -> np.ndarray:
        """The capped lengths as int64 (made when first read: binary lifting's)."""
        if self._wide is None:
            self._wide = self.capped.astype(np.int64, copy=False)
        return self._wide

    def between(self, a: int, b: int) -> np.ndarray:
        """The ends of the batches starting at positions ``a`` to ``b - 1``."""
        idx = np.arange(a, b, dtype=np.int64)
        if not self.padded:
            end = np.searchsorted(self.sums, self.sums[a:b] + self.cap, side="right")
            end -= 1
            return np.clip(end, idx + 1, np.minimum(idx + self.limit, self.n), out=end)
        if self.narrow is None:
            return self._padded(a, b, idx)
        # the sweep needs kmin samples after a position (the last kmin - 1 have fewer)
        mid = max(a, min(b, self.n - self.kmin + 1))
        swept = self._swept(a, mid) if mid > a else idx[:0]
        if swept is None:
            return self._padded(a, b, idx)
        if mid == b:
            return swept
        return np.concatenate([swept, self._padded(mid, b, idx[mid - a :])])

    def _swept(self, a: int, b: int) -> np.ndarray | None:
        """``padded`` mode's ends over ``a:b`` (each with ``kmin`` samples after it)
        by a sweep over batch sizes, in the narrow lengths: the longest of the first
        ``kmin`` samples from each position (by doubling, as a sparse table), then
        ``M_c = max(M_(c-1), ls[i + c - 1])`` for ``c = kmin + 1, ...``; the batch takes
        ``c`` samples while ``M_c <= cap // c`` (monotone in ``c``: the count is ``kmin``
        plus the sizes that fit).  None when some batch still grows after
        :data:`SWEEP_SIZES` sizes (left to binary lifting)."""
        kmin, m = self.kmin, b - a
        last = min(self.limit, kmin + SWEEP_SIZES)  # the largest size tried
        narrow = cast(np.ndarray, self.narrow)
        window = np.full(m + last - 1, self.too_long, dtype=narrow.dtype)
        real = narrow[a : a + m + last - 1]
        window[: len(real)] = real
        top, width = window, 1  # top[i] = max(window[i : i + width])
        while 2 * width <= kmin:
            top = np.maximum(top[:-width], top[width:])
            width *= 2
        longest = np.maximum(top[:m], top[kmin - width : kmin - width + m])
        count = np.full(m, kmin, dtype=np.int64)
        for c in range(kmin + 1, last + 1):
            np.maximum(longest, window[c - 1 : c - 1 + m], out=longest)
            fits = longest <= self.cap // c
            if not fits.any():
                break
            count += fits
        else:
            if last < self.limit:  # (a batch took ``last`` samples: it may take more)
                return None
        count += np.arange(a, b, dtype=np.int64)
        return count

    def _padded(self, a: int, b: int, idx: np.ndarray) -> np.ndarray:
        """``padded`` mode's ends over ``a:b`` (``idx``: those positions), by binary
        lifting (:func:`batch_ends`)."""
        ls, kmax, cap, limit = self.ls, self.kmax, self.cap, self.limit
        window = np.concatenate([ls[a : min(self.n, b + kmax)], np.full(kmax + 1, self.too_long)])
        maxima = [window]
        # a level per doubling, up to the first size no batch starting here can hold
        # (then 1 + the sum of the steps below it reaches every count that fits)
        while (size := 1 << len(maxima)) <= kmax:
            prev = maxima[-1]
            wider = np.maximum(prev[: -(size // 2)], prev[size // 2 :])
            if int(wider[: b - a].min()) > cap // size:
                break
            maxima.append(wider)
        levels = len(maxima)
        count = np.ones(b - a, dtype=np.int64)  # samples taken from each position
        longest = window[: b - a].copy()
        at = idx - a
        for j in reversed(range(levels)):
            m = maxima[j][at + count]
            np.maximum(m, longest, out=m)
            more = count + (1 << j)
            ok = m * more <= cap if self.small else m <= cap // more
            if 1 << levels > limit:
                ok &= more <= limit
            np.copyto(count, more, where=ok)
            np.copyto(longest, m, where=ok)
        count += idx
        return count
