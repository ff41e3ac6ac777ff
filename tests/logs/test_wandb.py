"""W&B runs as the ``wandb`` library writes them (issue 24): an offline run folder
written by ``wandb.init(mode="offline")`` in the test and the committed one
(``tests/data/wandb_offline``, its script and versions beside it), read through their
transaction log ``run-<id>.wandb``.  Skipped outside CI only when ``wandb`` is not
installed; under CI (``CI=true``) they must run."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import struct
import sys
import zlib
from pathlib import Path

import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.errors import InputError
from dflash_diag.logs import read_log
from dflash_diag.logs.wandb_run import BLOCK, HEADER, read_frames

if os.environ.get("CI") != "true":
    pytest.importorskip("wandb")

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "wandb_offline"
(RUN_FOLDER,) = FIXTURE.glob("offline-run-*")
(RUN_FILE,) = RUN_FOLDER.glob("run-*.wandb")
_spec = importlib.util.spec_from_file_location(
    "write_wandb_offline", FIXTURE / "write_wandb_offline.py"
)
writer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(writer)


def _check_truth(run, truth: dict) -> None:
    """The table holds exactly the logged values: each step, each column, NaN as a
    logged NaN, no column for the histogram or the string."""
    t = run.table.set_index("step")
    assert [str(s) for s in t.index] == list(truth)
    for step, row in truth.items():
        for col, want in row.items():
            got = t.at[int(step), col]
            if want == "nan":
                assert math.isnan(got)
                assert run.logged_nan[col][t.index.get_loc(int(step))]
            else:
                assert got == float(want), (step, col)
    for col in ("eval_loss",):
        assert t[col].notna().sum() == sum(col in r for r in truth.values())
    assert not [c for c in t.columns if "weights" in c or "note" in c]


def test_the_committed_offline_run_reads_to_its_truth():
    truth = json.loads((FIXTURE / "truth.json").read_text())
    assert truth == json.loads(json.dumps(writer.truth()))  # the script's values
    for given_path in (RUN_FOLDER, RUN_FILE):
        run = read_log(given_path)
        assert (run.format, run.step_source, run.skipped) == ("wandb", "field", {})
        _check_truth(run, truth)


def test_the_frames_of_the_committed_run_all_check():
    payloads, skipped = read_frames(RUN_FILE.read_bytes())
    assert skipped == {} and len(payloads) > 30  # 30 history records, and the others


@pytest.mark.slow
def test_an_offline_run_written_now_with_a_record_over_several_blocks(tmp_path):
    # a string of 70,000 characters at step 9: its history (and summary) record is
    # split FIRST, MIDDLE, LAST over three 32 KiB blocks; the rows around it still read
    long = {9: {"note": "x" * 70_000}}
    folder = writer.write_run(tmp_path, steps=range(1, 41), extra=long, run_id="bigrecrd")
    (path,) = folder.glob("run-*.wandb")
    payloads, skipped = read_frames(path.read_bytes())
    assert skipped == {} and max(len(p) for p in payloads) > 2 * BLOCK
    for given_path in (tmp_path / "wandb", folder, path):
        run = read_log(given_path)
        t = run.table.set_index("step")
        assert t.index.tolist() == list(range(1, 41))
        assert t.at[9, "loss"] == 3.0 - 9 / 16 and t.at[10, "eval_loss"] == 3.5 - 10 / 16
        assert t.at[8, "grad_norm"] == math.inf


@pytest.mark.slow
def test_a_trainers_step_beside_wandbs_own_counter_is_the_step(tmp_path):
    # Lightning's WandbLogger logs ``trainer/global_step`` in each record beside W&B's
    # ``_step`` (its count of run.log calls); wandb-core writes a record's items in no
    # fixed order, and the trainer's step is the step whichever comes first.
    steps = range(1, 21)
    extra = {s: {"trainer/global_step": 10 * s - 1} for s in steps}
    folder = writer.write_run(tmp_path, steps=steps, extra=extra, run_id="trainstp")
    run = read_log(folder)
    t = run.table.set_index("step")
    assert t.index.tolist() == [10 * s - 1 for s in steps]
    assert t.at[49, "loss"] == 3.0 - 5 / 16 and t.at[99, "eval_loss"] == 3.5 - 10 / 16


@settings(max_examples=examples(60), deadline=None)
@given(cut=st.integers(0, RUN_FILE.stat().st_size))
def test_a_file_cut_anywhere_gives_the_records_before_the_cut(cut):
    # invariant: a run still being written (or killed) reads as a prefix of its
    # records, the cut chunk counted as truncated
    full, _ = read_frames(RUN_FILE.read_bytes())
    data = RUN_FILE.read_bytes()[: max(cut, len(HEADER))]
    got, skipped = read_frames(data)
    assert got == full[: len(got)]
    assert set(skipped) <= {"truncated"}


@settings(max_examples=examples(60), deadline=None)
@given(at=st.integers(len(HEADER), RUN_FILE.stat().st_size - 1), byte=st.integers(0, 255))
def test_a_damaged_byte_drops_only_records_that_fail_their_check(at, byte):
    # invariant: every record read is one the writer wrote (the CRC holds), and the
    # damage is counted unless it missed every record's bytes
    data = bytearray(RUN_FILE.read_bytes())
    if data[at] == byte:
        return
    data[at] = byte
    full, _ = read_frames(RUN_FILE.read_bytes())
    got, skipped = read_frames(bytes(data))
    assert set(got) <= set(full)
    assert len(got) == len(full) or skipped


def _chunk(kind: int, body: bytes) -> bytes:
    crc = zlib.crc32(body, zlib.crc32(bytes([kind])))
    return struct.pack("<IHB", crc, len(body), kind) + body


def _write_log(records: list[bytes]) -> bytes:
    """``records`` framed as the module docstring of ``wandb_run`` says (this test's own
    writer, for records of any size; the committed run checks it against wandb's)."""
    out = bytearray(HEADER)
    for rec in records:
        rest, first = rec, True
        while True:
            room = BLOCK - len(out) % BLOCK
            if room < 7:
                out += bytes(room)
                continue
            piece, rest = rest[: room - 7], rest[room - 7 :]
            kind = (1 if not rest else 2) if first else (4 if not rest else 3)
            out += _chunk(kind, piece)
            first = False
            if not rest:
                break
    return bytes(out)


records_st = st.lists(st.binary(min_size=1, max_size=3).map(lambda b: b * 20_000), max_size=6)


@settings(max_examples=examples(40), deadline=None)
@given(
    records=st.lists(
        st.one_of(st.binary(max_size=40), records_st.map(b"".join)), min_size=1, max_size=8
    ),
    where=st.floats(0, 1, exclude_max=True),
    byte=st.integers(0, 255),
)
def test_records_over_many_blocks_round_trip_and_damage_drops_only_them(records, where, byte):
    # invariants: framed records read back exactly; after one changed byte, every
    # record read is one that was written (a split record missing a piece is dropped)
    data = _write_log(records)
    assert read_frames(data) == (records, {})
    at = len(HEADER) + int(where * (len(data) - len(HEADER)))
    damaged = bytearray(data)
    damaged[at] = byte
    got, skipped = read_frames(bytes(damaged))
    assert set(got) <= set(records)
    assert got == records or skipped or damaged == bytearray(data)


def test_a_damaged_chunk_kind_is_counted_not_taken_for_padding():
    # an empty record whose kind byte became 0 looks like padding but for its CRC
    data = bytearray(_write_log([b""]))
    assert read_frames(bytes(data)) == ([b""], {})
    data[-1] = 0
    assert read_frames(bytes(data)) == ([], {"bad_record": 1})
    assert read_frames(HEADER + bytes(7)) == ([], {})  # real padding: nothing skipped


def test_pieces_out_of_order_are_dropped_and_counted():
    data = HEADER + _chunk(3, b"mid") + _chunk(2, b"a") + _chunk(1, b"whole") + _chunk(4, b"z")
    assert read_frames(data) == ([b"whole"], {"bad_record": 3})


def test_bad_input_is_one_error_line(tmp_path):
    junk = tmp_path / "run-x.wandb"
    junk.write_bytes(b"not a wandb file\n")
    r = CliRunner().invoke(app, ["parse", str(junk)])
    assert r.exit_code == 2
    assert r.output == (
        f"error: {junk}: not a W&B transaction log (no ':W&B' header); give the run's .wandb file\n"
    )
    wandb_dir = tmp_path / "wandb"
    for name in ("offline-run-1-a", "offline-run-2-b"):
        shutil.copytree(RUN_FOLDER, wandb_dir / name)
    r = CliRunner().invoke(app, ["parse", str(wandb_dir)])
    assert r.exit_code == 2
    assert r.output == (
        f"error: {wandb_dir}: 2 W&B runs in this folder (offline-run-1-a, ...); "
        "give one run's folder\n"
    )
    empty = tmp_path / "run-empty.wandb"
    empty.write_bytes(HEADER)
    with pytest.raises(InputError, match="the W&B run logged no history"):
        read_log(empty)


def test_without_the_wandb_extra_it_says_which(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb.proto.wandb_internal_pb2", None)
    with pytest.raises(InputError) as e:
        read_log(RUN_FOLDER)
    assert str(e.value) == (
        f"{RUN_FOLDER}: reading a W&B run needs the 'wandb' extra; pip install 'dflash-diag[wandb]'"
    )


def test_parse_json_of_the_folder(tmp_path):
    r = CliRunner().invoke(app, ["parse", str(RUN_FOLDER), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["format"] == "wandb"
