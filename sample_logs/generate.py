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
  mean over the batch's sequences of a per-sequence difficulty
  ``e(L, source) = B_LOG * ln(L / 1500) + A[source] / (1 + exp(-(L - 7700) / 150))``,
  centred on the median sorted-greedy batch: short prompts are easy, and the longest
  samples, coding tasks above all, are much harder.  Sequences weigh the same because
  DFlash's loss is over anchor blocks sampled per sequence, not over every token.  ``f``
  is the loss of an ordinary batch (0.93 at step 254, 0.87 at 349) and ``h`` shrinks from
  1 towards 0.35 as the model learns, so a hard batch that comes back later spikes less.
  The trainer logs rank 0's loss and accuracy (``print_on_rank0``, no all-reduce), so a
  logged point is rank 0's micro-batch, while ``ntok`` is the step's real tokens summed
  over all 8 ranks.  A spike of 4-6 needs a batch made of the longest samples alone,
  which only sorted-greedy packing builds.
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
  buckets), same loss model.  No batch is made of the longest samples alone and none comes
  back, so the 4-6 spikes are gone; a batch that holds one or two of the ~130 hardest
  samples among shorter ones still reads 1.2-2x its baseline: the fix dilutes them, it
  cannot remove them (README.md has the figures).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Callable
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
SOURCE_SIGMA = (0.6, 0.45, 0.5)  # of ln(length)
MIN_LEN = 24

# --- the schedule (dflash-diag.toml) -------------------------------------------------
TOKEN_BUDGET = 65536  # padded tokens per micro-batch
MAX_SEQ_LEN = 8192
WORLD_SIZE = 8
FIRST_STEP = 1
EPOCHS = 9
SEED_SEARCH = range(0, 1_000_000)
SPIKE_STEPS = (254, 258)
STORY_STEP = 349
#: "batches of the longest samples": rank 0's micro-batch mean length at or above this
#: quantile of all micro-batches' mean lengths.
LONGEST_QUANTILE = 0.98
V1_SEED = 7
V1_LAST_STEP = 2500

# --- the loss model and the run ----------------------------------------------------
PEAK_LR = 6e-4
WARMUP_STEPS = 2380
FINAL_LR_FRACTION = 0.1
B_LOG = 0.12  # loss per e-fold of length
A_LONG = {"chat": 1.0, "code": 5.6, "math": 1.5}  # extra loss of the longest samples
L_HARD = 7700.0  # tokens: where that extra loss is half on
W_HARD = 150.0  # tokens: how sharply it comes on
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
    """Extra loss of each sample (before centring), from its capped length L.

    ``e = B_LOG * ln(L / 1500) + A[source] / (1 + exp(-(L - L_HARD) / W_HARD))``: a mild
    rise with length for everything (short prompts are easy), and a steep one for the
    longest samples, coding tasks above all (a logistic step around L_HARD tokens).
    """
    a = np.array([A_LONG[s] for s in SOURCES])[source]
    x = length.astype(np.float64)
    return B_LOG * np.log(x / 1500.0) + a / (1 + np.exp(-(x - L_HARD) / W_HARD))


# --- the schedule --------------------------------------------------------------------


def schedule_params(strategy: str = "sorted-greedy", seed: int = 0, epochs: int = EPOCHS):
    """The ScheduleParams of the sample runs (``bucketed`` uses the story's buckets)."""
    from dflash_diag.data import STORY_BUCKETS, ScheduleParams

    return ScheduleParams(
        strategy=strategy,
        seed=seed,
        token_budget=TOKEN_BUDGET,
        budget_mode="padded",
        max_seq_len=MAX_SEQ_LEN,
        buckets=STORY_BUCKETS,
        rng="python",
        seeding="once",
        world_size=WORLD_SIZE,
        grad_accum=1,
        first_step=FIRST_STEP,
        epochs=epochs,
    )


