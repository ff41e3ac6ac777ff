"""What the baselines did at each point: a robust band from one baseline, and how the
bands of several baselines make one.

The band at an aligned point ``x``:

- one baseline: its local median curve ``m`` and ``m +- k x s x sqrt(1 + c)``.  ``m`` is
  a robust local quadratic over the ``window`` nearest logged points (default
  :data:`DEFAULT_WINDOW`; bisquare-reweighted, as LOESS, so the baseline's own spikes do
  not bend it), ``s = 1.4826 x MAD`` of its residuals (the standard deviation for normal
  noise), smoothed by a rolling median over 3 windows, and ``s^2 c`` the variance of
  ``m`` itself.  ``k`` defaults to :data:`DEFAULT_BAND_K`.  A plain rolling median is
  not used because on a steep curve (acc in warmup) it is the point itself and its MAD
  ~0.  On constructed runs about 99% of a like run's points fall inside with ``k = 3``
  (98% with AR(1) noise, rho = 0.5).  ``s`` is floored at the metric's print step
  (``0.001`` for ``acc=0.046``) so a flat stretch does not make a zero-width band.
- 2 to 4 baselines: the envelope of their robust bands (lowest ``lo``, highest ``hi``);
  the median is the median of their centres.
- 5 or more: the 10th percentile of their ``lo`` and the 90th of their ``hi``
  (:data:`BAND_QUANTILES`, order statistics taken inwards), so the most extreme
  baseline on each side does not stretch the band.

A point is ``within`` when ``lo <= value <= hi``, else ``above`` or ``below``
(:func:`side_of`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from .align import gap_limit, interp

DEFAULT_BAND_K = 3.0
DEFAULT_WINDOW = 21
#: :func:`local_fit` works on blocks of about this many (point, window member) pairs.
FIT_BLOCK = 1 << 17
MAD_SCALE = 1.4826
#: A baseline logging a metric at fewer points gives no band for it.
MIN_BAND_POINTS = 5
#: From this many baselines on, the band is made of quantiles instead of the envelope.
QUANTILE_BASELINES = 5
BAND_QUANTILES = (0.1, 0.9)

#: One baseline's band on its own points: ``(x, median, lo, hi)``.
Band = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class BandAt(NamedTuple):
    """The baselines' band at some points: median, lo, hi (NaN where none covers)."""

    med: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    def select(self, mask: np.ndarray) -> BandAt:
        """The band at the points ``mask`` selects."""
        return BandAt(self.med[mask], self.lo[mask], self.hi[mask])


def print_step(values: np.ndarray) -> float:
    """The print resolution of logged values: largest ``10**-k`` (k <= 8) they are multiples of.

    >>> print_step(np.array([0.046, 0.1, 0.25]))
    0.001
    """
    v = np.abs(values[np.isfinite(values) & (values != 0)])
    if v.size == 0:
        return 0.0
    for k in range(0, 9):
        scaled = v * 10.0**k
        if np.all(np.abs(scaled - np.round(scaled)) <= 1e-6 + 1e-9 * scaled):
            return 10.0**-k
    return 0.0


