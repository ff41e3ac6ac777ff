"""Six real public training logs and the real run: each reads into the right table.

The expected figures are the ones stated in tests/data/real_logs/SOURCES.md and
tests/data/real_run/README.md (computed there from the files, not by this code).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from dflash_diag.data import CANONICAL_COLUMNS
from dflash_diag.logs import read_log

DATA = Path(__file__).resolve().parents[1] / "data"
REAL = DATA / "real_logs"


def _contract(run):
    """The table contract every RunLog keeps."""
    t = run.table
    assert list(t.columns[: len(CANONICAL_COLUMNS)]) == list(CANONICAL_COLUMNS)
    assert t["step"].dtype == np.int64
    assert t["step"].is_monotonic_increasing and t["step"].is_unique
    for c in t.columns[1:]:
        assert t[c].dtype == np.float64, c


def test_trainer_state_every_step_one_row():
    run = read_log(REAL / "baize_tcm_qwen_lora_trainer_state.json")
    _contract(run)
    t = run.table
    assert run.format == "hf-state"
    assert len(t) == 6687 and t["step"].tolist() == list(range(1, 6688))
    assert t["loss"].notna().all() and t["grad_norm"].notna().all()
    first = t.iloc[0]
    assert (first["loss"], first["lr"], first["grad_norm"]) == (2.2619, 0.0, 0.6331137418746948)
    assert t["epoch"].max() == pytest.approx(9.0, abs=1e-6)
    assert not [c for c in t.columns if c.startswith("eval_")]


def test_trainer_state_eval_entries_in_their_own_columns():
    run = read_log(REAL / "whisper_large_v2_japanese_trainer_state.json")
    _contract(run)
    t = run.table.set_index("step")
    assert len(t) == 200 and t.index.min() == 25 and t.index.max() == 5000
    assert (np.diff(t.index) == 25).all()
    assert t["grad_norm"].isna().all()  # older Transformers: no grad_norm logged
    evals = t["eval_loss"].dropna()
    assert evals.index.tolist() == [1000, 2000, 3000, 4000, 5000]
    assert evals.round(3).tolist() == [0.321, 0.358, 0.394, 0.412, 0.42]
    # the eval entry at step 5000 did not overwrite the train loss logged there
    assert t.loc[5000, "loss"] == 0.0002
    assert run.skipped == {"summary": 1}


def test_llmc_train_and_val_in_separate_columns():
    run = read_log(REAL / "llmc_gpt2_124m_main.log")
    _contract(run)
    t = run.table.set_index("step")
    train = t["loss"].dropna()
    assert len(train) == 19552 and train.index.min() == 0 and train.index.max() == 19551
    assert t["val_loss"].notna().sum() == 80 and t["eval_acc"].notna().sum() == 79
    assert t.loc[0, "loss"] == 11.0116 and t.loc[0, "val_loss"] == 11.0095
    assert t.loc[1, "grad_norm"] == 15.18 and t["grad_norm"].max() == 15.18
    assert t.loc[19551, "lr"] == 0.0  # printed as 0.000000
    assert t.loc[11334, "loss"] == pytest.approx(3.667, abs=5e-4)


def test_modded_nanogpt_despite_traceback_and_no_final_newline():
    path = REAL / "gpt_lab_diffusion_modded_nanogpt_train.log"
    assert not path.read_bytes().endswith(b"\n")
    run = read_log(path)
    _contract(run)
    t = run.table.set_index("step")
    train = t["loss"].dropna()
    assert len(train) == 7151 and train.index.min() == 1 and train.index.max() == 7151
    assert t.loc[2280, "loss"] == pytest.approx(1.747, abs=5e-4)
    assert t.loc[2279, "loss"] == pytest.approx(0.0286, abs=5e-5)
    assert t["val_loss"].notna().sum() == 8 and t.loc[1000, "val_loss"] == 1.9176e-02
    assert t.loc[1, "train_time"] == pytest.approx(6.029)  # 6029ms, in seconds
    assert run.skipped.get("warning", 0) + run.skipped.get("traceback", 0) >= 5700


def test_nanogpt_bpc_and_eval_lines():
    run = read_log(REAL / "nanogpt_enwik8_char_bpc_wandb_output.log")
    _contract(run)
    t = run.table.set_index("step")
    train = t["loss"].dropna()
    assert len(train) == 501 and train.index.tolist() == list(range(0, 5001, 10))
    assert t.loc[0, "loss"] == 12.5435 and t.loc[5000, "loss"] == 1.5822
    # `step N: train loss X BPC, val loss Y BPC` is an evaluation line
    assert t["val_loss"].notna().sum() == 21 and t["eval_train_loss"].notna().sum() == 21
    assert t.loc[250, "eval_train_loss"] == 3.1345 and t.loc[250, "loss"] == 3.1895
    assert t.loc[0, "mfu"] == -1.0  # -100.00%


def test_tsv_step_loss():
    run = read_log(REAL / "shakespeare_gpt2_124m_step_loss.tsv")
    _contract(run)
    assert run.format == "csv"
    t = run.table
    assert len(t) == 457 and t["step"].iloc[0] == 10 and t["step"].iloc[-1] == 4570
    assert t["loss"].iloc[0] == 8.460716
    jump = t.set_index("step")["loss"]
    assert jump[930] - jump[920] == pytest.approx(4.989 - 3.989, abs=1e-3)


def test_real_run_with_known_schedule():
    run = read_log(DATA / "real_run" / "run.log")
    _contract(run)
    t = run.table
    assert len(t) == 488 and t["step"].tolist() == list(range(1, 489))
    first = t.iloc[0]
    assert first["loss"] == 5.5787 and first["acc"] == 0.0050 and first["lr"] == 2.5e-05
    assert first["tokens"] == 16282 and first["tok_per_s"] == 8100 and first["grad_norm"] == 1.289
    assert t["tokens"].max() <= 16384
    assert not math.isnan(t["epoch"].iloc[-1]) and t["epoch"].iloc[-1] == 1
    # the banner lines are not steps
    assert set(run.skipped) <= {"no_step", "text"}
    assert list(t.columns) == list(CANONICAL_COLUMNS)
