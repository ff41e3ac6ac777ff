"""Manifests from datasets: list columns, save_to_disk folders, Parquet shards, Arrow, text.

The fixtures in tests/data/datasets were written by the real ``datasets`` library
(``make.py`` there); the tests read them without it and count in Python.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.errors import InputError
from dflash_diag.manifest import read_manifest

DATA = Path(__file__).resolve().parents[1] / "data" / "datasets"
EXPECTED = json.loads((DATA / "expected.json").read_text(encoding="utf-8"))
runner = CliRunner()


def python_lengths(path: Path, column: str = "input_ids") -> list[int]:
    """``len(row[column])`` for every row, counted in Python from the values."""
    if path.suffix == ".jsonl":
        lines = path.read_text(encoding="utf-8").splitlines()
        return [len(json.loads(line)[column]) for line in lines]
    if path.suffix == ".arrow" and path.parent.name != "datasets":  # save_to_disk: a stream
        table = pa.ipc.open_stream(pa.memory_map(str(path))).read_all()
    elif path.suffix == ".arrow":
        table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
    else:
        table = pq.read_table(path)
    return [len(v) for v in table.column(column).to_pylist()]


def hf_files(folder: Path) -> list[Path]:
    state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
    return [folder / f["filename"] for f in state["_data_files"]]


@pytest.mark.parametrize(
    ("given", "split", "files"),
    [
        ("ids.parquet", None, ["ids.parquet"]),
        ("ids.jsonl", None, ["ids.jsonl"]),
        ("ids.arrow", None, ["ids.arrow"]),
        ("hf_dataset", None, "state"),
        ("hf_dict", None, "train"),
        ("hf_dict", "test", "test"),
        ("hf_dict/test", None, "state"),
        ("shards", None, "sorted"),
    ],
)
def test_every_form_gives_the_lengths_counted_in_python(given, split, files):
    path = DATA / given
    if files == "state":
        parts = hf_files(path)
    elif files in ("train", "test"):
        parts = hf_files(path / files)
    elif files == "sorted":
        parts = sorted(path.glob("*.parquet"))
    else:
        parts = [DATA / f for f in files]
    counted = [n for p in parts for n in python_lengths(p)]
    m = read_manifest(path, split=split)
    assert m.lengths.tolist() == counted
    assert m.lengths.dtype == np.int64
    assert m.length_column == "input_ids"
    # the lengths the fixtures were built with (make.py)
    want = EXPECTED["test_lengths"] if files == "test" or given.endswith("test") else None
    assert counted == (want or EXPECTED["lengths"])
    assert m.category_column == "source" and m.category_names == ("chat", "code", "math")
    if want is None:
        assert [m.category_names[c] for c in m.categories] == EXPECTED["source"]
    assert m.ids.tolist() == list(range(len(counted)))


def test_descriptions_say_where_the_order_comes_from():
    assert "3 Arrow files in state.json order" in read_manifest(DATA / "hf_dataset").description
    assert "split 'train' (of train, test)" in read_manifest(DATA / "hf_dict").description
    d = read_manifest(DATA / "shards").description
    assert "folder of 4 Parquet files, read in sorted file-name order" in d
    assert "list column 'input_ids'" in d


def test_save_to_disk_files_are_read_in_state_json_order(tmp_path):
    folder = tmp_path / "ds"
    shutil.copytree(DATA / "hf_dataset", folder)
    state = json.loads((folder / "state.json").read_text())
    state["_data_files"].reverse()
    (folder / "state.json").write_text(json.dumps(state))
    counted = [n for p in hf_files(folder) for n in python_lengths(p)]
    assert counted != EXPECTED["lengths"]  # (the order changed)
    assert read_manifest(folder).lengths.tolist() == counted


def test_parquet_shards_are_read_in_sorted_name_order(tmp_path):
    folder = tmp_path / "shards"
    (folder / "b").mkdir(parents=True)
    names = sorted((DATA / "shards").glob("*.parquet"))
    # the last shard first by name, one in a subfolder (sorted by its whole path)
    shutil.copy(names[3], folder / "a-first.parquet")
    for i, p in enumerate(names[:3]):
        shutil.copy(p, folder / "b" / f"{i}.parquet")
    counted = [n for p in [names[3], *names[:3]] for n in python_lengths(p)]
    assert read_manifest(folder).lengths.tolist() == counted


def test_padded_ids_take_the_attention_mask_sums():
    table = pq.read_table(DATA / "padded.parquet")
    ids, mask = table.column("input_ids").to_pylist(), table.column("attention_mask").to_pylist()
    assert {len(r) for r in ids} == {EXPECTED["pad_to"]}
    m = read_manifest(DATA / "padded.parquet")
    assert m.lengths.tolist() == [sum(r) for r in mask] == EXPECTED["lengths"]
    assert "row sums of 'attention_mask'" in m.description
    assert "padded to 48" in m.description
    # the ids' own lengths when they are not padded: the mask is not read
    m = read_manifest(DATA / "ids.parquet")
    assert "attention_mask" not in m.description


def test_unpadded_ids_keep_their_lengths_even_with_a_mask(tmp_path):
    p = tmp_path / "m.parquet"
    pq.write_table(pa.table({"input_ids": [[1, 2, 3], [4]], "attention_mask": [[1, 1, 0], [1]]}), p)
    assert read_manifest(p).lengths.tolist() == [3, 1]


def test_a_named_list_column_and_a_length_column_first(tmp_path):
    p = tmp_path / "m.parquet"
    pq.write_table(pa.table({"labels": [[1, 2], [3]], "tokens": [[1], [2, 3, 4]]}), p)
    assert read_manifest(p, length_column="tokens").lengths.tolist() == [1, 3]
    with pytest.raises(InputError, match="name a list column of token ids with --length-column"):
        read_manifest(p)
    # a length column, when there is one, is still the lengths
    pq.write_table(pa.table({"input_ids": [[1, 2], [3]], "length": [7, 8]}), p)
    assert read_manifest(p).lengths.tolist() == [7, 8]


@settings(max_examples=examples(40), deadline=None)
@given(
    rows=st.lists(
        st.one_of(st.none(), st.lists(st.integers(0, 2**31 - 1), max_size=9)), max_size=60
    ),
    group=st.integers(1, 25),
    fmt=st.sampled_from(["parquet", "arrow", "jsonl"]),
)
def test_list_lengths_are_len_of_each_row(tmp_path_factory, rows, group, fmt):
    p = tmp_path_factory.mktemp("lists") / f"m.{fmt}"
    table = pa.table({"input_ids": pa.array(rows, pa.list_(pa.int64()))})
    if fmt == "parquet":
        pq.write_table(table, p, row_group_size=group)
    elif fmt == "arrow":
        import pyarrow.feather as feather

        feather.write_feather(table, p)
    else:
        p.write_text("".join(json.dumps({"input_ids": r}) + "\n" for r in rows))
    if not rows:
        with pytest.raises(InputError):
            read_manifest(p)
        return
    if None in rows:  # a row with no ids: named, not taken as 0
        with pytest.raises(InputError, match="missing values at rows"):
            read_manifest(p)
        return
    assert read_manifest(p).lengths.tolist() == [len(r) for r in rows]


# ------------------------------------------------------------------ the command


def run(*args: str):
    return runner.invoke(app, ["manifest", *map(str, args)])


def test_the_command_writes_sample_id_length_category(tmp_path):
    out = tmp_path / "manifest.parquet"
    result = run(DATA / "hf_dict", "--to", out)
    assert result.exit_code == 0, result.stderr
    t = pq.read_table(out)
    assert t.column_names == ["sample_id", "length", "category"]
    assert t.column("length").to_pylist() == EXPECTED["lengths"]
    assert t.column("sample_id").to_pylist() == list(range(len(EXPECTED["lengths"])))
    assert t.column("category").to_pylist() == EXPECTED["source"]
    lines = result.stdout.splitlines()
    n, total = len(EXPECTED["lengths"]), sum(EXPECTED["lengths"])
    assert lines[0].startswith(f"wrote {out}: {n} samples, {total:,} tokens (lengths 1..")
    assert "split 'train'" in lines[1]
    # the written manifest is a manifest: read back, the same samples
    back = read_manifest(out)
    assert back.lengths.tolist() == EXPECTED["lengths"] and back.category_column == "category"
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.parquet"]  # no temp file left


def test_the_command_never_overwrites_without_force(tmp_path):
    out = tmp_path / "m.csv"
    out.write_text("keep me\n")
    result = run(DATA / "ids.jsonl", "--to", out)
    assert result.exit_code == 2
    assert result.stderr == f"error: {out}: already exists; add --force to replace it\n"
    assert out.read_text() == "keep me\n"
    result = run(DATA / "ids.jsonl", "--to", out, "--force", "--split", "x")
    assert result.exit_code == 2 and out.read_text() == "keep me\n"  # a failed run keeps it
    result = run(DATA / "ids.jsonl", "--to", out, "--force")
    assert result.exit_code == 0
    assert out.read_text().splitlines()[0] == '"sample_id","length","category"'
    assert read_manifest(out).lengths.tolist() == EXPECTED["lengths"]


def test_a_datasetdict_without_train_asks_for_a_split(tmp_path):
    folder = DATA / "hf_dict_no_train"
    result = run(folder, "--to", tmp_path / "m.parquet")
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {folder}: is a DatasetDict with splits validation, test and no 'train'; "
        "choose one with --split NAME (dflash-diag manifest) or give the split's folder\n"
    )
    result = run(folder, "--to", tmp_path / "m.parquet", "--split", "validation")
    assert result.exit_code == 0
    assert read_manifest(tmp_path / "m.parquet").lengths.tolist() == EXPECTED["test_lengths"]


# ------------------------------------------------------------------ text + tokenizer.json


def word_tokenizer(path: Path) -> Path:
    """A word-level tokenizer.json over the fixtures' words, adding [CLS] ... [SEP]."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, processors

    words = ["[UNK]", "[CLS]", "[SEP]", "alpha", "beta", "gamma", "delta", "loss"]
    tok = tokenizers.Tokenizer(
        models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]")
    )
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)]
    )
    tok.save(str(path))
    return path


