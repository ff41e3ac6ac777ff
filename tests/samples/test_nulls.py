"""The null's p-value against scipy's hypergeometric law, and Benjamini-Hochberg's q."""

from __future__ import annotations

import numpy as np
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import hypergeom

from dflash_diag.samples import bh_qvalues, order_pvalue


@st.composite
def draws(draw):
    n = draw(st.integers(2, 5000))
    k = draw(st.integers(1, min(n, 16)))
    a = draw(st.integers(0, min(k - 1, 12)))  # both the summed terms and scipy's sf
    n_ge = draw(st.integers(k - a, n))
    return n, k, a, n_ge


@settings(max_examples=examples(300), deadline=None)
@given(draws())
def test_order_pvalue_is_the_hypergeometric_tail(d):
    n, k, a, n_ge = d
    want = max(float(hypergeom.sf(k - a - 1, n, n_ge, k)), np.finfo(np.float64).tiny)
    got = float(order_pvalue(np.array([k]), np.array([n_ge]), n, a)[0])
    assert 0 < got <= 1
    assert abs(got - want) <= 1e-9 * want + 1e-300


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=60))
def test_q_is_at_least_p_and_keeps_the_order(p):
    p = np.array(p)
    q = bh_qvalues(p)
    assert (q >= p - 1e-15).all() and (q <= 1).all()
    order = np.argsort(p, kind="stable")
    assert (np.diff(q[order]) >= -1e-15).all()


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(draws(), min_size=1, max_size=20), st.integers(0, 3))
def test_order_pvalue_takes_one_count_of_points_per_sample(ds, a):
    ds = [(n, k, min(a, k - 1), max(g, k - min(a, k - 1))) for n, k, _, g in ds]
    for allow in {x[2] for x in ds}:
        rows = [x for x in ds if x[2] == allow]
        n, k, n_ge = (np.array([r[i] for r in rows]) for i in (0, 1, 3))
        one_by_one = [
            order_pvalue(k[i : i + 1], n_ge[i : i + 1], int(n[i]), allow)[0]
            for i in range(len(rows))
        ]
        np.testing.assert_allclose(order_pvalue(k, n_ge, n, allow), one_by_one, rtol=1e-12)
