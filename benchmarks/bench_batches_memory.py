"""Peak memory and time of the whole `dflash-diag batches` process, against a floor.

    python benchmarks/bench_batches_memory.py               # 2,000,000 and 10,000,000 samples
    python benchmarks/bench_batches_memory.py --quick       # 1,000,000 and 2,000,000
    python benchmarks/bench_batches_memory.py --big         # adds 40,000,000
    python benchmarks/bench_batches_memory.py --n 4000000 --against ../old-checkout

For each size a parquet manifest of long-tailed lengths (``common.long_tailed_lengths``:
lognormal, median ~1.5k tokens, capped at 8192; column ``length``) is written to a
temporary folder, then two fresh processes run one after the other:

- the floor: ``pyarrow.parquet.read_table`` of the length column, held as a numpy array
  (the least any command over this manifest holds);
- ``dflash-diag batches MANIFEST --epochs 6`` (sorted-greedy, the default schedule:
  token budget 16384 padded tokens, one rank), or the schedule given after ``--``.

Each reports its own high-water mark (``VmHWM`` from ``/proc/self/status``, which starts
afresh at exec) and its wall and CPU seconds.  Printed: peak MB, bytes per sample, the
peak and time as ratios of the floor's.  With ``--against CHECKOUT`` the same command
also runs from that checkout (``PYTHONPATH``), for before/after figures in one run.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from common import long_tailed_lengths

HERE = Path(__file__).resolve().parents[1]

# Each child writes its VmHWM (kB) to the file named by its first argument.
_PEAK = """
def _peak(out):
    with open("/proc/self/status") as f:
        kb = next(int(x.split()[1]) for x in f if x.startswith("VmHWM:"))
    with open(out, "w") as f:
        f.write(str(kb))
"""
_FLOOR = (
    _PEAK
    + """
import sys
import pyarrow.parquet as pq
lengths = pq.read_table(sys.argv[2], columns=["length"]).column("length").to_numpy()
assert len(lengths) > 0
_peak(sys.argv[1])
"""
)
_COMMAND = (
    _PEAK
    + """
import runpy, sys
out, sys.argv = sys.argv[1], ["dflash-diag", *sys.argv[2:]]
try:
    runpy.run_module("dflash_diag", run_name="__main__")
finally:
    _peak(out)
"""
)


def write_manifest(path: Path, n: int) -> None:
    """``n`` long-tailed lengths as a parquet ``length`` column, written in row groups."""
    chunk = 1 << 22
    schema = pa.schema([("length", pa.int64())])
    with pq.ParquetWriter(path, schema) as writer:
        for i, a in enumerate(range(0, n, chunk)):
            part = long_tailed_lengths(min(chunk, n - a), seed=i)
            writer.write_table(pa.table({"length": part}, schema=schema))


def run_child(code: str, args: list[str], checkout: Path) -> dict[str, float]:
    """Run ``python -c code OUT ARGS`` with ``checkout`` first on the path: its peak MB,
    wall and CPU seconds (user + system), and its exit status."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "peak")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", code, out, *args],
            env=env,
            cwd=tmp,  # (not this folder: ``-c`` puts the working folder first on the path)
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"child failed ({done.returncode}): {done.stderr[-600:]}")
        with open(out) as f:
            peak = int(f.read()) / 1024
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"peak_mb": peak, "wall": wall, "cpu": cpu}


def row(label: str, n: int, got: dict[str, float], floor: dict[str, float]) -> str:
    per = got["peak_mb"] * 2**20 / n
    return (
        f"  {label:<12} peak {got['peak_mb']:8.0f} MB {per:6.0f} B/sample "
        f"({got['peak_mb'] / floor['peak_mb']:5.2f}x floor)   "
        f"wall {got['wall']:6.1f} s   cpu {got['cpu']:6.1f} s ({got['cpu'] / floor['cpu']:5.2f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1M and 2M samples")
    parser.add_argument("--big", action="store_true", help="also 40,000,000 samples")
    parser.add_argument("--n", type=int, action="append", help="a size (repeatable)")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--against", type=Path, help="another checkout to run as well")
    parser.add_argument("schedule", nargs="*", help="schedule flags for batches (after --)")
    args = parser.parse_args()
    sizes = args.n or ([1_000_000, 2_000_000] if args.quick else [2_000_000, 10_000_000])
    if args.big:
        sizes.append(40_000_000)
    command = ["batches", "--epochs", str(args.epochs), *args.schedule, "--json"]
    print(f"batches {' '.join(command[1:])}  (peak = VmHWM of the whole process)")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = Path(tmp) / f"manifest-{n}.parquet"
            write_manifest(path, n)
            floor = run_child(_FLOOR, [str(path)], HERE)
            print(f"{n:,} samples")
            print(
                f"  {'floor':<12} peak {floor['peak_mb']:8.0f} MB "
                f"{floor['peak_mb'] * 2**20 / n:6.0f} B/sample"
                f"{'':20}wall {floor['wall']:6.1f} s   cpu {floor['cpu']:6.1f} s"
            )
            argv = [command[0], str(path), *command[1:]]
            print(row("this", n, run_child(_COMMAND, argv, HERE), floor))
            if args.against is not None:
                other = run_child(_COMMAND, argv, args.against.resolve())
                print(row(args.against.name[:12], n, other, floor))
            path.unlink()


if __name__ == "__main__":
    main()
