""":func:`compare_runs`, the entry point: checks the options, aligns the logs, chooses
the metrics, and compares one metric at a time (band, phase shares, slopes,
milestones, answers at ``--at`` steps, the sentence).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..arrays import rows, unique_values
from ..data import Progress, metric_kind
from ..errors import InputError
from ..lr_phases import WARMUP, phase_codes, warmup_progress
from .align import (
    ALIGN_MODES,
    AXIS_NAMES,
    AlignedLog,
    Memo,
    check_overlap,
    column,
    gap_limit,
    interp,
    kept,
    prepare,
    short_name,
    warmup_anchors,
    warmup_ends,
)
from .band import (
    DEFAULT_BAND_K,
    DEFAULT_WINDOW,
    MIN_BAND_POINTS,
    QUANTILE_BASELINES,
    Band,
    BandAt,
    band_at,
    band_words,
    robust_band,
    side_codes,
    side_of,
)
from .results import Comparison, Curves, MetricComparison, NonFinite, PointAnswer
from .steps import EVENTS_NOTE, LINE_ORDER, check_step_sources
from .summary import (
    ACC_LIKE,
    ACC_MILESTONES,
    failure_phrase,
    find_milestones,
    metric_sentence,
    own_shares,
    point_phrase,
    slope_phrase,
    slopes_after_warmup,
    summarise_phase,
)
from .values import logged_nonfinite, nonfinite_summary

if TYPE_CHECKING:
    import pandas as pd

    from ..data import RunLog

DEFAULT_METRICS: tuple[str, ...] = ("loss", "acc", "grad_norm")
_POSITION = re.compile(r"^(acc|loss)_\d+$")
_NOT_METRICS = frozenset({"step", "lr", "tokens", "tok_per_s", "epoch", "rank", "elapsed"})


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
    """Compare ``run`` with ``baselines`` on an aligned axis (see :mod:`dflash_diag.compare`:
    alignment in ``align.py``, the band in ``band.py``, verdicts in ``summary.py``).

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
        the tokens or warmup it needs, logs numbered by line order beside logs with steps
        (:func:`~dflash_diag.compare.steps.check_step_sources`).

    Logs that are all numbered by line order are compared event by event; the
    Comparison says so (``step_sources``, ``axis``, a note, slopes per 1k events).
    """
    if not baselines:
        raise InputError(run.path, "no baseline to compare with", "give BASELINE.log RUN.log")
    check_step_sources([*baselines, run])
    if align not in ALIGN_MODES:
        raise InputError(
            "--align", f"unknown value {align!r}", f"choose from {', '.join(ALIGN_MODES)}"
        )
    if not (math.isfinite(band_k) and band_k > 0):
        raise InputError("--band-k", f"must be a positive number, got {band_k}", "")
    if window < 3:
        raise InputError("--window", f"must be 3 or more, got {window}", "")
    notes: list[str] = []
    if any(_same_log(b, run) for b in baselines):
        notes.append(
            f"{short_name(run.path)} is also one of its own baselines: its spikes lie "
            "outside the band it helps make"
        )
    events = run.step_source == LINE_ORDER  # then every log is (check_step_sources)
    if events:
        notes.append(EVENTS_NOTE)
    logs, run_log = prepare(baselines, run, align, warmup_steps, notes)
    check_overlap(logs, run_log, align)
    names = _choose_metrics(logs, run_log, metrics, notes)
    levels = {ACC_LIKE: ACC_MILESTONES, **(milestones or {})}
    results: dict[str, MetricComparison] = {}
    answers: list[PointAnswer] = []
    # Which points are in warmup, the run's and each baseline's (once, not per metric).
    in_warmup = phase_codes(run_log.phases, run_log.steps) == WARMUP
    warm = {b.path: phase_codes(b.phases, b.steps) == WARMUP for b in logs}
    memo = Memo()  # (the metrics share the logs' axes: their fits' geometry, the knots)
    for i, (name, used) in enumerate(names.items()):
        mc, points = _compare_metric(
            name,
            used,
            run_log,
            (in_warmup, warm),
            levels,
            at,
            band_k,
            window,
            _units(align, events),
            memo,
        )
        memo.forget("centre")  # (a metric's fits serve its own milestones only)
        results[name] = mc
        answers.extend(points)
        if progress is not None:
            progress(i + 1, len(names))
    answers.sort(key=lambda p: (p.step, list(names).index(p.metric)))
    axis = AXIS_NAMES[align]
    return Comparison(
        baselines=tuple(b.path for b in baselines),
        run=run.path,
        align=align,
        axis=axis.replace("step", "logging event") if events else axis,
        band_method=band_words(len(logs), band_k, window),
        band_k=float(band_k),
        window=int(window),
        warmup={log.path: log.phases for log in (*logs, run_log)},
        metrics=results,
        at=tuple(answers),
        notes=tuple(notes),
        step_sources={log.path: log.step_source for log in (*baselines, run)},
        anchors=warmup_anchors((*logs, run_log)) if align == "warmup" else {},
    )


def _same_log(a: RunLog, b: RunLog) -> bool:
    """``a`` and ``b`` were read from one file (by path, or by identity: a link)."""
    from ..outpath import same_file

    return a is b or a.path == b.path or same_file(a.path, b.path)


def _units(align: str, events: bool) -> tuple[float, str, str]:
    """``(scale, per, step word)``: slopes are per ``scale`` units of the aligned axis,
    named ``per``; a step is called ``step``, or ``logging event`` for line numbers."""
    word = "logging event" if events else "step"
    if align == "tokens":
        return 1e9, "1B tokens", word
    return 1000.0, f"1k {word}s", word


# --- which metrics ----------------------------------------------------------------------


def _has(table: pd.DataFrame, name: str) -> bool:
    """``name`` has a value somewhere (finite)."""
    return name in table.columns and bool(np.isfinite(column(table, name)).any())


def _logged(log: AlignedLog, name: str) -> bool:
    """``name`` was logged somewhere: a value, or nan/inf (a failure is not an absence)."""
    return _has(log.table, name) or bool(_failed(log, name).any())


def _failed(log: AlignedLog, name: str) -> np.ndarray:
    """Per row of the log's table: ``name`` logged as nan/inf (the reader's marks)."""
    return logged_nonfinite(log.table, name, log.printed_nan)


def _position_key(name: str) -> tuple[str, int]:
    head, _, num = name.rpartition("_")
    return head, int(num)


def _choose_metrics(
    logs: Sequence[AlignedLog], run: AlignedLog, wanted: Sequence[str] | None, notes: list[str]
) -> dict[str, tuple[AlignedLog, ...]]:
    """Metric -> the baselines that logged it; says what is left out and why."""
    if wanted:
        candidates = list(dict.fromkeys(wanted))
    else:
        cols = set(run.table.columns).union(*(set(b.table.columns) for b in logs))
        pos = sorted((c for c in cols if _POSITION.match(str(c))), key=_position_key)
        candidates = [m for m in DEFAULT_METRICS if m in cols] + pos
    out: dict[str, tuple[AlignedLog, ...]] = {}
    for name in candidates:
        used = tuple(b for b in logs if _has(b.table, name))
        if not _logged(run, name) and not used:
            if wanted:  # a default metric nobody logs is not worth a note
                notes.append(f"{name}: not logged in any file; skipped")
        elif not _logged(run, name):
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
        found = sorted(c for c in run.table.columns if c not in _NOT_METRICS and _logged(run, c))
        asked = f" (asked for {_few(candidates)})" if wanted else ""
        raise InputError(
            run.path,
            f"no metric is logged by both the run and a baseline{asked}",
            f"choose with --metric from: {_few(found) or 'none logged'}",
        )
    return out


def _few(names: Sequence[str], most: int = 6) -> str:
    """Up to ``most`` names, then how many more: an error line stays one short line."""
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


# --- one metric -------------------------------------------------------------------------


def _compare_metric(
    name: str,
    used: tuple[AlignedLog, ...],
    run: AlignedLog,
    phase_of: tuple[np.ndarray, Mapping[str, np.ndarray]],
    levels: Mapping[str, Sequence[float]],
    at: Sequence[int],
    band_k: float,
    window: int,
    unit: tuple[float, str, str],
    memo: Memo | None = None,
) -> tuple[MetricComparison, list[PointAnswer]]:
    """One metric's comparison and its point answers; ``phase_of``: which of the run's
    points are in warmup, and which of each baseline's (by path); ``memo``: what the
    metrics share."""
    kind = metric_kind(name)
    warmup, warm = phase_of
    notes: list[str] = []
    bands = []
    for b in used:
        band = robust_band(b.x, column(b.table, name), band_k, window, memo)
        if band is None:
            notes.append(
                f"{b.name} logs {name} at fewer than {MIN_BAND_POINTS} points: no band from it"
            )
        else:
            bands.append(band)
    raw = column(run.table, name)
    v = np.where(np.isfinite(raw), raw, np.nan)  # nan/inf are reported, not compared
    bad = _failed(run, name)
    nonfinite = {log.path: _nonfinite(log, name) for log in (run, *used)}
    none = np.full(v.shape, np.nan)
    here = band_at(bands, run.x, memo) if bands else BandAt(none, none, none)
    if run.phases.found or run.phases.peak_lr is not None:
        groups = [("warmup", rows(warmup)), ("post_warmup", rows(~warmup))]
    else:
        groups = [("all", slice(None))]
    side = side_codes(v, here)  # (elementwise: a phase's are its points')
    has = np.isfinite(v)
    own = _own_shares(name, used, bands, warm, memo)
    phases = tuple(
        summarise_phase(ph, run.steps[m], v[m], here.select(m), side[m], own.get(ph))
        for ph, m in groups
        if has[m].any()
    )
    overall = summarise_phase("all", run.steps, v, here, side, own.get("all"))
    names = [b.name for b in used]
    scale, per, word = unit
    ctx = _PointContext(name, v, bad, run, bands, kind, names, word, memo)
    points = [_answer(int(s), ctx) for s in at]
    last = _last_compared(run, v, here.med)
    head = points[0] if points else (_answer(last, ctx) if last is not None else None)
    slopes = slopes_after_warmup(name, run, used, warmup, v, scale, per, warm)
    point_text = head.sentence if head is not None else ""
    failure = failure_phrase(name, nonfinite[run.path])
    sentence = metric_sentence(
        name, overall.verdict, phases, names, f"{failure} {point_text} {slope_phrase(slopes)}"
    )
    metric_levels = levels.get(name) or (levels.get(ACC_LIKE, ()) if kind == "acc" else ())
    mc = MetricComparison(
        name=name,
        kind=kind,
        phases=phases,
        milestones=find_milestones(metric_levels, kind, (*used, run), name, window, memo),
        slopes=slopes,
        verdict=overall.verdict,
        sentence=sentence,
        baselines_used=tuple(b.path for b in used),
        curves=_curves(name, used, run, v, bands, memo),
        notes=tuple(notes),
        nonfinite=nonfinite,
    )
    return mc, points


def _own_shares(
    name: str,
    used: Sequence[AlignedLog],
    bands: Sequence[Band],
    warm: Mapping[str, np.ndarray],
    memo: Memo | None,
) -> dict[str, tuple[float, float]]:
    """Per phase (``warmup``, ``post_warmup``, ``all``), the share of the baselines' own
    points above the band, and below it: what a like run shows.  Of one to four
    baselines (an envelope) the largest share of any one; of :data:`QUANTILE_BASELINES`
    or more (a quantile band, which leaves the most extreme baseline out) the median
    baseline's, so the most extreme one does not set it either."""
    if not bands:
        return {}
    each: dict[str, list[tuple[float, float]]] = {}
    for b in used:
        if len(bands) == 1 and bands[0][0] is b.x:  # (its own band, on its own points)
            here = BandAt(*bands[0][1:])
        else:
            here = band_at(bands, b.x, memo)
        side = side_codes(column(b.table, name), here)
        bwarm = warm.get(b.path)
        if bwarm is None:
            bwarm = phase_codes(b.phases, b.steps) == WARMUP
        for ph, m in (("warmup", rows(bwarm)), ("post_warmup", rows(~bwarm)), ("all", slice(None))):
            shares = own_shares(side[m])
            if shares is not None:
                each.setdefault(ph, []).append(shares)
    pick = np.median if len(bands) >= QUANTILE_BASELINES else np.max
    return {
        ph: (float(pick([a for a, _ in v])), float(pick([b for _, b in v])))
        for ph, v in each.items()
    }


