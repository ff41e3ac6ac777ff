"""Schedule statistics: padding, length ICC, adjacency, recurrence, category mix.

Replays are built by hand here (:func:`make_replay`) so every expected figure is
arithmetic on the compositions, independent of the replay engine; the engine-based
checks at the end run the real strategies.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pandas as pd
import pytest
from budget import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dflash_diag.batches.stats import (
    BatchMoments,
    batch_moments,
    check_strategy_names,
    compare_strategies,
    lag1_corr,
    length_icc,
    schedule_stats,
    schedule_warnings,
)
from dflash_diag.data import Replay, ScheduleParams
from dflash_diag.errors import InputError
from dflash_diag.schedule import replay
from dflash_diag.schedule.export import export_schedule, schedule_table


def make_replay(
    epochs: list[list[list[int]]],
    lengths: list[int] | np.ndarray,
    micro_per_step: int = 1,
    categories: list[int] | None = None,
    category_names: tuple[str, ...] = (),
    strategy: str = "sorted-greedy",
) -> Replay:
    """A Replay of the given micro-batches (one list of batches per epoch)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    ids: dict[frozenset[int], int] = {}
    rows = []
    flat: list[int] = []
    offsets = [0]
    step = 0
    for e, batches in enumerate(epochs):
        for j, batch in enumerate(batches):
            x = lengths[batch]
            row = {
                "epoch": e,
                "step": step + j // micro_per_step,
                "rank": j % micro_per_step,
                "micro": 0,
                "batch_id": ids.setdefault(frozenset(batch), len(ids)),
                "n_samples": len(batch),
                "tokens": int(x.sum()),
                "padded_tokens": int(len(batch) * x.max()),
                "min_len": int(x.min()),
                "mean_len": float(x.mean()),
                "max_len": int(x.max()),
                "len_std": float(x.std()),
                "padding_eff": float(x.sum() / max(1, len(batch) * x.max())),
            }
            for c, name in enumerate(category_names):
                assert categories is not None
                row[f"cat_{name}"] = float(np.mean([categories[i] == c for i in batch]))
            rows.append(row)
            flat.extend(batch)
            offsets.append(len(flat))
        step += len(batches) // micro_per_step
    micro = pd.DataFrame(rows)
    steps = micro.groupby("step", as_index=False).agg(tokens=("tokens", "sum"))
    return Replay(
        params=ScheduleParams(strategy=strategy, world_size=micro_per_step),
        lengths=lengths,
        sample_ids=np.asarray(flat, dtype=np.int64),
        offsets=np.asarray(offsets, dtype=np.int64),
        micro=micro,
        steps=steps,
        category_names=category_names,
    )


def chunked(order: np.ndarray, size: int) -> list[list[int]]:
    return [order[i : i + size].tolist() for i in range(0, len(order), size)]


def test_padding_efficiency_and_tokens_per_step_on_a_hand_case():
    # batches (1, 2) and (3, 4): real 3 + 7 = 10, padded 2*2 + 2*4 = 12
    s = schedule_stats(make_replay([[[0, 1], [2, 3]]], [1, 2, 3, 4]))
    assert s.padding_efficiency == pytest.approx(10 / 12)
    assert (s.tokens_per_step_min, s.tokens_per_step_median, s.tokens_per_step_max) == (3, 5, 7)
    assert (s.batches_per_epoch, s.steps_per_epoch, s.n_samples, s.epochs) == (2, 2, 4, 1)
    # within-batch stds are 0.5 and 0.5; CVs 0.5/1.5 and 0.5/3.5
    assert s.within_batch_std == pytest.approx(0.5)
    assert s.within_batch_cv == pytest.approx((1 / 3 + 1 / 7) / 2)
    assert s.recurrence is None  # one epoch: not enough data


def test_steps_pool_micro_batches():
    # two micro-batches per step: steps hold 1+2+3 = 6 and 4+5+6+7+8 = 30 tokens
    lengths = [1, 2, 3, 4, 5, 6, 7, 8]
    s = schedule_stats(make_replay([[[0], [1, 2], [3], [4, 5, 6, 7]]], lengths, 2))
    assert (s.tokens_per_step_min, s.tokens_per_step_max) == (6, 30)
    assert (s.batches_per_epoch, s.steps_per_epoch) == (4, 2)
    assert s.micro_per_step == 2


