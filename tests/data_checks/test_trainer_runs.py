"""The trainer-run fixtures (tests/data/trainer_runs/) agree with themselves.

Each run folder holds what a real ``transformers.Trainer`` run wrote (``trainer_state.json``,
``train.log``), its recording (``train.batches``), its manifest and the truth kept from the
same forward (``sample_loss.parquet``, ``steps.parquet``, ``truth.json``). These tests check
that the pieces describe one run: no torch needed, a few seconds.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dflash_diag.record import read_recording

RUNS_DIR = Path(__file__).resolve().parents[1] / "data" / "trainer_runs"
RUNS = ("poison_ordinary", "poison_long", "lr_surge", "clean", "grouped")
POISONED = ("poison_ordinary", "poison_long", "grouped")
#: the files a run folder holds, and nothing else (no checkpoints, no weights)
FILES = {
    "manifest.parquet",
    "sample_loss.parquet",
    "steps.parquet",
    "train.batches",
    "train.log",
    "trainer_state.json",
    "truth.json",
}


@cache
def load(name: str) -> dict[str, Any]:
    """One run's files, read."""
    run = RUNS_DIR / name
    state = json.loads((run / "trainer_state.json").read_text())
    logged = pd.DataFrame([h for h in state["log_history"] if "loss" in h]).set_index("step")
    return {
        "dir": run,
        "state": state,
        "logged": logged,
        "truth": json.loads((run / "truth.json").read_text()),
        "rec": read_recording(run / "train.batches"),
        "manifest": pd.read_parquet(run / "manifest.parquet"),
        "samples": pd.read_parquet(run / "sample_loss.parquet"),
        "steps": pd.read_parquet(run / "steps.parquet").set_index("step"),
    }


@pytest.fixture(params=RUNS)
def run(request: pytest.FixtureRequest) -> dict[str, Any]:
    return load(request.param)


def test_folder_holds_only_the_listed_files_and_is_small(run: dict[str, Any]) -> None:
    names = {p.name for p in run["dir"].iterdir()}
    assert names == FILES
    assert sum(p.stat().st_size for p in run["dir"].iterdir()) < 2_000_000


def test_recording_covers_every_logged_step(run: dict[str, Any]) -> None:
    rec = run["rec"]
    assert rec.torn == 0
    recorded = set(rec.table["step"].unique())
    assert set(run["logged"].index) <= recorded
    assert max(recorded) == run["state"]["global_step"]


def test_recorded_tokens_match_the_tokens_seen_the_trainer_logged(run: dict[str, Any]) -> None:
    # num_input_tokens_seen counts attention_mask ones: the recording's real lengths
    seen = run["logged"]["num_input_tokens_seen"]
    per_step = run["rec"].table.groupby("step")["length"].sum()
    diff = seen.diff()
    diff.iloc[0] = seen.iloc[0]
    consecutive = seen.index.to_series().diff().fillna(seen.index[0]) == 1
    steps = seen.index[consecutive.to_numpy()]
    assert len(steps) == len(seen)
    np.testing.assert_array_equal(per_step.loc[steps].to_numpy(), diff.loc[steps].to_numpy())


