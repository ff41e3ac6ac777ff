"""read_manifest: every format, column detection, and errors that name the bad values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dflash_diag.errors import InputError
from dflash_diag.manifest import read_manifest

DATA = Path(__file__).resolve().parents[1] / "data" / "manifests"
LENGTHS = [120, 3000, 7, 120, 0]


@pytest.mark.parametrize(
    ("name", "column", "category"),
    [
        ("tiny.csv", "length", "source"),
        ("tiny.jsonl", "num_tokens", "category"),
        ("tiny.parquet", "input_len", "source"),
        ("tiny.tsv", "seq_len", None),
    ],
)
def test_every_format_reads_the_same_samples(name, column, category):
    m = read_manifest(DATA / name)
    assert m.lengths.tolist() == LENGTHS
    assert m.lengths.dtype == np.int64
    assert m.length_column == column
    assert m.category_column == category
    if name != "tiny.tsv":
        # sample_id is kept, row order stays the dataset index
        assert m.ids.tolist() == [10, 11, 12, 13, 14]
        assert m.category_names == ("(missing)", "chat", "code", "math")
        assert [m.category_names[c] for c in m.categories] == [
            "chat",
            "code",
            "math",
            "(missing)",
            "chat",
        ]
    else:
        assert m.ids.tolist() == [0, 1, 2, 3, 4]
        assert m.categories is None


def test_npy_is_the_length_column():
    m = read_manifest(DATA / "tiny.npy")
    assert m.lengths.tolist() == LENGTHS
    assert m.ids.tolist() == list(range(5))


def test_named_columns(tmp_path):
    m = read_manifest(DATA / "tiny.csv", length_column="text_chars", category_column="source")
    assert m.lengths.tolist() == [400, 9000, 20, 410, 0]
    assert m.length_column == "text_chars"
    m = read_manifest(DATA / "tiny.tsv", category_column="domain")
    assert m.category_names == ("a", "b")


def test_parquet_reads_only_the_needed_columns(monkeypatch):
    import pyarrow.parquet as pq

    asked = []
    original = pq.ParquetFile.read_row_group

    def spy(self, i, columns=None, **kw):
        asked.append(columns)
        return original(self, i, columns=columns, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy)
    calls = []
    read_manifest(DATA / "tiny.parquet", progress=lambda d, t: calls.append((d, t)))
    assert asked == [["input_len", "source", "sample_id"]] * 3
    assert calls == [(1, 3), (2, 3), (3, 3)]


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def error(path, **kw):
    with pytest.raises(InputError) as e:
        read_manifest(path, **kw)
    return str(e.value)


def test_missing_length_column_lists_the_columns(tmp_path):
    p = write(tmp_path, "m.csv", "tokens_in,source\n1,a\n")
    assert error(p) == (
        f"{p}: no length column (looked for length, len, num_tokens, n_tokens, seq_len, "
        "input_len); columns are: tokens_in, source; name it with --length-column"
    )
    assert error(p, length_column="size") == (
        f"{p}: no column 'size'; choose the length column from: tokens_in, source"
    )
    assert error(p, length_column="tokens_in", category_column="kind") == (
        f"{p}: no column 'kind'; choose the category column from: tokens_in, source"
    )


def test_negative_lengths_name_the_rows(tmp_path):
    p = write(tmp_path, "m.csv", "length\n" + "\n".join(["5", "-1", "3", "-7"] + ["-2"] * 6))
    assert error(p) == (
        f"{p}: column 'length' has negative lengths at rows 1, 3, 4, 5, 6 and 3 more "
        "(-1, -7, -2); lengths are token counts, 0 or more"
    )


def test_missing_and_non_integer_lengths(tmp_path):
    # a blank field is a missing value
    p = write(tmp_path, "m.csv", "length,x\n5,a\n,b\n3,c\n")
    assert error(p) == (
        f"{p}: column 'length' has missing values at rows 1; every sample needs its lengths"
    )
    p = write(tmp_path, "m.csv", "length\n5\n2.5\n3\n")
    assert error(p) == (
        f"{p}: column 'length' has non-integer values at rows 1 (2.5); "
        "lengths must be whole numbers"
    )
    p = write(tmp_path, "m.jsonl", '{"length": 5}\n{"length": "long"}\n')
    assert error(p) == (
        f"{p}: column 'length' has non-numbers at rows 1 ('long'); lengths must be whole numbers"
    )
    p = write(tmp_path, "m.jsonl", '{"length": 5}\n{"len": 4}\n')
    assert "column 'length' has missing values at rows 1" in error(p)


def test_duplicate_sample_ids(tmp_path):
    p = write(tmp_path, "m.csv", "sample_id,length\n1,5\n2,5\n1,5\n")
    assert error(p) == (
        f"{p}: column 'sample_id' repeats ids at rows 2 (e.g. 1); each sample needs its own id"
    )


def test_file_and_format_errors(tmp_path):
    assert error(tmp_path / "none.parquet") == (
        f"{tmp_path / 'none.parquet'}: manifest not found; check the path"
    )
    p = write(tmp_path, "m.txt", "1\n2\n")
    assert error(p) == (
        f"{p}: unknown manifest format '.txt'; use .parquet, .arrow, .feather, .jsonl, .csv, "
        ".tsv or .npy, or a dataset folder"
    )
    p = write(tmp_path, "m.parquet", "not parquet")
    assert error(p).startswith(f"{p}: cannot read as parquet (")
    bad = tmp_path / "m.npy"
    np.save(bad, np.ones((2, 2)))
    assert error(bad) == f"{bad}: expected a 1-D array of lengths, got shape (2, 2)"


def test_a_large_parquet_manifest(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    lens = np.random.default_rng(0).integers(0, 8192, 200_000)
    pq.write_table(pa.table({"len": lens}), tmp_path / "big.parquet")
    m = read_manifest(tmp_path / "big.parquet")
    assert np.array_equal(m.lengths, lens)
    assert m.length_column == "len"
