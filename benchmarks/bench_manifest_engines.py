"""GB/s of ``manifest``'s two engines, local and Ray, at two sizes of a corpus of Parquet
shards, for token-id lists and for text counted by a BPE ``tokenizer.json``.

Builds, in a temporary folder, 16 Parquet shards per size: ``input_ids`` lists of
long-tailed lengths (median ~1.5k ids, int32) for the ids case, or text of the same
token counts for the text case (a byte-level BPE of 8k tokens trained here on the same
words), then times ``read_manifest`` (local engine) and ``ray_manifest`` (Ray engine,
``ray.init(num_cpus=N)`` on this machine, started once, before the timings) on the same
shards, checks both give the same manifest, and prints GB/s of Parquet read (the shards'
bytes on disk) and of the uncompressed column (ids: 4 bytes an id; text: UTF-8 bytes).

    python benchmarks/bench_manifest_engines.py          # ids 0.1, 0.4 GB; text 0.01, 0.04 GB
    python benchmarks/bench_manifest_engines.py --quick  # a fifth of those
    python benchmarks/bench_manifest_engines.py --cpus 2 --gb 0.5 2 --case ids

docs/storage.md scales these to a TB and a cluster.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from common import long_tailed_lengths

from dflash_diag.manifest import read_manifest
from dflash_diag.manifest.ray_engine import connect, ray_manifest

SHARDS = 16
WORDS = np.array(["loss", "spike", "batch", "token", "the", "a", "of", "gradient", "noise"])


def ids_shards(folder: Path, gb: float, seed: int = 0) -> int:
    """Shards of ``input_ids`` lists, ~``gb`` GB of ids in all; the column's bytes."""
    n = max(SHARDS, int(gb * 1e9 / 4 / 1700))
    lengths = long_tailed_lengths(n, seed)
    rng = np.random.default_rng(seed)
    for k, part in enumerate(np.array_split(lengths, SHARDS)):
        offsets = np.zeros(len(part) + 1, np.int32)
        np.cumsum(part, out=offsets[1:])
        ids = pa.array(rng.integers(0, 32_000, int(offsets[-1]), dtype=np.int32))
        column = pa.ListArray.from_arrays(pa.array(offsets), ids)
        pq.write_table(pa.table({"input_ids": column}), folder / f"part-{k:05d}.parquet")
    return int(lengths.sum()) * 4


def text_shards(folder: Path, gb: float, seed: int = 0) -> int:
    """Shards of a ``text`` column, ~``gb`` GB of UTF-8 in all; the column's bytes."""
    rng = np.random.default_rng(seed)
    n = max(SHARDS, int(gb * 1e9 / 6 / 1500))
    words = long_tailed_lengths(n, seed) // 2 + 1
    total = 0
    for k, part in enumerate(np.array_split(words, SHARDS)):
        pool = WORDS[rng.integers(0, len(WORDS), int(part.sum()))]
        cuts = np.cumsum(part)[:-1]
        texts = [" ".join(w) for w in np.split(pool, cuts)]
        total += sum(len(t) for t in texts)
        pq.write_table(pa.table({"text": texts}), folder / f"part-{k:05d}.parquet")
    return total


def bpe(path: Path) -> Path:
    """A byte-level BPE tokenizer.json of 8k tokens, trained on the benchmark's words."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    rng = np.random.default_rng(1)
    sample = [" ".join(WORDS[rng.integers(0, len(WORDS), 40)]) for _ in range(2000)]
    tok.train_from_iterator(sample, trainers.BpeTrainer(vocab_size=8000, show_progress=False))
    tok.save(str(path))
    return path


def disk_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.parquet"))


def timed(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` and its wall time (s)."""
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def one_size(tmp: Path, case: str, gb: float, tokenizer: Path | None) -> None:
    folder = tmp / f"{case}-{gb}"
    folder.mkdir()
    raw = (ids_shards if case == "ids" else text_shards)(folder, gb)
    on_disk = disk_bytes(folder)
    kw = {"tokenizer": tokenizer} if case == "text" else {}
    local, t_local = timed(read_manifest, folder, **kw)
    res, t_ray = timed(ray_manifest, folder, **kw)
    assert res.manifest.lengths.tolist() == local.lengths.tolist(), "the engines differ"
    for name, t in (("local", t_local), ("ray", t_ray)):
        print(
            f"{case:4s} {on_disk / 1e9:.3g} GB on disk ({raw / 1e9:.3g} GB {case}), "
            f"{len(local):,} samples  {name:5s} {t:7.2f} s  "
            f"{on_disk / 1e9 / t:.3g} GB/s on disk  {raw / 1e9 / t:.3g} GB/s {case}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, nargs=2, default=(0.1, 0.4), help="ids: the two sizes")
    ap.add_argument(
        "--text-gb", type=float, nargs=2, default=(0.01, 0.04), help="text: the two sizes"
    )
    ap.add_argument("--quick", action="store_true", help="a fifth of the sizes")
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="Ray's CPUs")
    ap.add_argument("--case", choices=("ids", "text", "both"), default="both")
    args = ap.parse_args()
    scale = 0.2 if args.quick else 1.0
    sizes = {"ids": [g * scale for g in args.gb], "text": [g * scale for g in args.text_gb]}
    ray = connect(None, num_cpus=args.cpus)  # (started once: its start-up is not timed)
    print(f"ray {ray.__version__}, {args.cpus} CPUs; this machine: {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        tok = bpe(Path(tmp) / "tokenizer.json")
        cases = ("ids", "text") if args.case == "both" else (args.case,)
        for case in cases:
            for gb in sizes[case]:
                one_size(Path(tmp), case, gb, tok if case == "text" else None)
    ray.shutdown()


if __name__ == "__main__":
    main()
