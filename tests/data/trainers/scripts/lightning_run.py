"""A Lightning 2.x run on CPU: a tiny MLP on random data, a validation loader,
num_sanity_val_steps=2, validation every --val-every steps, 2 epochs.

Truth (cwd):
- truth.jsonl, from a Callback: after each training batch the optimizer step
  (trainer.global_step), the epoch, the bar's count (batch_idx + 1) and the progress-bar
  metrics, raw and as the bar prints them (Lightning's Tqdm.format_num, or rich's
  f"{v:.3f}");
  after each validation run (not the sanity check) its val_* metrics.
- truth_logger.jsonl, from a Logger whose log_metrics receives what CSVLogger and
  TensorBoardLogger receive: the metrics and the step Lightning gives them.
"""

import argparse
import json

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, RichProgressBar, TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger

p = argparse.ArgumentParser()
p.add_argument("--bar", choices=["tqdm", "rich"], default="tqdm")
p.add_argument("--steps-per-epoch", type=int, default=60)
p.add_argument("--val-every", type=int, default=20)
p.add_argument("--log-every", type=int, default=5)
a = p.parse_args()

L.seed_everything(0)


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        out = self.net(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        acc = (out.argmax(-1) == y).float().mean()
        self.log("train_loss", loss, prog_bar=True)
        self.log("train_acc", acc)
        self.log("lr", self.optimizers().param_groups[0]["lr"], prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("val_loss", loss, prog_bar=True)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=25, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def loader(n, shuffle):
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, 16, generator=g)
    y = (x[:, :4].argmax(-1) + (torch.rand(n, generator=g) < 0.2).long()) % 4
    return torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, y), batch_size=8, shuffle=shuffle
    )


def num(v):
    return v.item() if hasattr(v, "item") else v


def shown(v):
    if a.bar == "rich":
        return f"{v:.3f}" if isinstance(v, float) else str(v)
    return Tqdm.format_num(v) if isinstance(v, (int, float)) else str(v)


def write(name, rec):
    with open(name, "a") as f:
        f.write(json.dumps(rec) + "\n")


class Truth(Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        vals = {
            k: num(v) for k, v in trainer.progress_bar_metrics.items() if not k.startswith("val_")
        }
        write(
            "truth.jsonl",
            {
                "kind": "train",
                "step": trainer.global_step,
                "epoch": trainer.current_epoch,
                "bar": batch_idx + 1,
                "values": vals,
                "printed": {k: shown(v) for k, v in vals.items()},
            },
        )

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        vals = {k: num(v) for k, v in trainer.callback_metrics.items() if k.startswith("val_")}
        write(
            "truth.jsonl",
            {
                "kind": "eval",
                "step": trainer.global_step,
                "epoch": trainer.current_epoch,
                "values": vals,
                "printed": {k: shown(v) for k, v in vals.items()},
            },
        )


class Recorder(Logger):
    """Receives exactly what the CSV and TensorBoard loggers receive."""

    name = "recorder"
    version = 0

    def log_metrics(self, metrics, step=None):
        vals = {k: num(v) for k, v in metrics.items()}
        kind = "eval" if any(k.startswith("val_") for k in vals) else "train"
        write("truth_logger.jsonl", {"kind": kind, "step": step, "values": vals})

    def log_hyperparams(self, params, *args, **kwargs):
        pass


bar = RichProgressBar() if a.bar == "rich" else TQDMProgressBar()
n = a.steps_per_epoch * 8
trainer = L.Trainer(
    accelerator="cpu",
    max_epochs=2,
    val_check_interval=a.val_every,
    num_sanity_val_steps=2,
    log_every_n_steps=a.log_every,
    logger=[CSVLogger("logs", name="csv"), TensorBoardLogger("logs", name="tb"), Recorder()],
    callbacks=[bar, Truth()],
    enable_checkpointing=False,
    enable_model_summary=True,
)
trainer.fit(Tiny(), loader(n, True), loader(48, False))
