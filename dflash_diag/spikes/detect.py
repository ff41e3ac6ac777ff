"""Find spikes in one logged metric: :func:`detect_spikes`.

Four detectors, same output (:class:`Detection`), so a user sees what each would flag:

``robust`` (the default)
    For every logged point ``i`` two windows of finite points, ``i`` left out: the
    ``window`` points before it (fewer at the start: an expanding window, so the first
    steps of a run are covered) and the ``window // 2`` on each side.  In each, the
    values are straightened by a robust line (slope = difference of the medians of the
    window's later and earlier halves over their distance) and projected to ``i``; the
    median ``m_i`` of the projected values is the baseline there and their median
    absolute deviation ``MAD_i`` the noise.  The lower of the two baselines is used (the
    trailing one misses a rise on a falling curve less than a plain median would, the
    centred one contains a level shift's own tail), with its window's MAD.
    ``z_i = (x_i - m_i) / s_i`` with ``s_i = 1.4826 * max(MAD_i, MAD_FLOOR * |m_i|, q)``,
    ``q`` the print resolution of the values (their smallest gap): a flat, noiseless
    curve has MAD 0, and the floor keeps its z finite and its last-digit wiggles
    unflagged.  A point is flagged when ``z_i >= c_i``, its critical z (below), AND
    ``x_i / m_i >= 1 + min_rise`` (5%: a real departure, not only a statistically odd
    one), and a run of flagged points is kept only if its first point jumps at least
    ``min_rise / 2`` over the median of the :data:`ONSET_POINTS` points before it (a
    curve bending at the end of a fast descent departs from a straight baseline without
    a jump).

    **The critical z** ``c_i`` (:mod:`.calibrate` has the derivation and references):
    ``c_i = mu + lambda t_{1 - 0.5/N}(0.3675 k_i)``, a Student t quantile for the error
    of a MAD over the ``k_i`` points of the window, scaled by the spread ``lambda`` and
    shifted by the median ``mu`` of the log's own z's, at a tail probability of 0.5
    over the ``N`` points tested (about 0.5 false events per log); lowered to the
    Benjamini-Hochberg cut at a 10% false-discovery rate when the log holds more high
    z's than noise makes, judged against an empirical null read from the "mirror" z's
    (the value against the higher baseline).  ``--threshold Z`` sets ``c_i = Z``
    (:data:`LEGACY_THRESHOLD`, 3.5, is the rule before calibration).
    :attr:`Detection.expected_false_events` is how many points this log's own noise
    would flag by chance, from that empirical null.

    Tuned on the real logs in ``tests/data/real_logs`` and constructed runs: no spike
    on the smooth Whisper fine-tune; the sharp spikes of gpt-lab found first; 10-40%
    spikes on 1%-noise curves found.
``olmo``
    OLMo-core's ``SkipStepOptimizer`` rule: ``z = (x - mean) / std`` over the ``window``
    (default 128) points before ``x``, flagged when ``z > threshold`` (default 6);
    inactive until ``max(20, window // 2)`` points have been seen.
``foundry``
    LLM Foundry's ``KillLossSpike``: once ``window`` (default 100) points are seen, a
    point is an outlier when ``x > 2 * mean(window)``; outliers persisting for more
    than ``patience`` (4) consecutive points are flagged (all points of that run).
``megatron``
    Megatron-LM's spiky-loss check: after the first 100 values, flagged when
    ``x >= 10 * max(first 100 values)``.

Consecutive flagged points form one event (:class:`SpikeEvent`).  A NaN or infinite
value is an event of its own (``kind="non-finite"``) and is left out of every baseline.
Spikes are rises: for a metric where a drop is bad (``acc``) pass ``direction="down"``,
which runs the same rules on ``-x`` (ratio rules on ``1/x``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..data import spike_direction
from ..errors import InputError
from ..printable import listed
from .calibrate import Calibration, basis, calibrate, chance_reason
from .windows import (
    print_resolution,
    rolling,
    row_mad,
    row_median,
    trend_baseline,
    window_sizes,
)

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


DETECTORS: tuple[str, ...] = ("robust", "olmo", "foundry", "megatron")
#: Default ``window`` (logged points) per detector.
DEFAULT_WINDOW: dict[str, int] = {"robust": 50, "olmo": 128, "foundry": 100, "megatron": 100}
#: Default ``threshold`` of the production rules (olmo: a z; foundry, megatron: a
#: multiple).  The robust detector has none: its critical z is calibrated per log.
DEFAULT_THRESHOLD: dict[str, float] = {"olmo": 6.0, "foundry": 2.0, "megatron": 10.0}
#: The robust detector's fixed critical z before calibration:
#: ``detect_spikes(table, threshold=LEGACY_THRESHOLD)`` is that rule, unchanged.
LEGACY_THRESHOLD = 3.5
#: Robust detector: the rise over the baseline a point needs besides its z (5%).
DEFAULT_MIN_RISE = 0.05
#: MAD floor as a share of |baseline|, so a noiseless curve has a finite z.
MAD_FLOOR = 1e-3
#: Foundry's patience: outliers must persist for more than this many points.
FOUNDRY_PATIENCE = 4
#: Points before an event's first one that its onset jump is measured against.
ONSET_POINTS = 3
#: A value beyond this magnitude is read as inf: no loss, accuracy or norm is that large,
#: and squaring it (a variance, a regression) would overflow float64.
HUGE = 1e150
#: Points of history the robust detector needs before it flags anything.
MIN_HISTORY = 5


@dataclass(frozen=True)
class SpikeEvent:
    """One spike: a run of consecutive flagged points, or one non-finite value.

    :param kind: ``spike`` or ``non-finite``.
    :param start_step: first logged step of the event.
    :param peak_step: step of its highest robust z (the first point for non-finite).
    :param end_step: last logged step of the event.
    :param n_points: logged points in the event.
    :param duration_steps: optimizer steps it spans, ``end - start + log_interval``.
    :param value: the metric at the peak.
    :param baseline: the detector's baseline at the peak (robust: rolling median).
    :param z: the detector's z at the peak (robust z for robust/foundry/megatron, the
        mean/std z for olmo); NaN when there is no baseline yet.
    :param ratio: ``value / baseline``.
    :param lr: learning rate at the peak (NaN if not logged).
    :param phase: lr-schedule phase at the peak: warmup, peak, decay or unknown.
    :param grad_norm: grad_norm at the peak (NaN if not logged).
    :param grad_norm_ratio: the largest grad_norm in the event's span (and the point
        before it, as grad-norm surges often precede loss spikes) over the median
        grad_norm of the ``window`` points before the event; NaN without grad_norm.
    """

    kind: str
    start_step: int
    peak_step: int
    end_step: int
    n_points: int
    duration_steps: int
    value: float
    baseline: float
    z: float
    ratio: float
    lr: float
    phase: str
    grad_norm: float
    grad_norm_ratio: float


@dataclass(frozen=True, eq=False)
class Detection:
    """What a detector made of one metric.  Arrays are aligned with ``steps``.

    :param metric: the column examined.
    :param detector: one of :data:`DETECTORS`.
    :param window: logged points in the baseline window.
    :param threshold: the detector's threshold: robust, the calibrated critical z of a
        full window (:attr:`critical` has every point's), or the user's fixed z.
    :param min_rise: robust detector's minimum ``x / baseline - 1``.
    :param direction: ``up`` (rises are spikes) or ``down``.
    :param n_points: logged points with a finite value.
    :param log_interval: median gap between logged steps (optimizer steps per point).
    :param covers: what one logged point covers, in words.
    :param steps: the logged steps (int64), sorted.
    :param values: the metric (float64, NaN/inf kept).
    :param baseline: the detector's baseline per point (NaN: none yet).
    :param z: robust z per point (olmo: its mean/std z).
    :param scale: the z's denominator per point (robust: ``1.4826 x floored MAD``;
        olmo: the window std); NaN for foundry/megatron.
    :param flagged: bool, the point belongs to a spike event (non-finite included).
    :param events: the events, by start step.
    :param critical: robust: the critical z of every point (NaN where untested); NaN
        for the other detectors.
    :param calibration: robust: how ``critical`` was set (:class:`Calibration`).
    :param expected_false_events: robust: how many points this log's own noise would
        flag by chance (see the module docstring); NaN for the other detectors.
    :param false_events_basis: how that number was computed, in words.
    :param chance_reason: why ``expected_false_events`` is 1 or more, in words ("" when
        it is not): autocorrelated noise (``rho >= calibrate.AUTOCORRELATED``), heavy-tailed noise
        (the fitted t has at most ``calibrate.HEAVY_TAIL_DF`` df), else the Benjamini-Hochberg
        cut lowered among many high points.
    :param centred_trend: the centred robust-line baseline of the finite values,
        ``trend_baseline(values[finite], window, centred=True)[0]``, when the detector
        made it (robust, direction up): what
        :func:`~dflash_diag.spikes.correlate.detrend` takes for its trend then; None
        otherwise.
    """

    metric: str
    detector: str
    window: int
    threshold: float
    min_rise: float
    direction: str
    n_points: int
    log_interval: int
    covers: str
    steps: np.ndarray
    values: np.ndarray
    baseline: np.ndarray
    z: np.ndarray
    scale: np.ndarray
    flagged: np.ndarray
    events: tuple[SpikeEvent, ...]
    critical: np.ndarray
    calibration: Calibration | None
    expected_false_events: float
    false_events_basis: str
    chance_reason: str
    centred_trend: np.ndarray | None = field(default=None, repr=False)


def log_interval(steps: np.ndarray) -> int:
    """Optimizer steps between logged points: the median positive gap (1 if unknown).

    >>> import numpy as np
    >>> log_interval(np.array([50, 100, 150, 200, 260]))
    50
    """
    import numpy as np

    from ..arrays import unique_values

    gaps = np.diff(unique_values(np.asarray(steps, dtype=np.int64)))
    gaps = gaps[gaps > 0]
    return int(np.median(gaps)) if gaps.size else 1


def describe_interval(interval: int, covers: str = "window", metric: str = "loss") -> str:
    """One sentence on what a logged point covers: ``covers`` is ``window`` (a mean over
    the ``interval`` steps up to it) or ``step`` (that step alone); an evaluation
    metric's point is neither.

    >>> describe_interval(50, "step")
    'the log has a point every 50 steps; a point is read as that step alone (--covers step)'
    """
    from ..logs.names import EVAL_PREFIXES

    if metric.startswith(EVAL_PREFIXES):
        return (
            f"{metric} is an evaluation on held-out data (a point every {interval} steps), "
            "not a training batch's loss: the batches trained on do not make it"
        )
    if interval <= 1:
        return "each logged point is one optimizer step"
    head = f"the log has a point every {interval} steps; a point is read as"
    if covers == "step":
        return f"{head} that step alone (--covers step)"
    return (
        f"{head} the mean over the {interval} steps up to it (as the HF Trainer logs it); "
        "if your trainer logs the single step (Lightning's self.log, most loops), give "
        "--covers step"
    )


def _robust_z(x: np.ndarray, window: int) -> tuple:
    """Baseline, robust z, scale and window size (points) of every point, the mirror z
    (``x`` against the higher baseline, over that window's scale) and the centred
    baseline (:func:`~dflash_diag.spikes.windows.trend_baseline`'s)."""
    import numpy as np

    # Two baselines, the lower wins: the trailing median lags high on a falling curve
    # (warmup), where it would hide rises; the centred one contains a level shift's own
    # tail, where the trailing one does not.  Each comes with its own window's MAD.
    med_t, mad_t = trend_baseline(x, window, centred=False)
    med_c, mad_c = trend_baseline(x, window, centred=True)
    centred = med_c.copy()  # (kept for the detrending: a copy, not a view of both)
    use_c = np.isnan(med_t) | (med_c < med_t)
    n = x.shape[0]
    k = np.where(use_c, window_sizes(n, window, True), window_sizes(n, window, False))
    res = print_resolution(x)

    def over(level: np.ndarray, mad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        scale = 1.4826 * np.maximum(np.maximum(mad, MAD_FLOOR * np.abs(level)), res)
        scale = np.where(scale > 0, scale, np.finfo(float).tiny)
        return (x - level) / scale, scale

    med = np.where(use_c, med_c, med_t)
    z, scale = over(med, np.where(use_c, mad_c, mad_t))
    mirror, _ = over(np.where(use_c, med_t, med_c), np.where(use_c, mad_t, mad_c))
    return med, z, scale, k, mirror, centred


def _robust_flags(
    x: np.ndarray, med: np.ndarray, z: np.ndarray, critical: np.ndarray, min_rise: float
) -> np.ndarray:
    """``z >= critical``, ``min_rise`` over the baseline, and the onset jump."""
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = x / med
    history = np.arange(x.shape[0]) >= MIN_HISTORY
    rise = np.where(med > 0, ratio >= 1 + min_rise, x - med >= min_rise * np.abs(med))
    flag = np.nan_to_num(history & (z >= critical) & rise, nan=False).astype(bool)
    # A spike starts with a jump: the first point of a run must rise min_rise / 2 over
    # the median of the ONSET_POINTS before it.  A curve bending (the end of a fast
    # warmup descent) departs from a straight-line baseline without any jump.
    for a, b in _runs(flag):
        before = x[max(0, a - ONSET_POINTS) : a]
        if before.size and x[a] - np.median(before) < 0.5 * min_rise * abs(np.median(before)):
            flag[a:b] = False
    return flag


def _olmo(x: np.ndarray, window: int, threshold: float) -> tuple:
    import numpy as np

    mean = rolling(x, window, lambda w: np.mean(w, axis=1))
    std = rolling(x, window, lambda w: np.std(w, axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (x - mean) / std
    active = np.arange(x.shape[0]) >= max(20, window // 2)
    flag = active & np.nan_to_num(z > threshold, nan=False)
    return mean, z, std, flag.astype(bool)


def _foundry(x: np.ndarray, window: int, multiple: float) -> tuple:
    import numpy as np

    mean = rolling(x, window, lambda w: np.mean(w, axis=1))
    mean[: min(window, x.shape[0])] = np.nan  # checks start once the window is full
    outlier = np.nan_to_num(x > multiple * mean, nan=False).astype(bool)
    flag = np.zeros_like(outlier)
    run_start = None
    for i, o in enumerate(np.append(outlier, False)):
        if o and run_start is None:
            run_start = i
        elif not o and run_start is not None:
            if i - run_start > FOUNDRY_PATIENCE:
                flag[run_start:i] = True
            run_start = None
    return mean, flag


def _megatron(x: np.ndarray, multiple: float, warmup: int = 100) -> tuple:
    import numpy as np

    base = np.full(x.shape[0], np.nan)
    if x.shape[0] > warmup:
        base[warmup:] = np.max(np.abs(x[:warmup]))
    flag = np.nan_to_num(x >= multiple * base, nan=False).astype(bool)
    return base, flag


def _phases(steps: np.ndarray, lr: np.ndarray | None) -> np.ndarray:
    import numpy as np

    if lr is None or not np.isfinite(lr).any():
        return np.full(steps.shape[0], "unknown", dtype=object)
    from ..lr_phases import lr_phases, phase_labels

    return np.asarray(phase_labels(lr_phases(steps, lr), steps), dtype=object)


def _column(table: pd.DataFrame, name: str) -> np.ndarray | None:
    import numpy as np

    if name not in table.columns:
        return None
    col = table[name].to_numpy(dtype=np.float64)
    return col if np.isfinite(col).any() else None


def _logged_here(t: pd.DataFrame, metric: str) -> Any:
    """Rows where ``metric`` was logged (finite or not).

    The table has a NaN wherever a row lacks the metric: an evaluation-only row, a step
    where only another metric was printed.  That NaN means "not logged here", not a
    numerical failure.  A NaN row is dropped when it carries an evaluation value
    (``eval_*``, ``val_*``, ``test_*``) or when the log has other training columns and the
    row has none of them; otherwise (``loss=nan lr=3e-4 ...``, or a log of step and loss
    only) the NaN was logged and becomes an event.
    """
    used = [c for c in t.columns if c not in ("step", "rank", metric) and t[c].notna().any()]
    evals = [c for c in used if c.startswith(("eval_", "val_", "test_"))]
    train = [c for c in used if c not in evals and c != "epoch"]
    present = t[metric].notna()
    missing_ok = ~t[evals].notna().any(axis=1) if evals else present | True
    if train:
        missing_ok = missing_ok & t[train].notna().any(axis=1)
    return present | missing_ok


def detect_spikes(
    table: pd.DataFrame,
    metric: str = "loss",
    detector: str = "robust",
    window: int | None = None,
    threshold: float | None = None,
    min_rise: float = DEFAULT_MIN_RISE,
    direction: str | None = None,
    path: str = "",
    logged: Any = None,
) -> Detection:
    """Find spikes in ``table[metric]`` (a RunLog table: one row per logged step).

    :param table: needs ``step`` and ``metric``; ``lr`` and ``grad_norm`` are used when
        present.  Rows are sorted by step; a repeated step keeps its last row (a resume);
        with a ``rank`` column holding several ranks, values are averaged over ranks.
    :param metric: the column to examine.
    :param detector: one of :data:`DETECTORS`, see the module docstring.
    :param window: baseline window in logged points (default :data:`DEFAULT_WINDOW`).
    :param threshold: robust: None calibrates the critical z on the log (module
        docstring), a number is a fixed z instead (:data:`LEGACY_THRESHOLD` is the rule
        before calibration); the others: default :data:`DEFAULT_THRESHOLD`.
    :param min_rise: robust detector only: a flagged point is at least this share above
        its baseline (default 5%).
    :param direction: ``up`` or ``down`` (spikes are drops); None: ``down`` for a metric
        whose name starts with ``acc`` (accuracy falls when training goes wrong), else ``up``.
    :param path: the log's path, for error messages.
    :param logged: bool per row of ``table``: ``metric`` was logged there (a number, inf,
        or a printed NaN): :meth:`RunLog.logged <dflash_diag.data.RunLog.logged>`.
        Rows where it was not are left out; a logged NaN or inf is a non-finite event.
        None (a table from elsewhere): guessed from the row's other columns.
    :raises InputError: unknown detector, missing column, no finite value, bad window.

    >>> import pandas as pd
    >>> t = pd.DataFrame({"step": range(60), "loss": [2.0 + 0.01 * (i % 3) for i in range(60)]})
    >>> t.loc[40, "loss"] = 2.6
    >>> [e.peak_step for e in detect_spikes(t).events]
    [40]
    """
    import numpy as np

    direction, win, thr = _checked_options(
        table, metric, detector, window, threshold, direction, path
    )
    t = _one_row_per_step(table, metric, logged)
    steps = t["step"].to_numpy(dtype=np.int64)
    values = t[metric].to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore"):  # a value past HUGE is what arithmetic makes of it
        values = np.where(np.abs(values) > HUGE, np.copysign(np.inf, values), values)
    finite = np.isfinite(values)
    if not finite.any():
        raise InputError(path, f"no finite {metric!r} value in the log", "check --metric")
    interval = log_interval(steps)

    # Rules run on the finite points only; non-finite points become events of their own.
    xf = values[finite] if direction == "up" else -values[finite]
    base_f, z_f, scale_f, flag_f, cal, centred = _apply(detector, xf, win, thr, min_rise)
    if direction == "down":
        base_f = -base_f
    baseline, z, scale, critical = (np.full(values.shape[0], np.nan) for _ in range(4))
    flagged = ~finite
    baseline[finite], z[finite], scale[finite] = base_f, z_f, scale_f
    flagged[finite] = flag_f
    if cal is not None:
        critical[finite] = cal.critical

    lr = _column(t, "lr")
    grad = _column(t, "grad_norm")
    phases = _phases(steps, lr)
    events = _events(steps, values, baseline, z, flagged, finite, interval, lr, grad, phases, win)
    return Detection(
        metric=metric,
        detector=detector,
        window=win,
        threshold=cal.threshold if cal is not None else float(thr or 0.0),
        min_rise=float(min_rise),
        direction=direction,
        n_points=int(finite.sum()),
        log_interval=interval,
        covers=describe_interval(interval),
        steps=steps,
        values=values,
        baseline=baseline,
        z=z,
        scale=scale,
        flagged=flagged,
        events=tuple(events),
        critical=critical,
        calibration=cal,
        expected_false_events=cal.expected_false_events if cal is not None else float("nan"),
        false_events_basis=basis(cal),
        chance_reason=chance_reason(cal),
        centred_trend=centred if direction == "up" else None,
    )


def _checked_options(
    table: pd.DataFrame,
    metric: str,
    detector: str,
    window: int | None,
    threshold: float | None,
    direction: str | None,
    path: str,
) -> tuple[str, int, float | None]:
    """``(direction, window, threshold)`` of :func:`detect_spikes`, defaults filled in.

    :raises InputError: unknown detector or direction, no such column, a window under 2
        points, a threshold that is not a positive number.
    """
    import numpy as np

    if detector not in DETECTORS:
        raise InputError(
            "--detector", f"unknown detector {detector!r}", f"choose from {', '.join(DETECTORS)}"
        )
    if direction is None:
        direction = spike_direction(metric)
    if direction not in ("up", "down"):
        raise InputError("direction", f"unknown direction {direction!r}", "choose up or down")
    if metric not in table.columns:
        numeric = [c for c in table.columns if c != "step" and table[c].notna().any()]
        raise InputError(
            path, f"the log has no {metric!r} column", f"choose --metric from {listed(numeric)}"
        )
    win = DEFAULT_WINDOW[detector] if window is None else int(window)
    if win < 2:
        raise InputError("--window", f"must be at least 2 logged points, got {win}", "")
    thr = DEFAULT_THRESHOLD.get(detector) if threshold is None else float(threshold)
    if thr is not None and (not np.isfinite(thr) or thr <= 0):
        raise InputError("--threshold", f"must be a positive number, got {thr}", "")
    return direction, win, thr


def _one_row_per_step(table: pd.DataFrame, metric: str, logged: Any = None) -> pd.DataFrame:
    """The rows where ``metric`` was logged (``logged``, or guessed: :func:`_logged_here`),
    one per step (ranks averaged, the last row of a repeated step kept), sorted by step."""
    import numpy as np

    table = table.reset_index(drop=True)  # an index named "step" would be ambiguous
    here = _logged_here(table, metric) if logged is None else np.asarray(logged, dtype=bool)
    table = table[here].reset_index(drop=True)
    if "rank" in table.columns and table["rank"].nunique() > 1:
        # Several ranks' rows: one value per step, the mean over ranks (as an all-reduce).
        table = table.groupby("step", as_index=False).mean(numeric_only=True)
    return table.drop_duplicates("step", keep="last").sort_values("step", kind="stable")


def _apply(
    detector: str, x: np.ndarray, window: int, threshold: float | None, min_rise: float
) -> tuple:
    """``(baseline, z, scale, flagged, calibration or None, centred trend or None)`` of
    one detector on ``x`` (the robust one's centred trend: :func:`_robust_z`)."""
    import numpy as np

    if detector == "robust":
        med, z, scale, k, mirror, centred = _robust_z(x, window)
        with np.errstate(divide="ignore", invalid="ignore"):
            rise_z = min_rise * np.abs(med) / scale
        cal = calibrate(z, mirror, k, rise_z, window, MIN_HISTORY, threshold=threshold)
        return med, z, scale, _robust_flags(x, med, z, cal.critical, min_rise), cal, centred
    thr = DEFAULT_THRESHOLD[detector] if threshold is None else threshold
    med = rolling(x, DEFAULT_WINDOW["robust"], row_median)
    mad = rolling(x, DEFAULT_WINDOW["robust"], row_mad)
    z = (x - med) / np.maximum(1.4826 * np.maximum(mad, MAD_FLOOR * np.abs(med)), 1e-300)
    scale = np.full(x.shape[0], np.nan)
    if detector == "olmo":
        base, z, scale, flag = _olmo(x, window, thr)
    elif detector == "foundry":
        base, flag = _foundry(x, window, thr)
    else:
        base, flag = _megatron(x, thr)
    return base, z, scale, flag, None, None


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``[start, stop)`` index ranges of consecutive True values."""
    import numpy as np

    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True))


def _events(
    steps: np.ndarray,
    values: np.ndarray,
    baseline: np.ndarray,
    z: np.ndarray,
    flagged: np.ndarray,
    finite: np.ndarray,
    interval: int,
    lr: np.ndarray | None,
    grad: np.ndarray | None,
    phases: np.ndarray,
    window: int,
) -> list[SpikeEvent]:
    import numpy as np

    nan = float("nan")
    out: list[SpikeEvent] = []
    ranges = [(int(i), int(i) + 1, "non-finite") for i in np.flatnonzero(~finite)]
    ranges += [(int(a), int(b), "spike") for a, b in _runs(flagged & finite)]
    for a, b, kind in sorted(ranges):
        if kind == "spike":
            zz = np.where(np.isfinite(z[a:b]), z[a:b], -np.inf)
            peak = (
                a + int(np.argmax(zz)) if np.isfinite(zz).any() else a + int(np.argmax(values[a:b]))
            )
        else:
            peak = a
        g_ratio = nan
        if grad is not None:
            before = grad[max(0, a - window) : a]
            before = before[np.isfinite(before)]
            span = grad[max(0, a - 1) : b]
            span = span[np.isfinite(span)]
            if before.size and span.size and np.median(before) > 0:
                g_ratio = float(span.max() / np.median(before))
        base = float(baseline[peak])
        val = float(values[peak])
        out.append(
            SpikeEvent(
                kind=kind,
                start_step=int(steps[a]),
                peak_step=int(steps[peak]),
                end_step=int(steps[b - 1]),
                n_points=b - a,
                duration_steps=int(steps[b - 1] - steps[a] + interval),
                value=val,
                baseline=base,
                z=float(z[peak]),
                ratio=val / base if np.isfinite(base) and base != 0 else nan,
                lr=float(lr[peak]) if lr is not None else nan,
                phase=str(phases[peak]),
                grad_norm=float(grad[peak]) if grad is not None else nan,
                grad_norm_ratio=g_ratio,
            )
        )
    return out


@dataclass(frozen=True)
class NearMiss:
    """A rise the fixed rule (z >= :data:`LEGACY_THRESHOLD` and ``min_rise``) would call
    a spike but that stays under the log's calibrated critical z: as high as its own
    noise reaches by chance.  Shown apart, never called a spike.

    :param rise: ``value / baseline - 1`` (``baseline / value - 1`` for drops).
    """

    step: int
    value: float
    baseline: float
    z: float
    critical: float
    rise: float


def near_misses(d: Detection) -> tuple[NearMiss, ...]:
    """The robust detector's near misses (:class:`NearMiss`): one per run of consecutive
    such points, at its highest z.  Empty for the other detectors and for a fixed
    ``--threshold``."""
    import numpy as np

    cal = d.calibration
    if d.detector != "robust" or cal is None or cal.method.startswith("fixed"):
        return ()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = d.values / d.baseline if d.direction == "up" else d.baseline / d.values
        near = (
            np.isfinite(d.z)
            & (d.z >= LEGACY_THRESHOLD)
            & (ratio >= 1 + d.min_rise)
            & ~d.flagged
            & (d.baseline > 0)
        )
    idx = np.flatnonzero(near)
    if not idx.size:
        return ()
    out = []
    for run in np.split(idx, np.flatnonzero(np.diff(idx) > 1) + 1):
        i = int(run[np.argmax(d.z[run])])
        out.append(
            NearMiss(
                step=int(d.steps[i]),
                value=float(d.values[i]),
                baseline=float(d.baseline[i]),
                z=float(d.z[i]),
                critical=float(d.critical[i]),
                rise=float(ratio[i] - 1),
            )
        )
    return tuple(out)


def noise_reach(d: Detection) -> float | None:
    """The z this log's own noise reaches by chance: above it, the empirical null
    (:class:`~.calibrate.NullTail`) expects less than half a point over the points
    tested (``P_null(z >= c) N = 0.5``).  A spike above it is not noise; one below may
    be.  None without a fitted null (other detectors, too few points)."""
    cal = d.calibration
    if cal is None or cal.tail is None or cal.n_tested < 1:
        return None
    p = 0.5 / cal.n_tested
    if p >= 0.5 * cal.tail.p_u:  # (isf is defined inside the fitted tail only)
        return None
    return float(cal.tail.isf(p))
