"""Verification against a log's per-step tokens, and the seed search."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.batches.stats import params_for
from dflash_diag.composition.ground import MIN_TOKENS_MATCH
from dflash_diag.data import STRATEGY_NAMES, ScheduleParams
from dflash_diag.errors import InputError
from dflash_diag.schedule import replay, search_seed, verify_tokens
from dflash_diag.schedule.verify import step_token_table, verify_replayed

DATA = Path(__file__).resolve().parents[1] / "data" / "real_run"
RUN = ScheduleParams(token_budget=16384, max_seq_len=2048, first_step=1, epochs=2, seed=1234)


@pytest.fixture(scope="module")
def lengths():
    import pyarrow.parquet as pq

    return pq.read_table(DATA / "manifest.parquet", columns=["length"])["length"].to_numpy()


@pytest.fixture(scope="module")
def log_table():
    # the run's own numbers, read with a regex so this test stands on its own
    text = (DATA / "run.log").read_text(encoding="utf-8")
    pairs = np.array(re.findall(r"\| step (\d+)/\d+ \|.*\| ntok (\d+) \|", text), dtype=np.int64)
    return pd.DataFrame({"step": pairs[:, 0], "tokens": pairs[:, 1].astype(float)})


def test_the_real_run_verifies_at_every_step(lengths, log_table):
    v = verify_tokens(replay(lengths, RUN), log_table)
    assert (v.tokens_match, v.n_compared, v.n_log_steps, v.n_replayed_steps) == (1.0, 488, 488, 488)
    assert v.first_mismatch is None
    assert (v.seed, v.first_step, v.basis) == (1234, 1, "step")


def test_an_off_by_one_step_number_is_caught(lengths, log_table):
    v = verify_tokens(replay(lengths, RUN.replace(first_step=0)), log_table)
    assert v.tokens_match < 0.1
    assert v.n_compared == 487  # step 488 is not in a replay numbered 0..487
    assert v.first_mismatch == 1


def test_verify_with_read_log(lengths):
    from dflash_diag.logs import read_log

    run = read_log(DATA / "run.log")
    for log in (run, run.table):
        v = verify_tokens(replay(lengths, RUN), log)
        assert v.tokens_match == 1.0 and v.n_compared == 488


def test_search_finds_the_seed_and_the_first_step(lengths, log_table):
    calls = []
    found = search_seed(
        lengths,
        RUN.replace(seed=0, first_step=0),
        log_table,
        seeds=range(1200, 1300),
        progress=lambda d, t: calls.append((d, t)),
        min_match=MIN_TOKENS_MATCH,
    )
    v = found.best
    assert (v.seed, v.first_step, v.tokens_match, v.n_compared) == (1234, 1, 1.0, 488)
    assert found.seed_found
    # it stopped at the perfect match
    assert calls[-1] == (35, 100)
    assert (found.first_seed, found.last_seed, found.tried) == (1200, 1299, 35)


def test_search_without_the_seed_is_not_found(lengths, log_table):
    # the best of five wrong seeds is a candidate, not a result
    found = search_seed(lengths, RUN, log_table, seeds=range(0, 5), min_match=MIN_TOKENS_MATCH)
    assert found.best.tokens_match < 0.1
    assert found.best.seed in range(0, 5)
    assert not found.seed_found
    assert (found.first_seed, found.last_seed, found.tried) == (0, 4, 5)


def test_found_means_the_match_reaches_min_match(lengths, log_table):
    # the true seed, with one step in ten of the log corrupted: 90% of steps match
    bad = log_table.copy()
    bad.loc[bad.index % 10 == 0, "tokens"] += 1
    found = search_seed(lengths, RUN, bad, seeds=[1234], min_match=0.9)
    rate = found.best.tokens_match
    assert 0.85 < rate < 0.95
    assert found.seed_found == (rate >= 0.9)
    assert search_seed(lengths, RUN, bad, seeds=[1234], min_match=rate).seed_found
    assert not search_seed(lengths, RUN, bad, seeds=[1234], min_match=rate + 1e-9).seed_found


def test_a_search_over_no_compared_step_is_not_found():
    # the log's steps lie beyond every replayed step: nothing to compare, nothing found
    lens = np.array([3, 1, 2, 2])
    log = pd.DataFrame({"step": [500, 501, 502], "tokens": [3.0, 3.0, 3.0]})
    found = search_seed(lens, ScheduleParams(token_budget=4), log, seeds=range(3), min_match=0.0)
    assert found.best.n_compared == 0
    assert not found.seed_found


def test_step_token_table_equals_replay(lengths):
    params = RUN.replace(world_size=3, grad_accum=2)
    total, rank0 = step_token_table(lengths, params)
    r = replay(lengths, params)
    assert total.tolist() == r.steps.tokens.tolist()
    rank0_replay = r.micro[r.micro["rank"] == 0].groupby("step")["tokens"].sum()
    assert rank0.tolist() == rank0_replay.tolist()


def test_multi_rank_logs_are_matched_on_the_basis_they_use():
    lens = np.random.default_rng(3).integers(1, 900, 3000)
    params = ScheduleParams(token_budget=4000, world_size=4, seed=2)
    r = replay(lens, params)
    rank0 = r.micro[r.micro["rank"] == 0].set_index("step")["tokens"]
    log = pd.DataFrame({"step": rank0.index, "tokens": rank0.to_numpy(dtype=float)})
    v = verify_tokens(r, log)
    assert (v.basis, v.tokens_match) == ("rank0", 1.0)
    log_mean = pd.DataFrame({"step": r.steps.step, "tokens": r.steps.tokens / 4})
    assert verify_tokens(r, log_mean).basis == "rank_mean"


def test_a_resumed_log_keeps_the_last_value_of_a_step():
    r = replay(np.array([3, 1, 2, 2]), ScheduleParams(token_budget=4))
    truth = r.steps.tokens.tolist()
    log = pd.DataFrame({"step": [0, 1, 1, 2], "tokens": [truth[0], 999.0, truth[1], np.nan]})
    v = verify_tokens(r, log)
    assert (v.tokens_match, v.n_compared, v.n_log_steps) == (1.0, 2, 2)


def test_a_log_without_tokens_is_an_input_error():
    r = replay(np.array([3, 1]), ScheduleParams(token_budget=4))
    with pytest.raises(InputError, match="no 'tokens' column"):
        verify_tokens(r, pd.DataFrame({"step": [0]}))
    with pytest.raises(InputError, match="no steps with a tokens value"):
        search_seed(
            np.array([3, 1]),
            ScheduleParams(),
            pd.DataFrame({"step": [0], "tokens": [np.nan]}),
            min_match=MIN_TOKENS_MATCH,
        )


def test_a_log_every_ten_steps_is_matched_over_its_interval():
    lens = np.random.default_rng(4).integers(1, 900, 5000)
    r = replay(lens, ScheduleParams(token_budget=4000, seed=5, first_step=1))
    tokens = r.steps.set_index("step")["tokens"]
    logged = np.arange(10, int(tokens.index.max()) + 1, 10)
    # each line reports the tokens of the 10 steps since the last line
    summed = [float(tokens.loc[s - 9 : s].sum()) for s in logged]
    v = verify_tokens(r, pd.DataFrame({"step": logged, "tokens": summed}))
    assert (v.basis, v.tokens_match, v.n_compared) == ("interval_sum", 1.0, len(logged))
    meaned = [x / 10 for x in summed]
    v = verify_tokens(r, pd.DataFrame({"step": logged, "tokens": meaned}))
    assert (v.basis, v.tokens_match) == ("interval_mean", 1.0)
    found = search_seed(
        lens,
        ScheduleParams(token_budget=4000),
        pd.DataFrame({"step": logged, "tokens": summed}),
        seeds=range(10),
        min_match=MIN_TOKENS_MATCH,
    )
    assert found.seed_found
    assert (found.best.seed, found.best.first_step, found.best.basis) == (5, 1, "interval_sum")


def test_the_real_run_verifies_without_its_replay(lengths, log_table):
    v = verify_replayed(lengths, RUN, log_table)
    assert repr(v) == repr(verify_tokens(replay(lengths, RUN), log_table))
    assert (v.tokens_match, v.n_compared, v.first_mismatch) == (1.0, 488, None)


@settings(max_examples=examples(60), deadline=None)
@given(
    n=st.integers(1, 400),
    strategy=st.sampled_from(STRATEGY_NAMES),
    world=st.integers(1, 3),
    accum=st.integers(1, 2),
    epochs=st.integers(1, 3),
    first=st.integers(0, 2),
    every=st.integers(1, 4),
    cap=st.sampled_from([None, 300]),
    seed=st.integers(0, 2**16),
)
def test_verifying_from_step_tokens_is_verifying_the_replay(
    n, strategy, world, accum, epochs, first, every, cap, seed
):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 600, n)
    params = ScheduleParams(
        token_budget=1024, world_size=world, grad_accum=accum, seed=seed, max_seq_len=cap
    )
    params = params_for(strategy, params.replace(epochs=epochs, first_step=first), lengths)
    r = replay(lengths, params)
    steps = r.steps["step"].to_numpy()[::every]
    tokens = r.steps["tokens"].to_numpy()[::every].astype(float)
    tokens[rng.random(tokens.size) < 0.2] += 1  # (some steps that do not match)
    after = int(steps[-1]) + 5 if steps.size else 3  # (and a step the replay has not)
    log = pd.DataFrame({"step": np.r_[steps, after], "tokens": np.r_[tokens, 9.0]})
    assert repr(verify_replayed(lengths, params, log)) == repr(verify_tokens(r, log))


@settings(max_examples=examples(30), deadline=None)
@given(
    st.lists(st.integers(1, 300), min_size=8, max_size=200),
    st.sampled_from(STRATEGY_NAMES),
    st.integers(1, 3),
    st.integers(1, 2),
)
def test_the_padded_tokens_are_the_replays(lens, strategy, world, accum):
    from dflash_diag.schedule.verify import _step_tokens

    lengths = np.array(lens)
    given_ = ScheduleParams(token_budget=600, seed=5, world_size=world, grad_accum=accum)
    params = params_for(strategy, given_.replace(epochs=2), lengths)
    total, rank0, padded = _step_tokens(lengths, params, None, None, padded=True)
    r = replay(lengths, params)
    assert padded is not None
    assert padded[0].tolist() == r.steps.padded_tokens.tolist()
    first = r.micro[r.micro["rank"] == 0].groupby("step")["padded_tokens"].sum()
    assert padded[1].tolist() == first.reindex(r.steps.step, fill_value=0).tolist()
    real = step_token_table(lengths, params)
    assert (total.tolist(), rank0.tolist()) == (real[0].tolist(), real[1].tolist())


@pytest.mark.parametrize("basis", ["step", "rank0"])
def test_a_log_that_counts_padding_is_matched_with_padding(basis):
    """The HF Trainer's ``include_num_input_tokens_seen=True`` logs padded tokens."""
    lens = np.random.default_rng(4).integers(1, 500, 2000)
    params = ScheduleParams(strategy="random", batch_size=8, world_size=2, seed=3, epochs=1)
    r = replay(lens, params)
    if basis == "step":
        counted = r.steps.set_index("step")["padded_tokens"]
    else:
        counted = r.micro[r.micro["rank"] == 0].groupby("step")["padded_tokens"].sum()
    log = pd.DataFrame({"step": counted.index, "tokens": counted.to_numpy(dtype=float)})
    for v in (verify_tokens(r, log), verify_replayed(lens, params, log)):
        assert (v.basis, v.padded, v.tokens_match) == (basis + "_padded", True, 1.0)
    real = pd.DataFrame({"step": r.steps.step, "tokens": r.steps.tokens.astype(float)})
    assert verify_tokens(r, real).basis == "step" and not verify_tokens(r, real).padded


