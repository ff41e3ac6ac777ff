"""Writes the small logs the compare CLI tests read (run: python make_logs.py here).

Provenance: synthetic, deterministic (numpy default_rng with fixed seeds), written for
dflash-diag's compare tests in the key=value trainer format (``step=10 loss=2.31
acc=0.12 lr=1.0e-04``).  The recipe mimics the story's: linear warmup to a 6e-4 peak,
acc near 0 through warmup and rising after, loss falling.

- v1.log: a finished baseline, steps 1..1500 every 5, warmup 600 steps.
- v2.log: like v1 (another seed) but without acc (a metric missing in one baseline).
- run.log: the run in question, same recipe, logged to step 400 (still in warmup).
- low.log: like run but acc 0.03 lower from step 100 on (below the band).
- late.log: steps 2000..2500 only (shares no step range with v1).
- slow.log: warmup 1200 steps; its curves follow the fraction of warmup done, so it is
  below v1 by step and within by --align warmup.
- hf_run.log: one run as the HF Trainer prints it without the progress bar (dict lines,
  ``logging_steps`` 10, steps 10..1500, warmup 600; an eval line every 100 steps): the
  records carry no step, so a reader numbers them 1, 2, ... by line.
- hf_run_steps.log: the same numbers with their steps (``step=10 loss=...``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
PEAK = 6e-4


def progress(steps: np.ndarray, warmup: int) -> np.ndarray:
    """Position on v1's clock (warmup 600): fraction of warmup, then steps after it."""
    frac = steps / warmup
    return np.where(frac <= 1, frac * 600, 600 + (steps - warmup))


def write(name: str, steps: np.ndarray, warmup: int, seed: int, acc_shift=0.0, acc=True):
    rng = np.random.default_rng(seed)
    x = progress(steps, warmup)
    lr = PEAK * np.minimum(steps / warmup, 1.0)
    a = 0.005 + 0.04 * (x / 600) ** 2 + np.where(x > 600, 0.5 * (1 - np.exp(-(x - 600) / 400)), 0)
    a = a + rng.normal(0, 0.004, steps.size) + np.where(steps >= 100, acc_shift, 0.0)
    loss = 0.9 + 2.5 * np.exp(-x / 300) + rng.normal(0, 0.02, steps.size)
    lines = []
    for i, s in enumerate(steps):
        fields = [f"step={s}", f"loss={loss[i]:.4f}"]
        if acc:
            fields.append(f"acc={max(a[i], 0.0):.4f}")
        fields.append(f"lr={lr[i]:.3e}")
        lines.append(" ".join(fields))
    (HERE / name).write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_hf(steps: np.ndarray, warmup: int, seed: int, eval_every: int = 100) -> None:
    """hf_run.log (HF dict lines, no step) and hf_run_steps.log (the same, with steps)."""
    rng = np.random.default_rng(seed)
    lr = PEAK * np.minimum(steps / warmup, 1.0)
    loss = 0.9 + 2.5 * np.exp(-steps / 300) + rng.normal(0, 0.02, steps.size)
    grad = 0.6 + 0.3 * np.exp(-steps / 200) + rng.normal(0, 0.03, steps.size)
    evals = 0.95 + 2.5 * np.exp(-steps / 300) + rng.normal(0, 0.01, steps.size)
    hf, stepped = [], []
    for i, s in enumerate(steps):
        epoch = round(float(s) / steps[-1] * 3, 4)
        hf.append(
            f"{{'loss': {loss[i]:.4f}, 'grad_norm': {grad[i]:.4f}, "
            f"'learning_rate': {lr[i]:.3e}, 'epoch': {epoch}}}"
        )
        stepped.append(f"step={s} loss={loss[i]:.4f} grad_norm={grad[i]:.4f} lr={lr[i]:.3e}")
        if s % eval_every == 0:
            hf.append(f"{{'eval_loss': {evals[i]:.4f}, 'eval_runtime': 1.5, 'epoch': {epoch}}}")
            stepped.append(f"step={s} eval_loss={evals[i]:.4f}")
    (HERE / "hf_run.log").write_text("\n".join(hf) + "\n", encoding="utf-8")
    (HERE / "hf_run_steps.log").write_text("\n".join(stepped) + "\n", encoding="utf-8")


if __name__ == "__main__":
    write("v1.log", np.arange(1, 1501, 5), 600, seed=1)
    write("v2.log", np.arange(1, 1501, 5), 600, seed=2, acc=False)
    write("run.log", np.arange(1, 401, 5), 600, seed=3)
    write("low.log", np.arange(1, 401, 5), 600, seed=4, acc_shift=-0.03)
    write("late.log", np.arange(2000, 2501, 5), 600, seed=5)
    write("slow.log", np.arange(1, 2001, 5), 1200, seed=6)
    write_hf(np.arange(10, 1501, 10), 600, seed=7)
