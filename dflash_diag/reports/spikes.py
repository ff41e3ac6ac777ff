"""``dflash-diag spikes``: detection, and attribution on the run's composition."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from ..composition import Composition, Request, Resolution
    from ..data import Replay, RunLog
    from ..samples.kinds import HighKind
    from ..spikes.attribute import Attribution, SpikeEvidence
    from ..spikes.culprits import Measured, SampleFindings
    from ..spikes.detect import Detection, NearMiss
    from ..spikes.variance import VarianceReport

from ..errors import InputError
from ..storage import display
from .common import Context, MicroBatch, Stage, check_steps_in, in_steps, quiet


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
    :param below_cut: the rises just under the detector's cut
        (:func:`~dflash_diag.spikes.detect.near_misses`).
    :param noise_reach: the z this log's own noise reaches (None: not robust, or not
        enough points; :func:`~dflash_diag.spikes.detect.noise_reach`).
    :param composition: what each step held, as lined up (None: the log alone).
    """

    context: Context
    detection: Detection
    spikes: tuple[SpikeEvidence, ...]
    attribution: Attribution | None
    variance: VarianceReport | None
    samples: dict[int, tuple[MicroBatch, ...]]
    run: RunLog
    below_cut: tuple[NearMiss, ...] = ()
    noise_reach: float | None = None
    composition: Composition | None = None


@dataclass(frozen=True)
class SpikesOptions:
    """How ``spikes`` reads the log and looks at it (the command's options).

    :param metric: the column examined; ``window``, ``threshold``, ``detector``: the
        detector's (None: its defaults).
    :param covers: what a logged point covers (``window`` or ``step``).
    :param metric_rank: whose micro-batches the metric follows (``auto``, ``all``, a
        rank; None: the config's, else found).
    :param format: the log's format (None: detected); ``rank``: which rank's records;
        ``step_every``: steps per record of a log that numbers none.
    :param steps: (first, last; None = open): keep the spikes whose peak is in that
        range; detection, the composition model and the variance figures still use the
        whole log (a baseline needs the points before a spike).
    :param label: the run's name in the header and titles.
    :param ground: what the samples are tested on (:data:`GROUNDS`): ``auto``, their
        own losses where the recording measured them (``measured``), else the logged
        points (``inferred``); ``inferred`` always the points; ``measured`` refuses a
        composition without per-sample losses.
    """

    metric: str = "loss"
    window: int | None = None
    threshold: float | None = None
    detector: str = "robust"
    covers: str = "window"
    metric_rank: int | str | None = None
    format: str | None = None
    rank: int | str = 0
    step_every: int | None = None
    steps: tuple[int | None, int | None] | None = None
    label: str | None = None
    ground: str = "auto"

    def __post_init__(self) -> None:
        if self.ground not in GROUNDS:
            raise InputError("--ground", f"is {self.ground!r}", f"choose from {', '.join(GROUNDS)}")


#: What ``--ground`` can ask for (:attr:`SpikesOptions.ground`).
GROUNDS = ("auto", "inferred", "measured")


def spikes_report(
    log: str | Path,
    options: SpikesOptions | None = None,
    batches: Request | None = None,
    stage: Stage = quiet,
) -> SpikesReport:
    """Detect spikes in ``log`` and, with a composition, attribute them
    (``dflash-diag spikes``).

    :param options: the detector's and the report's options (default: the command's).
    :param batches: what the batches are (:class:`~dflash_diag.composition.Request`:
        schedule flags, ``--config``, ``--manifest``, ``--composition``, ``--force``);
        resolved by :func:`~dflash_diag.composition.resolve`: a recording named or found
        beside the log, else a schedule replayed from a manifest, else none (log only).
    """
    from ..spikes.attribute import log_only_evidence
    from ..spikes.detect import near_misses, noise_reach
    from ..spikes.variance import variance_proxies

    o = options or SpikesOptions()
    read = read_points(log, o, batches, stage)
    run, detection, comp = read.run, read.detection, read.composition
    attribution, samples = None, {}
    if comp is not None:
        measured = sample_losses(comp, o.ground)
        attribution = _attribute(
            comp, run.table, detection, o.covers, read.metric_rank, stage, measured
        )
        samples = spike_batches(
            comp.replay, comp.ids, detection, attribution.spikes, o.covers, attribution
        )
        if attribution.high_kinds and comp.manifest is not None:
            import numpy as np

            codes = np.asarray(comp.manifest.categories)
            held = _held_high_kinds(attribution, samples, comp, codes)
            attribution = replace(attribution, spikes=held)
    evidence = attribution.spikes if attribution is not None else log_only_evidence(detection)
    # (the counterfactual replays other strategies with the schedule's parameters, which a
    # recording does not have)
    source = comp.manifest if comp is not None and not comp.recorded else None
    replayed = comp.replay if comp is not None else None
    with stage("variance proxies") as bar:
        variance = variance_proxies(
            detection, run.table, attribution, replayed, source, progress=bar
        )
    ctx = read.context
    if o.steps is not None:
        evidence = tuple(s for s in evidence if in_steps(s.event.peak_step, o.steps))
        samples = {k: v for k, v in samples.items() if in_steps(k, o.steps)}
    return SpikesReport(
        ctx,
        detection,
        evidence,
        attribution,
        variance,
        samples,
        run,
        below_cut=near_misses(detection),
        noise_reach=noise_reach(detection),
        composition=comp,
    )


