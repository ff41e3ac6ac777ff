"""The composition model: a robust regression of the detrended metric on batch features.

A Huber regression (iteratively reweighted least squares, ``k = 1.345`` robust sigmas,
ridge ``1e-3 n`` on the standardised regressors) of the residual on
:data:`MODEL_FEATURES` and the category shares, so a few spikes cannot pull the fit.

- ``r2 = 1 - SSE/SST`` in-sample over the regular points: those whose residual lies
  within :data:`OUTLIER_SIGMAS` robust sigmas (``1.4826 MAD``) of its median.  A handful
  of gross outliers (an optimizer blow-up, the first points of a fast descent) would
  otherwise make both sums and say nothing about the other steps; ``n_outliers`` says
  how many were left out.  More than :data:`MAX_OUTLYING` of the points outlying are no
  handful: they are the run's own spikes (every batch holding one of the longest
  samples, say), the very thing the model is asked to explain, and every point is
  scored (:func:`regular_points`).  ``r2_quiet``: the same without the flagged spike
  points too;
- ``r2_cv``: blocked K-fold, :data:`CV_FOLDS` contiguous blocks of steps, each predicted
  by a model fitted on the others: ``1 - sum(held-out SSE) / SST`` over the regular
  points.

``log mean_len`` and its square let the model learn the direction and the shape of
"which batches are hard" from the run (short-is-hard and long-is-hard fit alike).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .windows import median_of

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy as np
    import pandas as pd

#: Points with batch features needed before a model or verdict is attempted.
MIN_POINTS = 30
#: Residuals further than this many robust sigmas from their median are left out of R².
OUTLIER_SIGMAS = 6.0
#: Outlying points over this share of the points are not left out of R² (the module
#: docstring).
MAX_OUTLYING = 0.1
#: Folds of the blocked cross-validation.
CV_FOLDS = 5
#: Regressors of the composition model (``cat_*`` shares are added when present).
MODEL_FEATURES = ("log_mean_len", "log_mean_len_sq", "len_cv", "log_n_samples", "padding_eff")


@dataclass(frozen=True)
class CompositionModel:
    """The fitted composition model (see the module docstring for the fit and the R²s).

    :param features: regressor names, in the order of ``coef``.
    :param coef: coefficients on standardised regressors (metric units per std).
    :param r2_cv_folds: held-out R² of each fold, to show how stable ``r2_cv`` is.
    :param resid_scale: 1.4826 x MAD of the model's residuals (metric units).
    """

    features: tuple[str, ...]
    coef: tuple[float, ...]
    intercept: float
    n: int
    n_outliers: int
    r2: float
    r2_quiet: float
    r2_cv: float
    r2_cv_folds: tuple[float, ...]
    resid_scale: float
    center: tuple[float, ...] = ()
    scale: tuple[float, ...] = ()
    lo: tuple[float, ...] = ()
    hi: tuple[float, ...] = ()

    def predict(self, design: np.ndarray) -> np.ndarray:
        """Predicted residual for raw regressor rows (clipped to the fitted range, so a
        counterfactual schedule is not extrapolated beyond what the run showed)."""
        import numpy as np

        x = np.clip(design, np.asarray(self.lo), np.asarray(self.hi))
        xs = (x - np.asarray(self.center)) / np.asarray(self.scale)
        return self.intercept + xs @ np.asarray(self.coef)


def design_matrix(
    features: pd.DataFrame | Mapping[str, np.ndarray],
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Regressors of the composition model from point features (NaN where missing): a
    frame of :func:`~dflash_diag.spikes.features.point_features`, or its columns."""
    import numpy as np

    def col(name: str) -> np.ndarray:
        return np.asarray(features[name], dtype=np.float64)

    with np.errstate(divide="ignore", invalid="ignore"):
        log_mean = np.log(col("mean_len"))
        known = log_mean[np.isfinite(log_mean)]  # (none: no point has a batch)
        centre = float(known.mean()) if known.size else float("nan")
        cols = {
            "log_mean_len": log_mean,
            "log_mean_len_sq": (log_mean - centre) ** 2,
            "len_cv": col("len_std") / col("mean_len"),
            "log_n_samples": np.log(col("n_samples")),
            "padding_eff": col("padding_eff"),
        }
    cats = sorted(str(c) for c in features if str(c).startswith("cat_"))
    for c in cats[:-1]:  # the shares sum to 1: one is implied by the others
        cols[c] = col(c)
    names = tuple(cols)
    return np.column_stack([cols[n] for n in names]), names