def batch_mean(values: np.ndarray, ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per batch, the mean of ``values`` over its samples ``ids[offsets[k]:offsets[k+1]]``."""
    return np.add.reduceat(values[ids], offsets[:-1]) / np.diff(offsets)


def rank0_batch(orders: list[np.ndarray], step: int) -> int:
    """Pool index of rank 0's micro-batch at ``step``, from the epochs' micro-batch orders
    (``--shard strided``, one micro-batch per rank per step, incomplete last step dropped)."""
    per_epoch = len(orders[0]) // WORLD_SIZE
    epoch, k = divmod(step - FIRST_STEP, per_epoch)
    return int(orders[epoch][k * WORLD_SIZE])


def _epoch0_prefix(seed: int, n: int, lowest: int) -> list[int]:
    """``random.Random(seed).shuffle(list(range(n)))`` run only until position ``lowest``
    is final: CPython's shuffle is a Fisher-Yates from the end (``for i in reversed(
    range(1, n)): j = _randbelow(i + 1)``), so positions ``>= lowest`` are done after
    ``n - lowest`` draws.  A fast prefilter for :func:`find_seed`; the replay engine's own
    shuffle decides (and must agree)."""
    x = list(range(n))
    below = random.Random(seed)._randbelow
    for i in range(n - 1, lowest - 1, -1):
        j = below(i + 1)
        x[i], x[j] = x[j], x[i]
    return x


def _seed_qualifies(
    orders: list[np.ndarray], peak: np.ndarray, longest: np.ndarray, ordinary: np.ndarray
) -> bool:
    """The conditions of :func:`find_seed` on the epoch orders of one seed."""
    spike_batches = [rank0_batch(orders, s) for s in SPIKE_STEPS]
    for b in spike_batches:
        if not (longest[b] and 4.0 <= peak[b] <= 6.0):
            return False
    if not ordinary[rank0_batch(orders, STORY_STEP)]:
        return False
    # the pair stands out: no other big spike (noise-free loss over 2) on rank 0 within
    # 10 steps of them
    near = set(range(SPIKE_STEPS[0] - 10, SPIKE_STEPS[-1] + 11)) - set(SPIKE_STEPS)
    if (peak[[rank0_batch(orders, s) for s in sorted(near)]] > 2.0).any():
        return False
    # both spike batches come back on rank 0 in a later epoch
    later = set()
    for o in orders[1:]:
        later.update(o[0 : len(o) - len(o) % WORLD_SIZE : WORLD_SIZE].tolist())
    return all(b in later for b in spike_batches)


def find_seed(
    lengths: np.ndarray,
    pool_x_of: Callable[[np.ndarray, np.ndarray], np.ndarray],
    search: range = SEED_SEARCH,
) -> int:
    """The first seed in ``search`` that tells the story: under it, rank 0's micro-batch
    at steps 254 and 258 (epoch 0) is one of the longest 2% (mean length) with a
    noise-free loss of 4-6 at step 254, no other batch with a noise-free loss over 2 is on
    rank 0 within 10 steps of them, step 349's batch is ordinary (difficulty between the
    20th and 80th percentile), and both spike batches come back on rank 0 in a later
    epoch.  Uses the replay engine's own strategy and shuffles for the decision.

    :param lengths: the manifest's lengths (uncapped).
    :param pool_x_of: the centred difficulty of each batch given as ``(ids, offsets)``.
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
    peak = base_loss(SPIKE_STEPS[0]) + learned(SPIKE_STEPS[0]) * pool_x
    lo, hi = np.quantile(pool_x, [0.2, 0.8])
    ordinary = (pool_x >= lo) & (pool_x <= hi)
    spikeable = longest & (peak >= 4.0) & (peak <= 6.0)
    n = len(pool)
    positions = [(s - FIRST_STEP) * WORLD_SIZE for s in SPIKE_STEPS]
    for seed in search:
        prefix = None
        if positions[-1] < n:  # both spikes in epoch 0: cheap rejection first
            prefix = _epoch0_prefix(seed, n, min(positions))
            if not all(spikeable[prefix[p]] for p in positions):
                continue
        shufflers = EpochShufflers("python", seed, "once")
        orders = [strategy.epoch(prepared, e, shufflers.for_epoch(e)).order for e in range(EPOCHS)]
        if prefix is not None and any(prefix[p] != orders[0][p] for p in positions):
            raise RuntimeError("the prefilter's shuffle and the replay engine's disagree")
        if _seed_qualifies(orders, peak, longest, ordinary):
            return seed
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
    :param story: pick the noise seed so step 349 reads as in the story.
    """

    name: str
    strategy: str
    seed: int
    noise_seed: int
    last_step: int | None = None
    crash: bool = False
    event: bool = False
    start: str = "2026-03-02 12:46:51"
    story: bool = False


@dataclass(frozen=True)
class StepTable:
    """Per optimizer step of a replay: what the curves need."""

    step: np.ndarray
    epoch: np.ndarray
    tokens: np.ndarray
    padded: np.ndarray
    x0: np.ndarray  # rank 0's micro-batch difficulty
    xpool: np.ndarray  # over all the step's sequences
    long0: np.ndarray  # rank 0's micro-batch is among the longest 2% (mean length)


def step_table(rep, difficulty: np.ndarray, center: float) -> StepTable:
    """Per-step inputs of the curves from a Replay (rows of ``micro`` are in step, rank
    order with one micro-batch per rank)."""
    x = batch_mean(difficulty, rep.sample_ids, rep.offsets) - center
    micro = rep.micro
    per_step = WORLD_SIZE
    tok = micro["n_samples"].to_numpy().reshape(-1, per_step)
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


# --- the log text --------------------------------------------------------------------


class Clock:
    """Wall-clock time of the log lines, ``YYYY-MM-DD HH:MM:SS,mmm``."""

    def __init__(self, start: str) -> None:
        from datetime import datetime

        self.t0 = datetime.strptime(start, "%Y-%m-%d %H:%M:%S")
        self.seconds = 0.0

    def tick(self, seconds: float) -> None:
        self.seconds += float(seconds)

    def stamp(self) -> str:
        from datetime import timedelta

        t = self.t0 + timedelta(milliseconds=round(self.seconds * 1000))
        return t.strftime("%Y-%m-%d %H:%M:%S,") + f"{t.microsecond // 1000:03d}"

    def glog(self) -> str:
        """The timestamp torch's C++ (glog) lines use: ``MMDD HH:MM:SS.uuuuuu``."""
        from datetime import timedelta

        t = self.t0 + timedelta(milliseconds=round(self.seconds * 1000))
        return t.strftime("%m%d %H:%M:%S.") + f"{t.microsecond:06d}"


