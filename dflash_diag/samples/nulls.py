"""The null a sample is tested against, and the multiple-testing correction.

**Exchangeability of points.**  Under the null the sample's ``k`` appearances are ``k``
of the ``n`` usable points drawn without replacement, any ``k`` equally likely (a
permutation of the z's across points, the membership kept).  Let ``m`` be the
``(a + 1)``-th smallest z of its appearances (``a = 0``: the minimum) and
``n_ge = #{points with z >= m}`` (ties counted in: the p-value stays valid).  The
statistic is at least ``m`` exactly when at least ``k - a`` of the ``k`` draws fall among
those ``n_ge`` points, so

    p = P(X >= k - a),   X ~ Hypergeometric(n, n_ge, k)

and for the minimum, ``p = C(n_ge, k) / C(n, k) = prod_{j<k} (n_ge - j) / (n - j)``,
computed as ``exp`` of a difference of log-gamma values (vectorised; its absolute error
in ``log p`` is about ``1e-16 * log(n!)``, under ``1e-8`` for ``n <= 1e7``).

:func:`bh_qvalues` is Benjamini & Hochberg (1995): ``q_(i) = min_{j >= i} p_(j) m / j``
over the ``m`` p-values tested, valid under independence and positive regression
dependence (Benjamini & Yekutieli, 2001); samples sharing points are positively
dependent (a high point raises them all).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..arrays import unique_values


def order_pvalue(
    k: np.ndarray, n_ge: np.ndarray, n: int | np.ndarray, allow_low: int = 0
) -> np.ndarray:
    """``P(X >= k - allow_low)`` for ``X ~ Hypergeometric(n, n_ge, k)``, float64, in (0, 1].

    :param k: int ``[m]``, appearances (distinct usable points), ``allow_low < k <= n``.
    :param n_ge: int ``[m]``, usable points with z at least the statistic (``>= k - a``).
    :param n: usable points (or one count per sample).
    :param allow_low: appearances allowed below the statistic (0: the minimum).

    A p is a function of ``(k, n_ge)`` for one ``n``: with many samples and few distinct
    pairs (:func:`_distinct_pairs`) each pair is computed once, the same bits.

    >>> order_pvalue(np.array([2]), np.array([3]), 10).round(6).tolist()  # 3*2 / (10*9)
    [0.066667]
    """
    k, n_ge = np.asarray(k), np.asarray(n_ge)
    pairs = _distinct_pairs(k, n_ge, n)
    if pairs is None:
        return _order_pvalue(k, n_ge, n, allow_low)
    uk, ug, inverse = pairs
    return _order_pvalue(uk, ug, n, allow_low)[inverse]


def _distinct_pairs(
    k: np.ndarray, n_ge: np.ndarray, n: int | np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The distinct ``(k, n_ge)`` pairs and each sample's pair (``uk[inverse] == k``),
    found with a presence table over ``key = k (max n_ge + 1) + n_ge``, not a sort;
    None when that table would be large against the samples, or ``n`` varies."""
    if np.ndim(n) != 0 or k.size < 1024 or k.shape != n_ge.shape:
        return None
    if k.dtype.kind not in "iu" or n_ge.dtype.kind not in "iu":
        return None
    if min(int(k.min()), int(n_ge.min())) < 0:
        return None
    width = int(n_ge.max()) + 1
    n_keys = (int(k.max()) + 1) * width
    if n_keys > 4 * k.size:
        return None
    key = k.astype(np.int64)  # (in place: one array as long as the samples, not three)
    key *= width
    key += n_ge
    present = np.zeros(n_keys, dtype=bool)
    present[key] = True
    keys = np.flatnonzero(present)
    slot = np.zeros(n_keys, dtype=np.int32 if keys.size < 2**31 else np.int64)
    slot[keys] = np.arange(keys.size, dtype=slot.dtype)
    return keys // width, keys % width, slot[key]


def _order_pvalue(
    k: np.ndarray, n_ge: np.ndarray, n: int | np.ndarray, allow_low: int
) -> np.ndarray:
    """:func:`order_pvalue`, sample by sample."""
    # (n_ge >= k - a always holds for a sample's own points; the floor keeps a count
    # that lost some to explaining away from a log-gamma of a negative integer, and
    # can only raise p)
    if allow_low == 0:
        logp = _log_ratio(np.asarray(k), np.asarray(n_ge), np.asarray(n))
        return np.minimum(np.exp(np.minimum(logp, 0.0)), 1.0)
    ints = all(np.asarray(a).dtype.kind in "iu" for a in (k, n_ge, n))
    k = np.asarray(k, dtype=np.float64)
    n_ge = np.maximum(np.asarray(n_ge, dtype=np.float64), k - allow_low)
    if allow_low <= EXACT_TERMS:
        nf = np.asarray(n, dtype=np.float64)
        top = max(nf.max(initial=0), n_ge.max(initial=0), k.max(initial=0))
        lg = _log_factorial(int(top) if ints and k.size else -1, k.size)
        p = _tail_terms(k, n_ge, nf, allow_low, lg)
    else:
        from scipy.stats import hypergeom

        p = np.asarray(hypergeom.sf(k - allow_low - 1, n, n_ge, k), dtype=np.float64)
    return np.clip(p, np.finfo(np.float64).tiny, 1.0)


