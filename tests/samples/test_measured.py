"""Measured ground: per-sample losses logged by a recorder."""

from __future__ import annotations

import numpy as np
import pytest

from dflash_diag.errors import InputError
from dflash_diag.samples import measured_evidence, measured_z, name_culprits
from tests.samples.simulate import simulate


def test_measured_names_exactly_the_poison_even_under_fixed_batches() -> None:
    # fixed batches make the point-level evidence inseparable; per-sample losses do not
    sim = simulate(1, fixed=True, n_poison=3)
    ev = measured_evidence(sim.membership, sim.sample_loss)
    assert ev.ground == "measured"
    assert (ev.table.loc[ev.table["group"] >= 0, "group_size"] == 1).all()
    culprits = name_culprits(ev)
    assert set(culprits["unit"]) == {"sample"}
    assert set(culprits["sample"]) == set(sim.poison.tolist())
    assert set(culprits["ground"]) == {"measured"}


def test_measured_level_shift_cancels_out() -> None:
    sim = simulate(3, n_poison=0, shift=8.0)
    z = measured_z(sim.membership, sim.sample_loss)
    # the point's level is shared by its batch: its samples' z stay ordinary
    assert np.nanmax(np.abs(z)) < 6
    assert name_culprits(measured_evidence(sim.membership, sim.sample_loss)).empty


def test_small_points_and_nan_losses_give_no_z() -> None:
    sim = simulate(0)
    loss = np.asarray(sim.sample_loss).copy()
    loss[::3] = np.nan  # 5 or 6 of each batch of 8 left
    z = measured_z(sim.membership, loss)
    assert np.isnan(z[::3]).all() and np.isfinite(np.delete(z, np.s_[::3])).all()
    pairs = simulate(0, batch=2)  # a median of two losses is no baseline
    with pytest.raises(InputError, match="^sample_loss: no point has 3 finite"):
        measured_z(pairs.membership, pairs.sample_loss)


def test_sample_loss_must_align_with_the_entries() -> None:
    sim = simulate(0)
    with pytest.raises(InputError, match="^sample_loss: has shape"):
        measured_z(sim.membership, sim.sample_loss[:-1])
