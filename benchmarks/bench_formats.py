"""How fast does ``read_log`` read each trainer's own log lines, against the
line-by-line parser on the same file?

Writes ``--lines`` lines in the shape each trainer prints (Megatron-LM's right-aligned
``iteration`` lines, SpecForge's ``Train - Step 50 [50/187500?]``, NeMo Automodel's
coloured levels, DeepSpec, nanoGPT, the HF Trainer's dict lines, JSON lines), then times
``read_lines`` with the fast path on and off (best of ``--repeat`` alternating rounds,
after one untimed round), checks that both give the same table, and prints the ratio of
the general parser's time to the fast path's.  The last column says which path read it:
``text`` (the line-shape fast path), ``json`` (pyarrow's JSON reader, for HF dict lines
once their quotes are JSON's) or ``general`` (neither applies).

    python benchmarks/bench_formats.py [--lines 100000] [--repeat 2] [--only megatron,...]
    python benchmarks/bench_formats.py --phases [--lines 100000] [--repeat 5]

``--phases`` times the JSON-lines fast path's parts on the ``jsonl`` shape instead (best
of ``--repeat``): the byte guards before Arrow (null, CR, warnings, one object per line),
the bracket guard (``too_nested``), Arrow's JSON reader, the per-column rules, and
``build_table``.  Their sum is about the fast path's time.
"""

from __future__ import annotations

import argparse

from common import alternating


def shapes(n: int, seed: int = 0, only: set[str] | None = None) -> dict[str, list[str]]:
    """``n`` lines of each trainer's shape (``only``: of those named), steps from 1."""
    import numpy as np

    rng = np.random.default_rng(seed)
    loss = 2 + rng.random(n)
    acc = rng.random(n)
    lr = 6e-4 * np.minimum(1.0, np.arange(1, n + 1) / 2000)

    def lines(fmt) -> list[str]:
        return [fmt(i, i + 1) for i in range(n)]

    makers = {
        "megatron": lambda: lines(
            lambda i, s: (
                f" [2026-03-02 14:{s // 60 % 60:02d}:{s % 60:02d}] iteration {s:8d}/"
                f" {n:8d} | consumed samples: {s * 256:12d} | elapsed time per iteration (ms):"
                f" {1200 + acc[i] * 100:.1f} | learning rate: {lr[i]:.6E} | global batch size:"
                f"   256 | lm loss: {loss[i]:.6E} | loss scale: 1.0 | grad norm: {1 + acc[i]:.3f}"
                " | number of skipped iterations:   0 | number of nan iterations:   0 |"
            )
        ),
        "specforge": lambda: lines(
            lambda i, s: (
                f"02/14/2026 10:{s // 60 % 60:02d}:{s % 60:02d} - INFO - "
                f"specforge.utils - Train - Step {s} [{s}/187500?], Loss: {loss[i] + 4:.4f}, "
                f"Acc: {acc[i]:.4f}"
            )
        ),
        "nemo (colour)": lambda: lines(
            lambda i, s: (
                f"2026-05-02 14:{s // 60 % 60:02d}:{s % 60:02d} | \x1b[32mINFO\x1b[0m"
                f" | nemo_automodel.recipes.llm.train_dflash | epoch={s // 100_000} step={s} "
                f"loss={loss[i]:.4f} acc={acc[i]:.4f} lr={lr[i]:.4g}"
            )
        ),
        "deepspec": lambda: lines(
            lambda i, s: (
                f"epoch={s // 10_000} step={s}/{n} loss={loss[i]:.4f} | "
                f"elapsed={s * 0.07:.1f}min | remaining={(n - s) * 0.07:.1f}min"
            )
        ),
        "nanogpt": lambda: lines(
            lambda i, s: (
                f"iter {s}: loss {loss[i]:.4f}, time {100 + acc[i] * 10:.2f}ms, "
                f"mfu {30 + acc[i]:.2f}%"
            )
        ),
        "hf dict": lambda: lines(
            lambda i, s: (
                f"{{'loss': {loss[i]:.4f}, 'grad_norm': {1 + acc[i]:.4f}, "
                f"'learning_rate': {lr[i]:.4e}, 'epoch': {s / n * 3:.2f}}}"
            )
        ),
        "jsonl": lambda: lines(
            lambda i, s: (
                f'{{"step": {s}, "loss": {loss[i]:.4f}, "lr": {lr[i]:.3e}, '
                f'"grad_norm": {1 + acc[i]:.3f}}}'
            )
        ),
    }
    return {k: make() for k, make in makers.items() if not only or k in only}


def json_phases(n: int, repeat: int) -> list[tuple[str, float]]:
    """Best time in seconds of each part of the JSON-lines fast path on ``n`` lines."""
    import pyarrow as pa
    import pyarrow.json as pj

    from dflash_diag.logs.fast import jsonlines
    from dflash_diag.logs.normalise import build_table

    data = ("\n".join(shapes(n, only={"jsonl"})["jsonl"]) + "\n").encode()
    frame, _ = jsonlines.json_records(data)

    def guards():
        for needle in (b"null", b"\r", b"Warning:", b"warnings.warn("):
            data.find(needle)
        return data.count(b"\n{") == data.count(b"\n") - 1

    def arrow():
        opts = pj.ParseOptions(newlines_in_values=False)
        return pj.read_json(pa.py_buffer(memoryview(data)), parse_options=opts)

    parts = {
        "byte guards": guards,
        "too_nested": lambda: jsonlines.too_nested(data),
        "arrow read_json": arrow,
        "json_records (all)": lambda: jsonlines.json_records(data),
        "build_table": lambda: build_table([], path="x", fmt="jsonl", extra=[frame], n_lines=n),
        "read_json_lines": lambda: jsonlines.read_json_lines("x", data, None, 0),
    }
    best = alternating(repeat, *parts.values())
    return [(name, t) for name, (t, _) in zip(parts, best, strict=True)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated shapes (default: all)")
    ap.add_argument("--phases", action="store_true", help="time the JSON fast path's parts")
    args = ap.parse_args()
    if args.phases:
        for name, t in json_phases(args.lines, args.repeat):
            print(f"{name:<20} {t * 1000:7.1f} ms")
        return
    import pandas as pd

    from dflash_diag.logs.fast import jsonlines
    from dflash_diag.logs.fast import lineshape as fastpath
    from dflash_diag.logs.io import RawLog
    from dflash_diag.logs.text import read_lines

    only = {x.strip() for x in args.only.split(",") if x.strip()}
    print(f"{'shape':<14} {'MB':>5} {'fast path':>10} {'general':>9} {'x faster':>9}  path")
    for name, lines in shapes(args.lines, only=only or None).items():
        raw = RawLog(f"{name}.log", ("\n".join(lines) + "\n").encode())
        (t_fast, fast), (t_slow, slow) = alternating(
            args.repeat,
            lambda raw=raw: read_lines(raw, fast=True),
            lambda raw=raw: read_lines(raw, fast=False),
        )
        pd.testing.assert_frame_equal(fast.table, slow.table)
        if jsonlines.read_json_lines(raw.path, raw.data, None, 0) is not None:
            path = "json"
        elif jsonlines.dict_line_records(raw.data) is not None:
            path = "json (dict lines)"
        else:
            path = "text" if fastpath.fast_records(raw.data, {}) is not None else "general"
        print(
            f"{name:<14} {len(raw.data) / 1e6:5.1f} {t_fast:9.2f}s {t_slow:8.2f}s "
            f"{t_slow / t_fast:8.1f}x  {path}"
        )


if __name__ == "__main__":
    main()