def _sorted_and_random(seed: int = 0, n: int = 4000, size: int = 8, epochs: int = 2):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(50, 8000, n)
    fixed = chunked(np.argsort(lengths, kind="stable"), size)
    sorted_epochs = [[fixed[i] for i in rng.permutation(len(fixed))] for _ in range(epochs)]
    random_epochs = [chunked(rng.permutation(n), size) for _ in range(epochs)]
    return lengths, sorted_epochs, random_epochs


def test_icc_recurrence_adjacency_separate_sorted_from_random():
    lengths, sorted_epochs, random_epochs = _sorted_and_random()
    fixed = schedule_stats(make_replay(sorted_epochs, lengths))
    rand = schedule_stats(make_replay(random_epochs, lengths, strategy="random"))
    assert fixed.length_icc > 0.99
    assert rand.length_icc < 0.05
    lo, hi = rand.length_icc_ci
    assert lo == 0.0 and hi < 0.1  # consistent with no between-batch variance
    assert fixed.length_icc_p < 1e-12
    assert fixed.recurrence == 1.0
    assert rand.recurrence < 0.05
    # batch order is shuffled in both: consecutive batch means are uncorrelated
    assert abs(fixed.adjacent_length_corr) < 0.15
    assert abs(rand.adjacent_length_corr) < 0.15


def test_adjacent_corr_of_an_ascending_schedule_is_near_one():
    lengths = np.arange(400) * 10
    s = schedule_stats(make_replay([chunked(np.arange(400), 4)], lengths))
    assert s.adjacent_length_corr > 0.99
    assert s.adjacent_length_corr_p < 1e-6


def test_adjacent_corr_uses_step_means_with_several_micro_batches_per_step():
    # micro-batches alternate short/long (lag-1 corr of micro means ~ -1), but every
    # step pools one of each and the steps grow steadily: step-level corr ~ +1
    batches = []
    for i in range(60):
        batches += [[2 * i], [2 * i + 1]]
    lengths = np.array([[10 + i, 5000 + 20 * i] for i in range(60)]).ravel()
    s = schedule_stats(make_replay([batches], lengths, micro_per_step=2))
    assert s.adjacent_length_corr > 0.99


def test_too_few_batches_is_not_enough_data():
    s = schedule_stats(make_replay([[[0, 1], [2, 3], [4, 5]]], [1, 2, 3, 4, 5, 6]))
    assert s.adjacent_length_corr is None and s.adjacent_length_corr_p is None


def test_icc_is_none_without_within_batch_information():
    assert schedule_stats(make_replay([[[0], [1], [2]]], [1, 2, 3])).length_icc is None
    assert schedule_stats(make_replay([[[0, 1], [2, 3]]], [5, 5, 5, 5])).length_icc is None


def _anova_icc(groups: list[np.ndarray]) -> float:
    """ICC(1) written out from the textbook definitions with pandas, for comparison."""
    frame = pd.DataFrame(
        {
            "g": np.repeat(np.arange(len(groups)), [len(g) for g in groups]),
            "x": np.concatenate(groups),
        }
    )
    grand = frame.x.mean()
    by = frame.groupby("g").x
    n_i = by.size()
    ssb = float((n_i * (by.mean() - grand) ** 2).sum())
    ssw = float(((frame.x - by.transform("mean")) ** 2).sum())
    g, n = len(groups), len(frame)
    msb, msw = ssb / (g - 1), ssw / (n - g)
    k0 = (n - (n_i**2).sum() / n) / (g - 1)
    return (msb - msw) / (msb + (k0 - 1) * msw)


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(st.lists(st.integers(0, 5000), min_size=1, max_size=12), min_size=2, max_size=30))
def test_icc_matches_a_direct_anova(groups):
    arrays = [np.asarray(g, dtype=np.int64) for g in groups]
    flat = np.concatenate(arrays)
    n = np.array([len(g) for g in arrays])
    if n.sum() - len(arrays) < 1 or np.ptp(flat) == 0:
        return
    m = BatchMoments(
        n=n,
        total=np.array([g.sum() for g in arrays]),
        sumsq=np.array([float((g.astype(float) ** 2).sum()) for g in arrays]),
        longest=np.array([g.max() for g in arrays]),
    )
    icc, ci, p = length_icc(m)
    expected = min(1.0, max(0.0, _anova_icc(arrays)))
    assert icc == pytest.approx(expected, abs=1e-9)
    assert ci[0] <= icc + 1e-12 and icc <= ci[1] + 1e-12
    assert 0.0 <= p <= 1.0


