"""How big a batch recording is, and what recording and reading it cost.

Writes, in a temporary folder, a recording of ``--n`` samples (default 10,000,000) over
``--epochs`` epochs (default 6) of random batches (each epoch a fresh permutation cut
into micro-batches of 8..64 samples, one micro-batch per optimizer step, one rank:
every step its own record, the most framing there can be) through
``BatchRecorder.log``, and the same lengths as a Parquet manifest with our own
``write_manifest``.  Prints:

- the recording's bytes per recorded sample, and its size over the manifest's size x
  epochs (the issue's bar: well under 1; the target here is < 0.5);
- ``log()`` per call (microseconds) for micro-batches of 8 and 64 samples;
- ``read_recording`` and ``to_replay(manifest)`` time on the whole file (wall, and CPU
  time of this process: on a shared machine the wall time also counts the others).

    python benchmarks/bench_record_size.py             # 10M samples x 6 epochs
    python benchmarks/bench_record_size.py --n 500000  # a quick run
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from common import long_tailed_lengths, timed

from dflash_diag.data import Manifest
from dflash_diag.manifest.write import write_manifest
from dflash_diag.record import BatchRecorder, read_recording


def epoch_batches(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """One epoch: a permutation of ``n`` ids and the batch boundaries cutting it into
    batches of 8..64."""
    order = rng.permutation(n)
    sizes = rng.integers(8, 65, n // 8 + 1)
    bounds = np.r_[0, np.cumsum(sizes)]
    bounds = np.r_[bounds[bounds < n], n]
    return order, bounds


def record(path: Path, lengths: np.ndarray, epochs: int) -> tuple[int, int, float]:
    """Record ``epochs`` epochs of random batches; (samples, steps, seconds in log())."""
    rng = np.random.default_rng(1)
    step = samples = 0
    spent = 0.0
    with BatchRecorder(path, rank=0, world_size=1, settings={"seed": 1}) as rec:
        for _ in range(epochs):
            order, bounds = epoch_batches(rng, len(lengths))
            batch_lengths = lengths[order]
            start = time.perf_counter()
            for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
                rec.log(step, order[a:b], batch_lengths[a:b])
                step += 1
            spent += time.perf_counter() - start
            samples += len(order)
    return samples, step, spent


def log_cost(folder: Path, n: int, size: int, calls: int = 20_000) -> float:
    """CPU microseconds of this process per ``log()`` of a micro-batch of ``size``
    random ids below ``n``, one step each (CPU time: other load on the machine does not
    count; the write to the OS does)."""
    rng = np.random.default_rng(size)
    ids = rng.integers(0, n, (calls, size))
    lens = rng.integers(1, 8192, (calls, size))
    with BatchRecorder(folder / f"cost{size}.batches", rank=0, world_size=1) as rec:
        start = time.process_time()
        for i in range(calls):
            rec.log(i, ids[i], lens[i])
        spent = time.process_time() - start
    return spent / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="samples in the dataset")
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args()
    lengths = long_tailed_lengths(args.n)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        manifest = Manifest("bench", lengths, np.arange(args.n, dtype=np.int64))
        man_bytes = write_manifest(manifest, folder / "manifest.parquet").stat().st_size
        path = folder / "train.batches"
        samples, steps, spent = record(path, lengths, args.epochs)
        rec_bytes = path.stat().st_size
        print(f"dataset: {args.n:,} samples x {args.epochs} epochs = {samples:,} recorded")
        print(f"         in {steps:,} steps (micro-batches of 8..64, one rank)")
        print(f"manifest (parquet, write_manifest): {man_bytes:,} bytes")
        print(f"recording: {rec_bytes:,} bytes = {rec_bytes / samples:.2f} bytes/sample")
        ratio = rec_bytes / (man_bytes * args.epochs)
        print(f"ratio recording / (manifest x epochs): {ratio:.3f}  (target < 0.5)")
        print(f"log(): {spent / steps * 1e6:.1f} us/call (wall) on average while recording")
        for size in (8, 64):
            cost = log_cost(folder, args.n, size)
            print(f"log() of {size} samples: {cost:.1f} us CPU/call")
        cpu = time.process_time()
        rec, read_s = timed(read_recording, path)
        cpu, read_cpu = time.process_time(), time.process_time() - cpu
        print(f"read_recording: {read_s:.2f} s wall, {read_cpu:.2f} s CPU", end="")
        print(f" for {len(rec.table):,} rows")
        rep, replay_s = timed(rec.to_replay, manifest)
        replay_cpu = time.process_time() - cpu
        print(f"to_replay(manifest): {replay_s:.2f} s wall, {replay_cpu:.2f} s CPU", end="")
        print(
            f" ({len(rep.micro):,} micro-batches, {int(rep.micro['epoch'].max()) + 1} epochs found)"
        )


if __name__ == "__main__":
    main()
