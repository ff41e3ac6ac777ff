"""``random``: a full shuffle every epoch, fixed batch size: the diversity reference.

Every epoch: ``perm = shuffle(range(n))`` with the epoch's shuffler, then consecutive
batches of ``--batch-size`` samples; the last, shorter batch is kept unless
``--drop-last`` (a DataLoader's ``drop_last``).  There is no token budget: a batch holds
``batch_size`` samples whatever their lengths, so "over budget" does not arise.

With ``--rng torch`` this is torch's ``RandomSampler`` in a ``DataLoader``:

- ``--seeding per-epoch``: accelerate's ``SeedableRandomSampler`` (``randperm(n)`` on a
  generator seeded ``seed + epoch``), which the HF Trainer's default sampler is;
- ``--seeding loader``: ``DataLoader(shuffle=True, generator=g)``: the loader's base
  seed, the sampler's ``randperm(n)`` and a second one it keeps nothing of, all from ``g``
  (:mod:`.rng`);
- ``--seeding global``: ``RandomSampler`` without a generator (or
  ``DataLoader(shuffle=True)``) after ``torch.manual_seed(seed)``: each epoch, after the
  DataLoader's base-seed draw, it draws a 64-bit seed from the global generator
  (:meth:`~dflash_diag.schedule.rng.TorchShuffler.random64`) and permutes with a fresh
  generator seeded with it.
"""

from __future__ import annotations

import numpy as np

from ..data import ScheduleParams, registered_strategy
from .base import Batches, EpochPlan, need_batch_size
from .rng import Shuffler, TorchShuffler


def fixed_size_batches(ids: np.ndarray, batch_size: int, drop_last: bool = False) -> Batches:
    """``ids`` cut into consecutive batches of ``batch_size``; the last may be shorter,
    or is left out with ``drop_last`` (as torch's ``BatchSampler``)."""
    if drop_last:
        ids = ids[: len(ids) // batch_size * batch_size]
    return Batches.from_bounds(ids, np.arange(0, len(ids), batch_size, dtype=np.int64))


def sampler_permutation(shuffler: Shuffler, n: int, own_seed: bool) -> np.ndarray:
    """The permutation a ``RandomSampler`` yields: from ``shuffler`` directly, or with
    ``own_seed`` (no generator of its own, under ``--seeding global``) from a fresh torch
    generator seeded with a 64-bit draw from ``shuffler``."""
    if own_seed:
        if not isinstance(shuffler, TorchShuffler):
            raise TypeError("a sampler's own seed is drawn from torch's generator")
        return TorchShuffler(shuffler.random64()).permutation(n)
    return shuffler.permutation(n)


class RandomBatches:
    """Shuffle all samples every epoch, then cut fixed-size batches."""

    name = "random"
    sized = registered_strategy(name).sized

    def prepare(
        self, lengths: np.ndarray, params: ScheduleParams
    ) -> tuple[int, int, bool, bool, bool]:
        own_seed = params.seeding == "global"
        tail = params.seeding == "loader"  # (the sampler's second randperm, on the loader's)
        return len(lengths), need_batch_size(params), params.drop_last, own_seed, tail

    def epoch(
        self, prepared: tuple[int, int, bool, bool, bool], epoch: int, shuffler: Shuffler
    ) -> EpochPlan:
        n, batch_size, drop_last, own_seed, tail = prepared
        perm = sampler_permutation(shuffler, n, own_seed)
        if tail and isinstance(shuffler, TorchShuffler):
            shuffler.skip_permutation(n)
        pool = fixed_size_batches(perm, batch_size, drop_last)
        return EpochPlan(pool, np.arange(len(pool), dtype=np.int64), _dropped(n, len(pool.ids)))


def _dropped(n: int, kept: int) -> dict[str, int]:
    """The samples a ``drop_last`` left out, when there are any."""
    return {"drop_last_samples": n - kept} if kept < n else {}
