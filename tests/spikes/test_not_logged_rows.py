"""A NaN where a metric was simply not logged is not a numerical failure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dflash_diag.logs import read_log
from dflash_diag.spikes.detect import detect_spikes

DATA = Path(__file__).resolve().parent.parent / "data"


def steady(n: int = 120) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    return pd.DataFrame(
        {
            "step": np.arange(n),
            "loss": 2.0 + 0.02 * rng.standard_normal(n),
            "lr": np.full(n, 3e-4),
            "eval_loss": np.nan,
        }
    )


def test_an_eval_only_row_is_not_an_event():
    t = steady()
    t.loc[50, ["loss", "lr"]] = np.nan
    t.loc[50, "eval_loss"] = 2.1
    kinds = [e.kind for e in detect_spikes(t).events]
    assert "non-finite" not in kinds


def test_a_logged_nan_on_a_training_row_is_an_event():
    t = steady()
    t.loc[50, "loss"] = np.nan  # lr is still there: the trainer printed loss=nan
    events = [(e.kind, e.start_step) for e in detect_spikes(t).events]
    assert ("non-finite", 50) in events


def test_modded_nanogpt_validation_row_at_step_0_is_not_flagged():
    run = read_log(DATA / "real_logs" / "gpt_lab_diffusion_modded_nanogpt_train.log")
    assert np.isnan(run.table.loc[run.table["step"] == 0, "loss"]).all()  # the trap is there
    detection = detect_spikes(run.table)
    assert all(e.kind != "non-finite" for e in detection.events)
    assert detection.n_points == int(run.table["loss"].notna().sum())
