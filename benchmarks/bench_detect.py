"""CPU seconds of the detection side of `dflash-diag spikes`/`samples`, this checkout
against another one, on the same inputs.

    python benchmarks/bench_detect.py OTHER_CHECKOUT [--sizes 93750,937500] [--repeat 3]

Builds (outside the timings) a printed loss curve of ``n`` points (a falling trend,
1% noise, four decimals, a few spikes), five batch regressors and a mean length with
some 80,000 distinct values per million points.  Then times, each in a fresh Python
with the checkout on ``PYTHONPATH`` (``time.process_time``: CPU seconds of every
thread), alternating the two checkouts round by round and keeping each one's best:
``trend_baseline`` trailing and centred, ``detect_spikes`` (robust), ``detrend``,
``fit_model`` and ``neighbour_values``.  Prints both figures and their ratio
(other / this) per function and size, and whether the two results are the same bytes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parents[1]
FUNCTIONS = ("trend_trailing", "trend_centred", "detect_spikes", "detrend", "fit_model")
FUNCTIONS += ("neighbour_values",)

# The child: loads the inputs, runs one function once, prints its CPU seconds and a
# digest of its result.
CHILD = """
import hashlib, pickle, sys, time
import numpy as np
import pandas as pd
import scipy.spatial, scipy.special  # (imported inside the functions: not timed)
from dflash_diag.spikes.correlate import detrend
from dflash_diag.spikes.detect import detect_spikes
from dflash_diag.spikes.model import fit_model
from dflash_diag.spikes.neighbours import neighbour_values
from dflash_diag.spikes.windows import trend_baseline

name, path = sys.argv[1], sys.argv[2]
d = np.load(path)
x = d["loss"]
table = pd.DataFrame({"step": np.arange(x.size), "loss": x})
names = ("log_mean_len", "log_mean_len_sq", "len_cv", "log_n_samples", "padding_eff")
calls = {
    "trend_trailing": lambda: trend_baseline(x, 50, False),
    "trend_centred": lambda: trend_baseline(x, 50, True),
    "detect_spikes": lambda: detect_spikes(table),
    "detrend": lambda: detrend(x, 50),
    "fit_model": lambda: fit_model(d["design"], names, d["residual"], d["quiet"]),
    "neighbour_values": lambda: neighbour_values(d["length"], d["residual"], d["groups"]),
}
start = time.process_time()
out = calls[name]()
seconds = time.process_time() - start
if name == "detect_spikes":
    out = (out.baseline, out.z, out.scale, out.flagged, out.critical, out.events)
print(seconds)
print(hashlib.sha256(pickle.dumps(out)).hexdigest())
"""


def build(n: int, path: Path) -> None:
    """The inputs of every function, for ``n`` points, saved to ``path`` (npz)."""
    rng = np.random.default_rng(0)
    s = np.arange(n)
    mean_len = np.round(rng.lognormal(np.log(1500), 0.5, n), int(np.log10(n)) - 4)
    lm = np.log(mean_len)
    loss = 2 + 2 * np.exp(-s / (n / 10)) - 0.05 * (lm - lm.mean()) + rng.normal(0, 0.02, n)
    loss[rng.choice(n, max(1, n // 50_000), replace=False)] *= 1.3
    loss = np.round(loss, 4)
    trend = loss - np.convolve(loss, np.ones(51) / 51, mode="same")
    design = np.column_stack(
        [lm, (lm - lm.mean()) ** 2, rng.uniform(0.1, 1, n), rng.normal(3, 0.2, n), rng.random(n)]
    )
    np.savez(
        path,
        loss=loss,
        design=design,
        residual=trend,
        quiet=np.ones(n, dtype=bool),
        length=lm[:, None],
        groups=np.where(rng.random(n) < 0.1, rng.integers(0, n // 10, n), n + s),
    )


def run(checkout: Path, name: str, inputs: Path) -> tuple[float, str]:
    """CPU seconds of ``name`` in a fresh Python on ``checkout``, and its result's digest."""
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
    out = subprocess.run(  # (run elsewhere: ``-c`` puts the working folder first on the path)
        [sys.executable, "-c", CHILD, name, str(inputs)],
        capture_output=True,
        text=True,
        env=env,
        cwd=inputs.parent,
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    seconds, digest = out.stdout.split()
    return float(seconds), digest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the checkout to compare with")
    parser.add_argument("--sizes", default="93750,937500", help="points, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (best kept)")
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.2f}; CPU seconds, best of {args.repeat}")
    print(f"{'points':>8} {'function':<18} {'other':>8} {'this':>8} {'ratio':>6}  same")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(v) for v in args.sizes.split(",")):
            inputs = Path(tmp) / f"in{n}.npz"
            build(n, inputs)
            for name in FUNCTIONS:
                best = {"other": float("inf"), "this": float("inf")}
                digests = {}
                for _ in range(args.repeat):
                    for side, checkout in (("other", args.other), ("this", HERE)):
                        seconds, digests[side] = run(checkout, name, inputs)
                        best[side] = min(best[side], seconds)
                ratio = best["other"] / best["this"]
                same = "yes" if digests["other"] == digests["this"] else "NO"
                print(
                    f"{n:>8} {name:<18} {best['other']:>8.3f} {best['this']:>8.3f} "
                    f"{ratio:>6.1f}  {same}"
                )


if __name__ == "__main__":
    main()
