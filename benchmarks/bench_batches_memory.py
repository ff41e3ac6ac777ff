"""Peak memory and time of the whole `dflash-diag batches` process, against its floors.

    python benchmarks/bench_batches_memory.py               # 2,000,000 and 10,000,000 samples
    python benchmarks/bench_batches_memory.py --quick       # 1,000,000 and 2,000,000
    python benchmarks/bench_batches_memory.py --big         # 10,000,000 and 100,000,000
    python benchmarks/bench_batches_memory.py --n 4000000 --against ../old-checkout
    python benchmarks/bench_batches_memory.py -- --strategy bucketed   # another schedule
    python benchmarks/bench_batches_memory.py --big -- --export schedule.parquet
    python benchmarks/bench_batches_memory.py --big --with-log 1000   # and --log LOG

For each size a parquet manifest of long-tailed lengths (``common.long_tailed_lengths``:
lognormal, median ~1.5k tokens, capped at 8192; column ``length``) is written to a
temporary folder, then fresh processes run one after the other:

- ``dflash-diag batches MANIFEST --epochs 6 --json`` (sorted-greedy, the default
  schedule: token budget 16384 padded tokens, one rank), or the schedule given after
  ``--``.  It also writes down the size of every shuffle the replay reproduces
  (``PythonShuffler.permutation``: ``random.shuffle`` of ``list(range(n))``);
- the floor: ``pyarrow.parquet.read_table`` of the length column held as a numpy array,
  then those same ``random.shuffle`` calls, made by ``random.shuffle`` itself on one
  ``random.Random(seed)`` (what any exact replay of a Python-shuffled schedule must at
  least do);
- the read floor: the read alone (the least any command over this manifest holds).

Each reports its own high-water mark (``VmHWM`` from ``/proc/self/status``, which starts
afresh at exec) and its wall and CPU seconds.  Printed: peak MB, bytes per sample, the
peak and CPU time as ratios of the floor's.  With ``--against CHECKOUT`` the same command
also runs from that checkout (``PYTHONPATH``), for before/after figures in one run.

``--with-log STEPS`` also writes a log of the default schedule's first STEPS steps
(``step S | loss 2.0 | ntok T``, T its real tokens: ``step_token_table``, made before
the timings) and passes ``--log`` to the command, which then checks its replay against
it (the JSON's ``tokens_match`` is printed: 1.0 when the check saw the same schedule).
``--export FILE`` after ``--`` is written in the child's own temporary folder.

Every child runs under an address-space limit (``--as-gb``, default 14: a miss fails
instead of swapping the machine), and a size of 40M or more runs only when the bytes a
sample of the largest size run before it put its peak under ``--limit-gb`` (default 12).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
import random, sys
import pyarrow.parquet as pq
lengths = pq.read_table(sys.argv[2], columns=["length"]).column("length").to_numpy()
assert len(lengths) > 0
r = random.Random(int(sys.argv[3]))
for n in (int(x) for x in sys.argv[4:]):
    order = list(range(n))
    r.shuffle(order)
    del order
_peak(sys.argv[1])
"""
)
# The command, with the size of each shuffle the replay reproduces written to OUT.sizes.
_COMMAND = (
    _PEAK
    + """
import runpy, sys
from dflash_diag.schedule import rng
out, sys.argv = sys.argv[1], ["dflash-diag", *sys.argv[2:]]
sizes, permutation = [], rng.PythonShuffler.permutation
def counted(self, n):
    sizes.append(n)
    return permutation(self, n)
rng.PythonShuffler.permutation = counted
try:
    runpy.run_module("dflash_diag", run_name="__main__")
finally:
    _peak(out)
    with open(out + ".sizes", "w") as f:
        f.write(" ".join(map(str, sizes)))
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


def write_log(path: Path, manifest: Path, epochs: int, steps: int) -> None:
    """A log of the default schedule's first ``steps`` steps, one line a step with its
    real tokens (what ``batches --log`` checks the replay against)."""
    from dflash_diag.data import ScheduleParams
    from dflash_diag.manifest import read_manifest
    from dflash_diag.schedule.verify import step_token_table

    total, _ = step_token_table(read_manifest(manifest), ScheduleParams(epochs=epochs), steps)
    with open(path, "w") as out:
        out.writelines(f"step {s} | loss 2.0 | ntok {t}\n" for s, t in enumerate(total.tolist()))


def run_child(code: str, args: list[str], checkout: Path, limit_gb: float) -> dict[str, Any]:
    """Run ``python -c code OUT ARGS`` with ``checkout`` first on the path, under an
    address-space limit of ``limit_gb``: its peak MB, wall and CPU seconds (user +
    system) and the shuffle sizes it wrote, if any."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    cap = int(limit_gb * 2**30)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

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
            preexec_fn=limit,
        )
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"child failed ({done.returncode}): {done.stderr[-600:]}")
        match = re.search(r'"tokens_match": ([0-9.eE+-]+|NaN)', done.stdout)
        with open(out) as f:
            peak = int(f.read()) / 1024
        sizes = Path(out + ".sizes").read_text().split() if Path(out + ".sizes").exists() else []
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    got = {"peak_mb": peak, "wall": wall, "cpu": cpu, "sizes": sizes}
    return got | ({"tokens_match": match.group(1)} if match else {})


