"""A value the log printed as nan is a numerical failure; a value it never printed at a
step is absent.  Every reader keeps the two apart (RunLog.logged_nan), and spikes uses it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.logs import read_log
from dflash_diag.logs.names import LOGGED_NAN, is_logged_nan, logged

runner = CliRunner()


def kv_log(path: Path, n: int, nan_at: int, eval_every: int) -> Path:
    """key=value lines, loss printed as nan at ``nan_at``, an eval line every ``eval_every``."""
    lines = []
    for s in range(1, n + 1):
        loss = "nan" if s == nan_at else f"{2.0 + 0.01 * ((s * 7) % 5):.4f}"
        lines.append(f"step={s} loss={loss} lr=1.00e-04 grad_norm=1.00")
        if s % eval_every == 0:
            lines.append(f"step={s} eval_loss={2.1 + 0.001 * s:.4f}")
    path.write_text("\n".join(lines) + "\n")
    return path


READERS = {
    "text": lambda d: kv_log(d / "run.log", 300, 120, 50),
    "csv": lambda d: _write(
        d / "run.csv",
        "step,loss,eval_loss\n"
        + "".join(
            f"{s},{'nan' if s == 120 else '2.0'},{'2.1' if s % 50 == 0 else ''}\n"
            for s in range(1, 301)
        ),
    ),
    "jsonl": lambda d: _write(
        d / "run.jsonl",
        "".join(
            json.dumps({"step": s, "loss": "nan" if s == 120 else 2.0})
            + "\n"
            + (json.dumps({"step": s, "eval_loss": 2.1}) + "\n" if s % 50 == 0 else "")
            for s in range(1, 301)
        ),
    ),
    "hf-dict": lambda d: _write(
        d / "train.log",
        "".join(
            f"{{'loss': {'nan' if s == 120 else 2.0}, 'learning_rate': 1e-4, "
            f"'epoch': {s / 100}}}\n"
            + (f"{{'eval_loss': 2.1, 'epoch': {s / 100}}}\n" if s % 50 == 0 else "")
            for s in range(1, 301)
        ),
    ),
}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("kind", sorted(READERS))
def test_every_reader_keeps_printed_nan_apart_from_absent(tmp_path, kind):
    run = read_log(READERS[kind](tmp_path))
    t = run.table
    loss_nan = t["loss"].isna().to_numpy()
    # the printed nan is the only logged NaN of loss...
    assert run.logged_nan["loss"].sum() == 1
    assert loss_nan[run.logged_nan["loss"]].all()
    # ...and eval_loss, NaN on most rows, was never printed as NaN
    assert "eval_loss" not in run.logged_nan
    assert int(run.logged("eval_loss").sum()) == 6
    assert t["eval_loss"].isna().sum() == len(t) - 6


def test_the_fast_path_keeps_a_printed_nan(tmp_path):
    # long enough for the memory-mapped fast path (tests/logs/test_fastpath.py)
    run = read_log(kv_log(tmp_path / "big.log", 30_000, 12_345, 10**9))
    assert np.flatnonzero(run.logged_nan["loss"]).tolist() == [12_344]


def test_eval_loss_between_evaluations_is_not_a_non_finite_event(tmp_path):
    log = kv_log(tmp_path / "run.log", 600, 10**9, 25)
    result = runner.invoke(app, ["spikes", str(log), "--metric", "eval_loss", "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["n_points"] == 24
    assert [s for s in doc["spikes"] if s["kind"] == "non-finite"] == []


def test_a_printed_nan_loss_is_a_non_finite_event(tmp_path):
    log = kv_log(tmp_path / "run.log", 300, 120, 50)
    doc = json.loads(runner.invoke(app, ["spikes", str(log), "--json"]).stdout)
    events = [(s["kind"], s["step"]) for s in doc["spikes"]]
    assert events == [("non-finite", 120)]


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_logged_marks_exactly_nan(x):
    # every number a reader takes from the text goes through logged(): only NaN changes
    y = logged(x)
    assert bool(is_logged_nan(y)) == (x != x)
    assert (y == x) or (x != x and y != y)
    assert not is_logged_nan(float("nan")) and is_logged_nan(LOGGED_NAN)


TRAINERS = Path(__file__).resolve().parents[1] / "data" / "trainers"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["loguru_loop.log", "rich_w60.log", "tb_loop"])
def test_logs_the_libraries_wrote_keep_their_nan_apart_from_absent(name):
    # tests/data/trainers (loguru 0.7.3, rich 15.0.0, torch's SummaryWriter): a real nan
    # at step 137, tok_per_s every 10 steps, eval every 50 (see its README)
    run = read_log(TRAINERS / name)
    steps = run.table["step"].to_numpy()
    assert {k: steps[m].tolist() for k, m in run.logged_nan.items()} == {
        "loss": [137],
        "grad_norm": [137],
    }
    doc = json.loads(runner.invoke(app, ["spikes", str(TRAINERS / name), "--json"]).stdout)
    assert [(s["kind"], s["step"]) for s in doc["spikes"] if s["kind"] == "non-finite"] == [
        ("non-finite", 137)
    ]
    evals = runner.invoke(app, ["spikes", str(TRAINERS / name), "--metric", "eval_loss", "--json"])
    assert all(s["kind"] != "non-finite" for s in json.loads(evals.stdout)["spikes"])
