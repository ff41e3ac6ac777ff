"""The few tests and distributions the reports use, computed on :mod:`scipy.special`.

``scipy.stats`` adds about 0.45 s to a command's start-up (it parses its own docstrings;
see ``benchmarks/bench_commands.py``), about a fifth of ``dflash-diag spikes`` on the
sample run; the formulas here are the ones it applies:

- :func:`pearson`: ``r`` and the two-sided p-value of ``t = r sqrt((n - 2) / (1 - r²))``
  on ``n - 2`` degrees of freedom (``scipy.stats.pearsonr`` states it as a beta
  distribution of ``r``; the two are the same law);
- :func:`spearman`: the correlation of the ranks (tied values share their average rank)
  and the same t test (``scipy.stats.spearmanr``); :func:`spearman_of_ranks` from ranks
  already at hand;
- :func:`mean_above_zero_p`: the one-sample t test of "mean > 0",
  ``t = mean / (sd / sqrt(n))`` on ``n - 1`` degrees of freedom
  (``scipy.stats.ttest_1samp(..., alternative="greater")``);
- :func:`t_quantile`, :func:`f_sf`, :func:`f_quantile`, :func:`normal_sf`: Student's t,
  Fisher's F and the normal distribution;
- :func:`robust_lag1`: a lag-1 autocorrelation that a few spikes cannot move
  (Gnanadesikan & Kettenring, 1972, with the MAD as the scale);
- :func:`fit_t_tail`: Student's t (degrees of freedom and scale) fitted by maximum
  likelihood to the outer part of a sample of distances, for the spike detector's
  empirical null;
- :func:`t_sf`, :func:`t_quantiles`: Student's t over arrays;
- :func:`row_percentile`: ``np.nanpercentile`` along rows, in one sort.

The test suite checks each against ``scipy.stats``.
"""

from __future__ import annotations

import math
from typing import Any


def pearson(x: Any, y: Any) -> tuple[float, float]:
    """``(r, two-sided p)`` of two equally long samples (at least 3, neither constant).

    >>> round(pearson([1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 5.0, 9.0])[0], 4)
    0.9648
    """
    import numpy as np

    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(y, dtype=np.float64)
    da, db = a - a.mean(), b - b.mean()
    # the norms of the scaled deviations, scaled back (no overflow for huge values)
    sa, sb = np.abs(da).max(), np.abs(db).max()
    na, nb = sa * np.linalg.norm(da / sa), sb * np.linalg.norm(db / sb)
    r = float(np.sum((da / na) * (db / nb)))
    r = max(-1.0, min(1.0, r))
    return r, _r_pvalue(r, a.size)


def spearman(x: Any, y: Any) -> tuple[float, float]:
    """``(rho, two-sided p)``: the correlation of the average ranks (``np.corrcoef``, as
    scipy computes it: exactly +-1 for ranks in the same or the reverse order)."""
    return spearman_of_ranks(average_ranks(x), average_ranks(y))


def spearman_of_ranks(rx: Any, ry: Any) -> tuple[float, float]:
    """:func:`spearman` from the samples' :func:`average_ranks` (the same numbers): for a
    caller that correlates one sample with several, ranking it once.

    >>> x, y = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 5.0, 9.0]
    >>> spearman_of_ranks(average_ranks(x), average_ranks(y)) == spearman(x, y)
    True
    """
    import numpy as np

    rho = float(np.corrcoef(rx, ry)[0, 1])
    rho = max(-1.0, min(1.0, rho))
    return rho, _r_pvalue(rho, np.asarray(rx).size)


def average_ranks(x: Any) -> Any:
    """Ranks 1..n, tied values sharing the mean of their ranks (``rankdata``'s default).

    >>> average_ranks([10, 30, 20, 20]).tolist()
    [1.0, 4.0, 2.5, 2.5]
    """
    import numpy as np

    a = np.asarray(x)
    # (any sort will do: tied values share one mean rank whatever their order)
    order = np.argsort(a)
    s = a[order]
    new = np.concatenate([[True], s[1:] != s[:-1]]) if a.size else np.zeros(0, dtype=bool)
    group = np.cumsum(new) - 1  # tie group of each sorted position
    bounds = np.concatenate([np.flatnonzero(new), [a.size]])
    mean_rank = (bounds[:-1] + bounds[1:] + 1) / 2.0  # of positions lo..hi-1, from 1
    ranks = np.empty(a.size, dtype=np.float64)
    ranks[order] = mean_rank[group]
    return ranks


