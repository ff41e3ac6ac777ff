"""``--preset hf-trainer`` through the commands: the real Trainer run's tokens verify, and
``spikes`` says when later epochs are not determined by the seed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app

DATA = Path(__file__).resolve().parents[1] / "data" / "samplers"
runner = CliRunner()
PRESET = ["--preset", "hf-trainer", "--per-device-train-batch-size", "8", "--seed", "42"]


@pytest.fixture()
def trainer_run(tmp_path, monkeypatch) -> Path:
    """The group_by_length run with dropout: its lengths as a manifest, and a log whose
    loss follows the batches' mean length (two spikes) and whose tokens are the run's."""
    doc = json.loads((DATA / "trainer.json").read_text())
    (case,) = [
        c
        for c in doc["cases"]
        if c["train_sampling_strategy"] == "group_by_length" and c["dropout"] == 0.1
    ]
    lengths = np.array(doc["lengths"])
    pd.DataFrame({"sample_id": np.arange(len(lengths)), "length": lengths}).to_parquet(
        tmp_path / "lengths.parquet"
    )
    noise = np.random.default_rng(0).normal(0, 0.05, len(case["steps"]))
    lines = []
    for i, ids in enumerate(case["steps"]):
        loss = 2.0 + 0.01 * lengths[ids].mean() + noise[i] + (2.0 if i in (40, 120) else 0.0)
        lines.append(f"step={i + 1} loss={loss:.4f} tokens={int(lengths[ids].sum())}")
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def spikes_json(args: list[str]) -> dict:
    result = runner.invoke(app, ["spikes", "train.log", "--manifest", "lengths.parquet", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_spikes_says_later_epochs_are_not_determined(trainer_run):
    doc = spikes_json([*PRESET, "--group-by-length", "--json"])
    check = doc["schedule_check"]
    assert check["status"] == "verified"
    notes = [n for n in doc["notes"] if "not determined" in n]
    assert len(notes) == 1
    assert "only steps up to 75 are replayed" in notes[0]
    assert "record each step's sample ids" in notes[0]


def test_spikes_text_has_the_note_once(trainer_run):
    result = runner.invoke(
        app,
        ["spikes", "train.log", "--manifest", "lengths.parquet", *PRESET, "--group-by-length"],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.count("note: epochs from 1 on are not determined by the seed") == 1


def test_a_wrong_no_dropout_is_refuted_by_the_tokens(trainer_run):
    result = runner.invoke(
        app,
        [
            "spikes",
            "train.log",
            "--manifest",
            "lengths.parquet",
            *PRESET,
            "--group-by-length",
            "--no-dropout",
        ],
    )
    # epochs 1 and 2 drawn as if nothing else used the generator: the tokens disagree
    assert result.exit_code == 2
    assert "error:" in result.stderr and len(result.stderr.strip()) <= 300
