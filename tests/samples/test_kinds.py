"""A category whose samples are high as a whole (``samples/kinds.py``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.samples import measured_evidence, name_culprits
from dflash_diag.samples.kinds import high_kinds
from tests.samples.simulate import simulate


def test_a_category_that_is_all_poison_is_said_high_though_none_of_it_is_named() -> None:
    # the manifest's category is the poison itself: each sample is compared with its
    # own kind, so none is named, and the kind is what the reader is told of
    sim = simulate(11, n_poison=0)
    n = sim.membership.n_samples
    kinds = np.zeros(n, dtype=np.int64)
    poison = np.random.default_rng(11).choice(n, 10, replace=False)
    kinds[poison] = 1
    loss = np.asarray(sim.sample_loss) + 2.0 * np.isin(sim.membership.samples, poison)
    ev = measured_evidence(sim.membership, loss, kinds=kinds)
    assert name_culprits(ev).empty
    (high,) = high_kinds(ev.table["own_excess_nats"].to_numpy(), kinds, ["clean", "poison"])
    assert (high.name, high.n) == ("poison", 10)
    assert high.median_nats > 1.5 and abs(high.others_nats) < 0.1


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 6))
def test_categories_drawn_at_random_are_never_high_as_a_whole(seed: int, n_kinds: int) -> None:
    rng = np.random.default_rng(seed)
    excess = rng.standard_normal(600) * 0.05
    kinds = rng.integers(0, n_kinds, 600)
    kinds[rng.random(600) < 0.1] = -1  # (samples with no category are no kind)
    assert high_kinds(excess, kinds, [str(k) for k in range(n_kinds)]) == ()
