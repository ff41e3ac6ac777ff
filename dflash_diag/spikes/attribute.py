"""Line every logged point up with its batches and say which spikes the batch explains.

:func:`attribute_spikes` takes a :class:`~dflash_diag.spikes.detect.Detection` and a
:class:`~dflash_diag.data.Replay` and returns an :class:`Attribution`:

1. **Detrending.**  ``residual = x - trend`` with ``trend`` the centred robust-line
   baseline of the metric over the detection window
   (:func:`~dflash_diag.spikes.correlate.detrend`): what is left is
   the step-to-step variation that batches could explain.
2. **Correlations** of the residual with each batch feature
   (:mod:`~dflash_diag.spikes.correlate`): Pearson and Spearman with p-values and 95%
   confidence intervals.
3. **Composition model** (:mod:`dflash_diag.spikes.model`): a Huber regression of the
   residual on batch features, so a few spikes cannot pull the fit, with ``r2``
   in-sample, ``r2_quiet`` without the flagged points and ``r2_cv`` from blocked K-fold
   over steps.  The direction and shape of "which batches are hard" are learnt from the
   run (short-is-hard and long-is-hard fit alike).
4. **Per-spike evidence and verdict** (:class:`SpikeEvidence`), the rule
   (:func:`verdict`):

   - ``composition`` when its batch predicts at least :data:`EXPLAINED_HIGH` (50%) of
     the observed rise ``value - baseline`` and composition predicts held-out steps
     (``r2_cv`` or ``r2_similar >= R2_MIN``); or when, composition predicting held-out
     steps, the batches closest to it in length are themselves elevated (median residual
     >= :data:`SIMILAR_ELEVATED` residual scales) and its rise is no more than their
     :data:`SIMILAR_HIGH_PCT` percentile (batches like it rise as much); or when the same
     batch came back (sharing at least half its micro-batches) and was high again
     (:func:`~dflash_diag.spikes.recurrence.high_again`).  "Its batch predicts" is the
     larger of the composition model's prediction and the median residual of the
     :data:`~dflash_diag.spikes.neighbours.NEIGHBOURS` batches closest in mean length (not
     itself, not its recurrences): the latter follows a difficulty that jumps for the
     longest few batches, which a smooth model cannot;
   - ``unexplained`` when the batch is ordinary: the model predicts less than
     :data:`EXPLAINED_LOW` (25%) of the rise, no recurrence was high again, and its
     longest sample is not in the top :data:`TAIL_PERCENTILE` of batches' longest (a
     batch of ordinary mean length holding one or two of the longest, hardest samples,
     as a bucketed shuffle builds, is ``inconclusive``: its mean length hides them), AND
     the log shows optimizer-side evidence (:mod:`~dflash_diag.spikes.optimizer`: a
     grad_norm surge, an lr off its schedule, the batch back without a rise).  The
     optimizer is then the suspect; the evidence lists it.  An ordinary batch without
     such evidence is ``inconclusive``: neither side explains the spike;
   - ``inconclusive`` otherwise, saying why: fewer than :data:`MIN_POINTS` points with
     batch features, no batch lined up with the point, a prediction between 25% and 50%,
     or a model that predicts nothing held out.

   Non-finite values are ``unexplained`` (a numerical failure, not a hard batch).  A
   correlation is not proof (PaLM's spikes did not repeat when their batches were
   replayed), so every verdict carries its evidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..data import Progress
from ..errors import InputError
from .correlate import CORRELATION_FEATURES, Correlation, correlations, detrend
from .culprits import (
    Culprit,
    Measured,
    SampleFindings,
    culprits_at,
    ordinary_elsewhere,
    point_z,
)
from .culprits import sample_findings as find_samples
from .detect import Detection, SpikeEvent
from .features import (
    candidate_columns,
    features_frame,
    micro_points,
    points_only,
    rank_features,
)
from .model import (
    MIN_POINTS,
    CompositionModel,
    design_matrix,
    fit_model,
    model_predict,
    r2_regular,
)
from .neighbours import NEIGHBOURS, neighbour_values
from .optimizer import lr_departure, optimizer_signs
from .recurrence import Recurrence, Recurrences, high_again, point_groups

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from ..data import Replay
    from ..samples.kinds import HighKind


#: A model predicting less than this share of held-out variance predicts nothing.
R2_MIN = 0.05
#: Shares of a spike's rise its batch must (composition) / may at most (unexplained) predict.
EXPLAINED_HIGH = 0.5
EXPLAINED_LOW = 0.25
#: Percentile of the similar batches' residuals that a rise may reach and still be
#: "what batches like it do" (with the similar batches themselves elevated).
SIMILAR_HIGH_PCT = 90.0
#: Similar batches are elevated when their median residual is this many residual scales
#: (robust sigma of the model's residual) above zero.
SIMILAR_ELEVATED = 3.0
#: A batch whose longest sample is at or above this percentile of all batches' longest
#: is not "ordinary", whatever its mean length: at most ``inconclusive``.
TAIL_PERCENTILE = 97.0


@dataclass(frozen=True)
class SpikeEvidence:
    """One spike with its batch, the model's view of it and the verdict.

    :param batch: the peak point's batch features.
    :param percentiles: each feature's percentile (0-100) among all logged points.
    :param rise: observed ``value - baseline`` (metric units; ``baseline - value`` for
        a metric whose spikes are drops).
    :param predicted: the composition model's predicted residual for this batch.
    :param similar: the median residual of the most similar other batches
        (:func:`~dflash_diag.spikes.neighbours.neighbour_predict`).
    :param explained: ``max(predicted, similar) / rise`` (None: no model or no rise).
    :param ranks: with several ranks, the peak point's features per rank
        (:func:`~dflash_diag.spikes.features.rank_features` rows).
    :param culprits: the named samples (or inseparable groups smaller than the batch)
        its batch holds (:mod:`~dflash_diag.spikes.culprits`).
    """

    event: SpikeEvent
    verdict: str
    reasons: tuple[str, ...]
    batch: dict[str, float] = field(default_factory=dict)
    percentiles: dict[str, float] = field(default_factory=dict)
    rise: float = float("nan")
    predicted: float | None = None
    similar: float | None = None
    explained: float | None = None
    recurrences: tuple[Recurrence, ...] = ()
    ranks: tuple[dict[str, float], ...] = ()
    culprits: tuple[Culprit, ...] = ()


@dataclass(frozen=True, eq=False)
class Attribution:
    """Everything attribution found.

    :param points: one row per logged point: ``step, value, trend, residual, predicted,
        flagged`` and the batch features of :func:`~dflash_diag.spikes.features.point_features`.
    :param schedule_check: the :class:`~dflash_diag.composition.ground.ScheduleGround` the
        verdicts rest on (verified / given / refuted), or None (not checked).
    :param notes: limitations a reader should know, in words.
    :param r2_similar: held-out R² of the similar-batch predictor (each point predicted by
        the median residual of its most similar other batches), over the regular points.
    :param metric_rank: the rank whose micro-batches the features describe (None: all
        ranks pooled); ``rank_scores``: the R² of each candidate when it was chosen.
    :param samples: the per-sample evidence (:func:`~dflash_diag.spikes.culprits.
        sample_findings`): which samples make their batches high wherever they go.
    :param high_kinds: on measured ground, the manifest's categories whose samples are
        high as a whole (:func:`~dflash_diag.samples.kinds.high_kinds`): none of them is
        named from within, and a spike their batches make reads otherwise as unexplained.
    """

    r2_similar: float | None
    metric_rank: int | None
    rank_scores: dict[str, float]
    points: pd.DataFrame
    correlations: tuple[Correlation, ...]
    model: CompositionModel | None
    spikes: tuple[SpikeEvidence, ...]
    schedule_check: Any
    covers: str
    notes: tuple[str, ...] = ()
    samples: SampleFindings | None = None
    high_kinds: tuple[HighKind, ...] = ()


def _again(again: list[Recurrence]) -> str:
    where = ", ".join(f"{r.step} (epoch {r.epoch})" for r in again)
    return f"the same batch was high again at step{'s' if len(again) > 1 else ''} {where}"


def verdict(
    event: SpikeEvent,
    *,
    model: CompositionModel | None,
    explained: float | None,
    recurrences: tuple[Recurrence, ...],
    has_batch: bool,
    r2_similar: float | None = None,
    max_len_pct: float | None = None,
    by_similar: bool = False,
    optimizer: tuple[str, ...] = (),
    alike: str | None = None,
    culprits: tuple[Culprit, ...] = (),
    ordinary: str | None = None,
) -> tuple[str, tuple[str, ...]]:
    """The documented rule (module docstring) -> ``(verdict, reasons)``.

    The order: a non-finite value; no batch; composition (its batch predicts at least
    half the rise, or batches like it rise as much); then ``data`` when the batch holds a
    named sample; then a recurrence high again; then the ordinary-batch rules.

    ``explained``: the larger of the model's and the similar batches' prediction over the
    rise (``by_similar``: the similar batches' was larger); ``r2_similar``: the
    similar-batch predictor's held-out R²; ``max_len_pct``: the percentile of the batch's
    longest sample among all points' batches; ``optimizer``: the optimizer-side evidence
    (:func:`~dflash_diag.spikes.optimizer.optimizer_signs`); ``alike``: the reason
    "batches like it rise as much" when they do (:func:`_alike`); ``culprits``: the named
    samples its batch holds (then the verdict is ``data``, whatever the grad norm did);
    ``ordinary``: its samples were tested and are ordinary in their other batches (said
    beside the optimizer's evidence).  A reason that gives the share names the predictor
    it came from and that predictor's held-out R²."""
    if event.kind == "non-finite":
        return "unexplained", ("a non-finite value is a numerical failure, not a hard batch",)
    if not has_batch:
        return "inconclusive", ("the replay has no batch for this step",)
    if culprits and model is None:
        return "data", tuple(c.describe() for c in culprits)
    if model is None:
        return "inconclusive", (
            f"too few steps: a model needs {MIN_POINTS} logged points with batch features",
        )
    again = [r for r in recurrences if r.shared >= 0.5 and r.high]
    held_out = max(
        (r for r in (model.r2_cv, r2_similar) if r is not None and math.isfinite(r)),
        default=float("nan"),
    )
    usable = math.isfinite(held_out) and held_out >= R2_MIN
    share = rule_share(explained)
    if usable and explained is not None and explained >= EXPLAINED_HIGH:
        reasons = [f"its batch predicts {share} of the rise ({_by(model, r2_similar, by_similar)})"]
        if again:
            reasons.append(_again(again))
        return "composition", tuple(reasons)
    if usable and alike is not None:
        return "composition", (alike, *([_again(again)] if again else []))
    if culprits:  # (composition does not explain it: the samples named in its batch do)
        return "data", tuple(c.describe() for c in culprits)
    if again:
        return "composition", (_again(again),)
    if explained is None:
        return "inconclusive", ("no rise over the baseline to compare its batch with",)
    if explained < EXPLAINED_LOW and max_len_pct is not None and max_len_pct >= TAIL_PERCENTILE:
        return "inconclusive", (
            f"its batch's features predict only {share} of the rise, but it holds one of "
            f"the longest samples (its longest is at percentile {max_len_pct:.0f} of "
            "batches): a few hard samples can raise a batch's loss that its mean length "
            "does not show; look at those samples before the optimizer",
        )
    if explained < EXPLAINED_LOW:
        return _ordinary(event, share, optimizer, ordinary)
    if not usable:
        return "inconclusive", (f"batch composition predicts nothing held out (R² {held_out:.2f})",)
    return "inconclusive", (
        f"its batch predicts {share} of the rise ({_by(model, r2_similar, by_similar)}): "
        "between 25% and 50%",
    )


def rule_share(explained: float | None) -> str:
    """The share of the rise a batch predicts, as a whole percent, with a decimal more
    where the whole percent would land on a bound of the rule it is not on
    (:data:`EXPLAINED_LOW`, :data:`EXPLAINED_HIGH`): ``24.9%``, not ``25%``, for a share
    the rule puts under 25%.

    >>> rule_share(0.2488), rule_share(0.25), rule_share(0.613), rule_share(None)
    ('24.9%', '25%', '61%', 'n/a')
    """
    if explained is None or not math.isfinite(explained):
        return "n/a"
    text = f"{explained:.0%}"
    for digits in (0, 1, 2):
        text = f"{explained:.{digits}%}"
        shown = float(text.rstrip("%")) / 100
        if not any(shown == cut != explained for cut in (EXPLAINED_LOW, EXPLAINED_HIGH)):
            break
    return text


def _ordinary(
    event: SpikeEvent, share: str, optimizer: tuple[str, ...], samples: str | None = None
) -> tuple[str, tuple[str, ...]]:
    """An ordinary batch: ``unexplained`` (look at the optimizer) only with
    optimizer-side evidence (:func:`~dflash_diag.spikes.optimizer.optimizer_signs`);
    ``samples``: its samples are ordinary elsewhere, said as evidence too."""
    if not optimizer:
        gn = (
            f"grad_norm {event.grad_norm_ratio:.1f}x its baseline"
            if math.isfinite(event.grad_norm_ratio)
            else "no grad_norm logged"
        )
        return "inconclusive", (
            f"an ordinary batch: it predicts only {share} of the rise, and nothing in the "
            f"log points at the optimizer either ({gn}, lr on its schedule)",
        )
    reasons = [f"an ordinary batch: it predicts only {share} of the rise", *optimizer]
    if samples:
        reasons.insert(1, samples)
    if event.n_points > 1:
        reasons.append(f"the rise lasted {event.duration_steps} steps (a level shift)")
    lr = f"lr {event.lr:.3g} ({event.phase}): " if math.isfinite(event.lr) else ""
    reasons.append(f"{lr}the optimizer is the suspect")
    return "unexplained", tuple(reasons)


def _by(model: CompositionModel, r2_similar: float | None, by_similar: bool) -> str:
    """Which predictor a share of the rise came from, with its held-out R²."""
    if by_similar:
        r2, what = r2_similar, f"the {NEIGHBOURS} batches closest in length"
    else:
        r2, what = model.r2_cv, "the composition model"
    held_out = f"{r2:.2f}" if r2 is not None and math.isfinite(r2) else "n/a"
    return f"{what}, held-out R² {held_out}"


def _percentiles(sorted_cols: dict[str, np.ndarray], row: dict[str, float]) -> dict[str, float]:
    """Percentile (0-100, ties counted half) of each value among all points' values
    (``sorted_cols``: each feature's finite values, sorted)."""
    import numpy as np

    out = {}
    for f, col in sorted_cols.items():
        v = row.get(f, float("nan"))
        if col.size and math.isfinite(v):
            below = np.searchsorted(col, v, side="left")
            upto = np.searchsorted(col, v, side="right")
            out[f] = float(100.0 * (below + 0.5 * (upto - below)) / col.size)
    return out


def _median_and_high(near: np.ndarray, sign: float) -> tuple[np.ndarray, np.ndarray]:
    """Per point, the median of its similar batches' residuals, and the
    :data:`SIMILAR_HIGH_PCT` percentile of ``sign`` x those (how far a rise among them
    goes); NaN where it has none."""

    from ..stattests import row_percentile

    return row_percentile(near, 50.0), row_percentile(sign * near, SIMILAR_HIGH_PCT)


def _alike(like: float | None, high: float, rise: float, scale: float) -> str | None:
    """The reason "batches like it rise as much", when the similar batches are elevated
    (median >= :data:`SIMILAR_ELEVATED` residual scales) and the rise is no more than
    their :data:`SIMILAR_HIGH_PCT` percentile; else None.  ``like``, ``high`` and
    ``rise`` are in rise units (signed for the metric's direction)."""
    if like is None or not (math.isfinite(high) and scale > 0) or not 0 < rise <= high:
        return None
    if like < SIMILAR_ELEVATED * scale:
        return None
    return (
        f"batches like it rise as much: the {NEIGHBOURS} closest in length sit at "
        f"{like:+.3g} (median) to {high:+.3g} ({SIMILAR_HIGH_PCT:.0f}th percentile) over "
        f"the trend; this one rose {rise:+.3g}"
    )


def _loo_r2(y: np.ndarray, pred: np.ndarray) -> float | None:
    import numpy as np

    ok = np.isfinite(y) & np.isfinite(pred)
    if ok.sum() < MIN_POINTS:
        return None
    return r2_regular(y[ok], pred[ok])


def _rank_candidates(replay: Replay, metric_rank: int | str | None) -> list[int | None]:
    """Which ranks' batches the metric may describe (None = all ranks pooled)."""
    world = replay.params.world_size
    if metric_rank == "all" or world == 1:
        return [None]
    if isinstance(metric_rank, int):
        if not 0 <= metric_rank < world:
            raise InputError(
                "metric_rank",
                f"rank {metric_rank} is not one of the schedule's {world} ranks",
                f"give a rank from 0 to {world - 1}, 'all' or 'auto'",
            )
        return [metric_rank]
    return [None, *range(world)]  # "auto" or not said: let the data tell


def _quick_r2(design: np.ndarray, y: np.ndarray, rows: dict | None = None) -> float:
    """In-sample least-squares R² over the regular points (residual within
    OUTLIER_SIGMAS robust sigmas): a cheap score to pick whose batches the metric follows.

    :param rows: where the regular points of ``y`` are kept by the points with finite
        regressors (:func:`_regular_rows`), for calls with the same ``y``: the
        candidates of one choice mostly share them."""
    import numpy as np

    ok = np.isfinite(y) & np.isfinite(design).all(axis=1)
    if ok.sum() < MIN_POINTS:
        return float("-inf")
    key = ok.tobytes()
    regular = rows.get(key) if rows is not None else None
    if regular is None:
        regular = _regular_rows(ok, y)
        if rows is not None:
            rows[key] = regular
    at, yy, sst = regular
    x = design[at]
    sd = x.std(axis=0)
    x = (x[:, sd > 0] - x[:, sd > 0].mean(axis=0)) / sd[sd > 0]
    a = np.column_stack([np.ones(len(yy)), x])
    beta = np.linalg.lstsq(a, yy, rcond=None)[0]
    return 1 - float(np.sum((yy - a @ beta) ** 2)) / sst if sst > 0 else float("-inf")


def _regular_rows(ok: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """The positions of the regular points of ``ok`` (:func:`.model.regular_points`),
    their ``y`` and its sum of squares about its mean."""
    import numpy as np

    from .model import regular_points

    at = np.flatnonzero(ok)
    at = at[regular_points(y[at])]
    yy = y[at]
    return at, yy, float(np.sum((yy - yy.mean()) ** 2))


def attribute_spikes(
    detection: Detection,
    replay: Replay,
    covers: str = "window",
    schedule_check: Any = None,
    metric_rank: int | str | None = None,
    progress: Progress | None = None,
    lr: np.ndarray | None = None,
    ids: np.ndarray | None = None,
    measured: Measured | None = None,
) -> Attribution:
    """Line the detection's points up with the replay and judge every spike.

    :param detection: from :func:`~dflash_diag.spikes.detect.detect_spikes`.
    :param replay: the run's schedule, replayed once for all spikes.
    :param covers: ``window`` or ``step``: what a logged point covers (see features).
    :param schedule_check: the :class:`~dflash_diag.composition.ground.ScheduleGround`
        every verdict rests on (see :func:`check_schedule`), kept with the result.
    :param metric_rank: whose batches the logged metric describes: ``"all"`` (pooled over
        ranks, an all-reduced loss), a rank (printed by that rank alone, e.g. rank 0
        without an all-reduce), or ``"auto"``/None: with several ranks, the candidate
        (pooled or one rank) whose batch features give the highest least-squares R² of
        the detrended metric; the choice and the scores are kept in the result.
    :param progress: ``progress(done, total)`` over the spikes.
    :param lr: the logged lr per detection point (aligned with ``detection.steps``; NaN
        where not logged), for the optimizer-side evidence; None: not logged.
    :param ids: sample ids by dataset index, to name samples by (None: the indices).
    :param measured: per-sample losses the recorder measured: the samples are then
        tested on them (ground ``measured``), not on the points' z.
    :raises InputError: when the replay covers none of the logged steps.
    """
    import numpy as np
    import pandas as pd

    d = detection
    sign = -1.0 if d.direction == "down" else 1.0
    fit = fit_points(d, replay, covers, metric_rank)
    trend, residual, pooled, chosen = fit.trend, fit.residual, fit.pooled, fit.chosen
    feats, scores, design, names = fit.feats, fit.scores, fit.design, fit.names
    model, predicted, pidx = fit.model, fit.predicted, fit.pidx
    points = pd.DataFrame(
        {"value": d.values, "trend": trend, "residual": residual, "flagged": d.flagged}
    )
    points = pd.concat([feats[["step"]], points, feats.drop(columns="step")], axis=1)
    cats = [c for c in feats.columns if c.startswith("cat_")]
    corr = correlations(points, [*CORRELATION_FEATURES, *cats])
    points["predicted"] = predicted
    # Similar = closest in mean length: one plain axis a reader can check, and the one
    # along which sorted batches differ most (categories and spread follow from it).
    length = design[:, [names.index("log_mean_len")]]
    near = neighbour_values(length, residual, point_groups(replay, pidx, len(feats)))
    similar, similar_high = _median_and_high(near, sign)
    points["similar"] = similar
    r2_similar = _loo_r2(residual, similar) if model is not None else None
    notes = _notes(d.metric, feats, model, chosen, scores)
    findings = _samples(replay, d, pidx, residual, predicted, model, sign, ids, measured)
    if findings.note():
        notes.append(str(findings.note()))
    feature_cols = ["n_samples", "tokens", "mean_len", "max_len", "min_len", "padding_eff", *cats]
    per_rank = None
    if replay.params.world_size > 1 and d.events:
        peaks = np.array(sorted({e.peak_step for e in d.events}), dtype=np.int64)
        only = points_only(pooled, np.isin(d.steps, peaks))  # (the peaks' rows of all)
        per_rank = _rank_columns(rank_features(replay, d.steps, d.log_interval, covers, only))
    fitted = _Fitted(
        d=d,
        sign=sign,
        feats=feats,
        residual=residual,
        predicted=predicted,
        similar=similar,
        similar_high=similar_high,
        model=model,
        r2_similar=r2_similar,
        recurrences=Recurrences(replay, pidx),
        feature_cols=feature_cols,
        columns={c: feats[c].to_numpy() for c in ["n_micro", *feature_cols]},
        sorted_cols={c: _finite_sorted(points[c]) for c in feature_cols},
        per_rank=per_rank,
        lr=lr,
        samples=findings,
    )
    out = []
    for k, ev in enumerate(d.events):
        out.append(_evidence(ev, fitted))
        if progress is not None:
            progress(k + 1, len(d.events))
    return Attribution(
        r2_similar=r2_similar,
        metric_rank=chosen,
        rank_scores=scores,
        points=points,
        correlations=corr,
        model=model,
        spikes=tuple(out),
        schedule_check=schedule_check,
        covers=covers,
        notes=tuple(notes),
        samples=findings,
    )


@dataclass(frozen=True, eq=False)
class PointsFit:
    """The logged points lined up with their batches and the composition model fitted
    on them (:func:`fit_points`): what the verdicts and the per-sample test share.

    ``trend``, ``residual``: float64 ``[n_points]`` (``residual = x - trend``);
    ``pooled``: each micro-batch's point over every rank; ``chosen``, ``feats``,
    ``scores``: the rank the metric follows, its batch features and the candidates'
    scores (:func:`_choose_rank`); ``design``, ``names``: the model's regressors;
    ``model``: the fit (None below its minimum); ``predicted``: its residual per point
    (NaN where none); ``pidx``: each micro-batch's point for the chosen rank (-1: none).
    """

    trend: np.ndarray
    residual: np.ndarray
    pooled: np.ndarray
    chosen: int | None
    feats: pd.DataFrame
    scores: dict[str, float]
    design: np.ndarray
    names: tuple[str, ...]
    model: CompositionModel | None
    predicted: np.ndarray
    pidx: np.ndarray


def fit_points(
    detection: Detection,
    replay: Replay,
    covers: str = "window",
    metric_rank: int | str | None = None,
    cross_validate: bool = True,
    fit: bool = True,
) -> PointsFit:
    """Detrend the metric, line its points up with the replay's micro-batches and fit
    the composition model (``cross_validate=False``: without its held-out refits, whose
    figures only the verdicts read; ``fit=False``: no model, its predictions NaN, for
    a caller that reads only the points' micro-batches)."""
    import numpy as np

    d = detection
    trend, residual = detrend(d.values, d.window, d.centred_trend)
    pooled = micro_points(replay, d.steps, d.log_interval, covers)
    chosen, feats, scores, (design, names) = _choose_rank(
        replay, d, covers, metric_rank, residual, pooled
    )
    model = (
        fit_model(design, names, residual, ~d.flagged, cross_validate=cross_validate)
        if fit
        else None
    )
    predicted = (
        model_predict(model, feats, (design, names))
        if model is not None
        else np.full(len(feats), np.nan)
    )
    pidx = micro_points(replay, d.steps, d.log_interval, covers, chosen, pooled)
    return PointsFit(
        trend, residual, pooled, chosen, feats, scores, design, names, model, predicted, pidx
    )


def samples_only(
    detection: Detection,
    replay: Replay,
    covers: str = "window",
    metric_rank: int | str | None = None,
    ids: np.ndarray | None = None,
    measured: Measured | None = None,
) -> tuple[SampleFindings, int | None]:
    """The per-sample evidence alone (``dflash-diag samples``): the same findings
    :func:`attribute_spikes` keeps in ``Attribution.samples``, without judging the
    spikes (no correlations, held-out refits, neighbours or per-spike evidence).

    :returns: the findings and the rank whose batches the metric follows."""
    d = detection
    sign = -1.0 if d.direction == "down" else 1.0
    # (on measured ground the samples are tested on their own losses: no model read)
    f = fit_points(d, replay, covers, metric_rank, cross_validate=False, fit=measured is None)
    findings = _samples(replay, d, f.pidx, f.residual, f.predicted, f.model, sign, ids, measured)
    return findings, f.chosen


def _samples(
    replay: Replay,
    d: Detection,
    pidx: np.ndarray,
    residual: np.ndarray,
    predicted: np.ndarray,
    model: CompositionModel | None,
    sign: float,
    ids: np.ndarray | None,
    measured: Measured | None = None,
) -> SampleFindings:
    """The per-sample evidence over the points (:mod:`~dflash_diag.spikes.culprits`), on
    the loss left once the composition model (fitted robustly, in-sample) has predicted
    each batch from its features, and with every point's relative rise for the culprits'
    excess.  In-sample on purpose: what the features explain of a sample's points, even
    a little, is not the sample's own doing."""
    import numpy as np

    scale = model.resid_scale if model is not None else float("nan")
    z, basis = point_z(sign * residual, sign * predicted, scale, model is not None)
    with np.errstate(divide="ignore", invalid="ignore"):
        excess = sign * (d.values / d.baseline - 1.0)
    return find_samples(replay, pidx, len(d.steps), z, excess, ids, basis, measured)


def _scores_shown(scores: dict[str, float], most: int = 2) -> str:
    """``all: 0.08, 0: 0.70`` (the ``most`` best, the pooled one among them), and the
    rest in one figure: ``, the other 7 <= 0.00``."""
    finite = {k: v for k, v in scores.items() if math.isfinite(v)}
    best = sorted(finite, key=lambda k: -finite[k])[:most]
    if "all" in finite and "all" not in best:
        best = [*best[: most - 1], "all"]
    kept = [k for k in finite if k in best]  # in the candidates' order
    shown = ", ".join(f"{k}: {finite[k]:.2f}" for k in kept)
    rest = [finite[k] for k in finite if k not in best]
    if rest:
        shown += f", the other {len(rest)} <= {max(rest):.2f}"
    return shown


def _choose_rank(
    replay: Replay,
    d: Detection,
    covers: str,
    metric_rank: int | str | None,
    residual: Any,
    pooled: np.ndarray | None = None,
) -> tuple[int | None, pd.DataFrame, dict[str, float], tuple[np.ndarray, tuple[str, ...]]]:
    """Whose micro-batches the metric follows (:func:`_rank_candidates`, scored by
    :func:`_quick_r2`; on a tie the earlier, pooled first), that candidate's point
    features and their :func:`~dflash_diag.spikes.model.design_matrix`, and every
    candidate's score.  ``pooled``: the micro-batches' points
    (:func:`~dflash_diag.spikes.features.micro_points` of all ranks), if at hand.

    :raises InputError: when the replay covers none of the logged steps."""
    candidates = _rank_candidates(replay, metric_rank)
    columns = candidate_columns(replay, d.steps, d.log_interval, covers, tuple(candidates), pooled)
    scores: dict[str, float] = {}
    scored = []
    rows: dict = {}  # (the regular points, shared by the candidates)
    for i, (rank, cand) in enumerate(zip(candidates, columns, strict=True)):
        design = design_matrix(cand)
        score = _quick_r2(design[0], residual, rows) if len(candidates) > 1 else 0.0
        scores["all" if rank is None else str(rank)] = score
        scored.append((score, -i, rank, cand, design))
    _, _, chosen, cols, design = max(scored, key=lambda t: (t[0], t[1]))
    feats = features_frame(cols)
    if int((feats["n_micro"] > 0).sum()) == 0:
        raise InputError(
            "",
            f"the replay's steps ({int(replay.steps['step'].min())}.."
            f"{int(replay.steps['step'].max())}) cover none of the logged steps "
            f"({int(d.steps[0])}..{int(d.steps[-1])})",
            "check --first-step and --epochs",
        )
    return chosen, feats, scores, design


def _notes(
    metric: str,
    feats: pd.DataFrame,
    model: CompositionModel | None,
    chosen: int | None,
    scores: dict[str, float],
) -> list[str]:
    """What a reader should know about the attribution, in words."""
    notes = []
    uncovered = int((feats["n_micro"] == 0).sum())
    if uncovered:
        notes.append(f"{uncovered} logged points have no replayed batch (outside the replay)")
    if model is None:
        notes.append(f"too few points with batch features for a model (need {MIN_POINTS})")
    if len(scores) > 1:
        who = (
            "the step's micro-batches pooled over ranks"
            if chosen is None
            else f"rank {chosen}'s micro-batches"
        )
        shown = _scores_shown(scores)
        notes.append(
            f"the logged {metric} follows {who} best"
            + (f" (R² {shown})" if shown else "")
            + "; --metric-rank (or [schedule] metric_rank) fixes it"
        )
    return notes


def _finite_sorted(column: pd.Series) -> np.ndarray:
    import numpy as np

    col = column.to_numpy(dtype=np.float64)
    return np.sort(col[np.isfinite(col)])


@dataclass(frozen=True, eq=False)
class _Fitted:
    """What every spike's evidence is read from (arrays aligned with ``d.steps``)."""

    d: Detection
    sign: float
    feats: pd.DataFrame
    residual: np.ndarray
    predicted: np.ndarray
    similar: np.ndarray
    similar_high: np.ndarray
    model: CompositionModel | None
    r2_similar: float | None
    recurrences: Recurrences
    feature_cols: list[str]
    columns: dict[str, np.ndarray]  # (``n_micro`` and the feature columns of ``feats``)
    sorted_cols: dict[str, np.ndarray]
    per_rank: dict[str, np.ndarray] | None  # (:func:`_rank_columns`)
    lr: np.ndarray | None
    samples: SampleFindings | None = None


def trusted_predictions(
    pred: float | None,
    like: float | None,
    model: CompositionModel | None,
    r2_similar: float | None,
) -> tuple[float | None, float | None]:
    """The two predictions of a spike's rise, keeping only those whose predictor predicts
    held-out points (held-out R² >= :data:`R2_MIN`) when at least one does: a share of
    the rise is never read from a predictor that predicts nothing while the other one
    makes the verdict usable."""

    def usable(r2: float | None) -> bool:
        return r2 is not None and math.isfinite(r2) and r2 >= R2_MIN

    model_ok = model is not None and usable(model.r2_cv)
    like_ok = usable(r2_similar)
    if not (model_ok or like_ok):
        return pred, like
    return (pred if model_ok else None), (like if like_ok else None)


def _evidence(ev: SpikeEvent, f: _Fitted) -> SpikeEvidence:
    """One spike's batch, predictions, recurrences and verdict (module docstring)."""
    import numpy as np

    d, sign = f.d, f.sign
    p = int(np.searchsorted(d.steps, ev.peak_step))
    has_batch = bool(f.columns["n_micro"][p] > 0)
    # With direction "down" (accuracy), a spike is a drop: rises are counted downwards.
    rise = float(sign * (ev.value - ev.baseline if math.isfinite(ev.baseline) else f.residual[p]))
    pred = float(f.predicted[p]) if math.isfinite(f.predicted[p]) else None
    like = float(f.similar[p]) if math.isfinite(f.similar[p]) else None
    pred, like = trusted_predictions(pred, like, f.model, f.r2_similar)
    best = max((sign * v for v in (pred, like) if v is not None), default=None)
    explained = best / rise if best is not None and rise > 0 else None
    by_similar = like is not None and (pred is None or sign * like > sign * pred)
    resid_scale = f.model.resid_scale if f.model is not None else float("nan")
    recs = _recurrences(f, p, rise, resid_scale) if has_batch else ()
    batch = {c: float(f.columns[c][p]) for c in f.feature_cols} if has_batch else {}
    pct = _percentiles(f.sorted_cols, batch)
    signs = optimizer_signs(ev, lr_departure(d.steps, f.lr, ev), recs)
    alike = _alike(
        None if like is None else sign * like, float(f.similar_high[p]), rise, resid_scale
    )
    culprits = _culprits(f, p) if has_batch else ()
    ordinary = ordinary_elsewhere(f.samples, p) if f.samples is not None and has_batch else None
    v, reasons = verdict(
        ev,
        model=f.model,
        explained=explained,
        recurrences=recs,
        has_batch=has_batch,
        r2_similar=f.r2_similar,
        max_len_pct=pct.get("max_len"),
        by_similar=by_similar,
        optimizer=signs,
        alike=alike,
        culprits=culprits,
        ordinary=ordinary,
    )
    return SpikeEvidence(
        event=ev,
        verdict=v,
        reasons=reasons,
        batch=batch,
        percentiles=pct,
        rise=rise,
        predicted=pred,
        similar=like,
        explained=explained,
        recurrences=recs,
        ranks=_rank_rows(f.per_rank, ev.peak_step),
        culprits=culprits,
    )


def _culprits(f: _Fitted, p: int) -> tuple[Culprit, ...]:
    """The named units in point ``p``'s batch that are not the whole batch (a fixed
    batch named as a group is composition's to explain, not a sample's)."""
    if f.samples is None:
        return ()
    found = culprits_at(f.samples, p)
    if not found:  # (the membership not read)
        return ()
    m = f.samples.membership
    size = int(m.offsets[p + 1] - m.offsets[p])
    return tuple(c for c in found if len(c.members) < max(size, 2))


def _recurrences(f: _Fitted, p: int, rise: float, resid_scale: float) -> tuple[Recurrence, ...]:
    """The later (and earlier) steps whose batch is point ``p``'s, with their residuals."""
    out = []
    for q, ep, shared in f.recurrences.find(p):
        r = float(f.residual[q])
        out.append(
            Recurrence(
                step=int(f.d.steps[q]),
                epoch=ep,
                value=float(f.d.values[q]),
                residual=r,
                z=r / resid_scale if resid_scale > 0 else float("nan"),
                spiked=bool(f.d.flagged[q]),
                high=high_again(f.sign * r, rise, resid_scale),
                shared=shared,
            )
        )
    return tuple(out)


#: The columns of a spike's per-rank rows (:func:`_rank_rows`).
RANK_COLUMNS = ("rank", "n_samples", "tokens", "mean_len", "max_len", "padding_eff")


def _rank_rows(
    per_rank: pd.DataFrame | dict[str, np.ndarray] | None, step: int
) -> tuple[dict[str, float], ...]:
    """The rows of ``per_rank`` (a frame of :func:`~dflash_diag.spikes.features.
    rank_features`, or its :func:`_rank_columns`) at ``step``, as floats (each column's
    values as float64: what a row read by ``iterrows`` holds, without a Series a row)."""
    import numpy as np

    if per_rank is None:
        return ()
    at = np.asarray(per_rank["step"]) == step
    cols = {c: np.asarray(per_rank[c], dtype=np.float64)[at].tolist() for c in RANK_COLUMNS}
    return tuple(dict(zip(cols, row, strict=True)) for row in zip(*cols.values(), strict=True))


def _rank_columns(per_rank: pd.DataFrame) -> dict[str, np.ndarray]:
    """``step`` and the :data:`RANK_COLUMNS` of ``per_rank`` as arrays (float64 but the
    step), read once for every spike's :func:`_rank_rows`."""
    import numpy as np

    cols = {c: per_rank[c].to_numpy(dtype=np.float64) for c in RANK_COLUMNS}
    return {"step": per_rank["step"].to_numpy(), **cols}


def log_only_evidence(detection: Detection) -> tuple[SpikeEvidence, ...]:
    """Evidence for a log without a schedule: every spike is ``inconclusive`` about its
    batch, with what the log itself says (lr, grad_norm, duration)."""
    out = []
    for ev in detection.events:
        if ev.kind == "non-finite":
            v, why = verdict(ev, model=None, explained=None, recurrences=(), has_batch=False)
            out.append(SpikeEvidence(ev, v, why))
            continue
        reasons = ["no schedule: give --manifest (or a dflash-diag.toml) to see its batch"]
        if math.isfinite(ev.grad_norm_ratio) and ev.grad_norm_ratio >= 1.5:
            reasons.append(f"grad_norm rose {ev.grad_norm_ratio:.1f}x over its baseline")
        if ev.n_points > 1:
            reasons.append(f"the rise lasted {ev.duration_steps} steps")
        rise = ev.value - ev.baseline if math.isfinite(ev.baseline) else float("nan")
        rise = -rise if detection.direction == "down" else rise
        out.append(SpikeEvidence(ev, "inconclusive", tuple(reasons), rise=rise))
    return tuple(out)
