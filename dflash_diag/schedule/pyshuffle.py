"""``random.Random.shuffle`` of ``list(range(n))``, reproduced bit for bit with numpy.

CPython's shuffle (``Lib/random.py``, the same in 3.6-3.13) is a backward Fisher-Yates::

    for i in reversed(range(1, n)):
        j = _randbelow(i + 1)       # k = (i + 1).bit_length(); r = getrandbits(k)
        x[i], x[j] = x[j], x[i]     # while r >= i + 1: r = getrandbits(k)

and ``getrandbits(k)`` for ``k <= 32`` is one 32-bit MT19937 output shifted right by
``32 - k``.  :func:`shuffled_range` does the same in two vectorised parts, which together
take about a third of the time of the Python loop on a million-element list:

- :func:`draws`: the ``j`` of every step from the same MT19937 stream (numpy's
  ``MT19937`` loaded with the ``Random``'s state, which is the same generator).  A word
  is accepted when its candidate is below the step's bound; the bound falls by one per
  accepted word, so the decisions are taken block by block: in a block of ``b`` steps
  from bound ``m``, a candidate ``<= m - b`` is accepted whatever came before, one
  ``>= m`` rejected; only those in between (about ``b / m`` of the words) are decided
  one by one.  Below :data:`SMALL` the steps go one at a time.  The ``Random`` is then
  advanced by exactly the words used (``setstate``), so later draws continue the stream.
- :func:`apply_swaps`: the list the swaps make.  Step ``s`` (position ``s``, done once
  it is passed) receives what was at position ``j_s``: the value that the last earlier
  step aiming at ``j_s`` put there, itself the value its own position held before it,
  and so on back to an untouched position, whose value is its index.  Those chains are
  followed by pointer doubling over the steps grouped by target.

:func:`is_exact` compares both with ``random.shuffle`` itself on a small case; the
shufflers use this module only when it holds (else ``random.shuffle``).
"""

from __future__ import annotations

import random
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

#: below this bound the steps are drawn one at a time (a few thousand Python steps)
SMALL = 4096
#: the largest ``n`` handled (``getrandbits`` takes one 32-bit word below 2**32)
MAX_N = 2**31


def _bit_generator(state: tuple) -> np.random.MT19937:  # type: ignore[type-arg]
    """numpy's MT19937 in the state of a ``random.Random`` (``getstate()``)."""
    import numpy as np

    bits = np.random.MT19937()
    key = np.array(state[1][:624], dtype=np.uint32)
    bits.state = {"bit_generator": "MT19937", "state": {"key": key, "pos": state[1][624]}}
    return bits


