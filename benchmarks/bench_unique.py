"""``np.unique(x)`` against ``dflash_diag.arrays.unique_values(x)``, the sort it is
replaced by, on shuffled distinct integers (a log's steps, a recording's ids).

NumPy 2.3 and later answer a plain ``np.unique`` (no ``return_*`` flag) by hashing.
Prints, at each size, the best CPU seconds of each over ``--repeat`` alternating rounds
and their ratio, and checks that both give the same values.

    python benchmarks/bench_unique.py                    # 100,000, 1,000,000, 10,000,000
    python benchmarks/bench_unique.py --sizes 1000000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dflash_diag.arrays import unique_values


def best(fn, x: np.ndarray, repeat: int) -> tuple[float, np.ndarray]:
    times, out = [], None
    for _ in range(repeat):
        start = time.process_time()
        out = fn(x)
        times.append(time.process_time() - start)
    return min(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000,10000000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"numpy {np.__version__}")
    for n in (int(v) for v in args.sizes.split(",")):
        x = np.random.default_rng(0).permutation(n).astype(np.int64)
        t_np, a = best(np.unique, x, args.repeat)
        t_us, b = best(unique_values, x, args.repeat)
        assert np.array_equal(a, b)
        print(f"{n:>11,} distinct: np.unique {t_np:.3f} s, unique_values {t_us:.3f} s, "
              f"{t_np / max(t_us, 1e-9):.0f}x")  # fmt: skip


if __name__ == "__main__":
    main()
