"""Fuzz the readers and the CLI with mutated logs, manifests and configs.

    python benchmarks/fuzz.py --n 10000 --seed 0            # library cases
    python benchmarks/fuzz.py --n 0 --cli 300 --seed 0      # CLI runs
    python benchmarks/fuzz.py --only log:123 --seed 0       # one case again
    python benchmarks/fuzz.py --n 0 --safety 200 --seed 0   # the safety classes

Library cases (``tests/fuzz/mutate.py`` makes them, ``tests/fuzz/target.py`` runs and
checks them) run in a worker process that is started again whenever it dies, so a
signal (SIGSEGV from a C stack overflow) is counted as a crash, and a case that takes
longer than ``--timeout`` seconds is a hang (the worker is killed and restarted).  Each
case is one of:

- ok: read (and replayed) and the result keeps its promises;
- error: a clean InputError, one short line;
- crash: any other exception, or the worker killed by a signal;
- contract: no exception but a broken promise (a RuntimeWarning, a bad table, a long
  or multi-line error, an input changed);
- hang: over the time limit.

The CLI pass runs ``python -m dflash_diag parse|spikes|batches|compare`` on mutated
files and checks the command-line contract: exit 0 with valid output (one JSON document
with --json) or exit 2 with exactly one ``error:`` line of at most 300 characters and no
traceback; the inputs unchanged; nothing written in the working folder or beside the
inputs; nothing else on stderr.

Every crash, hang and broken contract is saved to ``--out`` (default: a new folder under
the system's temporary folder; never inside the repository unless named), once per
distinct place, shrunk by deleting chunks while the same failure remains.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fuzz.mutate import Case, make_case, seed_logs  # noqa: E402

KINDS = ("log", "manifest", "config")
WEIGHTS = (0.5, 0.25, 0.25)
STATUSES = ("ok", "error", "crash", "contract", "hang")


# ---------------------------------------------------------------- worker side


def worker() -> None:
    """Read ``{"kind", "path"}`` lines on stdin; answer ``{"status", "detail"}`` lines on
    the original stdout (the library's own stdout goes to stderr)."""
    from tests.fuzz.target import ContractBreak, run

    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    for line in sys.stdin:
        job = json.loads(line)
        try:
            status, detail = run(job["kind"], Path(job["path"])), ""
        except ContractBreak as e:
            status, detail = "contract", str(e)[:500]
        except BaseException as e:  # noqa: BLE001 - the point: anything is counted
            tb = traceback.extract_tb(e.__traceback__)
            place = next(
                (f for f in reversed(tb) if "dflash_diag" in f.filename), tb[-1] if tb else None
            )
            where = f"{Path(place.filename).name}:{place.lineno} {place.name}" if place else "?"
            status, detail = "crash", f"{type(e).__name__} at {where}: {str(e)[:200]}"
        out.write(json.dumps({"status": status, "detail": detail}) + "\n")


class Worker:
    """A worker process, started again after a crash or a hang."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> subprocess.Popen[str]:
        if self.proc is None or self.proc.poll() is not None:
            env = dict(os.environ, PYTHONPATH=str(ROOT))
            self.proc = subprocess.Popen(
                [sys.executable, __file__, "--worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=env,
            )
        return self.proc

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def run(self, kind: str, path: Path) -> tuple[str, str]:
        proc = self.start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps({"kind": kind, "path": str(path)}) + "\n")
            proc.stdin.flush()
        except BrokenPipeError:
            return self._died()
        ready, _, _ = select.select([proc.stdout], [], [], self.timeout)
        if not ready:
            self.stop()
            return "hang", f"over {self.timeout:g} s"
        line = proc.stdout.readline()
        if not line:
            return self._died()
        got = json.loads(line)
        return got["status"], got["detail"]

    def _died(self) -> tuple[str, str]:
        assert self.proc is not None
        code = self.proc.wait()
        self.proc = None
        import signal

        name = signal.Signals(-code).name if code < 0 else f"exit {code}"
        return "crash", f"worker killed: {name}"


# ---------------------------------------------------------------- library cases


def case_of(seed: int, i: int, seeds: list[Path]) -> Case:
    """Case ``i`` of the run seeded ``seed`` (the same on every machine)."""
    rnd = random.Random(f"{seed}:{i}")
    kind = rnd.choices(KINDS, WEIGHTS)[0]
    from tests.fuzz.mutate import log_case

    if kind == "log":
        return log_case(rnd, seeds)
    return make_case(kind, rnd)


def signature(status: str, detail: str) -> str:
    """The place of a failure, without the values (one reproducer per place)."""
    head = detail.split(":")[0] if status == "crash" else detail[:60]
    return f"{status} {head}"


def shrink(case: Case, w: Worker, tmp: Path, want: str, budget: int = 120) -> Case:
    """Delete chunks of the case's bytes while ``signature`` stays ``want``."""
    data, tries = case.data, 0
    chunk = max(1, len(data) // 2)
    while chunk >= 1 and tries < budget:
        i, changed = 0, False
        while i < len(data) and tries < budget:
            trial = data[:i] + data[i + chunk :]
            path = tmp / case.name
            path.write_bytes(trial)
            tries += 1
            status, detail = w.run(case.kind, path)
            if signature(status, detail) == want:
                data, changed = trial, True
            else:
                i += chunk
        if not changed:
            chunk //= 2
    return Case(case.kind, case.name, data)


def library_pass(args: argparse.Namespace, out: Path) -> int:
    seeds = seed_logs()
    w = Worker(args.timeout)
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    saved: dict[str, str] = {}
    tmp = Path(tempfile.mkdtemp(prefix="dflash-fuzz-"))
    start = time.perf_counter()
    only = None
    if args.only:
        kind, _, num = args.only.partition(":")
        only = int(num)
    indices = [only] if only is not None else range(args.n)
    try:
        for i in indices:
            case = case_of(args.seed, i, seeds)
            case_dir = tmp / "case"
            case_dir.mkdir(exist_ok=True)
            path = case_dir / case.name
            path.write_bytes(case.data)
            status, detail = w.run(case.kind, path)
            counts[case.kind][status] += 1
            if i and i % 1000 == 0:
                print(f"  ... {i} cases, {time.perf_counter() - start:.0f} s", file=sys.stderr)
            if only is not None:
                print(f"{case.kind}:{i} {case.name}: {status} {detail}")
            if status in ("ok", "error"):
                continue
            sig = signature(status, detail)
            if sig in saved:
                continue
            small = case if status == "hang" or args.no_shrink else shrink(case, w, case_dir, sig)
            stem = f"{len(saved):03d}-{case.kind}-{status}"
            (out / f"{stem}-{case.name}").write_bytes(small.data)
            (out / f"{stem}.txt").write_text(
                f"case {case.kind}:{i} seed {args.seed}\n{status}: {detail}\n"
                f"{len(case.data)} bytes, shrunk to {len(small.data)}\n"
            )
            saved[sig] = stem
            print(f"  {stem}: {case.kind}:{i} {detail[:150]}", flush=True)
    finally:
        w.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    secs = time.perf_counter() - start
    bad = _table(counts, f"library cases, seed {args.seed}, {secs:.0f} s")
    print(f"distinct failure places: {len(saved)} (reproducers in {out})")
    return bad


def _table(counts: dict[str, Counter[str]], title: str) -> int:
    print(title)
    w = max(10, *(len(k) + 2 for k in counts))
    print(f"{'kind':<{w}}" + "".join(f"{s:>10}" for s in STATUSES) + f"{'total':>10}")
    total: Counter[str] = Counter()
    for kind in sorted(counts):
        c = counts[kind]
        total.update(c)
        print(f"{kind:<{w}}" + "".join(f"{c[s]:>10}" for s in STATUSES) + f"{sum(c.values()):>10}")
    print(
        f"{'all':<{w}}"
        + "".join(f"{total[s]:>10}" for s in STATUSES)
        + f"{sum(total.values()):>10}"
    )
    return total["crash"] + total["contract"] + total["hang"]


# ---------------------------------------------------------------- CLI pass

BASE_LOG = ROOT / "sample_logs/run.log"
BASE_MANIFESTS = (ROOT / "sample_logs/manifest.parquet", ROOT / "tests/data/batches/manifest.csv")
BASE_CONFIG = ROOT / "sample_logs/dflash-diag.toml"
LOG_HEAD = 40_000  # bytes of run.log a CLI case starts from (its first ~90 steps)


def _head(path: Path, n: int) -> bytes:
    data = path.read_bytes()[:n]
    return data[: data.rfind(b"\n") + 1]


def cli_inputs(rnd: random.Random, folder: Path, seeds: list[Path]) -> tuple[list[str], str]:
    """Write one CLI case's files into ``folder``; its arguments and what was mutated."""
    from tests.fuzz.mutate import (
        BAD_VALUES,
        byte_edit,
        config_case,
        log_case,
        manifest_case,
        number_edit,
    )

    command = rnd.choice(["parse", "spikes", "spikes", "batches", "compare"])
    targets = {"parse": ["log"], "compare": ["log"], "batches": ["manifest", "config"]}
    target = rnd.choice(targets.get(command, ["log", "manifest", "config"]))
    log = folder / "run.log"
    base_log = _head(BASE_LOG, LOG_HEAD)
    if target == "log":
        if rnd.random() < 0.5:
            case = log_case(rnd, seeds)
            log = folder / case.name
            log.write_bytes(case.data)
        else:
            edit = rnd.choice([byte_edit, number_edit])
            log.write_bytes(edit(base_log, rnd))
    else:
        log.write_bytes(base_log)
    manifest = folder / "manifest.parquet"
    base_m = rnd.choice(BASE_MANIFESTS)
    manifest = folder / base_m.name
    if target == "manifest" and rnd.random() < 0.5:
        case = manifest_case(rnd)
        manifest = folder / case.name
        manifest.write_bytes(case.data)
    elif target == "manifest":  # the 2,000-sample CSV with a number or a byte changed
        manifest = folder / "manifest.csv"
        edit = rnd.choice([byte_edit, number_edit, number_edit])
        manifest.write_bytes(edit(BASE_MANIFESTS[1].read_bytes(), rnd))
    else:
        shutil.copyfile(base_m, manifest)
    config = folder / "schedule.toml"
    base_cfg = BASE_CONFIG.read_text().replace("manifest.parquet", manifest.name)
    if target == "config" and rnd.random() < 0.4:
        config.write_bytes(config_case(rnd).data)
    elif target == "config":  # the run's own config with one value changed
        lines = base_cfg.splitlines()
        keyed = [i for i, line in enumerate(lines) if " = " in line and line[0] != "#"]
        k = rnd.choice(keyed)
        lines[k] = lines[k].split(" = ")[0] + " = " + rnd.choice(BAD_VALUES + ("2", "1"))
        config.write_text("\n".join(lines) + "\n")
    else:
        config.write_text(base_cfg)
    cmd = [command]
    if command == "parse":
        cmd += [str(log)]
    elif command == "spikes":
        cmd += [str(log), "--config", str(config), "--manifest", str(manifest)]
    elif command == "batches":
        cmd += [str(manifest), "--config", str(config)]
    else:
        other = folder / "v1.log"
        other.write_bytes(_head(ROOT / "sample_logs/v1.log", LOG_HEAD))
        cmd += [str(other), str(log)]
    if rnd.random() < 0.5:
        cmd.append("--json")
    return cmd, target


def check_cli(cmd: list[str], proc: subprocess.CompletedProcess[str]) -> str | None:
    """What breaks the contract in one run, or None."""
    err = proc.stderr
    if proc.returncode == 0:
        if err.strip():
            return f"exit 0 with stderr: {err.strip()[:200]!r}"
        if "--json" in cmd:
            try:
                json.loads(proc.stdout)
            except ValueError as e:
                return f"--json output is not one JSON document ({e})"
        return None
    if proc.returncode == 2:
        lines = err.splitlines()
        if proc.stdout.strip() and "--json" in cmd:
            return "exit 2 with output on stdout"
        if len(lines) != 1 or not lines[0].startswith("error: "):
            return f"exit 2 with {len(lines)} stderr lines: {err[:300]!r}"
        if len(lines[0]) > 300:
            return f"error line of {len(lines[0])} characters"
        return None
    return f"exit {proc.returncode}: {err.strip().splitlines()[-1:] if err.strip() else ''}"


def cli_case(args: argparse.Namespace, i: int, seeds: list[Path], out: Path) -> tuple[str, str]:
    """Run CLI case ``i``: its key (command and what was mutated) and its status."""
    from tests.fuzz.target import digest

    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="100")
    rnd = random.Random(f"cli:{args.seed}:{i}")
    with tempfile.TemporaryDirectory(prefix="dflash-fuzz-cli-") as tmp:
        inputs, cwd = Path(tmp) / "in", Path(tmp) / "cwd"
        inputs.mkdir()
        cwd.mkdir()
        cmd, target = cli_inputs(rnd, inputs, seeds)
        before = {p.name: digest(p) for p in inputs.iterdir()}
        stderr = ""
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "dflash_diag", *cmd],
                cwd=cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=args.cli_timeout,
                stdin=subprocess.DEVNULL,
            )
            stderr = proc.stderr
            problem = check_cli(cmd, proc)
            status = "ok" if proc.returncode == 0 else "error"
        except subprocess.TimeoutExpired:
            problem, status = f"over {args.cli_timeout} s", "hang"
        after = {p.name: digest(p) for p in inputs.iterdir()}
        if problem is None and after != before:
            problem = f"files beside the inputs changed: {sorted(set(after) ^ set(before))}"
        if problem is None and any(cwd.iterdir()):
            problem = f"wrote {[p.name for p in cwd.iterdir()]} in the working folder"
        key = f"{cmd[0]} ({target})"
        if problem is None:
            return key, status
        if status != "hang":
            status = "crash" if problem.startswith("exit 1") else "contract"
        dest = out / f"cli-{i:04d}"
        shutil.copytree(inputs, dest)
        (dest / "CASE.txt").write_text(
            f"python -m dflash_diag {' '.join(cmd)}\n{problem}\nstderr:\n{stderr[-3000:]}\n"
        )
        print(f"  cli-{i:04d}: {cmd[0]} {target}: {problem[:160]}", flush=True)
        return key, status


