"""`dflash-diag samples` end to end on a recorded shuffled run, against reading its recording.

Builds (outside the timings), for N samples x 6 epochs: a manifest of long-tailed lengths
(Parquet), a recording of a shuffling sampler's schedule written through
``BatchRecorder.log`` (each epoch a permutation of the samples cut into steps of 64, one
micro-batch a step, ``steps_per_epoch`` in its settings as ``record_trainer`` writes it),
and a log of one line a step, ``step S | loss L``, whose loss is flat with noise and
+0.25 nats on every step holding one of 20 poison samples.

Then times whole processes, best of ``--repeat`` alternating rounds, each in a fresh
Python (start-up included in both):

- the command: ``dflash-diag samples LOG --composition REC --manifest M --to out.parquet``;
- the reference: a process that reads the same recording and makes its replay
  (``read_recording(REC).to_replay(manifest)``), the least any command on a recording
  does before its first statistic;

and prints both (wall, and the child's user and system CPU: on a VM whose memory the host
hands out on first touch, system time is mostly page faults), their ratios and each one's
peak memory, at each size, with the poison the command named as a check that the timed
run did its work.

With ``--losses`` the recording also holds each sample's own loss (``losses=``, as
``record_trainer(..., sample_losses=True)`` writes them: a per-sample difficulty, noise,
and +1.5 nats for the poison), so the command tests on measured ground.

    python benchmarks/bench_samples_command.py                 # 1M x 6 and 10M x 6
    python benchmarks/bench_samples_command.py --sizes 1000000 # one size
    python benchmarks/bench_samples_command.py --against ../old --stages
    python benchmarks/bench_samples_command.py --sizes 1000000 --losses  # measured ground
        # also the command from another checkout, alternating (its wall time and CPU),
        # and once more with each stage's user and system CPU printed
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

import numpy as np
import pandas as pd
from common import children_cpu, long_tailed_lengths, run_cli, run_python

from dflash_diag.record import BatchRecorder

EPOCHS = 6
PER_STEP = 64
N_POISON = 20

_READ = """
import sys
from dflash_diag.manifest import read_manifest
from dflash_diag.record import read_recording
read_recording(sys.argv[1]).to_replay(read_manifest(sys.argv[2]))
"""


def build(
    folder: Path, n_samples: int, seed: int = 0, losses: bool = False
) -> tuple[Path, Path, Path, np.ndarray]:
    """The manifest, recording and log of a shuffled run (``losses``: the recording holds
    each sample's loss); returns the poison ids too."""
    rng = np.random.default_rng(seed)
    # (drawn only with losses: without, the run is the one the earlier figures are of)
    hard = rng.normal(2.0, 0.3, n_samples).astype(np.float32) if losses else None
    lengths = long_tailed_lengths(n_samples, seed)
    manifest = folder / "manifest.parquet"
    pd.DataFrame({"length": lengths}).to_parquet(manifest, index=False)
    poison = rng.choice(n_samples, N_POISON, replace=False)
    bad = np.zeros(n_samples, dtype=bool)
    bad[poison] = True
    per_epoch = n_samples // PER_STEP
    rec_path = folder / "train.batches"
    log = folder / "train.log"
    settings = {"steps_per_epoch": per_epoch, "first_step": 1, "seed": seed}
    step = 0
    with (
        BatchRecorder(rec_path, rank=0, world_size=1, settings=settings) as rec,
        open(log, "w") as out,
    ):
        for _ in range(EPOCHS):
            order = rng.permutation(n_samples)[: per_epoch * PER_STEP]
            batches = order.reshape(per_epoch, PER_STEP)
            loss = 2.0 + 0.02 * rng.standard_normal(per_epoch) + 0.25 * bad[batches].any(1)
            lines = []
            own = None
            if hard is not None:
                own = hard[batches] + rng.normal(0.0, 0.2, batches.shape).astype(np.float32)
                own += np.float32(1.5) * bad[batches]
            for b in range(per_epoch):
                step += 1
                ids = batches[b]
                rec.log(step, ids, lengths[ids], losses=None if own is None else own[b])
                lines.append(f"step {step} | loss {loss[b]:.5f}\n")
            out.writelines(lines)
    return manifest, rec_path, log, poison


def read_reference(rec: Path, manifest: Path) -> tuple[float, float]:
    """Wall seconds and peak MB of a process that reads the recording and replays it."""
    _, seconds, peak = run_python(_READ, str(rec), str(manifest))
    return seconds, peak


def with_cpu(fn: Callable[[], tuple[float, float]]) -> tuple[float, float, float, float]:
    """``fn()``'s (wall seconds, peak MB), and its child's user and system CPU seconds."""
    user, system = children_cpu()
    seconds, peak = fn()
    user2, system2 = children_cpu()
    return seconds, peak, user2 - user, system2 - system


#: the command in a child that times its stages (user and system CPU from ``getrusage``
#: around each function, nested ones inside their callers), printed as ``stage user sys``
_STAGES = """
import functools, importlib, resource, runpy, sys
STAGES = [
    ("dflash_diag.composition.recorded", "RecordedSource.load", "read the recording, replay"),
    ("dflash_diag.spikes.detect", "detect_spikes", "detect"),
    ("dflash_diag.spikes.attribute", "samples_only", "the points' fit and the test"),
    ("dflash_diag.spikes.attribute", "fit_points", "  the points' fit"),
    ("dflash_diag.spikes.attribute", "find_samples", "  the per-sample test"),
    ("dflash_diag.reports.samples", "sample_table", "the table"),
    ("dflash_diag.outpath", "write_table", "its file"),
]
def wrap(module, attr, label):
    owner = importlib.import_module(module)
    *path, name = attr.split(".")
    for part in path:
        owner = getattr(owner, part)
    fn = getattr(owner, name)
    @functools.wraps(fn)
    def timed(*args, **kwargs):
        a = resource.getrusage(resource.RUSAGE_SELF)
        try:
            return fn(*args, **kwargs)
        finally:
            b = resource.getrusage(resource.RUSAGE_SELF)
            print(label, b.ru_utime - a.ru_utime, b.ru_stime - a.ru_stime, file=sys.stderr)
    setattr(owner, name, timed)
for stage in STAGES:
    wrap(*stage)
sys.argv = ["dflash-diag", *sys.argv[1:]]
try:
    runpy.run_module("dflash_diag", run_name="__main__")
finally:
    u = resource.getrusage(resource.RUSAGE_SELF)
    print("the whole process", u.ru_utime, u.ru_stime, file=sys.stderr)
"""


def stages(args: list[str]) -> None:
    """The command once more, its stages' user and system CPU seconds printed."""
    done = subprocess.run([sys.executable, "-c", _STAGES, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    summed: dict[str, tuple[float, float]] = {}  # (a stage called twice: its sum)
    for line in done.stderr.splitlines():
        label, user, system = line.rsplit(" ", 2)
        u, s = summed.get(label, (0.0, 0.0))
        summed[label] = (u + float(user), s + float(system))
    print("  stage                           user s   system s")
    for label, (user_s, system_s) in summed.items():
        print(f"  {label:<30} {user_s:7.2f}   {system_s:7.2f}")


def run(
    n_samples: int,
    repeat: int,
    against: Path | None = None,
    staged: bool = False,
    losses: bool = False,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        start = time.perf_counter()
        manifest, rec, log, poison = build(folder, n_samples, losses=losses)
        built = time.perf_counter() - start
        table = folder / "samples.parquet"
        args = ["samples", str(log), "--composition", str(rec), "--manifest", str(manifest)]
        args += ["--to", str(table)]

        def command(checkout: Path | None = None) -> tuple[float, float]:
            done, seconds, peak = run_cli(args, checkout)
            if done.returncode != 0:
                raise SystemExit(done.stderr)
            return seconds, peak

        cmd: list[tuple[float, float, float, float]] = []
        ref: list[tuple[float, float, float, float]] = []
        other: list[tuple[float, float, float, float]] = []
        for _ in range(repeat):  # (alternating: a burst of load hits all alike)
            cmd.append(with_cpu(command))
            ref.append(with_cpu(lambda: read_reference(rec, manifest)))
            if against is not None:
                other.append(with_cpu(lambda: command(against)))
        ranked = pd.read_parquet(table, columns=["sample_id", "named", "ground"])
        named = set(ranked.loc[ranked["named"], "sample_id"].tolist())
        ground = ", ".join(sorted(set(ranked["ground"].astype(str))))
        size = os.path.getsize(rec) / 2**20
        c, r = min(cmd), min(ref)
        print(
            f"{n_samples:>11,} samples x {EPOCHS} ({size:,.0f} MB recording, built in "
            f"{built:.0f} s): samples {c[0]:.2f} s ({c[2]:.1f} s user + {c[3]:.1f} s system "
            f"CPU), {c[1]:,.0f} MB peak; reading the recording {r[0]:.2f} s ({r[2]:.1f} + "
            f"{r[3]:.1f} s), {r[1]:,.0f} MB; ratio {c[0] / r[0]:.2f}x wall, "
            f"{(c[2] + c[3]) / (r[2] + r[3]):.2f}x CPU, {c[2] / r[2]:.2f}x user CPU; "
            f"poison named {len(named & set(poison.tolist()))} of {N_POISON}, "
            f"others named {len(named - set(poison.tolist()))} ({ground} ground)"
        )
        if other:
            o = min(other)
            print(
                f"  {against}: {o[0]:.2f} s ({o[2]:.1f} s user + {o[3]:.1f} s system), "
                f"{o[1]:,.0f} MB peak: this checkout takes {c[0] / o[0]:.2f}x its wall time"
            )
        if staged:
            stages(args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000", help="samples, comma-separated")
    parser.add_argument("--repeat", type=int, default=2, help="timed rounds (best kept)")
    parser.add_argument("--against", type=Path, help="another checkout, run alternating")
    parser.add_argument("--stages", action="store_true", help="print each stage's CPU")
    parser.add_argument("--losses", action="store_true", help="record per-sample losses")
    args = parser.parse_args()
    against = None if args.against is None else args.against.resolve()
    for n in (int(x) for x in args.sizes.split(",")):
        run(n, args.repeat, against, args.stages, args.losses)


if __name__ == "__main__":
    main()
