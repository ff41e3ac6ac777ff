"""How fast is the general (line-by-line) log parser, which reads every log the fast path
does not: JSON lines, HF dict lines, and text whose lines share no one shape?

Generates ``--lines`` W&B-style JSON lines and as many free-text lines in the sample
run's shape, then times (best of ``--repeat`` alternating rounds, after one untimed round):

* ``read_lines`` on the JSON lines, against ``json.loads`` of each line (the reference:
  decoding alone, nothing else);
* ``read_lines`` on the text lines with the fast path off, against the same call with
  the fast path on (the reference: what a log of one line shape costs).

    python benchmarks/bench_general.py [--lines 50000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json

from common import alternating


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import numpy as np

    from dflash_diag.logs.fast import lineshape as fastpath
    from dflash_diag.logs.io import RawLog
    from dflash_diag.logs.text import read_lines

    n = args.lines
    rng = np.random.default_rng(0)
    loss = 4 + rng.random(n)
    records = [
        {
            "_step": i,
            "train/loss": round(float(loss[i]), 4),
            "train/learning_rate": 6e-4,
            "train/grad_norm": 1.25,
            "train/epoch": i / 1000,
            "_runtime": i * 0.5,
            "_timestamp": 1.7e9 + i,
        }
        for i in range(n)
    ]
    jsonl = [json.dumps(r) for r in records]
    text = [
        f"2026-03-02 14:03:{i % 60:02d},{i % 1000:03d} | INFO | dflash.train | epoch=0 "
        f"step={i}/{n} loss={loss[i]:.4f} acc=0.4601 lr=6.00e-04 grad_norm=1.25 "
        f"ntok=60000 tok/s=25.1K"
        for i in range(n)
    ]
    json_raw = RawLog("metrics.jsonl", ("\n".join(jsonl) + "\n").encode())
    text_raw = RawLog("run.log", ("\n".join(text) + "\n").encode())

    old = fastpath.FAST_MIN_LINES
    fastpath.FAST_MIN_LINES = min(old, n // 2)
    try:
        (t_json, _), (t_loads, _), (t_text, _), (t_fast, _) = alternating(
            args.repeat,
            lambda: read_lines(json_raw),
            lambda: [json.loads(x) for x in jsonl],
            lambda: read_lines(text_raw, fast=False),
            lambda: read_lines(text_raw, fast=True),
        )
    finally:
        fastpath.FAST_MIN_LINES = old

    print(f"{n:,} lines of each kind")
    print(f"JSON lines:  read_lines {t_json / n * 1e6:6.1f} us/line; json.loads alone "
          f"{t_loads / n * 1e6:5.1f} us/line: {t_json / t_loads:5.1f}x")  # fmt: skip
    print(f"text lines:  read_lines {t_text / n * 1e6:6.1f} us/line; the fast path "
          f"{t_fast / n * 1e6:5.1f} us/line: {t_text / t_fast:5.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
