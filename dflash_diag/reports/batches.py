"""``dflash-diag batches``: a schedule replayed (or recorded) and measured, compared,
its buckets optimised."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from dataclasses import replace as with_
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from ..batches.buckets import BucketPlan
    from ..batches.stats import ScheduleStats, ScheduleWarning
    from ..data import Replay
    from ..schedule.verify import SeedSearch

from .common import Stage, display_path, quiet
from .spikes import recorded_replay


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
        (:func:`~dflash_diag.batches.buckets.default_edges`); empty otherwise.
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
    from ..errors import InputError
    from ..schedule.config import resolve_schedule

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
    resolved = resolve_schedule(schedule or {}, config, near=(log, manifest), manifest=manifest)
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
        from ..schedule.export import check_export_path

        check_export_path(Path(export), protect=inputs)
    report = _batches(
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
    return with_(report, seed_origin=resolved.origin("seed"), provenance=resolved.notes)


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

    from ..batches.buckets import optimize_buckets
    from ..batches.stats import schedule_stats
    from ..logs import read_log
    from ..record import read_recording
    from ..schedule import verify_tokens
    from ..schedule.export import export_schedule

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

    from ..errors import InputError
    from ..schedule.config import resolve_schedule

    if searching:
        raise InputError(
            "--search-seed",
            "a recorded composition is not replayed, so it has no seed to search",
            "drop --search-seed (--log checks the recording against the log)",
        )
    resolved = resolve_schedule(flags, config, near=(None, manifest or path), manifest=manifest)
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
    from ..batches.buckets import optimize_buckets
    from ..batches.stats import schedule_stats, schedule_warnings
    from ..manifest import read_manifest
    from ..schedule import replay, verify_tokens
    from ..schedule.export import export_schedule

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
        from ..batches.buckets import default_edges

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
