"""How long `sample_evidence` takes at 1M and 10M samples x 6 epochs (6M and 60M
memberships), against two references measured in the same run: one ``np.argsort``
(stable) of the same entries' sample ids, what grouping the entries by sample would
cost; and ``read_recording`` of the same schedule written as a batch recording (a point
a step, through ``BatchRecorder.log``, outside the timings), what `samples` must do
before any test.

Builds (outside the timings) a shuffled schedule: each epoch a permutation of the
samples cut into points of 64 (a step of 8 ranks x 8 samples), long-tailed token
lengths, a normal z per point with 20 poison samples adding +4 to their points.  Then
times, best of ``--repeat`` alternating rounds, ``sample_evidence`` (tokens and excess
given) and the reference, and prints the ratio at each size, and the poison's ranks as a
check that the timed call did its work.

    python benchmarks/bench_samples.py            # 1M x 6 and 10M x 6
    python benchmarks/bench_samples.py --quick    # 1M x 6 only
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from common import alternating, long_tailed_lengths

from dflash_diag.record import BatchRecorder, read_recording
from dflash_diag.samples import Membership, SampleEvidence, sample_evidence

EPOCHS = 6
PER_POINT = 64
N_POISON = 20


def build(n_samples: int, seed: int = 0) -> tuple[Membership, np.ndarray, np.ndarray]:
    """A shuffled membership, its points' z, and the poison ids."""
    rng = np.random.default_rng(seed)
    samples = np.concatenate([rng.permutation(n_samples) for _ in range(EPOCHS)])
    samples = samples.astype(np.int32)
    n_points = -(-samples.size // PER_POINT)
    offsets = np.minimum(np.arange(n_points + 1, dtype=np.int64) * PER_POINT, samples.size)
    tokens = long_tailed_lengths(n_samples, seed)[samples].astype(np.float64)
    membership = Membership(offsets, samples, n_samples, tokens)
    poison = rng.choice(n_samples, N_POISON, replace=False)
    z = rng.standard_normal(n_points)
    point = np.repeat(np.arange(n_points), membership.counts())
    hit = np.isin(samples, poison)
    np.add.at(z, point[hit], 4.0)
    return membership, z, poison


def poison_ranks(ev: SampleEvidence, poison: np.ndarray) -> list[int]:
    """1-based ranks of the poison by p (then score), best first."""
    t = ev.table.sort_values(["p", "score"], ascending=[True, False], kind="stable")
    where = {int(s): i + 1 for i, s in enumerate(t["sample"].to_numpy()[: 10 * N_POISON])}
    return sorted(where.get(int(s), -1) for s in poison)


def write_recording(membership: Membership, path: Path) -> None:
    """The membership as a recording: point ``p`` is step ``p + 1``, one micro-batch."""
    off, smp = membership.offsets, membership.samples
    tok = membership.tokens.astype(np.int64) if membership.tokens is not None else None
    with BatchRecorder(path, rank=0, world_size=1, settings={"seed": 0}) as rec:
        for p in range(membership.n_points):
            a, b = int(off[p]), int(off[p + 1])
            rec.log(p + 1, smp[a:b], tok[a:b] if tok is not None else np.ones(b - a, int))


def run(n_samples: int, repeat: int) -> None:
    membership, z, poison = build(n_samples)
    excess = 0.02 * z
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.batches"
        write_recording(membership, path)
        (t_ev, ev), (t_ref, _), (t_read, _) = alternating(
            repeat,
            lambda: sample_evidence(membership, z, excess=excess),
            lambda: np.argsort(membership.samples, kind="stable"),
            lambda: read_recording(path),
        )
    named = int((ev.table["q"] <= 0.05).sum())
    print(
        f"{n_samples:>11,} samples x {EPOCHS} = {membership.n_entries:>11,} memberships, "
        f"{membership.n_points:,} points: sample_evidence {t_ev:.2f} s, "
        f"argsort {t_ref:.2f} s (ratio {t_ev / t_ref:.2f}), read_recording {t_read:.2f} s "
        f"(ratio {t_ev / t_read:.2f}); named {named}, poison ranks {poison_ranks(ev, poison)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1M samples only")
    parser.add_argument("--repeat", type=int, default=2, help="timed rounds (best kept)")
    args = parser.parse_args()
    for n in (1_000_000,) if args.quick else (1_000_000, 10_000_000):
        run(n, args.repeat)


if __name__ == "__main__":
    main()
