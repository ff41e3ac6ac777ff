"""The order of ``samples``' table (``reports.samples.table_order``) against
``np.lexsort`` (Hypothesis): the same rows in the same order, ties and NaNs included."""

from __future__ import annotations

from unittest import mock

import numpy as np
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.reports.samples import _dense_rank, table_order

# values drawn from a few, so that ties (and -0.0 against 0.0) are common
VALUES = st.sampled_from([np.nan, -np.inf, -2.5, -0.0, 0.0, 1e-300, 0.01, 0.5, 1.0, np.inf])


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(VALUES | st.floats(-3, 3), VALUES | st.floats(0, 1)), max_size=60))
def test_the_table_order_is_lexsort_of_q_then_descending_score(rows):
    score = np.array([r[0] for r in rows], dtype=np.float64)
    q = np.array([r[1] for r in rows], dtype=np.float64)
    descending = -score
    descending[np.isnan(descending)] = np.inf
    want = np.lexsort((descending, q))
    got = table_order(score, q)
    assert got.dtype == np.int64
    assert got.tolist() == want.tolist()


def test_keys_too_wide_for_64_bits_take_two_sorts_then_lexsort():
    score, q = np.array([1.0, np.nan, 1.0, 2.0]), np.array([0.5, 0.5, np.nan, 0.5])
    rank_counts = "dflash_diag.reports.samples._dense_rank"
    with mock.patch("numpy.lexsort", wraps=np.lexsort) as lexsort:
        assert table_order(score, q).tolist() == [3, 0, 1, 2]
        with mock.patch(rank_counts, lambda x: (_real_rank(x), 2**40)):
            # (q ranks x score ranks x rows past 64 bits: the two sorts of the ranks)
            assert table_order(score, q).tolist() == [3, 0, 1, 2]
        assert not lexsort.called
        with mock.patch(rank_counts, lambda x: (_real_rank(x), 2**62)):
            assert table_order(score, q).tolist() == [3, 0, 1, 2]
        assert lexsort.called


def _real_rank(x: np.ndarray) -> np.ndarray:
    return _dense_rank(x)[0]  # (imported before any patch: the real ranks)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), max_size=80))
def test_two_sorts_of_ranks_are_lexsort(pairs):
    from dflash_diag.reports.samples import _by_ranks

    first = np.array([a for a, _ in pairs], dtype=np.int64)
    second = np.array([b for _, b in pairs], dtype=np.int64)
    assert _by_ranks(first, second).tolist() == np.lexsort((second, first)).tolist()
