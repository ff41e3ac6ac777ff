"""Gradient-variance proxies of a run and its schedule: :func:`variance_proxies`.

What each number is:

- **length ICC** and **adjacent-batch length correlation** of the schedule (see
  :mod:`dflash_diag.batches.stats`): how length-homogeneous batches are, and how much a
  batch's mean length predicts the next one's (lag-1 autocorrelation of step mean length);
- **composition share**: the composition model's R² (in-sample and cross-validated), the
  share of the detrended metric's step-to-step variance batch features explain;
- **grad_norm CV**: the median over windows of ``window`` points of ``std / mean`` of
  grad_norm (local, so the run's trend does not count), and the Spearman correlation of
  the detrended grad_norm (``g / rolling median``) with tokens and mean length per point;
- **gradient noise scale** ``B_simple = tr(Σ) / |G|²`` (McCandlish et al. 2018,
  arXiv 1812.06162): from ``E|G_B|² = |G|² + tr(Σ)/B``, a least-squares line of
  ``grad_norm²`` on ``1/B`` (``B`` = tokens in the step) is fitted in every cell of
  (window of :data:`GNS_WINDOW` points) x (length stratum, a tercile of mean length:
  sorted batches confound ``B`` with length); intercepts ``a_c ~ |G|²``, slopes
  ``b_c ~ tr(Σ)``; ``B_simple = sum b_c / sum a_c`` (ratio of averages, as gpt-neox does,
  since G drifts), with a 95% percentile bootstrap CI over cells.  "Not enough data"
  when no cell has :data:`GNS_MIN_POINTS` points with ``1/B`` varying by at least
  :data:`GNS_MIN_SPREAD` (coefficient of variation), when ``sum a_c <= 0`` or
  ``sum b_c <= 0``, when a one-sided t test of the cells' slopes does not support
  ``tr(Σ) > 0`` at p < 0.025, or when over 2.5% of the bootstrap draws give
  ``sum a <= 0`` or ``sum b <= 0`` (the CI would include 0);
- **counterfactual**: the step-to-step variance of the metric predicted under another
  strategy's replay (same manifest, seed, budget) by a *mixture model*: a batch's
  residual = sum over cells (length bin x category) of its share of real tokens in the
  cell times the cell's difficulty, fitted on the run by ridge least squares (not Huber:
  the rare cells of the longest samples are learnt from the spikes they cause).
  Loss is a token mean, so this applies to batches of any composition without
  extrapolating.  Predicted variance = ``var(model(batches)) + var(model residuals)``,
  the second part assumed unchanged; ``share_removed = 1 - that / the same for the
  actual schedule``.  The other strategies are replayed with numpy's shuffle (any
  random stream is as representative as the run's, and it is vectorised).  It assumes
  the model's state does not change with the schedule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..data import Progress

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from ..data import Manifest, Replay, ScheduleParams
    from .attribute import Attribution
    from .detect import Detection
    from .model import MixtureCells


GNS_WINDOW = 100
GNS_MIN_POINTS = 10
GNS_MIN_SPREAD = 0.02
GNS_STRATA = 3
GNS_BOOTSTRAP = 1000
#: Share of bootstrap draws that must give |G|² > 0 and tr(Σ) > 0 (the 95% CI excludes 0).
GNS_VALID_DRAWS = 0.975
COUNTERFACTUAL_STRATEGIES = ("bucketed", "random")
#: Samples summed at once into the counterfactual's token shares: bounds the temporaries
#: (a few arrays of this many 8-byte values) whatever the manifest's size.
SHARE_CHUNK = 1 << 19
GNS_ASSUMPTIONS = (
    "grad_norm is the pre-clip norm of the full averaged gradient",
    "B is counted in the loss's normalisation units (here: real tokens per step)",
    "tokens within a sequence are correlated, so B overstates independent samples",
    f"|G| and Σ are steady within a window of {GNS_WINDOW} logged points and a length stratum",
)

NO_STRATA = "no length strata (no manifest): B is confounded with sample length"


@dataclass(frozen=True)
class NoiseScale:
    """``B_simple`` (tokens) with its CI, or None and the ``reason``."""

    b_simple: float | None
    ci: tuple[float, float] | None
    g2: float | None
    trace_sigma: float | None
    n_cells: int
    batch_tokens: float | None
    reason: str = ""
    assumptions: tuple[str, ...] = GNS_ASSUMPTIONS


@dataclass(frozen=True)
class Counterfactual:
    """Predicted step-to-step variance of the metric under ``strategy``."""

    strategy: str
    predicted_var: float | None
    share_removed: float | None
    reason: str = ""


@dataclass(frozen=True)
class VarianceReport:
    """The variance panel.  Any field is None when its inputs are missing.

    :param metric_var: variance of the detrended metric (metric units squared).
    :param current_var: the mixture model's view of it for the actual schedule.
    :param mixture_r2_cv: held-out R² of the mixture model behind the counterfactual.
    """

    length_icc: float | None = None
    length_icc_ci: tuple[float, float] | None = None
    adjacent_length_corr: float | None = None
    adjacent_length_corr_p: float | None = None
    composition_r2: float | None = None
    composition_r2_cv: float | None = None
    metric_var: float | None = None
    current_var: float | None = None
    mixture_r2_cv: float | None = None
    grad_norm_cv: float | None = None
    grad_norm_corr: dict[str, dict[str, float]] | None = None
    noise_scale: NoiseScale | None = None
    counterfactual: tuple[Counterfactual, ...] = ()


def schedule_spread(replay: Replay) -> tuple[Any, Any, Any, Any]:
    """``(length_icc, its CI, adjacent length corr, its p)`` of a replayed schedule."""
    from ..batches.stats import batch_moments, lag1_corr, length_icc

    # (the micro-batches' sizes, token sums and longest from the replay's table: only
    # their sums of squares need the samples)
    icc, ci, _ = length_icc(batch_moments(replay, table=True))
    adj, p = lag1_corr(replay.steps["mean_len"].to_numpy(dtype=float))
    return icc, ci, adj, p


def window_cvs(x: np.ndarray, w: int) -> np.ndarray:
    """``std / mean`` of each whole window ``x[i : i + w]``, ``i = 0, w, 2w, ...`` (a
    partial last window left out), scale-free: computed on ``x / max|x|`` of the window,
    so that a grad norm of 1e200 does not overflow its square (NaN for an all-zero
    window).  One ``(windows, w)`` table: each row is reduced as ``np.std`` and
    ``np.mean`` of the window alone reduce it, so the same numbers as window by window.

    >>> import numpy as np
    >>> window_cvs(np.array([2.0, 2.0, 0.0, 0.0, 5.0]), 2).tolist()
    [0.0, nan]
    """
    import numpy as np

    rows = x[: x.shape[0] // w * w].reshape(-1, w)
    top = np.max(np.abs(rows), axis=1)
    live = top > 0  # (an all-zero window: NaN, as 0 / 0)
    y = rows[live] / top[live, None]
    out = np.full(rows.shape[0], np.nan)
    out[live] = np.std(y, axis=1) / np.mean(y, axis=1)
    return out


def grad_norm_stats(
    grad: np.ndarray, features: pd.DataFrame | None, window: int
) -> tuple[float | None, dict[str, dict[str, float]] | None]:
    """Local CV of grad_norm and Spearman of detrended grad_norm with batch features."""
    import numpy as np

    from ..stattests import spearman
    from .correlate import detrend

    g = np.asarray(grad, dtype=np.float64)
    ok = np.isfinite(g)
    if ok.sum() < 2 * window and ok.sum() < 20:
        return None, None
    gf = g[ok]
    w = min(window, gf.size)
    cvs = window_cvs(gf, w)
    cvs = cvs[np.isfinite(cvs)]
    cv = float(np.median(cvs)) if cvs.size else None
    if features is None:
        return cv, None
    trend, _ = detrend(g, window)
    rel = g / trend
    corr = {}
    for f in ("tokens", "mean_len", "n_samples"):
        x = features[f].to_numpy(dtype=np.float64)
        m = np.isfinite(x) & np.isfinite(rel)
        if m.sum() >= 10 and np.ptp(x[m]) > 0 and np.ptp(rel[m]) > 0:
            rho, p = spearman(x[m], rel[m])
            corr[f] = {"spearman": float(rho), "p": float(p)}
    return cv, corr


def noise_scale(
    grad: np.ndarray,
    tokens: np.ndarray,
    mean_len: np.ndarray | None = None,
    window: int = GNS_WINDOW,
    n_boot: int = GNS_BOOTSTRAP,
    seed: int = 0,
) -> NoiseScale:
    """``B_simple`` from per-step grad norms and batch sizes (module docstring).

    :param grad: grad_norm per point; :param tokens: batch size B per point (tokens).
    :param mean_len: mean sample length per point, for the strata (None: one stratum).

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> b = rng.uniform(1000, 4000, 400)
    >>> g = np.sqrt(2.0 + 6000.0 / b)          # |G|^2 = 2, tr(Σ) = 6000: B_simple = 3000
    >>> round(noise_scale(g, b).b_simple)
    3000
    """
    import numpy as np

    with np.errstate(over="ignore"):  # (a norm past 1e154 squares to inf: left out below)
        g2 = np.asarray(grad, dtype=np.float64) ** 2
    b = np.asarray(tokens, dtype=np.float64)
    ok = np.isfinite(g2) & np.isfinite(b) & (b > 0)
    med_b = float(np.median(b[ok])) if ok.any() else None
    strata = np.zeros(b.shape[0], dtype=np.int64)
    if mean_len is not None and np.isfinite(mean_len).sum() >= GNS_STRATA * GNS_MIN_POINTS:
        ml = np.asarray(mean_len, dtype=np.float64)
        ok &= np.isfinite(ml)
        edges = np.quantile(ml[ok], np.linspace(0, 1, GNS_STRATA + 1)[1:-1])
        strata = np.searchsorted(edges, ml, side="right")
    idx = np.flatnonzero(ok)
    # the cells in order: by window of ``window`` usable points, then by stratum
    key = np.arange(idx.size) // window
    key *= GNS_STRATA
    key += strata[idx]
    n, spread, icpt, slope = line_fits(1.0 / b[idx], g2[idx], key)
    big = n >= GNS_MIN_POINTS
    best_spread = float(spread[big].max()) if big.any() else 0.0
    use = big & (spread >= GNS_MIN_SPREAD)
    a, sl = icpt[use], slope[use]
    if not a.size:
        return NoiseScale(
            None, None, None, None, 0, med_b,
            f"not enough data: batch size B varies too little (1/B varies by at most "
            f"{best_spread:.1%} within a window and stratum; needs {GNS_MIN_SPREAD:.0%})",
        )  # fmt: skip
    if a.sum() <= 0:
        return NoiseScale(
            None, None, float(a.mean()), float(sl.mean()), a.size, med_b,
            "not enough data: the |G|² estimate is <= 0 (noise dominates the fit)",
        )  # fmt: skip
    if sl.sum() <= 0:
        return NoiseScale(
            None, None, float(a.mean()), float(sl.mean()), a.size, med_b,
            "not enough data: grad_norm² does not fall as B grows (the tr(Σ) estimate is <= 0)",
        )  # fmt: skip
    # With few windows a bootstrap CI is too narrow; a one-sided t test of the windows'
    # slopes says whether tr(Σ) > 0 is supported at all.
    p_slope = _positive_p(sl)
    if p_slope >= 0.025:
        return NoiseScale(
            None, None, float(a.mean()), float(sl.mean()), a.size, med_b,
            f"not enough data: tr(Σ) > 0 is not supported (one-sided t test over "
            f"{a.size} windows, p = {p_slope:.2g})",
        )  # fmt: skip
    est = float(sl.sum() / a.sum())
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, a.size, size=(n_boot, a.size))
    sa, ss = a[draws].sum(axis=1), sl[draws].sum(axis=1)
    valid = (sa > 0) & (ss > 0)
    notes = GNS_ASSUMPTIONS if mean_len is not None else (*GNS_ASSUMPTIONS, NO_STRATA)
    if valid.mean() < GNS_VALID_DRAWS or a.size < 2:
        return NoiseScale(
            None, None, float(a.mean()), float(sl.mean()), a.size, med_b,
            f"not enough data: {a.size} usable window(s), and |G|² or tr(Σ) <= 0 in "
            f"{1 - valid.mean():.0%} of bootstrap draws (a CI needs 2+ windows and <= 2.5%)",
            notes,
        )  # fmt: skip
    q = np.quantile(ss[valid] / sa[valid], [0.025, 0.975])
    ci = (float(q[0]), float(q[1]))
    return NoiseScale(est, ci, float(a.mean()), float(sl.mean()), a.size, med_b, "", notes)


def line_fits(x: np.ndarray, y: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per group ``k`` of the points with ``key == k`` (``k = 0 .. key.max()``): their
    count ``n_k``, the spread of ``x`` (``std / mean``, population std) and the
    least-squares line ``y ~ icpt + slope x``, in closed form over centred sums:
    ``slope = sum dx dy / sum dx^2``, ``icpt = mean(y) - slope mean(x)`` (``dx = x -
    mean(x)``, ``dy = y - mean(y)`` in the group; the mean of ``x`` refined once by the
    mean of ``dx``).  A group of fewer than 2 points or of one ``x`` has NaN or inf in
    its line; none has NaN counts.

    >>> import numpy as np
    >>> n, spread, icpt, slope = line_fits(np.array([1.0, 2, 3, 1, 1]),
    ...                                    np.array([3.0, 5, 7, 0, 0]), np.array([0, 0, 0, 1, 1]))
    >>> n.tolist(), icpt[0].item(), slope[0].item(), spread[1].item()
    ([3, 2], 1.0, 2.0, 0.0)
    """
    import numpy as np

    n = np.bincount(key)
    with np.errstate(invalid="ignore", divide="ignore"):
        mx = np.bincount(key, weights=x) / n
        my = np.bincount(key, weights=y) / n
        dx = x - mx[key]
        mx += np.bincount(key, weights=dx) / n
        dx = x - mx[key]
        dy = y - my[key]
        my += np.bincount(key, weights=dy) / n
        dy = y - my[key]
        sxx = np.bincount(key, weights=dx * dx)
        slope = np.bincount(key, weights=dx * dy) / sxx
        icpt = my - slope * mx
        spread = np.sqrt(sxx / n) / mx
    return n, spread, icpt, slope


