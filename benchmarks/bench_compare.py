"""How long ``compare`` takes on two long logs, against parsing them.

    python benchmarks/bench_compare.py [--lines 100000,300000] [--repeat 1]

For each size, writes two logs in the sample run's line shape (``bench_parse.generate``)
in a temporary folder, then times, best of ``--repeat`` alternating rounds after one
untimed round, ``compare_report`` of the two and the reference measured in the same run:
``read_log`` of both.  The issue's bar is a ratio of at most 2.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench_parse import generate
from common import alternating

from dflash_diag.logs import read_log
from dflash_diag.reports.compare import compare_report


def run(lines: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "a", Path(tmp) / "b"
        a.mkdir()
        b.mkdir()
        la, _ = generate(a, lines)
        lb, _ = generate(b, lines)
        (t_cmp, _), (t_parse, _) = alternating(
            repeat,
            lambda: compare_report([str(la), str(lb)]),
            lambda: (read_log(str(la)), read_log(str(lb))),
        )
    print(
        f"{lines:>9,} lines a log: compare {t_cmp:.2f} s, parsing both {t_parse:.2f} s, "
        f"ratio {t_cmp / t_parse:.1f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", default="100000,300000", help="sizes, comma-separated")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    for n in (int(x) for x in args.lines.split(",")):
        run(n, args.repeat)


if __name__ == "__main__":
    main()
