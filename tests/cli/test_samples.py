"""`dflash-diag samples`: the ranking of every sample, its file, its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app

RUN = Path(__file__).resolve().parents[1] / "data" / "trainer_runs" / "poison_long"
runner = CliRunner()


def _args(*more: str) -> list[str]:
    return [
        "samples",
        str(RUN / "trainer_state.json"),
        "--composition",
        str(RUN / "train.batches"),
        "--manifest",
        str(RUN / "manifest.parquet"),
        *more,
    ]


@pytest.mark.slow
def test_samples_writes_every_sample_to_join_to_the_dataset(tmp_path):
    out = tmp_path / "samples.parquet"
    result = runner.invoke(app, _args("--to", str(out), "--json", "--top", "5"))
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)  # one document on stdout
    table = pd.read_parquet(out)
    manifest = pd.read_parquet(RUN / "manifest.parquet")
    # one row per sample of the dataset, joinable on sample_id
    assert sorted(table["sample_id"]) == sorted(manifest["sample_id"])
    assert doc["n_samples"] == len(table) and len(doc["ranking"]) == 5
    assert doc["schedule_check"]["status"] == "recorded"
    poison = set(json.loads((RUN / "truth.json").read_text())["poison"]["ids"])
    named = set(table.loc[table["named"], "sample_id"])
    # the recording measured each sample's loss: tested on it, 9 of the 10 (the one
    # poison sample of the motif kind is as hard as its kind) and nothing clean
    assert set(table["ground"]) == {"measured"} and doc["ground"] == "measured"
    assert len(named & poison) >= 9 and named <= poison
    # most suspect first: the named ones lead, by q
    assert table["named"].iloc[: int(table["named"].sum())].all()
    assert table["q"].iloc[: int(table["named"].sum())].is_monotonic_increasing


def test_samples_without_batches_is_one_error_line(tmp_path, cli):
    log = tmp_path / "train.log"
    log.write_text("".join(f"step {i} loss {2.0 + (i % 7) * 0.01}\n" for i in range(1, 200)))
    result = cli.invoke(app, ["samples", str(log)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {log}: no composition: nothing says which samples each step held; give "
        "--composition FILE (a recording), or --manifest and the run's schedule"
    ]


def test_samples_to_an_input_is_refused_before_the_analysis():
    result = runner.invoke(app, _args("--to", str(RUN / "manifest.parquet")))
    assert result.exit_code == 2
    assert "refusing to overwrite an input file" in result.stderr


@pytest.mark.slow
def test_a_replay_of_the_trainers_sampler_names_what_the_recording_names(tmp_path, cli):
    """The poison_long run replayed with --preset hf-trainer (the Trainer's own
    RandomSampler, seed 42) from a log whose tokens were dropped: the schedule is given,
    not checked, so the ids are said to be unconfirmed; it names exactly what the
    recording names on the same ground (inferred: a replay has no measured losses); and
    the same schedule under another seed names nobody."""
    state = json.loads((RUN / "trainer_state.json").read_text())
    for row in state["log_history"]:
        row.pop("num_input_tokens_seen", None)
    log = tmp_path / "trainer_state.json"
    log.write_text(json.dumps(state))
    out = tmp_path / "given.csv"
    args = ["samples", str(log), "--manifest", str(RUN / "manifest.parquet"), "--json"]
    args += ["--preset", "hf-trainer", "--batch-size", "8", "--epochs", "4"]
    given = cli.invoke(app, [*args, "--seed", "42", "--to", str(out)])
    assert given.exit_code == 0, given.stderr
    doc = json.loads(given.stdout)
    assert doc["schedule_check"]["status"] == "given"
    assert doc["schedule_check"]["ids_confirmed"] is False
    text = cli.invoke(app, [a for a in args if a != "--json"] + ["--seed", "42"]).stdout
    assert "nothing confirmed that the run's batches held them" in " ".join(text.split())
    mine = tmp_path / "recorded.csv"
    assert cli.invoke(app, _args("--to", str(mine), "--ground", "inferred")).exit_code == 0
    named = {tuple(pd.read_csv(f).query("named")["sample_id"]) for f in (out, mine)}
    assert len(named) == 1 and len(next(iter(named))) >= 10
    wrong = cli.invoke(app, [*args, "--seed", "7"])
    assert wrong.exit_code == 0 and json.loads(wrong.stdout)["n_named"] == 0
