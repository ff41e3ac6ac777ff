"""How long the README's commands take on the bundled sample, each in a fresh process.

A user runs ``dflash-diag`` once per question, so start-up counts: importing numpy,
pandas, pyarrow and the parts of scipy a command needs is part of every figure.  The
reference, measured in the same run, is a process that only imports numpy, pandas and
pyarrow (the floor any command pays).  Each command runs in turn with the reference,
best of ``--repeat`` rounds after one untimed round.  Last, what importing scipy.spatial
(the neighbour search) with scipy.special, or with scipy.stats, adds to the reference.

``--long N`` also writes two N-line logs in Megatron-LM's shape (a baseline and a run,
other noise) to a temporary folder and times ``parse``, ``spikes`` and ``compare`` on
them, the same way: what a long pretraining log costs.

    python benchmarks/bench_commands.py [--repeat 5] [--long 300000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from common import alternating

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "spikes sample_logs/run.log": ["spikes", "sample_logs/run.log"],
    "batches sample_logs/manifest.parquet": ["batches", "sample_logs/manifest.parquet"],
    "compare v1.log run.log --at 349": [
        "compare",
        "sample_logs/v1.log",
        "sample_logs/run.log",
        "--at",
        "349",
    ],
    "parse sample_logs/run.log": ["parse", "sample_logs/run.log"],
    "--help": ["--help"],
}
REFERENCE = [sys.executable, "-c", "import numpy, pandas, pyarrow"]


def run(argv: list[str]) -> None:
    subprocess.run(argv, cwd=ROOT, capture_output=True, check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--long", type=int, default=0, help="also time N-line Megatron logs")
    args = ap.parse_args()
    prefix = [sys.executable, "-m", "dflash_diag"]
    print(f"{'command':<40} {'seconds':>8}  {'x imports':>9}")
    commands = dict(COMMANDS)
    tmp = tempfile.TemporaryDirectory()
    if args.long:
        from bench_formats import shapes

        logs = []
        for seed, name in ((1, "baseline.log"), (2, "run.log")):
            path = Path(tmp.name) / name
            path.write_text("\n".join(shapes(args.long, seed, {"megatron"})["megatron"]) + "\n")
            logs.append(str(path))
        n = f"{args.long // 1000}K"
        commands[f"parse (Megatron, {n} lines)"] = ["parse", logs[1]]
        commands[f"spikes (Megatron, {n} lines)"] = ["spikes", logs[1]]
        commands[f"compare (Megatron, 2 x {n} lines)"] = ["compare", *logs]
    for name, argv in commands.items():
        (t_ref, _), (t_cmd, _) = alternating(
            args.repeat, lambda: run(REFERENCE), lambda a=argv: run([*prefix, *a])
        )
        print(f"{name:<40} {t_cmd:8.2f}  {t_cmd / t_ref:8.1f}x")
    tmp.cleanup()
    print(f"{'reference: import numpy, pandas, pyarrow':<40} {t_ref:8.2f}")
    # what the statistics cost to import on top (stattests uses scipy.special only)
    for extra in ("scipy.special", "scipy.stats"):
        argv = [sys.executable, "-c", f"import numpy, pandas, pyarrow, scipy.spatial, {extra}"]
        (t_ref, _), (t_more, _) = alternating(
            args.repeat, lambda: run(REFERENCE), lambda a=argv: run(a)
        )
        print(f"{'  + scipy.spatial + ' + extra:<40} {t_more - t_ref:+8.2f}")


if __name__ == "__main__":
    main()
