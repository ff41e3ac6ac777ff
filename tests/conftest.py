"""Fixtures the test folders share: the bundled sample run, the real Trainer runs, a CLI
runner that keeps stdout and stderr apart.  Processes the tests start import this
checkout (``PYTHONPATH``).

And the local loop's two shortcuts (CI, with ``CI`` set, has neither):

- Hypothesis's ``dev`` profile: a test that does not set ``max_examples`` draws 20
  examples, a fifth of Hypothesis's default 100, as :func:`budget.examples` gives the
  others; under CI Hypothesis loads its own ``ci`` profile and every test draws its full
  number.
- under ``-m "not slow"`` a test module marked slow as a whole (``pytestmark =
  pytest.mark.slow``) is not imported at all, since every test in it would be
  deselected after the import (torch, transformers, mlflow and ray are seconds of it).
"""

from __future__ import annotations

import ast
import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from budget import FULL
from hypothesis import settings
from typer.testing import CliRunner

settings.register_profile("dev", max_examples=20)
if not FULL:
    settings.load_profile("dev")

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_logs"

# Every process a test starts (``python -m dflash_diag ...``) runs this checkout's code,
# not whatever copy an editable install points at.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
)
TRAINER_RUNS = ROOT / "tests" / "data" / "trainer_runs"


def _marks_slow(node: ast.expr) -> bool:
    """``pytest.mark.slow``, or a list or tuple holding it."""
    if isinstance(node, ast.List | ast.Tuple):
        return any(_marks_slow(e) for e in node.elts)
    return ast.unparse(node) == "pytest.mark.slow"


@functools.cache
def slow_as_a_whole(path: Path) -> bool:
    """Whether the test module at ``path`` sets ``pytestmark`` to (a list with)
    ``pytest.mark.slow`` at its top level: then every test in it is slow."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return False  # let pytest collect it and say what is wrong
    return any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
        and _marks_slow(node.value)
        for node in tree.body
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under exactly ``-m "not slow"``, skip importing a test module slow as a whole:
    its tests would all be deselected.  Any other mark expression collects as usual."""
    if " ".join(str(config.option.markexpr).split()) != "not slow":
        return None
    name = collection_path.name
    if name.startswith("test_") and name.endswith(".py") and slow_as_a_whole(collection_path):
        return True
    return None


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


@pytest.fixture(autouse=True)
def _no_columns_from_the_shell(monkeypatch):
    """Commands run in-process print to a pipe: 120 columns unless ``$COLUMNS`` is set,
    and a developer's shell or pytest-xdist's workers may set it.  Tests that want a
    width set it themselves."""
    monkeypatch.delenv("COLUMNS", raising=False)
