"""The issue's "done when": `watch` on a log another process is writing.

A writer appends the sample run's lines at ~2000 lines a second, pausing before the
lines of steps 254 and 258 so that the time from each line's write to its spike's JSON
line can be read; `watch --json` runs in another process.  Both spikes are reported as
composition, in order, each within 1 s of its line; SIGINT ends the watch with the
summary and exit status 0; while nothing is written the watcher uses (almost) no CPU.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_logs"
#: Seconds the writer waits before the lines of steps 254 and 258.
PAUSE = 2.0
#: The writer stops after this step (the story's spikes are behind it).
LAST_STEP = 300

WRITER = r"""
import sys, time
src, dst, pause, last = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
with open(src, encoding="utf-8") as f, open(dst, "a", encoding="utf-8") as out:
    for i, line in enumerate(f):
        step = line.split("step=")[1].split("/")[0] if "train | epoch=" in line else ""
        if step in ("254", "258"):
            time.sleep(pause)
        out.write(line)
        out.flush()
        if step in ("254", "258"):
            print(step, time.time(), flush=True)
        if step == str(last):
            break
        if i % 20 == 19:
            time.sleep(0.01)  # ~2000 lines a second
"""


def read_lines(stream, into: list) -> None:
    for line in stream:
        into.append((time.time(), line))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads CPU time from /proc")
def test_watch_reports_the_story_spikes_live_and_stops_on_ctrl_c(tmp_path):
    # (latency and idle CPU are figures of benchmarks/bench_watch.py, not asserted here)
    log = tmp_path / "run.log"  # not there yet: the watcher waits for it
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    watcher = subprocess.Popen(
        [sys.executable, "-m", "dflash_diag", "watch", str(log), "--json",
         "--manifest", str(SAMPLE / "manifest.parquet"),
         "--config", str(SAMPLE / "dflash-diag.toml")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    out: list = []
    err: list = []
    threads = [
        threading.Thread(target=read_lines, args=(watcher.stdout, out), daemon=True),
        threading.Thread(target=read_lines, args=(watcher.stderr, err), daemon=True),
    ]
    for t in threads:
        t.start()
    try:
        deadline = time.time() + 60
        while not any("waiting for" in line for _, line in err):
            assert time.time() < deadline and watcher.poll() is None, err
            time.sleep(0.05)
        writer = subprocess.run(
            [sys.executable, "-c", WRITER, str(SAMPLE / "run.log"), str(log), str(PAUSE),
             str(LAST_STEP)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        written = {int(s): float(t) for s, t in (x.split() for x in writer.stdout.splitlines())}
        deadline = time.time() + 30
        while len([1 for _, x in out if json.loads(x)["step"] == 258]) < 1:
            assert time.time() < deadline, (out, err)
            time.sleep(0.05)
        time.sleep(1.0)  # the lines after step 258 are read
        watcher.send_signal(signal.SIGINT)
        try:
            code = watcher.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(("no exit 60 s after SIGINT", err)) from None
    finally:
        if watcher.poll() is None:
            watcher.kill()
    for t in threads:
        t.join(timeout=5)
    spikes = [(at, json.loads(line)) for at, line in out]
    story = [(at, doc) for at, doc in spikes if doc["step"] in (254, 258)]
    assert [doc["step"] for _, doc in story] == [254, 258]  # in order, once each
    for at, doc in story:
        assert doc["verdict"] == "composition" and doc["ground"] == "verified"
        assert not doc["backlog"]
        assert at >= written[doc["step"]]  # (reported after its line, not replayed before)
    assert code == 0
    summary = "".join(line for _, line in err)
    assert f"interrupted: {LAST_STEP} points of loss from" in summary
    assert "  52 inconclusive, 144 composition, 254 composition, 258 composition" in summary