def _huber(x: np.ndarray, y: np.ndarray, iters: int = 30) -> tuple[float, np.ndarray]:
    """Huber IRLS on standardised ``x`` (intercept unpenalised, ridge 1e-3 x n).

    Each pass: ``beta = (A'WA + P)^-1 A'Wy``, residuals ``r = y - A beta``, robust
    sigma ``s = 1.4826 MAD(r)`` (or the std of ``r`` if 0), weights ``min(1, 1.345 s /
    |r|)``; stops when ``beta`` no longer moves.  The work arrays are reused across
    passes (a pass allocates nothing of length ``n`` but a partition's copy); the last
    pass allowed stops at its ``beta`` (``iters=1``: one ridge solve).  (BLAS sums the
    products in an order that depends on the arrays' layouts: ``A`` and ``WA`` stay
    row-major, whose last digits the printed coefficients keep.)"""
    import numpy as np

    n, k = x.shape
    a = np.column_stack([np.ones(n), x])
    pen = np.eye(k + 1) * 1e-3 * n
    pen[0, 0] = 0.0
    w = np.ones(n)
    beta = np.zeros(k + 1)
    aw = np.empty_like(a)
    r, dev = np.empty(n), np.empty(n)
    for it in range(iters):
        if it:
            np.multiply(a, w[:, None], out=aw)
        else:  # (unit weights: the same values, without a broadcast product)
            np.copyto(aw, a)
        beta_new = np.linalg.solve(a.T @ aw + pen, aw.T @ y)
        # (no pass follows, the last allowed or beta still: its weights would not be read)
        if it == iters - 1 or np.allclose(beta_new, beta, rtol=1e-8, atol=1e-12):
            beta = beta_new
            break
        np.matmul(a, beta_new, out=r)
        np.subtract(y, r, out=r)  # y - A beta
        _huber_weights(r, dev, w)
        beta = beta_new
    return float(beta[0]), beta[1:]


def _huber_weights(r: np.ndarray, dev: np.ndarray, w: np.ndarray) -> None:
    """The Huber weights of residuals ``r`` into ``w``: ``min(1, 1.345 s / |r|)``, ``s
    = 1.4826 MAD(r)`` (the std of ``r`` if 0, 1 if that is 0 too); ``dev`` is work
    space of ``r``'s size."""
    import numpy as np

    np.subtract(r, median_of(r), out=dev)
    s = 1.4826 * median_of(np.abs(dev, out=dev))
    s = s if s > 0 else float(np.std(r) or 1.0)
    np.maximum(np.abs(r, out=dev), 1e-300, out=dev)
    np.minimum(1.0, np.divide(1.345 * s, dev, out=dev), out=w)


def _r2(y: np.ndarray, pred: np.ndarray, mask: np.ndarray) -> float:
    """``1 - SSE/SST`` over ``mask`` (NaN with fewer than 3 points or no spread)."""
    import numpy as np

    if mask.sum() < 3:
        return float("nan")
    yy, pp = y[mask], pred[mask]
    sst = float(np.sum((yy - yy.mean()) ** 2))
    return 1 - float(np.sum((yy - pp) ** 2)) / sst if sst > 0 else float("nan")