def _positive_p(values: np.ndarray) -> float:
    """One-sided p-value of "mean > 0" (Student t); 1.0 when it cannot be tested."""
    import numpy as np

    from ..stattests import mean_above_zero_p

    if values.size < 2:
        return 1.0
    if np.std(values) <= 1e-9 * abs(float(np.mean(values))):  # identical: no test needed
        return 0.0 if np.mean(values) > 0 else 1.0
    return mean_above_zero_p(values)


def counterfactual(
    attribution: Attribution,
    replay: Replay,
    source: Manifest | np.ndarray,
    strategies: tuple[str, ...] = COUNTERFACTUAL_STRATEGIES,
    interval: int = 1,
    progress: Progress | None = None,
) -> tuple[float | None, float | None, tuple[Counterfactual, ...]]:
    """``(current_var, mixture model r2_cv, per-strategy Counterfactual)``.

    The model here is the mixture model of :func:`point_shares`
    (a batch's expected residual = its token shares by length bin x category, times a
    learnt difficulty per cell), fitted on the run: unlike the feature model it applies
    to batches of any composition, so other schedules are predicted without extrapolation.
    """
    import numpy as np

    from ..batches.stats import params_for
    from ..errors import InputError
    from .features import micro_points
    from .model import fit_model, mixture_cells

    pts = attribution.points
    steps = pts["step"].to_numpy(dtype=np.int64)
    res = pts["residual"].to_numpy(dtype=np.float64)
    cells = mixture_cells(replay.lengths, getattr(source, "categories", None))
    names = tuple(f"cell_{k}" for k in range(cells.n_cells))

    quiet = ~pts["flagged"].to_numpy()
    idx = micro_points(replay, steps, interval, attribution.covers, attribution.metric_rank)
    shares = point_shares(replay, idx, steps.shape[0], cells)
    model = fit_model(shares, names, res, quiet, robust=False)
    if model is None:
        why = "too few points for the mixture model"
        return None, None, tuple(Counterfactual(s, None, None, why) for s in strategies)
    keep = [names.index(f) for f in model.features]
    cur_x = shares[:, keep]
    ok = np.isfinite(cur_x).all(axis=1) & np.isfinite(res)
    pred = model.predict(cur_x[ok])
    noise = float(np.var(res[ok] - pred))
    current = float(np.var(pred)) + noise
    del shares, cur_x, pred  # (before the other strategies' replays)
    out = []
    todo = [s for s in strategies if s != replay.params.strategy]
    for i, name in enumerate(todo):
        try:
            # Any shuffle stream of the strategy is as representative as the run's own, so
            # numpy's vectorised shuffle stands in for a slow per-element convention.
            params = params_for(name, replay.params, replay.lengths)
            seeding = "once" if params.seeding in ("global", "loader") else params.seeding
            params = params.replace(rng="numpy", seeding=seeding)
            epochs = int(replay.steps["epoch"].max()) + 1
            # (the run's lengths are capped as the strategy's would be: no copy of them)
            x = replayed_shares(
                replay.lengths, params, epochs, interval, attribution.covers,
                attribution.metric_rank, cells,
            )  # fmt: skip
        except InputError as e:
            out.append(Counterfactual(name, None, None, f"cannot replay: {e.what}"))
            continue
        x = _finite_rows(x, keep)
        # (x is this loop's own: predicted in place)
        var = float(np.var(predict_in_place(model, x))) + noise if x.size else None
        del x  # (before the next strategy's replay)
        share = 1 - var / current if var is not None and current > 0 else None
        out.append(Counterfactual(name, var, share))
        if progress is not None:
            progress(i + 1, len(todo))
    return current, model.r2_cv, tuple(out)


