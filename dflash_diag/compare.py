"""Is what a run shows now normal for this point of training?  A run against baselines.

:func:`compare_runs` puts a run and one or more baseline runs (earlier runs of the same
recipe) on one axis, builds a band of what the baselines did at each point, and says,
per metric and per phase, how much of the run lies inside, above and below it.

Alignment (``align``):

- ``step``: the logged step.
- ``tokens``: cumulative tokens.  A ``tokens`` column that rises at every logged point
  (and ends over 3x its start) is read as already cumulative; otherwise it is tokens per
  step and ``cum(s_i) = sum_{j<=i} tokens_j x (s_j - s_{j-1})`` (a logged value stands
  for the steps since the previous one; the first for the steps from 1 up to it).
- ``warmup``: the fraction of warmup done, expressed in the run's steps: a baseline step
  ``s`` in warmup maps to ``a_R + (s - a_B) / W_B x W_R`` and after warmup to
  ``a_R + W_R + (s - a_B - W_B)`` (``a`` first step, ``W`` warmup length; R run, B
  baseline), so warmups of different lengths line up and later steps keep their pace.

Logs logged at different intervals are compared by linear interpolation of each
baseline on the aligned axis, never past either end of a baseline and never across a
gap wider than :data:`MAX_GAP_FACTOR` x its median spacing (a missing stretch).

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

A point is ``within`` when ``lo <= value <= hi``, else ``above`` or ``below``.  A phase
(or a metric) is ``within`` when at least :data:`WITHIN_SHARE` of its compared points
are; otherwise ``above``/``below`` by the larger share, ``mixed`` when both are over
10%, and ``not enough data`` under :data:`MIN_PHASE_POINTS` compared points.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .errors import InputError
from .phases import Phases, lr_phases, phase_labels, warmup_progress

if TYPE_CHECKING:
    import pandas as pd

    from .records import RunLog

ALIGN_MODES: tuple[str, ...] = ("step", "tokens", "warmup")
DEFAULT_BAND_K = 3.0
DEFAULT_WINDOW = 21
MAD_SCALE = 1.4826
MIN_BAND_POINTS = 5
MIN_PHASE_POINTS = 5
MIN_SLOPE_POINTS = 10
QUANTILE_BASELINES = 5
BAND_QUANTILES = (0.1, 0.9)
MAX_GAP_FACTOR = 5.0
WITHIN_SHARE = 0.9
#: Default milestone levels for acc-like metrics (fractions of tokens right).
ACC_MILESTONES: tuple[float, ...] = (0.1, 0.3, 0.5)
#: Key of a milestones mapping that applies to every acc-like metric.
ACC_LIKE = "acc*"
DEFAULT_METRICS: tuple[str, ...] = ("loss", "acc", "grad_norm")
_POSITION = re.compile(r"^(acc|loss)_\d+$")
_NOT_METRICS = frozenset({"step", "lr", "tokens", "tok_per_s", "epoch", "rank", "elapsed"})
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Departure:
    """The run's point farthest outside the band, in band half-widths.

    ``widths = (value - hi) / (hi - median)`` above the band, ``(lo - value) /
    (median - lo)`` below; ``excess`` is ``value - hi`` or ``value - lo``.
    """

    step: int
    value: float
    baseline_median: float
    band: tuple[float, float]
    side: str
    excess: float
    widths: float


@dataclass(frozen=True)
class PhaseSummary:
    """Where the run's points of one phase lie against the band.

    :param phase: ``warmup``, ``post_warmup`` or ``all`` (run phases unknown).
    :param n_points: run points in the phase with a value.
    :param n_compared: of those, points with a band (inside the baselines' range).
    :param inside: share of compared points within the band (None: not enough data).
    :param verdict: ``within``, ``above``, ``below``, ``mixed`` or ``not enough data``.
    """

    phase: str
    n_points: int
    n_compared: int
    first_step: int | None
    last_step: int | None
    inside: float | None
    above: float | None
    below: float | None
    verdict: str
    largest_departure: Departure | None


@dataclass(frozen=True)
class Slope:
    """Least-squares slope of a metric against the aligned axis after warmup.

    ``value`` and ``ci`` (95%) are per ``per`` (``1k steps`` or ``1B tokens``).  The
    interval uses Newey-West standard errors (Bartlett kernel, lag
    ``floor(4 (n/100)^(2/9))``) because step-to-step noise is autocorrelated.

    A baseline's slope is taken over ``span``, the aligned range after warmup that it
    shares with the run; ``run_minus`` is the run's slope over that same range minus this
    one, with its 95% interval ``run_minus_ci`` (``+- 1.96 sqrt(se_run^2 + se^2)``, the
    runs being independent): an interval clear of 0 says the run climbs (or falls) at
    another pace there.
    """

    file: str
    value: float | None
    ci: tuple[float, float] | None
    n: int
    per: str
    reason: str = ""
    se: float | None = None
    run_minus: float | None = None
    run_minus_ci: tuple[float, float] | None = None
    span: tuple[float, float] | None = None


@dataclass(frozen=True)
class Milestone:
    """First step at which each log's smoothed metric reaches ``level``.

    Smoothed: the band's centre curve of that log (robust local quadratic over
    ``window`` logged points), so one lucky point does not count.  ``direction`` is
    ``up`` (reaches ``>= level``, acc-like) or ``down`` (falls to ``<= level``,
    loss-like).  ``steps`` are in each log's own numbering, None
    when not reached; ``aligned`` are the same points on the aligned axis.
    """

    level: float
    direction: str
    steps: dict[str, int | None]
    aligned: dict[str, float | None]


@dataclass(frozen=True)
class Curves:
    """What a plot of one metric needs, on the aligned axis.

    :param run: ``(x, values)`` of the run.
    :param baselines: ``{file: (x, values)}``.
    :param band: ``(x, median, lo, hi)`` on the baselines' points.
    :param warmup_ends: ``{file: x}`` of each log's warmup end (where known).
    """

    run: tuple[np.ndarray, np.ndarray]
    baselines: dict[str, tuple[np.ndarray, np.ndarray]]
    band: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    warmup_ends: dict[str, float]


@dataclass(frozen=True)
class MetricComparison:
    """One metric of the run against the baselines.

    :param kind: ``acc`` (higher is better), ``loss`` (lower is better) or ``other``.
    :param verdict: over all compared points, as for a phase.
    :param sentence: the plain answer, e.g. ``acc is within v1's band at 96% ...``.
    :param baselines_used: files that logged this metric.
    """

    name: str
    kind: str
    phases: tuple[PhaseSummary, ...]
    milestones: tuple[Milestone, ...]
    slopes: tuple[Slope, ...]
    verdict: str
    sentence: str
    baselines_used: tuple[str, ...]
    curves: Curves
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PointAnswer:
    """The answer at one step of the run (``--at STEP``).

    ``value`` is the logged value (interpolated between neighbours when that step was
    not logged; never past the run's ends), ``x`` the aligned position, ``verdict``
    ``within``/``above``/``below``, ``not logged`` (no run value there) or ``not enough
    data`` (no band there).
    """

    step: int
    metric: str
    value: float | None
    lr: float | None
    warmup_progress: float | None
    x: float | None
    baseline_median: float | None
    band: tuple[float, float] | None
    verdict: str
    sentence: str


@dataclass(frozen=True)
class Comparison:
    """Everything :func:`compare_runs` found; rendering turns it into text, JSON, plots.

    :param axis: the aligned axis' name (``step``, ``tokens``, ``step (warmup-aligned)``).
    :param band_method: how the band was made, in words.
    :param warmup: the phases of every log, by file.
    """

    baselines: tuple[str, ...]
    run: str
    align: str
    axis: str
    band_method: str
    band_k: float
    window: int
    warmup: dict[str, Phases]
    metrics: dict[str, MetricComparison]
    at: tuple[PointAnswer, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True, eq=False)
class _Log:
    """One log prepared for comparison: steps, aligned positions, lr and its phases."""

    path: str
    name: str
    table: pd.DataFrame
    steps: np.ndarray
    x: np.ndarray
    phases: Phases


def short_name(path: str) -> str:
    """The name a sentence uses for a log: its file name without the extension.

    >>> short_name("runs/v1.log")
    'v1'
    """
    base = os.path.basename(str(path)) or str(path)
    stem, _ = os.path.splitext(base)
    return stem or base


def metric_kind(name: str) -> str:
    """``acc`` for accuracy-like metrics, ``loss`` for loss-like ones, else ``other``.

    >>> metric_kind("acc_3"), metric_kind("eval_loss"), metric_kind("grad_norm")
    ('acc', 'loss', 'other')
    """
    low = name.lower()
    if low.startswith("acc") or "accuracy" in low or low.endswith("_acc"):
        return "acc"
    if "loss" in low or "ppl" in low or "perplexity" in low:
        return "loss"
    return "other"


def parse_milestones(texts: Sequence[str]) -> dict[str, tuple[float, ...]]:
    """Parse ``--milestones`` values: ``0.1,0.3,0.5`` (acc-like metrics) or ``loss=2,1.5``.

    >>> parse_milestones(["0.2,0.4", "loss=2.0,1.5"])
    {'acc*': (0.2, 0.4), 'loss': (2.0, 1.5)}
    """
    out: dict[str, tuple[float, ...]] = {}
    for text in texts:
        key, sep, levels = text.partition("=")
        if not sep:
            key, levels = ACC_LIKE, text
        try:
            values = tuple(float(v) for v in levels.split(",") if v.strip())
        except ValueError:
            raise InputError(
                "--milestones",
                f"not a list of numbers: {text!r}",
                "give levels like 0.1,0.3,0.5 or loss=2.0,1.5",
            ) from None
        if not values or not all(math.isfinite(v) for v in values):
            raise InputError(
                "--milestones",
                f"no usable levels in {text!r}",
                "give levels like 0.1,0.3,0.5 or loss=2.0,1.5",
            )
        out[key.strip()] = values
    return out


# --- preparing the logs -----------------------------------------------------------------


def _table(log: RunLog, notes: list[str]) -> pd.DataFrame:
    """One row per step, by step, last value of a repeated step kept; one rank only."""
    t = log.table
    if "rank" in t.columns and t["rank"].nunique() > 1:
        lowest = t["rank"].min()
        notes.append(f"{short_name(log.path)}: several ranks logged; rank {lowest} used")
        t = t[t["rank"] == lowest]
    t = t[np.isfinite(t["step"].to_numpy(dtype=float))]
    t = t.drop_duplicates("step", keep="last").sort_values("step", kind="stable")
    return t.reset_index(drop=True)


def _column(table: pd.DataFrame, name: str) -> np.ndarray:
    if name not in table.columns:
        return np.full(len(table), np.nan)
    return np.asarray(table[name].to_numpy(dtype=float, na_value=np.nan), dtype=float)


def _phases(table: pd.DataFrame, warmup_steps: int | None, peak_lr: float | None) -> Phases:
    steps, lr = _column(table, "step"), _column(table, "lr")
    phases = lr_phases(steps, lr, peak_lr=peak_lr)
    if warmup_steps is not None and not (phases.found and phases.warmup_steps is not None):
        # --warmup-steps stands in for an lr column that does not say.
        phases = lr_phases(steps, lr, warmup_steps=warmup_steps)
    return phases


def _cumulative_tokens(path: str, steps: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    ok = np.isfinite(tokens)
    if ok.sum() < 2:
        raise InputError(
            path,
            "no tokens logged; --align tokens needs a tokens column",
            "use --align step or --align warmup",
        )
    s, t = steps[ok], tokens[ok]
    if np.all(np.diff(t) > 0) and t[-1] > 3 * max(t[0], 1.0):
        cum = t  # already cumulative ("tokens seen")
    else:
        # The first logged value stands for the steps from 1 up to it (one step at 0).
        gaps = np.diff(s, prepend=s[0] - max(float(s[0]), 1.0))
        cum = np.cumsum(t * gaps)
    return _interp(s, cum, steps, max_gap=math.inf)


def _warmup_axis(steps: np.ndarray, own: Phases, run: Phases) -> np.ndarray:
    """Map a log's steps onto the run's step axis by fraction of warmup (module docstring)."""
    a_b, w_b = float(own.first_step), float(own.warmup_steps)  # type: ignore[arg-type]
    a_r, w_r = float(run.first_step), float(run.warmup_steps)  # type: ignore[arg-type]
    frac = (steps - a_b) / w_b
    return np.where(frac <= 1.0, a_r + frac * w_r, a_r + w_r + (steps - a_b - w_b))


def _median_gap(x: np.ndarray) -> float:
    d = np.diff(x)
    d = d[d > 0]
    return float(np.median(d)) if d.size else math.inf


def _interp(xp: np.ndarray, fp: np.ndarray, x: np.ndarray, max_gap: float) -> np.ndarray:
    """Linear interpolation of ``fp(xp)`` at ``x``: NaN outside ``[xp[0], xp[-1]]`` and
    between two points farther apart than ``max_gap`` (never extrapolates)."""
    ok = np.isfinite(xp) & np.isfinite(fp)
    xp, fp = xp[ok], fp[ok]
    out = np.full(np.shape(x), np.nan)
    if xp.size == 0:
        return out
    order = np.argsort(xp, kind="stable")
    xp, fp = xp[order], fp[order]
    x = np.asarray(x, dtype=float)
    inside = np.isfinite(x) & (x >= xp[0]) & (x <= xp[-1])
    if not inside.any():
        return out
    xi = x[inside]
    vals = np.interp(xi, xp, fp)
    hi = np.clip(np.searchsorted(xp, xi, side="left"), 1, max(xp.size - 1, 1))
    exact = np.isin(xi, xp)
    wide = (xp[hi] - xp[hi - 1] > max_gap) & ~exact if xp.size > 1 else ~exact
    vals[wide] = np.nan
    out[inside] = vals
    return out


def _print_step(values: np.ndarray) -> float:
    """The print resolution of logged values: largest ``10**-k`` (k <= 8) they are multiples of.

    >>> _print_step(np.array([0.046, 0.1, 0.25]))
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


# --- the band ---------------------------------------------------------------------------


def _local_fit(
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
    idx = start[:, None] + np.arange(w)[None, :]
    wx, wv = x[idx], v[idx]
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


def _robust_band(
    x: np.ndarray, v: np.ndarray, k: float, window: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """One baseline's ``(x, median, lo, hi)`` on its own finite points, or None (too few)."""
    ok = np.isfinite(x) & np.isfinite(v)
    x, v = x[ok], v[ok]
    if x.size < MIN_BAND_POINTS:
        return None
    order = np.argsort(x, kind="stable")
    x, v = x[order], v[order]
    centre, scale, c00 = _local_fit(x, v, window)
    # One window's scale is itself noisy (a few lucky points make a narrow band); the
    # noise level changes slowly, so it is the rolling median over 3 windows.
    import pandas as pd

    smooth = pd.Series(scale).rolling(3 * window, center=True, min_periods=1).median()
    scale = np.maximum(smooth.to_numpy(), _print_step(v))
    # A like run's point differs from the centre by its own noise and the centre's error.
    half = k * scale * np.sqrt(1.0 + c00)
    lo = centre - half
    if (v >= 0).all():
        lo = np.maximum(lo, 0.0)  # acc, loss, grad norms: a band below 0 says nothing
    return x, centre, lo, centre + half


def _band_at(
    bands: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]], x: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Median, lo, hi of the baselines' band at ``x`` (NaN where none covers it)."""
    meds, los, his = [], [], []
    for bx, med, lo, hi in bands:
        gap = MAX_GAP_FACTOR * _median_gap(bx)
        meds.append(_interp(bx, med, x, gap))
        los.append(_interp(bx, lo, x, gap))
        his.append(_interp(bx, hi, x, gap))
    m, lo_, hi_ = np.vstack(meds), np.vstack(los), np.vstack(his)
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
    return med, lo_out, hi_out


def _side(v: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per point: ``within``, ``above``, ``below`` or ``""`` (no value or no band)."""
    out = np.full(v.shape, "", dtype=object)
    ok = np.isfinite(v) & np.isfinite(lo) & np.isfinite(hi)
    out[ok & (v > hi)] = "above"
    out[ok & (v < lo)] = "below"
    out[ok & (v >= lo) & (v <= hi)] = "within"
    return out


def _label(inside: float, above: float, below: float) -> str:
    if inside >= WITHIN_SHARE:
        return "within"
    if above > 0.1 and below > 0.1:
        return "mixed"
    return "above" if above >= below else "below"


# --- per-metric summaries ---------------------------------------------------------------


def _summarise(
    phase: str,
    steps: np.ndarray,
    v: np.ndarray,
    med: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
) -> PhaseSummary:
    side = _side(v, lo, hi)
    has = np.isfinite(v)
    comp = side != ""
    n_points, n_comp = int(has.sum()), int(comp.sum())
    first = int(steps[has][0]) if n_points else None
    last = int(steps[has][-1]) if n_points else None
    if n_comp < MIN_PHASE_POINTS:
        return PhaseSummary(
            phase, n_points, n_comp, first, last, None, None, None, "not enough data", None
        )
    inside = float((side == "within").sum() / n_comp)
    above = float((side == "above").sum() / n_comp)
    below = float((side == "below").sum() / n_comp)
    return PhaseSummary(
        phase,
        n_points,
        n_comp,
        first,
        last,
        inside,
        above,
        below,
        _label(inside, above, below),
        _largest_departure(steps, v, med, lo, hi, side),
    )


def _largest_departure(
    steps: np.ndarray,
    v: np.ndarray,
    med: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    side: np.ndarray,
) -> Departure | None:
    out = (side == "above") | (side == "below")
    if not out.any():
        return None
    tiny = 1e-12
    with np.errstate(all="ignore"):
        widths = np.where(
            side == "above",
            (v - hi) / np.maximum(hi - med, tiny),
            (lo - v) / np.maximum(med - lo, tiny),
        )
    widths = np.where(out, widths, -np.inf)
    i = int(np.argmax(widths))
    excess = v[i] - hi[i] if side[i] == "above" else v[i] - lo[i]
    return Departure(
        step=int(steps[i]),
        value=float(v[i]),
        baseline_median=float(med[i]),
        band=(float(lo[i]), float(hi[i])),
        side=str(side[i]),
        excess=float(excess),
        widths=float(widths[i]),
    )


def slope_with_ci(
    x: np.ndarray, v: np.ndarray, *, file: str = "", scale: float = 1000.0, per: str = "1k steps"
) -> Slope:
    """Least-squares slope of ``v`` on ``x`` per ``scale`` units of ``x``, 95% Newey-West CI.

    ``V = (X'X)^-1 S (X'X)^-1`` with ``S = sum_l w_l sum_t e_t e_{t-l} x_t x_{t-l}'``
    (both orders), ``w_l = 1 - l / (L + 1)``, ``L = floor(4 (n/100)^(2/9))`` (Newey and
    West, 1987); the interval is ``slope +- t_{0.975, n-2} x se``.  Fewer than
    :data:`MIN_SLOPE_POINTS` points: no slope, and the reason says so.

    >>> s = slope_with_ci(np.arange(100.0), 0.002 * np.arange(100.0))
    >>> round(s.value, 6), s.n
    (2.0, 100)
    """
    ok = np.isfinite(x) & np.isfinite(v)
    x, v = x[ok] / scale, v[ok]
    n = int(x.size)
    if n < MIN_SLOPE_POINTS or np.ptp(x) == 0:
        return Slope(file, None, None, n, per, f"not enough data: {n} points after warmup")
    from scipy import stats

    xc = x - x.mean()
    design = np.column_stack([np.ones(n), xc])
    beta, *_ = np.linalg.lstsq(design, v, rcond=None)
    e = v - design @ beta
    bread = np.linalg.inv(design.T @ design)
    lag = int(math.floor(4 * (n / 100) ** (2 / 9)))
    xe = design * e[:, None]
    meat = xe.T @ xe
    for lag_i in range(1, min(lag, n - 1) + 1):
        g = xe[lag_i:].T @ xe[:-lag_i]
        meat += (1 - lag_i / (lag + 1)) * (g + g.T)
    se = float(math.sqrt(max((bread @ meat @ bread)[1, 1], 0.0)))
    half = float(stats.t.ppf(0.975, n - 2)) * se
    b = float(beta[1])
    return Slope(file, b, (b - half, b + half), n, per, se=se)


def _milestone(
    levels: Sequence[float], kind: str, logs: Sequence[_Log], name: str, window: int
) -> tuple[Milestone, ...]:
    direction = "down" if kind == "loss" else "up"
    out = []
    smooth: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for log in logs:
        v = _column(log.table, name)
        ok = np.isfinite(v)
        if ok.sum() >= MIN_BAND_POINTS:
            smooth[log.path] = (log.steps[ok], log.x[ok], _local_fit(log.x[ok], v[ok], window)[0])
    for level in levels:
        steps: dict[str, int | None] = {}
        aligned: dict[str, float | None] = {}
        for log in logs:
            if log.path not in smooth:
                continue
            st, x, m = smooth[log.path]
            hit = m >= level if direction == "up" else m <= level
            i = int(np.argmax(hit)) if hit.any() else None
            steps[log.path] = None if i is None else int(st[i])
            aligned[log.path] = None if i is None else float(x[i])
        out.append(Milestone(float(level), direction, steps, aligned))
    return tuple(out)


# --- sentences --------------------------------------------------------------------------


def _fmt(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "n/a"
    return f"{v:.3g}"


def _pct(share: float) -> str:
    if 0 < share < 0.005:
        return "<1%"
    return f"{round(100 * share)}%"


def _whose(names: Sequence[str]) -> str:
    if len(names) == 1:
        return f"{names[0]}'s"
    return f"the baselines' ({', '.join(names)})"


def _where(step: int, progress: float | None, phases: Phases) -> str:
    if progress is not None and math.isfinite(progress) and progress < 1.0:
        return f"{_pct(max(progress, 0.0))} of warmup"
    if phases.warmup_end_step is not None and step >= phases.warmup_end_step:
        return f"{step - phases.warmup_end_step} steps after warmup"
    return f"step {step}"


def _point_phrase(p: PointAnswer, kind: str, names: Sequence[str], phases: Phases) -> str:
    if p.verdict == "not logged":
        return f"At step {p.step} the run has no {p.metric} value."
    if p.verdict == "not enough data" or p.band is None:
        return f"At step {p.step} it is {_fmt(p.value)}; the baselines do not cover that point."
    where = _where(p.step, p.warmup_progress, phases)
    if p.verdict == "within":
        tail = f"normal for {where}"
    else:
        worse = (kind == "acc" and p.verdict == "below") or (
            kind == "loss" and p.verdict == "above"
        )
        better = (kind == "acc" and p.verdict == "above") or (
            kind == "loss" and p.verdict == "below"
        )
        lead = " (behind)" if worse else " (ahead)" if better else ""
        tail = f"{p.verdict} the band for {where}{lead}"
    whose = _whose(names)
    return (
        f"At step {p.step} it is {_fmt(p.value)} against {whose} {_fmt(p.baseline_median)} "
        f"[{_fmt(p.band[0])}, {_fmt(p.band[1])}]: {tail}."
    )


_HEAD = {
    "within": "is within",
    "above": "runs above",
    "below": "runs below",
    "mixed": "strays on both sides of",
    "not enough data": "cannot yet be judged against",
}
_PHASE_WORDS = {"warmup": "warmup", "post_warmup": "post-warmup", "all": "all"}


def _sentence(
    name: str,
    verdict: str,
    phases: Sequence[PhaseSummary],
    names: Sequence[str],
    point: str,
) -> str:
    parts = []
    for ph in phases:
        words = _PHASE_WORDS[ph.phase]
        if ph.inside is None:
            parts.append(f"only {ph.n_compared} {words} points overlap (not enough data)")
            continue
        bits = [f"{_pct(ph.inside)} of {ph.n_compared} {words} points inside"]
        if ph.above:
            bits.append(f"{_pct(ph.above)} above")
        if ph.below:
            bits.append(f"{_pct(ph.below)} below")
        parts.append(", ".join(bits))
    text = f"{name} {_HEAD[verdict]} {_whose(names)} band: {'; '.join(parts)}."
    point = point.strip()
    return f"{text} {point}" if point else text


def _slope_phrase(slopes: Sequence[Slope]) -> str:
    """How the run's slope after warmup compares with each baseline's ("" if unknown)."""
    run, *bases = slopes
    if run.value is None:
        return ""
    parts = []
    for b in bases:
        if b.run_minus is None or b.run_minus_ci is None:
            continue
        lo, hi = b.run_minus_ci
        pace = (
            "no clear difference from"
            if lo <= 0 <= hi
            else "faster than"
            if lo > 0
            else ("slower than")
        )
        where = f" over {b.span[0]:.6g}-{b.span[1]:.6g}" if b.span else ""
        parts.append(
            f"{pace} {short_name(b.file)}{where} ({_sign(b.value)}, difference "
            f"{_sign(b.run_minus)} [{_sign(lo)}, {_sign(hi)}])"
        )
    if not parts:
        return ""
    return f"After warmup it moves {_sign(run.value)} per {run.per}: {'; '.join(parts)}."


def _sign(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.3g}"


# --- the entry point --------------------------------------------------------------------


def compare_runs(
    baselines: Sequence[RunLog],
    run: RunLog,
    *,
    align: str = "step",
    metrics: Sequence[str] | None = None,
    milestones: Mapping[str, Sequence[float]] | None = None,
    at: Sequence[int] = (),
    warmup_steps: int | None = None,
    band_k: float = DEFAULT_BAND_K,
    window: int = DEFAULT_WINDOW,
    progress: Progress | None = None,
) -> Comparison:
    """Compare ``run`` with ``baselines`` on an aligned axis (see the module docstring).

    :param baselines: earlier runs of the same recipe (at least one).
    :param run: the run in question.
    :param align: ``step``, ``tokens`` or ``warmup``.
    :param metrics: columns to compare (default: those of ``loss, acc, grad_norm`` and
        the per-position ``acc_N``/``loss_N`` logged by the run and a baseline).
    :param milestones: levels by metric name; the key ``"acc*"`` applies to every
        acc-like metric (default ``0.1, 0.3, 0.5``).  Loss-like metrics have no default:
        absolute loss levels depend on the tokenizer and the task.
    :param at: run steps to answer for (``--at``).
    :param warmup_steps: warmup length for every log whose lr does not show one.
    :param band_k: band half-width in robust standard deviations (1.4826 x MAD).
    :param window: rolling window of the band, in logged points.
    :param progress: ``(done, total)`` callback, one call per metric.
    :raises InputError: no baseline, a bad option value, runs that share no range on the
        aligned axis, no metric logged by both, ``tokens``/``warmup`` alignment without
        the tokens or warmup it needs.
    """
    if not baselines:
        raise InputError(run.path, "no baseline to compare with", "give BASELINE.log RUN.log")
    if align not in ALIGN_MODES:
        raise InputError(
            "--align", f"unknown value {align!r}", f"choose from {', '.join(ALIGN_MODES)}"
        )
    if not (math.isfinite(band_k) and band_k > 0):
        raise InputError("--band-k", f"must be a positive number, got {band_k}", "")
    if window < 3:
        raise InputError("--window", f"must be 3 or more, got {window}", "")
    notes: list[str] = []
    logs, run_log = _prepare(baselines, run, align, warmup_steps, notes)
    _check_overlap(logs, run_log, align)
    names = _choose_metrics(logs, run_log, metrics, notes)
    levels = {ACC_LIKE: ACC_MILESTONES, **(milestones or {})}
    results: dict[str, MetricComparison] = {}
    answers: list[PointAnswer] = []
    labels = phase_labels(run_log.phases, run_log.steps)
    for i, (name, used) in enumerate(names.items()):
        mc, points = _compare_metric(name, used, run_log, labels, levels, at, band_k, window, align)
        results[name] = mc
        answers.extend(points)
        if progress is not None:
            progress(i + 1, len(names))
    answers.sort(key=lambda p: (p.step, list(names).index(p.metric)))
    axis = {"step": "step", "tokens": "tokens", "warmup": "step (warmup-aligned)"}[align]
    warmup = {log.path: log.phases for log in (*logs, run_log)}
    return Comparison(
        baselines=tuple(b.path for b in baselines),
        run=run.path,
        align=align,
        axis=axis,
        band_method=_band_words(len(logs), band_k, window),
        band_k=float(band_k),
        window=int(window),
        warmup=warmup,
        metrics=results,
        at=tuple(answers),
        notes=tuple(notes),
    )


def _band_words(n: int, k: float, window: int) -> str:
    one = f"robust local quadratic over {window} logged points +- {k:g} x 1.4826 x MAD"
    if n == 1:
        return one
    if n < QUANTILE_BASELINES:
        return f"envelope of {n} baselines' bands ({one})"
    q0, q1 = BAND_QUANTILES
    return f"{q0:.0%}-{q1:.0%} quantiles of {n} baselines' bands ({one})"


def _prepare(
    baselines: Sequence[RunLog],
    run: RunLog,
    align: str,
    warmup_steps: int | None,
    notes: list[str],
) -> tuple[list[_Log], _Log]:
    tables = [_table(b, notes) for b in baselines]
    run_table = _table(run, notes)
    base_phases = [_phases(t, warmup_steps, None) for t in tables]
    peaks = [p.peak_lr for p in base_phases if p.found and p.warmup_complete and p.peak_lr]
    run_phases = _phases(run_table, warmup_steps, max(peaks) if peaks else None)
    if not run_phases.warmup_complete and run_phases.peak_lr is not None:
        notes.append(f"{short_name(run.path)}: peak lr taken from the baselines")
    for path, p in [
        *zip([b.path for b in baselines], base_phases, strict=True),
        (run.path, run_phases),
    ]:
        if not p.found:
            notes.append(f"{short_name(path)}: {p.reason}")

    def axis(path: str, table: pd.DataFrame, phases: Phases) -> np.ndarray:
        steps = _column(table, "step")
        if align == "tokens":
            return _cumulative_tokens(path, steps, _column(table, "tokens"))
        if align == "warmup":
            return _warmup_axis(steps, phases, run_phases)
        return steps

    if align == "warmup" and not run_phases.warmup_steps:
        why = run_phases.reason.split(";")[0] or "its warmup length is unknown"
        raise InputError(
            run.path, f"--align warmup needs the run's warmup: {why}", "give --warmup-steps N"
        )
    logs = []
    for b, t, p in zip(baselines, tables, base_phases, strict=True):
        if align == "warmup" and not p.warmup_steps:
            notes.append(
                f"{short_name(b.path)}: left out: no warmup length to align by "
                f"({p.reason.split(';')[0] or 'unknown'})"
            )
            continue
        logs.append(_Log(b.path, short_name(b.path), t, _column(t, "step"), axis(b.path, t, p), p))
    if not logs:
        raise InputError(
            run.path,
            "no baseline has a warmup to align by",
            "give --warmup-steps N or use --align step",
        )
    run_log = _Log(
        run.path,
        short_name(run.path),
        run_table,
        _column(run_table, "step"),
        axis(run.path, run_table, run_phases),
        run_phases,
    )
    return logs, run_log


def _span(x: np.ndarray) -> tuple[float, float] | None:
    x = x[np.isfinite(x)]
    return (float(x.min()), float(x.max())) if x.size else None


def _check_overlap(logs: Sequence[_Log], run: _Log, align: str) -> None:
    rs = _span(run.x)
    unit = "tokens" if align == "tokens" else "steps"
    spans = {log.name: _span(log.x) for log in logs}
    if rs is not None and any(s and s[0] <= rs[1] and rs[0] <= s[1] for s in spans.values()):
        return
    have = ", ".join(f"{n} {_fmt_span(s)}" for n, s in spans.items())
    raise InputError(
        run.path,
        f"shares no {unit} range with the baselines: it covers {_fmt_span(rs)}, {have}",
        "compare runs that overlap" + ("" if align == "warmup" else ", or try --align warmup"),
    )


def _fmt_span(s: tuple[float, float] | None) -> str:
    return "nothing" if s is None else f"{s[0]:.10g}-{s[1]:.10g}"


def _has(table: pd.DataFrame, name: str) -> bool:
    return name in table.columns and bool(np.isfinite(_column(table, name)).any())


def _choose_metrics(
    logs: Sequence[_Log], run: _Log, wanted: Sequence[str] | None, notes: list[str]
) -> dict[str, tuple[_Log, ...]]:
    """Metric -> the baselines that logged it; says what is left out and why."""
    if wanted:
        candidates = list(dict.fromkeys(wanted))
    else:
        cols = set(run.table.columns).union(*(set(b.table.columns) for b in logs))
        pos = sorted((c for c in cols if _POSITION.match(str(c))), key=_position_key)
        candidates = [m for m in DEFAULT_METRICS if m in cols] + pos
    out: dict[str, tuple[_Log, ...]] = {}
    for name in candidates:
        used = tuple(b for b in logs if _has(b.table, name))
        if not _has(run.table, name) and not used:
            if wanted:  # a default metric nobody logs is not worth a note
                notes.append(f"{name}: not logged in any file; skipped")
        elif not _has(run.table, name):
            notes.append(f"{name}: not logged in {run.name}; skipped")
        elif not used:
            notes.append(f"{name}: not logged in any baseline; skipped")
        else:
            out[name] = used
            missing = [b.name for b in logs if b not in used]
            if missing:
                notes.append(
                    f"{name}: not logged in {', '.join(missing)}; compared with "
                    f"{', '.join(b.name for b in used)} only"
                )
    if not out:
        found = sorted(c for c in run.table.columns if c not in _NOT_METRICS and _has(run.table, c))
        raise InputError(
            run.path,
            "no metric is logged by both the run and a baseline"
            + (f" (asked for {', '.join(candidates)})" if wanted else ""),
            f"choose with --metric from: {', '.join(found) or 'none logged'}",
        )
    return out


def _position_key(name: str) -> tuple[str, int]:
    head, _, num = name.rpartition("_")
    return head, int(num)


def _compare_metric(
    name: str,
    used: tuple[_Log, ...],
    run: _Log,
    labels: np.ndarray,
    levels: Mapping[str, Sequence[float]],
    at: Sequence[int],
    band_k: float,
    window: int,
    align: str,
) -> tuple[MetricComparison, list[PointAnswer]]:
    kind = metric_kind(name)
    notes: list[str] = []
    bands = []
    for b in used:
        band = _robust_band(b.x, _column(b.table, name), band_k, window)
        if band is None:
            notes.append(
                f"{b.name} logs {name} at fewer than {MIN_BAND_POINTS} points: no band from it"
            )
        else:
            bands.append(band)
    v = _column(run.table, name)
    if bands:
        med, lo, hi = _band_at(bands, run.x)
    else:
        med = lo = hi = np.full(v.shape, np.nan)
    if run.phases.found or run.phases.peak_lr is not None:
        groups = [("warmup", labels == "warmup"), ("post_warmup", labels != "warmup")]
    else:
        groups = [("all", np.ones(v.shape, dtype=bool))]
    phases = tuple(
        _summarise(ph, run.steps[m], v[m], med[m], lo[m], hi[m])
        for ph, m in groups
        if np.isfinite(v[m]).any()
    )
    overall = _summarise("all", run.steps, v, med, lo, hi)
    names = [b.name for b in used]
    points = [_answer(int(s), name, v, run, bands, kind, names) for s in at]
    last = _last_compared(run, v, med)
    head = (
        points[0]
        if points
        else (_answer(last, name, v, run, bands, kind, names) if last is not None else None)
    )
    scale, per = (1e9, "1B tokens") if align == "tokens" else (1000.0, "1k steps")
    slopes = _slopes(name, run, used, labels, v, scale, per)
    point_text = head.sentence if head is not None else ""
    slope_text = _slope_phrase(slopes)
    sentence = _sentence(name, overall.verdict, phases, names, f"{point_text} {slope_text}")
    metric_levels = levels.get(name) or (levels.get(ACC_LIKE, ()) if kind == "acc" else ())
    milestones = _milestone(metric_levels, kind, (*used, run), name, window)
    grid = np.unique(np.concatenate([bx for bx, *_ in bands])) if bands else np.array([])
    g_med, g_lo, g_hi = _band_at(bands, grid) if bands else (grid, grid, grid)
    curves = Curves(
        run=(run.x, v),
        baselines={b.path: (b.x, _column(b.table, name)) for b in used},
        band=(grid, g_med, g_lo, g_hi),
        warmup_ends=_warmup_ends((*used, run)),
    )
    mc = MetricComparison(
        name=name,
        kind=kind,
        phases=phases,
        milestones=milestones,
        slopes=slopes,
        verdict=overall.verdict,
        sentence=sentence,
        baselines_used=tuple(b.path for b in used),
        curves=curves,
        notes=tuple(notes),
    )
    return mc, points


def _last_compared(run: _Log, v: np.ndarray, med: np.ndarray) -> int | None:
    ok = np.flatnonzero(np.isfinite(v) & np.isfinite(med))
    return int(run.steps[ok[-1]]) if ok.size else None


def _warmup_ends(logs: Sequence[_Log]) -> dict[str, float]:
    out = {}
    for log in logs:
        end = log.phases.warmup_end_step
        if end is not None and log.phases.warmup_steps:
            x = _interp(log.steps, log.x, np.array([float(end)]), math.inf)[0]
            if math.isfinite(x):
                out[log.path] = float(x)
    return out


def _slopes(
    name: str,
    run: _Log,
    used: Sequence[_Log],
    labels: np.ndarray,
    v: np.ndarray,
    scale: float,
    per: str,
) -> tuple[Slope, ...]:
    """The run's slope after its warmup; each baseline's over the aligned range both cover
    after warmup, with the run's slope over that same range subtracted (a curve that
    flattens would otherwise look slower over a longer range)."""
    post = (labels != "warmup") & np.isfinite(v)
    rx, rv = run.x[post], v[post]
    out = [slope_with_ci(rx, rv, file=run.path, scale=scale, per=per)]
    for b in used:
        bv = _column(b.table, name)
        bpost = (phase_labels(b.phases, b.steps) != "warmup") & np.isfinite(bv) & np.isfinite(b.x)
        lo = max(rx.min(), b.x[bpost].min()) if rx.size and bpost.any() else math.inf
        hi = min(rx.max(), b.x[bpost].max()) if rx.size and bpost.any() else -math.inf
        if not lo < hi:
            reason = "not enough data: no range after warmup shared with the run"
            out.append(Slope(b.path, None, None, 0, per, reason))
            continue
        m = bpost & (b.x >= lo) & (b.x <= hi)
        base = slope_with_ci(b.x[m], bv[m], file=b.path, scale=scale, per=per)
        r = (rx >= lo) & (rx <= hi)
        same = slope_with_ci(rx[r], rv[r], scale=scale, per=per)
        out.append(_versus(same, base, (float(lo), float(hi))))
    return tuple(out)


def _versus(run: Slope, base: Slope, span: tuple[float, float]) -> Slope:
    """``base`` with the run's slope (over the same ``span``) minus its own, and a 95%
    interval for that."""
    base = Slope(**{**base.__dict__, "span": span})
    if run.value is None or base.value is None or run.se is None or base.se is None:
        return base
    d = run.value - base.value
    half = 1.96 * math.sqrt(run.se**2 + base.se**2)
    return Slope(**{**base.__dict__, "run_minus": d, "run_minus_ci": (d - half, d + half)})


def _answer(
    step: int,
    name: str,
    v: np.ndarray,
    run: _Log,
    bands: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    kind: str,
    names: Sequence[str],
) -> PointAnswer:
    """The point answer at one run step: value, lr, warmup progress, band, verdict."""
    q = np.array([float(step)])
    has = np.isfinite(v)
    gap = MAX_GAP_FACTOR * _median_gap(run.steps[has])
    value = float(_interp(run.steps, v, q, gap)[0])
    lr = float(_interp(run.steps, _column(run.table, "lr"), q, gap)[0])
    x = float(_interp(run.steps, run.x, q, math.inf)[0])
    prog = float(warmup_progress(run.phases, q)[0])
    med = lo = hi = math.nan
    if bands and math.isfinite(x):
        m, lo_, hi_ = _band_at(bands, np.array([x]))
        med, lo, hi = float(m[0]), float(lo_[0]), float(hi_[0])
    if not math.isfinite(value):
        verdict = "not logged"
    elif not math.isfinite(med):
        verdict = "not enough data"
    else:
        verdict = str(_side(np.array([value]), np.array([lo]), np.array([hi]))[0])
    answer = PointAnswer(
        step=step,
        metric=name,
        value=_opt(value),
        lr=_opt(lr),
        warmup_progress=_opt(prog),
        x=_opt(x),
        baseline_median=_opt(med),
        band=(lo, hi) if math.isfinite(med) else None,
        verdict=verdict,
        sentence="",
    )
    sentence = _point_phrase(answer, kind, names, run.phases)
    return PointAnswer(**{**answer.__dict__, "sentence": sentence})


def _opt(v: float) -> float | None:
    return v if math.isfinite(v) else None
