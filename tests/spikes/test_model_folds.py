"""The composition model's held-out refits, from pooled block moments, against the plain
refits they replace.

The plain reference below is the cross-validation as first written: each fold's
training rows copied, standardised by their own mean and std, and refitted by
:func:`~dflash_diag.spikes.model._huber` from scratch.  The fast path sums the products
in another order (block moments pooled, the down-weighted rows taken out of the unit-
weight sums), so the figures agree to the last few digits, not to the bit; the full fit
they come with is the same to the bit.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.spikes import model
from dflash_diag.spikes.model import CV_FOLDS, _huber, _Moments, _r2, fit_model
from dflash_diag.spikes.windows import median_of

#: How near the refits' R²s must be (relative to max(1, |R²|)).
TOL = 1e-9


def plain_cross_validated(x, y, regular, iters):
    """The held-out refits as first written: ``(r2_cv, fold R²s, predictions)``."""
    folds = np.array_split(np.arange(y.shape[0]), CV_FOLDS)
    pred = np.empty_like(y)
    fold_r2 = []
    for idx in folds:
        train = np.ones(y.shape[0], dtype=bool)
        train[idx] = False
        xt = x[train]
        c, s = xt.mean(axis=0), xt.std(axis=0)
        s = np.where(s > 0, s, 1.0)
        fb0, fb = _huber((xt - c) / s, y[train], iters)
        pred[idx] = fb0 + ((x[idx] - c) / s) @ fb
        r2_f = _r2(y[idx], pred[idx], regular[idx])
        if np.isfinite(r2_f):
            fold_r2.append(r2_f)
    return _r2(y, pred, regular), fold_r2, pred


def plain_fit_model(design, names, y, quiet, robust=True):
    """:func:`fit_model` as first written (a column at a time, copies of the rows)."""
    ok = np.isfinite(y) & np.isfinite(design).all(axis=1)
    keep = [j for j in range(design.shape[1]) if np.ptp(design[ok, j]) > 0] if ok.any() else []
    if ok.sum() < model.MIN_POINTS or not keep:
        return None
    x, yy = design[ok][:, keep], y[ok]
    center, scale = x.mean(axis=0), x.std(axis=0)
    xs = (x - center) / scale
    iters = 30 if robust else 1
    b0, b = _huber(xs, yy, iters)
    resid = yy - (b0 + xs @ b)
    med = median_of(yy)
    spread = 1.4826 * median_of(np.abs(yy - med))
    regular = (
        np.abs(yy - med) <= model.OUTLIER_SIGMAS * spread
        if spread > 0
        else np.ones_like(yy, dtype=bool)
    )
    if (~regular).sum() > model.MAX_OUTLYING * len(yy):  # (no handful: every point)
        regular = np.ones_like(yy, dtype=bool)
    r2_cv, folds, _ = plain_cross_validated(x, yy, regular, iters)
    return model.CompositionModel(
        features=tuple(names[j] for j in keep),
        coef=tuple(float(v) for v in b),
        intercept=b0,
        n=int(ok.sum()),
        n_outliers=int((~regular).sum()),
        r2=_r2(yy, yy - resid, regular),
        r2_quiet=_r2(yy, yy - resid, regular & quiet[ok]),
        r2_cv=r2_cv,
        r2_cv_folds=tuple(folds),
        resid_scale=float(1.4826 * median_of(np.abs(resid - median_of(resid)))),
        center=tuple(float(v) for v in center),
        scale=tuple(float(v) for v in scale),
        lo=tuple(float(v) for v in x.min(axis=0)),
        hi=tuple(float(v) for v in x.max(axis=0)),
    )


def near(a: float, b: float) -> bool:
    return abs(a - b) <= TOL * max(1.0, abs(a)) or (np.isnan(a) and np.isnan(b))


def make(seed: int, n: int, k: int, outliers: int, rare: bool, missing: bool):
    """A design of ``k`` regressors (one zero outside a block of rows when ``rare``: a
    regressor constant in some folds' training rows), a noisy response with gross
    outliers, and NaNs when ``missing``."""
    rng = np.random.default_rng(seed)
    design = rng.normal(size=(n, k)) * 10.0 ** rng.integers(-3, 4, k) + rng.normal(size=k)
    if rare:
        design[:, 0] = 0.0
        at = slice(n // 3, n // 3 + max(2, n // 8))
        design[at, 0] = rng.random(at.stop - at.start)
    y = design @ rng.normal(size=k) + rng.standard_t(3, size=n)
    y[rng.choice(n, min(outliers, n), replace=False)] += 30.0
    if missing:
        y[rng.random(n) < 0.05] = np.nan
        design[rng.random(n) < 0.05, -1] = np.nan
    return design, y


@settings(max_examples=examples(60), deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(30, 600),
    k=st.integers(1, 6),
    outliers=st.integers(0, 20),
    robust=st.booleans(),
    rare=st.booleans(),
    missing=st.booleans(),
)
def test_the_fit_is_the_plain_one_and_its_refits_agree(seed, n, k, outliers, robust, rare, missing):
    """Everything but the held-out refits is the same to the bit; ``r2_cv`` and each
    fold's R² agree to ``TOL``, with the same folds kept."""
    design, y = make(seed, n, k, outliers, rare, missing)
    quiet = np.random.default_rng(seed).random(n) < 0.9
    names = tuple(f"x{j}" for j in range(k))
    got = fit_model(design, names, y, quiet, robust=robust)
    want = plain_fit_model(design, names, y, quiet, robust=robust)
    if want is None:
        assert got is None
        return
    assert got is not None
    for f in dataclasses.fields(want):
        if f.name not in ("r2_cv", "r2_cv_folds"):
            assert getattr(got, f.name) == getattr(want, f.name), f.name
    assert near(got.r2_cv, want.r2_cv)
    assert len(got.r2_cv_folds) == len(want.r2_cv_folds)
    assert all(near(a, b) for a, b in zip(got.r2_cv_folds, want.r2_cv_folds, strict=True))


@settings(max_examples=examples(60), deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    sizes=st.lists(st.integers(1, 50), min_size=1, max_size=6),
    k=st.integers(1, 4),
)
def test_pooled_moments_are_those_of_the_rows_together(seed, sizes, k):
    """Block moments pooled (Chan, Golub & LeVeque) equal the moments of all rows."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(k, sum(sizes))) * 3.0 + rng.normal(size=(k, 1)) * 5.0
    y = rng.normal(size=sum(sizes)) + 2.0
    edges = np.concatenate([[0], np.cumsum(sizes)])
    parts = [_Moments.of(z[:, a:b], y[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)]
    got, want = _Moments.pooled(parts), _Moments.of(z, y)
    assert got.n == want.n
    scale = 1.0 + np.abs(want.scatter).max()
    for name in ("mean", "ybar", "scatter", "cross"):
        np.testing.assert_allclose(
            getattr(got, name), getattr(want, name), rtol=0, atol=1e-12 * scale
        )
    np.testing.assert_array_equal(got.lo, want.lo)
    np.testing.assert_array_equal(got.hi, want.hi)


def test_the_refits_are_nearer_an_exact_reference_than_the_plain_ones():
    """On a Huber fit of 5,000 points with outliers, the held-out predictions of the
    fast path and the plain path against the same refits in long double (64-bit
    mantissa, the plain algorithm, the same passes): the fast path at least as near."""
    design, y = make(3, 5000, 5, 40, rare=False, missing=False)
    x = design
    c, s = x.mean(axis=0), x.std(axis=0)
    xs = (x - c) / s
    med = median_of(y)
    regular = np.abs(y - med) <= 6 * 1.4826 * median_of(np.abs(y - med))
    _, _, plain = plain_cross_validated(x, y, regular, 30)
    got = fast_predictions(xs, y, 30)
    exact = long_double_predictions(x, y, 30)
    err = lambda p: float(np.max(np.abs(p - exact)) / np.max(np.abs(exact)))  # noqa: E731
    assert err(got) <= max(err(plain), 1e-15)
    assert err(got) < 1e-13


def fast_predictions(xs, y, iters):
    """The fast path's held-out predictions (as :func:`model._cross_validated` makes)."""
    z = np.ascontiguousarray(xs.T)
    n = y.shape[0]
    edges = np.concatenate(
        [[0], np.cumsum([len(f) for f in np.array_split(np.arange(n), CV_FOLDS)])]
    )
    held = list(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True))
    blocks = [_Moments.of(z[:, lo:hi], y[lo:hi]) for lo, hi in held]
    pred = np.empty_like(y)
    for f, (lo, hi) in enumerate(held):
        train = _Moments.pooled([b for g, b in enumerate(blocks) if g != f])
        offset, gamma = model._fold_fit(z, y, (lo, hi), train, iters)
        pred[lo:hi] = offset + gamma @ z[:, lo:hi]
    return pred


