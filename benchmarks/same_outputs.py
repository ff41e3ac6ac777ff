"""Do two checkouts print the same thing?  The check behind a refactor that must not change
behaviour.

    python benchmarks/same_outputs.py OLD_CHECKOUT [NEW_CHECKOUT] [--rtol R]
    # default NEW: this one

Runs each command below in both checkouts (``python -m dflash_diag`` with the checkout on
``PYTHONPATH``, 80 columns) on the bundled samples and ``tests/data``, and compares stdout,
stderr and the exit status byte for byte.  In ``--html`` pages matplotlib's SVG ids and the
PNG bytes are replaced first: they differ between two runs of the same checkout.  Prints
one line per difference and the count of outputs that are the same.

With ``--rtol R`` an output whose bytes differ is still the same when its stdout is one
JSON document in both, its stderr and exit status are the same bytes, and the two
documents differ only in numbers, each pair within ``R`` of each other relative to the
larger (``|a - b| <= R max(|a|, |b|)``; strings, keys, counts, booleans and nulls equal).
Text outputs and pages still compare byte for byte: a number printed to fewer digits than
the difference reaches is the same text.  The largest relative difference found is
printed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
REAL = ["tests/data/real_run/run.log", "--manifest", "tests/data/real_run/manifest.parquet"]
REAL += ["--strategy", "sorted-greedy", "--seed", "1234", "--token-budget", "16384"]
REAL += ["--max-seq-len", "2048", "--world-size", "1", "--first-step", "1", "--epochs", "2"]
SAMPLE = ["sample_logs/manifest.parquet", "--config", "sample_logs/dflash-diag.toml"]
COMMANDS: dict[str, list[str]] = {
    "spikes": ["spikes", "sample_logs/run.log"],
    "spikes-v": ["spikes", "sample_logs/run.log", "-v"],
    "spikes-json": ["spikes", "sample_logs/run.log", "--json"],
    "spikes-html": ["spikes", "sample_logs/run.log", "--html", "{out}/spikes.html"],
    "bucketed": ["spikes", "sample_logs/run_bucketed.log", "--config", "sample_logs/bucketed.toml"],
    "steps": ["spikes", "sample_logs/run.log", "--steps", "200:300", "-v"],
    "real-run": ["spikes", *REAL, "--json"],
    "batches": ["batches", *SAMPLE, "--compare", "sorted-greedy,bucketed,random", "-v"],
    "batches-json": ["batches", *SAMPLE, "--log", "sample_logs/run.log", "--json"],
    "batches-html": ["batches", *SAMPLE, "--html", "{out}/batches.html"],
    "compare": ["compare", "sample_logs/v1.log", "sample_logs/run.log", "--at", "349"],
    "compare-json": ["compare", "sample_logs/v1.log", "sample_logs/run.log", "--json"],
    "parse": ["parse", "sample_logs/run.log", "--json"],
    "watch": ["watch", "sample_logs/run.log", "--until", "2961", "--json"],
}
COMMANDS |= {
    f"parse-{p.name}": ["parse", str(p.relative_to(HERE)), "--json"]
    for p in sorted((HERE / "tests/data/real_logs").glob("*"))
    if p.suffix != ".md"
}
COMMANDS |= {  # (the Trainer consoles: the console fast path's inputs)
    f"parse-{p.parent.name}-{p.name}": ["parse", str(p.relative_to(HERE)), "--json"]
    for p in [
        *sorted((HERE / "tests/data/trainers").glob("*.log")),
        *sorted((HERE / "tests/data/trainer_runs").glob("*/*.log")),
    ]
}
RANDOM = re.compile(r"""(#|id=")(image|[pm])[0-9a-f]{10}|iVBOR[A-Za-z0-9+/=]+""")


def outputs(checkout: Path, out: Path) -> dict[str, bytes]:
    """Every command's stdout, stderr, exit status and written page, by name."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "COLUMNS": "80", "TERM": "dumb"}
    got: dict[str, bytes] = {}
    for name, args in COMMANDS.items():
        argv = [a.replace("{out}", str(out)) for a in args]
        run = subprocess.run(
            [sys.executable, "-m", "dflash_diag", *argv], cwd=checkout, env=env, capture_output=True
        )
        text = run.stdout.replace(str(out).encode(), b"OUT").replace(str(checkout).encode(), b".")
        got[name] = text + b"\n--stderr--\n" + run.stderr + f"\n--rc {run.returncode}".encode()
        for page in out.glob("*.html"):
            got[f"{name}:{page.name}"] = RANDOM.sub("X", page.read_text()).encode()
            page.unlink()
    return got


def _json_part(output: bytes) -> tuple[object, bytes] | None:
    """An output's stdout as JSON and the rest (stderr, exit status), or None."""
    stdout, sep, rest = output.partition(b"\n--stderr--\n")
    try:
        return json.loads(stdout), rest
    except ValueError:
        return None


def _numbers_apart(a: object, b: object) -> float | None:
    """The largest relative difference between ``a``'s and ``b``'s numbers (JSON values
    of the same shape), or None where anything but a number differs."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return 0.0 if a == b and type(a) is type(b) else None
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if type(a) is not type(b):
            return None
        if a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)):
            return 0.0
        if not (math.isfinite(a) and math.isfinite(b)):
            return None
        return abs(a - b) / max(abs(a), abs(b))
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return None
        parts = [_numbers_apart(a[k], b[k]) for k in a]
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return None
        parts = [_numbers_apart(x, y) for x, y in zip(a, b, strict=True)]
    else:
        return 0.0 if a == b else None
    found = [x for x in parts if x is not None]
    return max(found, default=0.0) if len(found) == len(parts) else None


def main(old: Path, new: Path, rtol: float | None = None) -> int:
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        before, after = outputs(old, Path(a)), outputs(new, Path(b))
    differ = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    within, largest = [], 0.0
    for name in differ if rtol is not None else []:
        one, two = _json_part(before.get(name, b"")), _json_part(after.get(name, b""))
        if one is None or two is None or one[1] != two[1]:
            continue
        apart = _numbers_apart(one[0], two[0])
        if apart is not None and apart <= rtol:
            within.append(name)
            largest = max(largest, apart)
    for name in differ:
        print(f"{'numbers within --rtol' if name in within else 'differs'}: {name}")
    same = len(before) - len(differ)
    if rtol is None:
        print(f"{same} of {len(before)} outputs the same")
    else:
        print(
            f"{same} of {len(before)} outputs the same bytes, {len(within)} more the same"
            f" within --rtol {rtol:g} (largest relative difference {largest:.3g})"
        )
    return 1 if len(differ) > len(within) else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path, help="the checkout before")
    ap.add_argument("new", type=Path, nargs="?", default=HERE, help="the checkout after")
    ap.add_argument("--rtol", type=float, help="JSON numbers this near are the same")
    args = ap.parse_args()
    sys.exit(main(args.old.resolve(), args.new.resolve(), args.rtol))