def log(clock: Clock, level: str, name: str, text: str) -> str:
    return f"{clock.stamp()} | {level} | {name} | {text}"


def banner(clock: Clock, spec: RunSpec, n_batches: int, tab: StepTable, total: int) -> list[str]:
    """Start-up: banner, config dump, data summary, the usual warnings."""
    batching = {
        "sorted-greedy": "sorted-greedy (build_batches: sort by length, pack, shuffle batch order)",
        "bucketed": "bucketed (shuffle inside 6 length buckets, pack, shuffle batches)",
    }[spec.strategy]
    lines = [
        "=" * 78,
        "  DFlash drafter training | scripts/train_dflash_pipeline.py",
        "  target Qwen3-8B (frozen) -> drafter dflash-b16 (2 layers, block size 16)",
        "  8 x RTX PRO 6000 Blackwell | torch 2.9.1+cu128 | NCCL 2.27.7",
        "=" * 78,
        log(clock, "INFO", "dflash.train", "config:"),
        "  data.manifest: data/train_manifest.parquet",
        f"  data.max_seq_len: {MAX_SEQ_LEN}",
        f"  data.token_budget: {TOKEN_BUDGET}  # padded tokens per micro-batch",
        f"  data.batching: {batching}",
        f"  data.shuffle_seed: {spec.seed}",
        f"  train.epochs: {EPOCHS}",
        f"  train.world_size: {WORLD_SIZE}",
        f"  optim.lr: {PEAK_LR}",
        f"  optim.warmup_steps: {WARMUP_STEPS}",
        f"  optim.schedule: linear warmup, cosine decay to {FINAL_LR_FRACTION} x lr",
        "  optim.weight_decay: 0.01",
        "  optim.max_grad_norm: 1.0",
        "  ckpt.every: 250",
    ]
    clock.tick(3.1)
    lines.append(
        log(
            clock,
            "INFO",
            "dflash.data",
            f"{N_SAMPLES} samples; {n_batches} micro-batches in epoch 0, "
            f"{n_batches // WORLD_SIZE} steps; {total} steps in {EPOCHS} epochs",
        )
    )
    clock.tick(0.4)
    lines.append(
        log(clock, "WARNING", "dflash.data", f"samples over {MAX_SEQ_LEN} tokens are truncated")
    )
    clock.tick(7.9)
    for rank in (3, 6):
        lines.append(
            f"[rank{rank}]:[W{clock.glog()} ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0 "
            f"Rank {rank}]  using GPU {rank} to perform barrier as devices used by this process "
            "are currently unknown. This can potentially cause a hang if this rank to GPU "
            "mapping is incorrect."
        )
        clock.tick(0.013)
    clock.tick(2.2)
    lines += [
        "[rank0]:/home/train/.venv/lib/python3.11/site-packages/torch/utils/checkpoint.py:87: "
        "UserWarning: None of the inputs have requires_grad=True. Gradients will be None",
        "[rank0]:  warnings.warn(",
    ]
    return lines


