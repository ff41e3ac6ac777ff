"""``dflash-diag batches``: a schedule replayed (or recorded) and measured, compared,
its buckets optimised."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from ..batches.buckets import BucketPlan
    from ..batches.stats import ScheduleStats, ScheduleWarning
    from ..composition import Request, Resolution
    from ..data import Replay
    from ..schedule.config import ResolvedSchedule
    from ..schedule.verify import SeedSearch

from ..composition.recorded import RecordedSource
from ..composition.replayed import ReplayedSource
from ..data import display_path
from ..storage import is_uri
from .common import Stage, quiet


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
        (:func:`~dflash_diag.batches.stats.schedule_warnings`).
    :param given_check: after a search that found no seed, the ``Verification`` of the
        schedule as given (what ``spikes`` would check).
    :param micro: rank 0's micro-batch lengths per strategy drawn (each ``--compare``d
        one, else the chosen one), when plots were asked for.
    :param composition: the recording measured (``--composition``), whose statistics
        are ``stats`` (strategy ``recorded``); ``manifest`` is then ``none`` without one.
    :param bucket_edges: the edges a ``bucketed`` schedule here used when none were given
        (:func:`~dflash_diag.schedule.edges.default_edges`); empty otherwise.
    :param label: a name for the header, the plot's title and the HTML's title
        (``--label``; None: the manifest's path).
    :param seed_origin: where the schedule's seed came from (``--seed``, a config's
        path, ``default``: :meth:`~dflash_diag.schedule.config.ResolvedSchedule.origin`).
    :param provenance: how the config was found, the values from flags, the code run
        (:attr:`~dflash_diag.schedule.config.ResolvedSchedule.notes`).
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
    seed_origin: str = "default"
    provenance: tuple[str, ...] = ()


@dataclass(frozen=True)
class BatchesOptions:
    """What ``batches`` measures beside the schedule (the command's options).

    :param compare: strategy names to replay and measure beside it (checked).
    :param optimize_buckets: the most buckets K to optimise edges for.
    :param throughput: tokens/s at 100% padding efficiency, for training times.
    :param log: a run's log to check the schedule against (``--log``).
    :param search_seed: the seeds to search (needs ``log``).
    :param export: a .parquet/.csv file to write the schedule to.
    :param plots: also gather what the plots draw (``micro``).
    :param label: a name for the header, the plot's title and the HTML's title.
    """

    compare: Sequence[str] | None = None
    optimize_buckets: int | None = None
    throughput: float | None = None
    log: str | Path | None = None
    search_seed: range | None = None
    export: str | Path | None = None
    plots: bool = False
    label: str | None = None


def batches_report(
    batches: Request,
    options: BatchesOptions | None = None,
    stage: Stage = quiet,
) -> BatchesReport:
    """Measure a schedule (``dflash-diag batches``): the one the manifest replays under
    the schedule of the flags and the config, or, with ``batches.composition``, the one
    a run recorded (:mod:`dflash_diag.record`; the manifest is then optional, needed by
    ``compare`` and ``optimize_buckets``, which replay it).

    :param batches: the manifest, the schedule flags, ``--config``, ``--composition``
        and the manifest's columns (:class:`~dflash_diag.composition.Request`).
    :param options: what else to measure (:class:`BatchesOptions`).
    """
    from dataclasses import replace as with_

    from ..composition import resolve
    from ..errors import InputError

    o = options or BatchesOptions()
    if o.search_seed is not None and o.log is None:
        raise InputError("--search-seed", "needs a log to match", "add --log RUN.log")
    recorded = batches.composition is not None
    if recorded and o.search_seed is not None:
        raise InputError(
            "--search-seed",
            "a recorded composition is not replayed, so it has no seed to search",
            "drop --search-seed (--log checks the recording against the log)",
        )
    near: tuple[str | Path | None, str | Path | None]
    if recorded:
        near = (None, batches.manifest if batches.manifest is not None else batches.composition)
    else:
        near = (o.log, batches.manifest)
    res = resolve(with_(batches, log=None, near=near, flags_name_schedule=False))
    _check_inputs(res, o, recorded)
    source = res.source
    if isinstance(source, RecordedSource):
        report = _recorded_batches(source, res.schedule, o, stage)
    elif isinstance(source, ReplayedSource):
        report = _batches(source, res.schedule, o, stage)
        origin = res.schedule.origin("seed")
        report = with_(report, seed_origin=origin, provenance=res.schedule.notes)
    else:  # (_check_inputs refuses a request with no manifest and no recording)
        raise TypeError(f"no source to measure: {source!r}")
    return with_(report, label=o.label)


def _check_inputs(res: Resolution, o: BatchesOptions, recorded: bool) -> None:
    """Refuse, before any reading, what cannot be measured: no manifest where one is
    needed, a manifest or log that is not there, an export over an input."""
    from ..errors import InputError

    resolved = res.schedule
    manifest = resolved.manifest
    log = Path(o.log) if o.log is not None else None
    if recorded:
        replays = "--compare" if o.compare else None
        replays = replays or ("--optimize-buckets" if o.optimize_buckets is not None else None)
        if manifest is None and replays is not None:
            raise InputError(replays, "replays the manifest, and none was given", "give MANIFEST")
        if manifest is not None and not is_uri(manifest) and not manifest.exists():
            raise InputError(str(manifest), "manifest not found", "check the path")
        return
    if manifest is None:
        raise InputError(
            "MANIFEST",
            "no manifest given",
            'name one, or set manifest = "..." under [schedule] in dflash-diag.toml',
        )
    if not is_uri(manifest) and not manifest.exists():  # (a file, a dataset folder)
        raise InputError(str(manifest), "manifest not found", "check the path")
    if log is not None and str(log) != "-" and not log.is_file():
        raise InputError(str(log), "log not found", "check the --log path")
    if o.export is not None:
        from ..schedule.export import check_export_path

        inputs = [manifest, *(x for x in (log, resolved.config_path) if x)]
        check_export_path(Path(o.export), protect=inputs)


def _recorded_batches(
    source: RecordedSource, resolved: ResolvedSchedule, o: BatchesOptions, stage: Stage
) -> BatchesReport:
    """``batches --composition FILE``: the recorded schedule measured as a replayed one
    is (strategy ``recorded``); ``o.compare`` are replayed from the manifest with the
    schedule's parameters, over as many epochs as were recorded (unless ``--epochs``)."""
    from dataclasses import replace as with_

    from ..batches.buckets import optimize_buckets
    from ..batches.stats import schedule_stats
    from ..logs import read_log
    from ..schedule import verify_tokens
    from ..schedule.export import export_schedule

    source.load(stage)
    m, schedule = source.manifest, source.replay_for(None)
    stats = with_(schedule_stats(schedule), strategy="recorded")
    params = resolved.params
    if "epochs" not in resolved.given:
        params = params.replace(epochs=max(stats.epochs, 1))
    compared: tuple[Any, ...] = ()
    drawn: tuple[MicroLengths, ...] = ()
    if o.compare:
        compared, drawn = _compare(m, params, list(o.compare), stats, schedule, stage, o.plots)
        compared = (stats, *compared)
    if o.plots:
        mine = micro_lengths(schedule, stats.padding_efficiency)
        drawn = (with_(mine, strategy="recorded"), *drawn)
    plan = None
    if o.optimize_buckets is not None and m is not None:  # (_check_inputs: needs one)
        with stage("optimising buckets") as tick:
            plan = optimize_buckets(m, params, o.optimize_buckets, o.throughput, progress=tick)
    log = Path(o.log) if o.log is not None else None
    check = verify_tokens(schedule, read_log(log).table) if log is not None else None
    seconds = _training_seconds((stats, *compared), o.throughput)
    written = None
    path = source.path
    if o.export is not None:
        protect = [x for x in (path, resolved.manifest, log, resolved.config_path) if x]
        export = Path(o.export)
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
        throughput=o.throughput,
        export=written,
        micro=drawn,
        composition=display_path(path),
    )


