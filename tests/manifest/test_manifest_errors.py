"""Errors never dump data: every bad dataset is one short ``error:`` line, exit 2, and
nothing written; the line names the column, the first rows and their kind."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app

DATA = Path(__file__).resolve().parents[1] / "data" / "datasets"
MAX_LINE = 300
runner = CliRunner()
LONG_IDS = list(range(2000))  # (a row whose ids, printed, would be ~10 KB)


def jsonl(rows: list[dict]) -> Callable[[Path], list[str]]:
    def make(d: Path) -> list[str]:
        (d / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return [str(d / "data.jsonl")]

    return make


def parquet(table: dict, *extra: str) -> Callable[[Path], list[str]]:
    def make(d: Path) -> list[str]:
        pq.write_table(pa.table(table), d / "data.parquet")
        return [str(d / "data.parquet"), *extra]

    return make


def folder(files: dict[str, str]) -> Callable[[Path], list[str]]:
    def make(d: Path) -> list[str]:
        (d / "ds").mkdir()
        for name, text in files.items():
            (d / "ds" / name).write_text(text)
        return [str(d / "ds")]

    return make


def bad_tokenizer(d: Path) -> list[str]:
    pytest.importorskip("tokenizers")
    (d / "tokenizer.json").write_text('{"model": {"type": "WordLevel", "vocab": ' + "[1," * 3000)
    return [str(DATA / "ids.jsonl"), "--tokenizer", str(d / "tokenizer.json")]


def copied_hf(edit: Callable[[Path], None]) -> Callable[[Path], list[str]]:
    def make(d: Path) -> list[str]:
        shutil.copytree(DATA / "hf_dataset", d / "ds")
        edit(d / "ds")
        return [str(d / "ds")]

    return make


MIXED = [{"input_ids": LONG_IDS}] * 50
for _i in (3, 17, 40):
    MIXED[_i] = {"input_ids": 7}
NUMBERS = [{"length": 5}] * 50
for _i in (3, 17, 40):
    NUMBERS[_i] = {"length": LONG_IDS}

CASES: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    # name: (make the input, a piece of the expected line)
    "a list column of non-lists": (
        jsonl(MIXED),
        "column 'input_ids' is a list column, but rows 3, 17, 40 are a number, not a list",
    ),
    "a number column of lists": (
        jsonl(NUMBERS),
        "column 'length' has non-numbers at rows 3, 17, 40 (a list of 2000, a list of 2000, ",
    ),
    "the old advice on a list column of objects": (
        parquet({"input_ids": [{"a": LONG_IDS}] * 5}, "--length-column", "input_ids"),
        "column 'input_ids' has non-numbers at rows 0, 1, 2, 3, 4 (an object, an object, ",
    ),
    "a column of strings": (
        parquet({"text": ["x" * 5000] * 3}, "--length-column", "text"),
        "column 'text' holds text, not lengths; count its tokens: dflash-diag manifest DATA "
        "--tokenizer tokenizer.json",
    ),
    "a csv column of strings": (
        lambda d: (d / "m.csv").write_text("length\n" + ("y" * 5000 + "\n") * 3) and [],
        "",
    ),
    "no length column among many": (
        parquet({f"feature_{i:04d}_" + "z" * 30: [1] for i in range(400)}),
        "more; name it with --length-column",
    ),
    "a long column name": (
        parquet({"input_ids": [[1]]}, "--length-column", "c" * 2000),
        "no column 'ccccccc",
    ),
    "a folder that is not a dataset": (
        folder({"notes.txt": "hello\n" * 1000}),
        "is a folder, not a manifest file or a dataset (no state.json, dataset_dict.json or "
        ".parquet files)",
    ),
    "a state.json that is not JSON": (
        folder({"state.json": "{" + "x" * 5000}),
        "state.json: not readable JSON (",
    ),
    "a state.json without data files": (
        folder({"state.json": json.dumps({"_data_files": "x" * 5000})}),
        "state.json: has no '_data_files' list of file names",
    ),
    "a data file missing": (
        copied_hf(lambda d: (d / "data-00001-of-00003.arrow").unlink()),
        "state.json names missing data files: data-00001-of-00003.arrow",
    ),
    "a damaged data file": (
        copied_hf(lambda d: (d / "data-00001-of-00003.arrow").write_bytes(b"\xff" * 5000)),
        "cannot read as a dataset folder (",
    ),
    "a DatasetDict without train": (
        lambda d: [str(DATA / "hf_dict_no_train")],
        "is a DatasetDict with splits validation, test and no 'train'",
    ),
    "an unknown split": (
        lambda d: [str(DATA / "hf_dict"), "--split", "s" * 3000],
        "has no split 'sssss",
    ),
    "a tokenizer file that does not load": (
        bad_tokenizer,
        "tokenizer.json: does not load as a tokenizer.json (",
    ),
    "a tokenizer file that is not there": (
        lambda d: [str(DATA / "ids.jsonl"), "--tokenizer", str(d / "none.json")],
        "none.json: ",
    ),
    "a text column of numbers": (
        lambda d: [
            str(DATA / "ids.jsonl"),
            "--tokenizer",
            str(DATA / "expected.json"),
            "--length-column",
            "input_ids",
        ],
        "",
    ),
    "an empty dataset": (
        parquet({"input_ids": pa.array([], pa.list_(pa.int32()))}),
        "holds no samples (0 rows); check the dataset or its split",
    ),
    "an empty JSON lines file": (jsonl([]), "no length column"),
    "a split of a single file": (
        lambda d: [str(DATA / "ids.parquet"), "--split", "train"],
        "--split applies to a DatasetDict folder; drop --split",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_error_is_one_short_line_and_nothing_is_written(tmp_path, name):
    make, piece = CASES[name]
    given = tmp_path / "in"
    given.mkdir()
    args = make(given)
    if name == "a csv column of strings":
        args = [str(given / "m.csv")]
    before = sorted(p.name for p in given.rglob("*"))
    out = tmp_path / "out"
    out.mkdir()
    result = runner.invoke(app, ["manifest", *args, "--to", str(out / "m.parquet")])
    assert result.exit_code == 2, (result.stdout, result.stderr)
    line = result.stderr
    assert line.startswith("error: ") and line.endswith("\n") and line.count("\n") == 1, line
    assert len(line) - 1 <= MAX_LINE, f"{len(line)} characters: {line}"
    assert piece in line
    assert "1, 2, 3, 4, 5" not in line  # (no token list is printed)
    assert list(out.iterdir()) == []  # nothing written, no temp file
    assert sorted(p.name for p in given.rglob("*")) == before


def test_the_other_commands_keep_the_line_short_too(tmp_path):
    pq.write_table(pa.table({"input_ids": [{"a": LONG_IDS}] * 5}), tmp_path / "m.parquet")
    result = runner.invoke(
        app, ["batches", str(tmp_path / "m.parquet"), "--length-column", "input_ids"]
    )
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and len(result.stderr) <= MAX_LINE