def _log_factorial(top: int, size: int) -> Callable[[np.ndarray], np.ndarray]:
    """``lg(x) = gammaln(x + 1)``: for whole numbers ``0 .. top`` (``top >= 0``) a look-up
    in one table of ``gammaln`` of the same floats (the same bits), when the table is
    smaller than the calls it saves (a value out of range reads a wrong number: the
    caller masks those); else ``gammaln`` itself."""
    from scipy.special import gammaln

    if top < 0 or top + 1 > 8 * size:
        return lambda x: gammaln(x + 1)
    table = gammaln(np.arange(top + 1, dtype=np.float64) + 1)
    return lambda x: table[np.clip(x, 0, top).astype(np.intp)]


def _log_ratio(k: np.ndarray, n_ge: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``log C(n_ge, k) - log C(n, k)``, ``n_ge`` floored at ``k``, as ``lg(n_ge) -
    lg(n_ge - k) - lg(n) + lg(n - k)``, ``lg`` :func:`_log_factorial`'s: a table when
    every count is an integer in range (``0 <= k <= n``), else ``gammaln`` per sample
    (the same bits either way)."""
    ints = all(a.dtype.kind in "iu" for a in (k, n_ge, n))
    kf = k.astype(np.float64)
    ge = np.maximum(n_ge.astype(np.float64), kf)
    nf = n.astype(np.float64)
    in_range = ints and k.size and min((nf - kf).min(initial=0), kf.min(initial=0)) >= 0
    top = int(max(nf.max(initial=0), ge.max(initial=0))) if in_range else -1
    lg = _log_factorial(top, k.size)
    return lg(ge) - lg(ge - kf) - lg(nf) + lg(nf - kf)


#: ``allow_low`` up to this is summed term by term (:func:`_tail_terms`); above it
#: scipy's hypergeometric survival function is called.
EXACT_TERMS = 8


def _tail_terms(
    k: np.ndarray,
    n_ge: np.ndarray,
    n: np.ndarray,
    a: int,
    lg: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray:
    """``P(X >= k - a)`` as the sum of its ``a + 1`` terms,
    ``C(n_ge, j) C(n - n_ge, k - j) / C(n, k)`` for ``j = k - a .. k`` (a term whose
    binomials are out of range is 0), each from log-gamma values: one vectorised pass
    per term instead of a scipy call over every sample; ``lg`` is
    :func:`_log_factorial`'s."""

    def log_choose(big: np.ndarray, r: np.ndarray) -> np.ndarray:
        return lg(big) - lg(r) - lg(big - r)

    total = np.zeros(k.shape)
    rest = n - n_ge
    log_all = log_choose(np.broadcast_to(n, k.shape).astype(np.float64), k)
    for d in range(a + 1):  # j = k - d draws among the n_ge
        j = k - d
        ok = (j >= 0) & (j <= n_ge) & (d <= rest)
        with np.errstate(invalid="ignore"):
            t = log_choose(n_ge, j) + log_choose(rest, np.full(k.shape, float(d))) - log_all
        total += np.where(ok, np.exp(np.where(ok, t, 0.0)), 0.0)
    return total


def bh_qvalues(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg q-values of ``p`` (NaN: not tested, left NaN and not counted).

    >>> bh_qvalues(np.array([0.01, 0.04, np.nan, 0.03])).round(4).tolist()
    [0.03, 0.04, nan, 0.04]
    """
    p = np.asarray(p, dtype=np.float64)
    q = np.full(p.shape, np.nan)
    tested = np.flatnonzero(np.isfinite(p))
    m = tested.size
    if m == 0:
        return q
    # any sort will do: tied p's get the same q whatever their order (q_(i) for a tie
    # is min over j >= the tie's last position)
    order = np.argsort(p[tested])
    ranked = p[tested][order] * m / np.arange(1, m + 1)
    ranked = np.minimum.accumulate(ranked[::-1])[::-1]
    q[tested[order]] = np.minimum(ranked, 1.0)
    return q


def bh_qvalues_keyed(p: np.ndarray, key: np.ndarray, n_keys: int) -> np.ndarray:
    """:func:`bh_qvalues` of ``p`` (the same bits) when ``p`` is a function of an integer
    ``key`` in ``0 .. n_keys - 1`` (equal keys, equal p; ``key < 0``: not, taken one by
    one), sorting the distinct values only.

    Under BH every p of a tie gets the q of the tie's last position ``e``, ``min(p m /
    e, the q of the next tie)``; so the distinct values, each with its count, give
    every q.  Falls back to :func:`bh_qvalues` when ``n_keys`` is large.

    >>> p = np.array([0.01, 0.04, np.nan, 0.04, 0.5])
    >>> bh_qvalues_keyed(p, np.array([0, 1, 1, 1, -1]), 2).tolist()
    [0.04, 0.05333333333333334, nan, 0.05333333333333334, 0.5]
    """
    p = np.asarray(p, dtype=np.float64)
    if n_keys > 4 * p.size + 1024:
        return bh_qvalues(p)
    q = np.full(p.shape, np.nan)
    tested = np.flatnonzero(np.isfinite(p))
    m = tested.size
    if m == 0:
        return q
    kt, pt = key[tested], p[tested]
    plain = kt >= 0
    counts = np.bincount(kt[plain], minlength=n_keys)
    present = np.flatnonzero(counts)
    value_of_key = np.zeros(n_keys)
    value_of_key[kt[plain]] = pt[plain]
    odd = ~plain
    values = np.concatenate([value_of_key[present], pt[odd]])
    order = np.argsort(values)
    v = values[order]
    end = np.cumsum(np.concatenate([counts[present], np.ones(int(odd.sum()), np.int64)])[order])
    last = np.ones(v.size, dtype=bool)
    last[:-1] = v[1:] != v[:-1]
    ranked = v[last] * m / end[last]
    ranked = np.minimum(np.minimum.accumulate(ranked[::-1])[::-1], 1.0)
    q_distinct = np.empty(v.size)
    q_distinct[order] = ranked[np.cumsum(last) - last]
    q_of_key = np.zeros(n_keys)
    q_of_key[present] = q_distinct[: present.size]
    q[tested[plain]] = q_of_key[kt[plain]]
    q[tested[odd]] = q_distinct[present.size :]
    return q


def bh_below(p: np.ndarray, level: float) -> np.ndarray:
    """``bh_qvalues(p) <= level``, sorting only the p-values at most ``level``.

    Exact: for ``p_(j) > level``, ``p_(j) m / j > level`` (``j <= m``), so those terms
    never bring a q to ``level`` or below.

    >>> bh_below(np.array([0.01, 0.04, np.nan, 0.03, 0.9]), 0.04).tolist()
    [True, False, False, False, False]
    """
    p = np.asarray(p, dtype=np.float64)
    finite = np.isfinite(p)
    m = int(finite.sum())
    small = np.sort(p[finite & (p <= level)])  # the values only: no arg-sort
    # q_(i) <= level exactly for the positions i up to the last j with p_(j) m / j <=
    # level; a tie never straddles it (p m / (j + 1) <= p m / j), so those are the
    # p's at most p_(j)
    hits = np.flatnonzero(small * m / np.arange(1, small.size + 1) <= level)
    if hits.size == 0:
        return np.zeros(p.shape, dtype=bool)
    return finite & (p <= small[hits[-1]])


def median_interval_ranks(k: np.ndarray, level: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
    """The distribution-free interval for a median from order statistics.

    ``[x_(l), x_(k + 1 - l)]`` (1-based) covers the median with probability
    ``1 - 2 F(l - 1)``, ``F`` the Binomial(k, 1/2) CDF; ``l`` is the largest rank with
    coverage at least ``level``, or 1 (the range) when ``k`` is too small for it.

    :returns: ``(l, coverage)``: int64 and float64, aligned with ``k`` (``k >= 1``).

    >>> l, c = median_interval_ranks(np.array([3, 10]))
    >>> l.tolist(), c.round(4).tolist()
    ([1, 2], [0.75, 0.9785])
    """
    from scipy.special import bdtr

    k = np.asarray(k, dtype=np.int64)
    out_l = np.ones(k.shape, dtype=np.int64)
    for kk in unique_values(k):
        ls = np.arange(1, (kk + 1) // 2 + 1)
        cover = 1.0 - 2.0 * bdtr(ls - 1, kk, 0.5)
        ok = ls[cover >= level]
        out_l[k == kk] = ok.max() if ok.size else 1
    coverage = 1.0 - 2.0 * bdtr(out_l - 1, k, 0.5)
    return out_l, coverage
