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
:func:`pack_in_order` to any order with a plain loop.  Both return batch start positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..records import ScheduleParams


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


def stable_argsort(lengths: np.ndarray) -> np.ndarray:
    """Indices that sort ``lengths`` ascending, equal lengths keeping index order, as
    Python's ``sorted(enumerate(lens), key=lambda x: x[1])``.

    Lengths below 2**16 are sorted as uint16, where numpy's stable sort is a radix sort
    (several times faster than the merge sort it uses for int64).
    """
    lengths = np.asarray(lengths)
    if lengths.size and 0 <= int(lengths.min()) and int(lengths.max()) < 2**16:
        order = np.argsort(lengths.astype(np.uint16), kind="stable")
    else:
        order = np.argsort(lengths, kind="stable")
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
    values = ls[run_starts].tolist()
    limit = budget.max_batch_size if budget.max_batch_size is not None else n
    padded = budget.mode == "padded"
    total_budget = budget.tokens
    pieces: list[np.ndarray] = []
    count = 0  # samples in the open batch
    total = 0  # their sum (tokens mode)
    for pos, length, k in zip(run_starts.tolist(), values, run_counts.tolist(), strict=True):
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
            pieces.append(pos + take + cap * np.arange(n_new, dtype=np.int64))
            count = rest - (n_new - 1) * cap
            total = count * length
    return np.concatenate(pieces)


def pack_in_order(lengths_in_order: np.ndarray, budget: Budget) -> np.ndarray:
    """Batch start positions of the greedy packing of lengths taken in the given order.

    A plain loop, with one shortcut that does not change the result: with ``M`` the
    longest length of the input, any ``safe = token_budget // M`` samples fit together
    (``safe * M <= budget`` bounds both the padded cost and the sum), so each batch first
    takes ``safe`` samples at once and then goes on one sample at a time.

    >>> pack_in_order(np.array([5, 1, 1, 9, 2]), Budget(6)).tolist()
    [0, 1, 3, 4]
    """
    ls = np.asarray(lengths_in_order, dtype=np.int64).tolist()
    n = len(ls)
    if not n:
        return np.zeros(0, dtype=np.int64)
    limit = budget.max_batch_size if budget.max_batch_size is not None else n
    cap = budget.tokens
    padded = budget.mode == "padded"
    top = max(ls)
    safe = max(1, min(cap // top if top > 0 else n, limit))
    starts = []
    pos = 0
    while pos < n:
        starts.append(pos)
        end = min(pos + safe, n)
        head = ls[pos:end]
        count, longest, total = end - pos, max(head), sum(head)
        pos = end
        while pos < n:
            length = ls[pos]
            longest_next = longest if longest > length else length
            cost = (count + 1) * longest_next if padded else total + length
            if cost > cap or count + 1 > limit:
                break
            count += 1
            total += length
            longest = longest_next
            pos += 1
    return np.array(starts, dtype=np.int64)