def _r_pvalue(r: float, n: int) -> float:
    from scipy import special

    df = n - 2
    if abs(r) >= 1.0:
        return 0.0
    t = r * math.sqrt(df / ((1.0 - r) * (1.0 + r)))
    return float(2.0 * special.stdtr(df, -abs(t)))


def mean_above_zero_p(values: Any) -> float:
    """One-sided p-value of "the mean is above 0" (Student's t; at least 2 values, not
    all equal)."""
    import numpy as np
    from scipy import special

    v = np.asarray(values, dtype=np.float64)
    n = v.size
    t = float(v.mean()) / (float(v.std(ddof=1)) / math.sqrt(n))
    return float(special.stdtr(n - 1, -t))


def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t with ``df`` degrees of freedom."""
    from scipy import special

    return float(special.stdtrit(df, q))


def f_sf(f: float, df1: float, df2: float) -> float:
    """``P(F > f)`` for Fisher's F with ``(df1, df2)`` degrees of freedom."""
    from scipy import special

    return float(special.fdtrc(df1, df2, f))


def f_quantile(q: float, df1: float, df2: float) -> float:
    """The ``q`` quantile of Fisher's F with ``(df1, df2)`` degrees of freedom."""
    from scipy import special

    return float(special.fdtri(df1, df2, q))


def normal_sf(z: float) -> float:
    """``P(Z > z)`` for a standard normal ``Z``."""
    from scipy import special

    return float(special.ndtr(-z))


def robust_lag1(x: Any) -> float:
    """Lag-1 autocorrelation of ``x`` (NaN ignored) that a few outliers cannot move.

    With ``u = x[1:] / S(x[1:])`` and ``v = x[:-1] / S(x[:-1])`` standardised by the
    normal-consistent MAD ``S`` (1.4826 x MAD):
    ``rho = (S(u + v)^2 - S(u - v)^2) / (S(u + v)^2 + S(u - v)^2)``, the identity
    ``cov(u, v) = (var(u + v) - var(u - v)) / 4`` with robust variances (Gnanadesikan &
    Kettenring, 1972, "Robust estimates, residuals, and outlier detection with
    multiresponse data", Biometrics 28).  A spike touches two pairs of ``(u, v)``, so it
    barely moves the medians.  NaN when fewer than 8 finite pairs or a constant series.

    >>> import numpy as np
    >>> e = np.random.default_rng(0).standard_normal(20_000)
    >>> x = np.empty_like(e); x[0] = e[0]
    >>> for i in range(1, e.size): x[i] = 0.6 * x[i - 1] + e[i]
    >>> round(robust_lag1(x), 1)
    0.6
    """
    import numpy as np

    a = np.asarray(x, dtype=np.float64)
    u, v = a[1:], a[:-1]
    ok = np.isfinite(u) & np.isfinite(v)
    u, v = u[ok], v[ok]
    if u.size < 8:
        return float("nan")

    def mad_sd(w: Any) -> float:
        return float(1.4826 * np.median(np.abs(w - np.median(w))))

    su, sv = mad_sd(u), mad_sd(v)
    if su <= 0 or sv <= 0:
        return float("nan")
    plus, minus = mad_sd(u / su + v / sv) ** 2, mad_sd(u / su - v / sv) ** 2
    if plus + minus <= 0:
        return float("nan")
    return float((plus - minus) / (plus + minus))


#: Degrees of freedom :func:`fit_t_tail` chooses from (``inf``: the normal).
HALF_T_DFS: tuple[float, ...] = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0,
                                 20.0, 30.0, 50.0, 100.0, float("inf"))  # fmt: skip


def t_sf(t: Any, df: Any) -> Any:
    """``P(T > t)`` for Student's t with ``df`` degrees of freedom (arrays broadcast;
    ``df = inf``: the normal)."""
    import numpy as np
    from scipy import special

    t, df = np.broadcast_arrays(np.asarray(t, dtype=np.float64), np.asarray(df, dtype=np.float64))
    normal = np.isinf(df)
    # (each law only where it is read: the same values as both everywhere, one kept)
    if not normal.any():
        return np.asarray(special.stdtr(df, -t))
    if normal.all():
        return np.asarray(special.ndtr(-t))
    out = np.empty(t.shape)
    out[normal] = special.ndtr(-t[normal])
    out[~normal] = special.stdtr(df[~normal], -t[~normal])
    return out


