"""How long `batches --optimize-buckets 6` and the schedule statistics take at 10M samples.

Prints each figure beside a reference measured in the same run on the same lengths: one
``numpy.sort`` of the 10,000,000 lengths (the cost of merely ordering the data).

    python benchmarks/bench_buckets.py            # 10,000,000 samples
    python benchmarks/bench_buckets.py --quick    # 1,000,000 samples
"""

from __future__ import annotations

import argparse

import numpy as np
from common import long_tailed_lengths, timed

from dflash_diag.batches.buckets import (
    batch_max_uppers,
    length_histogram,
    optimal_uppers,
    optimize_buckets,
)
from dflash_diag.batches.stats import schedule_stats
from dflash_diag.data import ScheduleParams
from dflash_diag.schedule import replay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000,000 samples")
    parser.add_argument("-k", type=int, default=6, help="--optimize-buckets K (default 6)")
    args = parser.parse_args()
    n = 1_000_000 if args.quick else 10_000_000
    lengths = long_tailed_lengths(n)
    params = ScheduleParams(token_budget=65536, max_seq_len=8192, world_size=8, seed=1)

    _, t_sort = timed(np.sort, lengths)
    hist, t_hist = timed(length_histogram, lengths, 8192)
    _, t_edge = timed(optimal_uppers, hist, args.k)
    _, t_max = timed(batch_max_uppers, hist, args.k, params)
    plan, t_all = timed(optimize_buckets, lengths, params, args.k, 25_100.0)
    sched, t_replay = timed(replay, lengths, params.replace(strategy="sorted-greedy"))
    stats, t_stats = timed(schedule_stats, sched)

    print(f"samples: {n:,}; distinct capped lengths U = {hist.values.shape[0]:,}; K = {args.k}")
    print(f"reference  numpy.sort of the lengths          {t_sort:7.2f} s   1.00x")
    rows = [
        ("length histogram (bincount)", t_hist),
        ("dp-edge DP, k = 1..K (exact, O(K U^2))", t_edge),
        ("dp-batch-max DP, k = 1..K (grid 1024)", t_max),
        (f"optimize_buckets total ({4 * args.k} simulations)", t_all),
        ("replay sorted-greedy, 1 epoch (context)", t_replay),
        ("schedule_stats of that replay", t_stats),
    ]
    for name, t in rows:
        print(f"{name:<46} {t:7.2f} s  {t / t_sort:5.2f}x")
    best = plan.recommended()[-1]
    print(
        f"best k={best.k}: {best.method} {','.join(map(str, best.boundaries))} "
        f"simulated {best.padding_efficiency:.3f}; length ICC sorted-greedy {stats.length_icc:.3f}"
    )


if __name__ == "__main__":
    main()
