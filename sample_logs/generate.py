"""Generate the sample case in sample_logs/: a manifest, three training logs, two configs.

Run ``python sample_logs/generate.py`` to rewrite every file identically (numpy
``default_rng`` and ``random.Random`` with fixed seeds; nothing depends on the clock), or
``--out DIR`` to write them elsewhere.  It writes nothing outside its output folder.

What it models, and why
=======================

The story (README.md): a DFlash drafter trained on 8 GPUs whose loss spikes to 4-6 over a
~0.93 baseline at steps 254 and 258, because the data loader sorted every sample by length,
packed batches greedily under a token budget and shuffled only the ORDER of those fixed
batches each epoch.  The files below are made so that dflash-diag, analysing them, finds
that story for the right reasons, and nothing it could not find in a real run.

- ``manifest.parquet``: 100,000 samples from three sources, log-normal lengths per source
  (chat short, code longest, math between; median ~1.4k tokens, a thin tail past 8,192
  that the schedule truncates).
- The schedule is replayed with dflash-diag's own engine
  (:func:`dflash_diag.schedule.replay`), so every logged ``ntok`` is exactly what
  ``dflash-diag`` replays from ``dflash-diag.toml``.  The shuffle seed is found by a
  deterministic search (:func:`find_seed`): the first seed in ``SEED_SEARCH`` whose epoch-0
  order puts batches of the longest samples on rank 0 at steps 254 and 258, an ordinary
  batch at step 349, and brings both of those batches back on rank 0 in a later epoch.
- Loss, per micro-batch: ``f(t) + h(t) * x_b + drift + noise`` where ``x_b`` is the
  token-weighted mean over the batch's samples of a per-token difficulty
  ``e(L, source) = B_LOG * ln(L / 1500) + A[source] * (L / 8192) ** P`` (centred on the
  dataset's token-weighted mean): short prompts are easy, and the longest samples, code
  above all, are much harder.  ``f`` is the loss of an average batch (0.93 at step 254,
  0.87 at 349), ``h`` shrinks from 1 towards 0.35 as the model learns, so a hard batch
  that comes back in a later epoch spikes less.  The trainer logs rank 0's loss and
  accuracy (``print_on_rank0`` without an all-reduce), so a logged point is rank 0's
  micro-batch; ``ntok`` is all-reduced (the step's real tokens over all 8 ranks).
- acc: ``A(t) * exp(-K_ACC * h(t) * x_b)``: ~0.046 at step 349 in warmup, near 0 until
  the warmup ends at step 2380, rising after it.
- lr: linear warmup to 6e-4 over 2380 steps (8.80e-05 at step 349), cosine decay to 10%.
- grad_norm: ``sqrt(G(t)^2 + S / B)`` (B the step's tokens, McCandlish et al.'s model),
  raised by the step's pooled difficulty over all ranks (gradients are all-reduced).
- One optimizer event on an ordinary batch (``optimizer_event_step``): the loss jumps and
  decays over ~20 steps with a grad_norm surge, lr unchanged: the thing the tool must NOT
  call composition.
- Nuisances in run.log: a banner, a config dump, warnings (some ``[rank3]:``-prefixed), a
  crash with a short traceback, and a resume from the last checkpoint whose repeated steps
  have the replay's ntok (the loader restarts the epoch's order at the checkpoint's
  position) and fresh noise.
- v1.log: the prior run, same recipe and warmup, another seed, stopped at step 2500.
- run_bucketed.log: the same run after the fix (``bucketed.toml``: the story's six
  buckets), same loss model: the long batches are mixed, so no composition spikes.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

# --- the dataset --------------------------------------------------------------------
N_SAMPLES = 100_000
MANIFEST_SEED = 20260302
SOURCES = ("chat", "code", "math")
SOURCE_SHARE = (0.5, 0.3, 0.2)
SOURCE_MEDIAN = (1000.0, 2300.0, 1500.0)  # tokens
SOURCE_SIGMA = (0.65, 0.5, 0.5)  # of ln(length)
MIN_LEN = 24

# --- the schedule (dflash-diag.toml) -------------------------------------------------
TOKEN_BUDGET = 65536  # padded tokens per micro-batch
MAX_SEQ_LEN = 8192
WORLD_SIZE = 8
FIRST_STEP = 1
EPOCHS = 9
SEED_SEARCH = range(0, 200_000)
SPIKE_STEPS = (254, 258)
STORY_STEP = 349
#: "batches of the longest samples": rank 0's micro-batch mean length at or above this
#: quantile of all micro-batches' mean lengths.
LONGEST_QUANTILE = 0.99
V1_SEED = 7
V1_LAST_STEP = 2500

# --- the training curves -------------------------------------------------------------
PEAK_LR = 6e-4
WARMUP_STEPS = 2380
FINAL_LR_FRACTION = 0.1
B_LOG = 0.12  # per-token loss per e-fold of length
A_LONG = {"chat": 2.4, "code": 4.6, "math": 3.4}  # extra per-token loss at 8192 tokens
P_LONG = 5.0
K_ACC = 0.18
NOISE_REL = 0.025  # relative sd of per-step loss noise
THROUGHPUT_PADDED = 25_600.0  # padded tokens/s per GPU
OPT_EVENT_FROM = 1950  # the optimizer event is the first suitable step from here
OPT_EVENT_JUMP = 1.6  # loss added at the event, decaying with OPT_EVENT_TAU
OPT_EVENT_TAU = 6.0
CRASH_CHECKPOINT = 1500  # resume point; checkpoints every 250 steps
CRASH_AFTER = 137  # steps logged after the checkpoint before the crash


def make_manifest(seed: int = MANIFEST_SEED) -> dict[str, np.ndarray]:
    """``sample_id``, ``length`` (tokens, untruncated) and ``source`` code per sample.

    Per source a log-normal length with the median and sigma above, at least MIN_LEN.
    """
    rng = np.random.default_rng(seed)
    source = rng.choice(len(SOURCES), size=N_SAMPLES, p=SOURCE_SHARE)
    med = np.log(np.asarray(SOURCE_MEDIAN))[source]
    sig = np.asarray(SOURCE_SIGMA)[source]
    length = np.exp(med + sig * rng.standard_normal(N_SAMPLES))
    length = np.maximum(np.rint(length), MIN_LEN).astype(np.int64)
    return {"sample_id": np.arange(N_SAMPLES, dtype=np.int64), "length": length, "source": source}


def write_manifest(path: Path, man: dict[str, np.ndarray]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = np.asarray(SOURCES)[man["source"]]
    table = pa.table(
        {
            "sample_id": pa.array(man["sample_id"], pa.int64()),
            "length": pa.array(man["length"], pa.int32()),
            "source": pa.array(names.tolist(), pa.string()).dictionary_encode(),
        }
    )
    pq.write_table(table, path, compression="zstd", use_dictionary=True)


def sample_difficulty(length: np.ndarray, source: np.ndarray) -> np.ndarray:
    """Per-token extra loss of each sample (before centring), from its capped length.

    ``e = B_LOG * ln(L / 1500) + A[source] * (L / 8192) ** P_LONG``.
    """
    a = np.array([A_LONG[s] for s in SOURCES])[source]
    x = length.astype(np.float64)
    return B_LOG * np.log(x / 1500.0) + a * (x / MAX_SEQ_LEN) ** P_LONG




# --- the schedule --------------------------------------------------------------------


def schedule_params(strategy: str = "sorted-greedy", seed: int = 0, epochs: int = EPOCHS):
    """The ScheduleParams of the sample runs (``bucketed`` uses the story's buckets)."""
    from dflash_diag.records import DEFAULT_BUCKETS, ScheduleParams

    return ScheduleParams(
        strategy=strategy,
        seed=seed,
        token_budget=TOKEN_BUDGET,
        budget_mode="padded",
        max_seq_len=MAX_SEQ_LEN,
        buckets=DEFAULT_BUCKETS,
        rng="python",
        seeding="once",
        world_size=WORLD_SIZE,
        grad_accum=1,
        first_step=FIRST_STEP,
        epochs=epochs,
    )


def token_weighted(values: np.ndarray, lengths: np.ndarray, ids: np.ndarray, offsets: np.ndarray):
    """Per batch ``sum(L_i * v_i) / sum(L_i)`` over the samples ``ids[offsets[k]:offsets[k+1]]``."""
    starts = offsets[:-1]
    num = np.add.reduceat(lengths[ids] * values[ids], starts)
    den = np.add.reduceat(lengths[ids].astype(np.float64), starts)
    return num / den


def rank0_position(step: int) -> int:
    """Position in the epoch's micro-batch order of rank 0's micro-batch at ``step`` of
    epoch 0 (``--shard strided``, one micro-batch per rank per step)."""
    return (step - FIRST_STEP) * WORLD_SIZE


@dataclass(frozen=True)
class SeedChoice:
    """The shuffle seed of run.log and why it qualifies."""

    seed: int
    tried: int


def _seed_qualifies(
    orders: list[np.ndarray], pool_x: np.ndarray, longest: np.ndarray, long2: np.ndarray
) -> bool:
    """The conditions of :func:`find_seed` on the epoch orders of one seed (epoch 0 first;
    later epochs only when given)."""
    o0 = orders[0]
    spike_batches = [int(o0[rank0_position(s)]) for s in SPIKE_STEPS]
    for s, b in zip(SPIKE_STEPS, spike_batches, strict=True):
        if not longest[b]:
            return False
        peak = float(base_loss(s) + learned(s) * pool_x[b])
        if not 4.2 <= peak <= 5.8:
            return False
    # nothing else of the longest 2% on rank 0 from step 200 to 349: the story's window
    # shows these two spikes over a clean baseline
    for s in range(200, STORY_STEP + 1):
        if s not in SPIKE_STEPS and long2[o0[rank0_position(s)]]:
            return False
    lo, hi = np.quantile(pool_x, [0.3, 0.7])
    if not lo <= pool_x[o0[rank0_position(STORY_STEP)]] <= hi:
        return False
    if len(orders) == 1:
        return True
    # both spike batches come back on rank 0 in a later epoch
    for b in spike_batches:
        if not any(b in set(o[0 : len(o) - len(o) % WORLD_SIZE : WORLD_SIZE].tolist())
                   for o in orders[1:]):
            return False
    return True


def find_seed(lengths: np.ndarray, pool_x_of, search: range = SEED_SEARCH) -> SeedChoice:
    """The first seed in ``search`` that tells the story: under it, rank 0's micro-batch
    at steps 254 and 258 of epoch 0 is one of the longest 1% (mean length) with a
    noise-free loss of 4.2-5.8, no other batch of the longest 2% falls on rank 0 from step
    200 to 349, step 349's batch is ordinary (difficulty between the 30th and 70th
    percentile), and both spike batches come back on rank 0 in a later epoch.

    Uses the replay engine's own strategy and shuffles, so the orders are the replay's.
    """
    from dflash_diag.schedule.base import get_strategy
    from dflash_diag.schedule.rng import EpochShufflers

    params = schedule_params(seed=search.start)
    capped = np.minimum(lengths, MAX_SEQ_LEN)
    strategy = get_strategy(params.strategy)
    prepared = strategy.prepare(capped, params)
    pool = strategy.epoch(prepared, 0, EpochShufflers("python", 0, "once").for_epoch(0)).pool
    pool_x = pool_x_of(pool.ids, pool.offsets)
    mean_len = np.add.reduceat(capped[pool.ids], pool.offsets[:-1]) / pool.sizes()
    longest = mean_len >= np.quantile(mean_len, LONGEST_QUANTILE)
    long2 = mean_len >= np.quantile(mean_len, 0.98)
    for tried, seed in enumerate(search, 1):
        shufflers = EpochShufflers("python", seed, "once")
        orders = [strategy.epoch(prepared, 0, shufflers.for_epoch(0)).order]
        if not _seed_qualifies(orders, pool_x, longest, long2):
            continue
        for e in range(1, EPOCHS):
            orders.append(strategy.epoch(prepared, e, shufflers.for_epoch(e)).order)
        if _seed_qualifies(orders, pool_x, longest, long2):
            return SeedChoice(seed, tried)
    raise RuntimeError(f"no seed in {search} tells the story; widen SEED_SEARCH")


# --- the training curves -------------------------------------------------------------


def lr_at(step: np.ndarray, total: int) -> np.ndarray:
    """Linear warmup to PEAK_LR over WARMUP_STEPS (``PEAK * step / WARMUP``, 8.80e-05 at
    step 349), then cosine decay to ``FINAL_LR_FRACTION * PEAK`` at the planned last step."""
    s = np.asarray(step, dtype=np.float64)
    frac = np.clip((s - WARMUP_STEPS) / max(total - WARMUP_STEPS, 1), 0.0, 1.0)
    cos = FINAL_LR_FRACTION + (1 - FINAL_LR_FRACTION) * 0.5 * (1 + np.cos(np.pi * frac))
    return np.where(s <= WARMUP_STEPS, PEAK_LR * s / WARMUP_STEPS, PEAK_LR * cos)


def base_loss(t: np.ndarray | int) -> np.ndarray:
    """Loss of an ordinary batch (difficulty at the median batch) at step t: a fast initial
    drop, a slow decay (0.93 at step 254, 0.87 at 349) and a further drop once the warmup
    ends and the drafter starts to work."""
    t = np.asarray(t, dtype=np.float64)
    after = np.clip(t - WARMUP_STEPS, 0, None)
    slow = 0.45 + 2.4 * np.exp(-t / 45.0) + 0.683 * np.exp(-t / 705.0)
    return slow - 0.12 * (1 - np.exp(-after / 300.0))


def learned(t: np.ndarray | int) -> np.ndarray:
    """Share of a batch's extra difficulty left at step t (1 at the start, -> 0.35): the
    model learns the hard data too, so a hard batch that comes back spikes less."""
    return 0.35 + 0.65 * np.exp(-np.asarray(t, dtype=np.float64) / 1200.0)


def base_acc(t: np.ndarray) -> np.ndarray:
    """Accuracy of an ordinary batch: a slow creep during warmup (0.046 at step 349, ~0.08
    at its end), then a ramp once the learning rate is up."""
    t = np.asarray(t, dtype=np.float64)
    after = np.clip(t - WARMUP_STEPS, 0, None)
    return 0.01 + 0.036 * (t / STORY_STEP) ** 0.35 + 0.30 * (1 - np.exp(-after / 220.0))


@dataclass(frozen=True)
class Curves:
    """Per-step values of one pass over some steps."""

    loss: np.ndarray
    acc: np.ndarray
    grad_norm: np.ndarray
    tok_per_s: np.ndarray
    seconds: np.ndarray


def drift(n: int, rng: np.random.Generator) -> np.ndarray:
    """Slow wander of the loss (AR(1), phi 0.97, sd 0.012): what a real curve has besides
    per-step noise, so a detrending step has something to remove."""
    eps = rng.normal(0.0, 0.012 * math.sqrt(1 - 0.97**2), n)
    out = np.empty(n)
    acc = 0.0
    for i, e in enumerate(eps):
        acc = 0.97 * acc + e
        out[i] = acc
    return out


def curves(
    t: np.ndarray,
    x0: np.ndarray,
    xpool: np.ndarray,
    tokens: np.ndarray,
    padded: np.ndarray,
    wander: np.ndarray,
    event_step: int | None,
    rng: np.random.Generator,
) -> Curves:
    """loss/acc of rank 0's micro-batch (difficulty ``x0``), grad_norm of the step (pooled
    difficulty ``xpool`` over all ranks, ``tokens`` in the step), throughput and wall time.

    - loss = (base_loss(t) + learned(t) * x0 + wander + event) * (1 + NOISE_REL * N(0,1))
    - acc = base_acc(t) * exp(-K_ACC * learned(t) * x0) * (1 + 0.06 N) + 0.002 N, in [0, 1]
    - grad_norm = sqrt(G(t)^2 + S / (tokens / 1e5)) * (1 + 0.12 learned(t) xpool) * LN(0, 0.08)
      with G(t) = 0.35 + 4 exp(-t / 120) and S = 1.2 (gradient noise, McCandlish et al.)
    - the optimizer event at ``event_step`` adds OPT_EVENT_JUMP * exp(-(t - E) / TAU) to the
      loss, takes up to half the accuracy away on the same decay and multiplies grad_norm
      by 1 + 9 exp(-(t - E) / 4).
    """
    n = len(t)
    hard = learned(t)
    event = np.zeros(n)
    surge = np.ones(n)
    if event_step is not None:
        after = t - event_step
        on = after >= 0
        event[on] = OPT_EVENT_JUMP * np.exp(-after[on] / OPT_EVENT_TAU)
        surge[on] = 1 + 9 * np.exp(-after[on] / 4.0)
    loss = (base_loss(t) + hard * x0 + wander + event) * (1 + NOISE_REL * rng.standard_normal(n))
    acc = base_acc(t) * np.exp(-K_ACC * hard * x0) * (1 - 0.5 * event / OPT_EVENT_JUMP)
    acc = np.clip(acc * (1 + 0.06 * rng.standard_normal(n)) + 0.002 * rng.standard_normal(n), 0, 1)
    g = 0.35 + 4.0 * np.exp(-t / 120.0)
    gn = np.sqrt(g**2 + 1.2 / (tokens / 1e5)) * (1 + 0.12 * hard * xpool) * surge
    gn = gn * np.exp(0.08 * rng.standard_normal(n))
    speed = THROUGHPUT_PADDED * (1 + 0.01 * rng.standard_normal(n))
    tok_per_s = speed * tokens / padded
    seconds = padded / (WORLD_SIZE * speed) + 0.04
    return Curves(np.maximum(loss, 0.01), acc, gn, tok_per_s, seconds)


# --- one run -------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSpec:
    """One log to write.

    :param name: file name in the output folder.
    :param strategy: the schedule's strategy.
    :param seed: the schedule's shuffle seed.
    :param noise_seed: seed of the run's noise.
    :param last_step: last step logged (None: the planned end).
    :param crash: crash after ``CRASH_CHECKPOINT + CRASH_AFTER`` and resume.
    :param event: put the optimizer event in.
    :param start: wall-clock start, ``YYYY-MM-DD HH:MM:SS``.
    """

    name: str
    strategy: str
    seed: int
    noise_seed: int
    last_step: int | None = None
    crash: bool = False
    event: bool = False
    start: str = "2026-03-02 12:46:51"


@dataclass(frozen=True)
class StepTable:
    """Per optimizer step of a replay: what the curves need."""

    step: np.ndarray
    epoch: np.ndarray
    tokens: np.ndarray
    padded: np.ndarray
    x0: np.ndarray  # rank 0's micro-batch difficulty
    xpool: np.ndarray  # token-weighted over all ranks
    long0: np.ndarray  # rank 0's micro-batch is among the longest 2% (mean length)


def step_table(rep, difficulty: np.ndarray, center: float) -> StepTable:
    """Per-step inputs of the curves from a Replay (rows of ``micro`` are in step, rank
    order with one micro-batch per rank)."""
    x = token_weighted(difficulty, rep.lengths, rep.sample_ids, rep.offsets) - center
    micro = rep.micro
    per_step = WORLD_SIZE
    tok = micro["tokens"].to_numpy().reshape(-1, per_step)
    xs = x.reshape(-1, per_step)
    mean_len = micro["mean_len"].to_numpy()
    long_flag = (mean_len >= np.quantile(mean_len, 0.98)).reshape(-1, per_step)
    steps = rep.steps
    return StepTable(
        step=steps["step"].to_numpy(),
        epoch=steps["epoch"].to_numpy(),
        tokens=steps["tokens"].to_numpy(),
        padded=steps["padded_tokens"].to_numpy(),
        x0=xs[:, 0],
        xpool=(tok * xs).sum(axis=1) / tok.sum(axis=1),
        long0=long_flag[:, 0],
    )


def choose_event_step(tab: StepTable, crash_range: tuple[int, int] | None) -> int:
    """The optimizer event's step: the first from OPT_EVENT_FROM whose rank-0 batch is
    ordinary (difficulty between the 20th and 80th percentile), with no batch of the
    longest 2% on rank 0 within 30 steps, away from the crash and resume."""
    lo, hi = np.quantile(tab.x0, [0.2, 0.8])
    for i in np.flatnonzero(tab.step >= OPT_EVENT_FROM):
        s = int(tab.step[i])
        if crash_range and crash_range[0] - 40 <= s <= crash_range[1] + 40:
            continue
        near = slice(max(i - 30, 0), i + 31)
        if lo <= tab.x0[i] <= hi and not tab.long0[near].any():
            return s
    raise RuntimeError("no ordinary step for the optimizer event")