def t_quantiles(q: Any, df: Any) -> Any:
    """The ``q`` quantiles of Student's t with ``df`` degrees of freedom (arrays
    broadcast)."""
    import numpy as np
    from scipy import special

    return special.stdtrit(np.asarray(df, dtype=np.float64), np.asarray(q, dtype=np.float64))


#: Exceedances :func:`fit_t_tail` fits at most (every k-th order statistic beyond).
TAIL_POINTS = 2000


def fit_t_tail(d: Any, share: float = 0.4) -> tuple[float, float, float, float]:
    """A Student t fitted to the outer ``share`` of the non-negative values ``d`` only:
    ``(df, scale, u, p_u)``, with ``u`` the ``1 - share`` quantile of ``d`` and ``p_u``
    the share of ``d`` at or above it.  ``P(D >= c) = p_u sf(c / scale) / sf(u /
    scale)`` for ``c >= u``, ``sf`` the t's survival function with ``df`` degrees of
    freedom (:func:`t_sf`): the body of the law is left to the data, the tail to the
    fit (maximum likelihood of the exceedances, conditional on ``d >= u``; ``df`` from
    :data:`HALF_T_DFS`, ``scale`` on a grid of 61 values from 0.25 to 4 times the
    normal-consistent ``u``-based guess; at most :data:`TAIL_POINTS` evenly spaced
    order statistics of the exceedances).  At least 20 exceedances, else all NaN.

    >>> import numpy as np
    >>> d = np.abs(np.random.default_rng(2).standard_t(3, 40_000))
    >>> df, scale, u, p_u = fit_t_tail(d)
    >>> df
    3.0
    """
    import numpy as np
    from scipy import special

    a = np.asarray(d, dtype=np.float64)
    a = np.abs(a[np.isfinite(a)])
    nan = float("nan")
    u = float(np.quantile(a, 1 - share)) if a.size else nan
    ex = a[a >= u] if a.size else a
    if ex.size < 20 or not u > 0:
        return nan, nan, nan, nan
    if ex.size > TAIL_POINTS:  # every k-th order statistic: the same shape, less work
        ex = np.sort(ex)[:: -(-ex.size // TAIL_POINTS)]
    guess = u / float(special.ndtri(1 - share / 2))
    scales = guess * np.geomspace(0.25, 4.0, 61)
    best = (-np.inf, nan, nan)
    for df in HALF_T_DFS:
        for scale in scales:
            if np.isinf(df):
                logf = -0.5 * (ex / scale) ** 2
                log_s = np.log(special.ndtr(-u / scale))
            else:
                logf = -(df + 1) / 2 * np.log1p((ex / scale) ** 2 / df)
                log_s = np.log(special.stdtr(df, -u / scale))
                logf = logf + special.gammaln((df + 1) / 2) - special.gammaln(df / 2)
                logf = logf - 0.5 * np.log(df * np.pi)
            if np.isinf(df):
                logf = logf - 0.5 * np.log(2 * np.pi)
            ll = float(np.sum(logf - np.log(scale)) - ex.size * log_s)
            if ll > best[0]:
                best = (ll, float(df), float(scale))
    return best[1], best[2], u, float(np.mean(a >= u))


def row_percentile(values: Any, pct: float) -> Any:
    """``np.nanpercentile(values, pct, axis=1)`` of a 2-D float array (linear
    interpolation between order statistics: position ``(n - 1) pct / 100`` among a row's
    ``n`` finite values), NaN for a row with none, in one sort of the array: numpy's
    NaN-aware reduction falls back to one call per row.

    >>> import numpy as np
    >>> row_percentile(np.array([[1.0, np.nan, 3.0], [np.nan] * 3]), 50.0).tolist()
    [2.0, nan]
    """
    import numpy as np

    rows = np.sort(values, axis=1)  # NaN last
    n = np.isfinite(values).sum(axis=1)
    out = np.full(values.shape[0], np.nan)
    has = np.flatnonzero(n > 0)
    pos = (n[has] - 1) * (pct / 100.0)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, n[has] - 1)
    a, b = rows[has, lo], rows[has, hi]
    out[has] = a + (b - a) * (pos - lo)
    return out