def test_every_epoch_trains_every_sample_once(run: dict[str, Any]) -> None:
    # the Trainer's samplers (random, length-grouped) are permutations; 2000 = 250 x 8
    t = run["rec"].table
    per_epoch = run["rec"].settings["steps_per_epoch"]
    n = len(run["manifest"])
    for epoch, part in t.groupby((t["step"] - 1) // per_epoch):
        assert sorted(part["sample_id"]) == list(range(n)), f"epoch {epoch}"


def test_recorded_lengths_are_the_manifests(run: dict[str, Any]) -> None:
    m = run["manifest"].set_index("sample_id")["length"]
    t = run["rec"].table
    np.testing.assert_array_equal(t["length"].to_numpy(), m.loc[t["sample_id"]].to_numpy())


def test_poison_ids_are_in_the_manifest_and_not_its_categories(run: dict[str, Any]) -> None:
    truth, m = run["truth"], run["manifest"].set_index("sample_id")
    bad = truth["poison"]["samples"]
    assert [b["sample_id"] for b in bad] == truth["poison"]["ids"]
    assert len(bad) == (10 if truth["poison"]["where"] else 0)
    for b in bad:
        assert m.loc[b["sample_id"], "length"] == b["length"]
    assert set(m["category"].astype(str)) == {"count", "markov", "motif"}


def test_per_sample_truth_is_the_recorded_composition(run: dict[str, Any]) -> None:
    s, t = run["samples"], run["rec"].table
    truth = sorted(zip(s["step"].astype(int), s["sample_id"].astype(int), strict=True))
    recorded = sorted(zip(t["step"], t["sample_id"], strict=True))
    assert truth == recorded
    m = run["manifest"].set_index("sample_id")["length"]
    np.testing.assert_array_equal(s["targets"].to_numpy(), m.loc[s["sample_id"]].to_numpy() - 1)


def test_recorded_sample_losses_are_the_truth_of_the_same_forward(run: dict[str, Any]) -> None:
    # record_trainer(..., sample_losses=True) from the Trainer's own forward against the
    # script's compute_loss on the same logits (float32 both: equal to rounding)
    rec = run["rec"]
    assert rec.has_losses
    t = rec.table.merge(run["samples"], on=["step", "sample_id"], suffixes=("", "_truth"))
    assert len(t) == len(run["samples"]) == len(rec.table)
    np.testing.assert_allclose(t["loss"], t["loss_truth"], rtol=1e-6, atol=2e-6)


def test_token_weighted_sample_losses_are_the_logged_loss(run: dict[str, Any]) -> None:
    # one micro-batch a step: logged loss = sum_i n_i loss_i / D, n_i = length_i - 1 (the
    # predicted tokens) and D the Trainer's num_items_in_batch; transformers 5.24 counts every
    # labelled token for this model (D = sum_i length_i: README.md, "Traps")
    s = run["samples"]
    summed = (s["loss"].astype(np.float64) * s["targets"]).groupby(s["step"]).sum()
    divisor = run["steps"]["loss_divisor"]
    lengths = (s["targets"] + 1).groupby(s["step"]).sum()
    np.testing.assert_array_equal(divisor.loc[lengths.index], lengths)
    logged = run["logged"]["loss"]
    np.testing.assert_allclose((summed / divisor).loc[logged.index], logged, rtol=2e-6, atol=0)
    # the token-weighted mean itself is the logged loss times sum(length) / sum(length - 1)
    mean = summed / s.groupby("step")["targets"].sum()
    ratio = (lengths / (lengths - s.groupby("step").size())).loc[logged.index]
    np.testing.assert_allclose(mean.loc[logged.index], logged * ratio, rtol=2e-6, atol=0)


def test_applied_lr_is_the_logged_lr_but_at_the_hidden_surge(run: dict[str, Any]) -> None:
    steps, logged = run["steps"], run["logged"]
    surge = run["truth"]["lr_surge"] or {"steps": [], "factor": 1.0}
    factor = pd.Series(1.0, index=logged.index)
    factor.loc[surge["steps"]] = surge["factor"]
    np.testing.assert_allclose(
        steps.loc[logged.index, "lr_applied"], logged["learning_rate"] * factor, rtol=1e-12
    )
    np.testing.assert_array_equal(steps.loc[logged.index, "grad_norm"], logged["grad_norm"])


@pytest.mark.parametrize("name", POISONED)
def test_poison_samples_have_a_higher_loss_than_the_rest(name: str) -> None:
    # what makes the poison a cause: in the last epoch its token loss is over twice the rest's
    run = load(name)
    s = run["samples"]
    bad = s["sample_id"].isin(run["truth"]["poison"]["ids"])
    last = s["step"] > s["step"].max() * 3 // 4

    def mean(rows: pd.Series) -> float:
        x = s[rows]
        return float((x["loss"] * x["targets"]).sum() / x["targets"].sum())

    assert bad.sum() == 40  # 10 samples x 4 epochs
    assert mean(bad & last) > 2 * mean(~bad & last)


def test_runs_without_poison_say_so() -> None:
    for name in set(RUNS) - set(POISONED):
        assert load(name)["truth"]["poison"] == {"where": None, "ids": [], "samples": []}
