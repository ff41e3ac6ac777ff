"""Work the rank candidates share, done once, gives exactly the plain computations."""

from __future__ import annotations

import numpy as np
import pandas as pd
from budget import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dflash_diag.data import ScheduleParams
from dflash_diag.schedule import replay
from dflash_diag.spikes.attribute import _quick_r2
from dflash_diag.spikes.features import (
    _steps_per_group,
    candidate_columns,
    features_frame,
    micro_points,
    point_features,
)
from dflash_diag.spikes.model import MAX_OUTLYING, OUTLIER_SIGMAS, design_matrix

schedules = st.builds(
    ScheduleParams,
    strategy=st.sampled_from(["sorted-greedy", "bucketed", "random"]),
    seed=st.integers(0, 50),
    token_budget=st.sampled_from([64, 200]),
    batch_size=st.sampled_from([2, 5]),
    buckets=st.just((1, 10, 30, 1 << 30)),
    rng=st.just("numpy"),
    world_size=st.integers(1, 4),
    grad_accum=st.integers(1, 3),
    shard=st.sampled_from(["strided", "contiguous", "accelerate"]),
)


@settings(max_examples=examples(40), deadline=None)
@given(
    params=schedules,
    n=st.integers(1, 200),
    seed=st.integers(0, 1000),
    interval=st.integers(1, 3),
    covers=st.sampled_from(["window", "step"]),
    given_pooled=st.booleans(),
)
def test_candidate_features_are_each_ranks_point_features(
    params: ScheduleParams, n: int, seed: int, interval: int, covers: str, given_pooled: bool
) -> None:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 60, n)
    rep = replay(lengths, params, epochs=2, categories=rng.choice(np.array(["a", "b", "c"]), n))
    logged = rep.steps["step"].to_numpy()[interval - 1 :: interval]
    pooled = micro_points(rep, logged, interval, covers) if given_pooled else None
    ranks = (None, *range(params.world_size + 1))  # (one rank past the world: no batches)
    columns = candidate_columns(rep, logged, interval, covers, ranks, pooled)
    frames = [features_frame(c) for c in columns]
    for rank, fast in zip(ranks, frames, strict=True):
        plain = point_features(rep, logged, interval, covers, rank)
        pd.testing.assert_frame_equal(fast, plain, check_exact=True)
    only = candidate_columns(rep, logged, interval, covers, (1,), pooled)
    pd.testing.assert_frame_equal(features_frame(only[0]), frames[2], check_exact=True)
    for cols, frame in zip(columns, frames, strict=True):
        fast, names = design_matrix(cols)
        plain, plain_names = design_matrix(frame)
        assert names == plain_names
        assert np.array_equal(fast, plain, equal_nan=True)


@settings(max_examples=examples(60), deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 4)), max_size=40),
    in_order=st.booleans(),
)
def test_steps_per_group_counts_distinct_pairs(pairs: list, in_order: bool) -> None:
    rows = sorted(pairs) if in_order else pairs
    steps = np.array([s for s, _ in rows], dtype=np.int64)
    group = np.array([g for _, g in rows], dtype=np.int64)
    plain = np.zeros(5, dtype=np.int64)
    for _, g in set(rows):
        plain[g] += 1
    fast = _steps_per_group(steps, group, 5)
    assert fast.dtype == np.int64
    assert np.array_equal(fast, plain)


def plain_quick_r2(design: np.ndarray, y: np.ndarray) -> float:
    """:func:`_quick_r2` as first written, the plain reference."""
    ok = np.isfinite(y) & np.isfinite(design).all(axis=1)
    if ok.sum() < 30:
        return float("-inf")
    x, yy = design[ok], y[ok]
    med = np.median(yy)
    spread = 1.4826 * np.median(np.abs(yy - med))
    if spread > 0:
        keep = np.abs(yy - med) <= OUTLIER_SIGMAS * spread
        if (~keep).sum() <= MAX_OUTLYING * len(yy):  # (more are no handful: all kept)
            x, yy = x[keep], yy[keep]
    sd = x.std(axis=0)
    x = (x[:, sd > 0] - x[:, sd > 0].mean(axis=0)) / sd[sd > 0]
    a = np.column_stack([np.ones(len(yy)), x])
    beta = np.linalg.lstsq(a, yy, rcond=None)[0]
    sst = float(np.sum((yy - yy.mean()) ** 2))
    return 1 - float(np.sum((yy - a @ beta) ** 2)) / sst if sst > 0 else float("-inf")