def long_double_predictions(x, y, iters):
    """The plain held-out refits in ``np.longdouble``, each fold run for as many passes
    as its float64 fit takes (so both stop at the same pass)."""
    ld = np.longdouble
    xl, yl = x.astype(ld), y.astype(ld)
    pred = np.empty(y.shape[0], dtype=ld)
    for idx in np.array_split(np.arange(y.shape[0]), CV_FOLDS):
        train = np.ones(y.shape[0], dtype=bool)
        train[idx] = False
        xt = xl[train]
        c = xt.mean(axis=0)
        s = np.sqrt(((xt - c) ** 2).mean(axis=0))
        u = (xt - c) / s
        beta = long_double_irls(u, yl[train], passes(x[train], y[train], iters))
        pred[idx] = beta[0] + ((xl[idx] - c) / s) @ beta[1:]
    return pred.astype(np.float64)


def passes(xt, yt, iters):
    """How many passes the float64 IRLS takes on these training rows."""
    c, s = xt.mean(axis=0), xt.std(axis=0)
    u = (xt - c) / s
    count = 0
    original = model._huber_weights

    def counted(*args):
        nonlocal count
        count += 1
        original(*args)

    model._huber_weights = counted
    try:
        _huber(u, yt, iters)
    finally:
        model._huber_weights = original
    return min(count + 1, iters)


