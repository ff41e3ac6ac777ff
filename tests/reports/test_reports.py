"""The report layer: a notebook gets the very object the CLI renders."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_diag.composition import Request
from dflash_diag.render.jsonout import dumps
from dflash_diag.render.spikes import spikes_json
from dflash_diag.reports import (
    BatchesOptions,
    MicroBatch,
    batches_report,
    compare_report,
    parse_report,
    spikes_report,
)

# CLI runs on the sample logs, seconds each: CI runs them, the local loop does not
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _cli_json(*args: str) -> object:
    got = subprocess.run(
        [sys.executable, "-m", "dflash_diag", *args, "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "110"},
    )
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)


@pytest.fixture(scope="module")
def spikes():
    # the notebook session, as a user would type it (from the project root)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        yield spikes_report("sample_logs/run.log")


def same_document(a: object, b: object, path: str = "") -> None:
    """``a == b`` but for floats, which must agree to 1e-12 relative: a least-squares fit
    in another process can differ in its last bit (BLAS kernels round by the alignment of
    the arrays they are handed, which depends on what the process did before)."""
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300), f"{path}: {a} != {b}"
    elif isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            same_document(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same_document(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def test_same_document_tells_reports_apart():
    same_document({"a": [1.0, "x"]}, {"a": [1.0 + 1e-15, "x"]})
    for other in ({"a": [1.1, "x"]}, {"a": [1.0, "y"]}, {"a": [1.0]}, {"b": [1.0, "x"]}):
        with pytest.raises(AssertionError):
            same_document({"a": [1.0, "x"]}, other)


def test_a_notebook_gets_what_spikes_json_prints(spikes):
    same_document(
        json.loads(dumps(spikes_json(spikes))), _cli_json("spikes", "sample_logs/run.log")
    )


def test_every_spike_has_its_batch_sample_ids(spikes):
    verdicts = {s.event.peak_step: s.verdict for s in spikes.spikes}
    assert verdicts[254] == verdicts[258] == "composition"
    assert set(spikes.samples) == set(verdicts)
    for s in spikes.spikes:
        batches = spikes.samples[s.event.peak_step]
        assert all(isinstance(b, MicroBatch) and b.step == s.event.peak_step for b in batches)
        # the metric follows rank 0: only its micro-batches, and as many samples as the
        # batch features counted
        assert {b.rank for b in batches} == {spikes.attribution.metric_rank}
        assert sum(len(b.sample_ids) for b in batches) == s.batch["n_samples"]


def test_sample_ids_are_the_manifests_ids_of_the_replayed_rows(spikes):
    import pandas as pd

    manifest = pd.read_parquet(ROOT / "sample_logs/manifest.parquet")
    cap = spikes.context.schedule["max_seq_len"]  # the replay's lengths are capped
    lengths = dict(zip(manifest["sample_id"], manifest["length"].clip(upper=cap), strict=True))
    for s in spikes.spikes:
        ids = [i for b in spikes.samples[s.event.peak_step] for i in b.sample_ids]
        assert max(lengths[i] for i in ids) == pytest.approx(s.batch["max_len"])
        assert sum(lengths[i] for i in ids) / len(ids) == pytest.approx(s.batch["mean_len"])


def test_without_a_manifest_the_report_has_no_samples(tmp_path):
    log = tmp_path / "run.log"
    log.write_text((ROOT / "sample_logs/run.log").read_text())
    r = spikes_report(log)
    assert r.attribution is None and r.samples == {}
    assert "batches" not in spikes_json(r)["spikes"][0]


def test_compare_report_is_the_comparison_the_cli_prints(monkeypatch):
    from dflash_diag.render.compare import comparison_json

    monkeypatch.chdir(ROOT)
    c = compare_report(["sample_logs/v1.log", "sample_logs/run.log"], at=(349,), metrics=["acc"])
    cli = _cli_json(
        "compare", "sample_logs/v1.log", "sample_logs/run.log", "--at", "349", "--metric", "acc"
    )
    same_document(json.loads(dumps(comparison_json(c))), cli)


def test_batches_report_is_what_the_cli_prints(monkeypatch):
    from dflash_diag.render.batches import report_document

    monkeypatch.chdir(ROOT)
    args = ["sample_logs/manifest.parquet", "--config", "sample_logs/dflash-diag.toml"]
    r = batches_report(
        Request(manifest="sample_logs/manifest.parquet", config="sample_logs/dflash-diag.toml"),
        BatchesOptions(compare=["sorted-greedy", "random"], plots=True),
    )
    cli = _cli_json("batches", *args, "--compare", "sorted-greedy,random")
    same_document(json.loads(dumps(report_document(r))), cli)
    # what the plot draws: rank 0's micro-batches of each strategy
    assert [m.strategy for m in r.micro] == ["sorted-greedy", "random"]
    assert all(len(m.steps) == len(m.mean_len) > 0 for m in r.micro)


def test_parse_report_is_the_summary_the_cli_prints(monkeypatch):
    monkeypatch.chdir(ROOT)
    r = parse_report("sample_logs/run.log")
    assert json.loads(dumps(r.summary)) == _cli_json("parse", "sample_logs/run.log")
    assert len(r.run.table) == r.summary["rows"]
