"""Simulated runs where the truth is known: which samples are poison, what each batch held.

A run is ``epochs`` passes over ``n_samples`` samples in batches of ``batch``:
``shuffled`` draws a new permutation each epoch (a shuffling sampler); ``fixed`` cuts the
samples once into consecutive batches and shuffles only their order (sorted-greedy).
Each step's metric is standard normal noise plus ``k`` per poison sample in its batch,
plus ``shift`` over ``shift_steps`` consecutive steps (an optimizer level shift).  A
logged point pools ``pool`` consecutive steps (their mean); its z is the robust z of the
points, ``(x - median) / (1.4826 MAD)``, as the spike detector computes it on a flat
curve.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dflash_diag.samples import Membership


@dataclass(frozen=True)
class Sim:
    membership: Membership
    z: np.ndarray
    excess: np.ndarray
    poison: np.ndarray
    step_samples: np.ndarray  # [n_steps, batch] sample ids
    step_of_point: np.ndarray  # [n_steps] the point of each step
    sample_loss: np.ndarray  # per entry: own loss (poison: +1), aligned with membership


def robust_z(x: np.ndarray) -> np.ndarray:
    med = np.median(x)
    return (x - med) / (1.4826 * np.median(np.abs(x - med)))


def simulate(
    seed: int = 0,
    n_samples: int = 2000,
    epochs: int = 4,
    batch: int = 8,
    n_poison: int = 10,
    k: float = 4.0,
    fixed: bool = False,
    pool: int = 1,
    shift: float = 0.0,
    shift_steps: int = 30,
) -> Sim:
    rng = np.random.default_rng(seed)
    per_epoch = n_samples // batch
    base = rng.permutation(n_samples)[: per_epoch * batch].reshape(per_epoch, batch)
    epochs_rows = []
    for _ in range(epochs):
        if fixed:
            epochs_rows.append(base[rng.permutation(per_epoch)])
        else:
            epochs_rows.append(rng.permutation(n_samples)[: per_epoch * batch].reshape(-1, batch))
    step_samples = np.concatenate(epochs_rows)
    n_steps = step_samples.shape[0]
    poison = rng.choice(n_samples, n_poison, replace=False) if n_poison else np.array([], int)
    hits = np.isin(step_samples, poison).sum(axis=1)
    metric = rng.standard_normal(n_steps) + k * hits
    if shift:
        start = int(rng.integers(0, n_steps - shift_steps))
        metric[start : start + shift_steps] += shift
    step_of_point = np.arange(n_steps) // pool
    n_points = int(step_of_point[-1]) + 1
    x = np.bincount(step_of_point, weights=metric) / np.bincount(step_of_point)
    z = robust_z(x)
    point = np.repeat(step_of_point, batch)
    samples = step_samples.ravel()
    membership = Membership.from_entries(point, samples, n_samples=n_samples, n_points=n_points)
    # per-sample losses: the point's level (shared by its batch) plus own noise and +1 for
    # poison; from_entries orders entries by (point, sample), so rebuild in that order
    level = np.repeat(x, membership.counts())
    own = rng.normal(0.0, 0.3, membership.n_entries)
    sample_loss = 2.0 + 0.1 * level + own + np.isin(membership.samples, poison) * 1.0
    return Sim(membership, z, 0.05 * x, poison, step_samples, step_of_point, sample_loss)
