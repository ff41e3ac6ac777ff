"""The spikes' fast paths give exactly what the plain computations give."""

from __future__ import annotations

import numpy as np
import pandas as pd
from budget import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dflash_diag.data import ScheduleParams
from dflash_diag.schedule import replay
from dflash_diag.spikes.features import (
    micro_points,
    point_features,
    point_index,
    points_only,
    rank_features,
    steps_per_point,
)
from dflash_diag.spikes.model import MixtureCells, mixture_cells, sample_cells
from dflash_diag.spikes.variance import point_shares, replayed_shares

schedules = st.builds(
    ScheduleParams,
    strategy=st.sampled_from(["sorted-greedy", "bucketed", "random", "length-grouped"]),
    seed=st.integers(0, 50),
    token_budget=st.sampled_from([64, 200, 1000]),
    max_seq_len=st.sampled_from([None, 40]),
    batch_size=st.sampled_from([2, 5]),
    buckets=st.just((1, 10, 30, 1 << 30)),
    rng=st.just("numpy"),
    seeding=st.sampled_from(["once", "per-epoch"]),
    world_size=st.integers(1, 3),
    grad_accum=st.integers(1, 3),
    shard=st.sampled_from(["strided", "contiguous", "accelerate"]),
    first_step=st.integers(0, 1),
)


def mixture_shares(replay, point_of_micro, n_points, cells, n_cells):
    """The shares as first written, the plain reference: every entry of the replay at
    once, one ``np.bincount`` of (point, cell) keys weighted by the tokens."""
    point = np.repeat(point_of_micro, np.diff(replay.offsets))
    ids = replay.sample_ids
    keep = point >= 0
    point, ids = point[keep], ids[keep]
    key = point * n_cells + cells[ids]
    w = replay.lengths[ids].astype(np.float64)
    tot = np.bincount(key, weights=w, minlength=n_points * n_cells).reshape(n_points, n_cells)
    s = tot.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(s > 0, tot / s, np.nan)


#: a run of a schedule, and how its log covers it
RUNS = {
    "params": schedules,
    "n": st.integers(1, 300),
    "seed": st.integers(0, 1000),
    "n_cat": st.integers(0, 3),
    "epochs": st.integers(1, 3),
    "interval": st.integers(1, 4),
    "covers": st.sampled_from(["window", "step"]),
    "rank": st.sampled_from([None, 0, 1]),
}


#: a run of a schedule over 2 epochs, and how its log's points cover it
POINTS = {
    "params": schedules,
    "n": st.integers(1, 200),
    "seed": st.integers(0, 1000),
    "interval": st.integers(1, 3),
    "covers": st.sampled_from(["window", "step"]),
}


def lengths_and_categories(n: int, seed: int, n_cat: int):
    rng = np.random.default_rng(seed)
    return rng.integers(1, 60, n), (rng.integers(0, n_cat, n) if n_cat else None)


@settings(max_examples=examples(60), deadline=None)
@given(**RUNS)
def test_replayed_shares_are_the_shares_of_the_replay(
    params: ScheduleParams,
    n: int,
    seed: int,
    n_cat: int,
    epochs: int,
    interval: int,
    covers: str,
    rank: int | None,
) -> None:
    lengths, cats = lengths_and_categories(n, seed, n_cat)
    seen = np.minimum(lengths, params.max_seq_len or 1 << 30)
    cells, n_cells = sample_cells(seen, cats)
    rep = replay(lengths, params, epochs=epochs)
    steps = rep.steps["step"].to_numpy()
    logged = steps[interval - 1 :: interval] if interval > 1 else steps
    rank = None if rank is not None and rank >= params.world_size else rank
    idx = micro_points(rep, logged, interval, covers, rank)
    plain = mixture_shares(rep, idx, logged.shape[0], cells, n_cells)
    # the cells plain (each sample's cell and length) and coded (a code a sample)
    for mixture in (MixtureCells(cells, seen, n_cells, seen), mixture_cells(seen, cats)):
        fast = replayed_shares(lengths, params, epochs, interval, covers, rank, mixture)
        assert fast.shape == plain.shape
        assert np.array_equal(fast, plain, equal_nan=True)
        assert np.array_equal(np.signbit(fast), np.signbit(plain))
    # the counterfactual hands it the run's capped lengths: the same shares
    mixture = mixture_cells(rep.lengths, cats)
    capped = replayed_shares(rep.lengths, params, epochs, interval, covers, rank, mixture)
    assert np.array_equal(capped, fast, equal_nan=True)


