"""What a comparison returns: frozen dataclasses, from one departure up to a Comparison.

They hold data only; :mod:`~dflash_diag.compare.summary` and
:mod:`~dflash_diag.compare.runs` make them, ``render/compare.py`` lays them out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from ..lr_phases import Phases


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
    :param baseline_above: the share of the baselines' own points of the phase above the
        band (of one to four baselines the largest of any one's, of five or more the
        median baseline's): what a like run shows (a spiky baseline's spikes lie outside
        its own robust band); ``baseline_below`` likewise.
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
    baseline_above: float | None = None
    baseline_below: float | None = None


@dataclass(frozen=True)
class Slope:
    """Least-squares slope of a metric against the aligned axis after warmup.

    ``value`` and ``ci`` (95%) are per ``per`` (``1k steps`` or ``1B tokens``).  The
    interval uses Newey-West standard errors (Bartlett kernel, lag
    ``floor(4 (n/100)^(2/9))``) because step-to-step noise is autocorrelated.

    The run's own slope is over ``span``, its whole range after warmup.  A baseline's
    slope is taken over ``span``, the aligned range after warmup that it shares with the
    run; ``run_value`` (``run_ci``, ``run_n``) is the run's slope over that same range,
    and ``run_minus = run_value - value``, with its 95% interval ``run_minus_ci``
    (``+- 1.96 sqrt(se_run^2 + se^2)``, the runs being independent): an interval clear
    of 0 says the run climbs (or falls) at another pace there.
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
    run_value: float | None = None
    run_ci: tuple[float, float] | None = None
    run_n: int = 0


@dataclass(frozen=True)
class NonFinite:
    """Values of one metric a log wrote as ``nan``/``inf``: a numerical failure, not a
    value left out (see :func:`~dflash_diag.compare.logged_nonfinite`).

    :param count: logged steps whose value is non-finite.
    :param first_step: the first of them (the log's own numbering), None when none.
    """

    count: int
    first_step: int | None


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
    :param nonfinite: per file (the run and ``baselines_used``), the values logged as
        nan/inf; they are left out of the band, the shares and the slopes.
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
    nonfinite: dict[str, NonFinite] = field(default_factory=dict)


@dataclass(frozen=True)
class PointAnswer:
    """The answer at one step of the run (``--at STEP``).

    ``value`` is the logged value (interpolated between neighbours when that step was
    not logged; never past the run's ends), ``x`` the aligned position, ``verdict``
    ``within``/``above``/``below``, ``not logged`` (no run value there), ``non-finite``
    (the run logged nan/inf at that step or at a logged neighbour of it: ``value`` is
    None) or ``not enough data`` (no band there).
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
    """Everything :func:`~dflash_diag.compare.compare_runs` found; rendering turns it into
    text, JSON, plots.

    :param axis: the aligned axis' name (``step``, ``tokens``, or with ``warmup``
        alignment ``run step (others mapped by warmup)``; ``logging event`` in place of
        ``step`` when the steps are line numbers).
    :param band_method: how the band was made, in words.
    :param warmup: the phases of every log, by file.
    :param step_sources: where each log's step numbers came from
        (:attr:`~dflash_diag.data.RunLog.step_source`): ``line order`` means logging
        events numbered 1, 2, ..., not optimizer steps.
    :param anchors: with ``warmup`` alignment, the step at which each aligned log's
        warmup ends (the points lined up with each other); else empty.
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
    step_sources: dict[str, str] = field(default_factory=dict)
    anchors: dict[str, int] = field(default_factory=dict)
