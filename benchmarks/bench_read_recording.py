"""How fast a batch recording is read, against reading the same rows from Parquet.

For N samples x 6 epochs it writes (outside the timings), in a temporary folder, a
recording of a shuffling sampler's schedule through ``BatchRecorder.log`` (each epoch a
permutation cut into steps of 64 samples, one micro-batch a step, one rank) and the same
rows, ``step, sample_id, length`` as int64, as a Parquet file (pyarrow's defaults).
Then, each in a fresh process, best of ``--repeat`` alternating rounds:

- ``read_recording(REC)``: the rows decoded, checked and kept as arrays;
- the reference: ``pyarrow.parquet.read_table(PARQUET)`` and its three columns as numpy
  arrays, the field's usual columnar read of the same rows.

It prints both (wall and CPU seconds, peak memory), their ratio, and the reader's peak
memory in bytes a row beside the 21 bytes a row its output holds (what the reader needs
beyond its output is bounded by a chunk of rows, not by the file).

    python benchmarks/bench_read_recording.py                    # 1M x 6 and 10M x 6
    python benchmarks/bench_read_recording.py --sizes 1000000    # one size
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import long_tailed_lengths, main_over_sizes, run_python

from dflash_diag.record import BatchRecorder

EPOCHS = 6
PER_STEP = 64

_CHILD = """
import sys, time
t0, c0 = time.perf_counter(), time.process_time()
if sys.argv[1] == "recording":
    from dflash_diag.record import read_recording
    rows = len(read_recording(sys.argv[2]).sample_id)
else:
    import pyarrow.parquet as pq
    t = pq.read_table(sys.argv[2])
    rows = len([t[c].to_numpy() for c in ("step", "sample_id", "length")][0])
print(time.perf_counter() - t0, time.process_time() - c0, rows)
"""


def build(folder: Path, n_samples: int, seed: int = 0) -> tuple[Path, Path, int]:
    """The recording and the Parquet file of the same rows; returns the rows."""
    rng = np.random.default_rng(seed)
    lengths = long_tailed_lengths(n_samples, seed)
    per_epoch = n_samples // PER_STEP
    rec = folder / "train.batches"
    steps, ids = [], []
    step = 0
    with BatchRecorder(rec, rank=0, world_size=1, settings={"seed": seed}) as out:
        for _ in range(EPOCHS):
            batches = rng.permutation(n_samples)[: per_epoch * PER_STEP].reshape(per_epoch, -1)
            for b in batches:
                step += 1
                out.log(step, b, lengths[b])
            batches.sort(axis=1)  # (a recording keeps a micro-batch's ids ascending)
            ids.append(batches.ravel())
            steps.append(np.repeat(np.arange(step - per_epoch + 1, step + 1), PER_STEP))
    sample_id = np.concatenate(ids)
    table = pa.table(
        {"step": np.concatenate(steps), "sample_id": sample_id, "length": lengths[sample_id]}
    )
    parquet = folder / "rows.parquet"
    pq.write_table(table, parquet)
    return rec, parquet, len(sample_id)


def child(kind: str, path: Path) -> tuple[float, float, float]:
    """(wall s, CPU s, peak MB) of one read in a fresh process."""
    (line,), _, peak = run_python(_CHILD, kind, str(path))
    wall, cpu, _ = line.split()
    return float(wall), float(cpu), peak


def run(n_samples: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rec, parquet, rows = build(Path(tmp), n_samples)
        mb = {p.name: p.stat().st_size / 2**20 for p in (rec, parquet)}
        got: dict[str, list[tuple[float, float, float]]] = {"recording": [], "parquet": []}
        for _ in range(repeat):
            got["recording"].append(child("recording", rec))
            got["parquet"].append(child("parquet", parquet))
    (w_r, c_r, m_r), (w_p, c_p, m_p) = (min(got[k]) for k in ("recording", "parquet"))
    print(
        f"{n_samples:>11,} samples x {EPOCHS} = {rows:,} rows "
        f"({mb['train.batches']:,.0f} MB recording, {mb['rows.parquet']:,.0f} MB Parquet):\n"
        f"    read_recording  {w_r:6.2f} s wall {c_r:6.2f} s CPU  {m_r:7,.0f} MB peak "
        f"({m_r * 2**20 / rows:.0f} bytes a row; its output 21)\n"
        f"    Parquet         {w_p:6.2f} s wall {c_p:6.2f} s CPU  {m_p:7,.0f} MB peak\n"
        f"    ratio           {w_r / w_p:6.2f}x wall {c_r / c_p:5.2f}x CPU  {m_r / m_p:6.2f}x"
    )


def main() -> None:
    main_over_sizes(__doc__, run, "1000000,10000000")


if __name__ == "__main__":
    main()