@settings(max_examples=examples(40), deadline=None)
@given(**RUNS)
def test_point_shares_are_mixture_shares(
    params: ScheduleParams,
    n: int,
    seed: int,
    n_cat: int,
    epochs: int,
    interval: int,
    covers: str,
    rank: int | None,
) -> None:
    lengths, cats = lengths_and_categories(n, seed, n_cat)
    rep = replay(lengths, params, epochs=epochs)
    cells, n_cells = sample_cells(rep.lengths, cats)
    # every other step logged, as a log with gaps
    logged = rep.steps["step"].to_numpy()[::2]
    rank = None if rank is not None and rank >= params.world_size else rank
    idx = micro_points(rep, logged, interval, covers, rank)
    plain = mixture_shares(rep, idx, logged.shape[0], cells, n_cells)
    for mixture in (MixtureCells(cells, rep.lengths, n_cells, rep.lengths),
                    mixture_cells(rep.lengths, cats)):  # fmt: skip
        fast = point_shares(rep, idx, logged.shape[0], mixture)
        assert np.array_equal(fast, plain, equal_nan=True)


def _plain_steps_per_point(steps: np.ndarray, index: np.ndarray, n_points: int) -> np.ndarray:
    """The distinct (point, step) pairs counted by point, by ``np.unique``."""
    hit = index >= 0
    if not hit.any():
        return np.zeros(n_points, dtype=np.int64)
    pairs = np.unique(np.stack([index[hit], steps[hit]]), axis=1)
    return np.bincount(pairs[0], minlength=n_points).astype(np.int64)


@settings(max_examples=examples(100), deadline=None)
@given(
    raw=st.lists(st.integers(0, 10), max_size=60),
    logged=st.sets(st.integers(0, 12), min_size=1, max_size=6),
    interval=st.integers(1, 4),
    covers=st.sampled_from(["window", "step"]),
    in_order=st.booleans(),
    dropped=st.integers(0, 3),
)
@example(raw=[0, 1, 0], logged={0, 1}, interval=2, covers="window", in_order=False, dropped=0)
def test_steps_per_point_counts_distinct_pairs(
    raw: list[int], logged: set[int], interval: int, covers: str, in_order: bool, dropped: int
) -> None:
    steps = np.array(sorted(raw) if in_order else raw, dtype=np.int64)
    s = np.array(sorted(logged), dtype=np.int64)
    index = point_index(steps, s, interval, covers)
    if dropped:  # as another rank's micro-batches, -1
        index = np.where(np.arange(steps.size) % (dropped + 1) == 0, -1, index)
    fast = steps_per_point(steps, index, s.size)
    assert fast.dtype == np.int64
    assert np.array_equal(fast, _plain_steps_per_point(steps, index, s.size))


@settings(max_examples=examples(40), deadline=None)
@given(**POINTS)
def test_point_features_with_the_pooled_points_given_are_the_same(
    params: ScheduleParams, n: int, seed: int, interval: int, covers: str
) -> None:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 60, n)
    cats = rng.choice(np.array(["a", "b"]), n)
    rep = replay(lengths, params, epochs=2, categories=cats)
    logged = rep.steps["step"].to_numpy()[interval - 1 :: interval]
    pooled = micro_points(rep, logged, interval, covers)
    for rank in [None, *range(params.world_size)]:
        plain = point_features(rep, logged, interval, covers, rank)
        fast = point_features(rep, logged, interval, covers, rank, pooled)
        pd.testing.assert_frame_equal(fast, plain, check_exact=True)
        plain_idx = micro_points(rep, logged, interval, covers, rank)
        assert np.array_equal(micro_points(rep, logged, interval, covers, rank, pooled), plain_idx)
    pd.testing.assert_frame_equal(
        rank_features(rep, logged, interval, covers, pooled),
        rank_features(rep, logged, interval, covers),
        check_exact=True,
    )


@settings(max_examples=examples(40), deadline=None)
@given(
    **POINTS,
    pick=st.integers(0, 2**16),
)
def test_rank_features_of_some_points_are_those_rows_of_all(
    params: ScheduleParams, n: int, seed: int, interval: int, covers: str, pick: int
) -> None:
    rng = np.random.default_rng(seed)
    rep = replay(rng.integers(1, 60, n), params, epochs=2)
    logged = rep.steps["step"].to_numpy()[interval - 1 :: interval]
    pooled = micro_points(rep, logged, interval, covers)
    wanted = logged[np.random.default_rng(pick).random(logged.size) < 0.3]
    only = points_only(pooled, np.isin(logged, wanted))
    full = rank_features(rep, logged, interval, covers)
    plain = full[full["step"].isin(wanted)].reset_index(drop=True)
    fast = rank_features(rep, logged, interval, covers, only)
    pd.testing.assert_frame_equal(fast, plain, check_exact=True)


