"""Invariants of the tests, on random small memberships (Hypothesis), and the p-value
against brute-force enumeration of the permutation null."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from budget import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dflash_diag.samples import Membership, SampleOptions, sample_evidence, separable_groups

NO_EXPLAIN = SampleOptions(explain_rounds=0)


@st.composite
def runs(draw: st.DrawFn) -> tuple[Membership, np.ndarray]:
    """A membership of up to 12 points over up to 15 samples, and a z per point (with
    ties and NaNs)."""
    n_samples = draw(st.integers(1, 15))
    n_points = draw(st.integers(1, 12))
    n = draw(st.integers(0, 60))
    point = draw(st.lists(st.integers(-1, n_points - 1), min_size=n, max_size=n))
    sample = draw(st.lists(st.integers(0, n_samples - 1), min_size=n, max_size=n))
    z = draw(
        st.lists(
            st.sampled_from([np.nan, -1.0, 0.0, 0.5, 1.0, 2.0, 3.5]),
            min_size=n_points,
            max_size=n_points,
        )
    )
    m = Membership.from_entries(point, sample, n_samples=n_samples, n_points=n_points)
    return m, np.array(z)


def brute_p(m: Membership, z: np.ndarray, sample: int) -> float:
    """P(min z of k points drawn from the usable ones >= the sample's min), enumerated."""
    usable = np.flatnonzero(np.isfinite(z))
    points = {p for p in usable if sample in m.samples[m.offsets[p] : m.offsets[p + 1]]}
    k = len(points)
    observed = min(z[p] for p in points)
    hits = sum(min(z[list(c)]) >= observed for c in itertools.combinations(usable, k))
    return hits / math.comb(usable.size, k)


@pytest.mark.slow
@settings(max_examples=examples(80), deadline=None)
@given(runs())
def test_p_equals_the_enumerated_permutation_null(run: tuple[Membership, np.ndarray]) -> None:
    m, z = run
    t = sample_evidence(m, z, options=NO_EXPLAIN).table
    for s in np.flatnonzero(t["testable"].to_numpy()):
        assert math.isclose(t.loc[s, "p"], brute_p(m, z, int(s)), rel_tol=1e-9)


#: Hypothesis found it: explaining away left a count under k (a log-gamma of -1, NaN).
LOST_COUNT = (
    Membership(np.array([0, 1, 1, 2, 2, 2, 2, 2, 2, 3, 4]), np.zeros(4, dtype=np.int32), 1),
    np.array([math.nan, math.nan, 0.0, *[math.nan] * 4, -1.0, 0.0, 0.0]),
)


@pytest.mark.slow
@settings(max_examples=examples(80), deadline=None)
@given(runs())
@example(LOST_COUNT)
def test_p_in_unit_interval_and_q_at_least_p(run: tuple[Membership, np.ndarray]) -> None:
    m, z = run
    t = sample_evidence(m, z).table
    tested = t[t["testable"]]
    assert ((tested["p"] > 0) & (tested["p"] <= 1)).all()
    assert (tested["q"] >= tested["p"] - 1e-15).all()
    assert t.loc[~t["testable"], ["p", "q"]].isna().all().all()
    assert (t["appearances"] >= t["high"]).all()


@pytest.mark.slow
@settings(max_examples=examples(60), deadline=None)
@given(runs(), st.randoms(use_true_random=False))
def test_permuting_sample_labels_permutes_the_output(run, rnd) -> None:
    m, z = run
    perm = np.array(rnd.sample(range(m.n_samples), m.n_samples))
    relabelled = Membership(m.offsets, perm[m.samples].astype(m.samples.dtype), m.n_samples)
    a = sample_evidence(m, z).table
    b = sample_evidence(relabelled, z).table.iloc[perm].reset_index(drop=True)
    cols = ["appearances", "explained", "high", "min_z", "score", "p", "q", "testable"]
    assert a[cols].equals(b[cols])
    # the same partition into groups
    pairs_a = {(x, y) for x, y in zip(a["group"], b["group"], strict=True)}
    assert len({x for x, _ in pairs_a}) == len(pairs_a) == len({y for _, y in pairs_a})


@pytest.mark.slow
@settings(max_examples=examples(80), deadline=None)
@given(runs(), st.data())
def test_raising_a_points_z_never_raises_the_p_of_its_samples(run, data) -> None:
    m, z = run
    finite = np.flatnonzero(np.isfinite(z))
    if finite.size == 0:
        return
    p = data.draw(st.sampled_from(finite.tolist()))
    higher = z.copy()
    higher[p] += data.draw(st.sampled_from([0.25, 1.0, 10.0]))
    before = sample_evidence(m, z, options=NO_EXPLAIN).table
    after = sample_evidence(m, higher, options=NO_EXPLAIN).table
    inside = np.unique(m.samples[m.offsets[p] : m.offsets[p + 1]])
    tested = inside[before.loc[inside, "testable"].to_numpy()]
    assert (after.loc[tested, "p"] <= before.loc[tested, "p"] + 1e-12).all()


@pytest.mark.slow
@settings(max_examples=examples(60), deadline=None)
@given(runs())
def test_groups_are_exactly_the_samples_with_the_same_points(run) -> None:
    m, z = run
    group, size = separable_groups(m, z)
    sets: dict[int, frozenset[int]] = {}
    for s in range(m.n_samples):
        pts = frozenset(
            p
            for p in range(m.n_points)
            if np.isfinite(z[p]) and s in m.samples[m.offsets[p] : m.offsets[p + 1]]
        )
        sets[s] = pts
    for a in range(m.n_samples):
        assert (group[a] == -1) == (not sets[a])
        for b in range(m.n_samples):
            if sets[a] and sets[b]:
                assert (group[a] == group[b]) == (sets[a] == sets[b])
    assert size.sum() == (group >= 0).sum()


def test_allow_low_matches_the_hypergeometric_tail() -> None:
    # 6 usable points, a sample in 3 of them with z 0, 2, 3: its 2nd lowest is 2, and
    # P(at least 2 of 3 draws among the 2 points >= 2) = C(2,2) C(4,1) / C(6,3) = 4 / 20
    m = Membership.from_entries([0, 1, 2, 3, 4, 5, 0, 1], [0, 0, 0, 1, 1, 1, 2, 2])
    z = np.array([0.0, 2.0, 3.0, -1.0, -2.0, 1.0])
    t = sample_evidence(m, z, options=SampleOptions(allow_low=1, explain_rounds=0)).table
    assert math.isclose(t.loc[0, "p"], 4 / 20)
    assert t.loc[0, "score"] == 2.0