def regular_points(y: np.ndarray) -> np.ndarray:
    """Which points of ``y`` (finite) R² is scored on: those within
    :data:`OUTLIER_SIGMAS` robust sigmas (``1.4826 MAD``) of the median, or all of them
    when the MAD is 0 or more than :data:`MAX_OUTLYING` of them lie further out."""
    import numpy as np

    med = median_of(y)
    spread = 1.4826 * median_of(np.abs(y - med))
    if not spread > 0:
        return np.ones(y.shape, dtype=bool)
    regular = np.abs(y - med) <= OUTLIER_SIGMAS * spread
    if (~regular).sum() > MAX_OUTLYING * y.size:
        regular[:] = True
    return regular


def r2_regular(y: np.ndarray, pred: np.ndarray) -> float:
    """``1 - SSE/SST`` over the regular points of ``y`` (:func:`regular_points`)."""
    return _r2(y, pred, regular_points(y))


def fit_model(
    design: np.ndarray,
    names: tuple[str, ...],
    y: np.ndarray,
    quiet: np.ndarray,
    robust: bool = True,
    cross_validate: bool = True,
) -> CompositionModel | None:
    """Fit the composition model on rows with finite values; None below MIN_POINTS.

    ``robust=False`` fits plain ridge least squares (one IRLS pass with unit weights):
    for the mixture model, whose rare cells (the longest samples) are learnt from the
    very points a Huber fit would down-weight.  ``cross_validate=False`` skips the
    blocked K-fold refits (``r2_cv`` NaN, no folds): for a caller that needs only the
    fit's predictions and residual scale, which are the same either way."""
    import numpy as np

    ok = np.isfinite(y) & np.isfinite(design).all(axis=1)
    n = int(ok.sum())
    every = n == ok.shape[0]
    rows = design if every else design[ok]
    keep = np.flatnonzero(np.ptp(rows, axis=0) > 0) if n else np.zeros(0, dtype=np.intp)
    if n < MIN_POINTS or not keep.size:
        return None
    x = rows[:, keep]  # (column-major: each column's mean and std summed pairwise)
    yy = np.ascontiguousarray(y) if every else y[ok]
    center, scale = x.mean(axis=0), x.std(axis=0)
    xs = (x - center) / scale
    iters = 30 if robust else 1
    b0, b = _huber(xs, yy, iters)
    resid = yy - (b0 + xs @ b)
    regular = regular_points(yy)
    r2 = _r2(yy, yy - resid, regular)
    r2_q = _r2(yy, yy - resid, regular & (quiet if every else quiet[ok]))
    r2_cv, fold_r2 = _cross_validated(xs.T, yy, regular, iters) if cross_validate else (np.nan, [])
    return CompositionModel(
        features=tuple(names[j] for j in keep),
        coef=tuple(float(v) for v in b),
        intercept=b0,
        n=n,
        n_outliers=int((~regular).sum()),
        r2=r2,
        r2_quiet=r2_q,
        r2_cv=r2_cv,
        r2_cv_folds=tuple(fold_r2),
        resid_scale=float(1.4826 * median_of(np.abs(resid - median_of(resid)))),
        center=tuple(float(v) for v in center),
        scale=tuple(float(v) for v in scale),
        lo=tuple(float(v) for v in x.min(axis=0)),
        hi=tuple(float(v) for v in x.max(axis=0)),
    )


def _cross_validated(
    z: np.ndarray, y: np.ndarray, regular: np.ndarray, iters: int
) -> tuple[float, list[float]]:
    """``r2_cv`` and each fold's R² of the Huber fit refitted on blocked K-fold splits:
    contiguous blocks of steps, so neighbours do not leak into a fold.

    ``z``: the full fit's standardised regressors, a row each (``(k, n)``).  A fold's
    refit standardises its training rows by their own mean and std, ``u = (z - m) /
    sd`` (a regressor constant there: 0), as a fit of those rows alone does; its sums
    are pooled from each block's moments (:class:`_Moments`), not summed again over
    the rows, and its Huber passes take out the down-weighted rows only
    (:func:`_fold_fit`)."""
    import numpy as np

    z = np.ascontiguousarray(z)
    n = y.shape[0]
    sizes = [n // CV_FOLDS + (f < n % CV_FOLDS) for f in range(CV_FOLDS)]  # (array_split's)
    edges = np.concatenate([[0], np.cumsum(sizes)])
    held = list(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True))
    blocks = [_Moments.of(z[:, lo:hi], y[lo:hi]) for lo, hi in held]
    pred = np.empty_like(y)
    fold_r2 = []
    for f, (lo, hi) in enumerate(held):
        train = _Moments.pooled([b for g, b in enumerate(blocks) if g != f])
        offset, gamma = _fold_fit(z, y, (lo, hi), train, iters)
        np.matmul(gamma, z[:, lo:hi], out=pred[lo:hi])
        pred[lo:hi] += offset
        r2_f = _r2(y[lo:hi], pred[lo:hi], regular[lo:hi])
        if np.isfinite(r2_f):
            fold_r2.append(r2_f)
    return _r2(y, pred, regular), fold_r2