@settings(max_examples=examples(40), deadline=None)
@given(
    st.lists(st.integers(0, 9000), min_size=1, max_size=200),
    st.integers(1, 9),
    st.integers(1, 50),
    st.randoms(use_true_random=False),
)
def test_moments_do_not_depend_on_the_chunk_size(lengths, size, chunk, rnd):
    order = list(range(len(lengths)))
    rnd.shuffle(order)
    batches = chunked(np.asarray(order), size)
    r = make_replay([batches, batches[::-1]], lengths)
    small, big = batch_moments(r, chunk=chunk), batch_moments(r, chunk=1 << 20)
    for name in ("n", "total", "sumsq", "longest"):
        assert np.array_equal(getattr(small, name), getattr(big, name))
    # and they equal the per-batch sums written out
    assert big.total.tolist() == [sum(lengths[i] for i in b) for b in batches + batches[::-1]]


@settings(max_examples=examples(40), deadline=None)
@given(
    strategy=st.sampled_from(["sorted-greedy", "bucketed", "random", "distributed"]),
    lengths=st.lists(st.integers(0, 9000), min_size=1, max_size=200),
    seed=st.integers(0, 50),
    world_size=st.integers(1, 3),
    chunk=st.sampled_from([3, 1 << 20]),
)
def test_moments_from_the_micro_table_are_the_sums(strategy, lengths, seed, world_size, chunk):
    """The sizes, token sums and longest lengths read from a replay's micro table are
    the sums over its sample ids (only the squares are summed from them)."""
    params = ScheduleParams(
        strategy=strategy, seed=seed, token_budget=20000, batch_size=4, world_size=world_size
    )
    r = replay(np.asarray(lengths), params, epochs=2)
    plain, table = batch_moments(r, chunk=chunk), batch_moments(r, chunk=chunk, table=True)
    for name in ("n", "total", "sumsq", "longest"):
        assert np.array_equal(getattr(table, name), getattr(plain, name)), name
        assert getattr(table, name).dtype == getattr(plain, name).dtype


@settings(max_examples=examples(40), deadline=None)
@given(
    lengths=st.lists(
        st.one_of(st.integers(0, 9000), st.integers(65530, 70000)), min_size=1, max_size=60
    ),
    size=st.integers(1, 9),
    chunk=st.integers(1, 50),
    rnd=st.randoms(use_true_random=False),
)
@example(lengths=[65535, 40000, 3], size=2, chunk=1, rnd=random.Random(0))
def test_squares_from_the_narrow_lengths_are_the_wide_ones(lengths, size, chunk, rnd):
    """The table path squares lengths read from uint16 (int64 past 2**16 - 1): the same
    sums of squares as the plain path's int64 lengths."""
    order = list(range(len(lengths)))
    rnd.shuffle(order)
    batches = chunked(np.asarray(order), size)
    r = make_replay([batches], lengths)
    plain, table = batch_moments(r, chunk=chunk), batch_moments(r, chunk=chunk, table=True)
    assert table.sumsq.tobytes() == plain.sumsq.tobytes()
    assert table.sumsq.tolist() == [float(sum(lengths[i] ** 2 for i in b)) for b in batches]


def test_empty_micro_batches_do_not_break_the_moments():
    r = make_replay([[[0, 1], [2]]], [3, 4, 5])
    hollow = Replay(
        r.params,
        r.lengths,
        r.sample_ids,
        np.array([0, 2, 2, 3]),
        pd.concat([r.micro.iloc[:1], r.micro.iloc[:1], r.micro.iloc[1:]], ignore_index=True),
        r.steps,
    )
    m = batch_moments(hollow)
    assert m.total.tolist() == [7, 0, 5] and m.longest.tolist() == [4, 0, 5]


def test_lag1_corr_matches_numpy_on_noise():
    x = np.random.default_rng(3).normal(size=500)
    r, p = lag1_corr(x)
    assert r == pytest.approx(np.corrcoef(x[:-1], x[1:])[0, 1])
    assert p > 0.01  # white noise: no evidence of autocorrelation


def test_category_dispersion_separates_segregated_from_mixed_batches():
    rng = np.random.default_rng(1)
    n = 2000
    cats = rng.integers(0, 3, n)
    lengths = rng.integers(10, 100, n)
    segregated = chunked(np.argsort(cats, kind="stable"), 10)
    mixed = chunked(rng.permutation(n), 10)
    names = ("chat", "code", "math")
    seg = schedule_stats(make_replay([segregated], lengths, 1, cats.tolist(), names))
    mix = schedule_stats(make_replay([mixed], lengths, 1, cats.tolist(), names))
    assert seg.category_dispersion > 5
    assert 0.7 < mix.category_dispersion < 1.3
    assert set(seg.category_share_std) == set(names)
    assert schedule_stats(make_replay([mixed], lengths)).category_dispersion is None