def same_float(a: float, b: float) -> bool:
    return a == b or (np.isnan(a) and np.isnan(b))


@settings(max_examples=examples(60), deadline=None)
@given(
    n=st.integers(20, 400),
    k=st.integers(1, 6),
    seed=st.integers(0, 10_000),
    constant=st.booleans(),
    missing=st.floats(0.0, 0.3),
    flat_y=st.booleans(),
)
@example(n=66, k=1, seed=267, constant=False, missing=0.0, flat_y=False)  # (over 10% out)
def test_quick_r2_sharing_the_regular_points_is_the_plain_score(
    n: int, k: int, seed: int, constant: bool, missing: float, flat_y: bool
) -> None:
    """Candidates scored in turn with one cache of regular points (some with the same
    rows missing, some not) score as the plain function, to the bit."""
    rng = np.random.default_rng(seed)
    y = np.round(rng.standard_normal(n), 1 if flat_y else 8)
    if flat_y:  # (a MAD of 0: every finite point is regular)
        y[: n * 3 // 4] = 0.5
    y[rng.random(n) < 0.05] = 40.0  # outliers
    y[rng.random(n) < missing / 3] = np.nan
    rows: dict = {}
    gone = rng.random(n) < missing
    for c in range(4):
        cols = [rng.standard_normal(n) * 10.0**c for _ in range(k)]
        if constant:
            cols[0] = np.full(n, 3.0)
        design = np.column_stack(cols)
        design[gone if c % 2 else rng.random(n) < missing, 0] = np.nan
        assert same_float(_quick_r2(design, y, rows), plain_quick_r2(design, y))
        assert same_float(_quick_r2(design, y), plain_quick_r2(design, y))


@settings(max_examples=examples(40), deadline=None)
@given(
    n=st.integers(1, 160),
    seed=st.integers(0, 10_000),
    window=st.sampled_from([2, 5, 20, 50]),
    metric=st.sampled_from(["loss", "accuracy"]),
    broken=st.floats(0.0, 0.2),
)
def test_detrending_with_the_detections_centred_trend_is_the_plain_detrending(
    n: int, seed: int, window: int, metric: str, broken: float
) -> None:
    """The robust detector keeps its centred baseline (rises only: an accuracy's drops
    are judged on the values negated); the detrending reads it, the same numbers."""
    from dflash_diag.spikes.correlate import detrend
    from dflash_diag.spikes.detect import detect_spikes
    from dflash_diag.spikes.windows import trend_baseline

    rng = np.random.default_rng(seed)
    values = 2.0 + np.round(rng.standard_normal(n), 3)
    hit = rng.random(n) < broken
    hit[0] = False  # (a log of one finite value at least)
    values[hit] = rng.choice([np.nan, np.inf, 1e300], int(hit.sum()))  # (1e300: past HUGE)
    d = detect_spikes(pd.DataFrame({"step": np.arange(n), metric: values}), metric, window=window)
    finite = np.isfinite(d.values)
    if metric == "loss":
        want = trend_baseline(d.values[finite], d.window, centred=True)[0]
        assert d.centred_trend is not None
        assert np.array_equal(d.centred_trend, want, equal_nan=True)
    else:
        assert d.centred_trend is None
    fast = detrend(d.values, d.window, d.centred_trend)
    plain = detrend(d.values, d.window)
    for got, expected in zip(fast, plain, strict=True):
        assert np.array_equal(got, expected, equal_nan=True)