@dataclass(frozen=True)
class _Moments:
    """The sums a least-squares fit reads from a block of rows (regressors ``z``, a
    row each in ``(k, n)``, and ``y``), about the block's own means.

    :param n: rows.
    :param mean: ``mean(z)`` per regressor; ``ybar``: ``mean(y)``.
    :param scatter: ``sum (z - mean)(z - mean)'`` (``k x k``).
    :param cross: ``sum (z - mean)(y - ybar)``.
    :param lo: ``min(z)`` per regressor; ``hi``: ``max(z)``.
    """

    n: int
    mean: np.ndarray
    ybar: float
    scatter: np.ndarray
    cross: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @classmethod
    def of(cls, z: np.ndarray, y: np.ndarray) -> _Moments:
        """The moments of the rows ``z`` (``(k, n)``, ``n >= 1``) and ``y``."""
        mean = z.mean(axis=1)
        d = z - mean[:, None]
        ybar = float(y.mean())
        return cls(z.shape[1], mean, ybar, d @ d.T, d @ (y - ybar), z.min(axis=1), z.max(axis=1))

    @classmethod
    def pooled(cls, parts: list[_Moments]) -> _Moments:
        """The moments of the rows of all ``parts`` together: ``scatter = sum_b
        (scatter_b + n_b (mean_b - mean)(mean_b - mean)')``, ``cross`` alike (Chan,
        Golub & LeVeque 1979, "Updating formulae and a pairwise algorithm for
        computing sample variances"): no large sums subtracted."""
        import numpy as np

        n = sum(p.n for p in parts)
        mean = np.sum([p.n * p.mean for p in parts], axis=0) / n
        ybar = sum(p.n * p.ybar for p in parts) / n
        scatter, cross = np.zeros_like(parts[0].scatter), np.zeros_like(parts[0].cross)
        for p in parts:
            dm = p.mean - mean
            scatter += p.scatter + p.n * np.outer(dm, dm)
            cross += p.cross + p.n * (p.ybar - ybar) * dm
        lo = np.min([p.lo for p in parts], axis=0)
        hi = np.max([p.hi for p in parts], axis=0)
        return cls(n, mean, ybar, scatter, cross, lo, hi)


