"""Put a run and its baselines on one axis, and read a log between its logged points.

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
baseline on the aligned axis (:func:`interp`), never past either end of a baseline and
never across a gap wider than :data:`MAX_GAP_FACTOR` x its median spacing (a missing
stretch).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import InputError
from ..lr_phases import Phases, lr_phases

if TYPE_CHECKING:
    import pandas as pd

    from ..data import RunLog

ALIGN_MODES: tuple[str, ...] = ("step", "tokens", "warmup")
#: Interpolation stops at gaps wider than this many median spacings (a missing stretch).
MAX_GAP_FACTOR = 5.0
#: The aligned axis' name, by ``align``.
AXIS_NAMES: dict[str, str] = {
    "step": "step",
    "tokens": "tokens",
    "warmup": "run step (baselines mapped by fraction of warmup)",
}


@dataclass(frozen=True, eq=False)
class AlignedLog:
    """One log prepared for comparison: steps, aligned positions ``x``, lr phases."""

    path: str
    name: str
    table: pd.DataFrame
    steps: np.ndarray
    x: np.ndarray
    phases: Phases
    #: per column, bool per table row: the log printed the value as NaN (the reader's
    #: :attr:`RunLog.logged_nan <dflash_diag.data.RunLog.logged_nan>`), or None when
    #: the table did not come from a reader (then it is guessed from the table).
    printed_nan: dict[str, np.ndarray] | None = None


def short_name(path: str) -> str:
    """The name a sentence uses for a log: its file name without the extension.

    >>> short_name("runs/v1.log")
    'v1'
    """
    base = os.path.basename(str(path)) or str(path)
    stem, _ = os.path.splitext(base)
    return stem or base


def column(table: pd.DataFrame, name: str) -> np.ndarray:
    """Column ``name`` as floats (NaN for missing values; all NaN when it is absent)."""
    if name not in table.columns:
        return np.full(len(table), np.nan)
    return np.asarray(table[name].to_numpy(dtype=float, na_value=np.nan), dtype=float)


def median_gap(x: np.ndarray) -> float:
    """Median of the positive spacings of ``x`` (inf when there are none)."""
    d = np.diff(x)
    d = d[d > 0]
    return float(np.median(d)) if d.size else math.inf


def gap_limit(x: np.ndarray) -> float:
    """Widest gap :func:`interp` bridges between points ``x``: ``MAX_GAP_FACTOR`` x
    their median spacing."""
    return MAX_GAP_FACTOR * median_gap(x)


def interp(xp: np.ndarray, fp: np.ndarray, x: np.ndarray, max_gap: float) -> np.ndarray:
    """Linear interpolation of ``fp(xp)`` at ``x``: NaN outside ``[xp[0], xp[-1]]`` and
    between two points farther apart than ``max_gap`` (never extrapolates).

    >>> interp(np.array([0.0, 1.0, 10.0]), np.array([0.0, 2.0, 3.0]),
    ...        np.array([0.5, 5.0, 11.0]), max_gap=2.0).tolist()
    [1.0, nan, nan]
    """
    ok = np.isfinite(xp) & np.isfinite(fp)
    if not ok.all():
        xp, fp = xp[ok], fp[ok]
    out = np.full(np.shape(x), np.nan)
    if xp.size == 0:
        return out
    if xp.size > 1 and not (xp[1:] >= xp[:-1]).all():  # (logs come sorted: skip the sort)
        order = np.argsort(xp, kind="stable")
        xp, fp = xp[order], fp[order]
    x = np.asarray(x, dtype=float)
    inside = np.isfinite(x) & (x >= xp[0]) & (x <= xp[-1])
    if not inside.any():
        return out
    xi = x[inside]
    vals = np.interp(xi, xp, fp)
    if xp.size > 1:
        hi = np.clip(np.searchsorted(xp, xi, side="left"), 1, xp.size - 1)
        # ``xi`` is a point of ``xp`` when it equals the first point not below it (or
        # ``xp[0]``, where the clip moved ``hi`` up).
        exact = (xp[hi] == xi) | (xp[hi - 1] == xi)
        vals[(xp[hi] - xp[hi - 1] > max_gap) & ~exact] = np.nan
    out[inside] = vals
    return out


def _table(log: RunLog, notes: list[str]) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """One row per step, by step, last value of a repeated step kept; one rank only;
    with the reader's printed-NaN marks for the rows kept."""
    t = log.table.assign(**{_ROW: np.arange(len(log.table))})
    if "rank" in t.columns and t["rank"].nunique() > 1:
        lowest = t["rank"].min()
        notes.append(f"{short_name(log.path)}: several ranks logged; rank {lowest} used")
        t = t[t["rank"] == lowest]
    t = t[np.isfinite(t["step"].to_numpy(dtype=float))]
    t = t.drop_duplicates("step", keep="last").sort_values("step", kind="stable")
    rows = t.pop(_ROW).to_numpy()
    marks = {c: np.asarray(m, dtype=bool)[rows] for c, m in log.logged_nan.items()}
    return t.reset_index(drop=True), marks


