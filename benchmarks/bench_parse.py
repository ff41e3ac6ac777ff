"""How fast is ``read_log`` on a big key=value log, against ``pandas.read_csv``?

Generates a 1,000,000-line training log in the sample run's line shape (timestamp,
level, logger, ``epoch= step=N/T loss= acc= lr= grad_norm= ntok= tok/s=25.1K``, with a
warning line every 5,000 lines) in a temporary folder, and the same metrics as a CSV.
Prints lines/s of ``read_log``, the ratio of its time to ``pandas.read_csv`` on the CSV
(target: at most 3x), and the peak resident memory of a fresh process running
``read_log`` (target: under 1 GB).  Both readers run once untimed (imports, caches),
then in ``--repeat`` alternating rounds; each timing is its best round, so a burst of
load on the machine hits both alike.
For scale it also times reading the log's bytes alone, and it checks that the
metrics ``read_log`` found are the ones written (the CSV's values, exactly).

``--floor`` also times the two steps of the fast path that read every byte, alone, in
the same threads and byte ranges: ``pyarrow.csv`` splitting each range at the template's
delimiter, and reading the number columns (``read_numbers``: word arithmetic where a
column's rows share one layout, else Arrow's cast), with no checks of the fixed text but
the cells' lengths, no join and no table, the bytes already in memory.  Its ratio to
``read_csv`` is the least this design could reach.

    python benchmarks/bench_parse.py [--lines 1000000] [--repeat 5] [--ranks 4] [--plain]
                                     [--timing] [--max-templates N] [--floor]
    python benchmarks/bench_parse.py --hf 100000,1000000 [--unbuffered] [--repeat 3]

``--hf SIZES`` times the Hugging Face Trainer's console output instead (dict lines
among tqdm redraws and clears, ``logging_steps=1``, :func:`generate_hf`) at each size,
against ``pandas.read_csv`` of the same numbers as CSV, in the same run, in this process
and as whole processes (``dflash-diag parse --json`` against a Python running
``read_csv``, CPU seconds), and checks the table (steps dated by the bar's count at
each write) against the CSV.  ``--against CHECKOUT`` also times ``parse`` with that
checkout's code, its processes alternating with this one's.  The processes run from a
scratch folder (``-m`` puts the working folder first on the path) with Python's
bytecode cache in a scratch folder too (``PYTHONPYCACHEPREFIX``; the untimed round
writes it), as a user's second run reads it; ``--no-bytecode-cache`` keeps what the
environment says (with ``PYTHONDONTWRITEBYTECODE`` set, each ``parse`` compiles the
package again, 0.1-0.2 s, which ``read_csv``'s process, reading installed pandas, does
not).

    python benchmarks/bench_parse.py --hf 1000000 --repeat 3 [--against CHECKOUT]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import alternating, child_env

LINE = (
    "2026-03-02 14:{mm:02d}:{ss:02d},{ms:03d} | INFO | dflash.train | epoch={ep} "
    "step={step}/{total} loss={loss:.4f} acc={acc:.4f} lr={lr:.2e} grad_norm={gn:.2f} "
    "ntok={ntok} tok/s={tps:.1f}K\n"
)


def generate(
    folder: Path, n: int, ranks: int = 1, plain: bool = False, timing: bool = False
) -> tuple[Path, Path]:
    """Write ``n`` metric lines (plus warnings) and the same metrics as CSV; with
    ``ranks`` > 1 line ``i`` is rank ``i % ranks``'s, prefixed as torchrun's ``--tee``
    prefixes it (``[default3]:``); ``plain``: without the timestamp, level and logger;
    ``timing``: each step also prints a line of another shape (its phases' times)."""
    line = LINE[LINE.index("epoch=") :] if plain else LINE
    import numpy as np

    rng = np.random.default_rng(0)
    total = n
    loss = 4.0 + rng.random(n)
    acc = rng.random(n)
    gn = 1.0 + rng.random(n)
    log = folder / "big.log"
    csv = folder / "big.csv"
    with open(log, "w") as f, open(csv, "w") as c:
        f.write("==== dflash drafter training ====\n")
        c.write("step,loss,acc,lr,grad_norm,tokens,tok_per_s,epoch\n")
        for i in range(n):
            if i % 5000 == 4999:
                f.write("2026-03-02 14:00:00,000 | WARNING | dflash.train | [rank3] slow step\n")
            lr = 6e-4 * min(1.0, (i + 1) / 3000)
            ep = i // 100_000
            ntok = 60000 + i % 4000
            tps = 20 + (i % 97) / 10
            if ranks > 1:
                f.write(f"[default{i % ranks}]:")
            f.write(
                line.format(
                    mm=i // 60 % 60,
                    ss=i % 60,
                    ms=i % 1000,
                    ep=ep,
                    step=i,
                    total=total,
                    loss=loss[i],
                    acc=acc[i],
                    lr=lr,
                    gn=gn[i],
                    ntok=ntok,
                    tps=tps,
                )
            )
            if timing:
                f.write(
                    f"2026-03-02 14:00:00,000 | INFO | dflash.timing | step={i} "
                    f"fwd={10 + i % 7}.{i % 10}ms bwd={20 + i % 5}.{i % 9}ms\n"
                )
            row = (i, f"{loss[i]:.4f}", f"{acc[i]:.4f}", f"{lr:.2e}", f"{gn[i]:.2f}", ntok)
            c.write(",".join(map(str, row)) + f",{tps * 1000:.0f},{ep}\n")
    return log, csv


def generate_hf(folder: Path, n: int, buffered: bool = True) -> tuple[Path, Path]:
    """Write the console output of a Hugging Face Trainer run of ``n`` steps with
    ``logging_steps=1`` (``python train.py > NAME.log 2>&1``, as
    ``tests/data/trainers/hf_trainer_steps1.log`` was written), and the same numbers as
    CSV (``step,loss,grad_norm,learning_rate,epoch``).

    Per step, as ``tqdm.write`` does it: the bar cleared (``\\r``, spaces, ``\\r``),
    the dict printed to stdout, the bar redrawn at the step's count.  ``buffered``: stdout
    is block-buffered, so the dicts arrive in 8 KB lumps, each right after the clear of
    the write that filled the buffer (stderr, the bars, is not buffered); else each dict
    comes right after its clear.  Values are printed as the Trainer prints them: strings
    of 4 significant digits."""
    import numpy as np

    rng = np.random.default_rng(0)
    loss = 2 + rng.random(n)
    gn = 0.5 + rng.random(n)
    log = folder / "hf.log"
    csv = folder / "hf.csv"
    with open(log, "w") as f, open(csv, "w") as c:
        f.write(f"\r  0%|          | 0/{n} [00:00<?, ?it/s]")
        c.write("step,loss,grad_norm,learning_rate,epoch\n")
        lump: list[str] = []
        size = 0
        for i in range(n):
            s = i + 1
            pct = s * 100 // n
            bar = (
                f"\r{pct:3d}%|{'#' * (pct // 10):<10}| {s}/{n} "
                f"[00:{s // 50 % 60:02d}<01:{s % 60:02d}, {40 + s % 19}.{s % 100:02d}it/s]"
            )
            values = (f"{loss[i]:.4g}", f"{gn[i]:.4g}", f"{6e-4 * min(1, s / 2000):.4g}")
            epoch = f"{s / n * 3:.4g}"
            line = (
                f"{{'loss': '{values[0]}', 'grad_norm': '{values[1]}', "
                f"'learning_rate': '{values[2]}', 'epoch': '{epoch}'}}\n"
            )
            c.write(f"{s},{','.join(values)},{epoch}\n")
            f.write("\r" + " " * (len(bar) - 1) + "\r")
            if buffered:
                lump.append(line)
                size += len(line)
                if size >= 8192:
                    f.write("".join(lump))
                    lump, size = [], 0
            else:
                f.write(line)
            f.write(bar)
        # the run's summary, written as a log dict is; then the bar is closed
        f.write("\r" + " " * (len(bar) - 1) + "\r")
        lump.append("{'train_runtime': '120.8', 'train_loss': '2.645', 'epoch': '3'}\n")
        f.write("" if buffered else lump.pop())
        f.write(bar + "\n" + "".join(lump))
    return log, csv


def check_hf(table, frame) -> None:
    """Fail loudly when the HF log's table is not the CSV's numbers."""
    import numpy as np

    if len(table) != len(frame):
        raise SystemExit(f"rows: read_log {len(table)}, read_csv {len(frame)}")
    for mine, theirs in (
        ("step", "step"),
        ("loss", "loss"),
        ("grad_norm", "grad_norm"),
        ("lr", "learning_rate"),
        ("epoch", "epoch"),
    ):
        if not np.array_equal(table[mine].to_numpy(), frame[theirs].to_numpy()):
            raise SystemExit(f"column {mine}: read_log differs from what was written")


#: The whole-process reference: a fresh Python reading the CSV with pandas.
READ_CSV = "import sys, pandas; pandas.read_csv(sys.argv[1])"
HERE = Path(__file__).resolve().parents[1]


def process_cpu(
    args: list[str], env: dict[str, str] | None = None, cwd: str | None = None
) -> float:
    """CPU seconds (user + system) of a fresh process running ``args``."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, env=env, cwd=cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def hf_main(
    sizes: list[int], repeat: int, buffered: bool, against: Path | None, bytecode_cache: bool
) -> None:
    """``--hf``: the HF Trainer's console output against ``read_csv``, at each size: in
    this process (best wall time of ``repeat`` alternating rounds), and as whole
    processes (``dflash-diag parse LOG --json`` against a Python running
    ``pandas.read_csv``; CPU seconds, best of ``repeat`` rounds after an untimed one,
    ``against``'s ``parse`` in each round too, the order of the processes reversed every
    other round), as issue 26 measured."""
    import pandas as pd

    from dflash_diag.logs import read_log

    kind = "buffered" if buffered else "unbuffered"
    print(f"HF Trainer stdout ({kind}: dicts and tqdm bars) against pandas.read_csv")
    print(
        f"{'lines':>10} {'MB':>6} {'read_log':>9} {'read_csv':>9} {'ratio':>7}"
        f" {'parse CPU':>10} {'csv CPU':>8} {'ratio':>7}  step_source"
    )
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            log, csv = generate_hf(Path(tmp), n, buffered)
            (t_csv, frame), (t_log, run) = alternating(
                repeat, lambda csv=csv: pd.read_csv(csv), lambda log=log: read_log(log)
            )
            check_hf(run.table, frame)
            cache = os.path.join(tmp, "pycache") if bytecode_cache else None
            parse = [sys.executable, "-m", "dflash_diag", "parse", str(log), "--json"]
            cases = {"csv": ([sys.executable, "-c", READ_CSV, str(csv)], child_env(HERE, cache))}
            cases["parse"] = (parse, child_env(HERE, cache))
            if against is not None:
                cases["against"] = (parse, child_env(against, cache))
            best = {name: float("inf") for name in cases}
            order = list(cases.items())
            for r, timed in enumerate([False] + [True] * repeat):  # (round 0 writes the cache)
                # (every other round in reverse: which process runs after which is not a
                # bias of one case; in one order `parse` read 1.14x its own code's time)
                for name, (argv, env) in order if r % 2 else order[::-1]:
                    cpu = process_cpu(argv, env, cwd=tmp)
                    best[name] = min(best[name], cpu) if timed else best[name]
            mb = log.stat().st_size / 1e6
        c_csv, c_log = best["csv"], best["parse"]
        print(
            f"{n:>10,} {mb:6.0f} {t_log:8.2f}s {t_csv:8.2f}s {t_log / t_csv:6.1f}x"
            f" {c_log:9.2f}s {c_csv:7.2f}s {c_log / c_csv:6.1f}x  {run.step_source}"
        )
        if against is not None:
            c_old = best["against"]
            print(
                f"{'':>10} {'':>6} against: parse CPU {c_old:.2f}s, {c_old / c_csv:.1f}x read_csv;"
                f" this checkout {c_log / c_old:.2f}x its time"
            )


def check(table, frame, n: int, ranks: int = 1) -> None:
    """Fail loudly when the log's table is not the CSV's metrics (tok/s is written
    rounded differently in the two files, so it is compared to 1e-9 relative)."""
    import numpy as np

    if ranks > 1:  # one row per (rank, step): back in step order, each on its rank
        table = table.sort_values("step", ignore_index=True)
        if not np.array_equal(table["rank"].to_numpy(), np.arange(n) % ranks):
            raise SystemExit("column rank: read_log differs from what was written")
    if not len(table) == len(frame) == n:
        raise SystemExit(f"rows: read_log {len(table)}, read_csv {len(frame)}, written {n}")
    for col in ("step", "loss", "acc", "lr", "grad_norm", "tokens", "epoch"):
        if not np.array_equal(table[col].to_numpy(), frame[col].to_numpy()):
            raise SystemExit(f"column {col}: read_log differs from what was written")
    if not np.allclose(table["tok_per_s"], frame["tok_per_s"], rtol=1e-9, atol=0):
        raise SystemExit("column tok_per_s: read_log differs from what was written")


# The peak is the kernel's high-water mark of this process's own memory (VmHWM).  Not
# ru_maxrss: on Linux that survives exec, so a child started from this (big) benchmark
# process would report the parent's resident size when that was larger.
PEAK = """
import resource, sys
from dflash_diag.logs import read_log
from dflash_diag.logs.fast import lineshape as fastpath
fastpath.MAX_TEMPLATES = int(sys.argv[3]) or 1
fastpath.FAST_MIN_LINES = fastpath.FAST_MIN_LINES if int(sys.argv[3]) else 10**12
run = read_log(sys.argv[1], rank=sys.argv[2])
try:
    with open("/proc/self/status") as f:
        kb = next(int(x.split()[1]) for x in f if x.startswith("VmHWM:"))
except OSError:
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(len(run.table), kb)
"""


def split_and_read(data: bytes) -> None:
    """The fast path's CSV split and number reading of ``data`` alone (see ``--floor``)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    from dflash_diag.logs.fast import columns, rows, template
    from dflash_diag.logs.fast import lineshape as fastpath

    learned = template.sample_template(template.sample_lines(data))
    split = template.split_template(learned) if learned is not None else None
    if split is None:
        raise SystemExit("--floor: the log has no template the fast path reads")
    delimiter, segments = split

    def one(r: tuple[int, int]) -> None:
        part = rows.split_part(data, r[0], r[1], delimiter, len(segments), False)
        for k, seg in enumerate(segments):
            if seg.value is not None:
                col = part.table.column(k).chunks[0]
                off = np.frombuffer(col.buffers()[1], np.int32, len(col) + 1, 4 * col.offset)
                # (only the cells' lengths, as segment_fits first tests them: no byte checks)
                ok = off[1:] - off[:-1] > len(seg.head) + len(seg.tail)
                columns.read_numbers(col, off, seg, learned.values[seg.value], ok)

    workers = max(1, min(len(os.sched_getaffinity(0)), 4))
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, fastpath._parts(data, workers)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--ranks", type=int, default=1, help="prefix the lines of N ranks ([default3]:...)"
    )
    ap.add_argument("--plain", action="store_true", help="lines without timestamp/level/logger")
    ap.add_argument("--timing", action="store_true", help="a second line shape every step")
    ap.add_argument(
        "--floor", action="store_true", help="also time the CSV split and the numbers alone"
    )
    ap.add_argument(
        "--max-templates",
        type=int,
        default=None,
        help="line shapes the fast path reads (default: the reader's own); 0: fast path off",
    )
    ap.add_argument(
        "--hf",
        default="",
        help="time the HF Trainer's stdout instead, at these sizes (e.g. 100000,1000000)",
    )
    ap.add_argument("--unbuffered", action="store_true", help="--hf: each dict after its clear")
    ap.add_argument("--against", type=Path, help="--hf: also time parse with this checkout")
    ap.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="--hf: keep PYTHONDONTWRITEBYTECODE as the environment sets it",
    )
    args = ap.parse_args()
    if args.hf:
        sizes = [int(x) for x in args.hf.split(",") if x.strip()]
        against = args.against.resolve() if args.against is not None else None
        hf_main(sizes, args.repeat, not args.unbuffered, against, not args.no_bytecode_cache)
        return
    rank = "all" if args.ranks > 1 else "0"
    import pandas as pd

    from dflash_diag.logs import read_log
    from dflash_diag.logs.fast import lineshape as fastpath

    templates = fastpath.MAX_TEMPLATES if args.max_templates is None else args.max_templates
    fastpath.MAX_TEMPLATES = templates or 1
    if not templates:
        fastpath.FAST_MIN_LINES = 10**12  # every line through the line-by-line parser
    with tempfile.TemporaryDirectory() as tmp:
        log, csv = generate(Path(tmp), args.lines, args.ranks, args.plain, args.timing)
        size_mb = log.stat().st_size / 1e6
        steps = [lambda: pd.read_csv(csv), lambda: read_log(log, rank=rank), log.read_bytes]
        if args.floor:
            data = log.read_bytes()
            steps.append(lambda: split_and_read(data))
        (t_csv, frame), (t_log, run), (t_bytes, _), *floor = alternating(args.repeat, *steps)
        check(run.table, frame, args.lines, args.ranks)
        out = subprocess.run(
            [sys.executable, "-c", PEAK, str(log), rank, str(templates)],
            capture_output=True,
            text=True,
            check=True,
        )
        rows, peak_kb = (int(x) for x in out.stdout.split())
    n_lines = run.n_lines
    print(f"log: {n_lines:,} lines, {size_mb:.0f} MB; {rows:,} steps read")
    print(f"read_log:        {t_log:6.2f} s  ({n_lines / t_log:,.0f} lines/s)")
    print(f"pandas.read_csv: {t_csv:6.2f} s  (same metrics as CSV)")
    print(f"reading the log's bytes alone: {t_bytes:6.2f} s")
    print(f"ratio read_log / read_csv: {t_log / t_csv:.2f}x  (target <= 3x)")
    if floor:
        t_floor = floor[0][0]
        print(f"CSV split and numbers alone: {t_floor:6.2f} s, {t_floor / t_csv:.2f}x read_csv")
    print(f"peak memory of a process running read_log: {peak_kb / 1024:.0f} MB  (target < 1024)")


if __name__ == "__main__":
    main()
