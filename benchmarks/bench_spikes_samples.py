"""Does ``dflash-diag spikes`` with a replayed composition grow linearly with the samples?

    python benchmarks/bench_spikes_samples.py                  # 10M and 100M samples
    python benchmarks/bench_spikes_samples.py --sizes 1000000,10000000 --steps 20000

For each size, writes (outside the timings) in a temporary folder a manifest of that many
long-tailed lengths (``common.long_tailed_lengths``) with a ``source`` category (chat,
code, math; Arrow dictionary-encoded, so the build itself stays small), and a log of
``--steps`` optimizer steps of the schedule ``bench_spikes`` uses (sorted-greedy, seed 1,
16384 tokens a micro-batch, lengths capped at 8192, 8 ranks). Each line carries the
step's real tokens (``step_token_table``), so the command's replay checks as the run's
schedule; the loss follows the step's tokens, with noise and 20 spikes of +30%.

Then runs, one after the other, whole processes:

- ``dflash-diag spikes LOG --manifest M <the schedule's flags> --json``;
- the read floor: a process that reads the manifest's two columns with pyarrow (the least
  any command over this manifest holds).

Printed per size: the command's CPU seconds (user + system) and peak (``VmHWM``), bytes
of peak a sample, the read floor's, the schedule check's status (``verified``: the
replay's tokens are the log's) and the spikes found (of 20). Then from one size to
the next: the command's CPU growth over the samples' (1.0 is linear) and its peak's.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import children_cpu, long_tailed_lengths, run_cli, run_python

from dflash_diag.data import ScheduleParams
from dflash_diag.schedule.verify import step_token_table

HERE = Path(__file__).resolve().parents[1]
PARAMS = ScheduleParams(
    strategy="sorted-greedy", seed=1, token_budget=16384, max_seq_len=8192, world_size=8
)
FLAGS = ["--seed", "1", "--token-budget", "16384", "--max-seq-len", "8192", "--world-size", "8"]
#: Rows written at once.
CHUNK = 1 << 22

_READ = """
import sys
import pyarrow.parquet as pq
pq.read_table(sys.argv[1], columns=["length", "source"])
"""


def write_inputs(folder: Path, n: int, steps: int) -> tuple[Path, Path]:
    """The manifest and the log (see the module docstring)."""
    rng = np.random.default_rng(0)
    names = pa.array(["chat", "code", "math"])
    schema = pa.schema([("length", pa.int64()), ("source", pa.dictionary(pa.int8(), pa.string()))])
    lengths = np.empty(n, dtype=np.int64)
    manifest = folder / "manifest.parquet"
    with pq.ParquetWriter(manifest, schema) as writer:
        for i, a in enumerate(range(0, n, CHUNK)):
            part = long_tailed_lengths(min(CHUNK, n - a), seed=i)
            lengths[a : a + len(part)] = part
            codes = rng.choice(3, len(part), p=[0.5, 0.3, 0.2]).astype(np.int8)
            source = pa.DictionaryArray.from_arrays(codes, names)
            writer.write_table(pa.table({"length": part, "source": source}, schema=schema))
    total, _ = step_token_table(lengths, PARAMS, steps)
    del lengths
    if len(total) < steps:
        raise SystemExit(f"{n:,} samples make only {len(total):,} steps an epoch")
    s = np.arange(steps)
    z = np.log(total) - np.log(total).mean()
    loss = 2 + 2 * np.exp(-s / 2000) - 0.01 * z / z.std() + rng.normal(0, 0.02, steps)
    loss[rng.choice(steps, 20, replace=False)] *= 1.3
    grad = 0.5 + 0.05 * rng.standard_normal(steps)
    lr = np.minimum((s + 1) / 2000, 1.0) * 3e-4
    log = folder / "run.log"
    with open(log, "w") as out:
        out.writelines(
            f"step {i}/{steps} | loss {loss[i]:.4f} | lr {lr[i]:.3e} | "
            f"grad_norm {grad[i]:.3f} | ntok {int(total[i])}\n"
            for i in range(steps)
        )
    return manifest, log


def measure(n: int, steps: int) -> dict[str, Any]:
    """The command's and the read floor's CPU and peak at ``n`` samples."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        manifest, log = write_inputs(Path(tmp), n, steps)
        built = time.perf_counter() - start
        args = ["spikes", str(log), "--manifest", str(manifest), *FLAGS, "--json"]
        before = sum(children_cpu())
        done, _, peak = run_cli(args, HERE)
        cpu = sum(children_cpu()) - before
        if done.returncode != 0:
            raise SystemExit(f"dflash-diag spikes failed:\n{done.stderr[-2000:]}")
        before = sum(children_cpu())
        _, _, read_peak = run_python(_READ, str(manifest))
        read_cpu = sum(children_cpu()) - before
    doc = json.loads(done.stdout)
    return {
        "n": n,
        "cpu": cpu,
        "peak": peak,
        "read_cpu": read_cpu,
        "read_peak": read_peak,
        "found": len(doc["spikes"]),
        "check": doc["schedule_check"]["status"],
        "built": built,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000000,100000000", help="samples, comma-separated")
    ap.add_argument("--steps", type=int, default=100_000, help="steps in the log")
    args = ap.parse_args()
    print(f"spikes LOG --manifest M ({args.steps:,} steps, sorted-greedy, 8 ranks) --json")
    print("  CPU s of whole processes (user + system), peak = VmHWM")
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        r = measure(n, args.steps)
        rows.append(r)
        print(
            f"{n:>12,} samples: spikes {r['cpu']:7.1f} s, peak {r['peak']:7.0f} MB"
            f" ({r['peak'] * 2**20 / n:4.0f} B/sample); read floor {r['read_cpu']:5.1f} s,"
            f" {r['read_peak']:6.0f} MB; schedule {r['check']}, spikes found {r['found']} of 20"
            f" (inputs built in {r['built']:.0f} s)"
        )
    for a, b in zip(rows, rows[1:], strict=False):
        grow = b["n"] / a["n"]
        print(
            f"{a['n']:,} -> {b['n']:,} samples ({grow:.0f}x): CPU {b['cpu'] / a['cpu'] / grow:.2f}"
            f" of linear, peak {b['peak'] / a['peak']:.1f}x"
        )


if __name__ == "__main__":
    main()
