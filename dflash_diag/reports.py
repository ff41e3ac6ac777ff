"""One function per command that returns the whole report as plain data.

:func:`spikes_report`, :func:`batches_report`, :func:`compare_report` and
:func:`parse_report` take what the commands take (paths and option values) and return
frozen dataclasses; the CLI, the JSON, the text, the plots and the HTML all render the
same object, so a notebook gets exactly what the command shows:

>>> from dflash_diag.reports import spikes_report
>>> r = spikes_report("sample_logs/run.log")  # doctest: +SKIP
>>> [(s.event.peak_step, s.verdict) for s in r.spikes][:2]  # doctest: +SKIP
[(254, 'composition'), (258, 'composition')]
>>> r.samples[254][0].sample_ids[:3]  # doctest: +SKIP

Nothing here prints.  ``stage`` (optional in every function) is a context-manager
factory ``stage(description) -> progress callback or None``; the CLI passes one that
draws a progress bar on stderr.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from .batchstats import ScheduleStats, ScheduleWarning
    from .buckets import BucketPlan
    from .compare import Comparison
    from .records import Replay, RunLog
    from .schedule.verify import SeedSearch
    from .spikes.attribute import Attribution, SpikeEvidence
    from .spikes.detect import Detection
    from .variance import VarianceReport

ProgressFn = Callable[[int, int], None]
#: ``stage("replaying") -> context manager yielding a progress callback (or None)``.
Stage = Callable[[str], AbstractContextManager[ProgressFn | None]]


@contextmanager
def quiet(description: str) -> Iterator[ProgressFn | None]:
    """The default :data:`Stage`: no progress shown."""
    yield None


@dataclass(frozen=True)
class Context:
    """Where the inputs came from, for the header and the JSON.

    :param schedule: the replayed schedule's parameters (None: no manifest).
    :param epochs: epochs replayed.
    :param step_source: ``RunLog.step_source``: with ``line order`` the "steps" are the
        log's records numbered 1, 2, ..., not optimizer steps, and are labelled so.
    :param composition: where the batches recorded during training came from, in words
        (``run.batches (found beside the log)``); None: no recording was used.
    :param label: the run's name in the header, the plot's title and the HTML's title
        (``--label``; None: the file's name).
    :param steps: ``--steps``: the range of steps shown ``(first, last)``, both included,
        None for an open end; None: every step.
    :param span: the first and last step of the log (for "steps 200-300 of 1-2961").
    """

    log: str
    log_format: str
    config: str | None = None
    manifest: str | None = None
    schedule: dict[str, Any] | None = None
    epochs: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    step_source: str = "field"
    composition: str | None = None
    label: str | None = None
    steps: tuple[int | None, int | None] | None = None
    span: tuple[int, int] | None = None

    @property
    def line_order(self) -> bool:
        """The log's records carry no step: its "steps" are logging events, numbered."""
        return self.step_source == "line order"


@dataclass(frozen=True)
class MicroBatch:
    """One replayed micro-batch behind a spiking point: where it ran and what it held.

    :param step: optimizer step; ``rank``, ``micro``: data-parallel rank and grad-accum
        index.
    :param sample_ids: the manifest's sample ids (its ``sample_id`` column, else row
        numbers), in batch order.
    """

    step: int
    rank: int
    micro: int
    sample_ids: tuple[int, ...]


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
    from .logs import check_format, read_log
    from .schedule.config import resolve_schedule
    from .schedule.replay import undetermined_notes
    from .spikes.attribute import log_only_evidence
    from .spikes.detect import detect_spikes
    from .variance import variance_proxies

    log = str(log)
    fmt = check_format(format)
    resolved = resolve_schedule(schedule or {}, config, near=log, manifest=manifest)
    if metric_rank is not None:
        resolved = replace(resolved, metric_rank=metric_rank)
    recording, notes = _recording(composition, log, schedule or {})
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
    from .spikes.coverage import check_steps, schedule_source

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


def _recording(
    composition: str | Path | None, log: str, flags: dict[str, Any]
) -> tuple[tuple[Path, str] | None, tuple[str, ...]]:
    """The recording to line the log up with, as ``(path, where it came from in words)``,
    and notes: ``--composition`` (refused beside schedule flags: nothing is replayed),
    else the one beside the log unless schedule flags name a schedule to replay."""
    from .errors import InputError
    from .record import find_recording

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
    from .manifest import read_manifest

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
    from .record import read_recording
    from .spikes.attribute import attribute_spikes
    from .spikes.coverage import check_recording
    from .spikes.optimizer import lr_at

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


def check_steps_in(logged: Any, steps: tuple[int | None, int | None] | None) -> None:
    """``--steps`` must hold at least one logged step: else a usage error naming the log's
    range."""
    from .errors import InputError

    if steps is None or any(in_steps(int(x), steps) for x in logged):
        return
    shown = f"{'' if steps[0] is None else steps[0]}:{'' if steps[1] is None else steps[1]}"
    span = f"{int(logged[0])}-{int(logged[-1])}" if len(logged) else "none"
    raise InputError(
        "--steps", f"no logged step in {shown} (the log has steps {span})", "widen the range"
    )


def in_steps(step: int, steps: tuple[int | None, int | None] | None) -> bool:
    """Whether ``step`` is in ``steps`` = (first, last), both included, None = open.

    >>> in_steps(5, (None, 5)), in_steps(4, (5, None)), in_steps(4, None)
    (True, False, True)
    """
    if steps is None:
        return True
    lo, hi = steps
    return (lo is None or step >= lo) and (hi is None or step <= hi)


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
    from .manifest import read_manifest
    from .schedule import replay
    from .spikes.attribute import attribute_spikes
    from .spikes.coverage import check_schedule, epochs_to_cover
    from .spikes.optimizer import lr_at

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

    from .spikes.features import micro_points

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


@dataclass(frozen=True)
class MicroLengths:
    """Rank 0's micro-batches of one strategy's schedule, for the batches plot.

    :param strategy: the strategy's name.
    :param steps: optimizer step of each of rank 0's micro-batches (schedule order).
    :param mean_len: its mean sample length (tokens).
    :param padding_efficiency: the whole schedule's real / padded tokens (0-1).
    """

    strategy: str
    steps: np.ndarray
    mean_len: np.ndarray
    padding_efficiency: float


def micro_lengths(replay: Replay, padding_efficiency: float) -> MicroLengths:
    """:class:`MicroLengths` of ``replay`` (rank 0's micro-batches, in schedule order)."""
    micro = replay.micro
    mine = micro[micro["rank"] == 0]
    return MicroLengths(
        replay.params.strategy,
        mine["step"].to_numpy(),
        mine["mean_len"].to_numpy(dtype=float),
        float(padding_efficiency),
    )


@dataclass(frozen=True)
class BatchesReport:
    """Everything ``batches`` shows.

    :param manifest: the manifest read; ``config``: the TOML file used, if any.
    :param stats: the chosen strategy's statistics.
    :param strategies: ``--compare``'s statistics, in the order asked.
    :param plan: ``--optimize-buckets``'s options.
    :param verification: ``--log``'s check (a ``Verification``), if asked; with
        ``--search-seed``, the best candidate's.
    :param training_seconds: per strategy name, the training time at ``--throughput``.
    :param throughput: padded tokens per second, if given.
    :param export: the file written by ``--export``, if any.
    :param search: ``--search-seed``'s outcome, if asked.
    :param seed: the seed of the schedule that ``stats`` (and every table) describes: the
        one found by the search, else the one given.
    :param warnings: what the schedule does to samples that do not fit it
        (:func:`~dflash_diag.batchstats.schedule_warnings`).
    :param given_check: after a search that found no seed, the ``Verification`` of the
        schedule as given (what ``spikes`` would check).
    :param micro: rank 0's micro-batch lengths per strategy drawn (each ``--compare``d
        one, else the chosen one), when plots were asked for.
    :param composition: the recording measured (``--composition``), whose statistics
        are ``stats`` (strategy ``recorded``); ``manifest`` is then ``none`` without one.
    :param bucket_edges: the edges a ``bucketed`` schedule here used when none were given
        (:func:`~dflash_diag.buckets.default_edges`); empty otherwise.
    :param label: a name for the header, the plot's title and the HTML's title
        (``--label``; None: the manifest's path).
    """

    manifest: str
    config: str | None
    stats: ScheduleStats
    strategies: tuple[ScheduleStats, ...] = ()
    plan: BucketPlan | None = None
    verification: Any = None
    training_seconds: dict[str, float] = field(default_factory=dict)
    throughput: float | None = None
    export: str | None = None
    search: SeedSearch | None = None
    seed: int | None = None
    warnings: tuple[ScheduleWarning, ...] = ()
    given_check: Any = None
    micro: tuple[MicroLengths, ...] = ()
    composition: str | None = None
    bucket_edges: tuple[int, ...] = ()
    label: str | None = None


def display_path(path: str | Path) -> str:
    """``path`` relative to the working directory when it is under it, else as given."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def batches_report(
    manifest: str | Path | None = None,
    schedule: dict[str, Any] | None = None,
    config: str | Path | None = None,
    compare: list[str] | None = None,
    optimize_buckets: int | None = None,
    throughput: float | None = None,
    log: str | Path | None = None,
    search_seed: range | None = None,
    export: str | Path | None = None,
    length_column: str | None = None,
    category_column: str | None = None,
    plots: bool = False,
    stage: Stage = quiet,
    composition: str | Path | None = None,
) -> BatchesReport:
    """Replay a schedule from a length manifest and measure it (``dflash-diag batches``).

    :param compare: strategy names (checked); ``optimize_buckets``: the most buckets K;
        ``throughput``: tokens/s at 100% padding efficiency; ``search_seed``: the seeds
        to search (needs ``log``); ``export``: a .parquet/.csv file to write.
    :param plots: also gather what the plots draw (``strip``, ``micro``).
    :param composition: measure the batches a run recorded (:mod:`dflash_diag.record`)
        instead of a replay; the manifest is then optional (needed by ``compare`` and
        ``optimize_buckets``, which replay it).
    """
    from .errors import InputError
    from .schedule.config import resolve_schedule

    log = Path(log) if log is not None else None
    manifest = Path(manifest) if manifest is not None else None
    if search_seed is not None and log is None:
        raise InputError("--search-seed", "needs a log to match", "add --log RUN.log")
    if composition is not None:
        return _recorded_batches(
            Path(composition),
            manifest,
            schedule or {},
            config,
            names=compare,
            k_max=optimize_buckets,
            rate=throughput,
            log=log,
            searching=search_seed is not None,
            export=Path(export) if export is not None else None,
            columns=(length_column, category_column),
            plots=plots,
            stage=stage,
        )
    resolved = resolve_schedule(schedule or {}, config, near=manifest, manifest=manifest)
    if resolved.manifest is None:
        raise InputError(
            "MANIFEST",
            "no manifest given",
            'name one, or set manifest = "..." under [schedule] in dflash-diag.toml',
        )
    if not resolved.manifest.exists():  # (a file, or a dataset folder)
        raise InputError(str(resolved.manifest), "manifest not found", "check the path")
    if log is not None and str(log) != "-" and not log.is_file():
        raise InputError(str(log), "log not found", "check the --log path")
    inputs = [resolved.manifest, *(x for x in (log, resolved.config_path) if x)]
    if export is not None:
        from .schedule.export import check_export_path

        check_export_path(Path(export), protect=inputs)
    return _batches(
        resolved.manifest,
        resolved.params,
        config_path=resolved.config_path,
        columns=(
            length_column or resolved.length_column,
            category_column or resolved.category_column,
        ),
        names=compare,
        k_max=optimize_buckets,
        rate=throughput,
        log=log,
        seeds=search_seed,
        export=Path(export) if export is not None else None,
        plots=plots,
        stage=stage,
    )


def _recorded_batches(
    path: Path,
    manifest: Path | None,
    flags: dict[str, Any],
    config: str | Path | None,
    *,
    names: list[str] | None,
    k_max: int | None,
    rate: float | None,
    log: Path | None,
    searching: bool,
    export: Path | None,
    columns: tuple[str | None, str | None],
    plots: bool,
    stage: Stage,
) -> BatchesReport:
    """``batches --composition FILE``: the recorded schedule measured as a replayed one
    is (strategy ``recorded``); ``names`` are replayed from the manifest with the
    schedule's parameters, over as many epochs as were recorded (unless ``--epochs``)."""
    from dataclasses import replace as with_

    from .batchstats import schedule_stats
    from .buckets import optimize_buckets
    from .logs import read_log
    from .record import read_recording
    from .schedule import verify_tokens
    from .schedule.export import export_schedule

    replays = "--compare" if names else "--optimize-buckets" if k_max is not None else None
    resolved = _recorded_inputs(path, manifest, flags, config, columns, replays, searching)
    with stage("reading recording"):
        rec = read_recording(path)
    m, schedule = recorded_replay(rec, resolved, stage)
    stats = with_(schedule_stats(schedule), strategy="recorded")
    params = resolved.params
    if "epochs" not in resolved.given:
        params = params.replace(epochs=max(stats.epochs, 1))
    compared: tuple[Any, ...] = ()
    drawn: tuple[MicroLengths, ...] = ()
    if names:
        compared, drawn = _compare(m, params, names, stats, schedule, stage, plots)
        compared = (stats, *compared)
    if plots:
        mine = micro_lengths(schedule, stats.padding_efficiency)
        drawn = (with_(mine, strategy="recorded"), *drawn)
    plan = None
    if k_max is not None:
        with stage("optimising buckets") as tick:
            plan = optimize_buckets(m, params, k_max, rate, progress=tick)
    check = verify_tokens(schedule, read_log(log).table) if log is not None else None
    seconds = _training_seconds((stats, *compared), rate)
    written = None
    if export is not None:
        protect = [x for x in (path, manifest, log, resolved.config_path) if x is not None]
        export_schedule(schedule, export, m.ids if m is not None else None, protect=protect)
        written = display_path(export)
    return BatchesReport(
        manifest=display_path(resolved.manifest) if resolved.manifest else "none",
        config=display_path(resolved.config_path) if resolved.config_path else None,
        stats=stats,
        strategies=compared,
        plan=plan,
        verification=check,
        training_seconds=seconds,
        throughput=rate,
        export=written,
        micro=drawn,
        composition=display_path(path),
    )


def _recorded_inputs(
    path: Path,
    manifest: Path | None,
    flags: dict[str, Any],
    config: str | Path | None,
    columns: tuple[str | None, str | None],
    replays: str | None,
    searching: bool,
) -> Any:
    """The schedule and manifest ``batches --composition`` uses (a ResolvedSchedule),
    checked: no seed search, and a manifest when an option (``replays``) replays it."""
    from dataclasses import replace as with_

    from .errors import InputError
    from .schedule.config import resolve_schedule

    if searching:
        raise InputError(
            "--search-seed",
            "a recorded composition is not replayed, so it has no seed to search",
            "drop --search-seed (--log checks the recording against the log)",
        )
    resolved = resolve_schedule(flags, config, near=manifest or path, manifest=manifest)
    if resolved.manifest is None and replays is not None:
        raise InputError(replays, "replays the manifest, and none was given", "give MANIFEST")
    if resolved.manifest is not None and not resolved.manifest.exists():
        raise InputError(str(resolved.manifest), "manifest not found", "check the path")
    return with_(
        resolved,
        length_column=columns[0] or resolved.length_column,
        category_column=columns[1] or resolved.category_column,
    )


def _check_log(
    manifest: Any, params: Any, log: Path, seeds: range | None, stage: Stage
) -> tuple[Any, Any, Any]:
    """Read the log; with ``seeds``, search them.  Returns ``(params, run, search)``:
    the params with the found seed and first step when the search found one (else as
    given), the RunLog, and the SeedSearch (None without ``seeds``)."""
    from .logs import read_log
    from .schedule import search_seed
    from .spikes.coverage import MIN_TOKENS_MATCH

    run = read_log(log)
    if seeds is None:
        return params, run, None
    with stage("searching seeds") as tick:
        search = search_seed(
            manifest, params, run.table, seeds, progress=tick, min_match=MIN_TOKENS_MATCH
        )
    if search.seed_found:
        # every figure below is for the seed the log was run with
        params = params.replace(seed=search.best.seed, first_step=search.best.first_step)
    return params, run, search


def _compare(
    manifest: Any,
    params: Any,
    names: list[str],
    stats: Any,
    schedule: Any,
    stage: Stage,
    plots: bool,
) -> tuple[tuple[Any, ...], tuple[MicroLengths, ...]]:
    """Each named strategy's statistics (as :func:`~dflash_diag.batchstats.
    compare_strategies`), and with ``plots`` its rank-0 micro-batch lengths."""
    from .batchstats import check_strategy_names, params_for, schedule_stats
    from .schedule import replay

    names = check_strategy_names(names)
    out, drawn = [], []
    with stage("comparing strategies") as tick:
        for i, name in enumerate(names):
            if name == params.strategy == stats.strategy:
                st, rep = stats, schedule
            else:
                rep = replay(manifest, params_for(name, params, manifest.lengths), None)
                st = schedule_stats(rep)
            out.append(st)
            if plots:
                drawn.append(micro_lengths(rep, st.padding_efficiency))
            if tick is not None:
                tick(i + 1, len(names))
    return tuple(out), tuple(drawn)


def _batches(
    manifest_path: Path,
    params: Any,
    *,
    config_path: Path | None,
    columns: tuple[str | None, str | None],
    names: list[str] | None,
    k_max: int | None,
    rate: float | None,
    log: Path | None,
    seeds: range | None,
    export: Path | None,
    plots: bool,
    stage: Stage,
) -> BatchesReport:
    from .batchstats import schedule_stats, schedule_warnings
    from .buckets import optimize_buckets
    from .manifest import read_manifest
    from .schedule import replay, verify_tokens
    from .schedule.export import export_schedule

    with stage("reading manifest") as tick:
        manifest = read_manifest(manifest_path, *columns, progress=tick)
    run = search = None
    if log is not None:
        params, run, search = _check_log(manifest, params, log, seeds, stage)
    with stage("replaying") as tick:
        schedule = replay(manifest, params, progress=tick)
    stats = schedule_stats(schedule)
    compared: tuple[Any, ...] = ()
    drawn: tuple[MicroLengths, ...] = ()
    if names:
        compared, drawn = _compare(manifest, params, names, stats, schedule, stage, plots)
    plan = None
    if k_max is not None:
        with stage("optimising buckets") as tick:
            plan = optimize_buckets(manifest, params, k_max, rate, progress=tick)
    # the schedule the tables describe (the given one unless a seed was found), checked
    check = verify_tokens(schedule, run.table) if run is not None else None
    verification = search.best if search is not None else check
    unfound = search is not None and not search.seed_found
    seconds = _training_seconds((stats, *compared), rate)
    written = None
    if export is not None:
        inputs = [manifest_path, *(x for x in (log, config_path) if x is not None)]
        export_schedule(schedule, export, manifest.ids, protect=inputs)
        written = display_path(export)
    if plots and not drawn:
        drawn = (micro_lengths(schedule, stats.padding_efficiency),)
    derived: tuple[int, ...] = ()
    if not params.buckets and "bucketed" in (params.strategy, *(names or ())):
        from .buckets import default_edges

        cap = params.max_seq_len
        derived = default_edges(manifest.lengths if cap is None else manifest.lengths.clip(max=cap))
    return BatchesReport(
        manifest=display_path(manifest_path),
        config=display_path(config_path) if config_path is not None else None,
        stats=stats,
        strategies=compared,
        plan=plan,
        verification=verification,
        training_seconds=seconds,
        throughput=rate,
        export=written,
        search=search,
        seed=params.seed,
        warnings=tuple(schedule_warnings(manifest, params)),
        given_check=check if unfound else None,
        micro=drawn,
        bucket_edges=derived,
    )


def compare_report(
    files: list[str],
    run: str | None = None,
    align: str = "step",
    metrics: list[str] | None = None,
    milestones: list[str] | None = None,
    at: tuple[int, ...] = (),
    warmup_steps: int | None = None,
    band_k: float = 3.0,
    window: int = 21,
    format: str | None = None,
    rank: int | str = 0,
    step_every: int | None = None,
    stage: Stage = quiet,
) -> Comparison:
    """Compare the last of ``files`` (or ``run``) with the others (``dflash-diag
    compare``): a :class:`~dflash_diag.compare.Comparison`.

    :param metrics: metric names (None: the defaults); ``milestones``: ``--milestones``
        texts (``0.1,0.3`` or ``loss=2,1.5``).
    """
    from .compare import apply_step_every, compare_runs, parse_milestones
    from .errors import InputError
    from .logs import check_format, read_log

    paths = [str(f) for f in files] + ([str(run)] if run is not None else [])
    if len(paths) < 2:
        raise InputError(
            "compare",
            "needs at least one baseline and a run",
            "give BASELINE.log RUN.log (or FILES... --run RUN.log)",
        )
    fmt = check_format(format)
    levels = parse_milestones(milestones or [])
    logs = []
    with stage("reading logs") as bar:
        for i, path in enumerate(paths):
            logs.append(read_log(path, format=fmt, rank=rank))
            if bar is not None:
                bar(i + 1, len(paths))
    logs = apply_step_every(logs, step_every)
    with stage("comparing") as bar:
        return compare_runs(
            logs[:-1],
            logs[-1],
            align=align,
            metrics=metrics,
            milestones=levels,
            at=tuple(at),
            warmup_steps=warmup_steps,
            band_k=band_k,
            window=window,
            progress=bar,
        )


@dataclass(frozen=True, eq=False)
class ParseReport:
    """What ``parse`` shows: the log read and its summary (the ``--json`` document)."""

    run: RunLog
    summary: dict[str, Any]


def parse_report(
    log: str | Path,
    format: str | None = None,
    rank: int | str = 0,
    step_every: int | None = None,
    stage: Stage = quiet,
    steps: tuple[int | None, int | None] | None = None,
) -> ParseReport:
    """Read ``log`` and summarise it (``dflash-diag parse``); with ``steps`` (first, last;
    None = open), only the rows of those steps (the summary's ``steps_shown`` says which,
    and ``of_steps`` the log's whole range)."""
    from .logs import check_format, read_log
    from .render.parse import summarise

    fmt = check_format(format)
    with stage("reading log") as bar:
        run = read_log(str(log), format=fmt, rank=rank, progress=bar, step_every=step_every)
    if steps is None:
        return ParseReport(run, summarise(run, rank))
    logged = run.table["step"].to_numpy()
    check_steps_in(logged, steps)
    keep = [in_steps(int(x), steps) for x in logged]
    shown = replace(run, table=run.table[keep].reset_index(drop=True))
    whole = [int(logged.min()), int(logged.max())]
    return ParseReport(
        shown, summarise(shown, rank) | {"steps_shown": list(steps), "of_steps": whole}
    )


def _training_seconds(stats: Sequence[Any], rate: float | None) -> dict[str, float]:
    """Training time (s) by strategy at ``rate`` tokens/s and 100% padding efficiency
    (:func:`~dflash_diag.buckets.training_time`); empty without a rate."""
    from .buckets import training_time

    if rate is None:
        return {}
    return {
        st.strategy: training_time(st.tokens_per_epoch, st.epochs, st.padding_efficiency, rate)
        for st in stats
    }
