"""Naming the samples behind spikes on real Hugging Face Trainer runs
(tests/data/trainer_runs: a tiny GPT-2 on CPU, the stock random sampler, batch 8, 4
epochs, the batches and each sample's loss recorded by
dflash_diag.record.record_trainer(..., sample_losses=True), the truth in truth.json).

Two grounds: ``measured`` (the recorded per-sample losses, the default where a recording
has them) is held to the issue's targets on every run; ``inferred`` (``--ground
inferred``: group testing over the logged loss alone) to what it reaches, which on
ordinary-length poison is short of them (docs/samples.md says why, with the figures)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import pytest

from dflash_diag.composition import Request
from dflash_diag.logs import read_log
from dflash_diag.reports import SpikesOptions, samples_report, spikes_report
from dflash_diag.reports.samples import sample_table

RUNS = Path(__file__).resolve().parents[1] / "data" / "trainer_runs"
SAMPLE = Path(__file__).resolve().parents[2] / "sample_logs"

pytestmark = pytest.mark.slow


class Ran(NamedTuple):
    """A run's spikes report, and the per-sample findings it holds as ``samples``' table."""

    spikes: object
    findings: object
    table: object


def _run(run, ground="auto"):
    batches = Request(composition=run.batches, manifest=run.manifest)
    rep = spikes_report(run.state, SpikesOptions(ground=ground), batches)
    findings = rep.attribution.samples
    return Ran(rep, findings, sample_table(findings, rep.composition)), run.poison


@pytest.mark.parametrize(
    ("name", "ground"),
    [("poison_ordinary", "inferred"), ("grouped", "auto"), ("poison_ordinary", "measured")],
)
def test_samples_ranks_the_samples_as_spikes_tests_them(trainer_run, name, ground):
    """``samples`` runs the per-sample test without judging the spikes (on measured
    ground without the composition model either): the same table."""
    ran, _ = _run(trainer_run(name), ground)
    run = trainer_run(name)
    batches = Request(composition=run.batches, manifest=run.manifest)
    alone = samples_report(run.state, SpikesOptions(ground=ground), batches)
    pd.testing.assert_frame_equal(alone.table, ran.table)
    assert alone.findings.named.equals(ran.findings.named)
    assert alone.findings.added == ran.findings.added
    assert bool(alone.findings.added) == (alone.findings.evidence.ground == "measured")
    assert alone.findings.evidence.ground == ran.findings.evidence.ground
    assert alone.detection.n_points == ran.spikes.detection.n_points


def _held(report, step: int) -> set[int]:
    comp = report.spikes.composition
    rows = np.flatnonzero(comp.replay.micro["step"].to_numpy() == step)
    return {int(comp.ids[x]) for r in rows for x in comp.replay.batch(int(r))}


def _data_naming_the_poison(report, poison):
    driven = [s for s in report.spikes.spikes if _held(report, s.event.peak_step) & poison]
    data = [
        s
        for s in driven
        if s.verdict == "data" and any(set(c.members) & poison for c in s.culprits)
    ]
    return driven, data


@pytest.mark.parametrize("name", ["poison_ordinary", "poison_long", "grouped"])
def test_measured_losses_name_the_poison_and_their_spikes_are_data(trainer_run, name):
    report, poison = _run(trainer_run(name))
    assert report.findings.evidence.ground == "measured"
    named = set(report.table.loc[report.table["named"], "sample_id"])
    assert len(named & poison) >= 0.8 * len(poison)
    assert len(named - poison) <= 2
    driven, data = _data_naming_the_poison(report, poison)
    assert driven and len(data) >= 0.8 * len(driven)
    for s in data:
        assert any("nats a token over its batch mates'" in r and "measured" in r for r in s.reasons)
        # what the poison itself added to this spike: a part of the rise, measured
        here = [c.here for c in s.culprits if set(c.members) & poison]
        assert all(0 < h <= 1.5 * s.rise for h in here)
        assert any(f"here it adds {h:+.2g} nats" in r for h in here for r in s.reasons)


@pytest.mark.parametrize("ground", ["auto", "inferred"])
def test_a_clean_run_names_at_most_one_sample(trainer_run, ground):
    report, _ = _run(trainer_run("clean"), ground)
    assert int(report.table["named"].sum()) <= 1


def test_inferred_poison_among_the_longest_is_named_and_its_spikes_are_data(trainer_run):
    report, poison = _run(trainer_run("poison_long"), "inferred")
    assert report.findings.evidence.ground == "inferred"
    named = set(report.table.loc[report.table["named"], "sample_id"])
    assert poison <= named  # all 10, each on its own
    driven, data = _data_naming_the_poison(report, poison)
    assert driven and len(data) >= 0.8 * len(driven)
    for s in data:
        # the verdict names the poison sample and its evidence
        assert any("high in" in r and " q " in r for r in s.reasons)


def test_measured_ground_is_refused_without_measured_losses(sample_log):
    from dflash_diag.errors import InputError

    with pytest.raises(InputError, match="^--ground: is measured, but the composition"):
        spikes_report(sample_log, SpikesOptions(ground="measured"))


@pytest.mark.parametrize("ground", ["auto", "inferred"])
def test_a_hidden_lr_surge_is_the_optimizer_not_data(ground):
    d = RUNS / "lr_surge"
    surge = json.loads((d / "truth.json").read_text())["lr_surge"]["steps"]
    report = spikes_report(
        d / "trainer_state.json",
        SpikesOptions(ground=ground),
        batches=Request(composition=d / "train.batches"),
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


def test_a_batch_with_a_candidate_culprit_is_not_called_ordinary(monkeypatch):
    """One sample near the FDR (q <= explain_q) among seven ordinary ones: the batch's
    median is ordinary, but the batch is not (the sentence said so of a batch holding
    a poison sample high in all five of its batches)."""
    import numpy as np

    import dflash_diag.spikes.attribute as attribute
    from dflash_diag.samples import SampleOptions
    from dflash_diag.spikes.culprits import ORDINARY_Z, ordinary_elsewhere

    seen = []
    monkeypatch.setattr(attribute, "ordinary_elsewhere", lambda f, p: seen.append((f, p)))
    d = RUNS / "lr_surge"
    spikes_report(
        d / "trainer_state.json",
        SpikesOptions(ground="inferred"),
        batches=Request(composition=d / "train.batches"),
    )
    near = SampleOptions().explain_q
    said, mixed = 0, 0
    for findings, point in seen:
        m, t = findings.membership, findings.evidence.table
        here = m.samples[m.offsets[point] : m.offsets[point + 1]]
        q, score = t["q"].to_numpy()[here], t["score"].to_numpy()[here]
        text = ordinary_elsewhere(findings, point)
        if (q <= near).any():
            mixed += float(np.median(score)) < ORDINARY_Z
            assert text is None, (point, q)
        elif text is not None:
            said += 1
    assert mixed and said  # both kinds of batch are in this run


def test_one_replayed_pass_says_each_sample_is_in_one_batch(sample_log, tmp_path):
    """A log that covers one pass over the data (here the sample run cut to its first
    epoch's steps) holds each sample once: the batch is the unit, for that reason, not
    because batches are fixed."""
    run = read_log(sample_log)
    first = run.table[run.table["step"] <= 300]
    cut = tmp_path / "one_pass.log"
    pairs = zip(first["step"], first["loss"], strict=True)
    cut.write_text("".join(f"step={int(s)} loss={v!r}\n" for s, v in pairs))
    report = spikes_report(cut, batches=Request(config=str(SAMPLE / "dflash-diag.toml")))
    notes = report.attribution.notes
    assert report.attribution.samples.once()
    assert any(n.startswith("each sample is in one logged batch only") for n in notes)
    assert not any(n.startswith("batches are fixed groups") for n in notes)


def test_a_category_that_is_the_poison_is_said_high_as_a_whole(tmp_path):
    """The real poisoned run's manifest with a category column that is the poison's own
    label: each sample is compared with its own category, so none is named, and both
    samples and spikes say the category is high as a whole."""
    d = RUNS / "poison_ordinary"
    poison = set(json.loads((d / "truth.json").read_text())["poison"]["ids"])
    manifest = pd.read_parquet(d / "manifest.parquet")
    manifest["category"] = np.where(manifest["sample_id"].isin(poison), "poison", "clean")
    labelled = tmp_path / "manifest.parquet"
    manifest.to_parquet(labelled)
    batches = Request(composition=d / "train.batches", manifest=labelled)
    ranked = samples_report(d / "trainer_state.json", SpikesOptions(), batches=batches)
    assert not ranked.table["named"].any()
    (high,) = ranked.high_kinds
    assert (high.name, high.n) == ("poison", len(poison)) and high.median_nats > 1.0
    report = spikes_report(d / "trainer_state.json", SpikesOptions(), batches=batches)
    assert report.attribution.high_kinds == ranked.high_kinds
    # a spike whose batches hold one of them is never put on the optimizer
    for s in report.spikes:
        held = {x for b in report.samples.get(s.event.peak_step, ()) for x in b.sample_ids}
        if held & poison:
            assert s.verdict != "unexplained", s.event.peak_step
    said = [r for s in report.spikes for r in s.reasons if "of category poison, high as" in r]
    assert all(r.endswith("what made it may be them, not the optimizer") for r in said)


def test_an_unexplained_spike_holding_a_high_categorys_sample_is_inconclusive():
    """The rule itself, on the real run's spikes: a category high as a whole (here made
    of one sample of an unexplained spike's batch, found in the replay by the micro-batch's
    step, rank and micro) turns that spike inconclusive, with the reason, and leaves the
    others as they were."""
    from dataclasses import replace
    from types import SimpleNamespace

    from dflash_diag.reports.spikes import _held_high_kinds
    from dflash_diag.samples.kinds import HighKind

    d = RUNS / "poison_ordinary"
    report = spikes_report(
        d / "trainer_state.json", batches=Request(composition=d / "train.batches")
    )
    target = next(s for s in report.spikes if s.verdict == "unexplained")
    row = report.samples[target.event.peak_step][0].sample_ids[0]  # (no ids: the rows)
    replay = report.composition.replay
    kinds = np.zeros(len(replay.lengths), dtype=np.int64)
    kinds[row] = 1
    comp = SimpleNamespace(manifest=SimpleNamespace(category_names=["clean", "odd"]), replay=replay)
    att = replace(report.attribution, high_kinds=(HighKind("odd", 1, 2.0, 0.0),))
    out = {s.event.peak_step: s for s in _held_high_kinds(att, report.samples, comp, kinds)}
    after = out[target.event.peak_step]
    assert after.verdict == "inconclusive"
    assert after.reasons[-1].startswith("its batch holds 1 sample of category odd, high as")
    for s in report.spikes:
        if s.event.peak_step != target.event.peak_step:
            unmoved = s.verdict != "unexplained" or not (
                {x for b in report.samples.get(s.event.peak_step, ()) for x in b.sample_ids} & {row}
            )
            if unmoved:
                assert out[s.event.peak_step] == s
