"""How often naming samples from the loss curve alone names clean ones, and how many poison
samples it finds: simulated shuffled runs whose truth is known.

A run is ``--epochs`` passes over ``--samples`` samples in batches of 8, a new permutation
each epoch (a shuffling sampler); each step's metric is standard normal noise plus 4 per
poison sample in its batch (``--poison`` of them), and its z the robust z of the steps.
Every sample is tested with one ordinary appearance allowed (``allow_low=1``) and named at
a false-discovery rate of 5% (``name_culprits``).  Over ``--seeds`` seeds it prints the
mean share of the named that are clean (the false-discovery proportion), the mean share of
the poison named (recall), and the most clean samples named in one run.

With ``--against CHECKOUT`` the same runs are also scored with that checkout's library, in
a process of its own (``PYTHONPATH``), and both lines are printed.

    python benchmarks/samples_false_names.py [--seeds 40] [--against ../old]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parents[1]
BATCH = 8


def run(seed: int, n_samples: int, epochs: int, n_poison: int) -> tuple[float, float, int]:
    """(false share of the named, share of the poison named, clean samples named)."""
    from dflash_diag.samples import Membership, SampleOptions, name_culprits, sample_evidence

    rng = np.random.default_rng(seed)
    per_epoch = n_samples // BATCH
    steps = np.concatenate(
        [rng.permutation(n_samples)[: per_epoch * BATCH].reshape(-1, BATCH) for _ in range(epochs)]
    )
    poison = rng.choice(n_samples, n_poison, replace=False)
    x = rng.standard_normal(len(steps)) + 4.0 * np.isin(steps, poison).sum(axis=1)
    med = np.median(x)
    z = (x - med) / (1.4826 * np.median(np.abs(x - med)))
    point = np.repeat(np.arange(len(steps)), BATCH)
    membership = Membership.from_entries(
        point, steps.ravel(), n_samples=n_samples, n_points=len(steps)
    )
    evidence = sample_evidence(membership, z, options=SampleOptions(allow_low=1))
    named = {m for members in name_culprits(evidence)["members"] for m in members}
    clean = named - set(poison.tolist())
    return len(clean) / max(len(named), 1), len(named & set(poison.tolist())) / n_poison, len(clean)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--poison", type=int, default=8)
    ap.add_argument("--against", type=Path, help="another checkout to score as well")
    ap.add_argument("--label", default="this checkout", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.against is not None:
        for checkout, label in ((args.against.resolve(), "against"), (HERE, "this checkout")):
            argv = [sys.executable, __file__, "--label", label]
            argv += ["--seeds", str(args.seeds), "--samples", str(args.samples)]
            argv += ["--epochs", str(args.epochs), "--poison", str(args.poison)]
            env = {**os.environ, "PYTHONPATH": str(checkout)}
            subprocess.run(argv, env=env, check=True)
        return
    rows = [run(s, args.samples, args.epochs, args.poison) for s in range(args.seeds)]
    false, recall, clean = (np.array(c) for c in zip(*rows, strict=True))
    print(
        f"{args.label:<14} {args.seeds} runs of {args.samples} samples x {args.epochs} epochs, "
        f"{args.poison} poison: false share {false.mean():.3f}, recall {recall.mean():.3f}, "
        f"most clean named in a run {int(clean.max())}"
    )


if __name__ == "__main__":
    main()