def _finite_rows(x: np.ndarray, keep: list[int]) -> np.ndarray:
    """``x[:, keep]``'s rows that are finite, in C order (the prediction's sums follow
    the layout): ``x`` itself when it is in C order, every column kept and every row
    finite (no copy), else a copy.

    >>> import numpy as np
    >>> x = np.array([[1.0, 2.0], [3.0, 4.0]])
    >>> _finite_rows(x, [0, 1]) is x, _finite_rows(x, [1]).tolist()
    (True, [[2.0], [4.0]])
    """
    import numpy as np

    if keep != list(range(x.shape[1])):
        x = x[:, keep]  # (in Fortran order)
    finite = np.isfinite(x).all(axis=1)
    if x.flags.c_contiguous and finite.all():
        return x
    return x[finite]


def predict_in_place(model: Any, x: np.ndarray) -> np.ndarray:
    """``model.predict(x)`` (a :class:`~dflash_diag.spikes.model.CompositionModel`),
    ``x`` overwritten on the way: clipped to the fitted range, centred and scaled in
    place, then ``intercept + x @ coef`` as ``predict`` computes it.  The same
    operations on the same values, the product over the same whole array, so the same
    numbers; without ``predict``'s three temporaries of ``x``'s size (the
    counterfactual's table is ``points x cells`` float64, 46 MB at 213,000 points).

    :param x: a C-order float64 array of the caller's own, not read after.
    """
    import numpy as np

    np.clip(x, np.asarray(model.lo), np.asarray(model.hi), out=x)
    x -= np.asarray(model.center)
    x /= np.asarray(model.scale)
    return model.intercept + x @ np.asarray(model.coef)  # type: ignore[no-any-return]


