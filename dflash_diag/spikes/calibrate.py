"""The robust spike detector's critical z, calibrated on the log: :func:`calibrate`.

The robust z of a point (:mod:`.detect`) is ``z_i = (x_i - m_i) / s_i``, its value over
the lower of two rolling baselines ``m_i`` in units of the window's noise scale ``s_i =
1.4826 MAD_i`` (floored).  A fixed ``z >= 3.5`` flags 20-30 points of pure Gaussian noise
per 10,000: the MAD of 50 points is itself an estimate, and a log has thousands of points
to be wrong on.  This module sets each point's critical z ``c_i`` so that noise alone
makes about :data:`FALSE_EVENT_BUDGET` false events per log, and says how many points this
log's own noise would flag by chance.

**The critical z** (z units: multiples of the robust noise scale ``s_i``).  Of the
``N`` points tested (finite z, after the first ``min_history`` points):

1. The MAD's own error.  ``s_i`` comes from the ``k_i`` points of the window (50 when
   full).  The MAD estimates a normal scale with efficiency 0.3675 (Rousseeuw &
   Croux 1993, JASA 88), so ``s_i`` carries the information of a sample standard
   deviation on ``nu_i = 0.3675 k_i`` degrees of freedom (18.4 for 50 points), and a
   held-out point over it is Student-t like: ``z_i ~ mu + lambda T(nu_i)`` under
   noise.
2. The log's own spread.  ``mu = max(median z, 0)`` (the lower of two baselines puts
   it at about +0.13 on Gaussian noise) and ``lambda = max(1, IQR(z) / (2 t_0.75(nu)))``
   with ``nu`` of a full window: how much wider the held-out z's are than the t law,
   which takes in the baseline's own error, the trend line's extrapolation and the
   MAD's underestimate of an autocorrelated series' spread (a window of an AR(1)
   wanders together: ``lambda`` is about 1.06 on Gaussian noise, 1.11 at phi 0.5,
   1.28 at phi 0.9).
3. The number of points tested (Bonferroni): ``c_i = mu + lambda t_{1-p}(nu_i)``
   with ``p = B / N``, ``B`` = :data:`FALSE_EVENT_BUDGET` = 0.5, so pure noise makes
   about ``B`` false events per log, whatever its length (5.4 on 10,000 points
   with full windows; higher at the ends of the log, where windows are cut).
4. Logs with many real spikes (Benjamini & Hochberg 1995, JRSS B 57): when the
   Benjamini-Hochberg cut at false-discovery rate :data:`FDR_LEVEL` (10%) over the
   p-values ``max(P(mu + lambda T(nu_i) >= z_i), P_null(z >= z_i))`` is above
   ``B / N``, it is used instead.  ``P_null`` is the empirical null below (Efron
   2004, JASA 99): on noise heavier-tailed than the t, the cut stays at
   Bonferroni's instead of sliding down the tail.

The lag-1 autocorrelation ``rho`` of the z's (Gnanadesikan-Kettenring, robust to
spikes) is not in ``c_i``: shrinking ``nu`` to an effective window
``k (1 - rho²) / (1 + rho²)`` left AR(1) noise at phi 0.9 with a critical z of ~25
and no spike of 5 noise scales found, while ``lambda`` alone keeps its false events
under one per 10,000 points (``benchmarks/bench_noise.py``).  It names the cause of
chance flags (:attr:`Detection.chance_reason`).

**The empirical null and the chance flags** (:class:`NullTail`,
:attr:`Detection.expected_false_events`, in points).  The mirror z of a point is
its value against the *higher* of its two baselines, over that window's scale.
Under noise symmetric about a locally straight trend (Gaussian, AR(1), t, Laplace
alike), minus the mirror z has the law of z (the lower-baseline choice included:
flipping the noise's sign swaps the two), and rises
never reach the mirror's lower tail: its lower tail is the upper tail of z's noise.
A Student t (df 1 to inf, maximum likelihood on the exceedances) is fitted to the
outer :data:`TAIL_SHARE` of the mirror's lower half, and the points this log's
noise would flag by chance are ``E = sum_i P_null(z >= max(c_i, r_i))``, ``r_i``
the z of a ``min_rise`` rise (the onset rule is left out: on autocorrelated noise
most such points are not flagged; ``docs/detection.md`` has measured figures).
``--threshold Z`` sets ``c_i = Z`` instead (the rule before calibration is ``Z =
3.5``, ``detect.LEGACY_THRESHOLD``); ``E`` is then computed for that ``Z``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

#: Expected false spike events the calibrated threshold allows in a whole log.
FALSE_EVENT_BUDGET = 0.5
#: Asymptotic efficiency of the MAD as an estimate of a normal scale (Rousseeuw & Croux 1993).
MAD_EFFICIENCY = 0.3675
#: Lag-1 autocorrelation of the z's from which the chance line calls noise autocorrelated.
AUTOCORRELATED = 0.5
#: Degrees of freedom at or below which a fitted tail is called heavy.
HEAVY_TAIL_DF = 10.0
#: False discovery rate of the Benjamini-Hochberg cut.
FDR_LEVEL = 0.1
#: Share of the mirror z's lower half whose tail :class:`NullTail` fits.
TAIL_SHARE = 0.2
#: Smallest degrees of freedom given to a window's MAD.
DF_MIN = 1.0


@dataclass(frozen=True)
class NullTail:
    """The upper tail of the z's of noise, read from the mirror z's lower tail.

    Under noise symmetric about the trend, ``-mirror`` has the law of ``z`` (the lower
    baseline of two against the higher one, reflected), and rises do not reach the
    mirror's lower tail.  With ``D = median(mirror) - mirror`` over its lower half, a
    Student t is fitted to the outer :data:`TAIL_SHARE` of ``D``
    (:func:`~dflash_diag.stattests.fit_t_tail`), and

        ``P(noise z >= c) = 0.5 p_u sf((c - centre) / scale) / sf(u / scale)``

    :param centre: ``-median(mirror)``.
    :param df: the t's degrees of freedom (inf: normal).
    :param scale: the t's scale.
    :param u: where the fitted tail starts, in ``D``.
    :param p_u: the share of ``D`` at or above ``u``.
    """

    centre: float
    df: float
    scale: float
    u: float
    p_u: float

    def sf(self, c: Any) -> Any:
        """``P(noise z >= c)`` (arrays welcome)."""
        import numpy as np

        from ..stattests import t_sf

        ratio = t_sf((np.asarray(c) - self.centre) / self.scale, self.df)
        ratio = ratio / t_sf(self.u / self.scale, self.df)
        return np.minimum(0.5 * self.p_u * ratio, 1.0)

    def isf(self, p: float) -> float:
        """The ``c`` with ``P(noise z >= c) = p`` (``p`` below ``0.5 p_u``)."""
        from ..stattests import t_quantiles, t_sf

        q = 2 * p * float(t_sf(self.u / self.scale, self.df)) / self.p_u
        return self.centre + self.scale * float(t_quantiles(1.0 - q, self.df))


@dataclass(frozen=True, eq=False)
class Calibration:
    """How the robust detector's critical z was set, and the chance flags to expect.

    :param critical: the critical z of every point (NaN where nothing is tested).
    :param threshold: the critical z of a full window (to 2 decimals), or the
        user's ``--threshold`` (then ``critical`` is that number everywhere).
    :param budget: expected false events the calibration allows in the whole log.
    :param n_tested: points tested (finite z, after the first ``min_history``).
    :param autocorrelation: robust lag-1 autocorrelation of the z's, ``rho``.
    :param df: ``nu`` of a full window.
    :param centre: ``mu``, the median z (at least 0).
    :param spread: ``lambda``, the z's spread over ``t_nu``'s (at least 1).
    :param tail: the empirical null of the z's upper tail (:class:`NullTail`), None
        when the log is too short to fit one.
    :param expected_false_events: ``E``, points this log's noise would flag by chance.
    :param method: ``bonferroni``, ``benjamini-hochberg`` (the cut was lowered) or
        ``fixed`` (the user's threshold).
    """

    critical: np.ndarray
    threshold: float
    budget: float
    n_tested: int
    autocorrelation: float
    df: float
    centre: float
    spread: float
    tail: NullTail | None
    expected_false_events: float
    method: str


def calibrate(
    z: np.ndarray,
    mirror: np.ndarray,
    k: np.ndarray,
    rise_z: np.ndarray,
    window: int,
    min_history: int = 5,
    budget: float = FALSE_EVENT_BUDGET,
    threshold: float | None = None,
) -> Calibration:
    """The critical z of every point and the expected chance flags (module docstring).

    :param z: robust z per point (NaN: none).
    :param mirror: the mirror z per point: ``(x - the higher baseline) / its scale``.
    :param k: points in each point's baseline window.
    :param rise_z: the z a point needs to rise ``min_rise`` over its baseline.
    :param window: the full window (points).
    :param min_history: points at the start that are not tested.
    :param budget: expected false events allowed in the whole log.
    :param threshold: a fixed critical z instead (the user's ``--threshold``).
    """
    import numpy as np

    from ..stattests import robust_lag1, t_quantiles

    tested = np.isfinite(z) & (np.arange(z.shape[0]) >= min_history)
    zt = z[tested]
    n = int(zt.size)
    nan = float("nan")
    if n < 2:
        crit = np.full(z.shape[0], nan if threshold is None else threshold)
        thr = nan if threshold is None else threshold
        method = "bonferroni" if threshold is None else "fixed"
        return Calibration(crit, thr, budget, n, nan, nan, nan, nan, None, 0.0, method)
    rho = robust_lag1(np.where(tested, z, np.nan))
    nu = np.maximum(MAD_EFFICIENCY * k, DF_MIN)
    nu_full = max(MAD_EFFICIENCY * window, DF_MIN)
    mid = float(np.median(zt))
    centre = max(mid, 0.0)
    q25, q75 = np.quantile(zt, [0.25, 0.75])
    spread = max(float(q75 - q25) / (2 * float(t_quantiles(0.75, nu_full))), 1.0)
    tail = null_tail(mirror[tested & np.isfinite(mirror)])
    if threshold is None:
        crit, thr, method = _critical(zt, tested, (centre, spread, nu, nu_full), tail, budget)
    else:
        thr, method = float(threshold), "fixed"
        crit = np.full(z.shape[0], thr)
    crit = np.where(tested, crit, nan)
    expected = 0.0
    if tail is not None:
        need = np.maximum(crit, np.nan_to_num(rise_z, nan=0.0))[tested]
        # (each distinct critical z once: a log's windows have a handful of sizes)
        values, which = np.unique(need, return_inverse=True)
        expected = float(np.sum(np.asarray(tail.sf(values))[which.reshape(need.shape)]))
    return Calibration(crit, thr, budget, n, rho, nu_full, centre, spread, tail, expected, method)


def null_tail(mirror: np.ndarray) -> NullTail | None:
    """:class:`NullTail` from the tested points' mirror z's (None: too few)."""
    import numpy as np

    from ..stattests import fit_t_tail

    if mirror.size < 2:
        return None
    mid = float(np.median(mirror))
    df, scale, u, p_u = fit_t_tail(mid - mirror[mirror < mid], TAIL_SHARE)
    if not (np.isfinite(scale) and scale > 0):
        return None
    return NullTail(-mid, df, scale, u, p_u)


def _critical(
    zt: np.ndarray, tested: np.ndarray, model: tuple, tail: NullTail | None, budget: float
) -> tuple[np.ndarray, float, str]:
    """Critical z per point and of a full window, and which rule set them (module
    docstring, steps 3-4).

    ``model`` is ``(mu, lambda, nu per point, nu of a full window)``."""
    import numpy as np

    from ..stattests import t_quantiles

    centre, spread, nu, nu_full = model
    n = zt.shape[0]
    # Bonferroni: a tail probability of budget / n under the model.
    bonf = centre + spread * t_quantiles_of_df(1.0 - budget / n, nu)
    bonf_full = centre + spread * float(t_quantiles(1.0 - budget / n, nu_full))
    if tail is None:
        return bonf, round(bonf_full, 2), "bonferroni"
    # Benjamini-Hochberg at FDR_LEVEL on the larger of the model's and the empirical
    # null's p-values: lower than Bonferroni's only when the log holds more high z's
    # than either null makes, never on noise heavier-tailed than the model.
    cut = _bh_cut(_bh_pvalues(zt, (centre, spread, nu[tested]), tail, FDR_LEVEL), FDR_LEVEL)
    if cut <= budget / n:
        return bonf, round(bonf_full, 2), "bonferroni"
    tail_z = tail.isf(cut)
    bh = np.maximum(centre + spread * t_quantiles_of_df(1.0 - cut, nu), tail_z)
    bh_full = max(centre + spread * float(t_quantiles(1.0 - cut, nu_full)), tail_z)
    return np.minimum(bonf, bh), round(min(bonf_full, bh_full), 2), "benjamini-hochberg"


def _bh_pvalues(zt: np.ndarray, model: tuple, tail: NullTail, level: float) -> np.ndarray:
    """The p-values :func:`_bh_cut` reads at ``level``: ``max(P(mu + lambda T(nu_i) >=
    z_i), P_null(z >= z_i))`` where that is at most ``level``, 1 where it is above (no
    p-value above ``level`` is ever within the cut, and none moves another's rank
    among the sorted ones, so the cut is the same).  ``model`` is ``(mu, lambda, nu
    per point)``.

    Each law is computed only where it can matter: ``P(T(nu) > t) > P(Z > t)`` for
    every ``nu`` and ``t > 0`` (a t law is the more spread), so below the normal's
    ``1 - level`` quantile no point's model p-value is within ``level``; the empirical
    null only where the model's is."""
    import numpy as np
    from scipy import special

    from ..stattests import t_sf

    centre, spread, nu = model
    t = (zt - centre) / spread
    p = np.ones(zt.shape[0])
    floor = float(special.ndtri(1.0 - level)) - 1e-6  # (a margin for the rounding)
    near = np.flatnonzero(t > floor)
    p_model = t_sf(t[near], nu[near])
    kept = p_model <= level
    at = near[kept]
    p[at] = np.maximum(p_model[kept], tail.sf(zt[at]))
    return p


def t_quantiles_of_df(q: float, df: np.ndarray) -> np.ndarray:
    """``t_quantiles(q, df)`` for an array of degrees of freedom, the same numbers, each
    distinct ``df`` computed once: a log's windows have a handful of sizes (the full
    one and the cut ones at the ends), and a t quantile is an iterative inversion."""
    import numpy as np

    from ..stattests import t_quantiles

    values, which = np.unique(df, return_inverse=True)
    return np.asarray(t_quantiles(q, values))[which.reshape(np.shape(df))]


def _bh_cut(pvals: np.ndarray, level: float) -> float:
    """The Benjamini-Hochberg cut: ``level k* / m`` with ``k*`` the largest ``k`` whose
    ``k``-th smallest p-value is at most ``level k / m`` (``m`` p-values); 0 when there
    is none."""
    import numpy as np

    m = pvals.shape[0]
    ranked = np.sort(pvals)
    ok = np.flatnonzero(ranked <= level * np.arange(1, m + 1) / m)
    return level * (int(ok[-1]) + 1) / m if ok.size else 0.0


def chance_reason(cal: Calibration | None) -> str:
    """Why a log expects one chance flag or more (see :attr:`Detection.chance_reason`)."""
    if cal is None or not cal.expected_false_events >= 1:
        return ""
    if cal.autocorrelation >= AUTOCORRELATED:
        return (
            f"the log's noise is autocorrelated (lag-1 {cal.autocorrelation:.2f}): its slow "
            "wanders cross the critical z in runs"
        )
    if cal.tail is not None and cal.tail.df <= HEAVY_TAIL_DF:
        return "the log's noise is heavy-tailed"
    if cal.method == "benjamini-hochberg":
        return (
            f"the critical z is lowered to {cal.threshold:g} among this log's many high "
            f"points (a {FDR_LEVEL:.0%} false-discovery rate)"
        )
    if cal.method == "fixed":
        return f"the fixed critical z {cal.threshold:g} is within this log's noise"
    return "the log's noise has more high points than a normal law"


def basis(cal: Calibration | None) -> str:
    """How :attr:`Detection.expected_false_events` was computed, in one phrase."""
    if cal is None or cal.tail is None:
        return ""
    df = "a normal" if math.isinf(cal.tail.df) else f"a Student t with {cal.tail.df:g} df"
    return (
        f"{df} fitted to the outer {TAIL_SHARE:.0%} of the lower half of the log's "
        f"{cal.n_tested} mirror z's (the value against the higher of the two baselines: "
        "under symmetric noise their lower tail is the z's upper tail), summed over every "
        "point's critical z"
    )
