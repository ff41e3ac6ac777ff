"""`dflash-diag watch` on a log being written: latency, idle CPU, and agreement with `spikes`.

    python benchmarks/bench_watch.py                 # latency and idle CPU, 3 runs
    python benchmarks/bench_watch.py --agreement     # watch against spikes on the sample logs
    python benchmarks/bench_watch.py --scale         # CPU per verdict at 3k..100k points
    python benchmarks/bench_watch.py --scale --rounds 5 --sizes 3000,100000

Latency: this script appends ``sample_logs/run.log`` to a fresh file at ~2,000 lines a second,
pausing 2 s before the lines of steps 254 and 258, while ``watch --json`` follows it in another
process; the latency of a spike is the time from its line's write to its JSON line.  The
reference, measured in the same run, is what answering after the fact costs: ``spikes --json``
on the same 300 steps, start-up included.  Idle CPU: the watcher's CPU seconds (from
``/proc/PID/stat``) over 3 s with nothing written, against its CPU seconds while it read the
300 steps.

Scale (``--scale``): a verdict's CPU seconds at several lengths of run.  For each size N
(3,000, 10,000, 30,000 and 100,000 points unless ``--sizes`` says otherwise) it writes a
log in the sample log's format whose ``ntok`` is the sample schedule's replay (so the
schedule is verified, as on the sample run) and whose loss is flat with small batch
effects and noise, with one spike early (its verdict reads the manifest and replays the
schedule: not counted) and three in the last 600 steps; then it reads the log with a
:class:`~dflash_diag.watch.session.WatchSession` in this process and times each
:func:`~dflash_diag.watch.verdict.judge` call (``time.process_time``).  The logs are
written once; then ``--rounds`` rounds (default 3) each watch every size in turn, so a
burst of load on a shared machine hits every size alike.  It prints the median CPU of
the late verdicts of all rounds at each size (and their range) and its ratio against the
same figure at the smallest size, measured in the same run: flat is ~1x.  Also the
median CPU per point read and decided (parsing and detection, verdicts excluded).  Run
it with ``PYTHONPATH`` set to another checkout to measure that one (it uses only public
names and ``judge``).
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


SCALE_SIZES = (3000, 10000, 30000, 100000)
STEPS_PER_EPOCH = 329  # the sample schedule's (sample_logs/dflash-diag.toml)


def scale_config(path: Path, epochs: int) -> None:
    """The sample schedule, with enough epochs for the synthetic log."""
    text = (SAMPLE / "dflash-diag.toml").read_text(encoding="utf-8")
    text = text.replace(
        'manifest = "manifest.parquet"', f'manifest = "{SAMPLE / "manifest.parquet"}"'
    )
    text = "\n".join(
        f"epochs = {epochs}" if ln.startswith("epochs =") else ln for ln in text.splitlines()
    )
    path.write_text(text + "\n", encoding="utf-8")


def scale_log(path: Path, config: Path, n: int) -> list[int]:
    """Write ``n`` points in the sample log's format (``ntok`` from the replay); the
    steps of the planted spikes, the first one early."""
    import numpy as np

    from dflash_diag.composition import Request, resolve

    src = resolve(Request(log=str(path), config=str(config), live=True)).source
    rep = src.replay_for(n)  # type: ignore[union-attr]
    micro = rep.micro
    mean_len = micro[micro["rank"] == 0].set_index("step")["mean_len"]
    steps = rep.steps["step"].to_numpy()[:n]
    tokens = rep.steps["tokens"].to_numpy()[:n]
    rng = np.random.default_rng(n)
    loss = (
        0.9 + 0.03 * np.log(mean_len.loc[steps].to_numpy() / 1500) + 0.01 * rng.standard_normal(n)
    )
    planted = [200, n - 500, n - 350, n - 200]
    loss[np.array(planted) - 1] += 0.5
    with open(path, "w", encoding="utf-8") as out:
        for s, v, t in zip(steps, loss, tokens, strict=True):
            out.write(
                "2026-03-02 12:47:28,759 | INFO | dflash.train | "
                f"epoch={(s - 1) // STEPS_PER_EPOCH} step={s}/{n} loss={v:.4f} acc=0.0139 "
                f"lr=2.52e-07 grad_norm=4.06 ntok={t} "
                "tok/s=25.9K\n"
            )
    return planted


def scale_session(
    log: Path, config: Path, n: int, planted: list[int]
) -> tuple[list[float], float, int, list[str]]:
    """One watch of the log of ``n`` points: the CPU s of each late verdict, the CPU s
    per point otherwise, the verdicts, and the late verdicts' words."""
    from dflash_diag.watch import session as ws

    timed: list[tuple[int, float, str]] = []
    judge = ws.judge

    def timed_judge(det: object, *args: object, **kw: object) -> object:
        t = time.process_time()
        v = judge(det, *args, **kw)  # type: ignore[arg-type]
        took = time.process_time() - t
        timed.append((det.decisions[-1].step, took, v.verdict))  # type: ignore[attr-defined]
        return v

    ws.judge = timed_judge  # type: ignore[assignment]
    try:
        session = ws.open_session(str(log), config=str(config), until=n)
        start = time.process_time()
        while not session.done:
            list(session.poll())
        total = time.process_time() - start
    finally:
        ws.judge = judge
    late = [t for s, t, _ in timed if s in planted[1:]]
    words = [f"{s} {v}" for s, _, v in timed if s in planted[1:]]
    per_point = (total - sum(t for _, t, _ in timed)) / n
    return late, per_point, len(timed), words


