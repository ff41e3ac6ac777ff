"""Constructed runs whose truth is known, for the spike tests.

A manifest of samples (lengths from three length families, with categories), a
sorted-greedy schedule replayed for a few epochs, and a loss built from the batches:

    loss_t = trend_t + effect(batch_t) + noise_t (+ an optimizer blow-up if asked)

``effect`` is ``beta x (standardised log mean length)``; ``beta < 0`` makes short batches
hard (as in the real run), ``beta > 0`` long ones.  A blow-up is a level shift of
``blowup_size`` decaying with time constant ``blowup_tau`` steps, with a grad-norm surge,
starting at a step whose batch is ordinary (mean length near the median).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dflash_diag.data import Manifest, Replay, ScheduleParams
from dflash_diag.schedule import replay

PARAMS = ScheduleParams(strategy="sorted-greedy", seed=7, token_budget=16384, first_step=1)


def manifest(n: int = 6000, seed: int = 0) -> Manifest:
    """Lengths of three families (short lines, prose, code) with their categories."""
    rng = np.random.default_rng(seed)
    cats = rng.choice(3, size=n, p=[0.3, 0.3, 0.4])
    mu = np.array([np.log(40), np.log(300), np.log(1200)])[cats]
    lengths = np.clip(np.exp(rng.normal(mu, 0.5)), 8, 4096).astype(np.int64)
    return Manifest(
        path="constructed.parquet",
        lengths=lengths,
        ids=np.arange(n),
        categories=cats.astype(np.int32),
        category_names=("line", "prose", "code"),
    )


@dataclass(frozen=True)
class Run:
    table: pd.DataFrame
    replay: Replay
    manifest: Manifest
    blowup_step: int | None


def ordinary_step(rep: Replay, after: int) -> int:
    """The first step at or after ``after`` whose batch mean length is near the median."""
    steps = rep.steps
    lm = np.log(steps["mean_len"].to_numpy())
    ok = (np.abs(lm - np.median(lm)) < 0.1 * lm.std()) & (steps["step"].to_numpy() >= after)
    return int(steps["step"].to_numpy()[np.flatnonzero(ok)[0]])


def run(
    beta: float = -0.12,
    noise: float = 0.02,
    epochs: int = 3,
    n: int = 6000,
    blowup_after: int | None = None,
    blowup_size: float = 0.8,
    blowup_tau: float = 15.0,
    seed: int = 1,
    params: ScheduleParams = PARAMS,
) -> Run:
    """A constructed run; its ``table`` is a RunLog table (step, loss, lr, grad_norm, tokens)."""
    m = manifest(n)
    rep = replay(m, params, epochs=epochs)
    steps = rep.steps["step"].to_numpy()
    rng = np.random.default_rng(seed)
    lm = np.log(rep.steps["mean_len"].to_numpy())
    effect = beta * (lm - lm.mean()) / lm.std()
    t = steps - steps[0]
    trend = 2.0 + 2.0 * np.exp(-t / 40.0)
    loss = trend + effect + rng.normal(0, noise, steps.shape[0])
    grad = 0.5 + 0.05 * rng.standard_normal(steps.shape[0])
    blow = None
    if blowup_after is not None:
        blow = ordinary_step(rep, blowup_after)
        dt = steps - blow
        shift = np.where(dt >= 0, blowup_size * np.exp(-np.maximum(dt, 0) / blowup_tau), 0.0)
        loss = loss + shift
        grad = grad + np.where((dt >= -1) & (dt <= 2), 2.5, 0.0)
    table = pd.DataFrame(
        {
            "step": steps,
            "loss": loss,
            "lr": np.full(steps.shape[0], 1e-3),
            "grad_norm": grad,
            "tokens": rep.steps["tokens"].to_numpy(dtype=np.float64),
        }
    )
    return Run(table, rep, m, blow)