def crash_lines(clock: Clock, step: int) -> list[str]:
    """A rank dies in an all-reduce (NCCL watchdog): the traceback torchrun shows."""
    clock.tick(600.07)
    lines = [
        f"[rank5]:[E{clock.glog()} ProcessGroupNCCL.cpp:632] [Rank 5] Watchdog caught "
        f"collective operation timeout: WorkNCCL(SeqNum={3 * step + 11}, OpType=ALLREDUCE, "
        "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600070 milliseconds before "
        "timing out.",
        "[rank5]: Traceback (most recent call last):",
        '[rank5]:   File "scripts/train_dflash_pipeline.py", line 508, in <module>',
        "[rank5]:     main()",
        '[rank5]:   File "scripts/train_dflash_pipeline.py", line 471, in main',
        "[rank5]:     loss, acc, ntok = train_step(drafter, target, batch, optimizer)",
        '[rank5]:   File "scripts/train_dflash_pipeline.py", line 352, in train_step',
        "[rank5]:     dist.all_reduce(ntok)",
        "[rank5]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank 5.",
    ]
    clock.tick(2.4)
    lines.append(
        f"W{clock.glog()} 4412 torch/distributed/elastic/multiprocessing/api.py:897] Sending "
        "process 4420 closing signal SIGTERM"
    )
    clock.tick(1.3)
    lines.append(
        f"E{clock.glog()} 4412 torch/distributed/elastic/multiprocessing/api.py:869] failed "
        "(exitcode: -6) local_rank: 5 (pid: 4425) of binary: /home/train/.venv/bin/python"
    )
    clock.tick(412.0)  # someone notices and restarts it
    return lines


def train_line(
    clock: Clock, epoch: int, step: int, total: int, lr: float, c: Curves, i: int, ntok: int
) -> str:
    return log(
        clock,
        "INFO",
        "dflash.train",
        f"epoch={epoch} step={step}/{total} loss={c.loss[i]:.4f} acc={c.acc[i]:.4f} "
        f"lr={lr:.2e} grad_norm={c.grad_norm[i]:.2f} ntok={ntok} "
        f"tok/s={c.tok_per_s[i] / 1000:.1f}K",
    )


@dataclass(frozen=True)
class Written:
    """What a written log holds (for the README and the tests)."""

    name: str
    total: int
    last_step: int
    event_step: int | None
    crash_step: int | None


