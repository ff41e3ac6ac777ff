"""How far a long log's band, fitted on a grid, lies from fitting every point.

    python benchmarks/band_grid_accuracy.py [--sizes 3000,30000,300000] [--against CHECKOUT]

For each size and two series (uniform noise; a decaying curve with normal noise that
grows 2x over the run), ``robust_band`` of the series is made twice: fitting every point
(``grid_from`` huge) and on a grid of 15 points a step (``grid_from = n // 15``, as a
300k-point log is by default).  Printed per band curve (centre, lo, hi): the mean, 99th
percentile and largest deviation of the grid's from the full fit's, in the full band's
half-widths; then the share of a like series' points (another draw) on another side of
the band.  ``--against`` prints the same from another checkout's library (its own
process, ``PYTHONPATH``), for the figures in ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np


def series(n: int, kind: str, rng: np.random.Generator) -> np.ndarray:
    """One draw of the series ``kind`` at ``n`` points."""
    x = np.arange(1.0, n + 1)
    if kind == "uniform":
        return rng.random(n)
    return 2.0 * np.exp(-x / n * 3) + rng.normal(0, 0.05, n) * (1 + x / n)


def measure(n: int, kind: str, seed: int = 3) -> str:
    """The line of one size and series."""
    from dflash_diag.compare import band

    exact = band.local_fit
    rng = np.random.default_rng(seed)
    x, v = np.arange(1.0, n + 1), series(n, kind, rng)
    got = {}
    for name, grid in (("full", 10**9), ("grid", n // 15)):

        def fit(x, v, window, grid_from=None, _grid=grid, **kw):  # noqa: ARG001
            return exact(x, v, window, grid_from=_grid, **kw)

        band.local_fit = fit
        try:
            got[name] = band.robust_band(x, v, 3.0, 21)
        finally:
            band.local_fit = exact
    half = (got["full"][3] - got["full"][2]) / 2
    parts = []
    for i, curve in ((1, "centre"), (2, "lo"), (3, "hi")):
        dev = np.abs(got["grid"][i] - got["full"][i]) / half
        parts.append(f"{curve} {dev.mean():.3f}/{np.quantile(dev, 0.99):.2f}/{dev.max():.2f}")
    like = series(n, kind, rng)
    sides = [np.where(like > b[3], 2, np.where(like < b[2], 3, 1)) for b in got.values()]
    flipped = float(np.mean(sides[0] != sides[1]))
    return f"{n:>9,} {kind:8} " + ", ".join(parts) + f"; other side {flipped:.4%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="3000,30000,300000")
    ap.add_argument("--against", type=Path, help="another checkout to measure as well")
    ap.add_argument("--label", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.against is not None:
        here = Path(__file__).resolve().parents[1]
        for label, checkout in (
            ("against:       ", args.against.resolve()),
            ("this checkout: ", here),
        ):
            env = {**os.environ, "PYTHONPATH": str(checkout)}
            argv = [sys.executable, __file__, "--sizes", args.sizes, "--label", label]
            subprocess.run(argv, env=env, check=True)
        return
    print(f"{args.label}mean/99th percentile/largest deviation in half-widths")
    for n in (int(s) for s in args.sizes.split(",")):
        for kind in ("uniform", "decay"):
            print(args.label + measure(n, kind), flush=True)


if __name__ == "__main__":
    main()
