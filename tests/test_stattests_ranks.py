"""Spearman's correlation from ranks at hand is :func:`stattests.spearman`, to the bit."""

from __future__ import annotations

import numpy as np
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.stattests import average_ranks, spearman, spearman_of_ranks


@settings(max_examples=examples(100), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(3, 300), levels=st.integers(2, 50))
def test_spearman_of_ranks_is_spearman(seed, n, levels):
    """Ties (a few levels) or none; one sample ranked once, correlated with several."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, levels, n).astype(np.float64)
    ry = average_ranks(y)
    for _ in range(3):
        x = rng.normal(size=n) + 0.1 * y
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            continue
        assert spearman_of_ranks(average_ranks(x), ry) == spearman(x, y)
