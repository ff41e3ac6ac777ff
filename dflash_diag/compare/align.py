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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import numpy as np

from ..errors import InputError
from ..lr_phases import Phases, lr_phases

if TYPE_CHECKING:
    import pandas as pd

    from ..data import RunLog

T = TypeVar("T")

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
    """The name a sentence uses for a log: its file name without the extension; a
    tracker's run (``http://host:5000 run RUN_ID``, as an MLflow run is shown) by its
    run id.

    >>> short_name("runs/v1.log"), short_name("http://127.0.0.1:5000 run 3f2a")
    ('v1', '3f2a')
    """
    _, tracked, run_id = str(path).rpartition(" run ")
    if tracked and run_id and "/" not in run_id:
        return run_id
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
    return interp_many(xp, [fp], x, max_gap)[0]


def interp_many(
    xp: np.ndarray,
    fps: Sequence[np.ndarray],
    x: np.ndarray,
    max_gap: float,
    memo: Memo | None = None,
) -> list[np.ndarray]:
    """:func:`interp` of each of ``fps`` on the same ``xp``, at the same ``x``: where each
    point of ``x`` falls among ``xp`` is found once (and kept in ``memo`` for a later call
    with the same arrays), the numbers are :func:`interp`'s."""
    fin = np.isfinite(xp)
    fin = None if fin.all() else fin  # (no copy of the curves when every knot is finite)
    if not all(np.isfinite(fp if fin is None else fp[fin]).all() for fp in fps):
        # (a curve's own NaN changes the knots: each curve on its own)
        return [_Spots.find(xp, fp, x, max_gap).values(fp) for fp in fps]
    spots = kept(memo, ("spots", xp, x, max_gap), lambda: _Spots.find(xp, None, x, max_gap))
    return [spots.values(fp) for fp in fps]


class _Spots(NamedTuple):
    """Where the points ``x`` fall among the knots of :func:`interp`: all it needs but the
    values.  ``keep``/``order``: the knots used (finite) and their sorting (None: as
    they are); ``inside``: the points within the knots; ``gapped``: those of them between
    two knots farther apart than ``max_gap``; ``same``: ``x`` is the knots themselves
    (strictly increasing), where the interpolation is the values; ``at``: when every
    point inside is a knot (strictly increasing knots; a run logged at its baseline's
    steps), the knot of each, whose value the interpolation is there; ``every``: every
    point is inside (``x`` one-dimensional), so the values inside are all of them."""

    shape: tuple[int, ...]
    keep: np.ndarray | None
    order: np.ndarray | None
    xp: np.ndarray
    inside: np.ndarray | None
    xi: np.ndarray | None
    gapped: np.ndarray | None
    same: bool
    at: np.ndarray | None = None
    every: bool = False

    @staticmethod
    def find(xp: np.ndarray, fp: np.ndarray | None, x: np.ndarray, max_gap: float) -> _Spots:
        """The spots of ``x`` among the knots ``xp`` where ``xp`` (and ``fp``) are finite."""
        ok = np.isfinite(xp) if fp is None else np.isfinite(xp) & np.isfinite(fp)
        keep = None if ok.all() else ok
        if keep is not None:
            xp = xp[keep]
        order = None
        if xp.size > 1 and not (xp[1:] >= xp[:-1]).all():  # (logs come sorted: skip the sort)
            order = np.argsort(xp, kind="stable")
            xp = xp[order]
        x = np.asarray(x, dtype=float)
        shape = np.shape(x)
        if xp.size == 0:
            return _Spots(shape, keep, order, xp, None, None, None, False)
        if shape == xp.shape and bool((xp[1:] > xp[:-1]).all()) and np.array_equal(x, xp):
            return _Spots(shape, keep, order, xp, None, None, None, True)
        stretch = _stretch(xp, x) if keep is None and order is None else None
        if stretch is not None:  # (every point a knot, in a row: the knots' own values)
            inside = np.ones(x.size, dtype=bool)
            return _Spots(shape, None, None, xp, inside, x, None, False, stretch, True)
        inside = np.isfinite(x) & (x >= xp[0]) & (x <= xp[-1])
        if not inside.any():
            return _Spots(shape, keep, order, xp, None, None, None, False)
        every = x.ndim == 1 and bool(inside.all())
        xi = x if every else x[inside]
        gapped = at = None
        if xp.size > 1:
            hi = np.clip(np.searchsorted(xp, xi, side="left"), 1, xp.size - 1)
            # ``xi`` is a point of ``xp`` when it equals the first point not below it (or
            # ``xp[0]``, where the clip moved ``hi`` up).
            on_hi = xp[hi] == xi
            exact = on_hi | (xp[hi - 1] == xi)
            gapped = (xp[hi] - xp[hi - 1] > max_gap) & ~exact
            if not gapped.any():
                gapped = None
            if exact.all() and bool((xp[1:] > xp[:-1]).all()):
                at = np.where(on_hi, hi, hi - 1)  # (one knot of a value: np.interp's)
        return _Spots(shape, keep, order, xp, inside, xi, gapped, False, at, every)

    def values(self, fp: np.ndarray) -> np.ndarray:
        """The interpolation of ``fp`` (on the knots :meth:`find` was given) at the points."""
        if self.keep is not None:
            fp = fp[self.keep]
        if self.order is not None:
            fp = fp[self.order]
        if self.same:  # (np.interp returns a knot's value itself at the knot)
            return np.array(fp, dtype=float)
        if self.inside is None or self.xi is None:
            return np.full(self.shape, np.nan)
        if self.at is not None:  # (np.interp at a knot is the knot's value)
            vals = np.asarray(fp, dtype=float)[self.at]
        else:
            vals = np.interp(self.xi, self.xp, fp)
        if self.gapped is not None:
            vals[self.gapped] = np.nan
        if self.every:  # (a new array, of every point)
            return vals
        out = np.full(self.shape, np.nan)
        out[self.inside] = vals
        return out


