"""The vectorised fast path gives exactly the general parser's table."""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
import pytest

from dflash_diag.logs import fastpath
from dflash_diag.logs.io import read_bytes
from dflash_diag.logs.text import read_lines

DATA = Path(__file__).resolve().parents[1] / "data"
TEXT_LOGS = [
    DATA / "real_run" / "run.log",
    DATA / "real_logs" / "llmc_gpt2_124m_main.log",
    DATA / "real_logs" / "gpt_lab_diffusion_modded_nanogpt_train.log",
    DATA / "real_logs" / "nanogpt_enwik8_char_bpc_wandb_output.log",
    *sorted((DATA / "logs").glob("*.log")),
]


@pytest.fixture
def eager(monkeypatch):
    """Use the fast path on small logs too."""
    monkeypatch.setattr(fastpath, "FAST_MIN_LINES", 1)
    monkeypatch.setattr(fastpath, "MIN_MATCHES", 1)


def same(raw):
    fast = read_lines(raw, fast=True)
    slow = read_lines(raw, fast=False)
    pd.testing.assert_frame_equal(fast.table, slow.table)
    assert (fast.restarts, fast.ranks, fast.skipped, fast.n_lines, fast.format) == (
        slow.restarts,
        slow.ranks,
        slow.skipped,
        slow.n_lines,
        slow.format,
    )
    return fast


@pytest.mark.parametrize("path", TEXT_LOGS, ids=lambda p: p.name)
def test_fast_path_equals_general_parser(path, eager):
    same(read_bytes(path))


def _mixed_log(n: int, seed: int) -> bytes:
    """Lines of one template with varying suffixes, nan/inf, noise, a resume, a cut end."""
    rnd = random.Random(seed)
    out = ["== banner ==", "config: {'lr': 6e-4}"]
    step = 0
    for i in range(n):
        step = step - 40 if i == n // 2 else step + 1  # a resume
        loss = rnd.choice([f"{rnd.uniform(0, 9):.4f}", "nan", "inf", f"{rnd.uniform(0, 1):.3e}"])
        tps = rnd.choice([f"{rnd.uniform(1, 99):.1f}K", f"{rnd.uniform(1, 9):.2f}M", "980"])
        acc = f"{rnd.uniform(0, 100):.1f}%"
        out.append(
            f"2026-03-02 14:03:{i % 60:02d},{i % 1000:03d} | INFO | dflash.train | epoch=0 "
            f"step={step}/3000 loss={loss} acc={acc} lr={rnd.uniform(0, 1e-3):.2e} "
            f"grad_norm={rnd.uniform(0, 5):.2f} ntok={rnd.randint(1, 70000)} tok/s={tps}"
        )
        r = rnd.random()
        if r < 0.02:
            out.append("2026-03-02 14:03:11,204 | WARNING | dflash.train | step=1 loss=99 slow")
        elif r < 0.03:
            out += ["Traceback (most recent call last):", '  File "x.py", line 1', "E: step=2"]
        elif r < 0.04:
            out.append(f"2026-03-02 14:03:11,204 | INFO | dflash.eval | eval step={step} loss=1.5")
        elif r < 0.05:
            out.append("")
    return ("\n".join(out) + "\n").encode() + b"2026-03-02 14:03:11,204 | INFO | dflash.tr"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fast_path_on_a_mixed_log(seed, eager, tmp_path):
    p = tmp_path / "mixed.log"
    p.write_bytes(_mixed_log(3000, seed))
    run = same(read_bytes(p))
    assert run.restarts and run.skipped["traceback"] > 0
    assert (run.table["tok_per_s"] >= 980).all()


def test_fast_path_is_used_on_a_large_log(tmp_path):
    p = tmp_path / "big.log"
    p.write_bytes(_mixed_log(fastpath.FAST_MIN_LINES + 10, 3))
    got = fastpath.fast_records(p.read_bytes(), {})
    assert got is not None
    frame, rest = got
    assert len(frame) > 0.9 * fastpath.FAST_MIN_LINES
    assert len(rest) < 0.1 * fastpath.FAST_MIN_LINES


def test_fast_path_keeps_per_position_and_rank_fields_apart(eager, tmp_path):
    lines = []
    for step in range(1, 400):
        pos = step % 3
        lines.append(f"Train - Step {step} [{step}/999?], position {pos},  Acc: {pos / 10:.2f}")
        for rank in (0, 1):
            lines.append(f"rank={rank} step={step} loss={step / 100 + rank:.2f}")
    p = tmp_path / "positions.log"
    p.write_text("\n".join(lines) + "\n")
    assert fastpath.fast_records(p.read_bytes(), {}) is not None  # the rank lines' template
    run = same(read_bytes(p))
    t = run.table.set_index("step")
    assert t.loc[5, "acc_2"] == 0.2 and t.loc[6, "acc_0"] == 0.0 and t.loc[4, "acc_1"] == 0.1
    assert run.ranks == (0, 1) and t.loc[5, "loss"] == 0.05


def test_fast_path_leaves_per_position_lines_to_the_general_parser(eager, tmp_path):
    lines = [
        f"Eval - Step {s} [{s}/9?], position {pos},  Acc: {pos / 10:.2f}"
        for s in range(1, 300)
        for pos in range(3)
    ]
    p = tmp_path / "eagle3.log"
    p.write_text("\n".join(lines) + "\n")
    t = same(read_bytes(p)).table.set_index("step")
    assert t.loc[7, ["eval_acc_0", "eval_acc_1", "eval_acc_2"]].tolist() == [0.0, 0.1, 0.2]
