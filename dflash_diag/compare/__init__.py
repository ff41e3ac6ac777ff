"""Is what a run shows now normal for this point of training?  A run against baselines.

:func:`compare_runs` puts a run and one or more baseline runs (earlier runs of the same
recipe) on one axis, builds a band of what the baselines did at each point, and says,
per metric and per phase, how much of the run lies inside, above and below it.

- :mod:`~dflash_diag.compare.align`: the aligned axis (``step``, ``tokens``, ``warmup``)
  and interpolation that never extrapolates nor bridges a missing stretch.
- :mod:`~dflash_diag.compare.band`: one baseline's robust local band, and the envelope
  or quantile band of several.
- :mod:`~dflash_diag.compare.summary`: per-phase shares and verdicts, the largest
  departure, slopes after warmup with confidence intervals, milestones, sentences.
- :mod:`~dflash_diag.compare.values`: which cells are values, absent, or logged
  nan/inf (a numerical failure).
- :mod:`~dflash_diag.compare.steps`: logs numbered by line order (logging events, not
  steps): refused beside stepped logs; ``--step-every`` for them.
- :mod:`~dflash_diag.compare.runs`: :func:`compare_runs`, which puts them together.
- :mod:`~dflash_diag.compare.results`: the dataclasses it returns.
"""

from __future__ import annotations

from .align import ALIGN_MODES, MAX_GAP_FACTOR, short_name
from .band import (
    BAND_QUANTILES,
    DEFAULT_BAND_K,
    DEFAULT_WINDOW,
    MAD_SCALE,
    MIN_BAND_POINTS,
    QUANTILE_BASELINES,
)
from .results import (
    Comparison,
    Curves,
    Departure,
    MetricComparison,
    Milestone,
    NonFinite,
    PhaseSummary,
    PointAnswer,
    Slope,
)
from .runs import DEFAULT_METRICS, Progress, compare_runs, metric_kind
from .steps import apply_step_every, check_step_sources, renumber_events
from .summary import (
    ACC_LIKE,
    ACC_MILESTONES,
    MIN_PHASE_POINTS,
    MIN_SLOPE_POINTS,
    WITHIN_SHARE,
    VersusFigures,
    parse_milestones,
    share_text,
    slope_with_ci,
    span_text,
    versus_figures,
)
from .values import logged_nonfinite

__all__ = [
    "ACC_LIKE",
    "ACC_MILESTONES",
    "ALIGN_MODES",
    "BAND_QUANTILES",
    "DEFAULT_BAND_K",
    "DEFAULT_METRICS",
    "DEFAULT_WINDOW",
    "MAD_SCALE",
    "MAX_GAP_FACTOR",
    "MIN_BAND_POINTS",
    "MIN_PHASE_POINTS",
    "MIN_SLOPE_POINTS",
    "QUANTILE_BASELINES",
    "WITHIN_SHARE",
    "Comparison",
    "Curves",
    "Departure",
    "MetricComparison",
    "Milestone",
    "NonFinite",
    "PhaseSummary",
    "PointAnswer",
    "Progress",
    "Slope",
    "VersusFigures",
    "apply_step_every",
    "check_step_sources",
    "compare_runs",
    "logged_nonfinite",
    "metric_kind",
    "parse_milestones",
    "renumber_events",
    "short_name",
    "share_text",
    "slope_with_ci",
    "span_text",
    "versus_figures",
]
