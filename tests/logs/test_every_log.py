"""Issue 24: logs the reader had never seen, read to their truth.

The fixtures in ``tests/data/logs/written`` are written by the libraries themselves:
``write_rich.py`` by rich's ``RichHandler`` at widths 60-200; ``write_logging.py`` by
Python's ``logging`` configured as each trainer configures it (look-alikes of trainers
that cannot run here, fairseq among them; see that folder's README).
"""

from __future__ import annotations

import importlib.util
import json
import logging
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dflash_diag.errors import InputError
from dflash_diag.logs import MultiRunLog, read_log
from dflash_diag.logs.fields import human_number, parse_text
from dflash_diag.logs.grammar import logical_lines

WRITTEN = Path(__file__).resolve().parents[1] / "data" / "logs" / "written"


def _writer(name: str):
    spec = importlib.util.spec_from_file_location(name, WRITTEN / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RICH = _writer("write_rich")
LOGGING = _writer("write_logging")


@pytest.mark.parametrize("width", RICH.WIDTHS)
def test_rich_wrapped_key_value_records_at_every_width(width):
    # every record's values, the ones on continuation lines too, land on its step
    run = read_log(WRITTEN / f"rich_w{width}.log")
    steps = list(range(1, RICH.STEPS + 1))
    assert run.table["step"].tolist() == steps
    for col in ("loss", "acc", "lr", "grad_norm"):
        assert run.table[col].tolist() == pytest.approx([RICH.truth(s)[col] for s in steps])
    assert run.table["tok_per_s"].tolist() == [25000 + s for s in steps]


@pytest.mark.parametrize("width", [60, 80, 100])
@pytest.mark.parametrize(
    "columns", [{"show_time": False}, {"show_time": False, "show_level": False}]
)
def test_rich_without_time_column_written_now(tmp_path, width, columns):
    """RichHandler with its time (and level) column off: the layout is told by the
    path column on the head line only and the width every line is padded to."""
    from rich.console import Console
    from rich.logging import RichHandler

    p = tmp_path / "r.log"
    with p.open("w") as f:
        handler = RichHandler(console=Console(file=f, width=width, color_system=None), **columns)
        log = logging.getLogger(f"t{width}{len(columns)}")
        log.handlers[:] = [handler]
        log.setLevel(logging.INFO)
        log.propagate = False
        for s in range(1, 9):
            log.info("step=%d, loss=%.3f, acc=0.5, lr=1e-4, grad_norm=%.2f,", s, 5 - s / 8, s / 4)
    run = read_log(p)
    assert run.table["step"].tolist() == list(range(1, 9))
    assert run.table["grad_norm"].tolist() == pytest.approx([s / 4 for s in range(1, 9)])


def test_step_head_with_one_metric_per_indented_line():
    run = read_log(WRITTEN / "step_head.log")
    t = run.table
    assert t["step"].tolist() == [1, 2, 3, 4, 5]
    assert t["loss"].tolist() == pytest.approx([LOGGING.truth(s)["loss"] for s in range(1, 6)])
    assert t["tok_per_s"].tolist() == [2578.0] * 5  # `tps=2,578`
    assert "trainer" not in t and not any("gpu" in c for c in t)  # labels, no columns
    assert "no_step" not in run.skipped


def test_continuation_is_by_layout_not_by_format():
    text = (
        "epoch=0 step=1 loss=2.5,\n"
        "    acc=0.5\n"  # a trailing comma: continued
        "{'step': 2,\n"
        " 'loss': 2.25}\n"  # an open bracket: continued to its close
        "Config:\n"
        "  batch_size: 8\n"  # not a record's continuation: a `key: value` dump
        "Traceback (most recent call last):\n"
        '  File "t.py", line 3, in <module>\n'
        "    step=3 loss=99\n"
    )
    got = [line for _, line in logical_lines(text)]
    assert got[:2] == ["epoch=0 step=1 loss=2.5, acc=0.5", "{'step': 2, 'loss': 2.25}"]
    assert got[2:4] == ["Config:", "  batch_size: 8"]
    assert got[-2:] == ['  File "t.py", line 3, in <module>', "    step=3 loss=99"]


def test_fairseq_hydra_json_behind_the_logger_prefix():
    run = read_log(WRITTEN / "fairseq_hydra.log")
    t = run.table
    assert t["step"].tolist() == [100, 200, 300, 400, 500, 600]
    truth = [LOGGING.truth(u) for u in range(100, 601, 100)]
    assert t["loss"].tolist() == pytest.approx([v["loss"] for v in truth])
    assert t["lr"].tolist() == pytest.approx([v["lr"] for v in truth])
    # the per-epoch `[train]` record is told apart by its own keys: its loss is the
    # epoch's mean, beside the step's own
    assert t.set_index("step")["epoch_loss"].dropna().to_dict() == {300: 8.111, 600: 8.111}
    assert t.set_index("step")["valid_loss"].dropna().to_dict() == {300: 7.5, 600: 7.5}
    assert run.ranks == (0,)  # `rank 3` in NCCL and init messages is prose


def test_step_and_total_from_a_string_field():
    run = read_log(WRITTEN / "sft_logging.jsonl")
    t = run.table
    assert t["step"].tolist() == list(range(1, 21)) and run.step_source == "field"
    assert "max_steps" not in t  # the total is the step's, not a column
    assert t["elapsed_time"].iloc[0] == 3720.0 and t["remaining_time"].iloc[0] == 847.0


def test_epoch_log_numbers_its_steps_by_epoch():
    run = read_log(WRITTEN / "epochs_only.log")
    assert run.step_source == "epoch"
    assert run.table["step"].tolist() == list(range(1, 21))
    assert run.table["loss"].tolist() == pytest.approx([round(1 / e, 2) for e in range(1, 21)])
    assert run.table["val_loss"].iloc[1] == pytest.approx(0.55)
    assert "eval_train_loss" not in run.table


def test_numbers_as_people_print_them():
    t = read_log(WRITTEN / "people_numbers.log").table
    row = t.iloc[0]
    assert (row["tok_per_s"], row["tokens"], row["params"]) == (2578.0, 1200.0, 3.4e6)
    assert (row["mfu"], row["elapsed"], row["eta"]) == (0.45, 3720.0, 192.0)


@given(st.integers(0, 10**12))
def test_thousands_separators_round_trip(n):
    assert human_number(f"{n:,}") == (float(n) if n >= 1000 else None)
    assert parse_text(f"step=1 tps: {n:,}").fields["tok_per_s"] == float(n)


@given(st.integers(0, 99), st.integers(0, 59), st.integers(0, 59))
def test_durations_into_seconds(h, m, s):
    assert human_number(f"{h + 1}h{m:02d}m{s:02d}s") == (h + 1) * 3600 + m * 60 + s
    assert human_number(f"{m + 1}m{s:02d}s") == (m + 1) * 60 + s


def test_appended_runs_are_runs_not_restarts():
    run = read_log(WRITTEN / "appended_runs.log")
    assert isinstance(run, MultiRunLog) and len(run.runs) == 3
    assert [r.table["step"].max() for r in run.runs] == [60, 40, 80]
    assert run.runs[1].restarts == (20,)  # a resume inside run 2 stays a resume
    assert run.table["acc"].isna().all()  # run 1's acc is not carried into run 3
    assert run.skipped["other_run"] == 6 + 4
    second = read_log(WRITTEN / "appended_runs.log", run=2)
    assert second.table["loss"].tolist() == pytest.approx([19.9, 19.8, 19.7, 19.6])
    with pytest.raises(InputError, match="no run 4: the log holds 3 runs"):
        read_log(WRITTEN / "appended_runs.log", run=4)


def test_one_run_is_not_split(tmp_path):
    p = tmp_path / "r.log"
    p.write_text("".join(f"step {s}/50 | loss {9 - s / 10}\n" for s in [10, 20, 30, 20, 30, 40]))
    run = read_log(p)
    assert not isinstance(run, MultiRunLog) and run.restarts == (20,)


def test_fixtures_are_what_the_writers_write(tmp_path, monkeypatch):
    # the committed look-alikes are the writers' output (all but rich's clock column)
    for name, write in LOGGING.WRITERS.items():
        write(tmp_path / name)
        got, kept = (tmp_path / name).read_text(), (WRITTEN / name).read_text()
        if name.endswith(".jsonl"):
            assert [json.loads(x) for x in got.splitlines()] == [
                json.loads(x) for x in kept.splitlines()
            ]
        else:
            strip = lambda t: [x[24:] if x[:2] in ("[2", "20") else x for x in t.splitlines()]  # noqa: E731
            assert len(strip(got)) == len(strip(kept))