def _fold_fit(
    z: np.ndarray, y: np.ndarray, held: tuple[int, int], train: _Moments, iters: int
) -> tuple[float, np.ndarray]:
    """The Huber IRLS of :func:`_huber` on every row of ``z`` (``(k, n)``) and ``y`` outside
    ``held = (lo, hi)``, whose moments are ``train``, on their own standardisation
    ``u = (z - m) / sd``: ``(offset, gamma)``, its prediction for a row being ``offset
    + gamma . z`` (``gamma = beta / sd``, ``offset = beta_0 - m . gamma``; 0 for a
    regressor constant on those rows).

    With ``u`` centred, unit weights give ``A'A = [[n, 0], [0, S / (sd sd')]]`` and
    ``A'y = [n ybar, cross / sd]`` (``S`` the scatter); a later pass subtracts
    ``sum (1 - w) a a'`` and ``sum (1 - w) a y`` over the rows whose weight is below
    1 (some 20% of them under Gaussian noise), so a pass costs the residuals, their
    median and MAD, and a product over those rows."""
    import numpy as np

    lo, hi = held
    vary = np.flatnonzero(train.hi > train.lo)
    sd = np.sqrt(np.diag(train.scatter)[vary] / train.n)
    m = train.mean[vary]
    gram = np.zeros((vary.size + 1, vary.size + 1))
    gram[0, 0] = train.n
    gram[1:, 1:] = train.scatter[np.ix_(vary, vary)] / np.outer(sd, sd)
    rhs = np.concatenate([[train.n * train.ybar], train.cross[vary] / sd])
    pen = np.eye(vary.size + 1) * 1e-3 * train.n
    pen[0, 0] = 0.0
    gram0, rhs0 = gram, rhs
    n_t = train.n
    zv = z if vary.size == z.shape[0] else z[vary]
    unscale = np.concatenate([[1.0], 1.0 / sd])
    r, dev, w = np.empty(n_t), np.empty(n_t), np.empty(n_t)
    beta = np.zeros(vary.size + 1)
    for it in range(iters):
        beta_new = np.linalg.solve(gram + pen, rhs)
        if it == iters - 1 or np.allclose(beta_new, beta, rtol=1e-8, atol=1e-12):
            beta = beta_new
            break
        offset, gamma = _prediction(beta_new, vary, sd, m, z.shape[0])
        for part, rows in ((r[:lo], slice(0, lo)), (r[lo:], slice(hi, None))):
            np.matmul(gamma, z[:, rows], out=part)
            np.subtract(y[rows], part, out=part)
        r -= offset
        _huber_weights(r, dev, w)
        gram, rhs = _down_weighted(zv, y, w, (lo, hi), m)
        gram *= unscale[:, None] * unscale  # (to u = v / sd)
        rhs *= unscale
        gram, rhs = gram0 - gram, rhs0 - rhs
        beta = beta_new
    return _prediction(beta, vary, sd, m, z.shape[0])