@dataclass(frozen=True, eq=False)
class PointsRead:
    """What ``spikes`` and ``samples`` both start from (:func:`read_points`).

    :param run: the log read; ``detection``: its points and spikes;
    :param composition: what each step held, lined up with the points (None: none);
    :param metric_rank: whose micro-batches the metric follows, as asked (the option,
        else the config's; None: found from the batches);
    :param context: where the inputs came from, for the header.
    """

    run: RunLog
    detection: Detection
    composition: Composition | None
    metric_rank: int | str | None
    context: Context


def read_points(
    log: str | Path, o: SpikesOptions, batches: Request | None, stage: Stage = quiet
) -> PointsRead:
    """Read ``log``, detect its spikes and line the composition ``batches`` names up with
    its points (:func:`spikes_report`'s first half)."""
    from ..composition import Request, resolve
    from ..logs import check_format, read_log
    from ..spikes.detect import describe_interval, detect_spikes

    log = str(log)
    fmt = check_format(o.format)
    res = resolve(replace(batches or Request(), log=log))
    metric_rank = o.metric_rank if o.metric_rank is not None else res.schedule.metric_rank
    with stage("reading log") as bar:
        run = read_log(log, format=fmt, rank=o.rank, progress=bar, step_every=o.step_every)
    logged = run.logged(o.metric) if o.metric in run.table.columns else None
    detection = detect_spikes(
        run.table, o.metric, o.detector, o.window, o.threshold, path=log, logged=logged
    )
    said = describe_interval(detection.log_interval, o.covers, o.metric)
    detection = replace(detection, covers=said)
    check_steps_in(detection.steps, o.steps)
    comp = _composition(res, log, run, detection, stage)
    notes = res.schedule.value_notes + res.notes
    notes += res.source.notes() if comp is not None and res.source else ()
    ctx = _context(log, run, res, comp, detection, o, notes)
    return PointsRead(run, detection, comp, metric_rank, ctx)


def _composition(
    res: Resolution, log: str, run: RunLog, detection: Detection, stage: Stage
) -> Composition | None:
    """The composition lined up with the log's points (None: none named); a log whose
    steps are line numbers is refused first (unless forced)."""
    from ..composition.ground import check_steps

    if res.source is None:
        return None
    check_steps(run.step_source, log, res.source.force)
    return res.source.composition(run.table, detection.steps, stage)


def _attribute(
    comp: Composition,
    table: pd.DataFrame,
    detection: Detection,
    covers: str,
    metric_rank: int | str | None,
    stage: Stage,
    measured: Measured | None = None,
) -> Attribution:
    from ..spikes.attribute import attribute_spikes
    from ..spikes.optimizer import lr_at

    lr = lr_at(table, detection.steps)
    with stage("attributing spikes") as bar:
        attribution = attribute_spikes(
            detection,
            comp.replay,
            covers,
            comp.ground,
            metric_rank,
            progress=bar,
            lr=lr,
            ids=comp.ids,
            measured=measured,
        )
    kinds = high_kinds_of(attribution.samples, comp)
    return replace(attribution, high_kinds=kinds) if kinds else attribution


