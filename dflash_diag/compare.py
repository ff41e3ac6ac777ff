"""Is what a run shows now normal for this point of training?  A run against baselines.

:func:`compare_runs` puts a run and one or more baseline runs (earlier runs of the same
recipe) on one axis, builds a band of what the baselines did at each point, and says,
per metric and per phase, how much of the run lies inside, above and below it.

Alignment (``align``):

- ``step``: the logged step.
- ``tokens``: cumulative tokens.  A ``tokens`` column that rises at every logged point
  (and ends over 3x its start) is read as already cumulative; otherwise it is tokens per
  step and ``cum(s_i) = sum_{j<=i} tokens_j x (s_j - s_{j-1})`` (a logged value stands
  for the steps since the previous one; the first counts for one median gap).
- ``warmup``: the fraction of warmup done, expressed in the run's steps: a baseline step
  ``s`` in warmup maps to ``a_R + (s - a_B) / W_B x W_R`` and after warmup to
  ``a_R + W_R + (s - a_B - W_B)`` (``a`` first step, ``W`` warmup length; R run, B
  baseline), so warmups of different lengths line up and later steps keep their pace.

Logs logged at different intervals are compared by linear interpolation of each
baseline on the aligned axis, never past either end of a baseline and never across a
gap wider than :data:`MAX_GAP_FACTOR` x its median spacing (a missing stretch).

The band at an aligned point ``x``:

- one baseline: its rolling median ``m`` over a centred window of ``window`` logged
  points (default :data:`DEFAULT_WINDOW`, at least :data:`MIN_BAND_POINTS` in it) and
  ``m +- k x 1.4826 x MAD``, the MAD being the rolling median of ``|value - m|`` (so a
  rising curve's trend does not widen it); ``k`` defaults to :data:`DEFAULT_BAND_K`.
  ``1.4826 x MAD`` is the standard deviation for normal noise, so 3 of them hold
  99.7% of a like run's points.  The scale is floored at the metric's print step
  (``0.001`` for ``acc=0.046``) so a flat stretch does not make a zero-width band.
- 2 to 4 baselines: the envelope of their robust bands (lowest ``lo``, highest ``hi``);
  the median is the median of their rolling medians.
- 5 or more: the 10th percentile of their ``lo`` and the 90th of their ``hi``
  (:data:`BAND_QUANTILES`), so one odd baseline does not stretch the band.

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
    """

    file: str
    value: float | None
    ci: tuple[float, float] | None
    n: int
    per: str
    reason: str = ""


@dataclass(frozen=True)
class Milestone:
    """First step at which each log's smoothed metric reaches ``level``.

    Smoothed: the rolling median over ``window`` logged points, so one lucky point does
    not count.  ``direction`` is ``up`` (reaches ``>= level``, acc-like) or ``down``
    (falls to ``<= level``, loss-like).  ``steps`` are in each log's own numbering, None
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


def _table(log: RunLog) -> pd.DataFrame:
    """One row per step, by step, last value of a repeated step kept; rank 0 only."""
    t = log.table
    if "rank" in t.columns and t["rank"].nunique() > 1:
        t = t[t["rank"] == t["rank"].min()]
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
        gaps = np.diff(s, prepend=s[0] - (np.median(np.diff(s)) if s.size > 1 else 1.0))
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
        if np.all(np.abs(scaled - np.round(scaled)) <= 1e-6 * np.maximum(1.0, scaled)):
            return 10.0**-k
    return 0.0


# --- the band ---------------------------------------------------------------------------


def _rolling_median(v: np.ndarray, window: int) -> np.ndarray:
    import pandas as pd

    s = pd.Series(v)
    return s.rolling(window, center=True, min_periods=min(window, MIN_BAND_POINTS)).median().to_numpy()


def _robust_band(
    x: np.ndarray, v: np.ndarray, k: float, window: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """One baseline's ``(x, median, lo, hi)`` on its own finite points, or None (too few)."""
    ok = np.isfinite(x) & np.isfinite(v)
    x, v = x[ok], v[ok]
    if x.size < MIN_BAND_POINTS:
        return None
    med = _rolling_median(v, window)
    mad = _rolling_median(np.abs(v - med), window)
    scale = np.maximum(MAD_SCALE * mad, _print_step(v))
    return x, med, med - k * scale, med + k * scale


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
                lo_out[many] = np.nanquantile(lo_[:, many], BAND_QUANTILES[0], axis=0)
                hi_out[many] = np.nanquantile(hi_[:, many], BAND_QUANTILES[1], axis=0)
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
    return Slope(file, b, (b - half, b + half), n, per)


MIN_SLOPE_POINTS = 10


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
            smooth[log.path] = (log.steps[ok], log.x[ok], _rolling_median(v[ok], window))
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
        worse = (kind == "acc" and p.verdict == "below") or (kind == "loss" and p.verdict == "above")
        better = (kind == "acc" and p.verdict == "above") or (kind == "loss" and p.verdict == "below")
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
    return f"{text} {point}" if point else text
