"""What the mutation fuzzing left, and the manifests that claim more than they hold."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass

import numpy as np
import pytest

from dflash_diag.errors import InputError
from dflash_diag.manifest import read_manifest
from dflash_diag.spikes.optimizer import lr_departure


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_category_column_that_is_the_length_column_is_refused(tmp_path, suffix):
    path = tmp_path / f"m{suffix}"
    rows = [{"sample_id": i, "length": 10 + i} for i in range(20)]
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        path.write_text("sample_id,length\n" + "".join(f"{i},{10 + i}\n" for i in range(20)))
    with pytest.raises(InputError, match="the category column 'length' is the length column"):
        read_manifest(path, category_column="length")


@dataclass
class Event:
    start_step: int
    peak_step: int


@pytest.mark.parametrize(
    "lr", [[-1e308, 1e308, 1e300, 5e307] * 10, [1e308] * 40, [np.nan, 1e-5] * 20]
)
def test_lr_departure_on_lr_values_near_the_float_range_warns_nothing(lr):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = lr_departure(np.arange(1, 41), np.array(lr, dtype=float), Event(30, 30))
    assert got is None or np.isfinite(got)


@pytest.mark.slow
def test_a_small_parquet_that_claims_more_rows_than_fit_is_refused(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dflash_diag import limits

    monkeypatch.setattr(limits, "available_memory", lambda: 2 << 30)  # (a 2 GB machine)
    n = 1 << 26
    ids = pa.array(np.zeros(1, dtype=np.int64))
    # (a dictionary column of one value, repeated: pages of a few KB hold 4e8 rows)
    col = pa.DictionaryArray.from_arrays(pa.array(np.zeros(1 << 20, np.int32)), ids)
    path = tmp_path / "bomb.parquet"
    with pq.ParquetWriter(path, pa.schema([("length", col.type)])) as w:
        table = pa.table({"length": col})
        for _ in range(n >> 20):
            w.write_table(table, row_group_size=1 << 24)
    assert path.stat().st_size < 4 << 20
    with pytest.raises(InputError, match=r"reading its 67,108,864 rows needs ~4.0 GB; this"):
        read_manifest(path)
