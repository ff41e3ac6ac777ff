"""The robust spike detector, decided point by point: :class:`CausalDetector`.

When point ``t`` arrives it is judged from the points before it and never changed
afterwards (``spikes`` judges the finished log, see ``docs/watch.md``):

- **baseline** ``m_t`` and **noise** ``MAD_t``: the trailing robust-line baseline of
  :func:`~dflash_diag.spikes.windows.trend_baseline` over the ``window`` finite points
  before ``t`` (fewer at the start).  There is no centred baseline: the points after
  ``t`` are not there yet;
- **robust z** ``z_t = (x_t - m_t) / s_t`` with ``s_t = 1.4826 max(MAD_t, 0.001 |m_t|,
  q_t)``, ``q_t`` the smallest gap between the values before ``t`` (their print
  resolution), as in :mod:`dflash_diag.spikes.detect`;
- **critical z** ``c_t``: while fewer than ``window`` finite points have arrived, the
  fixed :data:`~dflash_diag.spikes.detect.LEGACY_THRESHOLD` (3.5): *warming up*; then
  the full-window critical z of :func:`~dflash_diag.spikes.calibrate.calibrate` over
  the z's of the points so far, with ``z`` itself as the mirror z (there is one
  baseline, so the lower tail of ``z`` stands for the upper tail of noise).  A
  calibration costs ~30 ms, so it is kept and redone only when a point needs it and
  the finite points have grown by :data:`RECALIBRATE_POINTS` (25) or
  :data:`RECALIBRATE_SHARE` (5%) of the calibrated points since: ``c_t`` comes from the
  points up to ``t`` or at most that many before it, never after.  It is calibrated on
  the last :data:`CALIBRATION_POINTS` (4,096) finite points at most, so its cost does
  not grow with the run (the false-event budget is then per that many points).
  ``threshold`` fixes ``c_t`` throughout;
- **flag**: ``z_t >= c_t`` and ``x_t >= (1 + min_rise) m_t`` and, for the first point of
  a run, a jump of ``min_rise / 2`` over the median of the 3 points before it; nothing
  is flagged among the first :data:`~dflash_diag.spikes.detect.MIN_HISTORY` points.
  Consecutive flagged points are one event.  A NaN or infinite value is an event of its
  own and stays out of every baseline.

The critical z is computed only for points that pass the other conditions (the flag
needs all of them), so a point costs a median over one window, not a calibration.  Every
decision is also kept in growing arrays (:meth:`CausalDetector.arrays` slices them), so
reading the last points costs the same at any length of run.
``direction="down"`` (accuracy) runs the same rules on ``-x``.
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..spikes.calibrate import Calibration, calibrate
from ..spikes.detect import (
    DEFAULT_MIN_RISE,
    LEGACY_THRESHOLD,
    MAD_FLOOR,
    MIN_HISTORY,
    ONSET_POINTS,
)

if TYPE_CHECKING:
    import numpy as np

#: Default baseline window (logged points), as ``spikes``' robust detector.
DEFAULT_WINDOW = 50
#: The critical z is recalibrated once the finite points have grown by this many ...
RECALIBRATE_POINTS = 25
#: ... or by this share, whichever is more (a calibration costs ~30 ms).
RECALIBRATE_SHARE = 0.05
#: The critical z is calibrated on this many finite points at most (the last ones).
CALIBRATION_POINTS = 4096
#: Per-point arrays kept by the detector (:meth:`CausalDetector.arrays`).
ARRAY_COLUMNS = ("steps", "values", "baseline", "z", "critical", "flagged")


@dataclass(frozen=True)
class Decision:
    """What the detector decided about one point when it arrived.

    :param index: the point's position among the points so far (0-based).
    :param step: its logged step.
    :param value: the metric as logged.
    :param baseline: ``m_t`` in the metric's units (NaN: no history yet, or non-finite).
    :param z: the robust z (signed for rises; for ``down``, drops are positive).
    :param critical: ``c_t`` (NaN when not needed: the point failed another condition).
    :param rule: how ``c_t`` was set: ``warming up`` (the fixed 3.5, too few points),
        ``calibrated``, ``fixed`` (the user's threshold), or ``history`` (one of the
        first points, never flagged).
    :param flagged: the point belongs to a spike event.
    :param starts_event: the first point of a new event.
    :param kind: ``spike``, ``non-finite`` or ``""`` (not flagged).
    """

    index: int
    step: int
    value: float
    baseline: float
    z: float
    critical: float
    rule: str
    flagged: bool
    starts_event: bool
    kind: str


class CausalDetector:
    """Feed points with :meth:`extend`; each is decided once, from the points before it.

    :param window: baseline window in logged points.
    :param threshold: a fixed critical z (None: calibrated after ``window`` points).
    :param min_rise: a flagged point is at least this share over its baseline.
    :param direction: ``up`` (rises are spikes) or ``down`` (drops are).

    >>> d = CausalDetector()
    >>> out = d.extend(range(1, 61), [2.0 + 0.01 * (i % 3) for i in range(60)])
    >>> d.extend([61], [2.6])[0].flagged, out[-1].rule
    (True, 'calibrated')
    """

    def __init__(
        self,
        window: int = DEFAULT_WINDOW,
        threshold: float | None = None,
        min_rise: float = DEFAULT_MIN_RISE,
        direction: str = "up",
    ) -> None:
        if window < 2:
            raise InputError("--window", f"must be at least 2 logged points, got {window}")
        if threshold is not None and not (math.isfinite(threshold) and threshold > 0):
            raise InputError("--threshold", f"must be a positive number, got {threshold}")
        if direction not in ("up", "down"):
            raise InputError("direction", f"unknown direction {direction!r}", "choose up or down")
        self.window = int(window)
        self.threshold = threshold
        self.min_rise = float(min_rise)
        self.direction = direction
        self.calibration: Calibration | None = None
        self._reset()

    def _reset(self) -> None:
        # every point: step, logged value, decision
        self.steps: list[int] = []
        self.values: list[float] = []
        self.decisions: list[Decision] = []
        # finite points only (x signed so that spikes are rises): the baselines' series
        self._x: list[float] = []
        self._z: list[float] = []
        self._k: list[int] = []
        self._rise_z: list[float] = []
        self._sorted: list[float] = []  # the finite values so far, sorted
        self._gap = math.inf  # their smallest positive gap
        self._columns = _Columns()  # every decision, as arrays
        self.calibration = None
        self._calibrated_at = 0  # finite points the calibration was made on
        self._cached_critical = LEGACY_THRESHOLD

    @property
    def n_points(self) -> int:
        """Points so far (finite or not)."""
        return len(self.steps)

    @property
    def n_finite(self) -> int:
        return len(self._x)

    def extend(self, steps: Any, values: Any) -> list[Decision]:
        """Decide each new point in order; returns one :class:`Decision` per point.

        Splitting the same points into calls of any sizes gives the same decisions."""

        steps = [int(s) for s in steps]
        vals = [float(v) for v in values]
        sign = 1.0 if self.direction == "up" else -1.0
        new_x = [sign * v for v in vals if math.isfinite(v)]
        med, mad = self._baselines(new_x)
        out = []
        j = 0
        for step, v in zip(steps, vals, strict=True):
            if math.isfinite(v):
                out.append(self._finite(step, v, sign * v, float(med[j]), float(mad[j])))
                j += 1
            else:
                out.append(self._record(step, v, math.nan, math.nan, math.nan, "", "non-finite"))
        return out

    def _baselines(self, new_x: list[float]) -> tuple[np.ndarray, np.ndarray]:
        """Trailing baseline and MAD of each new finite point, from the ``window``
        finite points before it: :func:`~dflash_diag.spikes.windows.trend_baseline`
        while the window is still growing, :func:`trailing_levels` once it is full."""
        import numpy as np

        from ..spikes.windows import trend_baseline

        f0, w = len(self._x), self.window
        med = np.full(len(new_x), np.nan)
        mad = np.full(len(new_x), np.nan)
        head = max(0, min(len(new_x), w - f0))  # new points whose window is cut
        if head:
            m, a = trend_baseline(np.asarray(self._x + new_x[:head], dtype=np.float64), w, False)
            med[:head], mad[:head] = m[f0:], a[f0:]
        if head < len(new_x):
            lo = f0 + head - w
            series = np.asarray(self._x[lo:] + new_x, dtype=np.float64)
            rows = np.lib.stride_tricks.sliding_window_view(series[:-1], w)
            med[head:], mad[head:] = trailing_levels(rows)
        return med, mad

    def _finite(self, step: int, v: float, x: float, m: float, mad: float) -> Decision:
        """Decide a finite point (signed value ``x``) from the baseline ``m``, ``mad``."""
        i = len(self._x)
        res = 0.0 if math.isinf(self._gap) else self._gap
        scale = 1.4826 * max(mad, MAD_FLOOR * abs(m), res) if math.isfinite(m) else math.nan
        if scale == 0.0:
            scale = 5e-324  # (a constant series: any rise is infinitely many scales)
        z = (x - m) / scale if math.isfinite(m) else math.nan
        rise_z = self.min_rise * abs(m) / scale if math.isfinite(m) else math.nan
        self._x.append(x)
        self._z.append(z)
        self._k.append(min(i, self.window))
        self._rise_z.append(rise_z)
        self._insert(x)
        sign = 1.0 if self.direction == "up" else -1.0
        if i < MIN_HISTORY or not math.isfinite(z):
            return self._record(step, v, sign * m, z, math.nan, "history", "")
        rise = x / m >= 1 + self.min_rise if m > 0 else x - m >= self.min_rise * abs(m)
        continuing = bool(self.decisions) and self.decisions[-1].kind == "spike"
        if rise and not continuing:
            mid = statistics.median(self._x[max(0, i - ONSET_POINTS) : i])
            rise = x - mid >= 0.5 * self.min_rise * abs(mid)
        rule = self.rule
        if not rise:
            return self._record(step, v, sign * m, z, math.nan, rule, "")
        crit = self._critical(rule)
        kind = "spike" if z >= crit else ""
        return self._record(step, v, sign * m, z, crit, rule, kind)

    @property
    def rule(self) -> str:
        """How the next point's critical z is set: ``fixed``, ``warming up`` or
        ``calibrated``."""
        if self.threshold is not None:
            return "fixed"
        return "warming up" if len(self._x) < self.window else "calibrated"

    def _critical(self, rule: str) -> float:
        """``c_t`` of the point just added (module docstring): the calibration is redone
        when the finite points have grown by :data:`RECALIBRATE_POINTS` or
        :data:`RECALIBRATE_SHARE` since it was last done, whichever is more."""
        import numpy as np

        if rule == "fixed":
            return float(self.threshold)  # type: ignore[arg-type]
        if rule == "warming up":
            return LEGACY_THRESHOLD
        n = len(self._z)
        used = min(self._calibrated_at, CALIBRATION_POINTS)
        due = max(RECALIBRATE_POINTS, math.ceil(RECALIBRATE_SHARE * used))
        if self.calibration is None or n - self._calibrated_at >= due:
            lo = max(0, n - CALIBRATION_POINTS)
            z = np.asarray(self._z[lo:], dtype=np.float64)
            self.calibration = calibrate(
                z,
                z,
                np.asarray(self._k[lo:], dtype=np.float64),
                np.asarray(self._rise_z[lo:], dtype=np.float64),
                self.window,
                max(0, MIN_HISTORY - lo),
            )
            self._calibrated_at = n
            crit = float(self.calibration.critical[-1])
            self._cached_critical = crit if math.isfinite(crit) else LEGACY_THRESHOLD
        return self._cached_critical

    def _record(
        self, step: int, v: float, base: float, z: float, crit: float, rule: str, kind: str
    ) -> Decision:
        prev = self.decisions[-1].kind if self.decisions else ""
        starts = kind == "non-finite" or (kind == "spike" and prev != "spike")
        d = Decision(
            index=len(self.steps),
            step=step,
            value=v,
            baseline=base,
            z=z,
            critical=crit,
            rule=rule,
            flagged=bool(kind),
            starts_event=starts,
            kind=kind,
        )
        self.steps.append(step)
        self.values.append(v)
        self.decisions.append(d)
        self._columns.append(step, v, base, z, crit, bool(kind))
        return d

    def _insert(self, x: float) -> None:
        """Add ``x`` to the sorted values, keeping their smallest positive gap."""
        s = self._sorted
        at = bisect.bisect_left(s, x)
        for near in (s[at - 1] if at > 0 else None, s[at] if at < len(s) else None):
            if near is not None and near != x:
                self._gap = min(self._gap, abs(x - near))
        s.insert(at, x)

    def truncate(self, step: int) -> int:
        """Forget the points at ``step`` and after (a resume: the log went back to an
        earlier step, and the values logged again replace them).  Returns how many
        points were dropped."""
        keep = [i for i, s in enumerate(self.steps) if s < step]
        cut = len(keep)
        if cut == len(self.steps):
            return 0
        steps, values = self.steps[:cut], self.values[:cut]
        decisions = self.decisions[:cut]
        n_finite = sum(1 for v in values if math.isfinite(v))
        x, z, k, rz = self._x, self._z, self._k, self._rise_z
        dropped = len(self.steps) - cut
        self._reset()
        self.steps, self.values, self.decisions = steps, values, decisions
        for p in decisions:
            self._columns.append(p.step, p.value, p.baseline, p.z, p.critical, p.flagged)
        self._x, self._z = x[:n_finite], z[:n_finite]
        self._k, self._rise_z = k[:n_finite], rz[:n_finite]
        for v in self._x:
            self._insert(v)
        return dropped

    def arrays(self, lo: int = 0, hi: int | None = None) -> dict[str, np.ndarray]:
        """Points ``lo`` to ``hi`` (None: the last) as arrays, in arrival order (copies:
        the cost is the slice's, not the run's): ``steps`` (int64), ``values``,
        ``baseline``, ``z``, ``scale``, ``critical``, ``flagged``."""
        import numpy as np

        a = self._columns.slice(lo, len(self.steps) if hi is None else hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            sign = 1.0 if self.direction == "up" else -1.0
            scale = sign * (a["values"] - a["baseline"]) / a["z"]
        return {**a, "scale": scale}


class _Columns:
    """Growing arrays of the decisions (capacity doubled when full, so an append costs
    O(1) amortised and a slice costs its length)."""

    def __init__(self) -> None:
        import numpy as np

        self.n = 0
        self._data = {
            c: np.empty(1024, dtype=np.int64 if c == "steps" else bool if c == "flagged" else float)
            for c in ARRAY_COLUMNS
        }

    def append(self, *row: float) -> None:
        import numpy as np

        if self.n == len(self._data["steps"]):
            for c, a in self._data.items():
                grown = np.empty(2 * a.size, dtype=a.dtype)
                grown[: a.size] = a
                self._data[c] = grown
        for c, v in zip(ARRAY_COLUMNS, row, strict=True):
            self._data[c][self.n] = v
        self.n += 1

    def slice(self, lo: int, hi: int) -> dict[str, np.ndarray]:
        hi = min(hi, self.n)
        return {c: a[lo:hi].copy() for c, a in self._data.items()}


def trailing_levels(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Baseline and MAD of the point after each full window (a row of ``rows``, oldest
    first), the same as :func:`~dflash_diag.spikes.windows.trend_baseline`'s trailing
    windows: the slope ``(median of the later half - median of the earlier half) /
    (distance between the halves' median positions)`` straightens the window, the
    values are projected to the point (``w - slope x rel``, ``rel = -k..-1``) and their
    median is the baseline, their median absolute deviation the noise.

    >>> import numpy as np
    >>> med, mad = trailing_levels(np.arange(12.0)[None, :])
    >>> float(med[0]), float(mad[0])
    (12.0, 0.0)
    """
    import numpy as np

    from ..spikes.windows import MIN_LINE_HALF

    k = rows.shape[1]
    half = k // 2
    rel = np.arange(-k, 0, dtype=np.float64)
    proj = rows
    if half >= MIN_LINE_HALF:  # (as trend_baseline: no line through a handful of points)
        gap = float(np.median(rel[k - half :]) - np.median(rel[:half]))
        slope = (np.median(rows[:, k - half :], axis=1) - np.median(rows[:, :half], axis=1)) / gap
        proj = rows - slope[:, None] * rel[None, :]
    med = np.median(proj, axis=1)
    mad = np.median(np.abs(proj - med[:, None]), axis=1)
    return med, mad