def _nonfinite(log: AlignedLog, name: str) -> NonFinite:
    return nonfinite_summary(log.steps, _failed(log, name))


def _present(x: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points that have a value (absent and non-finite ones left out: a plot line
    through NaN cells would break at every absent step)."""
    ok = np.isfinite(x) & np.isfinite(v)
    if ok.all():  # (every point: the arrays themselves, read only; no copies)
        return _read_only(x), _read_only(v)
    return x[ok], v[ok]


def _read_only(a: np.ndarray) -> np.ndarray:
    """A view of ``a`` that cannot be written through (a curve may be the log's own
    array: no copy, and nothing done to the curve reaches the log)."""
    view = a.view()
    view.flags.writeable = False
    return view


def _curves(
    name: str,
    used: Sequence[AlignedLog],
    run: AlignedLog,
    v: np.ndarray,
    bands: Sequence[Band],
    memo: Memo | None = None,
) -> Curves:
    if len(bands) == 1 and bool((bands[0][0][1:] > bands[0][0][:-1]).all()):
        # (already sorted and unique; read only: it may be the log's own, which every
        # metric's curves share)
        grid = _read_only(bands[0][0])
        # One band, finite: on its own points it is itself (band_at would copy it).
        curves = bands[0][1:]
        if all(np.isfinite(c).all() for c in curves):
            on_grid = BandAt(*curves)
        else:
            on_grid = band_at(bands, grid, memo)
    else:
        grid = unique_values(np.concatenate([bx for bx, *_ in bands])) if bands else np.array([])
        on_grid = band_at(bands, grid, memo) if bands else BandAt(grid, grid, grid)
    return Curves(
        run=_present(run.x, v),
        baselines={b.path: _present(b.x, column(b.table, name)) for b in used},
        band=(grid, *on_grid),
        warmup_ends=warmup_ends((*used, run)),
    )


def _last_compared(run: AlignedLog, v: np.ndarray, med: np.ndarray) -> int | None:
    ok = np.isfinite(v) & np.isfinite(med)
    if not ok.any():
        return None
    return int(run.steps[ok.size - 1 - int(np.argmax(ok[::-1]))])  # (the last of them)


class _PointContext(NamedTuple):
    """What a point answer needs of one metric: the run's finite values ``v``, its
    logged nan/inf ``bad``, the baselines' bands, the word for a step (``unit``), what
    the metrics share (``memo``)."""

    name: str
    v: np.ndarray
    bad: np.ndarray
    run: AlignedLog
    bands: Sequence[Band]
    kind: str
    names: Sequence[str]
    unit: str = "step"
    memo: Memo | None = None


def failed_near(steps: np.ndarray, v: np.ndarray, bad: np.ndarray, step: int) -> int | None:
    """The logged step whose nan/inf stands at ``step``: ``step`` itself, or a logged
    neighbour of it when ``step`` falls between two logged points (no value is
    interpolated across a failure).  None when there is none.

    >>> nan = float("nan")
    >>> s, v = np.array([10, 20, 30]), np.array([1.0, nan, 3.0])
    >>> bad = np.array([False, True, False])
    >>> failed_near(s, v, bad, 25), failed_near(s, v, bad, 20), failed_near(s, v, bad, 10)
    (20, 20, None)
    """
    if not bad.any():  # (no nan/inf logged: nothing to look for)
        return None
    logged = np.isfinite(v) | bad
    s, b = steps[logged], bad[logged]
    if not b.any() or s.size == 0 or not s[0] <= step <= s[-1]:
        return None
    i = int(np.searchsorted(s, step, side="left"))
    near = [i] if s[i] == step else [i - 1, i]
    hit = [j for j in near if b[j]]
    return int(s[hit[0]]) if hit else None


def _answer(step: int, ctx: _PointContext) -> PointAnswer:
    """The point answer at one run step: value, lr, warmup progress, band, verdict."""
    name, v, run, bands = ctx.name, ctx.v, ctx.run, ctx.bands
    q = np.array([float(step)])
    has = np.isfinite(v)
    logged = run.steps if has.all() else run.steps[has]  # (all: the same array, kept once)
    gap = kept(ctx.memo, ("gap", logged), lambda: gap_limit(logged))
    failed = failed_near(run.steps, v, ctx.bad, step)
    value = math.nan if failed is not None else float(interp(run.steps, v, q, gap)[0])
    lr = float(interp(run.steps, column(run.table, "lr"), q, gap)[0])
    x = float(interp(run.steps, run.x, q, math.inf)[0])
    prog = float(warmup_progress(run.phases, q)[0])
    nan = np.array([math.nan])
    if bands and math.isfinite(x):
        here = band_at(bands, np.array([x]), ctx.memo)
    else:
        here = BandAt(nan, nan, nan)
    med, lo, hi = (float(a[0]) for a in here)
    if failed is not None:
        verdict = "non-finite"
    elif not math.isfinite(value):
        verdict = "not logged"
    elif not math.isfinite(med):
        verdict = "not enough data"
    else:
        verdict = str(side_of(np.array([value]), here)[0])
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
    phrase = point_phrase(answer, ctx.kind, ctx.names, run.phases, failed, ctx.unit)
    return replace(answer, sentence=phrase)


def _opt(v: float) -> float | None:
    return v if math.isfinite(v) else None
