"""A plain PyTorch loop on CPU (a tiny MLP on random data) that logs through loguru,
rich's RichHandler or TensorBoard's SummaryWriter.

Every step: loss, lr, grad_norm; every 10th step also tok_per_s; every 50th step a
separate eval record (eval_loss, eval_ppl, eval_acc).  At step --nan-step a batch holds
an inf input, the loss is a real nan, and the loop logs it and skips the update (as
loops with a finite-loss guard do).  Every 40th step an informational message that is
not a record (long: it wraps in narrow rich consoles).

Writes truth.jsonl (cwd): each record as logged, with the step the loop passed and
the values as printed.
"""

import argparse
import json
import logging
import math
import sys
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--sink", choices=["loguru", "loguru-color", "rich", "tb"], required=True)
p.add_argument("--steps", type=int, default=300)
p.add_argument("--nan-step", type=int, default=137)
p.add_argument("--show-path", type=int, default=1)
p.add_argument("--show-level", type=int, default=1)
p.add_argument("--time-format", default=None)
p.add_argument("--datefmt", default="[%X]", help="basicConfig datefmt ('none': not given)")
a = p.parse_args()

torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
opt = torch.optim.AdamW(net.parameters(), lr=3e-3)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=a.steps)
w_true = torch.randn(32, 8)
x_eval = torch.randn(256, 32)
y_eval = x_eval @ w_true

if a.sink.startswith("loguru"):
    from loguru import logger

    if a.sink == "loguru-color":
        logger.remove()
        logger.add(sys.stderr, colorize=True)
    info = logger.info

elif a.sink == "rich":
    from rich.logging import RichHandler

    kw = {"show_path": bool(a.show_path), "show_level": bool(a.show_level)}
    if a.time_format:
        kw["log_time_format"] = a.time_format
    # rich's documented setup passes datefmt="[%X]", which wins over log_time_format
    datefmt = None if a.datefmt == "none" else a.datefmt
    logging.basicConfig(
        level="INFO", format="%(message)s", datefmt=datefmt, handlers=[RichHandler(**kw)]
    )
    info = logging.getLogger("train").info

else:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter("runs/tiny")


def truth(kind, step, printed):
    rec = {
        "kind": kind,
        "step": step,
        "values": {k: float(v) for k, v in printed.items()},
        "printed": printed,
    }
    with open("truth.jsonl", "a") as f:
        f.write(json.dumps(rec) + "\n")


def emit(kind, step, printed, scalars):
    """Log one record (text sinks: 'k=v' pairs as printed; tb: the scalars)."""
    if a.sink == "tb":
        for k, v in scalars.items():
            writer.add_scalar(k, v, step)
        printed = {k: repr(v) for k, v in scalars.items()}
    else:
        info(" ".join([f"step={step}"] + [f"{k}={v}" for k, v in printed.items()]))
    truth(kind, step, printed)


t0 = time.perf_counter()
for step in range(1, a.steps + 1):
    x = torch.randn(64, 32)
    if step == a.nan_step:
        x[3, 5] = float("inf")  # a corrupt sample: inf - inf inside the net gives nan
    y = x @ w_true
    loss = torch.nn.functional.mse_loss(net(x), y)
    opt.zero_grad()
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0).item()
    lr = sched.get_last_lr()[0]
    if math.isfinite(loss.item()):
        opt.step()
    sched.step()
    time.sleep(0.004)
    printed = {"loss": f"{loss.item():.4f}", "lr": f"{lr:.2e}", "grad_norm": f"{gn:.3f}"}
    scalars = {"train/loss": loss.item(), "train/lr": lr, "train/grad_norm": gn}
    if step % 10 == 0:
        tps = 64 * 32 * step / (time.perf_counter() - t0)
        printed["tok_per_s"] = f"{tps:.1f}"
        scalars["train/tok_per_s"] = tps
    emit("train", step, printed, scalars)
    if step % 40 == 0 and a.sink != "tb":
        info(
            f"saved checkpoint to checkpoints/step_{step:06d}/model.safetensors"
            " (weights, optimizer state and scheduler state; keeping the last 3)"
        )
    if step % 50 == 0:
        with torch.no_grad():
            el = torch.nn.functional.mse_loss(net(x_eval), y_eval).item()
            acc = (net(x_eval).argmax(-1) == y_eval.argmax(-1)).float().mean().item()
        printed = {
            "eval_loss": f"{el:.4f}",
            "eval_ppl": f"{math.exp(min(el, 50)):.2f}",
            "eval_acc": f"{acc:.3f}",
        }
        scalars = {"eval/loss": el, "eval/ppl": math.exp(min(el, 50)), "eval/acc": acc}
        emit("eval", step, printed, scalars)
if a.sink == "tb":
    writer.close()
