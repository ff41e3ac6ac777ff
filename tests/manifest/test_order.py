"""Sample order is the dataset's order: the manifest of a folder of Parquet shards has,
row for row, the samples ``datasets.load_dataset(folder)`` gives (its split, its file
order, rows within files), checked against the real library on layouts where sorted
names, creation order and split rules disagree."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.errors import InputError
from dflash_diag.manifest import read_manifest
from dflash_diag.manifest.shards import order_shards

from .conftest import need

LAYOUTS = {
    # names sorted as text differ from sorted as paths ('-' < '/' < 'b')
    "text-vs-path-sort": ["a-z.parquet", "a/b.parquet", "a/a.parquet", "ab.parquet"],
    # train and test files: load_dataset's train split is the train files only
    "split-in-file-names": ["train-1.parquet", "test-0.parquet", "train-0.parquet"],
    # split folders
    "split-in-folders": ["train/x.parquet", "test/y.parquet", "train/sub/a.parquet"],
    # push_to_hub's layout
    "sharded": [
        "data/train-00001-of-00002.parquet",
        "data/test-00000-of-00001.parquet",
        "data/train-00000-of-00002.parquet",
    ],
    # hidden files are not data
    "hidden": ["b.parquet", ".cache/a.parquet", "__x/c.parquet", "__.parquet", "a.parquet"],
}


def write_layout(folder: Path, names: list[str]) -> None:
    """Each shard holds rows of a length that names it (file k, row r: 10 k + r + 1 ids),
    written in the listed (not sorted) order."""
    for k, name in enumerate(names):
        p = folder / name
        p.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"input_ids": [[0] * (10 * k + r + 1) for r in range(3)]}), p)


@pytest.fixture
def load_dataset(tmp_path, monkeypatch):
    datasets = need("datasets")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datasets.disable_progress_bars()
    return datasets.load_dataset


@pytest.mark.parametrize("layout", LAYOUTS)
def test_shard_order_is_load_datasets_order(tmp_path, load_dataset, layout):
    folder = tmp_path / "data"
    write_layout(folder, LAYOUTS[layout])
    expected = [len(r) for r in load_dataset(str(folder), split="train")["input_ids"]]
    m = read_manifest(folder)
    assert m.lengths.tolist() == expected
    assert "as datasets' load_dataset resolves a folder" in m.description


@pytest.mark.parametrize("layout", ["split-in-file-names", "sharded", "split-in-folders"])
def test_split_names_another_split(tmp_path, load_dataset, layout):
    folder = tmp_path / "data"
    write_layout(folder, LAYOUTS[layout])
    expected = [len(r) for r in load_dataset(str(folder), split="test")["input_ids"]]
    m = read_manifest(folder, split="test")
    assert m.lengths.tolist() == expected
    assert "split 'test' by" in m.description
    with pytest.raises(InputError, match=r"no split 'validation' among the shards"):
        read_manifest(folder, split="validation")


NAME = st.text(alphabet="abt_-.0123", min_size=1, max_size=6)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.lists(NAME, min_size=1, max_size=3), min_size=1, max_size=6, unique_by=tuple))
def test_every_shard_of_a_folder_without_splits_is_read_once_in_text_order(parts):
    # invariant: with no split keyword anywhere, every visible shard once, in the sorted
    # order of its path as text (hidden: a '.' name, or below a '.' or '__' folder)
    names = ["/".join(p) + ".parquet" for p in parts]
    names = [n for n in names if not any(k in n for k in ("train", "test", "val", "dev"))]
    files, _ = order_shards(names, None)
    hidden = [n for n in names if n.split("/")[-1].startswith(".")] + [
        n for n in names if any(s.startswith((".", "__")) for s in n.split("/")[:-1])
    ]
    assert files == sorted(set(names) - set(hidden))