def point_shares(
    replay: Replay, point_of_micro: np.ndarray, n_points: int, cells: MixtureCells
) -> np.ndarray:
    """``(n_points, n_cells)``: each point's share of real tokens from each cell, a chunk
    of micro-batches at a time (no per-sample temporaries of the whole replay).

    Loss is a mean over a batch's tokens, so a batch's expected loss is the token-weighted
    mean of its samples' difficulty: the shares are the regressors of the mixture model,
    meaningful for any schedule's batches (nothing to extrapolate).  The sums are of whole
    token counts, exact in float64 in any order.

    :param cells: each sample's cell and tokens (:func:`~dflash_diag.spikes.model.
        mixture_cells` of the replay's lengths).
    """
    import numpy as np

    rows = np.flatnonzero(point_of_micro >= 0)
    tot = np.zeros((n_points, cells.n_cells))
    _add_tokens(tot, replay.offsets, point_of_micro[rows], rows, cells, ids=replay.sample_ids)
    return _shares(tot)


def replayed_shares(
    source: Manifest | np.ndarray,
    params: ScheduleParams,
    epochs: int,
    interval: int,
    covers: str,
    rank: int | None,
    cells: MixtureCells,
) -> np.ndarray:
    """``(points, n_cells)``: the mixture shares (:func:`point_shares`) of every logged
    point of the replay of ``params`` over ``epochs``, a point every ``interval`` of its
    steps (``covers``, ``rank``: as :func:`~dflash_diag.spikes.features.micro_points`
    takes them), without building the replay.

    The same numbers as ``point_shares`` of ``replay(source, params, epochs)``: the
    epochs are those of :func:`~dflash_diag.schedule.replay.replay_epochs`, and each
    micro-batch's real tokens by cell are added, a chunk of micro-batches at a time,
    to its step's row, the steps' rows then to their points'.  Only the order of the
    sums differs, and every sum is of whole token counts, exact in float64 (below
    2**53 tokens a point).  No sample ids are kept (8 bytes a sample an epoch), nor
    the replay's tables.

    :param cells: each sample's cell and tokens (:func:`~dflash_diag.spikes.model.
        mixture_cells`) of the lengths the strategy sees, ``source``'s capped at
        ``params.max_seq_len``.
    :raises InputError: as :func:`~dflash_diag.schedule.replay.replay` raises it.
    :raises ValueError: when ``cells`` are of other lengths.
    """
    import numpy as np

    from ..schedule.replay import new_dropped, replay_epochs, replay_setup
    from .features import point_index

    setup = replay_setup(source, params, epochs)  # (which checks the lengths: as_lengths)
    if cells.lengths is not setup.lengths and not np.array_equal(cells.lengths, setup.lengths):
        raise ValueError("the cells are not of the lengths the strategy sees")
    n_cells = cells.n_cells
    # per epoch: its steps and their real tokens by cell (an epoch's steps follow the
    # last epoch's, so the epochs' rows in turn are the steps in order)
    steps_of: list[np.ndarray] = []
    tokens_of: list[np.ndarray] = []
    for ep in replay_epochs(setup, params, new_dropped(), features=False):
        # only the steps, the batches and (for one rank's metric) the ranks are read:
        # the epoch's other columns go before its sums are made
        step, pool, chosen = ep.rows["step"], ep.pool, ep.chosen
        use = None if rank is None else ep.rows["rank"] == rank
        del ep
        if not step.size:
            continue
        lo = int(step.min())
        step -= lo  # (the epoch's own column, handed over: shifted in place)
        acc = np.zeros((int(step.max()) + 1, n_cells))
        has = np.zeros(len(acc), dtype=bool)  # the steps the replay has
        has[step] = True
        if use is not None:
            step, chosen = step[use], chosen[use]
        entries = cells.entries(pool.ids)
        offsets = pool.offsets
        del pool  # (its sample ids: the entries' tokens and cells are all that is read)
        if not _add_tokens_by_batch(acc, offsets, step, chosen, entries):
            _add_tokens(acc, offsets, step, chosen, entries)
        del offsets, step, chosen, entries
        steps_of.append(np.flatnonzero(has) + lo)
        tokens_of.append(acc if has.all() else acc[has])
        del acc
    del setup  # (the strategy's prepared state, before the shares are made)
    steps = _joined(steps_of, np.zeros(0, dtype=np.int64))
    by_step = _joined(tokens_of, np.zeros((0, n_cells)))
    logged = steps[interval - 1 :: interval] if interval > 1 else steps
    point = point_index(steps, logged, interval, covers)
    if np.array_equal(point, np.arange(len(steps))):
        tot = by_step
    else:
        tot = np.zeros((len(logged), n_cells))
        np.add.at(tot, point[point >= 0], by_step[point >= 0])
    return _shares(tot)


