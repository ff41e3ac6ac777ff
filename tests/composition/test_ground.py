"""The replay must cover the log and match its tokens before attribution runs."""

from __future__ import annotations

import re

import pytest

from dflash_diag.composition.ground import MIN_TOKENS_MATCH, check_schedule, epochs_to_cover
from dflash_diag.errors import InputError
from dflash_diag.schedule import replay
from tests.spikes.constructed import run


@pytest.fixture(scope="module")
def short_hard():
    return (run(beta=-0.12),)


def test_a_schedule_that_does_not_match_is_refused_unless_forced(short_hard) -> None:
    (r,) = short_hard
    wrong = replay(r.manifest, r.replay.params.replace(seed=8), epochs=3)
    with pytest.raises(InputError) as err:
        check_schedule(wrong, r.table, path="run.log", named_by="cfg.toml (found beside the log)")
    msg = str(err.value)
    # the error names where the schedule came from, and how to find the run's
    assert msg.startswith(
        "run.log: the schedule from cfg.toml (found beside the log) matches the logged "
        "tokens at only "
    )
    assert "--search-seed" in msg and msg.endswith("; or --force")
    assert len(msg) <= 300
    forced = check_schedule(wrong, r.table, force=True)
    assert forced.status == "refuted"
    assert forced.verification.tokens_match < MIN_TOKENS_MATCH
    ok = check_schedule(r.replay, r.table)
    assert (ok.status, ok.verification.tokens_match) == ("verified", 1.0)


def test_without_tokens_a_named_schedule_is_given_and_an_unnamed_one_refused(short_hard):
    (r,) = short_hard
    no_tokens = r.table.drop(columns="tokens")
    given = check_schedule(r.replay, no_tokens, named_by="--config run.toml")
    assert given.status == "given" and given.verification is None
    assert "--config run.toml cannot be checked" in given.detail
    with pytest.raises(InputError) as err:
        check_schedule(r.replay, no_tokens, path="run.log", named=False)
    assert str(err.value).startswith(
        "run.log: no schedule named and the log has no tokens to check one against; "
    )


def test_an_unnamed_default_is_used_only_when_the_tokens_verify_it(short_hard):
    (r,) = short_hard
    ok = check_schedule(r.replay, r.table, named=False, named_by="the default schedule")
    assert ok.status == "verified" and "the default schedule" in ok.detail
    wrong = replay(r.manifest, r.replay.params.replace(seed=8), epochs=3)
    with pytest.raises(InputError):
        check_schedule(wrong, r.table, named=False, named_by="the default schedule")


def test_epochs_to_cover_the_log(short_hard) -> None:
    (r,) = short_hard
    per_epoch = int((r.replay.steps["epoch"] == 0).sum())
    last = r.replay.params.first_step + 2 * per_epoch  # one step into epoch 3
    assert epochs_to_cover(r.manifest, r.replay.params, last) == 3
    with pytest.raises(InputError) as err:
        epochs_to_cover(r.manifest, r.replay.params, 10_000_000, path="run.log")
    assert str(err.value) == (
        f"run.log: the manifest's 6000 samples make {per_epoch} steps per epoch; the log's "
        f"last step 10000000 would need {-(-10_000_000 // per_epoch)} epochs; check that the "
        "manifest is the run's, and --token-budget/--world-size/--grad-accum"
    )


def _logged_tokens(rep) -> object:
    import pandas as pd

    return pd.DataFrame(
        {"step": rep.steps["step"].to_numpy(), "tokens": rep.steps["tokens"].to_numpy()}
    )


def test_tokens_confirm_lengths_not_ids_when_batches_are_formed_by_length() -> None:
    """A manifest whose rows are shuffled has the same lengths: under sorted-greedy the
    replay gives the same tokens, so "verified" must say it confirmed lengths only."""
    import numpy as np

    from tests.spikes.constructed import PARAMS, manifest

    m = manifest(n=1500)
    run_replay = replay(m, PARAMS, epochs=2)
    logged = _logged_tokens(run_replay)
    perm = np.random.default_rng(1).permutation(len(m.lengths))
    shuffled = type(m)(m.path, m.lengths[perm], m.ids[perm], m.categories[perm], m.category_names)
    g = check_schedule(replay(shuffled, PARAMS, epochs=2), logged)
    assert (g.status, g.ids_confirmed) == ("verified", False)
    assert g.detail.endswith(" (lengths only: sorted-greedy batches by length; ids unconfirmed)")


def test_tokens_confirm_ids_when_batches_are_drawn_by_index() -> None:
    """Under a random sampler the same shuffled manifest no longer replays the logged
    tokens (refused), and the run's own manifest is verified with its ids confirmed."""
    import numpy as np

    from tests.spikes.constructed import PARAMS, manifest

    m = manifest(n=1500)
    params = PARAMS.replace(strategy="random", batch_size=8)
    logged = _logged_tokens(replay(m, params, epochs=2))
    ok = check_schedule(replay(m, params, epochs=2), logged)
    assert (ok.status, ok.ids_confirmed) == ("verified", True)
    assert "lengths only" not in ok.detail
    perm = np.random.default_rng(1).permutation(len(m.lengths))
    shuffled = type(m)(m.path, m.lengths[perm], m.ids[perm], m.categories[perm], m.category_names)
    with pytest.raises(InputError, match="matches the logged tokens at only"):
        check_schedule(replay(shuffled, params, epochs=2), logged)


def test_a_size_mismatch_on_one_count_only_says_both_ways() -> None:
    """Logged real tokens a step at the replay's real size but in another order (another
    seed): on real tokens the sizes agree, on padded ones they do not, so the message
    gives both ratios and what each reading of the log means."""
    from tests.spikes.constructed import PARAMS, manifest

    m = manifest(n=1500)
    params = PARAMS.replace(strategy="random", batch_size=8, grad_accum=2)
    logged = _logged_tokens(replay(m, params.replace(seed=params.seed + 1), epochs=2))
    with pytest.raises(InputError) as err:
        check_schedule(replay(m, params, epochs=2), logged, path="run.log")
    msg = str(err.value)
    held = re.search(
        r"its steps hold ([0-9.]+)x the replay's real tokens, ([0-9.]+)x its padded", msg
    )
    assert held is not None
    real, padded = (float(x) for x in held.groups())
    assert 0.8 < real < 1.25 and not 0.8 < padded < 1.25
    assert "if the log counts padding, no seed can change that: check --batch-size" in msg
    assert "; else search the run's seed" in msg


def test_a_mismatch_in_step_size_names_the_size_not_the_seed(short_hard) -> None:
    """Logged steps 4x the replay's cannot be a seed: the advice names the budget, the
    batch size and the world size, with the two medians, and no seed search."""
    (r,) = short_hard
    small = replay(r.manifest, r.replay.params.replace(token_budget=4096), epochs=12)
    with pytest.raises(InputError) as err:
        check_schedule(small, r.table, path="run.log")
    msg = str(err.value)
    assert re.search(r"its steps hold [0-9.]+x the replay's tokens;", msg)
    assert "a seed cannot change that: check --token-budget, --grad-accum, --world-size" in msg
    assert "--search-seed" not in msg
    # a wrong seed only: the steps are the same size, so the seed is what to search
    wrong = replay(r.manifest, r.replay.params.replace(seed=8), epochs=3)
    with pytest.raises(InputError, match="--search-seed"):
        check_schedule(wrong, r.table, path="run.log")