def scale(sizes: list[int], rounds: int) -> None:
    """Each size's log written once; then ``rounds`` rounds, each watching every size
    in turn (a burst of load hits every size alike); per size the median over all its
    late verdicts, and the median CPU per point over the rounds."""
    print(f"watch: CPU per verdict at {', '.join(f'{n:,}' for n in sizes)} points "
          f"(3 late spikes each, {rounds} rounds alternating the sizes; ratio against "
          "the smallest size, this run)")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        inputs = {}
        for n in sizes:
            log, config = Path(tmp) / f"run{n}.log", Path(tmp) / f"dflash-diag{n}.toml"
            scale_config(config, n // STEPS_PER_EPOCH + 2)
            inputs[n] = (log, config, scale_log(log, config, n))
        late: dict[int, list[float]] = {n: [] for n in sizes}
        per_point: dict[int, list[float]] = {n: [] for n in sizes}
        seen: dict[int, tuple[int, list[str]]] = {}
        for _ in range(rounds):
            for n in sizes:
                times, point, count, words = scale_session(*inputs[n][:2], n, inputs[n][2])
                late[n] += times
                per_point[n].append(point)
                seen[n] = (count, words)
    ref = None
    for n in sizes:
        verdict = statistics.median(late[n]) if late[n] else float("nan")
        ref = verdict if ref is None else ref
        count, words = seen[n]
        print(
            f"  {n:>7,} points: verdict {verdict:.3f} s CPU ({verdict / ref:.2f}x; "
            f"{min(late[n]):.3f}-{max(late[n]):.3f} over {len(late[n])}), "
            f"{statistics.median(per_point[n]) * 1e3:.3f} ms a point read and decided, "
            f"{count} verdicts ({'; '.join(words)})"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--agreement", action="store_true")
    ap.add_argument("--scale", action="store_true")
    ap.add_argument("--sizes", default=",".join(map(str, SCALE_SIZES)))
    ap.add_argument("--rounds", type=int, default=3, help="--scale: rounds over the sizes")
    args = ap.parse_args()
    if args.scale:
        scale([int(x) for x in args.sizes.split(",")], args.rounds)
    elif args.agreement:
        agreement("sample_logs/run.log", 2961)
        agreement("sample_logs/run_bucketed.log", 3709, "--config", "sample_logs/bucketed.toml")
    else:
        latency(args.runs)


if __name__ == "__main__":
    main()
