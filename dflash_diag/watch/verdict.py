"""A live spike's verdict, from the points so far: :func:`judge`.

The composition a verdict rests on comes from a
:class:`~dflash_diag.composition.source.Source` (the one ``spikes`` resolves): it hands
out a replay reaching a step and says what it rests on, given the points so far (a
replayed schedule checked against the logged tokens so far, as ``spikes`` checks it:
``verified`` / ``given`` / ``refuted``; a recording, read again as it grows:
``recorded``).

:func:`judge` lines the points so far up with the replay and runs ``spikes``'
attribution (:func:`~dflash_diag.spikes.attribute.attribute_spikes`) on the new event
alone: the composition model, the similar batches and the recurrences are all fitted on
the points up to the spike, never after it.  One rule is added for a live run, where a
batch's recurrences are still in the future: **earlier batches alike** (:func:`alike`).
When ``spikes``' rule leaves the spike ``inconclusive``, it becomes ``composition``
when the earlier batches within :data:`BAND` (5%) of its mean length rose, over the
trend, by a median of at least :data:`~dflash_diag.spikes.attribute.EXPLAINED_HIGH`
(50%) of this rise and at least
:data:`~dflash_diag.spikes.attribute.SIMILAR_ELEVATED` residual scales, with
composition predicting held-out steps of the run so far (R² >= ``R2_MIN``).  The
reason names those steps, so a reader sees on how many batches it rests.

**A bounded history.**  A verdict reads the last :data:`HISTORY` (4,096) points up to
its spike at most, with the detector's decisions kept as arrays and the replay cached by
its source: the trend, the composition model, the similar batches, the earlier
recurrences, the lr phase and the token check are those of that window.  On a run of up
to 4,096 points that is every point so far (the verdict is the one the whole history
gives); on a longer one it is the last 4,096 steps (12 epochs of the sample run), so a
verdict costs the same at step 3,000 and at step 100,000.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..composition.source import Source
    from ..data import Replay
    from ..spikes.attribute import Attribution, SpikeEvidence
    from ..spikes.culprits import Measured
    from .causal import CausalDetector

#: A verdict looks at the last this many points up to its spike at most (module
#: docstring): its cost does not grow with the run.
HISTORY = 4096
#: Earlier batches within this log-distance of a spike's mean length are "as long".
BAND = 0.05
#: Steps named in the "earlier batches alike" reason at most.
NAMED_STEPS = 5


@dataclass(frozen=True)
class LiveVerdict:
    """A spike's verdict when it arrived.

    :param verdict: ``composition``, ``unexplained`` or ``inconclusive``.
    :param reasons: the evidence, in words.
    :param ground: ``verified``, ``recorded``, ``given``, ``refuted`` (None: no
        composition known).
    :param evidence: ``spikes``' evidence for it (None without a composition).
    :param metric_rank: whose micro-batches the metric followed (None: pooled).
    """

    verdict: str
    reasons: tuple[str, ...]
    ground: str | None = None
    evidence: SpikeEvidence | None = None
    metric_rank: int | None = None


def judge(
    det: CausalDetector,
    extra: dict[str, list[float]],
    metric: str,
    composition: Source | None,
    covers: str = "window",
    metric_rank: int | str | None = None,
    line_order: bool = False,
) -> LiveVerdict:
    """The verdict of the event that starts at the detector's last point.

    :param det: the detector, its last point the event's first.
    :param extra: ``lr``, ``grad_norm``, ``tokens`` per point (NaN: not logged).
    :param composition: None: a log-only verdict (``inconclusive`` with what the log
        says, or ``unexplained`` for a non-finite value).
    :param line_order: the points are numbered by line order, not optimizer steps.
    """
    from ..spikes.attribute import attribute_spikes, log_only_evidence

    detection = _detection(det, extra, metric, covers)
    ev = detection.events[0]
    if ev.kind == "non-finite" or composition is None:
        (only,) = log_only_evidence(detection)
        return LiveVerdict(only.verdict, only.reasons, evidence=only)
    if line_order:
        return LiveVerdict(
            "inconclusive",
            ("the log's records carry no step, so no batch can be lined up; give --step-every",),
        )
    import pandas as pd

    last = int(detection.steps[-1])
    whole = composition.replay_for(last)
    first = None if getattr(det, "start", 0) == 0 else int(detection.steps[0])
    rep = replay_window(whole, first, last + HISTORY)
    table = pd.DataFrame({"step": detection.steps, "tokens": extra["tokens"]})
    ground = composition.ground(rep, table, detection.steps)
    lr = _finite_or_none(extra["lr"])
    m = composition.manifest
    ids = m.ids if m is not None else None
    measured = _measured(composition, whole, rep)
    att = attribute_spikes(
        detection, rep, covers, ground, metric_rank, lr=lr, ids=ids, measured=measured
    )
    (evidence,) = att.spikes
    verdict, reasons = evidence.verdict, evidence.reasons
    if verdict == "inconclusive":
        more = alike(att, evidence, detection.direction)
        if more is not None:
            verdict, reasons = "composition", (more,)
            evidence = replace(evidence, verdict=verdict, reasons=reasons)
    return LiveVerdict(verdict, reasons, ground.status, evidence, att.metric_rank)


def _measured(source: Source, whole: Replay, window: Replay) -> Measured | None:
    """The recorder's per-sample losses over ``window`` (cut from ``whole`` by
    :func:`replay_window`), for the samples to be tested on their own losses, as
    ``spikes --ground auto`` does (None: none recorded)."""
    import numpy as np

    from ..spikes.culprits import Measured

    loss = source.sample_loss(whole)
    if loss is None:
        return None
    if window is not whole and not window.sample_ids.size:
        return None
    if window is not whole:
        # the window's entries are one run of the whole's, starting at its first micro
        micro = whole.micro["step"].to_numpy()
        lo = int(np.searchsorted(micro, int(window.micro["step"].iloc[0]), side="left"))
        a = int(whole.offsets[lo])
        loss = loss[a : a + window.sample_ids.size]
    return Measured.of(loss, source.manifest)


def replay_window(rep: Replay, first: int | None, last: int) -> Replay:
    """The micro-batches of ``rep`` at steps ``first`` (minus the points' log interval,
    the steps the window's first point covers; None: from the start) to ``last``: the
    replay a bounded verdict needs, so its cost does not grow with the replay.  ``rep``
    itself when nothing is cut; ``batch_id`` is kept (a batch's identity across epochs).

    >>> import numpy as np
    >>> from dflash_diag.data import ScheduleParams
    >>> from dflash_diag.schedule import replay
    >>> r = replay(np.array([3, 1, 2, 2]), ScheduleParams(token_budget=4), epochs=2)
    >>> [r.batch(i).tolist() for i in range(len(r.micro))]
    [[1, 2], [0], [3], [0], [3], [1, 2]]
    >>> w = replay_window(r, 2, 4)
    >>> w.micro.step.tolist(), [w.batch(i).tolist() for i in range(len(w.micro))]
    ([1, 2, 3, 4], [[0], [3], [0], [3]])
    """
    import numpy as np

    micro_steps = rep.micro["step"].to_numpy()
    step_col = rep.steps["step"].to_numpy()
    if first is not None:
        gaps = np.diff(step_col)
        first -= int(np.median(gaps)) if gaps.size else 0
    lo = 0 if first is None else int(np.searchsorted(micro_steps, first, side="left"))
    hi = int(np.searchsorted(micro_steps, last, side="right"))
    if lo == 0 and hi == micro_steps.size:
        return rep
    a, b = int(rep.offsets[lo]), int(rep.offsets[hi])
    s_lo = 0 if first is None else int(np.searchsorted(step_col, first, side="left"))
    s_hi = int(np.searchsorted(step_col, last, side="right"))
    return replace(
        rep,
        sample_ids=rep.sample_ids[a:b],
        offsets=rep.offsets[lo : hi + 1] - a,
        micro=rep.micro.iloc[lo:hi].reset_index(drop=True),
        steps=rep.steps.iloc[s_lo:s_hi].reset_index(drop=True),
    )


def _finite_or_none(values: list[float]) -> Any:
    import numpy as np

    a = np.asarray(values, dtype=np.float64)
    return a if np.isfinite(a).any() else None


def _detection(det: CausalDetector, extra: dict[str, list[float]], metric: str, covers: str) -> Any:
    """The points so far as a :class:`~dflash_diag.spikes.detect.Detection` whose one
    event starts (and peaks) at the last point."""
    import numpy as np

    from ..spikes.detect import (
        LEGACY_THRESHOLD,
        Detection,
        SpikeEvent,
        describe_interval,
        log_interval,
    )

    a = det.arrays()
    steps, values = a["steps"], a["values"]
    i = len(steps) - 1
    interval = log_interval(steps)
    lr = np.asarray(extra["lr"], dtype=np.float64)
    grad = np.asarray(extra["grad_norm"], dtype=np.float64)
    last = det.decisions[-1]
    base = float(a["baseline"][i])
    event = SpikeEvent(
        kind=last.kind or "spike",
        start_step=int(steps[i]),
        peak_step=int(steps[i]),
        end_step=int(steps[i]),
        n_points=1,
        duration_steps=interval,
        value=float(values[i]),
        baseline=base,
        z=float(a["z"][i]),
        ratio=float(values[i]) / base if math.isfinite(base) and base != 0 else math.nan,
        lr=float(lr[i]),
        phase=_phase(steps, lr),
        grad_norm=float(grad[i]),
        grad_norm_ratio=_grad_ratio(grad, i, det.window),
    )
    cal = det.calibration
    return Detection(
        metric=metric,
        detector="robust",
        window=det.window,
        threshold=last.critical if math.isfinite(last.critical) else LEGACY_THRESHOLD,
        min_rise=det.min_rise,
        direction=det.direction,
        n_points=int(np.isfinite(values).sum()),
        log_interval=interval,
        covers=describe_interval(interval, covers, metric),
        steps=steps,
        values=values,
        baseline=a["baseline"],
        z=a["z"],
        scale=a["scale"],
        flagged=a["flagged"],
        events=(event,),
        critical=a["critical"],
        calibration=cal,
        expected_false_events=cal.expected_false_events if cal is not None else math.nan,
        false_events_basis="",
        chance_reason="",
    )


def _phase(steps: Any, lr: Any) -> str:
    """The lr-schedule phase at the last step, read from the lr logged so far."""
    import numpy as np

    if not np.isfinite(lr).any():
        return "unknown"
    from ..lr_phases import lr_phases, phase_labels

    return str(phase_labels(lr_phases(steps, lr), steps[-1:])[0])


def _grad_ratio(grad: Any, i: int, window: int) -> float:
    """grad_norm at the point (or the one before) over the median of the ``window``
    points before it, as :class:`~dflash_diag.spikes.detect.SpikeEvent` has it."""
    import numpy as np

    before = grad[max(0, i - window) : i]
    before = before[np.isfinite(before)]
    span = grad[max(0, i - 1) : i + 1]
    span = span[np.isfinite(span)]
    if not (before.size and span.size and np.median(before) > 0):
        return math.nan
    return float(span.max() / np.median(before))


def alike(att: Attribution, evidence: SpikeEvidence, direction: str) -> str | None:
    """The "earlier batches alike" reason (module docstring), or None when it does not
    hold."""
    import numpy as np

    from ..spikes.attribute import EXPLAINED_HIGH, R2_MIN, SIMILAR_ELEVATED

    model, pts = att.model, att.points
    if model is None or not (evidence.rise > 0) or "mean_len" not in pts:
        return None
    held_out = [r for r in (model.r2_cv, att.r2_similar) if r is not None and math.isfinite(r)]
    if not held_out or max(held_out) < R2_MIN:
        return None
    sign = -1.0 if direction == "down" else 1.0
    length = pts["mean_len"].to_numpy(dtype=np.float64)
    resid = sign * pts["residual"].to_numpy(dtype=np.float64)
    here = length[-1]
    if not (math.isfinite(here) and here > 0):
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        near = np.abs(np.log(length[:-1] / here)) <= BAND
    near &= np.isfinite(resid[:-1])
    if not near.any():
        return None
    med = float(np.median(resid[:-1][near]))
    if med < EXPLAINED_HIGH * evidence.rise or med < SIMILAR_ELEVATED * model.resid_scale:
        return None
    steps = pts["step"].to_numpy()[:-1][near]
    named = ", ".join(str(int(s)) for s in steps[-NAMED_STEPS:])
    more = f" and {steps.size - NAMED_STEPS} more" if steps.size > NAMED_STEPS else ""
    n = "the earlier batch" if steps.size == 1 else f"the {steps.size} earlier batches"
    return (
        f"{n} as long as it (within {BAND:.0%} of its mean length {here:.0f}: step"
        f"{'s' if steps.size > 1 else ''} {named}{more}) rose {med:+.3g} over the trend"
        f"{' (median)' if steps.size > 1 else ''}, {med / evidence.rise:.0%} of this rise"
    )
