"""A binary file handed to the log reader is bad input, never a table of junk rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.errors import InputError
from dflash_diag.logs import read_log

runner = CliRunner()


def test_a_parquet_manifest_given_to_parse_says_what_it_is(tmp_path: Path):
    manifest = tmp_path / "manifest.parquet"
    pd.DataFrame({"length": np.arange(1, 5000)}).to_parquet(manifest)
    result = runner.invoke(app, ["parse", str(manifest)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {manifest}: this is a Parquet file, not a training log; "
        "for a length manifest use 'dflash-diag batches'\n"
    )


def test_npy_and_nul_filled_files_are_refused(tmp_path: Path):
    npy = tmp_path / "lengths.npy"
    np.save(npy, np.arange(100))
    with pytest.raises(InputError, match="a NumPy .npy file"):
        read_log(npy)
    blob = tmp_path / "blob.bin"
    blob.write_bytes(bytes(4096) + b"step=1 loss=2.0\n")
    with pytest.raises(InputError, match="binary file"):
        read_log(blob)


def test_a_log_with_a_nul_filled_tail_after_a_crash_still_reads(tmp_path: Path):
    log = tmp_path / "train.log"
    lines = "".join(f"step={i} loss={2 + 1 / i:.4f}\n" for i in range(1, 200))
    log.write_bytes(lines.encode() + bytes(512))
    table = read_log(log).table
    assert table["step"].tolist() == list(range(1, 200))


def test_forcing_a_format_does_not_read_a_binary_file(tmp_path: Path):
    manifest = tmp_path / "m.parquet"
    pd.DataFrame({"length": np.arange(1, 100)}).to_parquet(manifest)
    with pytest.raises(InputError, match="this is a Parquet file"):
        read_log(manifest, format="text")


def test_a_recording_given_as_the_log_says_what_it_is(tmp_path: Path):
    from dflash_diag.record import BatchRecorder

    path = tmp_path / "train.batches"
    with BatchRecorder(path) as rec:
        rec.log(1, [3, 5, 7], [10, 20, 30])
    for command in ("parse", "spikes"):
        result = runner.invoke(app, [command, str(path)])
        assert result.exit_code == 2
        assert result.stderr == (
            f"error: {path}: this is a recording of the batches a run held, not a training "
            "log; give the run's training log, and this file as --composition (or leave it "
            "beside the log as LOG.batches)\n"
        )