def _held_high_kinds(
    attribution: Attribution,
    batches: dict[int, tuple[MicroBatch, ...]],
    comp: Composition,
    kinds: np.ndarray,
) -> tuple[SpikeEvidence, ...]:
    """The spikes, each ``unexplained`` one whose batches hold samples of a category high
    as a whole made ``inconclusive``: those samples are not named from within their
    category, yet their own losses are what stands out (the optimizer is not shown).
    ``kinds``: each dataset index's category code; a micro-batch's samples are read from
    the replay's row of its ``(step, rank, micro)``, as dataset indices."""
    import numpy as np

    names = list(comp.manifest.category_names) if comp.manifest is not None else []
    high = {names.index(k.name): k for k in attribution.high_kinds}
    micro = comp.replay.micro
    wanted = {b.step for held in batches.values() for b in held}
    near = micro[micro["step"].isin(wanted)]
    row_of = {
        (int(st), int(r), int(mb)): int(i)
        for i, st, r, mb in zip(near.index, near["step"], near["rank"], near["micro"], strict=True)
    }
    out = []
    for s in attribution.spikes:
        rows = [row_of[(b.step, b.rank, b.micro)] for b in batches.get(s.event.peak_step, ())]
        if s.verdict != "unexplained" or not rows:
            out.append(s)
            continue
        index = np.concatenate([comp.replay.batch(r) for r in rows])
        counts = {c: int(np.count_nonzero(kinds[index] == c)) for c in high}
        said = [
            f"{n} sample{'s' if n != 1 else ''} of category {high[c].name}, high as a whole "
            f"({high[c].median_nats:+.2g} nats a token over their batch mates)"
            for c, n in counts.items()
            if n
        ]
        if not said:
            out.append(s)
            continue
        why = f"its batch holds {' and '.join(said)}: what made it may be them, not the optimizer"
        out.append(replace(s, verdict="inconclusive", reasons=(*s.reasons, why)))
    return tuple(out)


def high_kinds_of(found: SampleFindings | None, comp: Composition) -> tuple[HighKind, ...]:
    """The manifest's categories high as a whole, on measured ground (none elsewhere):
    :func:`~dflash_diag.samples.kinds.high_kinds` of each sample's measured own loss
    over its batch mates'.  ``spikes`` and ``samples`` both say them."""
    import numpy as np

    from ..samples.kinds import high_kinds

    m = comp.manifest
    if found is None or found.evidence.ground != "measured" or m is None:
        return ()
    if m.categories is None or not m.category_names:
        return ()
    excess = found.evidence.table["own_excess_nats"].to_numpy(dtype=float)
    n = min(excess.size, len(m.categories))
    return high_kinds(excess[:n], np.asarray(m.categories)[:n], m.category_names)


def sample_losses(comp: Composition, ground: str) -> Measured | None:
    """The per-sample losses the samples are tested on, as ``ground`` asks (None: the
    logged points).

    :raises InputError: ``measured`` asked of a composition that has none.
    """
    from ..spikes.culprits import Measured

    loss = comp.sample_loss
    if ground == "inferred" or (loss is None and ground == "auto"):
        return None
    if loss is None:
        raise InputError(
            "--ground",
            "is measured, but the composition holds no per-sample losses",
            "record them (record_trainer(..., sample_losses=True)) or use --ground auto",
        )
    return Measured.of(loss, comp.manifest)


def _context(
    log: str,
    run: RunLog,
    res: Resolution,
    comp: Composition | None,
    detection: Detection,
    o: SpikesOptions,
    notes: tuple[str, ...],
) -> Context:
    from dataclasses import asdict

    from ..schedule.replay import undetermined_notes

    resolved = res.schedule
    replayed = comp if comp is not None and not comp.recorded else None
    return Context(
        log=log,
        log_format=run.format,
        config=str(resolved.config_path) if resolved.config_path else None,
        config_found=resolved.found if resolved.found not in (None, "named") else None,
        manifest=display(resolved.manifest) if resolved.manifest else None,
        schedule=asdict(resolved.params) if resolved.manifest and not res.recorded else None,
        epochs=replayed.epochs if replayed is not None else None,
        step_source=run.step_source,
        notes=(*notes, *undetermined_notes(replayed.replay if replayed is not None else None)),
        composition=res.source.named_by if res.recorded and res.source else None,
        label=o.label,
        steps=o.steps,
        span=(int(detection.steps[0]), int(detection.steps[-1])) if len(detection.steps) else None,
    )


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
    # the micro-batches of every spike's point, found in one pass (then each point's
    # among those few): the same rows, in order
    peaks = np.zeros(len(d.steps) + 1, dtype=bool)  # (the extra one: index -1, none)
    peaks[[where[p] for p in (int(s.event.peak_step) for s in spikes) if p in where]] = True
    hit = np.flatnonzero(peaks[idx])
    out: dict[int, tuple[MicroBatch, ...]] = {}
    for s in spikes:
        peak = int(s.event.peak_step)
        if peak not in where:
            continue
        rows = hit[idx[hit] == where[peak]]
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
