"""TensorBoard event files: real files written by TensorBoard's own writer.

The fixtures are made by tests/data/logs/tensorboard/make_fixtures.py.  Expected values
come from TensorBoard's own reader (``EventAccumulator``), which shares only the proto
definitions with ours: its record reader, tensor decoding and float handling are its own.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.data import CANONICAL_COLUMNS, RunLog
from dflash_diag.errors import InputError, MissingDependency
from dflash_diag.logs import detect_format, read_log
from dflash_diag.logs.tensorboard import masked_crc32c, read_tensorboard

TB = Path(__file__).resolve().parents[1] / "data" / "logs" / "tensorboard"
HF = TB / "hf_resume"
HF_FIRST, HF_SECOND = sorted(HF.iterdir())
LIGHTNING = TB / "lightning"
TF2 = TB / "tf2"
TF1 = TB / "tf1.tfevents"

#: How each trainer's tags must be named: the text reader's names (canonical_name).
COLUMNS = {
    "train/loss": "loss",
    "train/learning_rate": "lr",
    "train/grad_norm": "grad_norm",
    "train/epoch": "epoch",
    "eval/loss": "eval_loss",
    "eval/runtime": "eval_runtime",
    "eval/samples_per_second": "eval_samples_per_second",
    "train/train_loss": "train_train_loss",
    "train/train_runtime": "train_train_runtime",
    "train_loss": "loss",
    "lr-AdamW": "lr",
    "epoch": "epoch",
    "val_loss": "val_loss",
    "hp_metric": "hp_metric",
    "loss": "loss",
    "learning_rate": "lr",
    "tokens": "tokens",
    "global_step/sec": "global_step_sec",
}
MISSING = (
    "error: {}: reading this file needs the optional package 'tensorboard'; "
    "install it with: pip install 'dflash-diag[tensorboard]'\n"
)


def oracle(path: Path) -> dict[str, dict[int, float]]:
    """TensorBoard's own reading: tag -> {step: value}, the later event winning a step."""
    acc = EventAccumulator(str(path))
    acc.Reload()
    tags = acc.Tags()
    out: dict[str, dict[int, float]] = {}
    for tag in tags["scalars"]:
        out[tag] = {}
        for ev in acc.Scalars(tag):
            out[tag][ev.step] = ev.value
    for tag in tags["tensors"]:
        if acc.SummaryMetadata(tag).plugin_data.plugin_name != "scalars":
            continue
        out[tag] = {}
        for ev in acc.Tensors(tag):
            out[tag][ev.step] = tensor_util.make_ndarray(ev.tensor_proto).item()
    return out


def same(ours: float, theirs: float) -> bool:
    """Equal at the precision the file stored (float32 for simple values)."""
    return np.float32(ours) == np.float32(theirs) and abs(ours - theirs) <= 1e-6 * abs(theirs)


def by_step(run: RunLog, column: str) -> dict[int, float]:
    t = run.table[["step", column]].dropna()
    return dict(zip(t["step"].tolist(), t[column].tolist(), strict=True))


def records(data: bytes) -> list[tuple[int, int]]:
    """(offset, payload length) of each TFRecord: the framing, read here independently."""
    out, off = [], 0
    while off < len(data):
        (length,) = struct.unpack_from("<Q", data, off)
        out.append((off, length))
        off += 12 + length + 4
    return out


def write_run(folder: Path, name: str, steps: dict[int, float]) -> Path:
    """A PyTorch-style event file with a ``train/loss`` scalar per step."""
    before = set(folder.iterdir())
    writer = EventFileWriter(str(folder))
    for step, loss in steps.items():
        value = summary_pb2.Summary.Value(tag="train/loss", simple_value=loss)
        summary = summary_pb2.Summary(value=[value])
        writer.add_event(event_pb2.Event(wall_time=1.0, step=step, summary=summary))
    writer.close()
    (written,) = set(folder.iterdir()) - before
    return written.rename(folder / name)


# ----------------------------------------------------------------------------- tables


