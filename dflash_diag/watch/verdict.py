"""A live spike's verdict, from the points so far: :func:`judge`.

The composition a verdict rests on is a :class:`Composition`: something that hands
out a :class:`~dflash_diag.data.Replay` reaching a step and says what it rests on
(:class:`~dflash_diag.composition.ground.ScheduleGround`).  :class:`ReplayedComposition`
replays a named schedule from a manifest (checked against the logged tokens so far,
as ``spikes`` checks it: ``verified`` / ``given`` / ``refuted``); a composition recorded
during training is a :class:`FixedComposition` holding its replay with the ground
``recorded``.

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pandas as pd

    from ..composition.ground import ScheduleGround
    from ..data import Replay
    from ..spikes.attribute import Attribution, SpikeEvidence
    from .causal import CausalDetector

#: Earlier batches within this log-distance of a spike's mean length are "as long".
BAND = 0.05
#: Steps named in the "earlier batches alike" reason at most.
NAMED_STEPS = 5


class Composition(Protocol):
    """What a live verdict needs to know about the batches."""

    def replay_for(self, step: int) -> Replay:
        """A replay that reaches ``step`` (raises InputError when none can)."""
        ...

    def ground(self, replay: Replay, table: pd.DataFrame) -> ScheduleGround:
        """What the batches rest on, given the points so far (``step``, ``tokens``)."""
        ...


@dataclass
class FixedComposition:
    """A composition known in full: a recorded one (``status="recorded"``), or any
    replay the caller made.

    :param replay: the schedule, every step it will be asked about.
    :param named_by: where it came from, in words (``--composition FILE``).
    """

    replay: Replay
    named_by: str
    status: str = "recorded"
    detail: str = "the composition was recorded during training"

    def replay_for(self, step: int) -> Replay:
        return self.replay

    def ground(self, replay: Replay, table: pd.DataFrame) -> ScheduleGround:
        from ..composition.ground import ScheduleGround

        return ScheduleGround(self.status, self.named_by, self.detail)


@dataclass
class ReplayedComposition:
    """A named schedule replayed from a manifest, once, and again with more epochs
    when the run goes past the replay's last step.

    :param manifest: the manifest read (:func:`~dflash_diag.manifest.read_manifest`).
    :param params: the schedule (its ``epochs`` used when ``epochs_given``).
    :param named_by: where the schedule came from, in words.
    :param named: the user named the strategy (without logged tokens, only a named
        schedule is attributed on).
    :param force: attribute even when the tokens disagree (``refuted``).
    :param path: the log, for messages.
    """

    manifest: Any
    params: Any
    named_by: str
    named: bool
    force: bool = False
    path: str = ""
    epochs_given: bool = False
    replays: int = 0
    _replay: Any = field(default=None, repr=False)

    def replay_for(self, step: int) -> Replay:
        from ..composition.ground import epochs_to_cover
        from ..schedule import replay

        rep = self._replay
        if rep is not None and (self.epochs_given or int(rep.steps["step"].max()) >= step):
            return rep  # type: ignore[no-any-return]
        if self.epochs_given:
            epochs = int(self.params.epochs)
        else:
            need = epochs_to_cover(self.manifest, self.params, step, self.path)
            have = 0 if rep is None else int(rep.steps["epoch"].max()) + 1
            epochs = max(need, 2 * have)
        self._replay = replay(self.manifest, self.params, epochs=epochs)
        self.replays += 1
        return self._replay  # type: ignore[no-any-return]

    def ground(self, replay: Replay, table: pd.DataFrame) -> ScheduleGround:
        from ..composition.ground import check_schedule

        return check_schedule(
            replay, table, self.force, self.path, named_by=self.named_by, named=self.named
        )


@dataclass
class RecordedComposition:
    """A composition recorded during training (:mod:`dflash_diag.record`), read again
    when a spike's step is past what was read: the recording grows with the run.

    :param path: the recording (a file, or the base path of rank files).
    :param manifest: lengths to check it against (None: the recorded lengths).
    :param named_by: where it came from, in words.
    :param force: attribute even when the recorded tokens disagree with the log's
        (``refuted``), as ``spikes --force``.
    """

    path: str
    manifest: Any = None
    named_by: str = ""
    force: bool = False
    reads: int = 0
    _replay: Any = field(default=None, repr=False)

    def replay_for(self, step: int) -> Replay:
        import time

        # The recorder writes a step when the next one starts: its line in the log may
        # come a moment before it is in the file.
        for attempt in range(RECORD_RETRIES + 1):
            rep = self._replay
            if rep is not None and int(rep.steps["step"].max()) >= step:
                break
            if attempt:
                time.sleep(RECORD_RETRY_SECONDS)
            self.read()
        return self._replay  # type: ignore[no-any-return]

    def read(self) -> None:
        """Read the recording (again) as it is now."""
        from ..record import read_recording

        self._replay = read_recording(self.path).to_replay(self.manifest)
        self.reads += 1

    def ground(self, replay: Replay, table: pd.DataFrame) -> ScheduleGround:
        """The recording checked against the points so far as ``spikes`` checks it
        (:func:`~dflash_diag.composition.ground.check_recording`): it must hold 90% of the
        logged steps, and its tokens must match the logged ones where the log has them;
        a recording of another run is refused (InputError: one line, exit status 2)."""
        from ..composition.ground import check_recording

        steps = table["step"].to_numpy()
        return check_recording(replay, table, steps, self.force, self.path, self.named_by)


#: A recording that does not reach a spike's step yet is read again this many times ...
RECORD_RETRIES = 3
#: ... this many seconds apart.
RECORD_RETRY_SECONDS = 0.1


def recorded_composition(
    path: str | Path, manifest: str | Path | None, named_by: str, force: bool = False
) -> RecordedComposition:
    """A :class:`RecordedComposition`, read once now so that a foreign or corrupt
    recording is refused before the log is followed (one line, exit status 2)."""
    m = None
    if manifest is not None:
        from ..manifest import read_manifest

        m = read_manifest(manifest)
    comp = RecordedComposition(str(path), m, named_by, force)
    comp.read()
    return comp


def replayed_composition(
    resolved: Any, config: str | Path | None, log: str, force: bool = False
) -> ReplayedComposition:
    """A :class:`ReplayedComposition` from a resolved schedule
    (:func:`~dflash_diag.schedule.config.resolve_schedule`): the manifest is read now,
    so a bad one is refused before the log is followed."""
    from ..composition.ground import schedule_source
    from ..manifest import read_manifest

    m = read_manifest(resolved.manifest, resolved.length_column, resolved.category_column)
    source = schedule_source(resolved.config_path, config, bool(resolved.given), log)
    return ReplayedComposition(
        manifest=m,
        params=resolved.params,
        named_by=source,
        named="strategy" in resolved.given,
        force=force,
        path=log,
        epochs_given="epochs" in resolved.given,
    )


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
    composition: Composition | None,
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

    rep = composition.replay_for(int(detection.steps[-1]))
    table = pd.DataFrame({"step": detection.steps, "tokens": extra["tokens"]})
    ground = composition.ground(rep, table)
    lr = _finite_or_none(extra["lr"])
    att = attribute_spikes(detection, rep, covers, ground, metric_rank, lr=lr)
    (evidence,) = att.spikes
    verdict, reasons = evidence.verdict, evidence.reasons
    if verdict == "inconclusive":
        more = alike(att, evidence, detection.direction)
        if more is not None:
            verdict, reasons = "composition", (more,)
            evidence = replace(evidence, verdict=verdict, reasons=reasons)
    return LiveVerdict(verdict, reasons, ground.status, evidence, att.metric_rank)


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
        covers=describe_interval(interval),
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