def row(label: str, n: int, got: dict[str, Any], floor: dict[str, Any] | None) -> str:
    """One printed line: peak, bytes a sample, times, and ratios to ``floor``."""
    per = got["peak_mb"] * 2**20 / n
    peak = f"({got['peak_mb'] / floor['peak_mb']:5.2f}x floor)" if floor else " " * 15
    cpu = f"({got['cpu'] / floor['cpu']:5.2f}x floor)" if floor else ""
    checked = f"   tokens_match {got['tokens_match']}" if "tokens_match" in got else ""
    return (
        f"  {label:<12} peak {got['peak_mb']:8.0f} MB {per:6.0f} B/sample {peak}   "
        f"wall {got['wall']:6.1f} s   cpu {got['cpu']:6.1f} s {cpu}{checked}"
    )


def seed_of(schedule: list[str]) -> str:
    """The ``--seed`` among the schedule flags (0, the default, without one)."""
    for i, flag in enumerate(schedule):
        if flag == "--seed" and i + 1 < len(schedule):
            return schedule[i + 1]
        if flag.startswith("--seed="):
            return flag.split("=", 1)[1]
    return "0"


def projected_gb(n: int, runs: dict[int, float]) -> float | None:
    """The peak (GB) at ``n`` samples from the bytes a sample of the largest size run
    (None before any run)."""
    if not runs:
        return None
    largest = max(runs)
    return runs[largest] * 2**20 / largest * n / 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1M and 2M samples")
    parser.add_argument("--big", action="store_true", help="10M and 100M samples")
    parser.add_argument("--n", type=int, action="append", help="a size (repeatable)")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--against", type=Path, help="another checkout to run as well")
    parser.add_argument("--as-gb", type=float, default=14.0, help="address-space limit")
    parser.add_argument("--limit-gb", type=float, default=12.0, help="projected peak cap")
    parser.add_argument("--with-log", type=int, metavar="STEPS", help="also --log a log")
    parser.add_argument("schedule", nargs="*", help="schedule flags for batches (after --)")
    args = parser.parse_args()
    sizes = args.n or ([1_000_000, 2_000_000] if args.quick else [2_000_000, 10_000_000])
    if args.big and not args.n:
        sizes = [10_000_000, 100_000_000]
    command = ["batches", "--epochs", str(args.epochs), *args.schedule, "--json"]
    logged = f" --log LOG ({args.with_log} steps)" if args.with_log else ""
    print(f"batches {' '.join(command[1:])}{logged}  (peak = VmHWM of the whole process)")
    runs: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sorted(sizes):
            guess = projected_gb(n, runs)
            if n >= 40_000_000 and (guess is None or guess > args.limit_gb):
                print(f"{n:,} samples: not run (projected {guess or float('nan'):.1f} GB)")
                continue
            path = Path(tmp) / f"manifest-{n}.parquet"
            write_manifest(path, n)
            print(f"{n:,} samples")
            argv = [command[0], str(path), *command[1:]]
            if args.with_log:
                log = Path(tmp) / f"run-{n}.log"
                write_log(log, path, args.epochs, args.with_log)
                argv += ["--log", str(log)]
            mine = run_child(_COMMAND, argv, HERE, args.as_gb)
            runs[n] = mine["peak_mb"]
            floor_args = [str(path), seed_of(args.schedule), *mine["sizes"]]
            floor = run_child(_FLOOR, floor_args, HERE, args.as_gb)
            read = run_child(_FLOOR, floor_args[:2], HERE, args.as_gb)
            shuffled = sum(int(x) for x in mine["sizes"])
            print(f"  floor: read, then {len(mine['sizes'])} random.shuffle of {shuffled:,}")
            print(row("floor", n, floor, None))
            print(row("read floor", n, read, None))
            print(row("this", n, mine, floor))
            if args.against is not None:
                other = run_child(_COMMAND, argv, args.against.resolve(), args.as_gb)
                print(row(args.against.name[:12], n, other, floor))
            path.unlink()


if __name__ == "__main__":
    main()
