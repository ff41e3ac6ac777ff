"""`dflash-diag watch` on a log being written: latency, idle CPU, and agreement with `spikes`.

    python benchmarks/bench_watch.py                 # latency and idle CPU, 3 runs
    python benchmarks/bench_watch.py --agreement     # watch against spikes on the sample logs

Latency: this script appends ``sample_logs/run.log`` to a fresh file at ~2,000 lines a second,
pausing 2 s before the lines of steps 254 and 258, while ``watch --json`` follows it in another
process; the latency of a spike is the time from its line's write to its JSON line.  The
reference, measured in the same run, is what answering after the fact costs: ``spikes --json``
on the same 300 steps, start-up included.  Idle CPU: the watcher's CPU seconds (from
``/proc/PID/stat``) over 3 s with nothing written, against its CPU seconds while it read the
300 steps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_logs"
SCHEDULE = [
    "--manifest",
    str(SAMPLE / "manifest.parquet"),
    "--config",
    str(SAMPLE / "dflash-diag.toml"),
]
MARKED = ("254", "258")
LAST = 300


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def step_of(line: str) -> str:
    """The step of one of the sample log's train lines (``step=254/...``), else ''."""
    return line.split("step=")[1].split("/")[0] if "train | epoch=" in line else ""


def write_log(dst: Path, written: dict[str, float]) -> None:
    """Append the sample log up to step LAST, pausing before the marked steps."""
    with open(SAMPLE / "run.log", encoding="utf-8") as src, open(dst, "a", encoding="utf-8") as out:
        for i, line in enumerate(src):
            step = step_of(line)
            if step in MARKED:
                time.sleep(2.0)
            out.write(line)
            out.flush()
            if step in MARKED:
                written[step] = time.time()
            if step == str(LAST):
                return
            if i % 20 == 19:
                time.sleep(0.01)


def one_run() -> tuple[dict[str, float], float, float]:
    """Latency (s) by marked step, CPU s while reading, CPU s over 3 s idle."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "run.log"
        watcher = subprocess.Popen(
            [sys.executable, "-m", "dflash_diag", "watch", str(log), "--json", *SCHEDULE],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp,
        )  # fmt: skip
        seen: dict[str, float] = {}

        def read() -> None:
            for line in watcher.stdout:  # type: ignore[union-attr]
                seen[str(json.loads(line)["step"])] = time.time()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        time.sleep(1.0)  # (the watcher starts and waits for the file)
        written: dict[str, float] = {}
        write_log(log, written)
        deadline = time.time() + 30
        while not all(s in seen for s in MARKED) and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)
        busy = cpu_seconds(watcher.pid)
        time.sleep(3.0)
        idle = cpu_seconds(watcher.pid) - busy
        watcher.terminate()
        watcher.wait(10)
        return {s: seen.get(s, float("nan")) - written[s] for s in MARKED}, busy, idle


def spikes_seconds() -> float:
    """``spikes --json`` on the first LAST steps of the sample log, start-up included."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "run.log"
        with open(SAMPLE / "run.log", encoding="utf-8") as src, open(log, "w") as out:
            for line in src:
                out.write(line)
                if step_of(line) == str(LAST):
                    break
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "dflash_diag", "spikes", str(log), "--json", *SCHEDULE],
            capture_output=True, check=True, cwd=tmp,
        )  # fmt: skip
        return time.perf_counter() - start


def latency(runs: int) -> None:
    print(f"watch on a log being written, {runs} runs (spikes at steps {', '.join(MARKED)})")
    ref = spikes_seconds()
    lat: dict[str, list[float]] = {s: [] for s in MARKED}
    for r in range(runs):
        got, busy, idle = one_run()
        for s in MARKED:
            lat[s].append(got[s])
        print(
            f"  run {r + 1}: latency "
            + ", ".join(f"{s} {got[s]:.2f} s" for s in MARKED)
            + f"; CPU reading {LAST} steps {busy:.2f} s, idle 3 s {idle:.3f} s"
            f" ({idle / busy if busy else float('nan'):.3f}x)"
        )
    for s in MARKED:
        worst = max(lat[s])
        print(
            f"step {s}: median {statistics.median(lat[s]):.2f} s, worst {worst:.2f} s; "
            f"spikes after the fact on {LAST} steps: {ref:.2f} s ({worst / ref:.2f}x)"
        )


def agreement(log: str, until: int, *extra: str) -> None:
    """Steps and verdicts of watch (the whole log, live) against spikes on the finished log."""
    cmd = [sys.executable, "-m", "dflash_diag"]
    w = subprocess.run([*cmd, "watch", log, "--until", str(until), "--json", *extra],
                       capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    live = {d["step"]: d["verdict"] for d in map(json.loads, w.stdout.splitlines())}
    s = subprocess.run([*cmd, "spikes", log, "--json", *extra],
                       capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    done = {d["step"]: d["verdict"] for d in json.loads(s.stdout)["spikes"]}
    both = sorted(set(live) & set(done))
    differ = [k for k in both if live[k] != done[k]]
    print(f"{log}: watch {len(live)} events, spikes {len(done)}; {len(both)} the same step, "
          f"{len(both) - len(differ)} of them with the same verdict")  # fmt: skip
    only_done, only_live = sorted(set(done) - set(live)), sorted(set(live) - set(done))
    print(f"  only spikes: {only_done}; only watch: {only_live}")
    pairs = Counter((done[k], live[k]) for k in differ)
    for (fin, now), n in sorted(pairs.items()):
        print(f"  {n} {fin} on the finished log, {now} live")
    print(f"  verdicts that differ at steps {differ}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--agreement", action="store_true")
    args = ap.parse_args()
    if args.agreement:
        agreement("sample_logs/run.log", 2961)
        agreement("sample_logs/run_bucketed.log", 3709, "--config", "sample_logs/bucketed.toml")
    else:
        latency(args.runs)


if __name__ == "__main__":
    main()