def _stretch(xp: np.ndarray, x: np.ndarray) -> np.ndarray | None:
    """When ``x`` (one-dimensional) is a stretch of consecutive knots of strictly
    increasing ``xp`` (a run logged at its baseline's steps, over a part of them): the
    knots' indices, those :meth:`_Spots.find`'s search would give (each point equals its
    knot, so ``np.interp`` there is the knot's value).  Else None.  One search and one
    comparison instead of a search a point."""
    if x.ndim != 1 or x.size == 0 or xp.size < 2 or not np.isfinite(x[0]):
        return None
    first = int(np.searchsorted(xp, x[0], side="left"))
    if first + x.size > xp.size or not np.array_equal(x, xp[first : first + x.size]):
        return None
    if not bool((xp[1:] > xp[:-1]).all()):
        return None
    return np.arange(first, first + x.size)


class Memo:
    """Results kept by what they were computed from: arrays (compared bit for bit) and
    other values, so that the metrics of one comparison, which share the logs' axes, find
    the same knots and fits once.  Keeps the last ``size`` results."""

    def __init__(self, size: int = 32) -> None:
        self._kept: list[tuple[tuple[object, ...], object]] = []
        self._size = size

    def get(self, key: tuple[object, ...], make: Callable[[], T]) -> T:
        """The result kept under ``key``, or ``make()`` (then kept)."""
        kept = self.find(key)
        if kept is not None:
            return kept  # type: ignore[return-value]
        value = make()
        self.put(key, value)
        return value

    def find(self, key: tuple[object, ...]) -> object | None:
        """The result kept under ``key``, or None."""
        for k, value in self._kept:
            if len(k) == len(key) and all(map(_same, k, key)):
                return value
        return None

    def forget(self, tag: str) -> None:
        """Let go of the results whose key starts with ``tag`` (no longer needed)."""
        self._kept = [(k, v) for k, v in self._kept if not (k and _same(k[0], tag))]

    def put(self, key: tuple[object, ...], value: object) -> None:
        """Keep ``value`` under ``key`` (the oldest result goes past ``size``)."""
        self._kept.append((key, value))
        del self._kept[: -self._size]


def kept(memo: Memo | None, key: tuple[object, ...], make: Callable[[], T]) -> T:
    """``memo.get(key, make)``, or ``make()`` when there is no memo."""
    return make() if memo is None else memo.get(key, make)


def _same(a: object, b: object) -> bool:
    """``a`` and ``b`` are the same key: arrays equal bit for bit (so ``-0.0`` is not
    ``0.0`` and NaN is NaN), other values equal and of one type."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a is b:
            return True
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        return bool(np.array_equal(_bits(a), _bits(b)))
    return type(a) is type(b) and a == b


def _bits(a: np.ndarray) -> np.ndarray:
    """``a``'s bytes as unsigned integers of its item size (a bitwise comparison)."""
    a = np.ascontiguousarray(a)
    if a.dtype.itemsize in (1, 2, 4, 8):
        return a.view(f"u{a.dtype.itemsize}")
    return a.reshape(-1).view(np.uint8)


def _table(log: RunLog, notes: list[str]) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """One row per step, by step, last value of a repeated step kept; one rank only;
    with the reader's printed-NaN marks for the rows kept."""
    several = "rank" in log.table.columns and log.table["rank"].nunique() > 1
    if not several and _in_step_order(log.table):  # (the rows as they are)
        marks = {c: np.array(m, dtype=bool) for c, m in log.logged_nan.items()}
        return log.table.reset_index(drop=True), marks
    t = log.table.assign(**{_ROW: np.arange(len(log.table))})
    if several:
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


def _in_step_order(t: pd.DataFrame) -> bool:
    """Every row has a finite step, larger than the row's before."""
    if "step" not in t.columns:
        return False
    steps = column(t, "step")
    return bool(np.isfinite(steps).all() and (steps[1:] > steps[:-1]).all())


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
