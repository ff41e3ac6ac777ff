"""The replay reproduces a real run's logged tokens at every step.

tests/data/real_run/ is a real CPU training run (see its README.md): sorted-greedy, seed
1234, token budget 16384 padded tokens, max_seq_len 2048, one rank, steps from 1, 2
epochs, Python's random seeded once.  Its log's ``ntok`` is the real tokens of each step.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from dflash_diag.data import ScheduleParams
from dflash_diag.schedule import replay

DATA = Path(__file__).resolve().parents[1] / "data" / "real_run"
PARAMS = ScheduleParams(
    strategy="sorted-greedy",
    seed=1234,
    token_budget=16384,
    max_seq_len=2048,
    first_step=1,
    epochs=2,
)


@pytest.fixture(scope="module")
def manifest():
    from dflash_diag.manifest import read_manifest

    return read_manifest(DATA / "manifest.parquet")


@pytest.fixture(scope="module")
def logged() -> tuple[np.ndarray, np.ndarray]:
    text = (DATA / "run.log").read_text(encoding="utf-8")
    pairs = re.findall(r"\| step (\d+)/\d+ \|.*\| ntok (\d+) \|", text)
    arr = np.array(pairs, dtype=np.int64)
    return arr[:, 0], arr[:, 1]


def test_replay_reproduces_every_logged_ntok(manifest, logged):
    steps, ntok = logged
    assert len(steps) == 488
    r = replay(manifest, PARAMS)
    assert r.steps.step.tolist() == steps.tolist()
    assert (r.steps.tokens.to_numpy() == ntok).all()
    assert r.dropped["incomplete_last_step_micro_batches"] == 0


def test_a_wrong_seed_does_not(manifest, logged):
    _, ntok = logged
    r = replay(manifest, PARAMS.replace(seed=1235))
    assert (r.steps.tokens.to_numpy() == ntok).mean() < 0.1
