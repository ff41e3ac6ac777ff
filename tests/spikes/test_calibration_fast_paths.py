"""The calibration's fast paths give the numbers of the plain code they replace, to the
bit: Student's t and the normal each computed only where :func:`t_sf` keeps it, the
Benjamini-Hochberg p-values only where they can be within the cut, the chance flags'
tail once for each distinct critical z."""

from __future__ import annotations

import numpy as np
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.spikes import calibrate as cal
from dflash_diag.stattests import t_sf


def plain_t_sf(t, df):
    """:func:`t_sf` as first written: both laws everywhere, one kept."""
    from scipy import special

    t = np.asarray(t, dtype=np.float64)
    df = np.asarray(df, dtype=np.float64)
    return np.where(
        np.isinf(df), special.ndtr(-t), special.stdtr(np.where(np.isinf(df), 1, df), -t)
    )


@settings(max_examples=examples(100), deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(0, 60),
    share_inf=st.sampled_from([0.0, 0.5, 1.0]),
    scalar_df=st.booleans(),
)
def test_t_sf_is_the_plain_one(seed, n, share_inf, scalar_df):
    rng = np.random.default_rng(seed)
    t = rng.normal(size=n) * 4
    df = np.where(rng.random(n) < share_inf, np.inf, rng.random(n) * 40 + 1)
    if scalar_df:
        df = df[0] if n else np.inf
    got, want = t_sf(t, df), plain_t_sf(t, df)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert float(t_sf(1.5, np.inf)) == float(plain_t_sf(1.5, np.inf))


def plain_critical_and_expected(z, mirror, k, rise_z, window, min_history=5):
    """:func:`calibrate`'s critical z and chance flags as first written: every
    p-value of the Benjamini-Hochberg cut and every point's tail computed."""
    from dflash_diag.stattests import t_quantiles

    tested = np.isfinite(z) & (np.arange(z.shape[0]) >= min_history)
    zt = z[tested]
    n = zt.size
    nu = np.maximum(cal.MAD_EFFICIENCY * k, cal.DF_MIN)
    nu_full = max(cal.MAD_EFFICIENCY * window, cal.DF_MIN)
    centre = max(float(np.median(zt)), 0.0)
    q25, q75 = np.quantile(zt, [0.25, 0.75])
    spread = max(float(q75 - q25) / (2 * float(t_quantiles(0.75, nu_full))), 1.0)
    tail = cal.null_tail(mirror[tested & np.isfinite(mirror)])
    budget = cal.FALSE_EVENT_BUDGET
    bonf = centre + spread * cal.t_quantiles_of_df(1.0 - budget / n, nu)
    crit = bonf
    if tail is not None:
        p_model = plain_t_sf((zt - centre) / spread, nu[tested])
        cut = cal._bh_cut(np.maximum(p_model, tail.sf(zt)), cal.FDR_LEVEL)
        if cut > budget / n:
            tail_z = tail.isf(cut)
            bh = np.maximum(centre + spread * cal.t_quantiles_of_df(1.0 - cut, nu), tail_z)
            crit = np.minimum(bonf, bh)
    crit = np.where(tested, crit, np.nan)
    expected = 0.0
    if tail is not None:
        need = np.maximum(crit, np.nan_to_num(rise_z, nan=0.0))[tested]
        expected = float(np.sum(tail.sf(need)))
    return crit, expected


@settings(max_examples=examples(40), deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(40, 3000),
    spikes=st.sampled_from([0.0, 0.01, 0.1, 0.3]),
    heavy=st.booleans(),
)
def test_the_critical_z_and_chance_flags_are_the_plain_ones(seed, n, spikes, heavy):
    """Noise with few or many high points (the Benjamini-Hochberg cut lowered or not),
    Gaussian or heavy-tailed, windows cut at the start."""
    rng = np.random.default_rng(seed)
    z = rng.standard_t(3, n) if heavy else rng.standard_normal(n)
    z[rng.random(n) < spikes] += rng.uniform(2, 12)
    z[rng.random(n) < 0.02] = np.nan
    mirror = -(rng.standard_t(3, n) if heavy else rng.standard_normal(n))
    window = 50
    k = np.minimum(np.arange(n) + 1, window).astype(np.float64)
    rise_z = np.where(rng.random(n) < 0.5, np.nan, rng.uniform(0, 8, n))
    got = cal.calibrate(z, mirror, k, rise_z, window)
    crit, expected = plain_critical_and_expected(z, mirror, k, rise_z, window)
    np.testing.assert_array_equal(got.critical, crit)
    assert got.expected_false_events == expected