def _joined(parts: list[np.ndarray], empty: np.ndarray) -> np.ndarray:
    """``parts`` one after another (the one part itself, no copy; ``empty``: none)."""
    import numpy as np

    if len(parts) == 1:
        return parts.pop()
    return np.concatenate(parts) if parts else empty


def _shares(tot: np.ndarray) -> np.ndarray:
    """Each row's tokens by cell over its total: the shares (NaN for a row of none).
    ``tot`` (a fresh array of the caller's) is divided in place."""
    import numpy as np

    s = tot.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        np.divide(tot, s, out=tot)
    tot[~(s[:, 0] > 0)] = np.nan
    return tot


def _add_tokens(
    acc: np.ndarray,
    offsets: np.ndarray,
    row: np.ndarray,
    chosen: np.ndarray,
    cells: MixtureCells,
    ids: np.ndarray | None = None,
) -> None:
    """Add to ``acc[row[i], c]`` the real tokens of the samples of cell ``c`` in the
    batch ``chosen[i]`` (entries ``offsets[chosen[i]]`` to ``offsets[chosen[i] + 1]``),
    for every ``i`` and ``c``, about :data:`SHARE_CHUNK` samples at a time (a chunk's
    counts span ``row``'s range over it: rows in order keep them small).

    :param cells: each entry's cell and real tokens; with ``ids`` (each entry's
        sample), each sample's.
    """
    import numpy as np

    from ..arrays import group_chunks

    if not len(chosen):
        return
    n_cells = cells.n_cells
    # the samples before each chosen batch (the sizes, a chunk's at a time, from them)
    sizes = np.diff(offsets)[chosen]
    done = np.zeros(len(chosen) + 1, dtype=np.int64)
    np.cumsum(sizes, out=done[1:])
    small = _narrow_cells(cells)
    for a, b in group_chunks(done, SHARE_CHUNK):
        at = _entries_of(offsets, chosen[a:b])
        if ids is not None:
            at = ids[at]
        part = row[a:b]
        lo = int(part.min())
        span = int(part.max()) - lo + 1
        # (each batch's first key, then repeated for its samples: one pass fewer)
        key = np.repeat((part - lo) * n_cells, sizes[a:b])
        w = _add_cells(key, at, cells, small)
        acc[lo : lo + span] += np.bincount(key, weights=w, minlength=span * n_cells).reshape(
            span, n_cells
        )


