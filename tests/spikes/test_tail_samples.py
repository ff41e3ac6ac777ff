"""A batch of ordinary mean length that holds some of the longest samples is not "ordinary".

The bucketed sample run (sample_logs/run_bucketed.log) is the case: its bucketed batches
mix one or two of the hardest, longest samples with shorter ones, so their mean length is
unremarkable while their loss is high.  Calling those "unexplained: look at the
optimizer" would send a user after the wrong suspect.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.spikes.attribute import TAIL_PERCENTILE

SAMPLE = Path(__file__).resolve().parents[2] / "sample_logs"
runner = CliRunner()


@pytest.mark.slow
def test_no_spike_holding_the_longest_samples_is_blamed_on_the_optimizer():
    result = runner.invoke(
        app,
        [
            "spikes",
            str(SAMPLE / "run_bucketed.log"),
            "--config",
            str(SAMPLE / "bucketed.toml"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    spikes = json.loads(result.stdout)["spikes"]
    tail = [s for s in spikes if s["percentiles"].get("max_len", 0) >= TAIL_PERCENTILE]
    assert tail, "the bucketed run has spikes whose batch holds the longest samples"
    assert all(s["verdict"] != "unexplained" for s in tail)
    held = [s for s in tail if any("holds one of the longest" in e for e in s["evidence"])]
    assert held, "the tail rule is what keeps some of them from 'unexplained'"
    # The generator put no optimizer event in this run (sample_logs/README.md): no spike
    # may be pinned on the optimizer, tail or not, and none without optimizer evidence.
    assert all(s["verdict"] != "unexplained" for s in spikes)
    ordinary = [
        s for s in spikes if any("nothing in the log points at" in e for e in s["evidence"])
    ]
    assert ordinary, "ordinary batches without optimizer evidence are inconclusive"
