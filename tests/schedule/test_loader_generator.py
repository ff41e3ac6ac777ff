"""``--seeding loader``: a DataLoader given a generator of its own, replayed without
torch, against torch itself (``DataLoader(shuffle=True, generator=...)``, CPU,
``num_workers`` 0 and 2).  Needs torch: skipped outside CI where it is missing; under CI
(``CI`` set) it must run (``.ci/run`` installs the ``train-test`` extra)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag import ScheduleParams, replay
from dflash_diag.errors import InputError


def _torch():
    if os.environ.get("CI"):
        import torch

        return torch
    return pytest.importorskip("torch", reason="torch is not installed (CI runs these)")


def _drawn(n: int, batch: int, seed: int, epochs: int, drop_last: bool, workers: int = 0):
    torch = _torch()
    from torch.utils.data import DataLoader

    g = torch.Generator()
    g.manual_seed(seed)
    loader = DataLoader(
        list(range(n)),
        batch_size=batch,
        shuffle=True,
        generator=g,
        drop_last=drop_last,
        num_workers=workers,
    )
    torch.manual_seed(seed + 1)  # (the global generator: used elsewhere, not by the loader)
    return [b.tolist() for _ in range(epochs) for b in loader]


def _replayed(n: int, batch: int, seed: int, epochs: int, drop_last: bool) -> list[list[int]]:
    params = ScheduleParams(
        strategy="random",
        rng="torch",
        seeding="loader",
        seed=seed,
        batch_size=batch,
        drop_last=drop_last,
        epochs=epochs,
        first_step=0,
    )
    rep = replay(np.full(n, 10), params)
    return [rep.batch(i).tolist() for i in range(len(rep.micro))]


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 300),
    st.integers(1, 16),
    st.integers(0, 2**31 - 1),
    st.integers(1, 4),
    st.booleans(),
)
def test_a_loaders_own_generator_is_replayed_every_epoch(n, batch, seed, epochs, drop_last):
    want = _drawn(n, batch, seed, epochs, drop_last)
    assert _replayed(n, batch, seed, epochs, drop_last) == want


def test_worker_processes_draw_nothing_from_the_loaders_generator():
    assert _replayed(100, 8, 1234, 3, False) == _drawn(100, 8, 1234, 3, False, workers=2)


def test_loader_seeding_is_torchs_and_the_random_samplers():
    with pytest.raises(InputError, match="give --rng torch"):
        ScheduleParams(strategy="random", rng="numpy", seeding="loader", batch_size=8)
    with pytest.raises(InputError, match="give --strategy random"):
        ScheduleParams(strategy="sorted-greedy", rng="torch", seeding="loader")


def test_other_strategies_compared_with_a_loader_run_are_seeded_once():
    from dflash_diag.batches.stats import params_for

    params = ScheduleParams(strategy="random", rng="torch", seeding="loader", batch_size=8)
    lengths = np.full(50, 10)
    assert params_for("sorted-greedy", params, lengths).seeding == "once"
    assert params_for("random", params, lengths).seeding == "loader"