def _add_cells(
    key: np.ndarray, at: np.ndarray | slice, cells: MixtureCells, small: np.ndarray | None
) -> np.ndarray:
    """Add to ``key`` (a key an entry of ``at``) each entry's cell, and return its real
    tokens: read behind its code through ``small`` (:func:`_narrow_cells`) when there is
    one, else by ``cells.at``."""
    import numpy as np

    if small is None:
        cell, w = cells.at(at)
        key += cell
        return w  # type: ignore[no-any-return]
    # (take with an intp index: twice the speed of indexing with an int16 one)
    code = cells.code[at].astype(np.intp)  # type: ignore[index]
    key += small.take(code)
    return cells.tokens.take(code)  # type: ignore[no-any-return]


def _add_tokens_by_batch(
    acc: np.ndarray, offsets: np.ndarray, row: np.ndarray, chosen: np.ndarray, cells: MixtureCells
) -> bool:
    """:func:`_add_tokens` (``ids`` None) with the entries read in the batches' own order
    (a pass along them, where ``chosen``'s order jumps a cache line a batch), each
    sample's tokens added at its batch's row by ``np.add.at``; whole token counts, so
    the same sums.  Done only when ``chosen`` is out of order, uses every batch at most
    once and at least half of them (else False: nothing done).

    :param acc: C-contiguous, ``row``'s rows by ``cells.n_cells``.
    """
    import numpy as np

    from ..arrays import group_chunks

    n_batches = len(offsets) - 1
    if not len(chosen) or 2 * len(chosen) < n_batches or _is_run(chosen):
        return False
    row_of = np.full(n_batches, -1, dtype=np.int64)  # (-1: a batch no row uses)
    row_of[chosen] = row
    if np.count_nonzero(row_of >= 0) != len(chosen):  # a batch used twice
        return False
    n_cells = cells.n_cells
    row_of *= n_cells  # (each batch's first key; negative for the unused)
    sizes = np.diff(offsets)
    small = _narrow_cells(cells)
    flat = acc.reshape(-1)
    for a, b in group_chunks(offsets, SHARE_CHUNK):
        key = np.repeat(row_of[a:b], sizes[a:b])
        at = slice(int(offsets[a]), int(offsets[b]))
        w = _add_cells(key, at, cells, small)
        if int(row_of[a:b].min()) < 0:  # (a chunk with a batch no row uses)
            used = key >= 0
            key, w = key[used], w[used]
        np.add.at(flat, key, w)
    return True


