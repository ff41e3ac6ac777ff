"""Print the figures README.md quotes for each run folder here (pandas and pyarrow only).

    python tests/data/trainer_runs/figures.py [NAME ...]

Per run: the optimizer steps; the steps that held a poison sample and how many of them have
a logged loss over the local median (a centred rolling median of the logged loss over
``WINDOW`` steps) and a robust z over 3, beside the same for the other steps; the median
excess of the poison steps' loss over that median; the token-weighted per-sample loss of
each source kind and of the poison per epoch (from ``sample_loss.parquet``); for a hidden
lr surge, the loss and grad norm around it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
WINDOW = 25


def logged(run: Path) -> pd.DataFrame:
    """The logged steps of ``trainer_state.json``: step, loss, grad_norm, learning_rate."""
    state = json.loads((run / "trainer_state.json").read_text())
    rows = [h for h in state["log_history"] if "loss" in h and "step" in h]
    cols = ["step", "loss", "grad_norm", "learning_rate"]
    return pd.DataFrame(rows)[cols].set_index("step")


def spike_figures(run: Path, truth: dict) -> str:
    """How many poison steps are over the local median, against the other steps."""
    log = logged(run)
    local = log["loss"].rolling(WINDOW, center=True, min_periods=1).median()
    over = log["loss"] > local
    sl = pd.read_parquet(run / "sample_loss.parquet")
    bad = set(truth["poison"]["ids"])
    psteps = sorted(set(sl.loc[sl.sample_id.isin(bad), "step"]))
    if not psteps:
        high = int((robust_z(log["loss"]) > 3).sum())
        return f"{len(log)} steps; no poison; {over.mean():.0%} over the local median; z>3: {high}"
    others = log.index.difference(psteps)
    excess = (log.loc[psteps, "loss"] / local[psteps] - 1).median()
    high = robust_z(log["loss"]) > 3
    return (
        f"{len(log)} steps; {len(psteps)} steps hold a poison sample, "
        f"{int(over[psteps].sum())} of them over the local median ({over[psteps].mean():.0%}; "
        f"other steps {over[others].mean():.0%}); median excess {excess:+.0%}; "
        f"robust z > 3: {int(high[psteps].sum())} poison steps, {int(high[others].sum())} others"
    )


def robust_z(x: pd.Series) -> pd.Series:
    """``(x - rolling median) / (1.4826 x rolling MAD)``, centred, ``WINDOW`` steps."""
    med = x.rolling(WINDOW, center=True, min_periods=1).median()
    mad = (x - med).abs().rolling(WINDOW, center=True, min_periods=1).median()
    return (x - med) / (1.4826 * mad)


def kind_losses(run: Path, truth: dict) -> pd.DataFrame:
    """Token-weighted per-sample loss per epoch, by source kind and for the poison."""
    sl = pd.read_parquet(run / "sample_loss.parquet")
    m = pd.read_parquet(run / "manifest.parquet")
    sl = sl.merge(m[["sample_id", "category"]], on="sample_id")
    sl["kind"] = sl["category"].astype(str)
    sl.loc[sl.sample_id.isin(truth["poison"]["ids"]), "kind"] = "POISON"
    per_epoch = int(json.loads((run / "trainer_state.json").read_text())["max_steps"]) // 4
    sl["epoch"] = (sl.step - 1) // per_epoch + 1
    sl["w"] = sl.loss * sl.targets
    g = sl.groupby(["epoch", "kind"])[["w", "targets"]].sum()
    return (g.w / g.targets).unstack("kind").round(2)


def surge_figures(run: Path, truth: dict) -> str:
    """Loss and grad norm before, during and after a hidden surge."""
    s = truth["lr_surge"]
    log = logged(run)
    a, b = min(s["steps"]), max(s["steps"])
    parts = []
    for label, lo, hi in (
        ("before", a - 20, a - 1),
        ("surge", a, b),
        ("+1..10", b + 1, b + 10),
        ("+11..50", b + 11, b + 50),
    ):
        w = log.loc[lo:hi]
        parts.append(f"{label}: loss {w.loss.mean():.2f}, grad_norm {w.grad_norm.mean():.2f}")
    return "; ".join(parts)


def main(names: list[str]) -> None:
    runs = [HERE / n for n in names] or sorted(p.parent for p in HERE.glob("*/truth.json"))
    for run in runs:
        truth = json.loads((run / "truth.json").read_text())
        print(f"== {run.name}: {spike_figures(run, truth)}")
        if truth["lr_surge"]:
            print(surge_figures(run, truth))
        print(kind_losses(run, truth).to_string())


if __name__ == "__main__":
    main(sys.argv[1:])
