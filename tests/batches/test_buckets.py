"""Bucket-edge optimisation: the DP is optimal, the baselines follow their rules, the
simulation agrees with the model's bound, and training time is arithmetic."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.batches.buckets import (
    METHODS,
    batch_max_efficiency,
    batch_max_uppers,
    edges_from_uppers,
    length_histogram,
    lhotse_uppers,
    optimal_uppers,
    optimize_buckets,
    pad_to_edge_efficiency,
    parse_throughput,
    quantile_uppers,
    training_time,
)
from dflash_diag.data import ScheduleParams
from dflash_diag.errors import InputError


def padded_to_edges(lengths: list[int], uppers: list[int]) -> int:
    """Tokens when each sample is padded to the smallest upper length >= it (plain loop)."""
    return sum(min(u for u in uppers if u >= x) for x in lengths)


def brute_force_best(lengths: list[int], k: int) -> int:
    """Least pad-to-edge tokens over every way of cutting the distinct lengths in <= k."""
    values = sorted(set(lengths))
    best = math.inf
    for n_cuts in range(0, min(k, len(values))):
        for cuts in itertools.combinations(values[:-1], n_cuts):
            best = min(best, padded_to_edges(lengths, [*cuts, values[-1]]))
    return int(best)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.integers(1, 60), min_size=1, max_size=40), st.integers(1, 5))
def test_dp_is_optimal_against_brute_force(lengths, k):
    hist = length_histogram(np.asarray(lengths))
    for kk, uppers in enumerate(optimal_uppers(hist, k), start=1):
        assert len(uppers) <= kk
        assert uppers[-1] == max(lengths)  # the last bucket ends at the longest sample
        assert padded_to_edges(lengths, uppers) == brute_force_best(lengths, kk)


def test_dp_on_a_hand_case():
    # lengths 10, 10, 20, 90: two buckets are best cut after 20 (pad 10 -> 20: 20 tokens)
    hist = length_histogram(np.array([10, 10, 20, 90]))
    assert optimal_uppers(hist, 3) == [[90], [20, 90], [10, 20, 90]]
    assert pad_to_edge_efficiency(hist, [20, 90]) == pytest.approx(130 / 150)


def lhotse_literal(sizes: list[int], num_buckets: int) -> list[int]:
    """lhotse estimate_duration_buckets, transcribed from its source (research notes)."""
    sizes = sorted(sizes)
    size_per_bucket = sum(sizes) / num_buckets
    bins, tot = [], 0.0
    for size in sizes:
        if tot > size_per_bucket:
            bins.append(size)
            tot = 0.0
        tot += size
    return bins


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=300), st.integers(1, 8))
def test_lhotse_buckets_follow_lhotse_rule(lengths, k):
    hist = length_histogram(np.asarray(lengths))
    expected = sorted(set(lhotse_literal(lengths, k)) | {max(lengths)})
    assert lhotse_uppers(hist, k) == expected


def test_quantile_buckets_hold_equal_counts():
    lengths = np.arange(1, 601)
    uppers = quantile_uppers(length_histogram(lengths), 6)
    assert uppers == [100, 200, 300, 400, 500, 600]


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(st.integers(0, 3000), min_size=1, max_size=50),
    st.integers(1, 6),
    st.sampled_from([None, 3000, 4096]),
)
def test_edges_put_each_length_in_its_bucket(lengths, k, cap):
    hist = length_histogram(np.asarray(lengths))
    uppers = optimal_uppers(hist, k)[-1]
    edges = edges_from_uppers(uppers, cap)
    ScheduleParams(buckets=edges)  # strictly increasing, accepted as --buckets
    for x in lengths:
        # ScheduleParams: bucket i is [e_i, e_{i+1}), the last closed above
        inside = [i for i in range(len(edges) - 1) if edges[i] <= x < edges[i + 1]]
        bucket = inside[0] if inside else len(edges) - 2
        assert bucket == next(i for i, u in enumerate(uppers) if u >= x)


def test_training_time_is_real_tokens_over_real_throughput():
    # 1e9 real tokens x 2 epochs at 80% of 25.1k padded tokens/s
    assert training_time(1e9, 2, 0.8, 25_100) == pytest.approx(2e9 / (25_100 * 0.8))
    assert training_time(1e9, 2, 0.0, 25_100) == math.inf


@pytest.mark.parametrize(
    ("text", "value"), [("25.1k", 25_100.0), ("3M", 3e6), ("1_000", 1000.0), (".5k", 500.0)]
)
def test_parse_throughput(text, value):
    assert parse_throughput(text) == value


@pytest.mark.parametrize("text", ["fast", "-3k", "0", "25.1q"])
def test_bad_throughput_is_named(text):
    with pytest.raises(InputError) as e:
        parse_throughput(text)
    assert str(e.value).startswith("--throughput: ")
    assert repr(text) in str(e.value) or text == "0"


def test_zero_buckets_is_refused():
    with pytest.raises(InputError) as e:
        optimize_buckets(np.array([1, 2]), ScheduleParams(), 0, simulate=False)
    assert (
        str(e.value)
        == "--optimize-buckets: must be 1 or more, got 0; give the most buckets, e.g. 6"
    )


def long_tailed(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.minimum(rng.lognormal(np.log(1500), 0.9, n).astype(np.int64) + 1, 8192)


@pytest.mark.slow
def test_plan_has_every_method_and_k_and_training_times():
    params = ScheduleParams(token_budget=16384, max_seq_len=8192, seed=1)
    plan = optimize_buckets(long_tailed(3000), params, 4, throughput=25_100.0, epochs=3)
    assert [(o.method, o.k) for o in plan.options] == [
        (m, k) for m in ("dp-batch-max", "dp-edge", "lhotse", "quantile") for k in range(1, 5)
    ]
    for o in plan.options:
        # pad-to-edge bounds the padding of batches packed inside one bucket
        assert o.padding_efficiency >= o.model_efficiency - 1e-12
        assert o.training_seconds == pytest.approx(
            training_time(plan.real_tokens_per_epoch, 3, o.padding_efficiency, 25_100.0)
        )
    edge = [o.model_efficiency for o in plan.best("dp-edge")]
    assert edge == sorted(edge)  # more buckets never pad more (optimal, at-most-k)
    for k in range(1, 5):
        same_k = [o for o in plan.options if o.k == k]
        # each DP is the best under its own model
        best_edge = max(o.model_efficiency for o in same_k)
        best_max = max(o.batch_max_efficiency for o in same_k)
        by = {o.method: o for o in same_k}
        assert by["dp-edge"].model_efficiency >= best_edge - 1e-12
        assert by["dp-batch-max"].batch_max_efficiency >= best_max - 1e-12


@pytest.mark.slow
def test_chosen_edges_simulate_at_least_as_well_as_equal_count_quantiles():
    params = ScheduleParams(token_budget=16384, max_seq_len=8192, seed=2)
    plan = optimize_buckets(long_tailed(20_000, 5), params, 6)
    sim = {(o.method, o.k): o.padding_efficiency for o in plan.options}
    chosen = plan.recommended()
    assert [o.k for o in chosen] == [1, 2, 3, 4, 5, 6]
    for o in chosen:
        assert o.padding_efficiency == max(sim[(m, o.k)] for m in METHODS)
        assert o.padding_efficiency >= sim[("quantile", o.k)]
    # the batch-max DP is the model that tracks the simulation: it beats equal-count
    # quantiles and the pad-to-edge DP at 3-4 buckets, where the long tail's batches
    # (few samples, maxima far below the edge) dominate the padding
    for k in (3, 4):
        assert sim[("dp-batch-max", k)] > sim[("quantile", k)]
        assert sim[("dp-batch-max", k)] > sim[("dp-edge", k)]


def batch_max_brute_force(lengths: list[int], k: int, params: ScheduleParams) -> float:
    hist = length_histogram(np.asarray(lengths))
    values = hist.values.tolist()
    best = -math.inf
    for n_cuts in range(0, min(k, len(values))):
        for cuts in itertools.combinations(values[:-1], n_cuts):
            best = max(best, batch_max_efficiency(hist, [*cuts, values[-1]], params))
    return best


@settings(max_examples=examples(40), deadline=None)
@given(
    st.lists(st.integers(1, 400), min_size=1, max_size=40),
    st.integers(1, 4),
    st.integers(200, 2000),
    st.sampled_from(["padded", "tokens"]),
)
def test_batch_max_dp_is_optimal_under_its_model(lengths, k, budget, mode):
    params = ScheduleParams(token_budget=budget, budget_mode=mode)
    hist = length_histogram(np.asarray(lengths))
    for kk, uppers in enumerate(batch_max_uppers(hist, k, params), start=1):
        assert len(uppers) <= kk and uppers[-1] == max(lengths)
        got = batch_max_efficiency(hist, uppers, params)
        assert got == pytest.approx(batch_max_brute_force(lengths, kk, params), rel=1e-12)


def reference_dp_cost(values: np.ndarray, counts: np.ndarray, k: int) -> float:
    """Least pad-to-edge padding with at most k buckets: the plain O(k U^2) recursion."""
    u = len(values)
    c = np.concatenate([[0], np.cumsum(counts)]).astype(float)
    s = np.concatenate([[0], np.cumsum(values * counts)]).astype(float)
    best = np.full(u + 1, np.inf)
    best[0] = 0.0
    for _ in range(k):
        nxt = best.copy()  # at most k: keeping fewer buckets is allowed
        for b in range(1, u + 1):
            a = np.arange(b)
            cost = values[b - 1] * (c[b] - c[a]) - (s[b] - s[a])
            nxt[b] = min(nxt[b], float(np.min(best[a] + cost)))
        best = nxt
    return float(best[u])


@pytest.mark.slow
def test_dp_pruning_across_blocks_keeps_the_optimum():
    # more distinct lengths than one block of the vectorised DP (256): the pruning by
    # monotone split points is exercised across blocks
    rng = np.random.default_rng(11)
    lengths = np.minimum(rng.lognormal(np.log(300), 0.8, 5000).astype(np.int64) + 1, 2000)
    hist = length_histogram(lengths)
    assert hist.values.shape[0] > 600
    for k, uppers in enumerate(optimal_uppers(hist, 4), start=1):
        padded = padded_to_edges(lengths.tolist(), uppers) - int(lengths.sum())
        assert padded == pytest.approx(reference_dp_cost(hist.values, hist.counts, k))


@pytest.mark.slow
def test_batch_max_dp_on_a_coarse_grid_gives_valid_edges():
    # more distinct lengths than GRID: edges come from every ceil(U / GRID)-th length
    lengths = np.arange(1, 3001)
    hist = length_histogram(lengths)
    params = ScheduleParams(token_budget=8192)
    for k, uppers in enumerate(batch_max_uppers(hist, 5, params), start=1):
        assert len(uppers) <= k and uppers[-1] == 3000
        assert all(u % 3 == 0 for u in uppers)  # grid step 3: distinct lengths 3, 6, ...
        ScheduleParams(buckets=edges_from_uppers(uppers, 3000))
