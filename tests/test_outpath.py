"""One check for every output path: --plot, --to and --export say the same things."""

from __future__ import annotations

import pytest

from dflash_diag.errors import InputError
from dflash_diag.outpath import check_output_path


def test_suffix_folder_and_inputs_are_checked(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("step=1 loss=2\n")
    assert check_output_path(tmp_path / "t.CSV", (".csv",), "output") == tmp_path / "t.CSV"
    with pytest.raises(InputError) as bad:
        check_output_path(tmp_path / "t.txt", (".parquet", ".csv", ".jsonl"), "output")
    assert str(bad.value).endswith(
        "cannot tell the output format from '.txt'; name the file .parquet, .csv or .jsonl"
    )
    with pytest.raises(InputError, match="the folder for the export does not exist"):
        check_output_path(tmp_path / "no" / "x.csv", (".csv",), "export")
    with pytest.raises(InputError, match="--to is the input; write elsewhere"):
        check_output_path(log.with_suffix(".log"), (".log",), "output", [log],
                          ("--to is the input", "write elsewhere"))  # fmt: skip
    # standard input is never "the same file"
    assert check_output_path(tmp_path / "x.csv", (".csv",), "output", ["-"])
