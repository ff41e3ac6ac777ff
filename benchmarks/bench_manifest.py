"""How long ``read_manifest`` takes on a 10M-row dataset with an ``input_ids`` list column.

Builds, in a temporary folder, a Parquet file of 10,000,000 rows whose ``input_ids`` hold
1..64 int32 ids each (about 330M ids), plus a ``source`` column, then times, in the same
run and in turns (best of ``--repeat``):

- reference: ``pyarrow.parquet.read_table(columns=["input_ids"])`` then
  ``pyarrow.compute.list_value_length`` (a bare pyarrow scan of the column);
- ``read_manifest(path)``: the same lengths, checked, with ``sample_id`` and the
  ``source`` categories a manifest carries;
- ``read_manifest`` on the same rows as a folder of 4 Parquet shards;
- ``dflash-diag manifest`` end to end (read + write ``sample_id, length, category``).

    python benchmarks/bench_manifest.py            # 10,000,000 rows
    python benchmarks/bench_manifest.py --quick    # 1,000,000 rows
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from common import alternating

from dflash_diag.manifest import read_manifest
from dflash_diag.manifest.write import write_manifest


def build(folder: Path, n: int) -> tuple[Path, Path, np.ndarray]:
    """A Parquet file and a folder of 4 shards of ``n`` rows; the lengths they hold."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 65, n)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    ids = pa.array(rng.integers(0, 32_000, int(offsets[-1]), dtype=np.int32))
    source = pa.DictionaryArray.from_arrays(
        pa.array(rng.integers(0, 3, n, dtype=np.int32)), pa.array(["chat", "code", "math"])
    )
    table = pa.table(
        {"input_ids": pa.ListArray.from_arrays(pa.array(offsets), ids), "source": source}
    )
    one = folder / "data.parquet"
    pq.write_table(table, one, row_group_size=1_000_000)
    shards = folder / "shards"
    shards.mkdir()
    step = -(-n // 4)
    for i in range(4):
        pq.write_table(table.slice(i * step, step), shards / f"part-{i:05d}.parquet")
    return one, shards, lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000,000 rows")
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds (default 3)")
    args = parser.parse_args()
    n = 1_000_000 if args.quick else 10_000_000
    with tempfile.TemporaryDirectory() as tmp:
        one, shards, lengths = build(Path(tmp), n)
        out = Path(tmp) / "manifest.parquet"

        def bare() -> np.ndarray:
            col = pq.read_table(one, columns=["input_ids"]).column("input_ids")
            return pc.list_value_length(col).to_numpy()

        def command() -> object:
            m = read_manifest(one)
            return write_manifest(m, out, force=True)

        (t_ref, ref), (t_one, m1), (t_shards, m2), (t_cmd, _) = alternating(
            args.repeat, bare, lambda: read_manifest(one), lambda: read_manifest(shards), command
        )
        assert np.array_equal(ref, lengths) and np.array_equal(m1.lengths, lengths)
        assert np.array_equal(m2.lengths, lengths)
        size = one.stat().st_size / 1e6
        print(f"rows: {n:,}; ids: {int(lengths.sum()):,}; Parquet file {size:,.0f} MB")
        rows = [
            ("reference  read_table(input_ids) + list_value_length", t_ref),
            ("read_manifest(file)  (+ checks, sample_id, source)", t_one),
            ("read_manifest(folder of 4 shards)", t_shards),
            ("read_manifest + write_manifest (the command)", t_cmd),
        ]
        for name, t in rows:
            print(f"{name:<56} {t:7.2f} s  {t / t_ref:5.2f}x")


if __name__ == "__main__":
    main()