#: A helper column that follows the rows through :func:`_table`.
_ROW = "\0row"


def _phases(table: pd.DataFrame, warmup_steps: int | None, peak_lr: float | None) -> Phases:
    steps, lr = column(table, "step"), column(table, "lr")
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
    return interp(s, cum, steps, max_gap=math.inf)


def _warmup_axis(steps: np.ndarray, own: Phases, run: Phases) -> np.ndarray:
    """Map a log's steps onto the run's step axis by fraction of warmup (module docstring)."""
    a_b, w_b = float(own.first_step), float(own.warmup_steps)  # type: ignore[arg-type]
    a_r, w_r = float(run.first_step), float(run.warmup_steps)  # type: ignore[arg-type]
    frac = (steps - a_b) / w_b
    return np.where(frac <= 1.0, a_r + frac * w_r, a_r + w_r + (steps - a_b - w_b))


def _why_no_warmup(phases: Phases, default: str) -> str:
    return phases.reason.split(";")[0] or default


def prepare(
    baselines: Sequence[RunLog],
    run: RunLog,
    align: str,
    warmup_steps: int | None,
    notes: list[str],
) -> tuple[list[AlignedLog], AlignedLog]:
    """The baselines and the run on the aligned axis (``align``: see :data:`ALIGN_MODES`).

    The run's peak lr, when its warmup is not finished, is taken from the baselines.
    With ``warmup`` alignment a baseline without a warmup length is left out (a note
    says so).  Appends what it assumed or left out to ``notes``.

    :raises InputError: ``tokens`` alignment without tokens, ``warmup`` alignment
        without the run's warmup or any baseline's.
    """
    read = [_table(b, notes) for b in baselines]
    tables = [t for t, _ in read]
    run_table, run_marks = _table(run, notes)
    marks = {b.path: m for b, (_, m) in zip(baselines, read, strict=True)} | {run.path: run_marks}
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

    def aligned(path: str, table: pd.DataFrame, phases: Phases) -> AlignedLog:
        steps = column(table, "step")
        if align == "tokens":
            x = _cumulative_tokens(path, steps, column(table, "tokens"))
        elif align == "warmup":
            x = _warmup_axis(steps, phases, run_phases)
        else:
            x = steps
        return AlignedLog(path, short_name(path), table, steps, x, phases, marks[path])

    if align == "warmup" and not run_phases.warmup_steps:
        why = _why_no_warmup(run_phases, "its warmup length is unknown")
        raise InputError(
            run.path, f"--align warmup needs the run's warmup: {why}", "give --warmup-steps N"
        )
    logs = []
    for b, t, p in zip(baselines, tables, base_phases, strict=True):
        if align == "warmup" and not p.warmup_steps:
            notes.append(
                f"{short_name(b.path)}: left out: no warmup length to align by "
                f"({_why_no_warmup(p, 'unknown')})"
            )
            continue
        logs.append(aligned(b.path, t, p))
    if not logs:
        raise InputError(
            run.path,
            "no baseline has a warmup to align by",
            "give --warmup-steps N or use --align step",
        )
    return logs, aligned(run.path, run_table, run_phases)


def _span(x: np.ndarray) -> tuple[float, float] | None:
    x = x[np.isfinite(x)]
    return (float(x.min()), float(x.max())) if x.size else None


def _fmt_span(s: tuple[float, float] | None) -> str:
    return "nothing" if s is None else f"{s[0]:.10g}-{s[1]:.10g}"


def check_overlap(logs: Sequence[AlignedLog], run: AlignedLog, align: str) -> None:
    """Raise unless the run shares some of the aligned axis with at least one baseline.

    :raises InputError: naming each log's range.
    """
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


def warmup_ends(logs: Sequence[AlignedLog]) -> dict[str, float]:
    """``{path: x}``: where each log's warmup ends on the aligned axis (where known)."""
    out = {}
    for log in logs:
        end = log.phases.warmup_end_step
        if end is not None and log.phases.warmup_steps:
            x = interp(log.steps, log.x, np.array([float(end)]), math.inf)[0]
            if math.isfinite(x):
                out[log.path] = float(x)
    return out


def warmup_anchors(logs: Sequence[AlignedLog]) -> dict[str, int]:
    """``{path: step}``: where each log's warmup ends, in its own steps: the points that
    ``warmup`` alignment lines up (``a + W`` of the module docstring)."""
    out = {}
    for log in logs:
        p = log.phases
        if p.first_step is not None and p.warmup_steps:
            out[log.path] = int(p.first_step + p.warmup_steps)
    return out
