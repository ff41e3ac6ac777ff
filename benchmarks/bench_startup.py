"""How long ``dflash-diag`` takes to start, against Python's own start-up.

Each case is a whole process, run ``--repeat`` times in interleaved rounds (one untimed
round first, for the disk cache), so a burst of load on a shared machine hits every
case alike.  The figure is the median over the rounds, of wall time and of CPU time
(user + system of the child, from ``wait4``); CPU time is the steadier one when other
jobs share the cores.  The reference is ``python -c pass``, measured in the same run;
each case is printed as a multiple of it.

The cases: ``--help``, ``parse --help``, and ``parse`` of a 10-line and a 1000-line log
(the sample run's first step lines, in a temporary folder): the two sizes show what is
start-up and what grows with the log.  Two floors say what no command run through typer
can avoid: ``import typer`` (the command line; typer's pydantic coercion is not imported
for plain numbers, flags and paths: ``dflash_diag/cli/coercion.py``) and that plus
``import pandas`` (pandas, numpy and pyarrow: the per-step table of ``parse``).
``dflash-diag --help`` is drawn before typer is imported (``dflash_diag/cli/__init__.py``);
the parts say where its time goes and where a command's screen's goes: the help screen's
module (rich's console, tables and panels), then the typer app, then the app with the
seven command modules (their option names and texts).

Python caches the bytecode it compiles (``__pycache__``) and a user's second run reads
it; with ``PYTHONDONTWRITEBYTECODE`` set, every run compiles the package again (about
0.1 s).  The children run with the cache allowed (the untimed round writes it), unless
``--no-bytecode-cache`` keeps what the environment says.

With ``--against CHECKOUT`` the three start-up cases (``--help``, ``parse --help``,
``parse`` of 10 lines) are also run with that checkout's code on ``PYTHONPATH``, in the
same interleaved rounds, their names prefixed ``OLD``.

    python benchmarks/bench_startup.py [--repeat 7] [--no-bytecode-cache] [--against DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_logs" / "run.log"
PY = sys.executable
DIAG = [PY, "-m", "dflash_diag"]
#: What the help screens import, in steps (the module docstring).
IMPORT_SCREEN = "import dflash_diag.cli.helpscreen"
IMPORT_APP = f"{IMPORT_SCREEN}, dflash_diag.cli.group"
IMPORT_COMMANDS = (
    f"import importlib; {IMPORT_APP}; from dflash_diag.cli import COMMANDS; "
    "[importlib.import_module('dflash_diag.cli.' + m) for m in COMMANDS.values()]"
)


def step_lines(n: int) -> str:
    """The first ``n`` step lines (those with ``loss=``) of the sample run's log."""
    lines = [line for line in SAMPLE.read_text().splitlines() if " loss=" in line]
    if len(lines) < n:
        raise SystemExit(f"{SAMPLE} has {len(lines)} step lines, fewer than {n}")
    return "\n".join(lines[:n]) + "\n"


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run ``argv`` to the end, output discarded: (wall seconds, CPU seconds)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        cwd=env.get("PYTHONPATH", ROOT),  # (`-m` puts the working folder first on sys.path)
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {err.strip()[:300]}")
    return wall, usage.ru_utime + usage.ru_stime


def child_env(bytecode_cache: bool) -> dict[str, str]:
    """The environment of every case: the checkout's code whatever is installed, 100
    columns; Python's bytecode cache allowed when ``bytecode_cache``."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="100")
    env.pop("PYTHONDEVMODE", None)
    if bytecode_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def measure(
    cases: dict[str, list[str]],
    repeat: int,
    env: dict[str, str],
    envs: dict[str, dict[str, str]] | None = None,
) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) seconds of each case over ``repeat`` interleaved rounds (a
    case named in ``envs`` runs with that environment instead of ``env``)."""
    envs = envs or {}
    for name, argv in cases.items():
        run_once(argv, envs.get(name, env))
    walls: dict[str, list[float]] = {name: [] for name in cases}
    cpus: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, argv in cases.items():
            wall, cpu = run_once(argv, envs.get(name, env))
            walls[name].append(wall)
            cpus[name].append(cpu)
    return {n: (statistics.median(walls[n]), statistics.median(cpus[n])) for n in cases}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7, help="rounds (median over them)")
    ap.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE as the environment sets it",
    )
    ap.add_argument("--against", type=Path, help="another checkout to time as well")
    args = ap.parse_args()
    env = child_env(bytecode_cache=not args.no_bytecode_cache)
    envs: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        logs = {}
        for n in (10, 1000):
            logs[n] = Path(tmp, f"run_{n}.log")
            logs[n].write_text(step_lines(n))
        cases = {
            "python -c pass (reference)": [PY, "-c", "pass"],
            "floor: import typer": [PY, "-c", "import typer"],
            "floor: + import pandas": [PY, "-c", "import typer, pandas"],
            "part: the help screen's module": [PY, "-c", IMPORT_SCREEN],
            "part: + the typer app": [PY, "-c", IMPORT_APP],
            "part: + the command modules": [PY, "-c", IMPORT_COMMANDS],
            "dflash-diag --help": [*DIAG, "--help"],
            "dflash-diag parse --help": [*DIAG, "parse", "--help"],
            "dflash-diag parse (10 lines)": [*DIAG, "parse", str(logs[10])],
            "dflash-diag parse (1000 lines)": [*DIAG, "parse", str(logs[1000])],
        }
        if args.against is not None:
            old = dict(env, PYTHONPATH=str(args.against.resolve()))
            for name in ("--help", "parse --help", "parse (10 lines)"):
                cases[f"OLD {name}"] = cases[f"dflash-diag {name}"]
                envs[f"OLD {name}"] = old
        figures = measure(cases, args.repeat, env, envs)
    ref_wall, ref_cpu = figures["python -c pass (reference)"]
    cache = "off" if env.get("PYTHONDONTWRITEBYTECODE") else "on"
    print(
        f"median of {args.repeat} rounds; x = multiple of `python -c pass`; bytecode cache {cache}"
    )
    print(f"{'case':<34} {'wall s':>7} {'x':>6}  {'CPU s':>6} {'x':>6}")
    for name, (wall, cpu) in figures.items():
        print(f"{name:<34} {wall:7.3f} {wall / ref_wall:6.1f}  {cpu:6.3f} {cpu / ref_cpu:6.1f}")


if __name__ == "__main__":
    main()