def every_rank_feature(rep, logged, interval, covers, pooled=None):
    """:func:`rank_features` as first written, the plain reference: a row for every
    logged point x rank, the empty ones dropped at the end."""
    from dflash_diag.spikes.features import _finish, _pool

    micro = rep.micro
    cats = [c for c in micro.columns if c.startswith("cat_")]
    idx = micro_points(rep, logged, interval, covers, None, pooled)
    ranks = micro["rank"].to_numpy().astype(np.int64)
    world = int(ranks.max()) + 1 if ranks.size else 1
    group = np.where(idx >= 0, idx * world + ranks, -1)
    feats = _finish(_pool(micro, group, logged.shape[0] * world, cats), cats)
    frame = pd.DataFrame(
        {
            "step": np.repeat(logged, world),
            "rank": np.tile(np.arange(world), logged.shape[0]),
            **feats,
        }
    )
    return frame[frame["n_micro"] > 0].reset_index(drop=True)


@settings(max_examples=examples(40), deadline=None)
@given(
    **POINTS,
    pick=st.one_of(st.none(), st.integers(0, 2**16)),
)
def test_rank_features_rows_of_the_used_points_only_are_the_plain_table(
    params: ScheduleParams, n: int, seed: int, interval: int, covers: str, pick: int | None
) -> None:
    """Rows made only for the points some micro-batch falls in (all of them, or a few
    picked): the table of every point x rank, empty rows dropped, to the bit."""
    rng = np.random.default_rng(seed)
    rep = replay(rng.integers(1, 60, n), params, epochs=2, categories=rng.choice(["a", "b"], n))
    logged = rep.steps["step"].to_numpy()[interval - 1 :: interval]
    pooled = micro_points(rep, logged, interval, covers)
    if pick is not None:
        pooled = points_only(pooled, np.random.default_rng(pick).random(logged.size) < 0.3)
    plain = every_rank_feature(rep, logged, interval, covers, pooled)
    fast = rank_features(rep, logged, interval, covers, pooled)
    pd.testing.assert_frame_equal(fast, plain, check_exact=True)


@settings(max_examples=examples(60), deadline=None)
@given(
    lengths=st.lists(st.integers(0, 2**40), min_size=1, max_size=50),
    picks=st.lists(st.integers(0, 49), max_size=80),
    top=st.sampled_from([100, 40_000, 2**40]),
    chunk=st.sampled_from([1, 3, 1 << 20]),
)
def test_entry_cells_are_the_lookups(lengths, picks, top, chunk) -> None:
    """Each entry's tokens and cell read a chunk at a time into small integers: the
    plain look-ups, value for value."""
    from unittest import mock

    from dflash_diag import arrays
    from dflash_diag.spikes.model import entry_cells

    ls = np.minimum(np.array(lengths, dtype=np.int64), top)
    ids = np.array([p % len(ls) for p in picks], dtype=np.int64)
    cells = (ls % 7).astype(np.int16)
    with mock.patch.object(arrays, "CHUNK", chunk):
        tokens, cell = entry_cells(ids, ls, cells)
    assert tokens.tolist() == ls[ids].tolist()
    assert cell.tolist() == cells[ids].tolist()
    assert tokens.itemsize <= (2 if top < 2**15 else 4 if top < 2**31 else 8)


def test_the_counterfactual_predicts_from_rows_in_c_order(monkeypatch) -> None:
    """The strategies' rows reach the mixture model in C order, as the plain code gave
    them (a column pick alone leaves them in Fortran order, and the prediction's sums
    follow the layout: the last bit of a variance moved)."""
    from pathlib import Path

    from dflash_diag.reports.spikes import spikes_report
    from dflash_diag.spikes.model import CompositionModel

    layouts = []
    predict = CompositionModel.predict

    def spy(self, design):
        layouts.append(bool(design.flags.c_contiguous))
        return predict(self, design)

    monkeypatch.setattr(CompositionModel, "predict", spy)
    report = spikes_report(Path(__file__).resolve().parents[2] / "sample_logs" / "run.log")
    assert len(report.variance.counterfactual) == 2
    assert layouts and all(layouts)


@settings(max_examples=examples(100), deadline=None)
@given(
    sizes=st.lists(st.integers(0, 5), min_size=1, max_size=30),
    data=st.data(),
)
def test_the_entries_of_consecutive_batches_are_their_range(sizes, data) -> None:
    # consecutive batches (a range) are read as one slice; any others by their positions:
    # the same entries in the same order either way
    from dflash_diag.schedule.base import segment_positions
    from dflash_diag.spikes.variance import _entries_of

    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = len(sizes)
    if data.draw(st.booleans()):
        first = data.draw(st.integers(0, n - 1))
        chosen = np.arange(first, data.draw(st.integers(first + 1, n)), dtype=np.int64)
    else:
        chosen = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1)), np.int64)
    entries = np.arange(int(offsets[-1]))
    assert entries[_entries_of(offsets, chosen)].tolist() == (
        segment_positions(offsets, chosen).tolist()
    )


