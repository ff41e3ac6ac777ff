"""One test per format: each hand-written fixture reads into the table its tool meant."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from dflash_diag.errors import InputError
from dflash_diag.logs import FORMATS, detect_format, read_log

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"


def col(run, name):
    return run.table.set_index("step")[name]


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("sample_run.log", "text"),
        ("specforge.log", "text"),
        ("nemo.log", "text"),
        ("deepspec.log", "text"),
        ("megatron.log", "text"),
        ("hf_trainer_stdout.log", "hf-dict"),
        ("lightning_metrics.csv", "csv"),
        ("wandb_export.csv", "csv"),
        ("metrics.jsonl", "jsonl"),
        ("rich_handler.log", "text"),
        ("torchrun_ranks.log", "text"),
        ("nonutf8_truncated.log", "text"),
    ],
)
def test_detected_format(name, fmt):
    assert detect_format(LOGS / name) == fmt
    assert read_log(LOGS / name).format == fmt


def test_sample_run_line_shape():
    run = read_log(LOGS / "sample_run.log")
    t = run.table.set_index("step")
    row = t.loc[1]
    assert (row["epoch"], row["loss"], row["acc"], row["lr"]) == (0, 4.95, 0.01, 2e-06)
    assert (row["grad_norm"], row["tokens"], row["tok_per_s"]) == (3.01, 61001, 25100)
    assert t.loc[12, "tok_per_s"] == 992  # no suffix after the resume: tokens per second


def test_specforge_steps_and_eval():
    run = read_log(LOGS / "specforge.log")
    t = run.table.set_index("step")
    assert t.index.tolist() == [50, 100]
    assert t.loc[50, "loss"] == 6.0 and t.loc[100, "acc"] == 0.1
    assert t.loc[100, "eval_loss"] == 6.9 and t.loc[100, "loss"] == 5.5
    # the tqdm refreshes carry metrics too, but the log names its steps: bars not used
    assert run.skipped["progress_bar"] == 10


def test_nemo_val_line_and_epoch_summary():
    run = read_log(LOGS / "nemo.log")
    t = run.table.set_index("step")
    assert t.index.tolist() == [100, 200, 300, 400, 500]
    assert t.loc[500, "loss"] == 2.0 and t.loc[500, "val_loss"] == 2.1
    assert t.loc[500, "val_accept_len"] == 3.2 and t["lr"].eq(0.0006).all()
    assert run.skipped == {"no_step": 1}  # `Finished epoch 1/3 completed_steps=500`


def test_deepspec_durations_in_seconds():
    t = read_log(LOGS / "deepspec.log").table.set_index("step")
    assert t.index.tolist() == [100, 200, 300, 400, 500, 600]
    assert t.loc[200, "loss"] == 2.7 and t.loc[200, "epoch"] == 1
    assert t.loc[100, "elapsed"] == pytest.approx(7.1 * 60)


def test_megatron_padded_iteration_and_validation():
    t = read_log(LOGS / "megatron.log").table.set_index("step")
    assert t.index.tolist() == [10, 20, 30, 40, 50]
    assert t.loc[10, "loss"] == pytest.approx(2.4) and t.loc[10, "grad_norm"] == 1.3
    assert t.loc[50, "lr"] == pytest.approx(3e-4)
    assert t.loc[10, "elapsed_time_per_iteration"] == pytest.approx(1.2445)  # ms -> s
    assert t.loc[50, "eval_lm_loss_value"] == 2.412345
    assert t.loc[50, "loss"] == pytest.approx(2.32)  # validation did not overwrite it


def test_megatron_lines_after_a_traceback_are_not_taken_for_its_frames(tmp_path):
    """Megatron's lines open with a space; a traceback's frames are indented too, but a
    frame never opens with a timestamp.  (Here another rank's traceback is interleaved
    with rank 0's lines, as torchrun writes them.)"""
    lines = (LOGS / "megatron.log").read_text().splitlines()
    at = next(i for i, x in enumerate(lines) if "iteration       20/" in x)
    lines[at : at + 1] = [
        "Traceback (most recent call last):",
        '  File "train.py", line 3, in <module>',
        lines[at],
        "    save_checkpoint()",
    ]
    p = tmp_path / "megatron.log"
    p.write_text("\n".join(lines) + "\n")
    run = read_log(p)
    assert run.table["step"].tolist() == [10, 20, 30, 40, 50]
    assert run.skipped["traceback"] == 2


def test_hf_dict_lines_stepped_by_the_training_bar():
    run = read_log(LOGS / "hf_trainer_stdout.log")
    t = run.table.set_index("step")
    # each dict comes right after the training bar reached its step (10, 20, 30 of 30);
    # the evaluation bar (5 batches) is not a training step
    assert t.index.tolist() == [10, 20, 30]
    assert t["loss"].tolist() == [2.3456, 2.1, 1.95]
    assert math.isnan(t.loc[20, "grad_norm"]) and t.loc[30, "grad_norm"] == 0.9
    assert t.loc[20, "eval_loss"] == 2.05  # the eval dict belongs to the step before it
    assert t["epoch"].tolist() == [0.33, 0.67, 1.0]
    assert run.skipped["summary"] == 1  # train_loss of the summary is not a step


def test_hf_dict_lines_without_bars_by_line_order(tmp_path):
    lines = [x.rsplit("]", 1)[-1] for x in (LOGS / "hf_trainer_stdout.log").read_text().split("\n")]
    p = tmp_path / "dicts.log"
    p.write_text("\n".join(lines))
    t = read_log(p).table.set_index("step")
    assert t.index.tolist() == [1, 2, 3]  # logging events, in order
    assert t.loc[2, "eval_loss"] == 2.05 and t.loc[3, "loss"] == 1.95


def test_lightning_sparse_rows_merged():
    run = read_log(LOGS / "lightning_metrics.csv")
    t = run.table.set_index("step")
    assert len(t) == 16
    assert t.loc[99, "val_loss"] == 2.2 and t.loc[99, "train_loss_epoch"] == 2.5
    assert math.isnan(t.loc[99, "loss"])
    assert t.loc[0, "loss"] == 3.0 and t.loc[0, "lr"] == 1e-3  # lr-AdamW
    assert t.loc[140, "epoch"] == 1


def test_wandb_export_run_name_dropped():
    t = read_log(LOGS / "wandb_export.csv").table
    assert t["step"].tolist() == list(range(50, 401, 50))
    assert t["loss"].iloc[0] == 2.9 and t["grad_norm"].iloc[-1] == 1.8
    assert not [c for c in t.columns if "min" in c or "max" in c]


def test_jsonl_nested_nan_and_cut_last_line():
    run = read_log(LOGS / "metrics.jsonl")
    t = run.table.set_index("step")
    assert t.index.tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert t.loc[1, "loss"] == 2.9 and t.loc[1, "grad_norm"] == 1.5 and t.loc[3, "acc"] == 0.3
    assert t.loc[6, "eval_loss"] == 2.9 and t.loc[6, "loss"] == pytest.approx(2.4)
    assert math.isnan(t.loc[7, "loss"])
    assert run.skipped == {"bad_record": 1}


def test_forcing_a_format_that_does_not_fit_is_a_clean_error():
    with pytest.raises(InputError) as e:
        read_log(LOGS / "deepspec.log", format="jsonl")
    assert "no step-like data" in str(e.value)


def test_unknown_format_names_the_choices():
    with pytest.raises(InputError) as e:
        read_log(LOGS / "deepspec.log", format="yaml")
    assert str(e.value) == (f"--format: unknown format 'yaml'; choose from {', '.join(FORMATS)}")


def test_tensorboard_without_the_package_says_what_to_install(tmp_path, monkeypatch):
    from dflash_diag.errors import MissingDependency
    from dflash_diag.logs import tensorboard

    monkeypatch.setattr(tensorboard, "_loader", lambda: None)
    events = tmp_path / "events.out.tfevents.1700000000.host"
    events.write_bytes(b"\x00" * 16)
    assert detect_format(events) == "tensorboard"
    with pytest.raises(MissingDependency) as e:
        read_log(events)
    assert str(e.value) == (
        f"{events}: reading this file needs the optional package 'tensorboard'; "
        "install it with: pip install 'dflash-diag[tensorboard]'"
    )
    with pytest.raises(MissingDependency):
        read_log(tmp_path)  # a folder of event files


def test_missing_directory_and_empty_inputs(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("\n\n  \n")
    cases = {
        tmp_path / "nope.log": "no such file; check the path",
        tmp_path: "is a folder, not a log file; give the log file inside it",
        empty: "the log is empty; give a log that has training lines in it",
    }
    for path, message in cases.items():
        with pytest.raises(InputError) as e:
            read_log(path)
        assert str(e.value) == f"{path}: {message}"


def test_no_step_like_data(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("hello\nthis is not a training log\n")
    with pytest.raises(InputError) as e:
        read_log(p)
    assert str(e.value).startswith(f"{p}: no step-like data found; expected lines with a step")


def test_input_is_never_modified(tmp_path):
    src = LOGS / "sample_run.log"
    before = src.read_bytes()
    read_log(src)
    assert src.read_bytes() == before
    assert np.isfinite(read_log(src).table["loss"]).all()


def test_progress_reports_lines_read_up_to_the_total():
    calls = []
    run = read_log(LOGS.parent / "real_run" / "run.log", progress=lambda d, t: calls.append((d, t)))
    assert calls[-1] == (run.n_lines, run.n_lines) == (491, 491)
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:], strict=False))
