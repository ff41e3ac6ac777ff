"""Fixtures the test folders share: the bundled sample run, the real Trainer runs, a CLI
runner that keeps stdout and stderr apart."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_logs"
TRAINER_RUNS = ROOT / "tests" / "data" / "trainer_runs"


@dataclass(frozen=True)
class TrainerRun:
    """One run of ``tests/data/trainer_runs`` (its README): the Trainer's own files, the
    recording and the truth."""

    name: str
    folder: Path

    @property
    def state(self) -> Path:
        return self.folder / "trainer_state.json"

    @property
    def batches(self) -> Path:
        return self.folder / "train.batches"

    @property
    def manifest(self) -> Path:
        return self.folder / "manifest.parquet"

    @property
    def truth(self) -> dict:
        return json.loads((self.folder / "truth.json").read_text())

    @property
    def poison(self) -> set[int]:
        return set(self.truth["poison"]["ids"])


@pytest.fixture
def trainer_run():
    """``trainer_run("poison_long")``: a :class:`TrainerRun` by name."""

    def get(name: str) -> TrainerRun:
        folder = TRAINER_RUNS / name
        assert folder.is_dir(), f"no trainer run {name}"
        return TrainerRun(name, folder)

    return get


@pytest.fixture
def cli() -> CliRunner:
    """A typer CliRunner for ``dflash_diag.cli.app`` (stdout and stderr kept apart)."""
    return CliRunner()


@pytest.fixture
def sample_log() -> Path:
    """The bundled sample run's log (its schedule beside it)."""
    return SAMPLE / "run.log"
