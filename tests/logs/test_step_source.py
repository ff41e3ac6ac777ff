"""Where a log's step numbers come from, and why it matters for lining steps up with batches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.logs import read_log

DATA = Path(__file__).resolve().parents[1] / "data"
runner = CliRunner()
# The real run's schedule (tests/data/real_run/README.md), named by flags.
REAL_SCHEDULE = ["--seed", "1234", "--token-budget", "16384", "--max-seq-len", "2048"]


def hf_dict_lines(path: Path, n: int = 120, epoch: bool = True) -> Path:
    # The HF Trainer's printed dicts carry no step when its progress bar is not captured.
    path.write_text(
        "".join(
            f"{{'loss': {2.5 - i * 0.001:.4f}, 'learning_rate': 0.0001"
            + (f", 'epoch': {i / 100:.2f}}}\n" if epoch else "}\n")
            for i in range(1, n + 1)
        )
    )
    return path


def test_step_source_says_field_progress_or_line_order(tmp_path):
    assert read_log(DATA / "real_run" / "run.log").step_source == "field"
    assert read_log(DATA / "logs" / "hf_trainer_stdout.log").step_source == "progress"
    run = read_log(hf_dict_lines(tmp_path / "train.log"))
    assert run.step_source == "line order"
    assert run.table["step"].tolist() == list(range(1, 121))


def test_parse_says_when_steps_are_only_line_numbers(tmp_path):
    result = runner.invoke(app, ["parse", str(hf_dict_lines(tmp_path / "train.log"))])
    assert result.exit_code == 0
    assert "steps: the records carry no step" in result.stdout


@pytest.mark.slow
def test_spikes_refuses_to_join_line_numbers_to_a_schedule_unless_forced(tmp_path):
    log = str(hf_dict_lines(tmp_path / "train.log", epoch=False))  # (no epochs to check)
    manifest = str(DATA / "real_run" / "manifest.parquet")
    result = runner.invoke(app, ["spikes", log, "--manifest", manifest])
    assert result.exit_code == 2
    assert result.stderr.startswith(
        f"error: {log}: the log's records carry no step (they are numbered by line order)"
    )
    named = ["--strategy", "sorted-greedy", *REAL_SCHEDULE]
    forced = runner.invoke(
        app, ["spikes", log, "--manifest", manifest, *named, "--force", "--json"]
    )
    assert forced.exit_code == 0, forced.stderr
    doc = json.loads(forced.stdout)
    assert doc["step_source"] == "line order"
    # no tokens in HF dict lines: the named schedule is given, not verified
    assert doc["schedule_check"]["status"] == "given"
    text = runner.invoke(app, ["spikes", log, "--manifest", manifest, *named, "--force"]).stdout
    assert "'event N' is its N-th logged record, not optimizer step N" in text


def test_step_every_renumbers_line_order_records_and_lets_spikes_join(tmp_path):
    log = hf_dict_lines(tmp_path / "train.log")
    run = read_log(log, step_every=10)
    assert run.step_source == "given interval"
    assert run.table["step"].tolist() == [10 * i for i in range(1, 121)]
    manifest = str(DATA / "real_run" / "manifest.parquet")
    args = ["spikes", str(log), "--manifest", manifest, "--step-every", "1"]
    refused = runner.invoke(app, args)  # no schedule named, no tokens: nothing to rest on
    assert refused.exit_code == 2
    assert "no schedule named and the log has no tokens" in refused.stderr
    named = [*args, "--strategy", "sorted-greedy", *REAL_SCHEDULE]
    # these made-up lines' epochs (100 records an epoch) are not the real run's schedule's
    refused = runner.invoke(app, named)
    assert refused.exit_code == 2
    assert "the log's epochs fit the batches' at only" in refused.stderr
    result = runner.invoke(app, [*named, "--force"])
    assert result.exit_code == 0, result.stderr
    assert "schedule check: refuted: the log's epochs fit" in result.stdout
    without = hf_dict_lines(tmp_path / "no_epoch.log", epoch=False)
    result = runner.invoke(app, [*named[:1], str(without), *named[2:]])
    assert result.exit_code == 0, result.stderr
    assert "schedule check: given: the log has no tokens column" in result.stdout


def test_step_every_on_a_log_with_steps_is_refused():
    log = DATA / "real_run" / "run.log"
    result = runner.invoke(app, ["parse", str(log), "--step-every", "10"])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {log}: the log numbers its own steps (from a step field), so --step-every "
        "does not apply; leave --step-every out\n"
    )