def _down_weighted(
    z: np.ndarray, y: np.ndarray, w: np.ndarray, held: tuple[int, int], m: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``sum (1 - w) b b'`` and ``sum (1 - w) b y`` over the training rows whose weight
    ``w`` is below 1, ``b = [1, z - m]`` (``w``: the weights of the rows of ``z``
    (``(k, n)``) and ``y`` outside ``held = (lo, hi)``, in order)."""
    import numpy as np

    lo, hi = held
    down = np.flatnonzero(w < 1.0)
    rows = down + (down >= lo) * (hi - lo)  # (their rows in z and y)
    b = np.empty((z.shape[0] + 1, down.size))
    b[0] = 1.0
    np.take(z, rows, axis=1, out=b[1:])
    b[1:] -= m[:, None]
    bw = b * np.subtract(1.0, w[down])
    return bw @ b.T, bw @ y[rows]


def _prediction(
    beta: np.ndarray, vary: np.ndarray, sd: np.ndarray, m: np.ndarray, k: int
) -> tuple[float, np.ndarray]:
    """``(offset, gamma)`` of a fold's coefficients ``beta`` on ``u = (z[vary] - m) /
    sd``: ``offset + gamma . z`` is ``beta_0 + beta[1:] . u`` (``gamma`` 0 off
    ``vary``)."""
    import numpy as np

    gamma = np.zeros(k)
    gamma[vary] = beta[1:] / sd
    return float(beta[0] - m @ gamma[vary]), gamma


def model_predict(
    model: CompositionModel,
    features: pd.DataFrame,
    matrix: tuple[np.ndarray, tuple[str, ...]] | None = None,
) -> np.ndarray:
    """The model's predicted residual for each row of point features (NaN if missing);
    ``matrix``: their :func:`design_matrix`, if at hand."""
    import numpy as np

    design, names = design_matrix(features) if matrix is None else matrix
    cols = [names.index(f) if f in names else -1 for f in model.features]
    x = np.column_stack([design[:, j] if j >= 0 else np.zeros(len(design)) for j in cols])
    out = np.full(x.shape[0], np.nan)
    ok = np.isfinite(x).all(axis=1)
    out[ok] = model.predict(x[ok])
    return out


#: Length bins of the mixture model (token-weighted quantiles of the sample lengths),
#: plus finer edges in the long tail, where difficulty can jump (:data:`MIXTURE_TOP`).
MIXTURE_BINS = 8
MIXTURE_TOP = (0.95, 0.98, 0.99, 0.995, 0.999)


def sample_cells(lengths: np.ndarray, categories: np.ndarray | None) -> tuple[np.ndarray, int]:
    """A cell per sample: its length bin (:data:`MIXTURE_BINS` token-weighted quantiles and
    the :data:`MIXTURE_TOP` ones) crossed with its category code; returns
    ``(cell per sample, number of cells)``, the cells int16 (int32 past 2**15 cells:
    a quarter of the memory of int64 over the manifest, made in place)."""
    import numpy as np

    from ..arrays import length_counts

    codes, n_cat = _category_codes(categories)
    qs = _quantiles()
    # (at most qs.size + 1 bins)
    small = np.int16 if (qs.size + 1) * n_cat < 1 << 15 else np.int32
    raw = np.asarray(lengths)
    counts = length_counts(raw)
    if counts is not None:
        # token lengths: the same quantiles from counts per length, without a sort of
        # every sample
        bin_of_length, n_bins = _bin_of_length(counts)
        bins = bin_of_length.astype(small)[raw]
    else:
        x = raw.astype(np.float64)
        order = np.sort(x)
        cum = np.cumsum(order) / max(order.sum(), 1.0)
        edges = np.unique(order[np.minimum(np.searchsorted(cum, qs), order.size - 1)])
        bins = np.searchsorted(edges, x, side="right").astype(small)
        n_bins = edges.size + 1
    if codes is None:
        return bins, n_bins
    bins *= n_cat
    bins += codes
    return bins, n_bins * n_cat


def _quantiles() -> np.ndarray:
    """The token-weighted quantiles whose lengths bound the mixture's length bins."""
    import numpy as np

    return np.concatenate([np.linspace(0, 1, MIXTURE_BINS + 1)[1:-1], MIXTURE_TOP])


def _category_codes(categories: np.ndarray | None) -> tuple[np.ndarray | None, int]:
    """The category codes as integers (None: none) and how many there are."""
    import numpy as np

    codes = None if categories is None else np.asarray(categories)
    if codes is not None and codes.dtype.kind not in "iu":
        codes = codes.astype(np.int64)
    return codes, 1 if codes is None or not codes.size else int(codes.max()) + 1


def _bin_of_length(counts: np.ndarray) -> tuple[np.ndarray, int]:
    """The length bin of every length ``0 .. len(counts) - 1`` (int64), from the count
    of samples of each length, and the number of bins."""
    import numpy as np

    values = np.flatnonzero(counts)
    mass = np.cumsum(values * counts[values]).astype(np.float64)  # exact below 2^53
    cum = mass / max(mass[-1], 1.0)
    edges = np.unique(values[np.minimum(np.searchsorted(cum, _quantiles()), values.size - 1)])
    edges = edges.astype(np.float64)
    return np.searchsorted(edges, np.arange(counts.size), side="right"), edges.size + 1


@dataclass(frozen=True, eq=False)
class MixtureCells:
    """Each sample's mixture cell (:func:`sample_cells`) and real tokens, as the token
    shares of :mod:`~dflash_diag.spikes.variance` read them, entry by entry.

    Plain (``code`` None): ``cell`` and ``tokens`` hold each sample's.  Coded: ``code``
    holds each sample's ``length x n_cat + category`` (int16 where it fits), and
    ``cell`` and ``tokens`` (float64) each code's: tables of a few thousand values
    that stay in cache, so an entry costs one gather of 2 bytes from the samples
    instead of two (a cell of 2 bytes, a length of 8).  The same cells and tokens.

    :param lengths: the lengths they were made from (kept to check a caller's).
    """

    cell: np.ndarray
    tokens: np.ndarray
    n_cells: int
    lengths: np.ndarray
    code: np.ndarray | None = None

    def at(self, where: np.ndarray | slice) -> tuple[np.ndarray, np.ndarray]:
        """The cells and the float64 tokens of the samples (or entries) ``where``."""
        import numpy as np

        if self.code is None:
            return self.cell[where], self.tokens[where].astype(np.float64)
        # (take with an intp index: twice the speed of indexing with an int16 one)
        code = self.code[where].astype(np.intp)
        return self.cell.take(code), self.tokens.take(code)

    def entries(self, ids: np.ndarray) -> MixtureCells:
        """The same, entry by entry of ``ids`` (each entry's sample), read a chunk of
        entries at a time into the smallest integers that hold them: a pool's sample
        ids (int64) can then be freed before its sums."""
        import numpy as np

        from ..arrays import chunks

        if self.code is None:
            tokens, cell = entry_cells(ids, self.tokens, self.cell)
            return MixtureCells(cell, tokens, self.n_cells, self.lengths)
        code = np.empty(len(ids), dtype=self.code.dtype)
        for part in chunks(len(ids)):
            code[part] = self.code.take(ids[part])
        return MixtureCells(self.cell, self.tokens, self.n_cells, self.lengths, code)


def entry_cells(
    ids: np.ndarray, lengths: np.ndarray, cells: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each entry's real tokens and cell (``ids``: each entry's sample), read a chunk of
    entries at a time into the smallest integers that hold them: a pool's sample ids
    (int64) can then be freed before its sums, for a quarter of their bytes.

    >>> import numpy as np
    >>> t, c = entry_cells(np.array([2, 0]), np.array([7, 9, 40000]), np.array([1, 2, 3]))
    >>> t.tolist(), t.dtype.name, c.tolist()
    ([40000, 7], 'int32', [3, 1])
    """
    import numpy as np

    from ..arrays import chunks

    top = int(lengths.max()) if lengths.size else 0
    dtype = np.int16 if top < 1 << 15 else np.int32 if top < 1 << 31 else np.int64
    tokens = np.empty(len(ids), dtype=dtype)
    cell = np.empty(len(ids), dtype=cells.dtype)
    for part in chunks(len(ids)):
        at = ids[part]
        tokens[part] = lengths[at]
        cell[part] = cells[at]
    return tokens, cell


#: Codes a coded :class:`MixtureCells` may have without regard to the samples (past
#: it, at most one a sample).
CODES_FREE = 1 << 20


def mixture_cells(lengths: np.ndarray, categories: np.ndarray | None) -> MixtureCells:
    """:func:`sample_cells` of ``lengths`` and ``categories`` with the lengths as
    tokens, coded (:class:`MixtureCells`) when the lengths are token counts and the
    codes few (at most :data:`CODES_FREE`, or one a sample), else plain."""
    import numpy as np

    from ..arrays import length_counts

    raw = np.asarray(lengths)
    codes, n_cat = _category_codes(categories)
    counts = length_counts(raw)
    negative = codes is not None and codes.size and int(codes.min()) < 0
    n_codes = 0 if counts is None else counts.size * n_cat
    if counts is None or negative or n_codes > max(CODES_FREE, raw.size):
        cells, n_cells = sample_cells(raw, categories)
        return MixtureCells(cells, raw, n_cells, raw)
    bin_of_length, n_bins = _bin_of_length(counts)
    small = np.int16 if n_codes <= 1 << 15 else np.int32 if n_codes <= 1 << 31 else np.int64
    code: np.ndarray = raw.astype(small)
    if codes is not None:
        code *= n_cat
        code += codes
    cell = bin_of_length[:, None] * n_cat + np.arange(n_cat)
    tokens = np.repeat(np.arange(counts.size, dtype=np.float64), n_cat)
    return MixtureCells(cell.reshape(-1), tokens, n_bins * n_cat, raw, code)
