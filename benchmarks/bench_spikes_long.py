"""Does ``dflash-diag spikes`` on a plain log (no manifest) grow linearly with its steps?

    python benchmarks/bench_spikes_long.py [--sizes 1000000,10000000] [--repeat 1]

For each size, writes (outside the timings) a log of that many optimizer steps in a
temporary folder, one ``step=N/T loss= lr= grad_norm=`` line a step: a decaying loss with
noise, a warmup, and a three-step spike every 1/40th of the run.  Then times, best of
``--repeat`` rounds, two whole processes on it:

- ``dflash-diag spikes LOG --json``: detection, the trend baselines, the optimizer and
  lr rules, the verdicts;
- the reference, ``dflash-diag parse LOG --json``: reading the log, which ``spikes``
  does first.

Each is CPU seconds of the child (user + system) and its peak resident memory
(``VmHWM``).  Printed per size: both, their ratio, and ``spikes``' microseconds of CPU
a step; then, from one size to the next, the growth factor: ``spikes``' CPU ratio divided
by the steps' ratio (1.0 is linear; the reference's own factor beside it, since reading
grows linearly too).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
from common import children_cpu, run_cli

#: Lines written at once.
CHUNK = 200_000


def write_log(path: Path, n: int, seed: int = 0) -> int:
    """A log of ``n`` steps (see the module docstring); returns the spikes injected."""
    rng = np.random.default_rng(seed)
    every = max(n // 40, 10)
    with open(path, "w") as f:
        for lo in range(0, n, CHUNK):
            step = np.arange(lo + 1, min(lo + CHUNK, n) + 1)
            loss = 2.0 + 3.0 * np.exp(-5.0 * step / n) + rng.normal(0, 0.03, len(step))
            loss[(step % every) < 3] += 1.5  # (a spike every `every` steps, three long)
            lr = 3e-4 * np.minimum(1.0, step / 2000)
            gn = 1.0 + 0.1 * rng.random(len(step))
            f.write(
                "".join(
                    f"step={s}/{n} loss={x:.4f} lr={r:.3e} grad_norm={g:.3f}\n"
                    for s, x, r, g in zip(step.tolist(), loss, lr, gn, strict=True)
                )
            )
    return n // every


def process(args: list[str]) -> tuple[float, float, str]:
    """CPU seconds and peak MB of ``dflash-diag ARGS`` in a fresh process, and its stdout."""
    before = sum(children_cpu())
    out, _, peak = run_cli(args)
    if out.returncode != 0:
        raise SystemExit(f"dflash-diag {' '.join(args)} failed:\n{out.stderr[-2000:]}")
    return sum(children_cpu()) - before, peak, out.stdout


def measure(n: int, repeat: int) -> dict[str, float]:
    """Best CPU seconds (and the peak of that round) of spikes and of parse on a log of
    ``n`` steps."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "run.log"
        injected = write_log(log, n)
        best = {"spikes": (float("inf"), 0.0), "parse": (float("inf"), 0.0)}
        found = 0
        for _ in range(repeat):
            for name in best:
                cpu, peak, stdout = process([name, str(log), "--json"])
                best[name] = min(best[name], (cpu, peak))
                if name == "spikes":
                    found = len(json.loads(stdout)["spikes"])
    return {
        "n": n,
        "spikes": best["spikes"][0],
        "spikes_mb": best["spikes"][1],
        "parse": best["parse"][0],
        "parse_mb": best["parse"][1],
        "injected": injected,
        "found": found,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000000,10000000", help="steps, comma-separated")
    ap.add_argument("--repeat", type=int, default=1, help="rounds (best kept)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print("spikes on a plain log against parse of it (CPU s of whole processes, peak MB)")
    print(
        f"{'steps':>11} {'spikes':>8} {'peak':>7} {'parse':>7} {'peak':>7} {'ratio':>6}"
        f" {'us/step':>8}  spikes found (injected)"
    )
    rows = []
    for n in sizes:
        r = measure(n, args.repeat)
        rows.append(r)
        print(
            f"{n:>11,} {r['spikes']:7.2f}s {r['spikes_mb']:6.0f} {r['parse']:6.2f}s"
            f" {r['parse_mb']:6.0f} {r['spikes'] / r['parse']:5.1f}x"
            f" {r['spikes'] / n * 1e6:8.2f}  {r['found']} ({r['injected']})"
        )
    for a, b in zip(rows, rows[1:], strict=False):
        steps = b["n"] / a["n"]
        print(
            f"{a['n']:,} -> {b['n']:,} steps ({steps:.0f}x): spikes CPU"
            f" {b['spikes'] / a['spikes'] / steps:.2f} of linear, parse"
            f" {b['parse'] / a['parse'] / steps:.2f}; peak {b['spikes_mb'] / a['spikes_mb']:.1f}x"
        )


if __name__ == "__main__":
    main()
