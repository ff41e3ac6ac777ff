"""Write logs with Python's ``logging`` module, configured as each trainer configures it.

Run from the repository root: ``python tests/data/logs/written/write_logging.py``.
These trainers cannot run here (fairseq needs its CUDA/C++ build and a dataset; the
others are private trainers seen only in users' logs), so their *logging* is
reproduced: the same logging configuration (format string, logger names) with
messages built as the trainer builds them.  They are look-alikes of the trainers'
output, written by the real ``logging`` module; their values come from :func:`truth`.
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

HERE = Path(__file__).resolve().parent


def truth(step: int) -> dict[str, float]:
    """The values logged at ``step`` (from 1)."""
    return {"loss": round(9.5 - 0.01 * step, 3), "lr": round(1e-6 * step, 9)}


def _logger(stream: io.StringIO, fmt: str, name: str) -> logging.Logger:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(fmt))
    log = logging.getLogger(name)
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False
    return log


def fairseq_hydra(path: Path, updates: int = 600, every: int = 100, epoch_len: int = 300) -> None:
    """fairseq under hydra: hydra's ``job_logging`` format ``[%(asctime)s][%(name)s]
    [%(levelname)s] - %(message)s``; ``JsonProgressBar.log`` prints ``json.dumps`` of the
    stats with every value formatted as a string (``format_stat``), under the logger
    renamed to the bar's tag (``train_inner`` per ``log_interval`` updates, ``train``
    and ``valid`` at each epoch's end, their keys prefixed with the tag)."""
    out = io.StringIO()
    fmt = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
    log = _logger(out, fmt, "fairseq.distributed.utils")
    for r in range(8):
        log.info("distributed init (rank %d): tcp://localhost:19104", r)
    nccl = _logger(out, "%(message)s", "nccl")
    nccl.info(
        "gpu-07:1234:1234 [3] NCCL INFO comm 0x5614 rank 3 nranks 8 cudaDev 3 - Init COMPLETE"
    )
    trainer = _logger(out, fmt, "fairseq.trainer")
    trainer.info("begin training epoch 1")
    for u in range(every, updates + 1, every):
        v = truth(u)
        stats = {
            "epoch": 1 + (u - 1) // epoch_len, "update": round(u / epoch_len, 3),
            "loss": f"{v['loss']:.3f}", "ppl": f"{2 ** v['loss']:.2f}", "wps": "2578.2",
            "ups": "1.2", "wpb": "2048", "bsz": "64", "num_updates": str(u),
            "lr": f"{v['lr']:g}", "gnorm": "1.234", "train_wall": "85", "wall": str(u),
        }  # fmt: skip
        _logger(out, fmt, "train_inner").info(json.dumps(stats))
        if u % epoch_len == 0:
            epoch = {"epoch": u // epoch_len, "train_loss": "8.111", "train_ppl": "276.4",
                     "train_num_updates": str(u), "train_lr": f"{v['lr']:g}", "train_wall": "99"}  # fmt: skip
            _logger(out, fmt, "train").info(json.dumps(epoch))
            valid = {"epoch": u // epoch_len, "valid_loss": "7.5", "valid_ppl": "181.0",
                     "valid_num_updates": str(u)}  # fmt: skip
            _logger(out, fmt, "valid").info(json.dumps(valid))
    path.write_text(out.getvalue(), encoding="utf-8")


def step_head(path: Path, steps: int = 5) -> None:
    """A trainer printing a tab-separated head ``[step=N/15000,epoch=0]``, the host and
    the ``module:line`` it logged from, then one indented ``name=value`` line per metric
    (``%(message)s`` format, one ``logger.info`` per record)."""
    out = io.StringIO()
    log = _logger(out, "%(message)s", "stephead")
    for s in range(1, steps + 1):
        v = truth(s)
        lines = [f"[step={s}/15000,epoch=0]\tgpu-node-07\ttrainer:212"]
        lines += [f"\tloss={v['loss']}", f"\tlr={v['lr']:.3e}", "\tgrad_norm=0.75", "\ttps=2,578"]
        log.info("\n".join(lines))
    path.write_text(out.getvalue(), encoding="utf-8")


def sft_jsonl(path: Path, steps: int = 20, total: int = 2353) -> None:
    """An SFT framework's ``logging.jsonl``: one JSON object per log event, the step as
    ``"global_step/max_steps": "17/2353"`` and numbers as strings."""
    rows = []
    for s in range(1, steps + 1):
        v = truth(s)
        rows.append(json.dumps({"loss": f"{v['loss']:.4f}", "grad_norm": "1.5",
                                "learning_rate": f"{v['lr']:.3e}", "epoch": f"{s / total:.4f}",
                                "global_step/max_steps": f"{s}/{total}",
                                "percentage": f"{100 * s / total:.2f}%",
                                "elapsed_time": "1h02m", "remaining_time": "0:14:07"}))  # fmt: skip
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")


def epochs_only(path: Path, epochs: int = 20) -> None:
    """A small trainer logging one line per epoch and nothing finer
    (``%(asctime)s - %(levelname)s - %(message)s``)."""
    out = io.StringIO()
    log = _logger(out, "%(asctime)s - %(levelname)s - %(message)s", "epochs")
    log.info("Training on 2,578 samples")
    for e in range(1, epochs + 1):
        log.info("Epoch %d: Train Loss=%.2f, Val Loss=%.2f", e, 1.0 / e, 1.1 / e)
    path.write_text(out.getvalue(), encoding="utf-8")


def appended_runs(path: Path, totals: tuple[int, ...] = (60, 40, 80)) -> None:
    """Several runs appended to one file (a sweep's ``>> train.log``): each prints a
    banner, then ``step N/M`` lines from step 10 with its own total; a resume inside
    the second run (back to step 20, same total) is no new run."""
    out = io.StringIO()
    log = _logger(out, "%(asctime)s %(levelname)s %(message)s", "runs")
    for k, total in enumerate(totals):
        log.info("===== run %d: lr sweep, max_steps=%d =====", k + 1, total)
        steps = list(range(10, total + 1, 10))
        if k == 1:
            steps = steps[:3] + list(range(20, total + 1, 10))  # a resume from step 20
        for s in steps:
            extra = " | acc 0.50" if k == 0 else ""
            log.info("step %d/%d | loss %.3f%s", s, total, 10 * (k + 1) - s / 100, extra)
    path.write_text(out.getvalue(), encoding="utf-8")


def people_numbers(path: Path) -> None:
    """Numbers as people print them: thousands separators, k/M/G, percentages,
    ``1h02m`` durations (``%(message)s``)."""
    out = io.StringIO()
    log = _logger(out, "%(message)s", "numbers")
    for s in range(1, 4):
        log.info("iter %d/100 | loss 2.5 | tps: 2,578 | tokens 1.2k | params 3.4M | "
                 "mfu 45%% | elapsed 1h02m | eta 3m12s", s)  # fmt: skip
    path.write_text(out.getvalue(), encoding="utf-8")


WRITERS = {
    "fairseq_hydra.log": fairseq_hydra,
    "step_head.log": step_head,
    "sft_logging.jsonl": sft_jsonl,
    "epochs_only.log": epochs_only,
    "appended_runs.log": appended_runs,
    "people_numbers.log": people_numbers,
}

if __name__ == "__main__":
    for name, write in WRITERS.items():
        write(HERE / name)
