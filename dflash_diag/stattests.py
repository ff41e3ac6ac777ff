"""The few tests and distributions the reports use, computed on :mod:`scipy.special`.

``scipy.stats`` adds about 0.45 s to a command's start-up (it parses its own docstrings;
see ``benchmarks/bench_commands.py``), about a fifth of ``dflash-diag spikes`` on the
sample run; the formulas here are the ones it applies:

- :func:`pearson`: ``r`` and the two-sided p-value of ``t = r sqrt((n - 2) / (1 - r²))``
  on ``n - 2`` degrees of freedom (``scipy.stats.pearsonr`` states it as a beta
  distribution of ``r``; the two are the same law);
- :func:`spearman`: the correlation of the ranks (tied values share their average rank)
  and the same t test (``scipy.stats.spearmanr``);
- :func:`mean_above_zero_p`: the one-sample t test of "mean > 0",
  ``t = mean / (sd / sqrt(n))`` on ``n - 1`` degrees of freedom
  (``scipy.stats.ttest_1samp(..., alternative="greater")``);
- :func:`t_quantile`, :func:`f_sf`, :func:`f_quantile`, :func:`normal_sf`: Student's t,
  Fisher's F and the normal distribution.

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
    import numpy as np

    rx, ry = average_ranks(x), average_ranks(y)
    rho = float(np.corrcoef(rx, ry)[0, 1])
    rho = max(-1.0, min(1.0, rho))
    return rho, _r_pvalue(rho, rx.size)


def average_ranks(x: Any) -> Any:
    """Ranks 1..n, tied values sharing the mean of their ranks (``rankdata``'s default).

    >>> average_ranks([10, 30, 20, 20]).tolist()
    [1.0, 4.0, 2.5, 2.5]
    """
    import numpy as np

    a = np.asarray(x)
    order = np.argsort(a, kind="stable")
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
