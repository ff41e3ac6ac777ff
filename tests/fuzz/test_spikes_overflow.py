"""A loss of 1e308 in an otherwise good log: read as inf (a numerical failure), so no
numpy RuntimeWarning reaches stderr under exit 0 (it used to, from the z and the fit)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_spikes_on_a_loss_of_1e308_prints_no_warning(tmp_path):
    text = (ROOT / "sample_logs/run.log").read_text()[:40_000]
    text = text[: text.rfind("\n") + 1].replace("loss=2.5369", "loss=1e308", 1)
    (tmp_path / "run.log").write_text(text)
    for name in ("dflash-diag.toml", "manifest.parquet"):
        (tmp_path / name).write_bytes((ROOT / "sample_logs" / name).read_bytes())
    proc = subprocess.run(
        [sys.executable, "-m", "dflash_diag", "spikes", str(tmp_path / "run.log")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-1500:]
