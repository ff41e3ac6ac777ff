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
check that the timed call did its work.  Then times once (slower: a robust median per
cell over every entry) the measured ground, ``measured_evidence`` over per-sample losses
(each sample a difficulty, noise per entry, the poison +3 nats), against the same
``read_recording``: at 1M only unless ``--measured-big`` (minutes at 10M).

    python benchmarks/bench_samples.py            # 1M x 6 and 10M x 6
    python benchmarks/bench_samples.py --quick    # 1M x 6 only
    python benchmarks/bench_samples.py --no-measured   # inferred ground only
    python benchmarks/bench_samples.py --measured-big  # measured ground at 10M too
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from common import alternating, long_tailed_lengths, timed

from dflash_diag.record import BatchRecorder, read_recording
from dflash_diag.samples import Membership, SampleEvidence, measured_evidence, sample_evidence

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


def sample_losses(membership: Membership, poison: np.ndarray, seed: int = 1) -> np.ndarray:
    """A loss per entry: a per-sample difficulty, noise, and +3 nats for the poison."""
    rng = np.random.default_rng(seed)
    hard = rng.normal(2.0, 0.3, membership.n_samples)
    loss = hard[membership.samples] + rng.normal(0.0, 0.2, membership.n_entries)
    loss[np.isin(membership.samples, poison)] += 3.0
    return loss


def run(n_samples: int, repeat: int, measured: bool) -> None:
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
    if measured:
        loss = sample_losses(membership, poison)
        mev, t_m = timed(measured_evidence, membership, loss)
        print(
            f"{'':>11} measured ground: measured_evidence {t_m:.2f} s (ratio to "
            f"read_recording {t_m / t_read:.2f}); poison ranks {poison_ranks(mev, poison)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1M samples only")
    parser.add_argument("--repeat", type=int, default=2, help="timed rounds (best kept)")
    parser.add_argument("--no-measured", action="store_true", help="inferred ground only")
    parser.add_argument("--measured-big", action="store_true", help="measured ground at 10M")
    args = parser.parse_args()
    for n in (1_000_000,) if args.quick else (1_000_000, 10_000_000):
        big = n > 1_000_000 and not args.measured_big
        run(n, args.repeat, not (args.no_measured or big))


if __name__ == "__main__":
    main()
