"""`dflash-diag parse`: what it prints, what it writes, how it fails."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app

runner = CliRunner()
DATA = Path(__file__).resolve().parents[1] / "data"
RUN = DATA / "real_run" / "run.log"
SAMPLE = DATA / "logs" / "sample_run.log"


def test_text_summary():
    result = runner.invoke(app, ["parse", str(SAMPLE)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.splitlines()[0] == f"{SAMPLE}: text, 13 rows, steps 1..13 (28 lines read)"
    # a resume to step 9, in a log without rank prefixes: neither reads as a count
    assert "restarts: 1 (the step counter went back to step 9)\n" in out
    assert "ranks: rank 0 only\n" in out
    assert "skipped: blank 1, text 5, traceback 4, warning 3" in out
    row = next(x for x in out.splitlines() if x.startswith("tok_per_s"))
    assert row.split() == ["tok_per_s", "13", "989", "25800"]
    assert result.stderr == ""


def test_json_is_one_document_with_the_contract_keys():
    result = runner.invoke(app, ["parse", str(RUN), "--json"])
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["format"] == "text" and doc["rows"] == 488
    assert (doc["first_step"], doc["last_step"]) == (1, 488)
    assert doc["columns"][:8] == [
        "step",
        "loss",
        "acc",
        "lr",
        "grad_norm",
        "tokens",
        "tok_per_s",
        "epoch",
    ]
    assert doc["restarts"] == [] and doc["ranks"] == [0]
    assert (doc["n_restarts"], doc["n_ranks"], doc["rows_rank"]) == (0, 1, 0)
    assert doc["skipped"] == {"no_step": 2, "text": 1}


def test_restarts_and_ranks_say_what_they_are_in_json():
    doc = json.loads(runner.invoke(app, ["parse", str(SAMPLE), "--json"]).stdout)
    # restarts: the steps the counter went back to; n_restarts: how many
    assert (doc["restarts"], doc["n_restarts"]) == ([9], 1)
    assert (doc["ranks"], doc["n_ranks"], doc["rows_rank"]) == ([0], 1, 0)


@pytest.mark.parametrize(
    ("rank", "line", "rows_rank"),
    [
        ("0", "ranks: 0-1 (2); the rows are rank 0's (--rank all keeps every rank)", 0),
        ("1", "ranks: 0-1 (2); the rows are rank 1's (--rank all keeps every rank)", 1),
        ("all", "ranks: 0-1 (2); the rows hold every rank (a rank column)", "all"),
    ],
)
def test_ranks_line_names_the_ranks_and_whose_rows(rank, line, rows_rank):
    log = str(DATA / "logs" / "torchrun_ranks.log")
    result = runner.invoke(app, ["parse", log, "--rank", rank])
    assert result.exit_code == 0, result.stderr
    assert line in result.stdout.splitlines()
    assert "restarts: none" in result.stdout.splitlines()
    doc = json.loads(runner.invoke(app, ["parse", log, "--rank", rank, "--json"]).stdout)
    assert (doc["ranks"], doc["n_ranks"], doc["rows_rank"]) == ([0, 1], 2, rows_rank)


def test_json_nan_is_null():
    result = runner.invoke(
        app, ["parse", str(DATA / "real_logs" / "shakespeare_gpt2_124m_step_loss.tsv"), "--json"]
    )
    doc = json.loads(result.stdout)
    acc = next(c for c in doc["columns_detail"] if c["name"] == "acc")
    assert acc == {"name": "acc", "non_null": 0, "min": None, "max": None}


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_to_writes_the_table(tmp_path, suffix):
    out = tmp_path / f"table{suffix}"
    result = runner.invoke(app, ["parse", str(SAMPLE), "--to", str(out)])
    assert result.exit_code == 0
    assert f"wrote 13 rows to {out}" in result.stdout
    if suffix == ".parquet":
        back = pd.read_parquet(out)
    elif suffix == ".csv":
        back = pd.read_csv(out)
    else:
        back = pd.read_json(out, lines=True)
    assert back["step"].tolist() == list(range(1, 14))
    assert back["tok_per_s"].iloc[0] == 25100


def test_to_refuses_the_input_itself(tmp_path):
    log = tmp_path / "run.csv"
    shutil.copy(DATA / "logs" / "lightning_metrics.csv", log)
    before = log.read_bytes()
    result = runner.invoke(app, ["parse", str(log), "--to", str(log)])
    assert result.exit_code == 2
    assert (
        result.stderr == f"error: {log}: --to is the input log itself; write the table elsewhere\n"
    )
    assert log.read_bytes() == before


def test_to_with_unknown_suffix(tmp_path):
    result = runner.invoke(app, ["parse", str(SAMPLE), "--to", str(tmp_path / "t.xlsx")])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {tmp_path / 't.xlsx'}: cannot tell the output format from '.xlsx'; "
        "name the file .parquet, .csv or .jsonl\n"
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["parse", "missing.log"], "error: missing.log: no such file; check the path\n"),
        (
            ["parse", str(SAMPLE), "--format", "yaml"],
            "error: --format: unknown format 'yaml'; choose from text, hf-dict, jsonl, csv, "
            "hf-state, tensorboard\n",
        ),
        (
            ["parse", str(SAMPLE), "--rank", "x"],
            "error: --rank: not a rank: 'x'; give a number like 0, or 'all'\n",
        ),
        (
            ["parse", str(SAMPLE), "--rank", "4"],
            f"error: {SAMPLE}: no lines for rank 4; ranks with data: 0; use --rank with one "
            "of those, or --rank all\n",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, line):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr == line
    assert result.stdout == ""


def test_bad_input_with_json_keeps_stdout_empty(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("no metrics here\n")
    result = runner.invoke(app, ["parse", str(p), "--json"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"error: {p}: no step-like data found; ")


def test_rank_all_and_format_forced():
    log = DATA / "logs" / "torchrun_ranks.log"
    result = runner.invoke(app, ["parse", str(log), "--rank", "all", "--json"])
    doc = json.loads(result.stdout)
    assert doc["rows"] == 8 and doc["columns"][0] == "rank" and doc["ranks"] == [0, 1]
    result = runner.invoke(app, ["parse", str(log), "--format", "text", "--json"])
    assert json.loads(result.stdout)["rows"] == 4


def test_stdin_dash():
    result = runner.invoke(app, ["parse", "-", "--json"], input=SAMPLE.read_bytes())
    assert result.exit_code == 0
    assert json.loads(result.stdout)["rows"] == 13


@pytest.mark.slow
def test_installed_command_in_a_real_subprocess(tmp_path):
    exe = shutil.which("dflash-diag")
    cmd = [exe] if exe else [sys.executable, "-m", "dflash_diag"]
    out = subprocess.run(
        [*cmd, "parse", str(RUN), "--json"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["rows"] == 488
    bad = subprocess.run([*cmd, "parse", str(tmp_path / "x.log")], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr == f"error: {tmp_path / 'x.log'}: no such file; check the path\n"
    assert "Traceback" not in bad.stderr


def test_help_lists_the_formats():
    result = runner.invoke(app, ["parse", "--help"])
    assert result.exit_code == 0
    for fmt in ("text", "hf-dict", "jsonl", "csv", "hf-state", "tensorboard"):
        assert fmt in result.stdout
