"""The tests and distributions of dflash_diag.stattests against scipy.stats itself."""

from __future__ import annotations

import numpy as np
import pytest
from budget import examples
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy import stats

from dflash_diag import stattests

# samples with ties (small integers) or spread floats, 3 to 80 values
samples = st.integers(3, 80).flatmap(
    lambda n: st.tuples(
        *[
            arrays(
                np.float64,
                n,
                elements=st.one_of(
                    st.integers(0, 5).map(float), st.floats(-1e3, 1e3, allow_nan=False)
                ),
            )
        ]
        * 2
    )
)


def _close(got: float, want: float) -> bool:
    return got == pytest.approx(want, rel=1e-7, abs=1e-12)


def _same_test(got: tuple[float, float], want, n: int) -> bool:
    """r equal to rounding; p too, to the precision ``1 - |r|`` leaves it: r's rounding
    (1e-16) is a relative error of about 1e-16 / (1 - |r|) in p.  Within 1e-12 of +-1,
    p turns on r's last bits (1 - 1.1e-16 and 1.0 give 1e-8 and 0 on 1 degree of
    freedom): there both must be at most the p-value of ``|r| = 1 - 1e-12``."""
    r, p = got
    if not r == pytest.approx(want.statistic, abs=1e-12):
        return False
    gap = 1 - abs(want.statistic)
    if gap < 1e-12:
        df, near = n - 2, 1 - 1e-12
        bound = 2 * stats.t.sf(near * np.sqrt(df / ((1 - near) * (1 + near))), df)
        return p <= bound and want.pvalue <= bound
    return p == pytest.approx(want.pvalue, rel=1e-7 + 1e-13 / gap, abs=1e-12)


@pytest.mark.slow
@settings(max_examples=examples(200), deadline=None)
@given(samples)
def test_pearson_and_spearman_are_scipys(xy):
    x, y = xy
    assume(np.ptp(x) > 0 and np.ptp(y) > 0)
    assert _same_test(stattests.pearson(x, y), stats.pearsonr(x, y), x.size)
    assert _same_test(stattests.spearman(x, y), stats.spearmanr(x, y), x.size)


@settings(max_examples=examples(100), deadline=None)
@given(arrays(np.float64, st.integers(0, 60), elements=st.integers(-3, 3).map(float)))
def test_average_ranks_are_rankdatas(x):
    np.testing.assert_array_equal(stattests.average_ranks(x), stats.rankdata(x))


@settings(max_examples=examples(100), deadline=None)
@given(arrays(np.float64, st.integers(2, 60), elements=st.floats(-100, 100)))
def test_mean_above_zero_is_the_one_sided_t_test(v):
    assume(np.std(v) > 1e-6)
    want = stats.ttest_1samp(v, 0.0, alternative="greater").pvalue
    assert _close(stattests.mean_above_zero_p(v), want)


@pytest.mark.parametrize("df", [1, 2.5, 7, 30, 1000])
@pytest.mark.parametrize("q", [0.025, 0.5, 0.975])
def test_distributions_are_scipys(df, q):
    assert _close(stattests.t_quantile(q, df), stats.t.ppf(q, df))
    assert _close(stattests.f_quantile(q, df, 2 * df + 1), stats.f.ppf(q, df, 2 * df + 1))
    for x in (0.1, 1.0, 4.0):
        assert _close(stattests.f_sf(x, df, 3), stats.f.sf(x, df, 3))
        assert _close(stattests.normal_sf(x - 2), stats.norm.sf(x - 2))


def test_a_perfect_correlation_has_p_zero():
    assert stattests.pearson([1, 2, 3, 4], [2, 4, 6, 8]) == (1.0, 0.0)
    assert stattests.spearman([1, 2, 3, 4], [4, 3, 2, 1])[1] == 0.0


@settings(max_examples=examples(200), deadline=None)
@given(
    arrays(
        np.float64,
        st.tuples(st.integers(1, 30), st.integers(1, 12)),
        elements=st.one_of(st.floats(-1e6, 1e6), st.just(np.nan)),
    ),
    st.floats(0.0, 100.0),
)
def test_row_percentile_is_numpys_nanpercentile(values, pct):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows
        want = np.nanpercentile(values, pct, axis=1)
    got = stattests.row_percentile(values, pct)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9, equal_nan=True)
