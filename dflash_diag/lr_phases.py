"""Learning-rate schedule phases read from a logged lr column: warmup, peak, decay.

:func:`lr_phases` finds where warmup ends, the peak lr, the warmup's shape, and where
decay starts; :func:`phase_labels` labels any steps ``warmup``, ``peak`` or ``decay``;
:func:`warmup_progress` gives the fraction of warmup done at each step.

How the lr is read (real logs are untidy):

- NaN, infinite and negative lr values are ignored (not logged at that step).
- Steps may repeat after a resume from a checkpoint: the LAST value logged for a step
  wins, as in :attr:`dflash_diag.data.RunLog.restarts`.
- Logging every N steps is fine: the warmup end is fitted between logged points.
- lr printed with few decimals (llm.c's ``0.000000`` early in warmup) is quantised; the
  fits treat it as noise and a step "at the peak" allows for the print resolution.

Words: ``y = lr / peak_lr``.  Warmup ends where lr first equals its largest logged value
(to 1 part in 10**6, :data:`EQUAL_TOL`); decay starts where it falls below the peak by
more than :data:`PEAK_TOL`.  With lr printed to a fixed number of decimals, a value one
print step below the largest is a real difference and is read as one.

Warmup shape (``Phases.shape``), by least squares of ``y`` on the rising points (those
before the first step at the peak), each candidate ramp running from 0 at its start
``a`` to 1 at its end ``b`` (``u = (step - a) / (b - a)``):

- ``linear``: ``y = u`` (HF ``get_linear_schedule_with_warmup``, llm.c, nanoGPT);
- ``cosine``: ``y = (1 - cos(pi u)) / 2``;
- ``exponential``: ``y = exp(r (step - b))``, a geometric ramp;
- ``constant``: ``y = c < 1`` then a jump to the peak (a "constant warmup");
- ``none``: the first logged lr is already the peak;
- ``unknown``: fewer than :data:`MIN_SHAPE_POINTS` rising points, too few to tell
  (the end is then fitted as linear).

Each ramp is fitted as a straight line in its linearising transform (``u = y``,
``u = arccos(1 - 2y) / pi``, ``log y``) and scored by its root-mean-square error in
``y``; ``linear`` is kept unless another shape has less than :data:`SHAPE_MARGIN` of its
error (simpler explanation first).  The fitted end ``b`` is clipped to the interval in
which the truth must lie: after the last step below the peak, at or before the first
step at it (``Phases.warmup_end_range``).

Decay shape (``Phases.decay_shape``) over the points after ``decay_start_step`` (the
last step of the plateau at the peak before the lr drops below it for good, or the
warmup's end when the decay's shape fitted from there fits as well; a cosine is flat at
its top, so it is seen to fall only about 2% of its period after it starts):
``step`` (at most 4 distinct levels, each held for 3+ points), ``linear``, ``cosine``
(``y = m + (1 - m)(1 + cos(pi t / T)) / 2`` with ``t`` steps since the decay start, the
floor ``m`` and period ``T`` fitted), ``exponential``, ``inverse_sqrt``
(``1 / y^2`` linear in the step, as fairseq's ``inverse_sqrt``), ``none`` (no decay
logged), ``unknown`` (fewer than :data:`MIN_SHAPE_POINTS` points).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: lr within this share of the largest logged lr has reached it (end of warmup).
EQUAL_TOL = 1e-6
#: lr below the peak by more than this share is decaying.
PEAK_TOL = 1e-3
#: Rising (or decaying) points needed before a shape is named.
MIN_SHAPE_POINTS = 4
#: Another shape replaces ``linear`` only if its RMS error is below this share of linear's.
SHAPE_MARGIN = 0.7
#: A linear fit this good (RMS error as a share of the peak) is kept as linear.
LINEAR_GOOD_ENOUGH = 2e-3

PHASE_NAMES: tuple[str, ...] = ("warmup", "peak", "decay", "unknown")


@dataclass(frozen=True)
class Phases:
    """The lr schedule of one run, as read from its lr column.

    :param found: True when the schedule could be read (or was given with
        ``warmup_steps``); False when lr is missing, all zero or flat (see ``reason``).
    :param reason: why nothing was found ("" when ``found``).
    :param source: ``lr`` (read from the lr column), ``given`` (``warmup_steps``
        override) or ``none``.
    :param first_step: the start of warmup: the first logged step, or earlier where a
        linear or cosine ramp fitted to the lr reaches 0 (logs that start at step N, or
        mid-warmup); never below 0.  With ``warmup_steps`` given: the first step.
    :param warmup_end_step: step at which lr first reaches the peak (fitted between
        logged points, rounded); None when unknown.
    :param warmup_steps: ``warmup_end_step - first_step``; 0 when there is no warmup.
    :param warmup_end_range: ``(lo, hi)``: the last logged step below the peak and the
        first at it; the true end lies in ``(lo, hi]``.
    :param warmup_complete: False when the log ends while lr is still rising (then
        ``warmup_end_step`` is only known if ``peak_lr`` was given).
    :param peak_lr: the peak learning rate (the largest logged; or the one given).
    :param max_lr: the largest lr in the log (equals ``peak_lr`` once warmup is done).
    :param shape: warmup shape, see the module docstring.
    :param shape_rmse: RMS error of the chosen warmup fit, as a share of ``peak_lr``.
    :param decay_start_step: last step at the peak before lr falls for good (None: no
        decay logged).
    :param decay_shape: decay shape, see the module docstring.
    :param notes: things a reader should know (re-warming, too few points, ...).
    """

    found: bool
    reason: str = ""
    source: str = "none"
    first_step: int | None = None
    warmup_end_step: int | None = None
    warmup_steps: int | None = None
    warmup_end_range: tuple[int, int] | None = None
    warmup_complete: bool = True
    peak_lr: float | None = None
    max_lr: float | None = None
    shape: str = "none"
    shape_rmse: float | None = None
    decay_start_step: int | None = None
    decay_shape: str = "none"
    notes: tuple[str, ...] = ()


def _clean(steps: np.ndarray, lr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Finite, non-negative lr by increasing step; a repeated step keeps its last value."""
    s = np.asarray(steps, dtype=float).ravel()
    y = np.asarray(lr, dtype=float).ravel()
    if s.shape != y.shape:
        raise ValueError(f"steps and lr differ in length: {s.shape[0]} vs {y.shape[0]}")
    ok = np.isfinite(s) & np.isfinite(y) & (y >= 0)
    s, y = s[ok], y[ok]
    if (s[1:] > s[:-1]).all():  # (a log in step order: no repeat, nothing to sort)
        return s, y
    # After a resume the step counter goes back; later values supersede earlier ones.
    _, first_in_reversed = np.unique(s[::-1], return_index=True)
    keep = np.sort(s.shape[0] - 1 - first_in_reversed)
    s, y = s[keep], y[keep]
    order = np.argsort(s, kind="stable")
    return s[order], y[order]