def local_fit(
    x: np.ndarray, v: np.ndarray, window: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Robust local centre, noise scale and centre variance factor at each point.

    For point ``i`` the ``window`` nearest logged points (a centred window, shifted
    inwards at the ends) are fitted with a quadratic in the step by least squares with
    two rounds of bisquare robustness weights (``(1 - (r / 6s)^2)^2``, as LOESS; Cleveland,
    1979), so one spike in the baseline does not bend it.  The centre is the fit at
    ``x_i``; the scale ``s = 1.4826 x median|r| x sqrt(w / (w - 3))`` from the residuals
    ``r``; the factor ``c = [(D'D)^-1]_00`` makes ``s^2 c`` the centre's variance.  A
    plain rolling median would follow a steep curve point by point (the median of a
    rising window is its middle point) and give a MAD of ~0; a local quadratic keeps
    the trend, and its bend, out of the noise.
    """
    n = x.size
    w = min(window, n)
    start = np.clip(np.arange(n) - w // 2, 0, n - w)
    block = max(1, FIT_BLOCK // w)
    if n > block:  # in blocks of points: a block's (points, window) arrays stay in cache
        parts = [_fit_windows(x, v, start, lo, min(lo + block, n), w) for lo in range(0, n, block)]
        return tuple(np.concatenate(p) for p in zip(*parts, strict=True))  # type: ignore[return-value]
    return _fit_windows(x, v, start, 0, n, w)


def _fit_windows(
    x: np.ndarray, v: np.ndarray, start: np.ndarray, lo: int, hi: int, w: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`local_fit` for points ``lo..hi-1`` (window ``i`` starts at ``start[i]``)."""
    idx = start[lo:hi, None] + np.arange(w)[None, :]
    wx, wv = x[idx], v[idx]
    x = x[lo:hi]
    span = np.ptp(wx, axis=1)
    span[span == 0] = 1.0
    u = (wx - x[:, None]) / span[:, None]
    powers = [np.ones_like(u), u, u * u, u**3, u**4]
    ridge = 1e-12 * np.eye(3)

    def solve(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # Normal equations of the weighted quadratic from its moments (no (n, w, 3) arrays).
        m = [np.sum(weights * p, axis=1) for p in powers]
        a = np.stack([np.stack(m[i : i + 3], axis=1) for i in range(3)], axis=1) + ridge
        rhs = np.stack([np.sum(weights * wv * powers[i], axis=1) for i in range(3)], axis=1)
        return np.linalg.solve(a, rhs[:, :, None])[:, :, 0], a

    weights = np.ones_like(u)
    for _ in range(3):
        beta, _a = solve(weights)
        r = wv - (beta[:, :1] + beta[:, 1:2] * u + beta[:, 2:3] * u * u)
        s = np.median(np.abs(r), axis=1, keepdims=True)
        with np.errstate(all="ignore"):
            z = np.where(s > 0, r / (6 * MAD_SCALE * s), 0.0)
        weights = np.where(np.abs(z) < 1, (1 - z * z) ** 2, 0.0)
    dof = math.sqrt(w / (w - 3)) if w > 3 else 1.0
    scale = MAD_SCALE * np.median(np.abs(r), axis=1) * dof
    _, plain = solve(np.ones_like(u))
    c00 = np.linalg.inv(plain)[:, 0, 0]
    return beta[:, 0], scale, c00


def robust_band(x: np.ndarray, v: np.ndarray, k: float, window: int) -> Band | None:
    """One baseline's ``(x, median, lo, hi)`` on its own finite points, or None (fewer
    than :data:`MIN_BAND_POINTS`)."""
    ok = np.isfinite(x) & np.isfinite(v)
    x, v = x[ok], v[ok]
    if x.size < MIN_BAND_POINTS:
        return None
    order = np.argsort(x, kind="stable")
    x, v = x[order], v[order]
    centre, scale, c00 = local_fit(x, v, window)
    # One window's scale is itself noisy (a few lucky points make a narrow band); the
    # noise level changes slowly, so it is the rolling median over 3 windows.
    import pandas as pd

    smooth = pd.Series(scale).rolling(3 * window, center=True, min_periods=1).median()
    scale = np.maximum(smooth.to_numpy(), print_step(v))
    # A like run's point differs from the centre by its own noise and the centre's error.
    half = k * scale * np.sqrt(1.0 + c00)
    lo = centre - half
    if (v >= 0).all():
        lo = np.maximum(lo, 0.0)  # acc, loss, grad norms: a band below 0 says nothing
    return x, centre, lo, centre + half


def band_at(bands: Sequence[Band], x: np.ndarray) -> BandAt:
    """Median, lo, hi of the baselines' band at ``x`` (NaN where none covers it): the
    envelope of up to 4 baselines' bands, :data:`BAND_QUANTILES` of 5 or more."""
    rows = []
    for bx, *curves in bands:
        gap = gap_limit(bx)
        rows.append([interp(bx, c, x, gap) for c in curves])
    m, lo_, hi_ = (np.vstack(curve) for curve in zip(*rows, strict=True))
    n = np.isfinite(m).sum(axis=0)
    med = np.full(x.shape, np.nan)
    lo_out, hi_out = med.copy(), med.copy()
    some = n > 0
    if some.any():
        with np.errstate(all="ignore"):
            med[some] = np.nanmedian(m[:, some], axis=0)
            many = n >= QUANTILE_BASELINES
            few = some & ~many
            lo_out[few] = np.nanmin(lo_[:, few], axis=0)
            hi_out[few] = np.nanmax(hi_[:, few], axis=0)
            if many.any():
                # Order statistics taken inwards: with 5-10 baselines the most extreme
                # one on each side is left out.
                q0, q1 = BAND_QUANTILES
                lo_out[many] = np.nanquantile(lo_[:, many], q0, axis=0, method="higher")
                hi_out[many] = np.nanquantile(hi_[:, many], q1, axis=0, method="lower")
    return BandAt(med, lo_out, hi_out)


def side_of(v: np.ndarray, band: BandAt) -> np.ndarray:
    """Per point: ``within``, ``above``, ``below`` or ``""`` (no value or no band)."""
    lo, hi = band.lo, band.hi
    out = np.full(v.shape, "", dtype=object)
    ok = np.isfinite(v) & np.isfinite(lo) & np.isfinite(hi)
    out[ok & (v > hi)] = "above"
    out[ok & (v < lo)] = "below"
    out[ok & (v >= lo) & (v <= hi)] = "within"
    return out


def band_words(n: int, k: float, window: int) -> str:
    """How the band of ``n`` baselines is made, in words (``Comparison.band_method``)."""
    one = f"robust local quadratic over {window} logged points +- {k:g} x 1.4826 x MAD"
    if n == 1:
        return one
    if n < QUANTILE_BASELINES:
        return f"envelope of {n} baselines' bands ({one})"
    q0, q1 = BAND_QUANTILES
    return f"{q0:.0%}-{q1:.0%} quantiles of {n} baselines' bands ({one})"