@pytest.mark.parametrize("given", ["ids.jsonl", "ids.parquet", "ids.arrow", "hf_dataset"])
def test_text_and_tokenizer_json_count_the_tokens(tmp_path, given):
    tok = word_tokenizer(tmp_path / "tokenizer.json")
    out = tmp_path / "m.parquet"
    result = run(DATA / given, "--to", out, "--tokenizer", tok)
    assert result.exit_code == 0, result.stderr
    words = EXPECTED["words"]
    assert pq.read_table(out).column("length").to_pylist() == [n + 2 for n in words]
    assert "tokens of the text by tokenizer.json (special tokens added) of column 'text'" in (
        result.stdout
    )
    m = read_manifest(DATA / given, tokenizer=tok, special_tokens=False)
    assert m.lengths.tolist() == words


def test_the_tokenizer_counts_as_encode_does(tmp_path):
    tok = word_tokenizer(tmp_path / "tokenizer.json")
    import tokenizers

    texts = pq.read_table(DATA / "ids.parquet").column("text").to_pylist()
    t = tokenizers.Tokenizer.from_file(str(tok))
    m = read_manifest(DATA / "ids.parquet", tokenizer=tok)
    assert m.lengths.tolist() == [len(t.encode(x).ids) for x in texts]


def test_a_missing_tokenizers_package_says_which_extra(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(InputError) as e:
        read_manifest(DATA / "ids.jsonl", tokenizer=tmp_path / "tokenizer.json")
    assert str(e.value) == (
        f"{tmp_path / 'tokenizer.json'}: reading this file needs the optional package "
        "'tokenizers'; install it with: pip install 'dflash-diag[tokenize]'"
    )


def test_progress_counts_parts_and_moves_inside_a_text_part(tmp_path, monkeypatch):
    calls: list[tuple[int, int]] = []
    read_manifest(DATA / "hf_dataset", progress=lambda d, t: calls.append((d, t)))
    assert calls == [(1, 3), (2, 3), (3, 3)]
    from dflash_diag.manifest import text

    monkeypatch.setattr(text, "BATCH", 64)
    tok = word_tokenizer(tmp_path / "tokenizer.json")
    calls.clear()
    read_manifest(DATA / "ids.jsonl", tokenizer=tok, progress=lambda d, t: calls.append((d, t)))
    # 200 texts in batches of 64: 4 steps of the one part, the last at the end
    assert calls == [(320, 1000), (640, 1000), (960, 1000), (1000, 1000)]


@settings(max_examples=examples(40), deadline=None)
@given(
    cats=st.lists(st.one_of(st.none(), st.sampled_from(["b", "a", "c", "é", ""])), max_size=60),
    group=st.integers(1, 25),
    large=st.booleans(),
)
def test_parquet_categories_read_as_codes_are_those_of_the_names(
    tmp_path_factory, cats, group, large
):
    # A Parquet category column is read dictionary-encoded (codes, names once a row
    # group); the manifest is the same as from the names a row (an Arrow file).
    if not cats:
        return
    import pyarrow.feather as feather

    folder = tmp_path_factory.mktemp("cats")
    kind = pa.large_string() if large else pa.string()
    table = pa.table({"length": list(range(len(cats))), "source": pa.array(cats, kind)})
    pq.write_table(table, folder / "m.parquet", row_group_size=group)
    feather.write_feather(table, folder / "m.arrow")
    coded, plain = read_manifest(folder / "m.parquet"), read_manifest(folder / "m.arrow")
    assert coded.category_names == plain.category_names
    assert coded.categories is not None and plain.categories is not None
    assert coded.categories.dtype == plain.categories.dtype
    assert coded.categories.tolist() == plain.categories.tolist()


@settings(max_examples=examples(60), deadline=None)
@given(
    names=st.lists(st.text("abcé1", min_size=0, max_size=3), min_size=1, max_size=80, unique=True),
    picks=st.lists(st.integers(-1, 79), min_size=0, max_size=60),
)
def test_categorical_columns_give_the_codes_the_names_give(names, picks):
    # A column read dictionary-encoded comes as a pandas Categorical, whose categories
    # may hold names no row uses and whose codes are -1 where missing: its codes and
    # names are those of the same values read one name a row.
    import pandas as pd

    from dflash_diag.manifest import _factorize

    rows = [names[p % len(names)] if p >= 0 else None for p in picks]
    coded = pd.Series(pd.Categorical(rows, categories=names))
    plain = pd.Series(rows, dtype=object)
    codes, labels = _factorize(coded)
    want_codes, want_labels = _factorize(plain)
    assert labels == want_labels
    assert codes.dtype == want_codes.dtype == np.int32
    assert codes.tolist() == want_codes.tolist()
