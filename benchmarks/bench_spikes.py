"""How long `dflash-diag spikes` with attribution takes on a 100,000-step log and a
10,000,000-sample manifest, and how much memory it needs.

Builds (outside the timings) a long-tailed manifest with categories and a text log whose
loss follows its batches, with a few injected spikes, in a temporary folder.  Then:

1. runs the whole command in a subprocess (``python -m dflash_diag spikes LOG --manifest
   M ... --json``): wall time and peak resident memory (the child's own ``VmHWM``);
2. runs the library stages in this process, each timed: read_log, read_manifest,
   detect_spikes, replay, check_schedule, attribute_spikes, variance_proxies (which
   replays the bucketed and random strategies for the counterfactual);

and prints the replay's share of the whole, the reference being the command itself.
Stage times are CPU seconds of this process (``time.process_time``: the machine may be
shared), the command's its own user + system time.

With ``--against CHECKOUT`` the command also runs from that checkout (``PYTHONPATH``),
``--repeat`` rounds alternating with this one (a burst of load hits both alike); the
best CPU seconds and the peak of each, and their ratios, are printed after.

Every command runs with Python's bytecode cache beside the sources, each checkout's
package compiled first (``compileall``), as an installed package is: a shell with
``PYTHONDONTWRITEBYTECODE`` set would otherwise make each run compile the package again
(about 0.3 s of CPU), and a checkout with a partial cache be timed unequally.
``--no-bytecode-cache`` keeps what the environment says.

OpenBLAS runs at one thread (``OPENBLAS_NUM_THREADS=1``, set here before numpy is
imported unless the environment already sets it) in this process and in every command
it runs, for both checkouts alike: the figure is CPU seconds, which BLAS threads
spinning on a shared machine inflate, and the product's last digits then do not
depend on the thread count.  The line "OpenBLAS threads" says which value was used.

    python benchmarks/bench_spikes.py            # 100,000 steps, 10,000,000 samples
    python benchmarks/bench_spikes.py --quick    # 10,000 steps, 1,000,000 samples
    python benchmarks/bench_spikes.py --quick --against ../main --repeat 3
"""

from __future__ import annotations

import argparse
import os

# (before numpy is imported, here or in a child: see the module docstring)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from common import children_cpu, compile_package, long_tailed_lengths, run_cli  # noqa: E402

from dflash_diag.data import ScheduleParams  # noqa: E402
from dflash_diag.schedule import replay  # noqa: E402

PARAMS = ScheduleParams(
    strategy="sorted-greedy", seed=1, token_budget=16384, max_seq_len=8192, world_size=8
)
FLAGS = ["--seed", "1", "--token-budget", "16384", "--max-seq-len", "8192", "--world-size", "8"]


def build(folder: Path, n_samples: int, n_steps: int) -> tuple[Path, Path]:
    """A manifest and a log of ``n_steps`` steps whose loss follows the batches."""
    rng = np.random.default_rng(0)
    cats = rng.choice(np.array(["chat", "code", "math"]), n_samples, p=[0.5, 0.3, 0.2])
    lengths = long_tailed_lengths(n_samples)
    manifest = folder / "manifest.parquet"
    pd.DataFrame({"length": lengths, "source": cats}).to_parquet(manifest, index=False)
    steps = replay(lengths, PARAMS, epochs=1).steps.iloc[:n_steps]
    if len(steps) < n_steps:
        raise SystemExit(f"the manifest makes only {len(steps)} steps per epoch")
    lm = np.log(steps["mean_len"].to_numpy())
    s = steps["step"].to_numpy()
    loss = 2 + 2 * np.exp(-s / 2000) - 0.1 * (lm - lm.mean()) / lm.std()
    loss += rng.normal(0, 0.02, s.size)
    loss[rng.choice(s.size, 20, replace=False)] *= 1.3
    grad = 0.5 + 0.05 * rng.standard_normal(s.size)
    lr = np.minimum((s + 1) / 2000, 1.0) * 3e-4
    log = folder / "run.log"
    with open(log, "w") as fh:
        for i in range(s.size):
            fh.write(
                f"step {s[i]}/{n_steps} | loss {loss[i]:.4f} | lr {lr[i]:.3e} | "
                f"grad_norm {grad[i]:.3f} | ntok {int(steps['tokens'].iloc[i])}\n"
            )
    return log, manifest


HERE = Path(__file__).resolve().parents[1]


def cpu_timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """``fn(*args)`` and the CPU seconds this process spent in it."""
    start = time.process_time()
    out = fn(*args)
    return out, time.process_time() - start


