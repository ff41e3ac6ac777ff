"""How long ``compare`` takes on two long logs, against parsing them.

    python benchmarks/bench_compare.py [--lines 100000,300000] [--repeat 1] [--logs 2]

For each size, writes two logs in the sample run's line shape (``bench_parse.generate``)
in a temporary folder, then times, best of ``--repeat`` alternating rounds after one
untimed round, ``compare_report`` of the two and the reference measured in the same run:
``read_log`` of both.  The issue's bar is a ratio of at most 2.  Each is timed in wall
seconds and in this process's CPU seconds (``read_log`` may use several threads: its CPU
seconds can exceed its wall seconds); the machine's load average is printed first.

``--logs K`` compares K logs instead of two (the first the run, the others its
baselines; from five baselines on the band is a quantile band); log ``i`` holds the first
``lines - i * lines // 20`` lines, so the baselines end at different steps.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_parse import generate

from dflash_diag.logs import read_log
from dflash_diag.reports.compare import compare_report


def best_times(repeat: int, *fns: Callable[[], Any]) -> list[tuple[float, float]]:
    """Per function, its best wall and best CPU seconds over ``repeat`` rounds that run
    each once, in turn, after one untimed round."""
    best = [(float("inf"), float("inf")) for _ in fns]
    for fn in fns:
        fn()
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            best[i] = (min(best[i][0], wall), min(best[i][1], cpu))
    return best


def run(lines: int, repeat: int, n_logs: int = 2) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        logs = []
        for i in range(n_logs):
            folder = Path(tmp) / f"log{i}"
            folder.mkdir()
            logs.append(str(generate(folder, lines - i * (lines // 20))[0]))
        (t_cmp, c_cmp), (t_parse, c_parse) = best_times(
            repeat,
            lambda: compare_report(logs),
            lambda: [read_log(log) for log in logs],
        )
    print(
        f"{lines:>9,} lines a log, {n_logs} logs: compare {t_cmp:.2f} s, "
        f"parsing them {t_parse:.2f} s, "
        f"ratio {t_cmp / t_parse:.2f}; CPU {c_cmp:.2f} s against {c_parse:.2f} s, "
        f"ratio {c_cmp / c_parse:.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", default="100000,300000", help="sizes, comma-separated")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--logs", type=int, default=2, help="logs to compare (the run first)")
    args = ap.parse_args()
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    for n in (int(x) for x in args.lines.split(",")):
        run(n, args.repeat, args.logs)


if __name__ == "__main__":
    main()
