"""At 80 columns no cell of a command's default output is cut: no verdict, number or step."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_diag.render.spikes import DEFAULT_ROWS

# CLI runs on the sample logs, seconds each: CI runs them, the local loop does not
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = "sample_logs"
COMMANDS = {
    "spikes": ["spikes", f"{SAMPLES}/run.log"],
    "compare": ["compare", f"{SAMPLES}/v1.log", f"{SAMPLES}/run.log", "--at", "349"],
    "batches": [
        "batches",
        f"{SAMPLES}/manifest.parquet",
        "--config",
        f"{SAMPLES}/dflash-diag.toml",
        "--compare",
        "sorted-greedy,bucketed,random",
        "--epochs",
        "2",
    ],
    "parse": ["parse", f"{SAMPLES}/run.log"],
}


def _out(args: list[str], columns: int) -> str:
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "dumb"}
    got = subprocess.run(
        [sys.executable, "-m", "dflash_diag", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert got.returncode == 0, got.stderr
    return got.stdout


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_nothing_is_cut_at_80_columns(name):
    out = _out(COMMANDS[name], 80)
    assert "…" not in out, [line for line in out.splitlines() if "…" in line]
    # tables fit: their lines (box characters) are no wider than the terminal
    ruled = [ln for ln in out.splitlines() if re.search(r"[│┃─━]", ln)]
    assert all(len(ln.rstrip()) <= 80 for ln in ruled), max(ruled, key=len)


def test_every_shown_spike_keeps_its_step_numbers_and_verdict_at_80_columns():
    out = _out(COMMANDS["spikes"], 80)
    doc = json.loads(_out([*COMMANDS["spikes"], "--json"], 80))
    lines = out.splitlines()
    shown = [s for s in doc["spikes"] if re.search(rf"^\s*{s['step']}\b", out, flags=re.M)]
    assert len(shown) == min(DEFAULT_ROWS, len(doc["spikes"]))
    for s in shown:
        row = next(ln for ln in lines if re.match(rf"^\s*{s['step']}\b", ln))
        assert re.search(rf"\b{s['verdict']}\b", row), row
        assert f"{s['z']:.1f}" in row and f"{s['value']:.4g}" in row, row


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_reads_like_a_tool_people_know(name):
    out = _out([name, "--help"], 100)
    # no typer type labels; arguments by one name, without braces
    assert not re.findall(r"<(?:bool|int|float|str|path|list\[\w+\])>", out)
    usage = next(ln for ln in out.splitlines() if "Usage:" in ln)
    assert re.search(rf"dflash-diag {name} \[OPTIONS\] (LOG|LOG\.\.\.|\[MANIFEST\])\s*$", usage)
    # a flag shows no value to type after it
    json_row = next(ln for ln in out.splitlines() if "--json" in ln)
    assert re.search(r"--json\s+Print", json_row), json_row
    if name == "compare":
        assert out.count("[default: step]") == 1 and "Default step" not in out
