"""Do two checkouts print the same thing?  The check behind a refactor that must not change
behaviour.

    python benchmarks/same_outputs.py OLD_CHECKOUT [NEW_CHECKOUT]   # default NEW: this one

Runs each command below in both checkouts (``python -m dflash_diag`` with the checkout on
``PYTHONPATH``, 80 columns) on the bundled samples and ``tests/data``, and compares stdout,
stderr and the exit status byte for byte.  In ``--html`` pages matplotlib's SVG ids and the
PNG bytes are replaced first: they differ between two runs of the same checkout.  Prints
one line per difference and the count of outputs that are the same.
"""

from __future__ import annotations

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


def main(old: Path, new: Path) -> int:
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        before, after = outputs(old, Path(a)), outputs(new, Path(b))
    differ = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    for name in differ:
        print(f"differs: {name}")
    print(f"{len(before) - len(differ)} of {len(before)} outputs the same")
    return 1 if differ else 0


if __name__ == "__main__":
    if not 2 <= len(sys.argv) <= 3:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]).resolve(), Path(sys.argv[2] if len(sys.argv) > 2 else HERE)))
