"""Check a replay against a run's log, and find the seed that makes them agree.

The evidence is the per-step real-token count a trainer logs (``tokens`` in a RunLog
table, e.g. ``ntok 16282``): a replayed step matches when its real (capped) tokens equal
the logged number.  With several ranks a log may show the whole step's tokens, rank 0's
share, or the mean over ranks; a log written every ``g`` steps may show the sum or the
mean over the ``g`` steps up to its line (``g`` = the most common gap between logged
steps).  Every basis that applies is compared and the one that matches best is reported
(the whole step wins ties).

A match rate near 1 over hundreds of steps is strong evidence that the replay is the
run's schedule: a wrong seed matches almost nowhere (sorted-greedy batches of equal
lengths are the exception: they can share token counts by chance, so read the rate with
``n_compared`` in mind).  Steps the replay does not cover are not compared: report
``n_compared`` beside ``n_log_steps``.

A seed search (:func:`search_seed`) always has a best candidate; whether that candidate
reproduces the log is a separate answer (:attr:`SeedSearch.seed_found`: its tokens match
at ``min_match`` or more of the compared steps), so a failed search is never read as a
result.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..data import Manifest, Progress, Replay, RunLog, ScheduleParams
from ..errors import InputError
from .base import Batches, get_strategy
from .replay import accelerate_shards, as_lengths, determined_epochs, micro_positions, step_starts
from .rng import EpochShufflers

if TYPE_CHECKING:
    import pandas as pd


#: token bases compared: whole step, rank 0's micro-batches, mean over ranks, and for a
#: log written every g > 1 steps the sum and the mean over the g steps up to each line;
#: then the same with padding counted (``_padded``: each micro-batch's samples times its
#: longest, as a collator that pads to the longest makes them; the HF Trainer's
#: ``include_num_input_tokens_seen=True`` counts these)
BASES: tuple[str, ...] = ("step", "rank0", "rank_mean", "interval_sum", "interval_mean")
PADDED = "_padded"


@dataclass(frozen=True)
class Verification:
    """How well a replay's per-step tokens agree with a log's.

    :param tokens_match: share of compared steps whose replayed real tokens equal the
        logged ``tokens`` (NaN when nothing could be compared).
    :param n_compared: logged steps (with a tokens value) that the replay covers.
    :param n_log_steps: logged steps with a tokens value.
    :param n_replayed_steps: steps in the replay.
    :param first_mismatch: the first compared step that differs (None: none differs).
    :param seed: the replay's seed.
    :param first_step: the replay's first step number.
    :param basis: what the logged tokens were matched as: ``step`` (all ranks' tokens),
        ``rank0`` (rank 0's micro-batches), ``rank_mean`` (step tokens / world_size),
        ``interval_sum`` / ``interval_mean`` (over the log's interval of g steps); with
        ``_padded`` after it, counting padding (:data:`BASES`).
    """

    tokens_match: float
    n_compared: int
    n_log_steps: int
    n_replayed_steps: int
    first_mismatch: int | None
    seed: int
    first_step: int
    basis: str = "step"

    @property
    def padded(self) -> bool:
        """The log's tokens were matched with padding counted."""
        return self.basis.endswith(PADDED)

    @property
    def score(self) -> tuple[float, int]:
        """Sort key: match rate, then how many steps it rests on."""
        rate = -1.0 if np.isnan(self.tokens_match) else self.tokens_match
        return (rate, self.n_compared)


@dataclass(frozen=True)
class SeedSearch:
    """What a seed search found: the best candidate, and whether it reproduces the log.

    :param best: the best candidate's comparison over every logged step the replay covers
        (its ``seed`` and ``first_step`` are the candidate's).
    :param first_seed: the first seed of the range searched.
    :param last_seed: the last seed of the range searched (included).
    :param tried: seeds replayed before the search stopped (it stops at a perfect match).
    :param min_match: the share of compared steps whose tokens must match for the best
        candidate to count as found.
    """

    best: Verification
    first_seed: int
    last_seed: int
    tried: int
    min_match: float

    @property
    def seed_found(self) -> bool:
        """Whether the best candidate reproduces the log (:meth:`reproduces`)."""
        return self.reproduces(self.best)

    def reproduces(self, v: Verification) -> bool:
        """Whether a comparison counts as reproducing the log: tokens match at
        ``min_match`` or more of the compared steps (False when none was compared)."""
        return v.n_compared > 0 and bool(v.tokens_match >= self.min_match)


def _logged(log_table: pd.DataFrame | RunLog) -> tuple[np.ndarray, np.ndarray]:
    """(step, tokens) of the log's rows that have both; a resumed step keeps its last row;
    with a ``rank`` column, rank 0's rows (or the lowest rank's)."""
    if isinstance(log_table, RunLog):
        log_table = log_table.table
    for col in ("step", "tokens"):
        if col not in log_table.columns:
            raise InputError(
                "", f"the log table has no {col!r} column", "the log must report tokens per step"
            )
    t = log_table
    if "rank" in t.columns and t["rank"].nunique() > 1:
        t = t[t["rank"] == t["rank"].min()]
    t = t[["step", "tokens"]].dropna()
    t = t.drop_duplicates("step", keep="last").sort_values("step")
    return t["step"].to_numpy(dtype=np.int64), t["tokens"].to_numpy(dtype=np.float64)


def _compare(
    rep_steps: np.ndarray,
    rep_tokens: dict[str, np.ndarray],
    log_steps: np.ndarray,
    log_tokens: np.ndarray,
    seed: int,
    first_step: int,
    tolerance: float,
) -> Verification:
    """Verification of replayed per-step tokens (by basis) against logged ones."""
    best: Verification | None = None
    # rep_steps is increasing; look each logged step up in it.
    where = np.searchsorted(rep_steps, log_steps)
    inside = where < len(rep_steps)
    inside[inside] = rep_steps[where[inside]] == log_steps[inside]
    idx = where[inside]
    for basis, tokens in rep_tokens.items():
        if not inside.any():
            v = Verification(
                float("nan"), 0, len(log_steps), len(rep_steps), None, seed, first_step, basis
            )
        else:
            want = log_tokens[inside]
            ok = np.abs(tokens[idx] - want) <= tolerance * np.abs(want) + 1e-9
            bad = np.flatnonzero(~ok)
            v = Verification(
                float(ok.mean()),
                int(ok.size),
                len(log_steps),
                len(rep_steps),
                int(log_steps[inside][bad[0]]) if bad.size else None,
                seed,
                first_step,
                basis,
            )
        if best is None or v.score > best.score:
            best = v
    if best is None:  # pragma: no cover - rep_tokens always has the "step" basis
        raise ValueError("no basis compared")
    return best


def log_interval(log_steps: np.ndarray) -> int:
    """Steps between the log's lines: the most common gap (1 for a line per step)."""
    if len(log_steps) < 3:
        return 1
    gaps, counts = np.unique(np.diff(log_steps), return_counts=True)
    return max(int(gaps[np.argmax(counts)]), 1)


def _bases(
    steps_total: np.ndarray,
    rank0: np.ndarray,
    world_size: int,
    interval: int = 1,
    padded: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Replayed per-step tokens on every basis a log may use (see :data:`BASES`); with
    ``padded`` (the steps' and rank 0's padded tokens), each basis with padding too,
    after those of the real tokens (a tie goes to the real ones)."""
    out = _real_bases(steps_total, rank0, world_size, interval)
    if padded is not None:
        more = _real_bases(padded[0], padded[1], world_size, interval)
        out.update({name + PADDED: tokens for name, tokens in more.items()})
    return out


def _real_bases(
    steps_total: np.ndarray, rank0: np.ndarray, world_size: int, interval: int
) -> dict[str, np.ndarray]:
    total = steps_total.astype(np.float64)
    out = {"step": total}
    if world_size > 1:
        out["rank0"] = rank0.astype(np.float64)
        out["rank_mean"] = total / world_size
    if interval > 1:
        # tokens of the `interval` steps ending at each step (NaN before a full window)
        csum = np.concatenate([[0.0], np.cumsum(total)])
        window = np.full(len(total), np.nan)
        window[interval - 1 :] = csum[interval:] - csum[:-interval]
        out["interval_sum"] = window
        out["interval_mean"] = window / interval
    return out


def verify_tokens(
    replay: Replay, log_table: pd.DataFrame | RunLog, tolerance: float = 0.0
) -> Verification:
    """Compare a replay's per-step real tokens with a log's ``tokens`` column.

    :param replay: the replayed schedule.
    :param log_table: a RunLog or its table (``step`` and ``tokens`` columns; NaN tokens
        and steps the replay does not cover are not compared).
    :param tolerance: relative tolerance (0: exact, for logs that print integers).

    >>> import pandas as pd
    >>> from dflash_diag.schedule import replay
    >>> r = replay(np.array([3, 1, 2, 2]), ScheduleParams(token_budget=4))
    >>> log = pd.DataFrame({"step": [0, 1, 2], "tokens": [3.0, 3.0, 9.0]})
    >>> v = verify_tokens(r, log); (round(v.tokens_match, 3), v.n_compared, v.first_mismatch)
    (0.667, 3, 2)
    """
    log_steps, log_tokens = _logged(log_table)
    steps = replay.steps
    micro = replay.micro
    first = micro[micro["rank"] == 0].groupby("step", sort=True)
    rank0 = first["tokens"].sum().reindex(steps["step"]).to_numpy()
    padded = None
    if "padded_tokens" in steps.columns and "padded_tokens" in micro.columns:
        rank0_padded = first["padded_tokens"].sum().reindex(steps["step"]).to_numpy()
        padded = (steps["padded_tokens"].to_numpy(), rank0_padded)
    world, interval = replay.params.world_size, log_interval(log_steps)
    bases = _bases(steps["tokens"].to_numpy(), rank0, world, interval, padded)
    return _compare(
        steps["step"].to_numpy(dtype=np.int64),
        bases,
        log_steps,
        log_tokens,
        replay.params.seed,
        replay.params.first_step,
        tolerance,
    )


def verify_replayed(
    source: Manifest | np.ndarray | Sequence[int],
    params: ScheduleParams,
    log_table: pd.DataFrame | RunLog,
) -> Verification:
    """:func:`verify_tokens` of ``replay(source, params)``, the same Verification, from
    the per-step tokens alone (:func:`step_token_table`): no Replay is made, so a
    100M-sample schedule is checked in the memory of its pool and one token count a
    micro-batch."""
    log_steps, log_tokens = _logged(log_table)
    total, rank0, padded = _step_tokens(source, params, None, None, padded=True)
    steps = np.arange(len(total), dtype=np.int64) + params.first_step
    bases = _bases(total, rank0, params.world_size, log_interval(log_steps), padded)
    return _compare(steps, bases, log_steps, log_tokens, params.seed, params.first_step, 0.0)


def _pool_tokens(pool: Batches, lengths: np.ndarray) -> np.ndarray:
    if not len(pool):
        return np.zeros(0, dtype=np.int64)
    return np.add.reduceat(lengths[pool.ids], pool.offsets[:-1])


def _pool_padded(pool: Batches, lengths: np.ndarray) -> np.ndarray:
    """Per batch of ``pool``, its samples times its longest."""
    if not len(pool):
        return np.zeros(0, dtype=np.int64)
    longest = np.maximum.reduceat(lengths[pool.ids], pool.offsets[:-1]).astype(np.int64)
    return longest * np.diff(pool.offsets)


def step_token_table(
    source: Manifest | np.ndarray | Sequence[int],
    params: ScheduleParams,
    max_steps: int | None = None,
    prepared: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-step real tokens of a schedule, fast: ``(step_total, rank0)`` for the first
    ``max_steps`` steps (all of ``params.epochs`` when None), steps numbered from 0.

    The same numbers as ``replay(...).steps.tokens`` without building the tables; what
    :func:`search_seed` runs for every candidate seed.
    """
    total, rank0, _ = _step_tokens(source, params, max_steps, prepared, padded=False)
    return total, rank0


def _step_tokens(
    source: Manifest | np.ndarray | Sequence[int],
    params: ScheduleParams,
    max_steps: int | None,
    prepared: Any,
    padded: bool,
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
    """:func:`step_token_table`, and with ``padded`` the same two with padding counted
    (``replay(...).steps.padded_tokens``: a micro-batch's samples times its longest)."""
    raw = as_lengths(source)
    lengths = raw if params.max_seq_len is None else np.minimum(raw, params.max_seq_len)
    strategy = get_strategy(params.strategy)
    if prepared is None:
        prepared = strategy.prepare(lengths, params)
    shufflers = EpochShufflers(params.rng, params.seed, params.seeding)
    n_epochs = min(params.epochs, determined_epochs(params) or params.epochs)
    sums: list[list[np.ndarray]] = [[], [], [], []]  # total, rank 0's; padded: the same
    got = 0
    cache: tuple[Batches | None, list[np.ndarray]] = (None, [])
    for e in range(n_epochs):
        if max_steps is not None and got >= max_steps:
            break
        plan = accelerate_shards(strategy.epoch(prepared, e, shufflers.for_epoch(e)), params)
        if cache[0] is not plan.pool:
            counts = [_pool_tokens(plan.pool, lengths)]
            counts += [_pool_padded(plan.pool, lengths)] if padded else []
            cache = (plan.pool, counts)
        pos, step, rank, _ = micro_positions(len(plan.order), params)
        starts = step_starts(step)
        if not len(starts):
            continue
        for k, per_batch in enumerate(cache[1]):
            tokens = per_batch[plan.order[pos]]
            sums[2 * k].append(np.add.reduceat(tokens, starts))
            sums[2 * k + 1].append(np.add.reduceat(np.where(rank == 0, tokens, 0), starts))
        got += len(starts)
    out = [
        (np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))[:max_steps]
        for parts in sums
    ]
    return out[0], out[1], (out[2], out[3]) if padded else None


def _counts_padding(
    lengths: np.ndarray,
    params: ScheduleParams,
    steps: int,
    prepared: Any,
    logged: np.ndarray,
    interval: int,
) -> bool:
    """Whether the logged tokens are, by their scale, padded counts: nearer (as a
    ratio of medians, on the nearest basis) to the schedule's padded tokens a step than to
    its real ones.  The seed moves which samples meet, not how many tokens a step holds,
    so the schedule as given says it; then the search compares the padded counts too."""
    total, rank0, pads = _step_tokens(lengths, params, steps, prepared, padded=True)
    ok = logged[np.isfinite(logged) & (logged > 0)]
    if pads is None or not ok.size or np.array_equal(pads[0], total):  # (one count)
        return False
    level = float(np.median(ok))

    def nearest(bases: dict[str, np.ndarray]) -> float:
        out = math.inf
        for values in bases.values():
            v = values[np.isfinite(values) & (values > 0)]
            if v.size:
                out = min(out, abs(math.log(level / float(np.median(v)))))
        return out

    real = nearest(_real_bases(total, rank0, params.world_size, interval))
    return nearest(_real_bases(pads[0], pads[1], params.world_size, interval)) < real


def search_seed(
    source: Manifest | np.ndarray | Sequence[int],
    params: ScheduleParams,
    log_table: pd.DataFrame | RunLog,
    seeds: Iterable[int] = range(0, 1000),
    first_steps: Sequence[int] = (0, 1),
    progress: Progress | None = None,
    compare_steps: int = 200,
    *,
    min_match: float,
) -> SeedSearch:
    """The seed and first-step number whose replay best matches the log's tokens, and
    whether that best one reproduces the log at all.

    Each candidate seed replays only up to the last of the log's first ``compare_steps``
    logged steps; each first-step offset reuses that replay (it only renumbers steps).
    The search stops at the first perfect match.  The winner is then verified over all
    of the log's steps within ``params.epochs``; that full comparison is
    :attr:`SeedSearch.best`, and the seed counts as found when its tokens match at
    ``min_match`` or more of the compared steps (``spikes`` accepts a schedule at
    :data:`dflash_diag.composition.ground.MIN_TOKENS_MATCH`; ``batches`` passes that).

    :param source: manifest or lengths.
    :param params: the schedule (its ``seed`` and ``first_step`` are the searched ones).
    :param log_table: a RunLog table with ``step`` and ``tokens``.
    :param seeds: candidate seeds, e.g. ``range(0, 10000)``.
    :param first_steps: candidate numbers of the first step.
    :param progress: ``progress(done, total)`` over the seeds.
    :param compare_steps: logged steps compared per candidate.
    :param min_match: share of compared steps (0..1) that must match for ``seed_found``.

    >>> import pandas as pd
    >>> from dflash_diag.schedule import replay
    >>> lens = np.random.default_rng(0).integers(1, 500, 2000)
    >>> truth = replay(lens, ScheduleParams(token_budget=1000, seed=42, first_step=1))
    >>> log = pd.DataFrame({"step": truth.steps.step, "tokens": truth.steps.tokens})
    >>> found = search_seed(lens, ScheduleParams(token_budget=1000), log, seeds=range(100),
    ...                     min_match=0.9)
    >>> (found.seed_found, found.best.seed, found.best.first_step, found.best.tokens_match)
    (True, 42, 1, 1.0)
    >>> search_seed(lens, ScheduleParams(token_budget=1000), log, seeds=range(10),
    ...             min_match=0.9).seed_found
    False
    """
    log_steps, log_tokens = _logged(log_table)
    if not len(log_steps):
        raise InputError("", "the log has no steps with a tokens value", "log tokens per step")
    seeds = list(seeds)
    if not seeds:
        raise InputError("--search-seed", "no seeds to try", "give a range like 0..1000")
    interval = log_interval(log_steps)
    head_steps, head_tokens = log_steps[:compare_steps], log_tokens[:compare_steps]
    need = int(head_steps.max()) - min(first_steps) + 1
    raw = as_lengths(source)
    lengths = raw if params.max_seq_len is None else np.minimum(raw, params.max_seq_len)
    strategy = get_strategy(params.strategy)
    seed_free = not getattr(strategy, "prepare_uses_seed", False)
    prepared = strategy.prepare(lengths, params) if seed_free else None

    padded = _counts_padding(lengths, params, max(need, 1), prepared, head_tokens, interval)
    best: Verification | None = None
    tried = 0
    for tried, seed in enumerate(seeds, start=1):
        p = params.replace(seed=seed)
        total, rank0, pads = _step_tokens(lengths, p, max(need, 1), prepared, padded)
        bases = _bases(total, rank0, p.world_size, interval, pads)
        for fs in first_steps:
            rep_steps = np.arange(len(total), dtype=np.int64) + fs
            v = _compare(rep_steps, bases, head_steps, head_tokens, seed, fs, 0.0)
            if best is None or v.score > best.score:
                best = v
        if progress is not None:
            progress(tried, len(seeds))
        if best is not None and best.tokens_match == 1.0:
            break
    if best is None:  # pragma: no cover - seeds is not empty, so the loop ran
        raise ValueError("no seed compared")
    p = params.replace(seed=best.seed, first_step=best.first_step)
    total, rank0, pads = _step_tokens(lengths, p, None, prepared, padded)
    rep_steps = np.arange(len(total), dtype=np.int64) + best.first_step
    bases = _bases(total, rank0, p.world_size, interval, pads)
    full = _compare(rep_steps, bases, log_steps, log_tokens, best.seed, best.first_step, 0.0)
    return SeedSearch(full, min(seeds), max(seeds), tried, min_match)
