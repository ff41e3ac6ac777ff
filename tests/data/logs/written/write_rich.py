"""Write RichHandler logs of ``key=value, key=value,`` records at several console widths.

Run from the repository root: ``python tests/data/logs/written/write_rich.py``.  Each
``rich_w<WIDTH>.log`` is what Python's logging with rich's own ``RichHandler`` prints
to a file console of that width (no colour); the records are a drafter trainer's
shape: ``step=N, loss=..., acc=..., lr=..., grad_norm=..., tok_per_s=...,``.
"""

from __future__ import annotations

import logging
import os
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.logging import RichHandler

HERE = Path(__file__).resolve().parent
WIDTHS = (60, 80, 120, 160, 200)
STEPS = int(os.environ.get("STEPS", "12"))


def truth(step: int) -> dict[str, float]:
    """The values logged at ``step`` (1-based)."""
    return {
        "loss": round(5.0 - 0.25 * step, 4),
        "acc": round(0.02 * step, 4),
        "lr": 1e-4 * step,
        "grad_norm": round(3.0 + 0.1 * step, 3),
    }


def write(width: int) -> Path:
    path = HERE / f"rich_w{width}.log"
    with path.open("w", encoding="utf-8") as f:
        console = Console(file=f, width=width, color_system=None, force_terminal=False)
        handler = RichHandler(console=console, log_time_format="[%X]", omit_repeated_times=True)
        log = logging.getLogger(f"rich{width}")
        log.handlers[:] = [handler]
        log.setLevel(logging.INFO)
        log.propagate = False
        log.info("Starting training: 12 steps, world size 1")
        for step in range(1, STEPS + 1):
            v = truth(step)
            log.info(
                "train: step=%d, epoch=0, loss=%.4f, acc=%.4f, lr=%.2e, grad_norm=%.3f, "
                "tok_per_s=%d,",
                step, v["loss"], v["acc"], v["lr"], v["grad_norm"], 25000 + step,
            )  # fmt: skip
        log.info("done")
    return path


if __name__ == "__main__":
    _ = datetime  # (rich stamps the real time: the files differ run to run in it only)
    for w in WIDTHS:
        write(w)