def test_schedule_table_has_one_row_per_sample_in_schedule_order():
    r = make_replay([[[2, 0], [1]], [[1], [0, 2]]], [5, 6, 7])
    table = schedule_table(r, ids=np.array([100, 101, 102]))
    assert list(table.columns) == [
        "epoch",
        "step",
        "rank",
        "micro",
        "sample_id",
        "index",
        "batch_id",
    ]
    assert table["sample_id"].tolist() == [102, 100, 101, 101, 100, 102]
    assert table["step"].tolist() == [0, 0, 1, 2, 3, 3]
    assert table["batch_id"].tolist() == [0, 0, 1, 1, 0, 0]


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_export_written_in_pieces_equals_the_whole_table(tmp_path, suffix):
    rng = np.random.default_rng(4)
    lengths = rng.integers(1, 100, 50)
    r = make_replay([chunked(rng.permutation(50), 4) for _ in range(3)], lengths)
    ids = np.arange(50) + 7
    whole = schedule_table(r, ids)
    assert len(whole) == 150
    path = export_schedule(r, tmp_path / f"s{suffix}", ids, chunk=5)
    back = pd.read_parquet(path) if suffix == ".parquet" else pd.read_csv(path)
    pd.testing.assert_frame_equal(back, whole, check_dtype=False)


def test_export_refuses_to_overwrite_an_input(tmp_path):
    manifest = tmp_path / "m.csv"
    manifest.write_text("length\n1\n")
    r = make_replay([[[0]]], [1])
    with pytest.raises(InputError, match="refusing to overwrite an input file"):
        export_schedule(r, tmp_path / "." / "m.csv", protect=[manifest])
    assert manifest.read_text() == "length\n1\n"


def test_unknown_strategy_names_are_named():
    with pytest.raises(InputError) as e:
        check_strategy_names(["random", "sorted", "nope"])
    assert str(e.value) == (
        "--compare: unknown strategy 'sorted', 'nope'; choose from sorted-greedy, bucketed, "
        "length-grouped, fairseq, random, distributed or FILE.py:FUNC"
    )


def test_real_strategies_sorted_greedy_against_random():
    # the replay engine end to end: sorted-greedy recurs and is homogeneous, random is not
    lengths = np.random.default_rng(7).lognormal(np.log(1500), 0.8, 6000).astype(int) + 1
    params = ScheduleParams(token_budget=16384, max_seq_len=8192, epochs=2, seed=3)
    fixed, rand = compare_strategies(lengths, params, ["sorted-greedy", "random"])
    assert fixed.strategy == "sorted-greedy" and rand.strategy == "random"
    assert fixed.length_icc > 0.95 and rand.length_icc < 0.05
    assert fixed.recurrence == 1.0 and rand.recurrence < 0.05
    assert fixed.padding_efficiency > rand.padding_efficiency
    assert math.isfinite(rand.padding_efficiency)
    # statistics already computed for params' own strategy are reused, and are the same
    again = compare_strategies(lengths, params, ["sorted-greedy"], reuse=fixed)
    assert again[0] is fixed
    assert schedule_stats(replay(lengths, params)) == fixed


# --- schedule_warnings: what the schedule does to samples that do not fit it ---------


@settings(max_examples=examples(40), deadline=None)
@given(
    st.lists(st.integers(1, 3000), min_size=1, max_size=200),
    st.integers(1, 4000),
    st.one_of(st.none(), st.integers(1, 3000)),
    st.sampled_from(["sorted-greedy", "bucketed", "fairseq"]),
)
def test_the_over_budget_warning_says_what_the_replay_does(lengths, budget, cap, strategy):
    # invariant: the warning counts exactly the samples the schedule treats as over the
    # budget: alone in a micro-batch (sorted-greedy, bucketed) or left out (fairseq)
    params = ScheduleParams(strategy=strategy, token_budget=budget, max_seq_len=cap)
    warned = {w.kind: w for w in schedule_warnings(np.array(lengths), params)}
    r = replay(np.array(lengths), params)
    capped = np.minimum(lengths, cap) if cap is not None else np.array(lengths)
    over = int((capped > budget).sum())
    assert (warned["over_budget"].samples if "over_budget" in warned else 0) == over
    if strategy == "fairseq":
        assert r.dropped.get("samples_over_budget", 0) == over
    else:
        # every over-budget sample sits alone: it is a one-sample micro-batch (a replay
        # may leave the last incomplete step out, so count those it kept)
        sizes = np.diff(r.offsets)
        alone = {int(r.sample_ids[r.offsets[i]]) for i in np.flatnonzero(sizes == 1)}
        kept = set(r.sample_ids.tolist())
        assert all(i in alone for i in np.flatnonzero(capped > budget) if i in kept)
    cut = int((np.array(lengths) > cap).sum()) if cap is not None else 0
    assert (warned["truncated"].samples if "truncated" in warned else 0) == cut