@pytest.mark.parametrize("path", [HF, LIGHTNING, TF2, TF1], ids=lambda p: p.name)
def test_every_scalar_is_read_as_tensorboard_reads_it(path):
    run = read_log(path)
    assert run.format == "tensorboard"
    assert list(run.table.columns[:8]) == list(CANONICAL_COLUMNS)
    assert run.table["step"].is_monotonic_increasing and run.table["step"].is_unique
    expected = oracle(path)
    assert expected  # the oracle saw scalars
    # Every scalar column comes from a tag, and every tag lands in its column.
    mapped = {COLUMNS[tag] for tag in expected}
    extra = set(run.table.columns) - mapped - set(CANONICAL_COLUMNS)
    assert not extra
    for tag, values in expected.items():
        got = by_step(run, COLUMNS[tag])
        # `epoch` is logged with train and eval events alike: same value per step.
        assert sorted(got) == sorted(values), tag
        bad = {s: (got[s], v) for s, v in values.items() if not same(got[s], v)}
        assert not bad, (tag, bad)
    steps = sorted({s for values in expected.values() for s in values})
    assert run.table["step"].tolist() == steps


def test_float32_values_read_as_the_decimals_that_were_logged():
    run = read_log(HF)
    # make_fixtures writes 91.4 and 5e-05 * (1 - step / 100); float32 stores neither.
    assert set(run.table["eval_samples_per_second"].dropna()) == {91.4}
    assert by_step(run, "lr")[10] == 4.5e-05
    assert by_step(read_log(TF2), "lr")[200] == 3e-4 / 2  # float64 tensor: exact


def test_resume_later_file_wins_and_the_restart_is_reported():
    run = read_log(HF)
    # make_fixtures: the first file logs steps 10..60, the second resumes at 50.
    assert run.restarts == (50,)
    first, second = oracle(HF_FIRST), oracle(HF_SECOND)
    loss = by_step(run, "loss")
    for step in (50, 60):
        assert first["train/loss"][step] != second["train/loss"][step]
        assert same(loss[step], second["train/loss"][step])
    assert same(loss[40], first["train/loss"][40])
    evals = by_step(run, "eval_loss")
    assert same(evals[30], first["eval/loss"][30]) and same(evals[60], second["eval/loss"][60])
    # The first file alone: no restart, its own values.
    alone = read_log(HF_FIRST)
    assert alone.restarts == () and alone.table["step"].tolist() == [10, 20, 30, 40, 50, 60]
    assert same(by_step(alone, "loss")[60], first["train/loss"][60])


def test_non_scalar_events_are_skipped_and_counted():
    # make_fixtures: hf_resume has one graph, one histogram, an `args` text per file;
    # tf2 has a TF2 histogram at 3 steps and a text at 2, metadata on the first only.
    assert read_log(HF).skipped == {"graph": 1, "histogram": 1, "text": 2}
    tf2 = read_log(TF2)
    assert tf2.skipped == {"histogram": 3, "text": 2}
    assert "weights" not in tf2.table and "notes" not in tf2.table
    assert read_log(LIGHTNING).skipped == {"hparams": 1}
    assert read_log(TF1).skipped == {"graph": 2, "session_log": 1}


def test_events_are_counted():
    for path in (HF, TF1):
        files = sorted(path.iterdir()) if path.is_dir() else [path]
        n = sum(len(records(f.read_bytes())) for f in files)
        assert read_log(path).n_lines == n


def test_folder_and_file_read_the_same(tmp_path):
    (tf2_file,) = TF2.iterdir()
    assert read_log(TF2).table.equals(read_log(tf2_file).table)
    # HF's default logging_dir is output_dir/runs/<date>_<host>: one run below is found.
    shutil.copytree(HF, tmp_path / "out" / "runs" / "Nov29_08-46-40_trainer-node")
    assert read_log(tmp_path / "out").table.equals(read_log(HF).table)
    # Two runs below: which one is meant is not guessed.
    shutil.copytree(TF2, tmp_path / "out" / "runs" / "Nov30_10-00-00_trainer-node")
    with pytest.raises(InputError) as e:
        read_log(tmp_path / "out")
    assert str(e.value) == (
        f"{tmp_path / 'out'}: this folder holds 2 TensorBoard runs "
        "(runs/Nov29_08-46-40_trainer-node, runs/Nov30_10-00-00_trainer-node); "
        "give one run's folder"
    )