def _line(x: np.ndarray, u: np.ndarray) -> tuple[float, float] | None:
    """Least-squares ``u = c0 + c1 x``; None when x does not vary."""
    if x.size < 2 or np.ptp(x) == 0:
        return None
    c1, c0 = np.polyfit(x, u, 1)
    return float(c0), float(c1)


def _rmse(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.sqrt(np.mean((pred - y) ** 2)))


def _ramp_fits(s: np.ndarray, y: np.ndarray, first_at: float) -> dict[str, tuple[float, float]]:
    """For each warmup shape: (RMS error in y, fitted end step ``b``)."""
    fits: dict[str, tuple[float, float]] = {
        "constant": (_rmse(np.full_like(y, y.mean()), y), first_at)
    }
    if np.ptp(y) < 0.05:
        # Flat below the peak, then a jump: a constant warmup, whatever a line would say.
        return fits
    transforms = {
        "linear": (lambda v: v, lambda u: np.clip(u, 0.0, 1.0)),
        "cosine": (
            lambda v: np.arccos(np.clip(1.0 - 2.0 * v, -1.0, 1.0)) / math.pi,
            lambda u: (1.0 - np.cos(math.pi * np.clip(u, 0.0, 1.0))) / 2.0,
        ),
    }
    for name, (forward, back) in transforms.items():
        line = _line(s, forward(y))
        if line is None or line[1] <= 0:
            continue
        c0, c1 = line
        fits[name] = (_rmse(back(c0 + c1 * s), y), (1.0 - c0) / c1)
    pos = y > 0.01  # log of a quantised zero says nothing about the ramp
    line = _line(s[pos], np.log(y[pos])) if pos.sum() >= 2 else None
    if line is not None and line[1] > 0:
        c0, c1 = line
        fits["exponential"] = (_rmse(np.minimum(np.exp(c0 + c1 * s), 1.0), y), -c0 / c1)
    return fits


