"""`--metric-rank`: whose batches the logged loss describes decides what is attributed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app

ROOT = Path(__file__).resolve().parents[2]
RUN = str(ROOT / "sample_logs" / "run.log")
runner = CliRunner()


def verdicts(*args: str) -> tuple[dict[int, str], dict]:
    result = runner.invoke(app, ["spikes", RUN, "--json", *args])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    return {s["step"]: s["verdict"] for s in doc["spikes"]}, doc


@pytest.mark.slow
def test_rank_0_explains_the_story_spikes_and_pooled_ranks_do_not():
    # The sample trainer prints rank 0's loss: rank 0's batches explain steps 254 and 258,
    # the 8 ranks pooled do not (their other 7 micro-batches dilute the long one).
    rank0, doc0 = verdicts("--metric-rank", "0")
    pooled, doc_all = verdicts("--metric-rank", "all")
    assert rank0[254] == rank0[258] == "composition"
    assert pooled[254] != "composition" and pooled[258] != "composition"
    assert doc0["attribution"]["r2_cv"] > 0.5 > doc_all["attribution"]["r2_cv"]


@pytest.mark.slow
def test_auto_finds_rank_0():
    auto, doc = verdicts()
    assert auto[254] == auto[258] == "composition"
    assert doc["attribution"]["metric_rank"] == 0


@pytest.mark.slow
def test_a_rank_outside_the_schedule_is_a_clear_error():
    result = runner.invoke(app, ["spikes", RUN, "--metric-rank", "9"])
    assert result.exit_code == 2
    assert result.stderr == (
        "error: metric_rank: rank 9 is not one of the schedule's 8 ranks; "
        "give a rank from 0 to 7, 'all' or 'auto'\n"
    )
    result = runner.invoke(app, ["spikes", RUN, "--metric-rank", "x"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --metric-rank: not a rank: 'x'")