def test_a_gzip_copy_reads_the_same(tmp_path):
    gz = tmp_path / "events.out.tfevents.1732870000.host.1.0.gz"
    gz.write_bytes(gzip.compress(TF1.read_bytes()))
    assert read_log(gz).table.equals(read_log(TF1).table)


def test_resume_at_the_last_step_and_a_clean_continuation(tmp_path):
    a = tmp_path / "overlap"
    a.mkdir()
    write_run(a, "events.out.tfevents.1000000000.h.1.0", {10: 2.0, 20: 1.5})
    write_run(a, "events.out.tfevents.1000000600.h.2.0", {20: 1.25, 30: 1.0})
    run = read_log(a)
    assert run.restarts == (20,)  # the step did not go back, but step 20 came again
    assert by_step(run, "loss") == {10: 2.0, 20: 1.25, 30: 1.0}
    b = tmp_path / "clean"
    b.mkdir()
    # Name order by timestamp, not by text: 999999999 < 1000000000.
    write_run(b, "events.out.tfevents.1000000000.h.2.0", {30: 1.0, 40: 0.5})
    write_run(b, "events.out.tfevents.999999999.h.1.0", {10: 2.0, 20: 1.5})
    run = read_log(b)
    assert run.restarts == ()
    assert by_step(run, "loss") == {10: 2.0, 20: 1.5, 30: 1.0, 40: 0.5}


# ----------------------------------------------------------------------------- detection


def test_detected_without_format(tmp_path):
    (tf2_file,) = TF2.iterdir()
    for path in (HF, HF_FIRST, TF2, tf2_file, TF1):
        assert detect_format(path) == "tensorboard"
        assert detect_format(str(path)) == "tensorboard"
    assert detect_format(HF_FIRST, HF_FIRST.read_bytes()) == "tensorboard"
    # A renamed event file is known by its first record.
    renamed = tmp_path / "metrics.bin"
    renamed.write_bytes(TF1.read_bytes())
    assert detect_format(renamed) == "tensorboard"
    assert read_log(renamed).table.equals(read_log(TF1).table)
    with pytest.raises(InputError) as e:
        detect_format("-", TF1.read_bytes())
    assert (
        str(e.value)
        == "-: TensorBoard event data cannot be read from standard input; give its path"
    )
    # Text is still text.
    assert detect_format(tmp_path / "x.log", b"step=1 loss=2.5\n") == "text"


# ----------------------------------------------------------------------------- CLI