def _reads_like_story(t: np.ndarray, c: Curves) -> bool:
    """Step 349 reads as in the story (loss 0.87 +- 0.005, acc 0.046 +- 0.001): the noise
    seed is the first from RunSpec.noise_seed for which it does (the model's noise-free
    values there are close to those; this only picks a draw of the noise that agrees)."""
    i = int(np.flatnonzero(t == STORY_STEP)[0])
    return abs(c.loss[i] - 0.87) <= 0.005 and abs(c.acc[i] - 0.046) <= 0.001


def write_run(path: Path, spec: RunSpec, tab: StepTable, n_batches: int) -> Written:
    """Write one training log for the replayed steps ``tab``."""
    total = int(tab.step[-1])
    last = total if spec.last_step is None else spec.last_step
    keep = tab.step <= last
    t = tab.step[keep].astype(np.float64)
    crash_step = CRASH_CHECKPOINT + CRASH_AFTER if spec.crash else None
    event = None
    if spec.event:
        event = choose_event_step(tab, (CRASH_CHECKPOINT, crash_step) if crash_step else None)
    for noise_seed in range(spec.noise_seed, spec.noise_seed + 10_000):
        rng = np.random.default_rng(noise_seed)
        wander = drift(len(t), rng)
        args = (tab.x0[keep], tab.xpool[keep], tab.tokens[keep], tab.padded[keep], wander, event)
        first = curves(t, *args, rng=rng)
        if not spec.story or _reads_like_story(t, first):
            break
    else:
        raise RuntimeError("no noise draw puts step 349 where the story has it")
    # after the resume the same steps run again on the same batches: new noise only
    again = curves(t, *args, rng=np.random.default_rng([noise_seed, 1]))
    lr = lr_at(t, total)

    clock = Clock(spec.start)
    lines = banner(clock, spec, n_batches, tab, total)
    clock.tick(21.6)

    def info(text: str) -> str:
        return log(clock, "INFO", "dflash.train", text)

    def run_steps(idx: np.ndarray, c: Curves) -> None:
        for i in idx:
            step, epoch = int(tab.step[i]), int(tab.epoch[i])
            clock.tick(c.seconds[i])
            lines.append(train_line(clock, epoch, step, total, lr[i], c, i, int(tab.tokens[i])))
            if step % 250 == 0:
                clock.tick(9.5)
                lines.append(info(f"saved checkpoint checkpoints/step_{step:06d}"))
            if i + 1 < len(t) and tab.epoch[i + 1] != epoch:
                lines.append(info(f"epoch {epoch} done; reshuffling the batch order"))

    index = np.arange(len(t))
    if crash_step is None:
        run_steps(index, first)
    else:
        run_steps(index[t <= crash_step], first)
        lines += crash_lines(clock, crash_step)
        lines += banner(clock, spec, n_batches, tab, total)
        i0 = int(np.flatnonzero(tab.step == CRASH_CHECKPOINT + 1)[0])
        epoch = int(tab.epoch[i0])
        done = int((tab.step[:i0] >= tab.step[tab.epoch == epoch][0]).sum())
        clock.tick(14.2)
        lines.append(
            info(
                f"resumed from checkpoints/step_{CRASH_CHECKPOINT:06d}: epoch {epoch}, "
                f"continuing at position {done * WORLD_SIZE} of the epoch's batch order"
            )
        )
        redo = index[(t > CRASH_CHECKPOINT) & (t <= crash_step)]
        run_steps(redo, again)
        run_steps(index[t > crash_step], first)
    if last < total:
        clock.tick(1.7)
        lines.append(log(clock, "WARNING", "dflash.train", "caught SIGINT; stopping"))
        if last % 250:
            clock.tick(9.1)
            lines.append(info(f"saved checkpoint checkpoints/step_{last:06d}"))
    else:
        clock.tick(9.1)
        lines.append(info("training finished; saved checkpoints/final"))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Written(path.name, total, last, event, crash_step)


# --- everything ----------------------------------------------------------------------


