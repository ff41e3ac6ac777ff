"""What the benchmark scripts share: timing, long-tailed lengths, a child's peak memory."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """``fn(*args, **kwargs)`` and its wall time in seconds."""
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def alternating(repeat: int, *fns: Callable[[], Any]) -> list[tuple[float, Any]]:
    """Best wall time of each function over ``repeat`` rounds that run each once, in
    turn, after one untimed round (imports, caches): a burst of load on the machine hits
    all alike.  With the last result of each."""
    best: list[tuple[float, Any]] = [(float("inf"), None) for _ in fns]
    for fn in fns:
        fn()
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            out, t = timed(fn)
            best[i] = (min(best[i][0], t), out)
    return best


def long_tailed_lengths(n: int, seed: int = 0) -> np.ndarray:
    """Lognormal lengths, median ~1.5k tokens, sigma 0.9, at least 1, capped at 8192."""
    rng = np.random.default_rng(seed)
    return np.minimum(rng.lognormal(np.log(1500), 0.9, n).astype(np.int64) + 1, 8192)


# The child reports its own high-water mark (VmHWM).  Not ru_maxrss: on Linux that
# survives exec, so a child of a big benchmark process would report the parent's size.
_CLI = """
import runpy, sys
out, sys.argv = sys.argv[1], ["dflash-diag", *sys.argv[2:]]
try:
    runpy.run_module("dflash_diag", run_name="__main__")
finally:
    with open("/proc/self/status") as f:
        kb = next(int(x.split()[1]) for x in f if x.startswith("VmHWM:"))
    with open(out, "w") as f:
        f.write(str(kb))
"""


def child_env(checkout: str | os.PathLike[str], cache: str | None) -> dict[str, str]:
    """A child's environment: ``checkout``'s code first on the path; Python's bytecode
    cache kept in the folder ``cache``, or beside the sources with ``""`` (Python's
    default), or as the environment says with None.  A user's installed package has its
    bytecode compiled; a shell with ``PYTHONDONTWRITEBYTECODE`` set would make every run
    compile the package again."""
    env = dict(os.environ, PYTHONPATH=os.fspath(checkout))
    if cache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    if cache:
        env["PYTHONPYCACHEPREFIX"] = cache
    return env


def compile_package(checkout: str | os.PathLike[str], cache: str = "") -> None:
    """Compile ``checkout``'s package into the bytecode cache ``cache`` (``""``: beside
    its sources), as installing a package compiles it: the timed runs then read it, as
    a user's runs do."""
    package = os.path.join(os.fspath(checkout), "dflash_diag")
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", package],
        env=child_env(checkout, cache),
        check=True,
        capture_output=True,
    )


def run_cli(
    args: list[str], checkout: str | os.PathLike[str] | None = None, cache: str | None = None
) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run ``dflash-diag ARGS`` in a fresh process: (result, wall seconds, peak MB).
    ``checkout``: a checkout to run the package from (first on ``PYTHONPATH``; the child
    runs in a scratch folder, as ``-c`` puts the working folder first on the path);
    ``cache``: with it, the child keeps Python's bytecode cache there (:func:`child_env`)."""
    env = None if checkout is None else child_env(checkout, cache)
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "peak")
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", _CLI, report, *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=None if checkout is None else tmp,
        )
        seconds = time.perf_counter() - start
        with open(report) as f:
            peak_mb = int(f.read()) / 1024
    return out, seconds, peak_mb


#: appended to a child's code: it prints its own high-water mark (VmHWM, KB) last
_PEAK = """
with open("/proc/self/status") as _f:
    print(next(int(x.split()[1]) for x in _f if x.startswith("VmHWM:")))
"""


def children_cpu() -> tuple[float, float]:
    """User and system CPU seconds of this process's finished children so far: the
    difference across one child is that child's (system time is mostly page faults)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime, usage.ru_stime


def run_python(code: str, *args: str) -> tuple[list[str], float, float]:
    """Run ``code`` in a fresh Python with ``args``: (its stdout lines but the last,
    wall seconds, peak MB).  Raises SystemExit with its stderr when it fails."""
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code + _PEAK, *args], capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    *lines, kb = out.stdout.split("\n")[:-1]
    return lines, seconds, int(kb) / 1024


def main_over_sizes(doc: str, run: Callable[[int, int], None], sizes: str) -> None:
    """The command line of a benchmark run at several sizes: ``--sizes`` (comma-separated
    samples, default ``sizes``) and ``--repeat`` (timed rounds, best kept)."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--sizes", default=sizes, help="samples, comma-separated")
    parser.add_argument("--repeat", type=int, default=2, help="timed rounds (best kept)")
    args = parser.parse_args()
    for n in (int(x) for x in args.sizes.split(",")):
        run(n, args.repeat)