@settings(max_examples=examples(60), deadline=None)
@given(
    steps=st.lists(st.integers(0, 3), max_size=12),
    values=st.lists(st.one_of(st.floats(allow_nan=True), st.integers(-5, 5)), min_size=12),
    step=st.integers(0, 3),
)
def test_a_spikes_rank_rows_are_the_rows_at_its_step(steps, values, step) -> None:
    # read column by column as float64: the rows iterrows reads, as floats
    import pandas as pd

    from dflash_diag.spikes.attribute import RANK_COLUMNS, _rank_columns, _rank_rows

    n = len(steps)
    table = {"step": steps, "rank": list(range(n)), "n_micro": [1] * n}
    for k, c in enumerate(RANK_COLUMNS[1:]):
        table[c] = [values[(k + i) % len(values)] for i in range(n)]
    table["n_samples"] = [3 * s + 1 for s in steps]  # (an int64 column among floats)
    per_rank = pd.DataFrame(table)
    rows = per_rank[per_rank["step"] == step]
    plain = tuple({c: float(r[c]) for c in RANK_COLUMNS} for _, r in rows.iterrows())
    fast = _rank_rows(per_rank, step)
    assert repr(fast) == repr(plain)
    assert repr(_rank_rows(_rank_columns(per_rank), step)) == repr(plain)  # (read once)
    assert _rank_rows(None, step) == ()


@settings(max_examples=examples(100), deadline=None)
@given(
    groups=st.lists(st.integers(0, 6), max_size=40),
    ordered=st.booleans(),
    seed=st.integers(0, 1000),
    floats=st.booleans(),
)
def test_the_extremes_of_groups_in_order_are_those_of_ufunc_at(groups, ordered, seed, floats):
    # groups in order (a replay's rows) take reduceat over their runs: the same values as
    # minimum.at / maximum.at over them in any order
    from dflash_diag.spikes.features import _extremes

    g = np.array(sorted(groups) if ordered else groups, dtype=np.int64)
    rng = np.random.default_rng(seed)
    low, high = rng.integers(0, 9000, g.size), rng.integers(0, 9000, g.size)
    if floats:  # (a column of floats, as a table may hold them)
        low = low.astype(np.float64) / 7
    lo, hi = np.full(7, np.inf), np.full(7, -np.inf)
    np.minimum.at(lo, g, low.astype(np.float64))
    np.maximum.at(hi, g, high.astype(np.float64))
    fast_lo, fast_hi = _extremes(g, low, high, 7)
    assert fast_lo.dtype == fast_hi.dtype == np.float64
    assert np.array_equal(fast_lo, lo)
    assert np.array_equal(fast_hi, hi)


@settings(max_examples=examples(60), deadline=None)
@given(**RUNS)
def test_findings_left_untested_are_the_findings(
    params: ScheduleParams,
    n: int,
    seed: int,
    n_cat: int,
    epochs: int,
    interval: int,
    covers: str,
    rank: int | None,
) -> None:
    """A run whose covered samples are each in one micro-batch (a sorted-greedy epoch)
    defers the membership and the evidence's table: what is read of them, and they
    once made, are what the plain path gives."""
    from unittest import mock

    from dflash_diag.spikes import culprits as c

    lengths, _ = lengths_and_categories(n, seed, n_cat)
    rep = replay(lengths, params, epochs=epochs)
    logged = rep.steps["step"].to_numpy()[::2]
    rank = None if rank is not None and rank >= params.world_size else rank
    idx = micro_points(rep, logged, interval, covers, rank)
    rng = np.random.default_rng(seed)
    z = rng.choice([np.nan, -1.0, 0.5, 2.5, 4.0], logged.size)
    excess = rng.normal(size=logged.size)
    fast = c.sample_findings(rep, idx, logged.size, z, excess, None, "b")
    with mock.patch.object(c, "covered_once", lambda *_: False):
        plain = c.sample_findings(rep, idx, logged.size, z, excess, None, "b")
    assert fast.separable == plain.separable
    pd.testing.assert_frame_equal(fast.named, plain.named, check_exact=True)
    for p in range(logged.size):
        assert c.culprits_at(fast, p) == c.culprits_at(plain, p)
        assert c.ordinary_elsewhere(fast, p) == c.ordinary_elsewhere(plain, p)
    e, f = fast.evidence, plain.evidence
    for name in ("ground", "n_points", "n_usable", "n_tested", "n_null", "rounds", "method"):
        assert getattr(e, name) == getattr(f, name), name
    pd.testing.assert_frame_equal(e.table, f.table, check_exact=True)
    for name in ("offsets", "samples", "sample_tokens"):
        assert np.array_equal(getattr(fast.membership, name), getattr(plain.membership, name))
