"""`watch` names a sample live once it has come back: on the real poison_long Trainer
run, replayed line by line from its own logged values, its recording holding each
sample's measured loss (so the names rest on measured ground, as in `spikes`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parents[1] / "data" / "trainer_runs" / "poison_long"

pytestmark = pytest.mark.slow


def test_watch_names_the_poison_once_it_has_come_back(tmp_path):
    history = json.loads((RUN / "trainer_state.json").read_text())["log_history"]
    log = tmp_path / "train.jsonl"
    keys = ("step", "loss", "grad_norm", "learning_rate")
    log.write_text(
        "".join(json.dumps({k: r.get(k) for k in keys}) + "\n" for r in history if "loss" in r)
    )
    args = [sys.executable, "-m", "dflash_diag", "watch", str(log), "--until", "1000", "--json"]
    args += [
        "--composition",
        str(RUN / "train.batches"),
        "--manifest",
        str(RUN / "manifest.parquet"),
    ]
    got = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    events = [json.loads(line) for line in got.stdout.splitlines() if line.strip()]
    poison = set(json.loads((RUN / "truth.json").read_text())["poison"]["ids"])
    data = [e for e in events if e["verdict"] == "data"]
    assert data
    for e in data:
        # named from the points so far: only after a sample has been seen more than once
        assert e["step"] > 250
        named = {int(w.split(":")[0].split()[-1]) for w in e["evidence"] if w.startswith("sample ")}
        assert named & poison
        assert any("measured" in w and "nats a token" in w for w in e["evidence"])
