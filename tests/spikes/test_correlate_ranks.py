"""The correlations with batch features rank the residual once where they can."""

from __future__ import annotations

import numpy as np
import pandas as pd
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.spikes.correlate import correlations
from dflash_diag.stattests import pearson, spearman


def plain(points: pd.DataFrame, feature: str) -> tuple[float, float, float, float] | None:
    """Each feature's Pearson and Spearman over its own finite points, ranked anew."""
    x = points[feature].to_numpy(dtype=np.float64)
    y = points["residual"].to_numpy(dtype=np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 10 or np.ptp(x[ok]) == 0 or np.ptp(y[ok]) == 0:
        return None
    return (*pearson(x[ok], y[ok]), *spearman(x[ok], y[ok]))


@settings(max_examples=examples(60), deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(8, 60),
    holes=st.lists(st.sampled_from(["none", "y", "x", "both"]), min_size=1, max_size=4),
    levels=st.integers(2, 50),
)
def test_each_features_correlations_are_its_own(seed, n, holes, levels):
    # Features finite where the residual is share its ranks; the others (a NaN of their
    # own) rank their own points: every figure as a feature ranked alone gives it.
    rng = np.random.default_rng(seed)
    y = rng.integers(0, levels, n).astype(np.float64)
    if "y" in holes or "both" in holes:
        y[rng.choice(n, max(1, n // 10), replace=False)] = np.nan
    cols = {"residual": y}
    for i, hole in enumerate(holes):
        x = rng.integers(0, levels, n).astype(np.float64)
        if hole in ("x", "both"):
            x[rng.choice(n, max(1, n // 8), replace=False)] = np.inf
        cols[f"f{i}"] = x
    points = pd.DataFrame(cols)
    names = [f"f{i}" for i in range(len(holes))]
    for c in correlations(points, names):
        want = plain(points, c.feature)
        if want is None:
            assert c.spearman is None and c.pearson is None
        else:
            assert (c.pearson, c.pearson_p, c.spearman, c.spearman_p) == want