def toml_text(strategy: str, seed: int, comment: str) -> str:
    lines = [
        f"# {comment}",
        "# Written by generate.py; `dflash-diag` reads it from beside the log.",
        "# The trainer logs loss and acc of rank 0's micro-batch only (no all-reduce);",
        "# ntok is the step's real tokens summed over all ranks.",
        "[schedule]",
        'manifest = "manifest.parquet"',
        'category_column = "source"',
        f'strategy = "{strategy}"',
        f"seed = {seed}",
        f"token_budget = {TOKEN_BUDGET}",
        'budget_mode = "padded"',
        f"max_seq_len = {MAX_SEQ_LEN}",
    ]
    if strategy == "bucketed":
        from dflash_diag.data import STORY_BUCKETS

        lines.append(f"buckets = [{', '.join(str(b) for b in STORY_BUCKETS)}]")
    lines += [
        f"world_size = {WORLD_SIZE}",
        "grad_accum = 1",
        'shard = "strided"',
        f"first_step = {FIRST_STEP}",
        f"epochs = {EPOCHS}",
        'rng = "python"',
        'seeding = "once"',
    ]
    return "\n".join(lines) + "\n"


def generate(out: Path, seed: int | None = None) -> dict[str, Written]:
    """Write every file of the sample case into ``out``; return what the logs hold.

    :param seed: run.log's shuffle seed; None searches for it (:func:`find_seed`).  A
        given seed must qualify too.
    """
    from dflash_diag.schedule import replay

    out.mkdir(parents=True, exist_ok=True)
    man = make_manifest()
    write_manifest(out / "manifest.parquet", man)
    capped = np.minimum(man["length"], MAX_SEQ_LEN)
    difficulty = sample_difficulty(capped, man["source"])
    names = np.asarray(SOURCES)[man["source"]]

    def pool_x(ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        x = batch_mean(difficulty, ids, offsets)
        return x - np.median(x)

    search = SEED_SEARCH if seed is None else range(seed, seed + 1)
    run_seed = find_seed(man["length"], pool_x, search)

    def replayed(strategy: str, s: int):
        return replay(man["length"], schedule_params(strategy, s), categories=names)

    run_rep = replayed("sorted-greedy", run_seed)
    raw_x = batch_mean(difficulty, run_rep.sample_ids, run_rep.offsets)
    # "ordinary" = the median sorted-greedy batch; the same constant for every run: the
    # difficulty belongs to the data, not to the schedule
    center = float(np.median(raw_x[run_rep.micro["epoch"].to_numpy() == 0]))
    written = {}
    specs = [
        (
            RunSpec("run.log", "sorted-greedy", run_seed, 11, crash=True, event=True, story=True),
            run_rep,
        ),
        (
            RunSpec(
                "v1.log",
                "sorted-greedy",
                V1_SEED,
                5,
                last_step=V1_LAST_STEP,
                start="2026-02-23 09:12:40",
            ),
            replayed("sorted-greedy", V1_SEED),
        ),
        (
            RunSpec("run_bucketed.log", "bucketed", run_seed, 13, start="2026-03-03 10:05:17"),
            replayed("bucketed", run_seed),
        ),
    ]
    for spec, rep in specs:
        tab = step_table(rep, difficulty, center)
        n = int((rep.micro["epoch"] == 0).sum())
        written[spec.name] = write_run(out / spec.name, spec, tab, n)
    (out / "dflash-diag.toml").write_text(
        toml_text("sorted-greedy", run_seed, "The schedule of run.log: the story's build_batches.")
    )
    (out / "bucketed.toml").write_text(
        toml_text("bucketed", run_seed, "The schedule of run_bucketed.log: the fix.")
    )
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write (default: here)")
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="run.log's shuffle seed instead of searching for it (it must qualify)",
    )
    args = parser.parse_args(argv)
    written = generate(args.out, args.seed)
    for w in written.values():
        extra = []
        if w.event_step is not None:
            extra.append(f"optimizer event at step {w.event_step}")
        if w.crash_step is not None:
            extra.append(f"crash after step {w.crash_step}, resumed from {CRASH_CHECKPOINT}")
        print(f"{w.name}: steps 1..{w.last_step} of {w.total}" + "".join(f"; {e}" for e in extra))
    return 0


if __name__ == "__main__":
    sys.exit(main())