def _ramp_start(s: np.ndarray, y: np.ndarray, shape: str, first: int) -> int:
    """Where a linear or cosine ramp starts from 0, when that is before the first logged
    step (HF logs every N steps from step N; a log may begin mid-warmup); never below 0."""
    forward = {
        "linear": lambda v: v,
        "unknown": lambda v: v,
        "cosine": lambda v: np.arccos(np.clip(1.0 - 2.0 * v, -1.0, 1.0)) / math.pi,
    }.get(shape)
    line = _line(s, forward(y)) if forward is not None else None
    if line is None or line[1] <= 0:
        return first
    start = -line[0] / line[1]
    return int(round(max(0.0, start))) if math.isfinite(start) and start < first else first


def _pick(fits: dict[str, tuple[float, float]], n: int) -> str:
    if "linear" not in fits:
        return min(fits, key=lambda k: fits[k][0])
    lin = fits["linear"][0]
    if n < MIN_SHAPE_POINTS:
        return "unknown"
    best = min(fits, key=lambda k: fits[k][0])
    if lin <= LINEAR_GOOD_ENOUGH or fits[best][0] >= SHAPE_MARGIN * lin:
        return "linear"
    return best


def _decay_shape(t: np.ndarray, y: np.ndarray) -> str:
    """Shape of a decay: ``t`` steps since its start (>= 0), ``y = lr / peak``."""
    if t.size < MIN_SHAPE_POINTS:
        return "unknown"
    levels, counts = np.unique(np.round(y, 6), return_counts=True)
    if levels.size <= 4 and levels.size < t.size and counts.min() >= 3:
        return "step"
    scores = _decay_scores(t, y)
    lin = scores.get("linear", math.inf)
    best = min(scores, key=lambda k: scores[k])
    if lin <= LINEAR_GOOD_ENOUGH or scores[best] >= SHAPE_MARGIN * lin:
        return "linear"
    return best