def _check_log(
    manifest: Any, params: Any, log: Path, seeds: range | None, stage: Stage
) -> tuple[Any, Any, Any]:
    """Read the log; with ``seeds``, search them.  Returns ``(params, run, search)``:
    the params with the found seed and first step when the search found one (else as
    given), the RunLog, and the SeedSearch (None without ``seeds``)."""
    from ..composition.ground import MIN_TOKENS_MATCH
    from ..logs import read_log
    from ..schedule import search_seed

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
    """Each named strategy's statistics (as :func:`~dflash_diag.batches.stats.
    compare_strategies`), and with ``plots`` its rank-0 micro-batch lengths."""
    from ..batches.stats import check_strategy_names, params_for, schedule_stats
    from ..schedule import replay

    names = check_strategy_names(names)
    out, drawn = [], []
    with stage("comparing strategies") as tick:
        for i, name in enumerate(names):
            if name == params.strategy == stats.strategy and (schedule is not None or not plots):
                st, rep = stats, schedule
            elif plots:
                rep = replay(manifest, params_for(name, params, manifest.lengths), None)
                st = schedule_stats(rep)
            else:  # (the statistics only: no sample ids held)
                st = schedule_stats(_rows(manifest, params_for(name, params, manifest.lengths)))
            out.append(st)
            if plots and rep is not None:
                drawn.append(micro_lengths(rep, st.padding_efficiency))
            if tick is not None:
                tick(i + 1, len(names))
    return tuple(out), tuple(drawn)


