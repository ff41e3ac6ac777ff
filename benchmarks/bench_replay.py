"""Speed and memory of the replay engine against a straightforward pure-Python pipeline.

    python benchmarks/bench_replay.py            # 10,000,000 samples (a few minutes)
    python benchmarks/bench_replay.py --quick    # 1,000,000 samples (under a minute)

Lengths: lognormal, median 1500 tokens, sigma 0.9, at least 1, capped at 8192 (max_seq_len)
- a long tail like an instruction-tuning corpus.  Schedule: sorted-greedy, token budget
65536 padded tokens, 8 ranks.  Every figure is measured in this run, the reference too:

1. build the batches (sort + pack): ``build_sorted_batches`` against the story's
   ``build_batches`` (``sorted`` with a key, greedy loop over lists); the batches must be
   identical (checked) - target >= 20x faster;
2. one epoch's order with ``--rng python``: ``SortedGreedy.epoch`` against
   ``random.shuffle`` of the list of batches, the floor for an exact replay - target
   <= 1.5x;
3. the whole 6-epoch ``replay()`` in a fresh subprocess: wall time, peak RSS
   (``VmHWM``) and tracemalloc peak - target < 1.5 GB; and the pure-Python pipeline's
   peak RSS for its 6 epochs of lists, for scale.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dflash_diag.data import ScheduleParams  # noqa: E402
from dflash_diag.schedule.packing import Budget  # noqa: E402
from dflash_diag.schedule.rng import make_shuffler  # noqa: E402
from dflash_diag.schedule.sorted_greedy import SortedGreedy, build_sorted_batches  # noqa: E402

BUDGET = 65536
MAX_SEQ_LEN = 8192
SEED = 1234


def make_lengths(n: int) -> np.ndarray:
    """The benchmark's lengths, drawn in chunks so that making them costs little memory."""
    rng = np.random.default_rng(0)
    out = np.empty(n, dtype=np.int64)
    step = 1 << 20
    for a in range(0, n, step):
        raw = rng.lognormal(mean=np.log(1500), sigma=0.9, size=min(step, n - a))
        out[a : a + len(raw)] = np.clip(raw, 1, MAX_SEQ_LEN)
    return out


def python_build_batches(all_lens: list[int]) -> list[list[int]]:
    """The pipeline's build_batches as a training script writes it."""
    indexed = sorted(((i, min(L, MAX_SEQ_LEN)) for i, L in enumerate(all_lens)), key=lambda x: x[1])
    batches: list[list[int]] = []
    cur: list[int] = []
    cur_max = 0
    for i, L in indexed:
        if cur and (len(cur) + 1) * max(cur_max, L) > BUDGET:
            batches.append(cur)
            cur, cur_max = [], 0
        cur.append(i)
        cur_max = max(cur_max, L)
    if cur:
        batches.append(cur)
    return batches


def timed(fn, *args, repeat: int = 1):
    best = float("inf")
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - t)
    return out, best


CHILD = """
import json, sys, time, tracemalloc
import numpy as np
sys.path.insert(0, {root!r})
from benchmarks.bench_replay import make_lengths, peak_rss_kb, BUDGET, MAX_SEQ_LEN, SEED
mode, n = sys.argv[1], int(sys.argv[2])
lens = make_lengths(n)
base = peak_rss_kb()
if {trace}:
    tracemalloc.start()
t = time.perf_counter()
if mode == "replay":
    from dflash_diag.data import ScheduleParams
    from dflash_diag.schedule import replay
    p = ScheduleParams(seed=SEED, token_budget=BUDGET, max_seq_len=MAX_SEQ_LEN, world_size=8,
                       epochs=6)
    r = replay(lens, p)
    size = int(r.sample_ids.size)
else:
    import random
    from benchmarks.bench_replay import python_build_batches
    batches = python_build_batches(lens.tolist())
    random.seed(SEED)
    epochs = []
    for _ in range(6):
        order = list(range(len(batches)))
        random.shuffle(order)
        epochs.append([i for b in order for i in batches[b]])
    size = sum(len(e) for e in epochs)
wall = time.perf_counter() - t
peak_traced = tracemalloc.get_traced_memory()[1] if {trace} else 0
print(json.dumps(dict(wall=wall, maxrss_kb=peak_rss_kb(), base_kb=base, traced=peak_traced,
                      size=size)))
"""