def run_from(checkout: Path, args: list[str], cache: str | None) -> tuple[float, float]:
    """``dflash-diag ARGS`` in a fresh process with ``checkout`` first on the path and
    its bytecode in ``cache`` (:func:`common.child_env`): (its CPU seconds, user +
    system; its peak MB, ``VmHWM``)."""
    user, system = children_cpu()
    done, _, peak_mb = run_cli(args, checkout, cache)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-600:])
    user2, system2 = children_cpu()
    return (user2 - user) + (system2 - system), peak_mb


def against(other: Path, args: list[str], repeat: int, cache: str | None) -> None:
    """The command from this checkout and from ``other``, alternating, ``repeat`` rounds:
    best CPU seconds and peak of each, and this one's over the other's."""
    best = {HERE: (float("inf"), 0.0), other: (float("inf"), 0.0)}
    for _ in range(repeat):
        for checkout in (other, HERE):
            cpu, peak = run_from(checkout, args, cache)
            best[checkout] = (min(best[checkout][0], cpu), max(best[checkout][1], peak))
    (cpu_o, peak_o), (cpu_h, peak_h) = best[other], best[HERE]
    print(f"command, {repeat} alternating rounds (best CPU s, user+sys; highest VmHWM):")
    print(f"  {other.name[:16]:<16} cpu {cpu_o:7.2f} s   peak {peak_o:6.0f} MB   1.00x")
    print(f"  {'this checkout':<16} cpu {cpu_h:7.2f} s   peak {peak_h:6.0f} MB   "
          f"{cpu_h / cpu_o:.2f}x cpu, {peak_h / peak_o:.2f}x peak")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 steps, 1,000,000 samples")
    parser.add_argument("--against", type=Path, help="another checkout to run as well")
    parser.add_argument("--repeat", type=int, default=3, help="rounds with --against")
    parser.add_argument(
        "--no-bytecode-cache", action="store_true", help="keep the environment's setting"
    )
    args = parser.parse_args()
    n_samples, n_steps = (1_000_000, 10_000) if args.quick else (10_000_000, 100_000)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cache = None if args.no_bytecode_cache else ""  # (beside the sources)
        for checkout in {HERE, *([args.against.resolve()] if args.against else [])}:
            if cache is not None:
                compile_package(checkout, cache)
        log, manifest = build(folder, n_samples, n_steps)
        command = ["spikes", str(log), "--manifest", str(manifest), *FLAGS, "--json"]
        if args.against is not None:
            against(args.against.resolve(), command, args.repeat, cache)
        t_cmd, peak_mb = run_from(HERE, command, cache)

        from dflash_diag.composition.ground import check_schedule, epochs_to_cover
        from dflash_diag.logs import read_log
        from dflash_diag.manifest import read_manifest
        from dflash_diag.spikes import attribute_spikes, detect_spikes
        from dflash_diag.spikes.variance import variance_proxies

        run, t_log = cpu_timed(read_log, log)
        m, t_man = cpu_timed(read_manifest, manifest)
        d, t_det = cpu_timed(detect_spikes, run.table)
        epochs = epochs_to_cover(m, PARAMS, int(d.steps[-1]))
        rep, t_rep = cpu_timed(replay, m, PARAMS, epochs)
        chk, t_chk = cpu_timed(check_schedule, rep, run.table)
        att, t_att = cpu_timed(attribute_spikes, d, rep, "window", chk)
        var, t_var = cpu_timed(variance_proxies, d, run.table, att, rep, m)

    total = t_log + t_man + t_det + t_rep + t_chk + t_att + t_var
    print(f"log: {n_steps:,} steps; manifest: {n_samples:,} samples; world_size 8")
    print(f"OpenBLAS threads: {os.environ['OPENBLAS_NUM_THREADS']}")
    print(f"spikes found: {len(d.events)}; composition r2_cv {att.model.r2_cv:.2f}")
    print(f"reference  whole command (subprocess, CPU)  {t_cmd:7.2f} s   1.00x")
    print(f"           peak memory of the command       {peak_mb:7.0f} MB")
    rows = [
        ("read_log", t_log),
        ("read_manifest", t_man),
        ("detect_spikes", t_det),
        (f"replay ({epochs} epoch(s), once)", t_rep),
        ("check_schedule (verify_tokens)", t_chk),
        ("attribute_spikes", t_att),
        ("variance_proxies (2 counterfactual replays)", t_var),
        ("sum of the stages in-process", total),
    ]
    for name, t in rows:
        print(f"           {name:<40} {t:7.2f} s   {t / t_cmd:5.2f}x")
    print(f"replay share of the command: {t_rep / t_cmd:.0%} (of the in-process sum: "
          f"{t_rep / total:.0%})")  # fmt: skip


if __name__ == "__main__":
    main()