def _batches(
    source: ReplayedSource, resolved: ResolvedSchedule, o: BatchesOptions, stage: Stage
) -> BatchesReport:
    """The schedule replayed from the manifest, measured; with ``o.log`` checked against
    the run (and with ``o.search_seed``, the run's seed searched first)."""
    from ..batches.buckets import optimize_buckets
    from ..batches.stats import schedule_stats, schedule_warnings
    from ..schedule.export import export_replayed, export_schedule

    source.load(stage)  # (which hands the read's buffers back)
    manifest, params = source.manifest, source.params
    if manifest is None or resolved.manifest is None:
        raise TypeError("a replayed source with no manifest")
    log = Path(o.log) if o.log is not None else None
    run = search = None
    if log is not None:
        params, run, search = _check_log(manifest, params, log, o.search_seed, stage)
        source.params = params
    # Only the plots read the schedule itself; the statistics need per-micro-batch
    # sums, replayed without the sample ids (a fraction of the memory), --log the
    # per-step tokens, and --export writes the epochs as they are replayed once more.
    whole = o.plots
    with stage("replaying") as tick:
        schedule = source.replay_for(None, tick) if whole else None
        stats = schedule_stats(schedule if schedule is not None else _rows(manifest, params, tick))
    names = list(o.compare) if o.compare else None
    compared: tuple[Any, ...] = ()
    drawn: tuple[MicroLengths, ...] = ()
    if names:
        compared, drawn = _compare(manifest, params, names, stats, schedule, stage, o.plots)
    plan = None
    if o.optimize_buckets is not None:
        with stage("optimising buckets") as tick:
            plan = optimize_buckets(
                manifest, params, o.optimize_buckets, o.throughput, progress=tick
            )
    from ..schedule import verify_tokens
    from ..schedule.verify import verify_replayed

    # the schedule the tables describe (the given one unless a seed was found), checked
    check = None
    if run is not None:
        with stage("checking against the log"):
            if schedule is not None:
                check = verify_tokens(schedule, run.table)
            else:
                check = verify_replayed(manifest, params, run.table)
    verification = search.best if search is not None else check
    unfound = search is not None and not search.seed_found
    seconds = _training_seconds((stats, *compared), o.throughput)
    written = None
    if o.export is not None:
        inputs = [resolved.manifest, *(x for x in (log, resolved.config_path) if x is not None)]
        if schedule is not None:
            export_schedule(schedule, Path(o.export), manifest.ids, protect=inputs)
        else:  # (epoch by epoch: a 100M-sample schedule is never held whole)
            with stage("writing the schedule") as tick:
                export_replayed(manifest, params, Path(o.export), manifest.ids, inputs, tick)
        written = display_path(o.export)
    if o.plots and not drawn and schedule is not None:  # (plots replay it whole)
        drawn = (micro_lengths(schedule, stats.padding_efficiency),)
    return BatchesReport(
        manifest=display_path(resolved.manifest),
        config=display_path(resolved.config_path) if resolved.config_path is not None else None,
        stats=stats,
        strategies=compared,
        plan=plan,
        verification=verification,
        training_seconds=seconds,
        throughput=o.throughput,
        export=written,
        search=search,
        seed=params.seed,
        warnings=tuple(schedule_warnings(manifest, params)),
        given_check=check if unfound else None,
        micro=drawn,
        bucket_edges=_derived_edges(manifest, params, names),
    )


def _derived_edges(manifest: Any, params: Any, names: list[str] | None) -> tuple[int, ...]:
    """The edges a ``bucketed`` schedule here used when none were given (six
    equal-count buckets of the capped lengths); empty otherwise."""
    if params.buckets or "bucketed" not in (params.strategy, *(names or ())):
        return ()
    from ..schedule.edges import default_edges

    cap = params.max_seq_len
    return default_edges(manifest.lengths if cap is None else manifest.lengths.clip(max=cap))


def _training_seconds(stats: Sequence[Any], rate: float | None) -> dict[str, float]:
    """Training time (s) by strategy at ``rate`` tokens/s and 100% padding efficiency
    (:func:`~dflash_diag.batches.buckets.training_time`); empty without a rate."""
    from ..batches.buckets import training_time

    if rate is None:
        return {}
    return {
        st.strategy: training_time(st.tokens_per_epoch, st.epochs, st.padding_efficiency, rate)
        for st in stats
    }


def _rows(manifest: Any, params: Any, progress: Any = None) -> Any:
    """The schedule's per-micro-batch sums (:func:`~dflash_diag.schedule.rows.
    replay_rows`): what :func:`~dflash_diag.batches.stats.schedule_stats` reads."""
    from ..schedule.rows import replay_rows

    return replay_rows(manifest, params, None, progress=progress)