def cli_pass(args: argparse.Namespace, out: Path) -> int:
    from concurrent.futures import ThreadPoolExecutor

    seeds = seed_logs()
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for key, status in pool.map(lambda i: cli_case(args, i, seeds, out), range(args.cli)):
            counts[key][status] += 1
    secs = time.perf_counter() - start
    return _table(counts, f"CLI runs, seed {args.seed}, {secs:.0f} s")


def safety_pass(args: argparse.Namespace) -> int:
    """``--safety N``: N cases of each class of ``tests/fuzz/safety.py`` (found code,
    links to inputs, escapes, gzip bombs, a full disk under ``RLIMIT_FSIZE``, over-long
    JSON lines, escapes in the HTML, long runs of a separator), each in a fresh folder;
    prints the counts per class and returns the number of crashes and broken promises."""
    from tests.fuzz.safety import CLASSES, run_case
    from tests.fuzz.target import ContractBreak

    bad = 0
    for kind in CLASSES:
        counts: Counter[str] = Counter()
        start = time.perf_counter()
        for k in range(args.safety):
            with tempfile.TemporaryDirectory() as folder:
                try:
                    counts[run_case(kind, args.seed * 100_003 + k, Path(folder))] += 1
                except ContractBreak as e:
                    counts["contract"] += 1
                    print(f"safety {kind}:{k} contract: {e}")
                except Exception as e:  # noqa: BLE001 - the point: anything is counted
                    counts["crash"] += 1
                    print(f"safety {kind}:{k} crash: {type(e).__name__}: {str(e)[:200]}")
        bad += counts["contract"] + counts["crash"]
        took = time.perf_counter() - start
        shown = ", ".join(f"{s} {counts[s]}" for s in STATUSES if counts[s])
        print(f"safety {kind}: {shown} ({took:.1f} s)")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="library cases")
    ap.add_argument("--cli", type=int, default=0, help="CLI runs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per library case")
    ap.add_argument("--cli-timeout", type=float, default=120.0, help="seconds per CLI run")
    ap.add_argument("--jobs", type=int, default=2, help="CLI runs at once")
    ap.add_argument("--out", type=Path, help="folder for reproducers (default: a temp folder)")
    ap.add_argument("--only", help="run one case again, as KIND:INDEX from a report")
    ap.add_argument("--no-shrink", action="store_true", help="save failures as found")
    ap.add_argument("--safety", type=int, default=0, help="cases per safety class")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker()
        return 0
    out = args.out or Path(tempfile.mkdtemp(prefix="dflash-fuzz-out-"))
    out.mkdir(parents=True, exist_ok=True)
    bad = 0
    if args.n or args.only:
        bad += library_pass(args, out)
    if args.cli:
        bad += cli_pass(args, out)
    if args.safety:
        bad += safety_pass(args)
    print(f"failures: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