def _is_run(chosen: np.ndarray) -> bool:
    """Whether ``chosen`` are consecutive batches ``k, k + 1, ...``."""
    import numpy as np

    first, last = int(chosen[0]), int(chosen[-1])
    return last - first == len(chosen) - 1 and bool((np.diff(chosen) == 1).all())


def _narrow_cells(cells: MixtureCells) -> np.ndarray | None:
    """A coded ``cells``' cell of each code as the smallest integers that hold it (a
    table of a few thousand values: its gathers write a byte or two a sample, not 8);
    None for plain cells.

    >>> import numpy as np
    >>> from dflash_diag.spikes.model import mixture_cells
    >>> _narrow_cells(mixture_cells(np.array([5, 9, 9]), None)).dtype.name
    'int8'
    """
    import numpy as np

    if cells.code is None:
        return None
    top = cells.n_cells - 1
    dtype = np.int8 if top < 1 << 7 else np.int16 if top < 1 << 15 else np.int64
    return cells.cell.astype(dtype)


def _entries_of(offsets: np.ndarray, chosen: np.ndarray) -> np.ndarray | slice:
    """The entries of the batches ``chosen`` in their order: :func:`~dflash_diag.schedule.
    base.segment_positions`, or, when ``chosen`` are consecutive batches (a replay's
    rows, a random strategy's epoch), the one range they span, as a slice (what it
    reads is then a view, not a gather).

    >>> import numpy as np
    >>> _entries_of(np.array([0, 2, 5, 6]), np.array([1, 2]))
    slice(2, 6, None)
    >>> _entries_of(np.array([0, 2, 5, 6]), np.array([2, 0])).tolist()
    [5, 0, 1]
    """

    from ..schedule.base import segment_positions

    if _is_run(chosen):
        first, last = int(chosen[0]), int(chosen[-1])
        return slice(int(offsets[first]), int(offsets[last + 1]))
    return segment_positions(offsets, chosen)