def _decay_scores(t: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """RMS error in ``y`` of each smooth decay shape fitted to ``(t, y)``."""
    if t.size > 4000:
        # A smooth lr curve is told as well from 4000 evenly spread points, and faster.
        pick = np.linspace(0, t.size - 1, 4000).round().astype(int)
        t, y = t[pick], y[pick]
    scores: dict[str, float] = {}
    line = _line(t, y)
    if line is not None:
        scores["linear"] = _rmse(line[0] + line[1] * t, y)
    pos = y > 0
    line = _line(t[pos], np.log(y[pos])) if pos.sum() >= 2 else None
    if line is not None:
        scores["exponential"] = _rmse(np.exp(line[0] + line[1] * t), y)
    if pos.all():
        line = _line(t, 1.0 / y**2)
        if line is not None and line[1] > 0:
            scores["inverse_sqrt"] = _rmse(1.0 / np.sqrt(np.maximum(line[0] + line[1] * t, 1)), y)
    span = max(float(t.max()), 1.0)
    best_cos = math.inf
    # Period T from half the logged decay to 20x it; the floor m has a closed form per T.
    for period in np.geomspace(0.5 * span, 20.0 * span, 60):
        c = (1.0 + np.cos(math.pi * np.minimum(t / period, 1.0))) / 2.0
        d = 1.0 - c
        denom = float(np.dot(d, d))
        m = float(np.clip(np.dot(d, y - c) / denom, 0.0, 1.0)) if denom > 0 else 0.0
        best_cos = min(best_cos, _rmse(m + (1.0 - m) * c, y))
    scores["cosine"] = best_cos
    return scores


def lr_phases(
    steps: np.ndarray,
    lr: np.ndarray | None,
    *,
    warmup_steps: int | None = None,
    peak_lr: float | None = None,
) -> Phases:
    """Read the warmup / peak / decay phases of a run from its logged lr.

    :param steps: logged optimizer steps (any order; repeats after a resume allowed).
    :param lr: learning rate at those steps (NaN where not logged), or None.
    :param warmup_steps: the warmup length in steps when it is known (``--warmup-steps``):
        the warmup then runs from the first step for this many steps, whatever the lr says.
    :param peak_lr: the peak lr when known; used when the log ends while lr is still
        rising, to extend the fitted ramp to its end.
    :returns: :class:`Phases`; ``found`` is False (with a ``reason``) when lr is missing,
        zero or flat and no ``warmup_steps`` was given.

    >>> p = lr_phases(np.arange(0, 200, 10), np.minimum(np.arange(0, 200, 10) / 100, 1) * 6e-4)
    >>> p.warmup_end_step, p.peak_lr, p.shape, p.decay_shape
    (100, 0.0006, 'linear', 'none')
    """
    all_steps = np.asarray(steps, dtype=float).ravel()
    finite_steps = all_steps[np.isfinite(all_steps)]
    if lr is None:
        lr = np.full(all_steps.shape, np.nan)
    s, y_abs = _clean(all_steps, np.asarray(lr, dtype=float))
    if warmup_steps is not None:
        return _given(finite_steps, s, y_abs, int(warmup_steps), peak_lr)
    if s.size < 2:
        why = "lr is not logged" if s.size == 0 else "lr is logged at one step only"
        return Phases(False, f"{why}; give --warmup-steps N", first_step=_first(finite_steps))
    top = float(y_abs.max())
    if top == 0.0:
        return Phases(
            False,
            "lr is 0 at every logged step (printed with too few decimals?); give --warmup-steps N",
            first_step=int(s[0]),
        )
    y = y_abs / top
    # Warmup starts with the run, even when the first rows have no lr.
    first = int(min(s[0], finite_steps.min()))
    at_peak = y >= 1.0 - EQUAL_TOL
    if at_peak.all():
        return Phases(
            False,
            f"lr is flat at {top:.3g}: no warmup or decay to find",
            source="lr",
            first_step=first,
            warmup_end_step=first,
            warmup_steps=0,
            peak_lr=top,
            max_lr=top,
        )
    i_at = int(np.argmax(at_peak))
    notes: list[str] = []
    if i_at == s.size - 1 and y[-2] < y[-1]:
        return _unfinished(s, y_abs, top, peak_lr, first, notes)
    # Rising points: before the first one at the peak.
    rise_s, rise_y = s[:i_at], y[:i_at]
    first_at = float(s[i_at])
    end: float = float(first)
    rmse: float | None = None
    end_range: tuple[int, int] | None = None
    if i_at == 0:
        shape = "none"
    else:
        fits = _ramp_fits(rise_s, rise_y, first_at)
        shape = _pick(fits, i_at)
        fitted_shape = "linear" if shape == "unknown" else shape
        rmse, end = fits.get(fitted_shape, (None, first_at))
        lo = float(rise_s[-1])
        end = min(max(end, lo + 1.0), first_at) if math.isfinite(end) else first_at
        end_range = (int(lo), int(first_at))
        if shape == "unknown":
            notes.append(f"only {i_at} lr points before the peak: too few to tell the shape")
        first = _ramp_start(rise_s, rise_y, shape, first)
    decay_start, decay_shape = _decay(s, y, i_at, PEAK_TOL, notes)
    end_step = int(round(end))
    return Phases(
        True,
        source="lr",
        first_step=first,
        warmup_end_step=end_step,
        warmup_steps=end_step - first,
        warmup_end_range=end_range,
        peak_lr=top,
        max_lr=top,
        shape=shape,
        shape_rmse=rmse,
        decay_start_step=decay_start,
        decay_shape=decay_shape,
        notes=tuple(notes),
    )


def _first(steps: np.ndarray) -> int | None:
    return int(steps.min()) if steps.size else None


def _given(
    all_steps: np.ndarray, s: np.ndarray, y: np.ndarray, n: int, peak: float | None
) -> Phases:
    if n < 0:
        from .errors import InputError

        raise InputError("--warmup-steps", f"must be 0 or more, got {n}", "")
    first = _first(all_steps)
    if first is None:
        return Phases(False, "no steps logged", source="given")
    top = float(y.max()) if y.size else None
    return Phases(
        True,
        source="given",
        first_step=first,
        warmup_end_step=first + n,
        warmup_steps=n,
        peak_lr=peak if peak is not None else top,
        max_lr=top,
        shape="unknown" if n else "none",
    )


def _unfinished(
    s: np.ndarray,
    y_abs: np.ndarray,
    top: float,
    peak: float | None,
    first: int,
    notes: list[str],
) -> Phases:
    """The log ends while lr still rises: fit the ramp so far, extend it to ``peak``."""
    scale = peak if peak is not None and peak >= top else top
    y = y_abs / scale
    fits = _ramp_fits(s, y, float(s[-1]))
    shape = _pick(fits, s.size)
    first = _ramp_start(s, y, shape, first)
    end_step: int | None = None
    if peak is not None and peak >= top:
        _, end = fits.get("linear" if shape == "unknown" else shape, (None, math.nan))
        if end is not None and math.isfinite(end):
            end_step = int(round(max(end, float(s[-1]))))
            notes.append(
                f"warmup not finished at step {int(s[-1])} (lr {top:.3g}); extended to a "
                f"peak lr of {peak:.3g}, the {shape} ramp ends at step {end_step}"
            )
    else:
        notes.append(
            f"warmup not finished at step {int(s[-1])} (lr {top:.3g} and rising); "
            "its end and peak are unknown"
        )
    return Phases(
        True,
        source="lr",
        first_step=first,
        warmup_end_step=end_step,
        warmup_steps=None if end_step is None else end_step - first,
        warmup_end_range=None if end_step is None else (int(s[-1]), end_step),
        warmup_complete=False,
        peak_lr=peak if peak is not None and peak >= top else None,
        max_lr=top,
        shape=shape,
        shape_rmse=fits.get(shape, (None, 0.0))[0],
        notes=tuple(notes),
    )


def _decay(
    s: np.ndarray, y: np.ndarray, i_at: int, tol: float, notes: list[str]
) -> tuple[int | None, str]:
    """Decay start (last plateau step before lr falls for good) and decay shape."""
    below = y < 1.0 - tol
    below[: i_at + 1] = False
    if not below.any():
        return None, "none"
    # "For good": from the first drop on, most points stay below the peak; an isolated
    # dip (a glitch) is skipped.
    # Share of points below the peak from each point to the end.
    suffix = np.cumsum(below[::-1])[::-1] / np.arange(below.size, 0, -1)
    ok = np.flatnonzero(below & (suffix >= 0.8))
    if ok.size == 0:
        return None, "none"
    start_i = int(ok[0])
    start_step = int(s[start_i - 1])
    t = s[start_i:] - start_step
    dy = y[start_i:]
    # A schedule restart (SGDR, a re-warm after a resume) shows as lr rising again.
    rise = np.flatnonzero(np.diff(dy) > 0.1)
    end_i = s.size
    if rise.size:
        notes.append(f"lr rises again after step {int(s[start_i + rise[0]])} (schedule restart?)")
        t, dy = t[: rise[0] + 1], dy[: rise[0] + 1]
        end_i = start_i + rise[0] + 1
    shape = _decay_shape(t, dy)
    if shape in ("step", "unknown") or start_i - 1 <= i_at:
        return start_step, shape
    # A smooth decay is flat at its top (cosine above all), so the first point seen below
    # the peak comes late.  If the same shape started at the warmup's end fits as well,
    # the decay started there (HF's and llm.c's cosine do).
    plateau = y[i_at:start_i]
    n_all = end_i - i_at
    late = math.sqrt(
        (np.sum((1.0 - plateau) ** 2) + t.size * _decay_scores(t, dy)[shape] ** 2) / n_all
    )
    early = _decay_scores(s[i_at:end_i] - s[i_at], y[i_at:end_i]).get(shape, math.inf)
    if early <= late + 1e-4:
        start_step = int(s[i_at])
    return start_step, shape


def phase_labels(phases: Phases, steps: np.ndarray) -> np.ndarray:
    """Label each step ``warmup``, ``peak`` or ``decay`` (``unknown`` when not found).

    ``warmup``: ``first_step <= step < warmup_end_step`` (and every step before the end
    of an unfinished warmup); ``decay``: ``step > decay_start_step``; ``peak``: the rest
    (steps before ``first_step`` are ``warmup`` too).  A flat lr labels every step
    ``peak``.

    >>> p = Phases(True, warmup_end_step=10, decay_start_step=20)
    >>> phase_labels(p, np.array([0, 10, 20, 21])).tolist()
    ['warmup', 'peak', 'peak', 'decay']
    """
    code = phase_codes(phases, steps)
    # (as wide as the longest name present, as strings made one by one would be)
    width = max(
        (len(CODE_NAMES[c]) for c in np.flatnonzero(np.bincount(code, minlength=4))), default=1
    )
    return np.asarray(CODE_NAMES, dtype=f"<U{width}")[code]


def phase_codes(phases: Phases, steps: np.ndarray) -> np.ndarray:
    """:func:`phase_labels` as codes (int8): the index of each step's label in
    :data:`CODE_NAMES` (``warmup`` is :data:`WARMUP`), for a caller that only compares
    them (a comparison of codes is ~100x faster than one of strings).

    >>> p = Phases(True, warmup_end_step=10, decay_start_step=20)
    >>> phase_codes(p, np.array([0, 10, 20, 21])).tolist()
    [1, 2, 2, 3]
    """
    st = np.asarray(steps, dtype=float).ravel()
    code = np.zeros(st.shape, dtype=np.int8)  # an index into CODE_NAMES
    flat = not phases.found and phases.source == "lr" and phases.peak_lr is not None
    if flat:
        code[:] = 2
    elif phases.found and phases.warmup_end_step is None:
        # Unfinished warmup with an unknown end: everything logged so far is warmup.
        code[:] = 1
    elif phases.found:
        code[:] = 2
        code[st < phases.warmup_end_step] = 1
        if phases.decay_start_step is not None:
            code[st > phases.decay_start_step] = 3
        code[~np.isfinite(st)] = 0
    return code


#: The labels of :func:`phase_labels`, by code (:func:`phase_codes`): the names of
#: :data:`PHASE_NAMES` in another order.
CODE_NAMES: tuple[str, ...] = ("unknown", "warmup", "peak", "decay")
#: The code of ``warmup`` (:func:`phase_codes`).
WARMUP = CODE_NAMES.index("warmup")


def warmup_progress(phases: Phases, steps: np.ndarray) -> np.ndarray:
    """Fraction of warmup done at each step: ``(step - first_step) / warmup_steps``.

    Not clipped: 1.0 is the end of warmup, 2.0 one more warmup length later.  NaN when
    the warmup length is unknown or zero.

    >>> warmup_progress(Phases(True, first_step=0, warmup_steps=200), np.array([50, 400]))
    array([0.25, 2.  ])
    """
    st = np.asarray(steps, dtype=float)
    if not phases.warmup_steps or phases.first_step is None:
        return np.full(st.shape, np.nan)
    return (st - phases.first_step) / phases.warmup_steps
