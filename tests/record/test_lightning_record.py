"""LightningRecorder on real Lightning fits: the recording is what the model trained on.

The GPT-2 of ``trainer_runs.py`` in a LightningModule: a shuffled DataLoader (its
RandomSampler draws from the global torch generator, which dropout 0.1 draws from too),
accumulate_grad_batches 2, the loss logged every step to a CSV file. Sample ``i`` starts with
token ``FIRST + i``, so a forward pre-hook reads what the model received as sample ids.

Skipped outside CI where torch or lightning is missing; under CI they must run.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.record import trainer_runs as runs
from tests.record.test_trainer_record import as_seen, need, recorded_batches, seen_batches

torch = need("torch")
need("transformers")
need("lightning")

from dflash_diag.record import read_recording  # noqa: E402

pytestmark = pytest.mark.slow


def logged_steps(out: Path) -> list[int]:
    """The steps of the loss rows in the CSV log."""
    with open(out / "log" / "version_0" / "metrics.csv", newline="") as f:
        return [int(row["step"]) for row in csv.DictReader(f) if row.get("loss")]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, runs.Seen, Path]:
    out = tmp_path_factory.mktemp("lightning_recorded")
    trainer, seen = runs.lightning_train(out, record=out / "train.batches")
    return trainer, seen, out


@pytest.fixture(scope="module")
def unrecorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, runs.Seen]:
    out = tmp_path_factory.mktemp("lightning_unrecorded")
    return runs.lightning_train(out, record=None)


def test_every_micro_batch_is_what_the_forward_received(recorded):
    trainer, seen, out = recorded
    got = recorded_batches(read_recording(out / "train.batches").table)
    assert got == seen_batches(seen)
    assert len(got) == 45  # 15 micro-batches an epoch, 3 epochs


def test_steps_are_the_logged_steps(recorded):
    trainer, _, out = recorded
    table = read_recording(out / "train.batches").table
    # Lightning logs an update at the global_step before it: 0 .. global_step - 1
    assert logged_steps(out) == list(range(trainer.global_step))
    assert sorted(set(table["step"])) == logged_steps(out)
    assert table.groupby("step")["micro"].nunique().tolist() == ([2] * 7 + [1]) * 3
    assert Counter(table["sample_id"].tolist()) == {i: 3 for i in range(runs.N_SAMPLES)}
    replay = read_recording(out / "train.batches").to_replay()
    assert replay.steps["epoch"].tolist() == [e for e in range(3) for _ in range(8)]


def test_the_header_says_the_trainer_settings(recorded):
    _, _, out = recorded
    settings = read_recording(out / "train.batches").header["settings"]
    assert settings["accumulate_grad_batches"] == 2
    assert settings["batch_size"] == 4
    assert settings["world_size"] == 1
    assert settings["sampler"] == "RandomSampler"
    assert settings["seed"] == "42"
    assert settings["steps_per_epoch"] == 8
    assert settings["run"] == "lightning_runs"


def test_the_recorder_changes_nothing_that_is_trained(recorded, unrecorded):
    rec_trainer, rec_seen, _ = recorded
    trainer, seen = unrecorded
    assert seen_batches(rec_seen) == seen_batches(seen)
    assert rec_seen.losses == seen.losses  # to the bit: same batches, same dropout draws
    rec_params = dict(rec_trainer.lightning_module.named_parameters())
    for name, p in trainer.lightning_module.named_parameters():
        assert torch.equal(p, rec_params[name]), name


def test_sample_losses_returned_by_training_step_are_recorded(tmp_path, unrecorded):
    # training_step returns {"loss", "sample_losses"}: the same training, and each
    # micro-batch's per-sample losses average (by target tokens) to its loss
    trainer, seen = runs.lightning_train(
        tmp_path, record=tmp_path / "train.batches", sample_losses=True
    )
    plain, plain_seen = unrecorded
    assert seen.losses == plain_seen.losses
    params = dict(trainer.lightning_module.named_parameters())
    for name, p in plain.lightning_module.named_parameters():
        assert torch.equal(p, params[name]), name
    rec = read_recording(tmp_path / "train.batches")
    assert rec.has_losses and rec.table["loss"].notna().all()
    groups = list(rec.table.groupby(["step", "micro"], sort=False))
    assert len(groups) == len(seen.losses) == 45
    for (_, g), ids, targets, loss in zip(groups, seen.ids, seen.targets, seen.losses, strict=True):
        n_of = dict(zip(ids, targets, strict=True))
        n = [n_of[i] for i in g["sample_id"]]
        mean = sum(x * k for x, k in zip(g["loss"], n, strict=True)) / sum(n)
        assert mean == pytest.approx(loss, rel=1e-5)  # (no num_items: a mean over tokens)


def test_a_wrong_count_of_sample_losses_is_said():
    from dflash_diag.record.hf import Composition, StepRecorder
    from dflash_diag.record.lightning import RecorderState

    state = RecorderState("unused.batches", None, None)
    state.steps = StepRecorder(recorder=None, rank=0)  # type: ignore[arg-type]
    state.pending = (Composition(np.array([3, 1]), np.array([5, 6])), 0)
    with pytest.raises(ValueError, match="returned 3 sample_losses for a batch of 2 samples"):
        state.finish({"loss": 0.0, "sample_losses": [1.0, 2.0, 3.0]})


def test_worker_processes(tmp_path):
    # the outer collate function runs in two worker processes
    trainer, seen = runs.lightning_train(
        tmp_path, record=tmp_path / "train.batches", workers=2, epochs=2
    )
    got = recorded_batches(read_recording(tmp_path / "train.batches").table)
    assert got == seen_batches(seen)
    assert len(got) == 30


def test_two_processes_write_one_file_each(tmp_path):
    # Lightning's ddp on 2 CPU ranks (gloo), its DistributedSampler: each rank records its
    # own micro-batches; together, every sample exactly once an epoch
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, str(Path(runs.__file__)), str(tmp_path), "lightning"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("*.batches")) == [
        "train.rank0.batches",
        "train.rank1.batches",
    ]
    table = read_recording(tmp_path / "train.batches").table
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"seen.rank{rank}.json").read_text())
        assert seen["world_size"] == 2
        got = recorded_batches(table[table["rank"] == rank])
        assert got == as_seen(seen["steps"], seen["ids"], seen["lengths"])
    # 30 samples a rank an epoch: 7 micro-batches of 4 and one of 2, 4 steps of 2 each
    assert (table.groupby(["step", "rank"])["micro"].nunique() == 2).all()
    assert sorted(set(table["step"])) == list(range(8))
    for first in (0, 4):
        epoch = table[table["step"].between(first, first + 3)]["sample_id"]
        assert sorted(epoch) == list(range(runs.N_SAMPLES))


def test_the_callback_is_a_lightning_callback_and_pickles():
    # ddp_spawn pickles the trainer's callbacks; the class is made on first use
    import pickle

    from lightning.pytorch import Callback

    from dflash_diag.record import LightningRecorder

    again = pickle.loads(pickle.dumps(LightningRecorder("train.batches")))
    assert isinstance(again, Callback) and type(again) is LightningRecorder
