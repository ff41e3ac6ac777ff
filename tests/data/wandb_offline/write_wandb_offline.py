"""Write the W&B offline run of this folder with the ``wandb`` library itself.

    WANDB_MODE=offline python tests/data/wandb_offline/write_wandb_offline.py

``wandb.init(mode="offline")`` in a temporary folder (no network, no login), 30 steps
of known values (``run_values``: a NaN loss at step 7, an infinite grad norm at step
8, a nested ``{"train": {"acc": ...}}``, a histogram and a string that make no
column, an evaluation loss every 10 steps), ``finish()``; then only the transaction
log ``run-<id>.wandb`` is kept, in its run folder's name, beside ``truth.json`` (the
per-step values a reader must give) and ``VERSIONS``.  Machine details are left out
of the run (``x_disable_meta``, ``x_disable_stats``, no git, no code, no
requirements).  The tests write a larger run the same way (``write_run``).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUN_ID = "dflashfx"
STEPS = range(1, 31)


def run_values(step: int) -> dict:
    """What ``run.log`` gets at ``step`` (floats exact in binary where it matters)."""
    row: dict = {
        "train/loss": 3.0 - step / 16,
        "train": {"acc": step / 64},
        "learning_rate": 1e-4 * min(1.0, step / 10),
        "grad_norm": 1.0 + step / 32,
    }
    if step == 7:
        row["train/loss"] = math.nan
    if step == 8:
        row["grad_norm"] = math.inf
    if step % 10 == 0:
        row["eval/loss"] = 3.5 - step / 16
    return row


def truth() -> dict[str, dict[str, float | str]]:
    """Per step, the columns a reader gives (``"nan"``/``"inf"`` as strings)."""
    out: dict[str, dict[str, float | str]] = {}
    for s in STEPS:
        v = run_values(s)
        row = {
            "loss": v["train/loss"],
            "acc": v["train"]["acc"],
            "lr": v["learning_rate"],
            "grad_norm": v["grad_norm"],
        }
        if "eval/loss" in v:
            row["eval_loss"] = v["eval/loss"]
        out[str(s)] = {k: (str(x) if not math.isfinite(x) else x) for k, x in row.items()}
    return out


def write_run(root: Path, steps=STEPS, extra=None, run_id: str = RUN_ID) -> Path:
    """An offline run written by ``wandb`` under ``root``; its run folder.  ``extra``:
    ``step -> dict`` logged beside :func:`run_values`."""
    # everything wandb writes (its run, its service's logs, caches) under root
    saved = {k: os.environ.get(k) for k in _ENV}
    os.environ.update({k: str(root / v) if v.startswith(".") else v for k, v in _ENV.items()})
    try:
        return _write(root, steps, extra or {}, run_id)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


_ENV = {
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "WANDB_DIR": ".",
    "WANDB_CACHE_DIR": ".cache",
    "WANDB_CONFIG_DIR": ".config",
    "WANDB_DATA_DIR": ".data",
}


def _write(root: Path, steps, extra: dict, run_id: str) -> Path:
    import wandb

    settings = wandb.Settings(
        x_disable_meta=True,
        x_disable_stats=True,
        x_disable_machine_info=True,
        save_code=False,
        disable_git=True,
        x_save_requirements=False,
        console="off",
        program="write_wandb_offline.py",
    )
    run = wandb.init(
        mode="offline",
        dir=str(root),
        project="dflash-diag",
        name="tiny-drafter",
        id=run_id,
        config={"lr": 1e-4, "batch_size": 8},
        settings=settings,
    )
    for s in steps:
        row = run_values(s)
        if s == 5:
            row["weights"] = wandb.Histogram([0.1, 0.2, 0.2, 0.5])
        if s == 6:
            row["note"] = "warmup"
        row.update(extra.get(s, {}))
        run.log(row, step=s)
    run.finish()
    wandb.teardown()  # (the wandb-core service writes the file's last blocks as it stops)
    (folder,) = (root / "wandb").glob(f"offline-run-*-{run_id}")
    return folder


def main() -> None:
    import google.protobuf
    import wandb

    with tempfile.TemporaryDirectory() as tmp:
        folder = write_run(Path(tmp))
        for old in HERE.glob("offline-run-*"):
            shutil.rmtree(old)
        dest = HERE / folder.name
        dest.mkdir()
        shutil.copy(folder / f"run-{RUN_ID}.wandb", dest)
    (HERE / "truth.json").write_text(json.dumps(truth(), indent=1) + "\n")
    (HERE / "VERSIONS").write_text(
        f"wandb {wandb.__version__}\nprotobuf {google.protobuf.__version__}\n"
        f"python {sys.version.split()[0]}\n"
    )


if __name__ == "__main__":
    main()
