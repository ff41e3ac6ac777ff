"""The detrended metric and its correlations with batch features.

:func:`detrend` takes the step-to-step variation that batches could explain out of a
logged metric; :func:`correlations` measures how it goes with each batch feature:
Pearson and Spearman with two-sided p-values (scipy) and 95% confidence intervals from
Fisher's z, ``tanh(atanh(r) +- 1.96 se)`` with ``se = 1/sqrt(n-3)`` (Pearson) or
``sqrt(1.06/(n-3))`` (Spearman, Fieller et al. 1957).  Fewer than 10 points, or a
constant feature, give no figures (``None``), not a confident number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..data import BATCH_FEATURES

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

#: Raw features whose correlation with the residual is reported.
CORRELATION_FEATURES = BATCH_FEATURES


@dataclass(frozen=True)
class Correlation:
    """Correlation of the detrended metric with one batch feature over ``n`` points."""

    feature: str
    n: int
    pearson: float | None
    pearson_p: float | None
    pearson_ci: tuple[float, float] | None
    spearman: float | None
    spearman_p: float | None
    spearman_ci: tuple[float, float] | None


def detrend(
    values: np.ndarray, window: int, trend_of_finite: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(trend, residual)``: the centred robust-line baseline of
    :func:`~dflash_diag.spikes.windows.trend_baseline` (``window // 2`` points each side,
    the point left out, straightened by a robust line, median) and ``x - trend``.  The
    line keeps a fast early descent from leaving large residuals that no batch caused.

    :param trend_of_finite: that baseline of the finite values, if at hand (the
        detection's :attr:`~dflash_diag.spikes.detect.Detection.centred_trend`).

    >>> import numpy as np
    >>> trend, res = detrend(np.array([1.0, 1.0, 1.0, 5.0, 1.0, 1.0, 1.0]), 4)
    >>> res.tolist()
    [0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 0.0]
    """
    import numpy as np

    from .windows import trend_baseline

    x = np.asarray(values, dtype=np.float64)
    trend = np.full(x.shape[0], np.nan)
    ok = np.isfinite(x)
    n = int(ok.sum())
    if n >= 2 and trend_of_finite is not None and trend_of_finite.shape[0] == n:
        trend[ok] = trend_of_finite
    elif n >= 2:
        trend[ok] = trend_baseline(x[ok], window, centred=True)[0]
    return trend, x - trend


def _fisher_ci(r: float, n: int, spearman: bool) -> tuple[float, float] | None:
    if n <= 3 or not math.isfinite(r):
        return None
    se = math.sqrt((1.06 if spearman else 1.0) / (n - 3))
    z = math.atanh(max(-0.999999, min(0.999999, r)))
    return (math.tanh(z - 1.96 * se), math.tanh(z + 1.96 * se))


def correlations(points: pd.DataFrame, features: list[str]) -> tuple[Correlation, ...]:
    """Pearson and Spearman of ``points.residual`` with each feature (see module doc)."""
    import numpy as np

    from ..stattests import average_ranks, pearson, spearman, spearman_of_ranks

    out = []
    y = points["residual"].to_numpy(dtype=np.float64)
    finite = np.isfinite(y)
    ranked = None  # the ranks of y's finite values, for the features finite where y is
    for f in features:
        x = points[f].to_numpy(dtype=np.float64)
        ok = np.isfinite(x) & finite
        n = int(ok.sum())
        if n < 10 or np.ptp(x[ok]) == 0 or np.ptp(y[ok]) == 0:
            out.append(Correlation(f, n, None, None, None, None, None, None))
            continue
        pr, pp = pearson(x[ok], y[ok])
        if np.array_equal(ok, finite):  # (y's ranks over the same points: ranked once)
            ranked = average_ranks(y[ok]) if ranked is None else ranked
            sr, sp = spearman_of_ranks(average_ranks(x[ok]), ranked)
        else:
            sr, sp = spearman(x[ok], y[ok])
        out.append(
            Correlation(
                f,
                n,
                float(pr),
                float(pp),
                _fisher_ci(float(pr), n, False),
                float(sr),
                float(sp),
                _fisher_ci(float(sr), n, True),
            )
        )
    return tuple(out)
