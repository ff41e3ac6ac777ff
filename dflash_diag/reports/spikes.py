"""``dflash-diag spikes``: detection, and attribution on a replayed or recorded schedule."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from ..data import Replay, RunLog
    from ..spikes.attribute import Attribution, SpikeEvidence
    from ..spikes.detect import Detection
    from ..spikes.variance import VarianceReport

from .common import Context, MicroBatch, Stage, check_steps_in, display_path, in_steps, quiet


@dataclass(frozen=True, eq=False)
class SpikesReport:
    """Everything ``spikes`` shows.

    :param context: where the inputs came from.
    :param detection: the detector's result (every logged point).
    :param spikes: one :class:`~dflash_diag.spikes.attribute.SpikeEvidence` per event.
    :param attribution: the composition analysis (None without a manifest).
    :param variance: the gradient-variance proxies.
    :param samples: per spike (by peak step), the micro-batches its logged point covers
        (the metric's rank only, when it follows one rank), with their sample ids;
        empty without a manifest.
    :param run: the log read (its table has ``lr`` and ``grad_norm`` for the plots).
    """

    context: Context
    detection: Detection
    spikes: tuple[SpikeEvidence, ...]
    attribution: Attribution | None
    variance: VarianceReport | None
    samples: dict[int, tuple[MicroBatch, ...]]
    run: RunLog


def spikes_report(
    log: str | Path,
    metric: str = "loss",
    window: int | None = None,
    threshold: float | None = None,
    detector: str = "robust",
    manifest: str | Path | None = None,
    covers: str = "window",
    metric_rank: int | str | None = None,
    force: bool = False,
    format: str | None = None,
    rank: int | str = 0,
    step_every: int | None = None,
    config: str | Path | None = None,
    schedule: dict[str, Any] | None = None,
    stage: Stage = quiet,
    composition: str | Path | None = None,
    steps: tuple[int | None, int | None] | None = None,
    label: str | None = None,
) -> SpikesReport:
    """Detect spikes in ``log`` and, with a manifest or a recording, attribute them
    (``dflash-diag spikes``).  Arguments are the command's options; ``schedule`` holds
    schedule flags (ScheduleParams fields, None = not given) and ``config`` the TOML file
    (default: ``dflash-diag.toml`` beside the log).

    ``composition``: the batches recorded during training (:mod:`dflash_diag.record`);
    without it, a recording beside the log (:func:`~dflash_diag.record.find_recording`)
    is used unless schedule flags name a schedule to replay.  A recording is lined up
    as it is, with no replay; a manifest (flag or config) adds categories and is checked
    against the recorded lengths.

    ``steps`` (first, last; None = open) keeps the spikes whose peak is in that range:
    detection, the composition model and the variance figures still use the whole log (a
    baseline needs the points before a spike)."""
    from ..logs import check_format, read_log
    from ..schedule.config import resolve_schedule
    from ..schedule.replay import undetermined_notes
    from ..spikes.attribute import log_only_evidence
    from ..spikes.detect import detect_spikes
    from ..spikes.variance import variance_proxies

    log = str(log)
    fmt = check_format(format)
    resolved = resolve_schedule(schedule or {}, config, near=(log, manifest), manifest=manifest)
    if metric_rank is not None:
        resolved = replace(resolved, metric_rank=metric_rank)
    recording, notes = recording_to_use(composition, log, schedule or {})
    notes = (*resolved.notes, *notes)
    with stage("reading log") as bar:
        run = read_log(log, format=fmt, rank=rank, progress=bar, step_every=step_every)
    logged = run.logged(metric) if metric in run.table.columns else None
    detection = detect_spikes(
        run.table, metric, detector, window, threshold, path=log, logged=logged
    )
    check_steps_in(detection.steps, steps)
    attribution, replayed, m, epochs, samples, more = _attributed(
        log, run, detection, resolved, covers, force, stage, config, recording
    )
    notes += more
    evidence = attribution.spikes if attribution is not None else log_only_evidence(detection)
    # (the counterfactual replays other strategies with the schedule's parameters, which a
    # recording does not have)
    source = m if recording is None else None
    with stage("variance proxies") as bar:
        variance = variance_proxies(
            detection, run.table, attribution, replayed, source, progress=bar
        )
    ctx = Context(
        log=log,
        log_format=run.format,
        config=str(resolved.config_path) if resolved.config_path else None,
        manifest=str(resolved.manifest) if resolved.manifest else None,
        schedule=_params(resolved.params) if resolved.manifest and not recording else None,
        epochs=epochs,
        step_source=run.step_source,
        notes=(*notes, *undetermined_notes(None if recording else replayed)),
        composition=recording[1] if recording is not None else None,
        label=label,
        steps=steps,
        span=(int(detection.steps[0]), int(detection.steps[-1])) if len(detection.steps) else None,
    )
    if steps is not None:
        evidence = tuple(s for s in evidence if in_steps(s.event.peak_step, steps))
        samples = {k: v for k, v in samples.items() if in_steps(k, steps)}
    return SpikesReport(ctx, detection, evidence, attribution, variance, samples, run)


def _attributed(
    log: str,
    run: Any,
    detection: Any,
    resolved: Any,
    covers: str,
    force: bool,
    stage: Stage,
    config: str | Path | None,
    recording: tuple[Path, str] | None,
) -> tuple[Any, Any, Any, int | None, dict[int, tuple[MicroBatch, ...]], tuple[str, ...]]:
    """Attribution on the recording, else on the replayed schedule of a manifest, else
    none: ``(attribution, replay, manifest, epochs replayed, spike batches, notes)``."""
    from ..composition.ground import check_steps, schedule_source

    if recording is None and resolved.manifest is None:
        return None, None, None, None, {}, ()
    check_steps(run.step_source, log, force)
    epochs: int | None = None
    notes: tuple[str, ...] = ()
    if recording is not None:
        attribution, replayed, m, notes = _attribute_recorded(
            run.table, detection, resolved, covers, force, stage, recording
        )
    else:
        source = schedule_source(resolved.config_path, config, bool(resolved.given), log)
        attribution, replayed, m, epochs = _attribute(
            log, run.table, detection, resolved, covers, force, stage, source
        )
    ids = m.ids if m is not None else None
    samples = spike_batches(replayed, ids, detection, attribution.spikes, covers, attribution)
    return attribution, replayed, m, epochs, samples, notes


def recording_to_use(
    composition: str | Path | None, log: str, flags: dict[str, Any]
) -> tuple[tuple[Path, str] | None, tuple[str, ...]]:
    """The recording to line the log up with, as ``(path, where it came from in words)``,
    and notes: ``--composition`` (refused beside schedule flags: nothing is replayed),
    else the one beside the log unless schedule flags name a schedule to replay (the
    rule of ``spikes`` and ``watch``)."""
    from ..errors import InputError
    from ..record import find_recording

    named = sorted(k for k, v in flags.items() if v is not None)
    if composition is not None:
        if named:
            shown = ", ".join("--" + k.replace("_", "-") for k in named)
            raise InputError(
                "--composition",
                f"a recorded composition is not replayed, so {shown} cannot apply",
                "drop the schedule flags, or drop --composition to replay the schedule",
            )
        return (Path(composition), display_path(composition)), ()
    found = find_recording(log) if log != "-" else None
    if found is None:
        return None, ()
    if named:
        note = (
            f"the batches recorded in {display_path(found)} are not used: schedule flags "
            "name a schedule to replay (drop them to use the recording)"
        )
        return None, (note,)
    return (Path(found), f"{display_path(found)} (found beside the log)"), ()


def recorded_replay(recording: Any, resolved: Any, stage: Stage = quiet) -> tuple[Any, Any]:
    """``(manifest or None, Replay)`` of a :class:`~dflash_diag.record.Recording`; with
    the manifest of ``resolved`` (flag or config), ``Recording.to_replay`` checks its
    sample ids and lengths against the recording (InputError: not the run's dataset) and
    adds its categories."""
    from ..manifest import read_manifest

    if resolved.manifest is None:
        return None, recording.to_replay()
    with stage("reading manifest") as bar:
        m = read_manifest(
            resolved.manifest, resolved.length_column, resolved.category_column, progress=bar
        )
    return m, recording.to_replay(lengths=m)


def _attribute_recorded(
    table: Any,
    detection: Any,
    resolved: Any,
    covers: str,
    force: bool,
    stage: Stage,
    recording: tuple[Path, str],
) -> tuple[Any, Any, Any, tuple[str, ...]]:
    """Read the recording (and the manifest, if any), check it against the log,
    attribute.  Returns ``(attribution, replay, manifest or None, notes)``."""
    from ..composition.ground import check_recording
    from ..record import read_recording
    from ..spikes.attribute import attribute_spikes
    from ..spikes.optimizer import lr_at

    path, named_by = recording
    with stage("reading recording"):
        rec = read_recording(path)
    m, rep = recorded_replay(rec, resolved, stage)
    check = check_recording(rep, table, detection.steps, force, str(path), named_by)
    lr = lr_at(table, detection.steps)
    with stage("attributing spikes") as bar:
        att = attribute_spikes(
            detection, rep, covers, check, resolved.metric_rank, progress=bar, lr=lr
        )
    notes: tuple[str, ...] = ()
    if rec.torn:
        notes = (
            f"{rec.torn} partial record{'s' if rec.torn != 1 else ''} at the end of "
            f"{named_by.split(' (')[0]} ignored (a run stopped mid-write)",
        )
    return att, rep, m, notes


def _params(params: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(params)


def _attribute(
    log: str,
    table: Any,
    detection: Any,
    resolved: Any,
    covers: str,
    force: bool,
    stage: Stage,
    source: str,
) -> tuple[Any, Any, Any, int]:
    """Read the manifest, replay once (enough epochs for the log), check, attribute."""
    from ..composition.ground import check_schedule, epochs_to_cover
    from ..manifest import read_manifest
    from ..schedule import replay
    from ..spikes.attribute import attribute_spikes
    from ..spikes.optimizer import lr_at

    with stage("reading manifest") as bar:
        m = read_manifest(
            resolved.manifest, resolved.length_column, resolved.category_column, progress=bar
        )
    params = resolved.params
    last = int(detection.steps[-1])
    epochs = params.epochs if "epochs" in resolved.given else epochs_to_cover(m, params, last, log)
    with stage("replaying schedule") as bar:
        rep = replay(m, params, epochs=epochs, progress=bar)
    named = "strategy" in resolved.given
    check = check_schedule(rep, table, force=force, path=log, named_by=source, named=named)
    lr = lr_at(table, detection.steps)
    with stage("attributing spikes") as bar:
        att = attribute_spikes(
            detection, rep, covers, check, resolved.metric_rank, progress=bar, lr=lr
        )
    return att, rep, m, epochs


def spike_batches(
    replay: Replay,
    ids: np.ndarray | None,
    detection: Detection,
    spikes: tuple[SpikeEvidence, ...],
    covers: str,
    attribution: Attribution,
) -> dict[int, tuple[MicroBatch, ...]]:
    """The micro-batches behind each spike's peak point, with the manifest's sample ids.

    A logged point covers the micro-batches :func:`~dflash_diag.spikes.features.
    micro_points` assigns to it (its step, or its window of steps), of the rank whose
    batches the metric follows (``attribution.metric_rank``; None: every rank).
    ``ids`` maps dataset indices to sample ids (None: the indices are the ids).
    """
    import numpy as np

    from ..spikes.features import micro_points

    d = detection
    idx = micro_points(replay, d.steps, d.log_interval, covers, attribution.metric_rank)
    where = {int(s): i for i, s in enumerate(d.steps)}
    micro = replay.micro
    step, rank, mb = (micro[c].to_numpy() for c in ("step", "rank", "micro"))
    out: dict[int, tuple[MicroBatch, ...]] = {}
    for s in spikes:
        peak = int(s.event.peak_step)
        if peak not in where:
            continue
        rows = np.flatnonzero(idx == where[peak])
        out[peak] = tuple(
            MicroBatch(
                int(step[r]),
                int(rank[r]),
                int(mb[r]),
                tuple(int(x) for x in _ids(replay.batch(int(r)), ids)),
            )
            for r in rows
        )
    return out


def _ids(indices: np.ndarray, ids: np.ndarray | None) -> np.ndarray:
    return indices if ids is None else ids[indices]
