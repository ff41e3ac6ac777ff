"""A log whose steps the replay does not reach: one error line, exit 2, and none of the
numpy "Mean of empty slice" warnings that used to come before it (spikes/model.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_spikes_whose_replay_covers_no_logged_step_print_one_line(tmp_path):
    steps = (200, 300, 400, 500, 600)
    (tmp_path / "run.log").write_text(
        "".join(f"epoch=1 step={s}/12000 loss={2.8 - s / 1000:.4f}\n" for s in steps)
    )
    (tmp_path / "manifest.csv").write_bytes((ROOT / "tests/data/batches/manifest.csv").read_bytes())
    config = (ROOT / "sample_logs/dflash-diag.toml").read_text()
    (tmp_path / "dflash-diag.toml").write_text(config.replace("manifest.parquet", "manifest.csv"))
    proc = subprocess.run(
        [sys.executable, "-m", "dflash_diag", "spikes", "run.log"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: "), proc.stderr