def long_double_irls(u, y, n_passes):
    """The IRLS of :func:`_huber`, ``n_passes`` passes, in long double."""
    ld = np.longdouble
    n, k = u.shape
    a = np.concatenate([np.ones((n, 1), dtype=ld), u], axis=1)
    pen = np.eye(k + 1, dtype=ld) * (ld(1e-3) * n)
    pen[0, 0] = 0
    w = np.ones(n, dtype=ld)
    for it in range(n_passes):
        aw = a * w[:, None]
        beta = solve_long_double(a.T @ aw + pen, aw.T @ y)
        if it == n_passes - 1:
            return beta
        r = y - a @ beta
        s = ld("1.4826") * np.median(np.abs(r - np.median(r)))
        w = np.minimum(ld(1), ld("1.345") * s / np.maximum(np.abs(r), ld(1e-300)))
    raise AssertionError


def solve_long_double(a, b):
    """Gaussian elimination with partial pivoting (numpy's solve has no long double)."""
    a, b = a.copy(), b.copy()
    n = b.shape[0]
    for i in range(n):
        p = i + int(np.argmax(np.abs(a[i:, i])))
        a[[i, p]], b[[i, p]] = a[[p, i]], b[[p, i]]
        f = a[i + 1 :, i] / a[i, i]
        a[i + 1 :] -= f[:, None] * a[i]
        b[i + 1 :] -= f * b[i]
    x = np.zeros(n, dtype=a.dtype)
    for i in range(n - 1, -1, -1):
        x[i] = (b[i] - a[i, i + 1 :] @ x[i + 1 :]) / a[i, i]
    return x
