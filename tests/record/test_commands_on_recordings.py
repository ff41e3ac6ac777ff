"""The commands on what the recorders wrote: `spikes LOG --composition FILE` and `batches
--composition FILE` on real Trainer and Lightning runs (tiny GPT-2, CPU, group_by_length or a
shuffled DataLoader, dropout 0.1, gradient accumulation 2; ``trainer_runs.py``).

The logs are the ones the libraries write themselves: the Trainer's ``trainer_state.json``
(its ``log_history``, with ``num_input_tokens_seen`` counting the non-padding tokens) and
Lightning's ``CSVLogger`` ``metrics.csv``. Skipped outside CI when torch is missing; under CI
they must run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.record import trainer_runs as runs
from tests.record.test_trainer_record import need

need("torch")
need("transformers")

from dflash_diag.cli import app  # noqa: E402
from dflash_diag.record import read_recording  # noqa: E402

pytestmark = pytest.mark.slow
runner = CliRunner()


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("hf_tokens")
    trainer, _ = runs.train(
        out / "run",
        record=out / "train.batches",
        include_num_input_tokens_seen="non_padding",
    )
    trainer.state.save_to_json(str(out / "trainer_state.json"))  # the Trainer's own file
    return out / "trainer_state.json", out / "train.batches"


@pytest.fixture(scope="module")
def hf_padded_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Any]:
    """The same run with ``include_num_input_tokens_seen=True``: the Trainer counts every
    token of its batches, padding included."""
    out = tmp_path_factory.mktemp("hf_padded")
    trainer, seen = runs.train(
        out / "run", record=out / "train.batches", include_num_input_tokens_seen=True
    )
    trainer.state.save_to_json(str(out / "trainer_state.json"))
    return out / "trainer_state.json", out / "train.batches", seen


def spikes_json(log: Path, *args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["spikes", str(log), *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_spikes_lines_the_trainer_log_up_with_its_recording_and_checks_the_tokens(hf_run):
    log, recording = hf_run
    doc = spikes_json(log, "--composition", str(recording))
    check = doc["schedule_check"]
    assert check["status"] == "recorded"
    # the Trainer counted the real tokens of every step; the recording holds the same
    assert "recorded tokens match the log at 100.0%" in check["detail"], check["detail"]
    assert doc["composition"] and "train.batches" in doc["composition"]


def test_the_recording_beside_the_log_is_found(hf_run, tmp_path):
    log, recording = hf_run
    (tmp_path / "trainer_state.json").write_bytes(log.read_bytes())
    (tmp_path / "trainer_state.batches").write_bytes(recording.read_bytes())
    doc = spikes_json(tmp_path / "trainer_state.json")
    assert doc["schedule_check"]["status"] == "recorded"
    assert "found beside the log" in doc["composition"]


def test_every_logged_step_is_lined_up_with_what_it_recorded(hf_run):
    from dflash_diag.composition import Request
    from dflash_diag.reports import spikes_report

    log, recording = hf_run
    report = spikes_report(log, batches=Request(composition=recording))
    points = report.attribution.points.set_index("step")
    per_step = read_recording(recording).table.groupby("step")["length"]
    assert set(points.index) == set(per_step.groups)  # every logged step has its batches
    assert points["n_samples"].to_dict() == per_step.size().to_dict()
    assert points["tokens"].to_dict() == pytest.approx(per_step.sum().astype(float).to_dict())


def test_batches_measures_the_recorded_schedule(hf_run):
    _, recording = hf_run
    result = runner.invoke(app, ["batches", "--composition", str(recording), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    table = read_recording(recording).table
    assert doc["strategy"] == "recorded"
    micro = table.groupby(["step", "rank", "micro"])["length"]
    real, padded = micro.sum().sum(), (micro.max() * micro.size()).sum()
    assert doc["padding_efficiency"] == pytest.approx(real / padded)


def test_spikes_on_a_lightning_csv_log_and_its_recording(tmp_path):
    need("lightning")
    runs.lightning_train(tmp_path, record=tmp_path / "train.batches")
    log = tmp_path / "log" / "version_0" / "metrics.csv"
    doc = spikes_json(log, "--composition", str(tmp_path / "train.batches"))
    assert doc["schedule_check"]["status"] == "recorded"
    # Lightning logs no tokens: the check says the recording holds every logged step
    assert "holds 100.0% of the logged steps" in doc["schedule_check"]["detail"]


def test_a_trainer_that_counts_padding_is_checked_against_the_padded_tokens(hf_padded_run):
    """``include_num_input_tokens_seen=True`` logs each step's padded tokens (the forward's
    ``input_ids`` elements); the recording's are the same, and the check says so."""
    log, recording, seen = hf_padded_run
    doc = spikes_json(log, "--composition", str(recording))
    check = doc["schedule_check"]
    assert check["status"] == "recorded", check
    assert "match the log at 100.0%" in check["detail"], check["detail"]
    assert "counting padding" in check["detail"]
    # the truth, from the model's own inputs: rows x width per micro-batch, summed a step
    padded: dict[int, int] = {}
    for step, lengths in zip(seen.steps, seen.lengths, strict=True):
        padded[step] = padded.get(step, 0) + len(lengths) * max(lengths)
    history = json.loads(log.read_text())["log_history"]
    seen_total = [h["num_input_tokens_seen"] for h in history if "loss" in h]
    assert seen_total[-1] == sum(padded.values())