def draws(rnd: random.Random, n: int) -> np.ndarray:
    """The ``j`` that ``rnd.shuffle`` of a length-``n`` list draws, for ``i = n - 1``
    down to 1 (int64, ``n - 1`` values); ``rnd`` advances as the shuffle advances it."""
    import numpy as np

    state = rnd.getstate()
    bits = _bit_generator(state)
    out = np.empty(max(n - 1, 0), dtype=np.int64)
    words, at, used, done, m = np.zeros(0, dtype=np.uint64), 0, 0, 0, n
    while m > SMALL:
        k = m.bit_length()
        b = max(1, min(m // 64, m - max(1 << (k - 1), SMALL)))  # (one k in a block)
        want = (2 * b << k) // m + 256
        if len(words) - at < want:
            words = np.concatenate([words[at:], bits.random_raw(want + (1 << 16))])
            used, at = used + at, 0
        got, took = _block(words[at : at + want], k, m, b, out[done:])
        done, m, at = done + got, m - got, at + took
    used += at + _one_by_one(words[at:].tolist(), bits, out[done:], m)
    after = _bit_generator(state)
    after.random_raw(used)
    key, pos = after.state["state"]["key"], after.state["state"]["pos"]
    rnd.setstate((state[0], (*(int(x) for x in key), int(pos)), state[2]))
    return out


def _block(words: np.ndarray, k: int, m: int, b: int, out: np.ndarray) -> tuple[int, int]:
    """Up to ``b`` steps from bound ``m`` (all of bit length ``k``) over ``words``:
    writes their ``j`` to ``out``; returns ``(steps done, words used)``."""
    import numpy as np

    c = (words >> np.uint64(32 - k)).astype(np.int64)
    accepted = c <= m - b  # (below every bound of the block)
    unsure = np.flatnonzero((c > m - b) & (c < m))
    if unsure.size:
        before: list[int] = (np.cumsum(accepted)[unsure] - accepted[unsure]).tolist()
        extra = 0
        for t, a, x in zip(unsure.tolist(), before, c[unsure].tolist(), strict=True):
            if a + extra >= b:  # (the block ended before this word)
                break
            if x < m - a - extra:
                accepted[t] = True
                extra += 1
    idx = np.flatnonzero(accepted)[:b]
    out[: len(idx)] = c[idx]
    return len(idx), (int(idx[-1]) + 1 if len(idx) == b else len(words))


def _one_by_one(words: list[int], bits: np.random.MT19937, out: np.ndarray, m: int) -> int:
    """The steps from bound ``m`` down to 2, one word at a time (``words`` first, then
    ``bits``); returns the words used."""
    used = 0
    q = 0
    while m >= 2:
        shift = 32 - m.bit_length()
        while True:
            w = words[used] if used < len(words) else int(bits.random_raw())
            used += 1
            if (w >> shift) < m:
                break
        out[q] = w >> shift
        q += 1
        m -= 1
    return used


def apply_swaps(js: np.ndarray, n: int) -> np.ndarray:
    """``x`` after ``x[i], x[j] = x[j], x[i]`` for ``i = n - 1 .. 1`` (``j = js[n - 1 -
    i]``) on ``x = list(range(n))``, as an int64 array, without the Python loop."""
    import numpy as np

    from .packing import stable_argsort

    if n <= 1:
        return np.arange(n, dtype=np.int64)
    index = np.arange(n, dtype=np.int64)
    j = np.empty(n, dtype=np.int64)
    j[0] = n  # (no step 0: sorts last, aims nowhere)
    j[1:] = js[::-1]  # j[s], the position step s swaps with (s = 1 .. n - 1)
    order = stable_argsort(j)  # steps by target, ascending within one
    sj = j[order]
    same = sj[1:] == sj[:-1]
    later = np.full(n, -1, dtype=np.int64)  # the next step aiming at the same position
    later[order[:-1][same]] = order[1:][same]
    counts = np.bincount(j[1:], minlength=n)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    first = np.where(counts > 0, order[np.minimum(starts, n - 1)], -1)  # first aiming at p
    del order, sj, same, counts, starts  # (a big bucket's shuffle: fewer arrays at once)
    # before step s, position s holds what step feed[s] moved there (or s, untouched)
    feed = first.copy()
    own = feed == index  # (step s aims at s itself: the next one does)
    feed[own] = later[feed[own]]
    value = np.where(feed >= 0, feed, index)
    del feed, own
    while True:  # pointer doubling: every chain to its untouched end
        nxt = value[value]
        if np.array_equal(nxt, value):
            break
        value = nxt
    x = np.empty(n, dtype=np.int64)
    after = later[1:]
    x[1:] = np.where(after >= 0, value[np.maximum(after, 0)], j[1:])
    x[0] = value[first[0]] if first[0] >= 0 else 0
    return x


def shuffled_range(rnd: random.Random, n: int) -> np.ndarray:
    """``x = list(range(n)); rnd.shuffle(x)`` as an int64 array, ``rnd`` advanced the
    same (needs ``n <= MAX_N``).

    >>> a, b = random.Random(3), random.Random(3)
    >>> x = list(range(10)); a.shuffle(x)
    >>> shuffled_range(b, 10).tolist() == x, a.getstate() == b.getstate()
    (True, True)
    """
    return apply_swaps(draws(rnd, n), n)


@cache
def is_exact() -> bool:
    """Whether :func:`shuffled_range` gives ``random.shuffle``'s list and state on this
    Python (two shuffles of 9000 from one generator: the blocks, the steps one by one,
    the state carried)."""
    mine, theirs = random.Random(20261202), random.Random(20261202)
    for n in (9000, 5000):
        x = list(range(n))
        theirs.shuffle(x)
        if shuffled_range(mine, n).tolist() != x:
            return False
    return mine.getstate() == theirs.getstate()
