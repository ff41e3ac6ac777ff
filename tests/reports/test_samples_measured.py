"""`samples` with per-sample losses measured in the training forward: the poison_long run's
recording written again with the losses the run's own forward computed (its
sample_loss.parquet, the per-sample truth of tests/data/trainer_runs), through
BatchRecorder's ``losses=``, as record_trainer(sample_losses=True) writes them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dflash_diag.composition import Request
from dflash_diag.record import BatchRecorder, read_recording
from dflash_diag.reports import samples_report

pytestmark = pytest.mark.slow


def _with_losses(run, path):
    rec = read_recording(run.batches)
    truth = pd.read_parquet(run.folder / "sample_loss.parquet")[["step", "sample_id", "loss"]]
    t = rec.table.drop(columns="loss").merge(truth, on=["step", "sample_id"], how="left")
    with BatchRecorder(path, rank=0, world_size=1, settings=rec.settings) as out:
        for (step, rank, micro), part in t.groupby(["step", "rank", "micro"], sort=True):
            out.log(
                step, part["sample_id"], part["length"], rank=rank, micro=micro, losses=part["loss"]
            )
    return path


def test_measured_losses_put_every_poison_sample_in_the_top_percent(trainer_run, tmp_path):
    run = trainer_run("poison_long")
    recording = _with_losses(run, tmp_path / "train.batches")
    assert read_recording(recording).has_losses
    r = samples_report(run.state, batches=Request(composition=recording, manifest=run.manifest))
    excess = r.table.set_index("sample_id")["measured_excess"]
    assert np.isfinite(excess).all()  # every sample was trained, and measured
    top = set(excess.sort_values(ascending=False).index[: len(excess) // 100])
    assert run.poison <= top
    # and used to name: measured ground, tested on the samples' own losses
    assert set(r.table["ground"]) == {"measured"}
    named = set(r.table.loc[r.table["named"], "sample_id"])
    assert len(named & run.poison) >= 8 and len(named - run.poison) <= 2
