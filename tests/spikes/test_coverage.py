"""The replay must cover the log and match its tokens before attribution runs."""

from __future__ import annotations

import pytest

from dflash_diag.errors import InputError
from dflash_diag.schedule import replay
from dflash_diag.spikes.coverage import MIN_TOKENS_MATCH, check_schedule, epochs_to_cover

from .constructed import run


@pytest.fixture(scope="module")
def short_hard():
    return (run(beta=-0.12),)


def test_a_schedule_that_does_not_match_is_refused_unless_forced(short_hard) -> None:
    (r,) = short_hard
    wrong = replay(r.manifest, r.replay.params.replace(seed=8), epochs=3)
    with pytest.raises(InputError) as err:
        check_schedule(wrong, r.table, path="run.log")
    msg = str(err.value)
    assert msg.startswith("run.log: the replayed schedule matches the logged tokens at only ")
    assert msg.endswith("or pass --force to attribute anyway")
    forced = check_schedule(wrong, r.table, force=True)
    assert forced.tokens_match < MIN_TOKENS_MATCH
    assert check_schedule(r.replay, r.table).tokens_match == 1.0
    assert check_schedule(r.replay, r.table.drop(columns="tokens")) is None


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