def peak_rss_kb() -> int:
    """This process's peak resident memory (kB): VmHWM, which starts afresh at exec
    (``ru_maxrss`` would carry over the parent's peak from the fork)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def child(mode: str, n: int, trace: bool) -> dict:
    code = CHILD.format(root=str(ROOT), trace=trace)
    out = subprocess.run(
        [sys.executable, "-c", code, mode, str(n)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1,000,000 samples instead of 10M")
    ap.add_argument("--n", type=int, default=None, help="number of samples")
    ap.add_argument("--skip-python-memory", action="store_true", help="skip the slow reference")
    args = ap.parse_args()
    n = args.n or (1_000_000 if args.quick else 10_000_000)
    lens = make_lengths(n)
    print(
        f"samples {n:,}  median {int(np.median(lens))}  mean {lens.mean():.0f}  "
        f"capped at {MAX_SEQ_LEN}: {(lens == MAX_SEQ_LEN).mean():.1%}  budget {BUDGET}"
    )

    # 1. build
    all_lens = lens.tolist()
    ref, t_ref = timed(python_build_batches, all_lens)
    mine, t_mine = timed(build_sorted_batches, lens, Budget(BUDGET), repeat=3)
    ref_ids = np.fromiter((i for b in ref for i in b), dtype=np.int64, count=n)
    ref_sizes = np.fromiter((len(b) for b in ref), dtype=np.int64, count=len(ref))
    identical = np.array_equal(ref_ids, mine.ids) and np.array_equal(ref_sizes, mine.sizes())
    if not identical:
        raise SystemExit("batches differ from the pure-Python build_batches")
    print(
        f"1. build batches   python {t_ref:7.3f} s   replay {t_mine:7.3f} s   "
        f"{t_ref / t_mine:6.1f}x faster   ({len(ref):,} batches, identical)"
    )

    # 2. epoch order with --rng python, three epochs, seed once
    strategy = SortedGreedy()
    params = ScheduleParams(seed=SEED, token_budget=BUDGET)
    prepared = strategy.prepare(lens, params)

    def python_epochs(batch_list: list[list[int]]) -> None:
        rng = random.Random(SEED)
        for _ in range(3):
            rng.shuffle(batch_list)

    def replay_epochs():
        shuffler = make_shuffler("python", SEED)
        for e in range(3):
            strategy.epoch(prepared, e, shuffler)

    _, t_shuffle = timed(python_epochs, ref, repeat=3)
    _, t_order = timed(replay_epochs, repeat=3)
    print(
        f"2. epoch order     random.shuffle {t_shuffle / 3:7.3f} s   "
        f"replay {t_order / 3:7.3f} s   ratio {t_order / t_shuffle:5.2f}x (target <= 1.5x)"
    )
    del ref, all_lens

    # 3. whole replay, 6 epochs, fresh processes
    r = child("replay", n, trace=False)
    rt = child("replay", n, trace=True)
    print(
        f"3. replay 6 epochs wall {r['wall']:6.1f} s   peak RSS {r['maxrss_kb'] / 2**20:5.2f} GB "
        f"(lengths alone {r['base_kb'] / 2**20:4.2f} GB)   tracemalloc peak "
        f"{rt['traced'] / 2**30:5.2f} GB   (target < 1.5 GB)"
    )
    if not args.skip_python_memory:
        p = child("python", n, trace=False)
        print(
            f"   pure-Python 6 epochs of lists: wall {p['wall']:6.1f} s   peak RSS "
            f"{p['maxrss_kb'] / 2**20:5.2f} GB   -> replay uses "
            f"{p['maxrss_kb'] / r['maxrss_kb']:.1f}x less memory"
        )


if __name__ == "__main__":
    main()
