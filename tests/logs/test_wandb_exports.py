"""W&B exports of a run's history (issue 24), each read to the table the offline run
folder of the same values reads to (``tests/data/wandb_offline``, written by wandb).

LOOK-ALIKES: W&B's exports need its server (``wandb.Api().run(...).scan_history()``,
``.history()``, the UI's "Export CSV"), which cannot run here.  The rows are built in
the shape the API returns them (``_step``, ``_runtime``, ``_timestamp`` and the logged
keys, ``train/loss`` with its slash) from the values the fixture's script logged, and
written as users write them: one JSON row per line, one JSON list, pandas'
``to_json``/``to_csv``, and the UI's ``Step,<run> - <metric>,__MIN,__MAX`` CSV."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from dflash_diag.errors import InputError
from dflash_diag.logs import detect_format, read_log

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "wandb_offline"
_spec = importlib.util.spec_from_file_location(
    "write_wandb_offline", FIXTURE / "write_wandb_offline.py"
)
writer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(writer)
COLUMNS = ["step", "loss", "acc", "lr", "grad_norm", "eval_loss"]


def api_rows(nested: str = "object") -> list[dict]:
    """History rows as ``scan_history()`` yields them; ``nested``: the logged
    ``{"train": {"acc": ...}}`` as an object, or flattened under ``train.acc``."""
    rows = []
    for s in writer.STEPS:
        row = {"_step": s, "_runtime": 0.5 + s / 100, "_timestamp": 1.7e9 + s}
        for key, value in writer.run_values(s).items():
            if isinstance(value, dict) and nested == "dotted":
                row.update({f"{key}.{k}": v for k, v in value.items()})
            else:
                row[key] = value
        rows.append(row)
    return rows


def offline_table() -> pd.DataFrame:
    """The fixture folder's table, in ``COLUMNS``."""
    (folder,) = FIXTURE.glob("offline-run-*")
    return read_log(folder).table[COLUMNS].reset_index(drop=True)


def _same(path: Path, fmt: str) -> None:
    run = read_log(path)
    assert (run.format, run.step_source) == (fmt, "field")
    pd.testing.assert_frame_equal(run.table[COLUMNS].reset_index(drop=True), offline_table())
    assert run.table.set_index("step").at[30, "_runtime"] == pytest.approx(0.8)


@pytest.mark.parametrize("nested", ["object", "dotted"])
def test_scan_history_as_json_lines(tmp_path, nested):
    p = tmp_path / "history.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in api_rows(nested)))
    _same(p, "jsonl")
    assert read_log(p).logged_nan["loss"].sum() == 1  # json.dumps wrote the NaN as NaN


def test_scan_history_as_one_json_list(tmp_path):
    p = tmp_path / "history.json"
    p.write_text(json.dumps(api_rows(), indent=1))
    assert detect_format(p) == "jsonl"
    _same(p, "jsonl")


@pytest.mark.parametrize("orient", ["columns", "records", "csv"])
def test_run_history_dataframe_written_by_pandas(tmp_path, orient):
    # run.history() is a DataFrame of the flattened rows; pandas writes NaN as null
    # (JSON) or an empty cell (CSV), and an infinity as null in JSON: not logged there
    df = pd.DataFrame(api_rows("dotted"))
    p = tmp_path / f"history.{'csv' if orient == 'csv' else 'json'}"
    if orient == "csv":
        df.to_csv(p)
    else:
        df.to_json(p, orient=orient)
    run = read_log(p)
    assert run.format == ("csv" if orient == "csv" else "jsonl")
    t = run.table[COLUMNS].reset_index(drop=True)
    want = offline_table()
    if orient != "csv":
        want["grad_norm"] = want["grad_norm"].where(want["step"] != 8)
    pd.testing.assert_frame_equal(t, want)
    assert "loss" not in run.logged_nan  # (the NaN became an empty cell or a null)
    assert not [c for c in run.table.columns if "unnamed" in c]


@pytest.mark.parametrize("orient", ["jsonl", "records", "csv"])
@pytest.mark.parametrize("first", ["_step", "trainer/global_step"])
def test_a_trainers_step_in_the_history_is_the_step(tmp_path, orient, first):
    # Lightning's WandbLogger logs ``trainer/global_step`` beside W&B's ``_step`` (its
    # count of run.log calls, here every tenth optimizer step): the trainer's is the
    # step, whichever key stands first.
    rows = []
    for r in api_rows("dotted"):
        trainer = {"trainer/global_step": 10 * r["_step"] - 1}
        rows.append({**trainer, **r} if first != "_step" else {**r, **trainer})
    p = tmp_path / f"history.{'csv' if orient == 'csv' else 'json'}"
    if orient == "jsonl":
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif orient == "csv":
        pd.DataFrame(rows).to_csv(p, index=False)
    else:
        pd.DataFrame(rows).to_json(p, orient=orient)
    t = read_log(p).table.set_index("step")
    assert t.index.tolist() == [10 * s - 1 for s in writer.STEPS]
    assert t.at[49, "loss"] == 3.0 - 5 / 16 and t.at[99, "eval_loss"] == 3.5 - 10 / 16


def test_the_ui_csv_export_of_one_chart(tmp_path):
    # the UI's "Export CSV" of the train/loss chart: Step, the run's value and its band
    # (a look-alike, its layout from W&B's docs); NaN rows left empty
    run = "tiny-drafter - train/loss"
    lines = [f'"Step","{run}","{run}__MIN","{run}__MAX"']
    for s in writer.STEPS:
        v = writer.run_values(s)["train/loss"]
        cell = "" if math.isnan(v) else repr(v)
        lines.append(f'"{s}","{cell}","{cell}","{cell}"')
    p = tmp_path / "wandb_export.csv"
    p.write_text("\n".join(lines) + "\n")
    run = read_log(p)
    assert list(run.table.columns[:2]) == ["step", "loss"]
    got = run.table.set_index("step")["loss"].dropna()
    want = offline_table().set_index("step")["loss"].dropna()
    pd.testing.assert_series_equal(got, want)


def test_a_json_document_of_no_rows_is_one_error(tmp_path):
    from dflash_diag.logs.io import RawLog
    from dflash_diag.logs.json_rows import read_json_rows

    with pytest.raises(InputError, match="not a list of rows"):
        read_json_rows(RawLog("x.json", b'{"a": 1}'))
    with pytest.raises(InputError, match="not valid JSON"):
        read_json_rows(RawLog("x.json", b"[1, 2"))
    # a JSON list that holds no row object is no document of rows
    p = tmp_path / "x.json"
    p.write_text("[1, 2, 3]\n")
    with pytest.raises(InputError):
        read_log(p)
