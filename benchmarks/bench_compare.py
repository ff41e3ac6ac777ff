"""How long ``compare`` takes on two long logs, against parsing them.

    python benchmarks/bench_compare.py [--lines 100000,300000] [--repeat 1] [--logs 2]

For each size, writes two logs in the sample run's line shape (``bench_parse.generate``)
in a temporary folder, then times, best of ``--repeat`` alternating rounds after one
untimed round, ``compare_report`` of the two and the reference measured in the same run:
``read_log`` of both.  The issue's bar is a ratio of at most 2.  Each is timed in wall
seconds and in this process's CPU seconds (``read_log`` may use several threads: its CPU
seconds can exceed its wall seconds); the machine's load average is printed first.

``--logs K`` compares K logs instead of two (the last the run, the others its
baselines; from five baselines on the band is a quantile band); log ``i`` holds the first
``lines - i * lines // 20`` lines, so the baselines end at different steps.

With ``--against CHECKOUT`` the same logs are also timed with that checkout's library
(``PYTHONPATH``), each a process of its own, ``--rounds`` rounds alternating with this
checkout (a burst of load hits both alike); each prints its line as above.

    python benchmarks/bench_compare.py --lines 300000 --repeat 3 --against ../main
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_parse import generate

HERE = Path(__file__).resolve().parents[1]


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


def write_logs(folder: Path, lines: int, n_logs: int) -> list[str]:
    """The ``n_logs`` logs of ``lines`` lines (the module docstring), in ``folder``."""
    logs = []
    for i in range(n_logs):
        sub = folder / f"log{i}"
        sub.mkdir()
        logs.append(str(generate(sub, lines - i * (lines // 20))[0]))
    return logs


def run(logs: list[str], lines: int, repeat: int, label: str = "") -> None:
    """Times ``compare`` of ``logs`` against parsing them; prints one line."""
    from dflash_diag.logs import read_log
    from dflash_diag.reports.compare import compare_report

    (t_cmp, c_cmp), (t_parse, c_parse) = best_times(
        repeat,
        lambda: compare_report(logs),
        lambda: [read_log(log) for log in logs],
    )
    print(
        f"{label}{lines:>9,} lines a log, {len(logs)} logs: compare {t_cmp:.2f} s, "
        f"parsing them {t_parse:.2f} s, "
        f"ratio {t_cmp / t_parse:.2f}; CPU {c_cmp:.2f} s against {c_parse:.2f} s, "
        f"ratio {c_cmp / c_parse:.2f}",
        flush=True,
    )


def alternate(other: Path, logs: list[str], lines: int, repeat: int, rounds: int) -> None:
    """:func:`run` with ``other``'s library and this one's, each in a process of its own,
    ``rounds`` rounds alternating."""
    for _ in range(rounds):
        for checkout in (other, HERE):
            env = {**os.environ, "PYTHONPATH": str(checkout)}
            argv = [sys.executable, __file__, "--lines", str(lines), "--repeat", str(repeat)]
            label = "this checkout: " if checkout == HERE else "against:       "
            argv += ["--label", label, "--logs-in", *logs]
            subprocess.run(argv, env=env, check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", default="100000,300000", help="sizes, comma-separated")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--logs", type=int, default=2, help="logs to compare (the run last)")
    ap.add_argument("--against", type=Path, help="another checkout to time as well")
    ap.add_argument("--rounds", type=int, default=3, help="rounds with --against")
    ap.add_argument("--logs-in", nargs="+", help=argparse.SUPPRESS)  # (--against's)
    ap.add_argument("--label", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.logs_in:
        run(args.logs_in, int(args.lines), args.repeat, args.label)
        return
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    for n in (int(x) for x in args.lines.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            logs = write_logs(Path(tmp), n, args.logs)
            if args.against is None:
                run(logs, n, args.repeat)
            else:
                alternate(args.against.resolve(), logs, n, args.repeat, args.rounds)
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