def test_warnings_name_the_count_and_the_consequence():
    lengths = np.array([50, 300, 1100, 1200])
    params = ScheduleParams(token_budget=100, max_seq_len=1000)
    note, warning = schedule_warnings(lengths, params)
    assert (note.level, note.kind, note.samples, note.n_samples) == ("note", "truncated", 2, 4)
    assert note.message == (
        "2 of 4 samples (50%) are longer than max_seq_len 1,000: the schedule counts each "
        "as 1,000 tokens (truncated)"
    )
    assert (warning.level, warning.kind, warning.samples) == ("warning", "over_budget", 3)
    assert warning.message == (
        "3 of 4 samples (75%) are longer than the token budget (100 tokens, even truncated "
        "to max_seq_len 1,000): each is a micro-batch of its own, over the budget"
    )
    fairseq = schedule_warnings(lengths, params.replace(strategy="fairseq"))[1]
    assert "fairseq leaves them out of the schedule" in fairseq.message


def test_no_warning_when_every_sample_fits():
    lengths = np.array([50, 300, 900])
    assert schedule_warnings(lengths, ScheduleParams(token_budget=1000)) == []
    # capped at the budget, nothing is over it; only the cap is noted
    capped = schedule_warnings(lengths, ScheduleParams(token_budget=100, max_seq_len=100))
    assert [(w.kind, w.samples) for w in capped] == [("truncated", 2)]


def test_strategies_with_a_batch_size_are_not_warned_about_the_budget():
    lengths = np.array([50, 300, 900])
    for name in ("random", "length-grouped"):
        params = ScheduleParams(strategy=name, token_budget=100, batch_size=2)
        assert schedule_warnings(lengths, params) == []


def test_epochs_the_seed_does_not_decide_are_a_warning():
    # torch's global generator with dropout not ruled out: only epoch 0 follows
    import numpy as np

    from dflash_diag.batches.stats import schedule_warnings
    from dflash_diag.data import ScheduleParams

    lengths = np.arange(1, 101)
    p = ScheduleParams(
        strategy="length-grouped", batch_size=4, rng="torch", seeding="global", epochs=3
    )
    (w,) = [x for x in schedule_warnings(lengths, p) if x.kind == "undetermined"]
    assert w.level == "warning"
    assert w.message.startswith("only epoch 0 of the 3 asked for follows from the seed")
    ruled_out = p.replace(dropout=False)
    assert not [x for x in schedule_warnings(lengths, ruled_out) if x.kind == "undetermined"]
    assert not [
        x for x in schedule_warnings(lengths, p.replace(epochs=1)) if x.kind == "undetermined"
    ]


@settings(max_examples=examples(80), deadline=None)
@given(
    lens=st.one_of(
        st.lists(st.integers(0, 9000), max_size=300),
        st.lists(st.integers(-5, 2**40), max_size=50),
        st.lists(st.floats(0, 1e4, allow_nan=False), max_size=50),
    ),
    cap=st.one_of(st.none(), st.integers(1, 8192)),
    budget=st.integers(1, 100_000),
    chunk=st.sampled_from([1, 7, 1 << 20]),
)
def test_default_batch_size_from_whole_sums_is_the_float_mean(lens, cap, budget, chunk):
    """Summed in int64 a chunk at a time: the batch size of the float64 mean of a float64
    copy, as first written."""
    from unittest import mock

    from dflash_diag import arrays
    from dflash_diag.batches.stats import _whole_sum, default_batch_size

    x = np.array(lens)
    params = ScheduleParams(token_budget=budget, max_seq_len=cap)
    plain_x = np.asarray(x, dtype=np.float64)
    if cap is not None:
        plain_x = np.minimum(plain_x, cap)
    mean = float(plain_x.mean()) if plain_x.shape[0] else 1.0
    plain = max(1, int(budget // max(mean, 1.0)))
    with mock.patch.object(arrays, "CHUNK", chunk):
        assert default_batch_size(x, params) == plain
        total = _whole_sum(x, cap)
    if total is not None and x.size:
        assert total / x.size == mean
