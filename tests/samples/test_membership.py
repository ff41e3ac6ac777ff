"""The membership table: construction, its contract, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.errors import InputError
from dflash_diag.samples import Membership, name_culprits, sample_evidence, separable_groups


def test_from_entries_sorts_by_point_drops_minus_one_and_merges_repeats() -> None:
    # sample 4 is twice in point 1 (a logging interval across an epoch boundary)
    m = Membership.from_entries(
        [1, 0, -1, 1, 1], [4, 2, 3, 4, 0], n_samples=5, tokens=[10, 5, 7, 30, 60]
    )
    assert m.offsets.tolist() == [0, 1, 3]
    assert m.samples.tolist() == [2, 0, 4]
    assert m.tokens is not None and m.tokens.tolist() == [5, 60, 40]
    assert not m.has_repeats()
    assert np.allclose(m.entry_share(), [1.0, 0.6, 0.4])


def test_a_repeat_counts_once_as_an_appearance() -> None:
    m = Membership.from_entries([0, 0, 1, 2], [0, 0, 0, 1], n_samples=2)
    assert sample_evidence(m, [1.0, 2.0, 0.0]).table.loc[0, "appearances"] == 2


def test_has_repeats_finds_a_sample_listed_twice_in_a_point() -> None:
    m = Membership(np.array([0, 3]), np.array([1, 0, 1], dtype=np.int32), 2)
    assert m.has_repeats()


def test_share_without_tokens_is_one_over_the_entries() -> None:
    m = Membership.from_entries([0, 0, 0, 1], [0, 1, 2, 0])
    assert np.allclose(m.entry_share(), [1 / 3, 1 / 3, 1 / 3, 1.0])


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: Membership(np.array([0, 2]), np.array([0, 5]), 3),
            "membership: sample ids span 0..5, outside 0..2; give n_samples of the whole dataset",
        ),
        (
            lambda: Membership(np.array([0, 3]), np.array([0, 1]), 3),
            "membership: offsets must rise from 0 to 2 (the entries); "
            "build it with Membership.from_entries",
        ),
        (
            lambda: Membership.from_entries([0, 1], [0]),
            "membership: point, sample (and tokens) must be equally long",
        ),
        (
            lambda: Membership.from_entries([0, -2], [0, 1]),
            "membership: a point index is -2; use -1 for none",
        ),
        (
            lambda: Membership.from_entries([0.5], [0]),
            "membership: point must hold integers, not float64",
        ),
    ],
)
def test_bad_membership_raises_input_error(build, message: str) -> None:
    with pytest.raises(InputError) as err:
        build()
    assert str(err.value) == message


def test_z_of_the_wrong_length_is_input_error() -> None:
    m = Membership.from_entries([0, 1], [0, 1])
    with pytest.raises(InputError, match=r"^z: has shape \(3,\), the membership has 2 points"):
        sample_evidence(m, [0.0, 1.0, 2.0])


def test_non_numeric_z_is_input_error() -> None:
    m = Membership.from_entries([0, 1], [0, 1])
    with pytest.raises(InputError, match=r"^z: is not numeric .*; give one float per point$"):
        sample_evidence(m, ["high", "low"])


def test_fdr_outside_0_1_is_input_error() -> None:
    m = Membership.from_entries([0, 1], [0, 0])
    with pytest.raises(InputError, match="^fdr: is 1.5; give a rate in"):
        name_culprits(sample_evidence(m, [0.0, 1.0]), fdr=1.5)


def test_sorted_greedy_batches_are_one_group_each() -> None:
    # 3 fixed batches of 4, in a new order each of 3 epochs
    rng = np.random.default_rng(0)
    batches = np.arange(12).reshape(3, 4)
    steps = np.concatenate([batches[rng.permutation(3)] for _ in range(3)])
    point = np.repeat(np.arange(9), 4)
    group, size = separable_groups(Membership.from_entries(point, steps.ravel()))
    assert size.tolist() == [4, 4, 4]
    for b in batches:
        assert len(set(group[b])) == 1


def test_no_culprit_gives_an_empty_table_with_the_columns() -> None:
    m = Membership.from_entries([0, 1, 2], [0, 0, 1])
    out = name_culprits(sample_evidence(m, [0.0, 0.0, 0.0]))
    assert out.empty and "members" in out.columns and out["p"].dtype == np.float64


def test_the_evidence_says_its_method() -> None:
    m = Membership.from_entries([0, 0, 1, 1, 2, 2], [0, 1, 0, 1, 0, 2])
    ev = sample_evidence(m, [1.0, 2.0, 3.0])
    assert ev.method.startswith("lowest z over each sample's appearances (at least 2)")
    assert "over 2 separable groups" in ev.method and ev.ground == "inferred"


@settings(max_examples=examples(60), deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40))
def test_share_of_some_entries_is_their_share_of_all(seed: int, every: int) -> None:
    # a few entries' shares are summed over their points only; most, in one pass
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    m = Membership.from_entries(
        rng.integers(-1, 30, n), rng.integers(0, 50, n), 50, 40, rng.integers(0, 6, n)
    )
    pe = m.point_of_entry()
    totals = np.bincount(pe, weights=m.tokens, minlength=m.n_points)
    assert np.allclose(m.point_tokens(), totals)
    whole = m.entry_share()
    some = np.arange(0, m.n_entries, every)
    assert np.allclose(m.share_of(some), whole[some])
    here = totals[pe] > 0
    assert np.allclose(whole[here], m.tokens[here] / totals[pe][here])


@pytest.mark.parametrize("head, tail", [(0, 3), (2, 0), (2, 3), (0, 0)])
def test_entries_of_no_point_around_one_block_are_left_out_as_anywhere(head, tail):
    # (one block kept is read in place: the same table as a mask picks)
    rng = np.random.default_rng(head * 10 + tail)
    point = np.concatenate([np.full(head, -1), rng.integers(0, 4, 12), np.full(tail, -1)])
    sample = rng.permutation(point.size)
    got = Membership.from_entries(point, sample, point.size, 4, sample_tokens=np.arange(point.size))
    keep = point >= 0
    want = Membership.from_entries(
        point[keep], sample[keep], point.size, 4, sample_tokens=np.arange(point.size)
    )
    for name in ("offsets", "samples", "tokens"):
        assert np.array_equal(getattr(got, name), getattr(want, name))


def test_sample_tokens_are_kept_per_sample_unless_a_count_is_bad() -> None:
    # clean counts: kept per sample, an entry's looked up where asked; a negative count
    # (of a sample no entry holds) is looked up for every entry, as the table always did
    per = np.array([5, 7, 9, 11])
    m = Membership.from_entries([0, 0, 1], [2, 0, 2], n_samples=4, sample_tokens=per)
    assert m.tokens is None and m.tokens_at(np.array([0, 2])).tolist() == [5, 9]
    bad = Membership.from_entries([0, 0, 1], [2, 0, 2], n_samples=4, sample_tokens=[5, 7, 9, -1])
    assert bad.sample_tokens is None and bad.tokens is not None
    assert bad.tokens.tolist() == [5, 9, 9]
    with pytest.raises(InputError, match="not both"):
        Membership(m.offsets, m.samples, 4, m.tokens_at(slice(None)), per)