def test_equal_lengths_match_as_real_tokens_first():
    """Without padding the two counts are one: the real tokens' basis is named."""
    lens = np.full(64, 10)
    r = replay(lens, ScheduleParams(strategy="random", batch_size=4, seed=1, epochs=1))
    log = pd.DataFrame({"step": r.steps.step, "tokens": r.steps.tokens.astype(float)})
    assert verify_tokens(r, log).basis == "step"


def test_a_seed_search_finds_the_seed_of_a_log_that_counts_padding():
    """``include_num_input_tokens_seen=True``: the log's tokens are padded counts, and
    the search compares those once their scale says so."""
    lens = np.random.default_rng(8).integers(1, 500, 3000)
    truth = replay(lens, ScheduleParams(strategy="random", batch_size=8, seed=37, first_step=1))
    log = pd.DataFrame({"step": truth.steps.step, "tokens": truth.steps.padded_tokens * 1.0})
    params = ScheduleParams(strategy="random", batch_size=8, epochs=1)
    found = search_seed(lens, params, log, seeds=range(60), min_match=0.9)
    assert found.seed_found and (found.best.seed, found.best.padded) == (37, True)
    real = pd.DataFrame({"step": truth.steps.step, "tokens": truth.steps.tokens * 1.0})
    found = search_seed(lens, params, real, seeds=range(60), min_match=0.9)
    assert found.seed_found and (found.best.seed, found.best.padded) == (37, False)
