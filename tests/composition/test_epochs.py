"""The log's epochs against the batches': the check for a log without tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.composition.epochs import MIN_EPOCH_STEPS, epoch_fit
from dflash_diag.composition.ground import check_recording, check_schedule
from dflash_diag.data import ScheduleParams
from dflash_diag.errors import InputError
from dflash_diag.logs import read_log
from dflash_diag.record import read_recording
from dflash_diag.schedule import replay

RUNS = Path(__file__).resolve().parents[1] / "data" / "trainer_runs"


def logged(steps: pd.DataFrame, how: str, digits: int = 4) -> pd.DataFrame:
    """A log of ``steps``' epochs as a trainer writes them (``fraction``: the HF
    Trainer's ``e + k / K``; ``from 0``: Lightning's; ``from 1``), rounded as printed."""
    r = steps["epoch"].to_numpy()
    if how == "fraction":
        k = steps.groupby("epoch").cumcount().to_numpy() + 1
        size = steps.groupby("epoch")["step"].transform("size").to_numpy()
        e = np.round(r + k / size, digits)
    else:
        e = (r + (how == "from 1")).astype(float)
    return pd.DataFrame({"step": steps["step"].to_numpy(), "epoch": e, "loss": 1.0})


def schedule(n: int, batch: int, epochs: int = 3, seed: int = 1) -> pd.DataFrame:
    lengths = np.random.default_rng(seed).integers(5, 200, n)
    params = ScheduleParams(strategy="random", batch_size=batch, epochs=epochs, seed=seed)
    return replay(lengths, params.replace(first_step=1))


@pytest.mark.parametrize("run", sorted(p.parent.name for p in RUNS.glob("*/train.batches")))
def test_the_real_trainer_runs_epochs_fit_their_recordings(run):
    """The HF Trainer's own logged epochs (transformers' ``state.epoch``) against the
    batches its recorder wrote: every step fits."""
    fit = epoch_fit(
        read_recording(RUNS / run / "train.batches").to_replay().steps,
        read_log(RUNS / run / "train.log").table,
    )
    assert fit is not None and (fit.share, fit.model) == (1.0, "fraction")


@settings(max_examples=examples(25), deadline=None)
@given(st.integers(40, 400), st.integers(2, 9), st.sampled_from(["fraction", "from 0", "from 1"]))
def test_a_runs_own_epochs_fit_however_they_are_logged(n, batch, how):
    steps = schedule(n, batch).steps
    fit = epoch_fit(steps, logged(steps, how))
    assert fit is not None and fit.fits and fit.share == 1.0


@settings(max_examples=examples(25), deadline=None)
@given(st.integers(160, 600), st.integers(2, 6), st.floats(1.25, 3.0))
def test_another_batch_size_does_not_fit(n, batch, factor):
    """Epochs of ``K`` steps against a log of another run's ``K' >= 1.25 K`` (20 or
    more steps an epoch, three epochs): the steps part early, and most do not fit."""
    ours = schedule(n, batch).steps
    theirs = schedule(n, max(batch + 1, round(batch * factor))).steps
    for how in ("fraction", "from 0"):
        fit = epoch_fit(ours, logged(theirs, how))
        assert fit is not None and not fit.fits, (how, fit)


def test_a_recording_that_starts_on_a_resume_still_fits():
    """The recorder added on a resume holds the first epoch in part: its place there is
    counted from where the epoch ends."""
    steps = schedule(200, 4).steps
    log = logged(steps, "fraction")
    fit = epoch_fit(steps[steps["step"] > 17], log)
    assert fit is not None and fit.share == 1.0


def test_too_few_steps_or_no_epoch_say_nothing():
    steps = schedule(200, 4).steps
    log = logged(steps, "fraction")
    assert epoch_fit(steps, log.drop(columns="epoch")) is None
    assert epoch_fit(steps, log.head(MIN_EPOCH_STEPS - 1)) is None


def test_a_recording_of_another_run_is_refused_without_tokens_and_forced_as_refuted():
    other = schedule(300, 7)
    log = logged(schedule(300, 8).steps, "fraction")
    with pytest.raises(InputError, match="the log's epochs fit the batches' at only"):
        check_recording(other, log, log["step"].to_numpy(), path="x.batches", named_by="x")
    ground = check_recording(other, log, log["step"].to_numpy(), force=True, named_by="x")
    assert ground.status == "refuted" and "--force" in ground.detail


def test_a_replay_of_another_batch_size_is_refused_and_the_right_one_given():
    right, wrong = schedule(300, 8), schedule(300, 7)
    log = logged(right.steps, "from 0")
    with pytest.raises(InputError, match="is not this run's"):
        check_schedule(wrong, log, path="run.log")
    ground = check_schedule(right, log, path="run.log")
    assert ground.status == "given"
    assert "the log's epochs fit it at 100%" in ground.detail
