"""Naming the samples behind spikes on real Hugging Face Trainer runs
(tests/data/trainer_runs: a tiny GPT-2 on CPU, the stock random sampler, batch 8, 4
epochs, the batches recorded by dflash_diag.record.record_trainer, the truth in
truth.json).  What is asserted is what the method achieves on them today; the figures it
does not reach yet (ordinary-length poison) are in docs/samples.md."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dflash_diag.composition import Request
from dflash_diag.reports import samples_report, spikes_report

RUNS = Path(__file__).resolve().parents[1] / "data" / "trainer_runs"
SAMPLE = Path(__file__).resolve().parents[2] / "sample_logs"

pytestmark = pytest.mark.slow


def _run(run):
    batches = Request(composition=run.batches, manifest=run.manifest)
    return samples_report(run.state, batches=batches), run.poison


def _held(report, step: int) -> set[int]:
    comp = report.spikes.composition
    rows = np.flatnonzero(comp.replay.micro["step"].to_numpy() == step)
    return {int(comp.ids[x]) for r in rows for x in comp.replay.batch(int(r))}


def test_poison_among_the_longest_is_named_and_its_spikes_are_data(trainer_run):
    report, poison = _run(trainer_run("poison_long"))
    named = set(report.table.loc[report.table["named"], "sample_id"])
    assert poison <= named  # all 10, each on its own
    driven = [s for s in report.spikes.spikes if _held(report, s.event.peak_step) & poison]
    assert driven
    data = [s for s in driven if s.verdict == "data"]
    assert len(data) >= 0.8 * len(driven)
    for s in data:
        # the verdict names the poison sample and its evidence
        assert any(set(c.members) & poison for c in s.culprits)
        assert any("high in" in r and " q " in r for r in s.reasons)


def test_a_clean_run_names_at_most_one_sample(trainer_run):
    report, _ = _run(trainer_run("clean"))
    assert int(report.table["named"].sum()) <= 1


def test_a_hidden_lr_surge_is_the_optimizer_not_data():
    d = RUNS / "lr_surge"
    surge = json.loads((d / "truth.json").read_text())["lr_surge"]["steps"]
    report = spikes_report(
        d / "trainer_state.json", batches=Request(composition=d / "train.batches")
    )
    hit = [s for s in report.spikes if s.event.start_step <= max(surge) <= s.event.end_step + 10]
    assert hit
    for s in hit:
        assert s.verdict == "unexplained"
        assert any("ordinary in their other batches" in r for r in s.reasons)
        assert "the optimizer is the suspect" in s.reasons[-1]


def test_fixed_batches_name_no_sample_and_say_the_batch_is_the_unit(sample_log):
    """The sample run's sorted-greedy batches never change: every batch is a group that
    always travels together, so no sample can be told from its batch mates."""
    report = spikes_report(sample_log)
    att = report.attribution
    assert att is not None and att.samples is not None
    assert not att.samples.separable
    assert "batches are fixed groups: the batch, not a sample, is the unit" in att.notes
    assert not [s for s in report.spikes if s.verdict == "data"]
    assert report.spikes  # and its verdicts stand (tests/cli/test_spikes.py checks them)