def test_parse_folder_json_end_to_end():
    result = CliRunner().invoke(app, ["parse", str(HF), "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    run = read_log(HF)
    assert doc["format"] == "tensorboard" and doc["path"] == str(HF)
    assert doc["rows"] == len(run.table) == 8
    assert (doc["first_step"], doc["last_step"]) == (10, 80)
    assert doc["restarts"] == [50]
    assert doc["skipped"] == {"graph": 1, "histogram": 1, "text": 2}
    assert doc["columns"] == list(run.table.columns)
    assert result.stderr == ""


MODULES = (
    "tensorboard",
    "tensorboard.compat",
    "tensorboard.compat.proto",
    "tensorboard.compat.proto.event_pb2",
)


@pytest.mark.parametrize("path", [HF, HF_FIRST, TF1], ids=["folder", "file", "tf1"])
def test_without_the_tensorboard_package(path, monkeypatch):
    for name in MODULES:
        monkeypatch.setitem(sys.modules, name, None)  # `import` now raises ImportError
    with pytest.raises(MissingDependency):
        read_tensorboard(path)
    result = CliRunner().invoke(app, ["parse", str(path), "--json"])
    assert result.exit_code == 2
    assert result.stderr == MISSING.format(path)
    assert result.stdout == ""


# ----------------------------------------------------------------------------- damage


def test_truncated_last_record_reads_what_was_written(tmp_path):
    d = tmp_path / "run"
    shutil.copytree(HF, d)
    second = d / HF_SECOND.name
    data = second.read_bytes()
    *_, (last, _) = records(data)
    for cut in (data[: len(data) - 3], data[: last + 5], data + b"\0" * 100):
        second.write_bytes(cut)
        run = read_log(d)
        assert run.skipped["truncated_record"] == 1
        whole = len(cut) > len(data)
        # The last event is `train/train_loss` at step 80 (make_fixtures).
        assert ("train_train_loss" in run.table) == whole
        assert same(by_step(run, "loss")[80], oracle(HF_SECOND)["train/loss"][80])


def test_damaged_records_name_the_byte(tmp_path):
    data = HF_FIRST.read_bytes()
    frames = records(data)
    bad = tmp_path / HF_FIRST.name
    # The 4th record is `train/loss` at step 10; its last payload byte is the top byte
    # of the float32 value, so the damaged record still decodes, with another loss.
    off, length = frames[3]
    flipped = bytearray(data)
    flipped[off + 12 + length - 1] ^= 0x01
    bad.write_bytes(bytes(flipped))
    with pytest.raises(InputError) as e:
        read_log(bad)
    assert str(e.value) == (
        f"{bad}: damaged event file: record at byte {off} fails its checksum; "
        "the records before it are intact; re-copy the file"
    )
    # Bytes that are no event at all.
    off, length = frames[3]
    flipped = bytearray(data)
    flipped[off + 12 : off + 12 + length] = b"\xff" * length
    bad.write_bytes(bytes(flipped))
    with pytest.raises(InputError) as e:
        read_log(bad)
    assert str(e.value).startswith(f"{bad}: damaged event file: record at byte {off} fails")
    # A record header in the middle.
    off, _ = frames[5]
    flipped = bytearray(data)
    flipped[off] ^= 0x01
    bad.write_bytes(bytes(flipped))
    result = CliRunner().invoke(app, ["parse", str(bad)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {bad}: damaged event file: bad record header at byte {off}; "
        "the records before it are intact; re-copy the file\n"
    )
    # Not an event file at all.
    bad.write_bytes(b"step=1 loss=2.5\n" * 4)
    with pytest.raises(InputError) as e:
        read_log(bad)
    assert str(e.value) == (
        f"{bad}: not a TensorBoard event file (no valid record at its start); "
        "give an events.out.tfevents.* file, or --format for another kind of log"
    )


def test_checksum_is_the_tfrecord_one():
    data = TF1.read_bytes()
    for off, length in records(data):
        (head_crc,) = struct.unpack_from("<I", data, off + 8)
        (body_crc,) = struct.unpack_from("<I", data, off + 12 + length)
        assert masked_crc32c(data[off : off + 8]) == head_crc
        assert masked_crc32c(data[off + 12 : off + 12 + length]) == body_crc


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    cut=st.integers(min_value=0, max_value=HF_FIRST.stat().st_size),
    flips=st.lists(
        st.tuples(st.integers(0, HF_FIRST.stat().st_size - 1), st.integers(1, 255)), max_size=3
    ),
)
def test_damaged_files_never_crash(tmp_path, cut, flips):
    data = bytearray(HF_FIRST.read_bytes()[:cut])
    for pos, mask in flips:
        if pos < len(data):
            data[pos] ^= mask
    p = tmp_path / HF_FIRST.name
    p.write_bytes(bytes(data))
    try:
        run = read_log(p)
    except InputError as e:
        assert "\n" not in str(e) and str(e).startswith(str(p))
        return
    assert run.table["step"].is_unique and len(run.table) > 0


# ----------------------------------------------------------------------------- fixtures


def test_fixtures_are_what_the_generator_writes(tmp_path):
    spec = importlib.util.spec_from_file_location("make_fixtures", TB / "make_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(tmp_path)
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*tfevents*"))
    kept = sorted(p.relative_to(TB) for p in TB.rglob("*tfevents*"))
    assert made == kept
    for rel in made:
        assert (tmp_path / rel).read_bytes() == (TB / rel).read_bytes(), rel
    assert sum((TB / rel).stat().st_size for rel in kept) < 10_000
