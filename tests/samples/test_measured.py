"""Measured ground: per-sample losses logged by a recorder."""

from __future__ import annotations

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.errors import InputError
from dflash_diag.samples import Membership, measured_evidence, measured_z, name_culprits
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


def _hard_kind(seed: int, n_poison: int = 5):
    """A run whose samples of kind 1 (15%) are each persistently 1-2 nats harder than
    the rest (hard, not poison), with poison among kind 0."""
    sim = simulate(seed, n_poison=0)
    rng = np.random.default_rng(seed + 100)
    n = sim.membership.n_samples
    kinds = (rng.random(n) < 0.15).astype(np.int64)
    hardness = np.where(kinds == 1, rng.uniform(1.0, 2.0, n), 0.0)
    easy = np.flatnonzero(kinds == 0)
    poison = rng.choice(easy, n_poison, replace=False)
    loss = np.asarray(sim.sample_loss) + hardness[sim.membership.samples]
    loss = loss + np.isin(sim.membership.samples, poison) * 2.0
    return sim.membership, loss, kinds, poison


def test_a_persistently_hard_kind_is_not_named_but_the_poison_in_the_easy_kind_is() -> None:
    m, loss, kinds, poison = _hard_kind(5)
    named = name_culprits(measured_evidence(m, loss, kinds=kinds))
    assert set(named["sample"]) == set(poison.tolist())
    assert (named["own_excess_nats"] > 1.5).all()  # +2 nats a token over its batch mates


def test_a_clean_run_with_hard_samples_names_none() -> None:
    m, loss, kinds, _ = _hard_kind(6, n_poison=0)
    assert name_culprits(measured_evidence(m, loss, kinds=kinds)).empty


@pytest.mark.parametrize("seed", [7, 8])
def test_a_kind_one_sample_in_six_of_which_is_poison_names_them(seed: int) -> None:
    # a scraped source of 120 samples, 20 of them garbage: the kind's top tenth is all
    # poison, so its own tail cannot be its null; the pooled tail is
    sim = simulate(seed, n_poison=0)
    rng = np.random.default_rng(seed + 200)
    n = sim.membership.n_samples
    kinds = np.zeros(n, dtype=np.int64)
    web = rng.choice(n, 120, replace=False)
    kinds[web] = 1
    kinds[rng.choice(np.setdiff1d(np.arange(n), web), 300, replace=False)] = 2
    poison = web[:20]
    loss = np.asarray(sim.sample_loss) + 2.0 * np.isin(sim.membership.samples, poison)
    named = set(name_culprits(measured_evidence(sim.membership, loss, kinds=kinds))["sample"])
    assert set(poison.tolist()) <= named
    assert not (named - set(poison.tolist())) & set(web.tolist())  # no clean web sample
    # (with 20 true names, Benjamini-Hochberg's bar lets a clean sample of another
    # kind at the far end of its kind's tail through: the rate is in expectation)
    assert len(named - set(poison.tolist())) <= 0.2 * len(named)


def test_kinds_must_be_one_code_per_sample() -> None:
    sim = simulate(0)
    with pytest.raises(InputError, match="^kinds: must be 2000 integer codes"):
        measured_evidence(sim.membership, sim.sample_loss, kinds=np.zeros(3, dtype=np.int64))


@pytest.mark.slow
@settings(max_examples=examples(20), deadline=None)
@given(st.integers(0, 2**16), st.randoms(use_true_random=False))
def test_relabelling_the_samples_relabels_the_measured_evidence(seed, rnd) -> None:
    m, loss, kinds, _ = _hard_kind(seed % 50)
    n = m.n_samples
    perm = np.array(rnd.sample(range(n), n))
    relabelled = Membership(m.offsets, perm[m.samples].astype(m.samples.dtype), n, m.tokens)
    new_kinds = np.empty_like(kinds)
    new_kinds[perm] = kinds
    a = measured_evidence(m, loss, kinds=kinds).table
    b = measured_evidence(relabelled, loss, kinds=new_kinds).table.iloc[perm]
    cols = ["appearances", "high", "min_z", "score", "p", "q", "testable"]
    assert a[cols].reset_index(drop=True).equals(b[cols].reset_index(drop=True))
    tested = a[a["testable"]]
    assert ((tested["p"] > 0) & (tested["p"] <= 1)).all()
    assert (tested["q"] >= tested["p"] - 1e-15).all()


def test_no_testable_sample_gives_no_p() -> None:
    # (a live watch's first spikes: no sample has appeared often enough to be tested)
    from dflash_diag.samples.measured import _tail_pvalues

    p = _tail_pvalues(np.array([1.0, 2.0]), np.array([0, 0]), np.array([False, False]))
    assert np.isnan(p).all()
