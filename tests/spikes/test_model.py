"""The composition model's building blocks."""

from __future__ import annotations

import numpy as np
from budget import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dflash_diag.spikes.model import MIXTURE_BINS, MIXTURE_TOP, sample_cells

token_lengths = arrays(
    np.int64,
    st.integers(1, 400),
    elements=st.one_of(st.integers(0, 12), st.integers(1, 9000), st.sampled_from([8192])),
)


@settings(max_examples=examples(150), deadline=None)
@given(lengths=token_lengths, n_cat=st.one_of(st.none(), st.integers(1, 4)), seed=st.integers(0, 9))
# a quantile exactly at a length's end: 40 x 1 token are half of all 80 tokens
@example(lengths=np.array([1] * 40 + [2] * 2 + [36], dtype=np.int64), n_cat=None, seed=0)
def test_cells_from_counts_per_length_equal_the_sorted_quantiles(lengths, n_cat, seed):
    """Integer token lengths take their bins from counts per length (no sort); the bins
    are the token-weighted quantiles the sorted path finds (a float array takes it)."""
    cats = None if n_cat is None else np.random.default_rng(seed).integers(0, n_cat, lengths.size)
    cells, n = sample_cells(lengths, cats)
    want, want_n = sample_cells(lengths.astype(np.float64), cats)
    assert n == want_n
    np.testing.assert_array_equal(cells, want)


def test_length_bins_hold_equal_shares_of_tokens():
    """The bins are token-weighted: the 1,000 samples of 10 tokens and the 10 of 1,000
    tokens each hold half the tokens, so the ten long ones get a bin of their own."""
    lengths = np.array([10] * 1000 + [1000] * 10, dtype=np.int64)
    cells, n = sample_cells(lengths, None)
    assert n <= MIXTURE_BINS + len(MIXTURE_TOP)
    assert len(set(cells[:1000])) == 1 and len(set(cells[1000:])) == 1
    assert cells[0] != cells[-1]