def variance_proxies(
    detection: Detection,
    log_table: pd.DataFrame,
    attribution: Attribution | None = None,
    replay: Replay | None = None,
    source: Manifest | np.ndarray | None = None,
    strategies: tuple[str, ...] = COUNTERFACTUAL_STRATEGIES,
    progress: Progress | None = None,
) -> VarianceReport:
    """The variance panel from what is available (a log alone gives the grad_norm part).

    :param detection: the detection (its steps align every array).
    :param log_table: the RunLog table (grad_norm and tokens are read from it).
    :param attribution: with a replay: composition share and per-point features.
    :param replay: the run's replay: ICC, adjacent correlation, counterfactual.
    :param source: the manifest, to replay other strategies for the counterfactual.
    """
    import numpy as np

    t = log_table.drop_duplicates("step", keep="last").set_index("step")
    t = t.reindex(detection.steps)

    def col(name: str) -> np.ndarray | None:
        if name not in t.columns:
            return None
        v = t[name].to_numpy(dtype=np.float64)
        return v if np.isfinite(v).any() else None

    grad, tokens = col("grad_norm"), col("tokens")
    feats = attribution.points if attribution is not None else None
    out: dict[str, Any] = {"metric_var": None}
    if attribution is not None:
        res = attribution.points["residual"].to_numpy(dtype=np.float64)
        res = res[~np.isnan(res)]  # (a log of one point has no residual)
        out["metric_var"] = float(np.var(res)) if res.size else None
        if attribution.model is not None:
            out["composition_r2"] = attribution.model.r2
            out["composition_r2_cv"] = attribution.model.r2_cv
    if replay is not None:
        icc, ci, adj, p = schedule_spread(replay)
        out.update(length_icc=icc, length_icc_ci=ci, adjacent_length_corr=adj)
        out["adjacent_length_corr_p"] = p
    if grad is not None:
        cv, corr = grad_norm_stats(grad, feats, detection.window)
        out.update(grad_norm_cv=cv, grad_norm_corr=corr)
        if tokens is None and feats is not None:
            tokens = feats["tokens"].to_numpy(dtype=np.float64)
        if tokens is not None:
            ml = feats["mean_len"].to_numpy(dtype=np.float64) if feats is not None else None
            out["noise_scale"] = noise_scale(grad, tokens, ml)
        else:
            out["noise_scale"] = NoiseScale(
                None, None, None, None, 0, None, "no batch sizes: the log has no tokens column"
            )
    if attribution is not None and replay is not None and source is not None:
        cur, r2_cv, cf = counterfactual(
            attribution, replay, source, strategies, detection.log_interval, progress
        )
        out.update(current_var=cur, mixture_r2_cv=r2_cv, counterfactual=cf)
    return VarianceReport(**out)
