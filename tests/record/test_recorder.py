"""BatchRecorder in a training script: naming, defaults, misuse, resumes, a killed run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from dflash_diag.errors import InputError
from dflash_diag.record import BatchRecorder, find_recording, rank_path, read_recording

ROOT = Path(__file__).resolve().parents[2]


def test_one_file_per_rank_named_from_the_path_and_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    with BatchRecorder(tmp_path / "train.batches") as rec:
        rec.log(0, [1], [5])
    assert (rec.rank, rec.world_size) == (3, 4)
    assert rec.path == tmp_path / "train.rank3.batches"
    assert read_recording(rec.path).header["rank"] == 3
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    with BatchRecorder(tmp_path / "solo.batches") as rec:
        rec.log(0, [1], [5])
    assert rec.path == tmp_path / "solo.batches" and (rec.rank, rec.world_size) == (0, 1)
    assert rank_path("a/run", 2, 8) == Path("a/run.rank2.batches")


def test_numpy_arrays_scalars_and_objects_with_array_interface_are_taken(tmp_path):
    class Tensorish:  # what a CPU torch tensor offers numpy, without torch
        def __init__(self, values):
            self.values = values

        def __array__(self, dtype=None, copy=None):
            return np.asarray(self.values, dtype=dtype)

    with BatchRecorder(tmp_path / "t.batches", rank=0, world_size=1) as rec:
        rec.log(
            np.int64(4), Tensorish([9, 2]), Tensorish(np.array([7, 3], np.int32)), micro=np.uint8(1)
        )
        rec.log(Tensorish(5), np.array([2], np.uint16), [3.0])
    rows = read_recording(tmp_path / "t.batches").table.drop(columns="loss").values.tolist()
    assert rows == [[4, 0, 1, 2, 3], [4, 0, 1, 9, 7], [5, 0, 0, 2, 3]]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda r: r.log(3, [1], [2]),
            "step 3 logged after step 5 for rank 0: steps must not go back",
        ),
        (
            lambda r: r.log(5, [1], [2]),
            "micro-batch 0 of step 5 (rank 0) logged after micro-batch 0",
        ),
        (lambda r: r.log(6, [1, 2], [2]), "2 sample ids but 1 lengths"),
        (lambda r: r.log(6, [], []), "an empty micro-batch (step 6, rank 0, micro 0)"),
        (lambda r: r.log(6, [-1], [2]), "sample_ids must be >= 0, got -1"),
        (lambda r: r.log(6, [1.5], [2]), "sample_ids must be whole numbers, got dtype float64"),
        (lambda r: r.log(6, [1], [float("nan")]), "lengths must be whole numbers, got dtype"),
        (lambda r: r.log(6, [2**64], [2]), "sample_ids must be whole numbers, got dtype object"),
        (lambda r: r.log(6, [[1]], [2]), "sample_ids must be one-dimensional, got shape (1, 1)"),
        (lambda r: r.log(-1, [1], [2]), "step must be a whole number >= 0, got -1"),
        (lambda r: r.log(True, [1], [2]), "step must be a whole number >= 0, got True"),
        (lambda r: r.log(6.0, [1], [2]), "step must be a whole number >= 0, got 6.0"),
        (lambda r: r.log(6, [1, 2], [2, 3], losses=[0.5]), "2 sample ids but 1 losses"),
        (lambda r: r.log(6, [1], [2], losses=["x"]), "losses must be numbers, got list"),
    ],
)
def test_misuse_is_a_clear_error(tmp_path, call, message):
    with BatchRecorder(tmp_path / "t.batches", rank=0, world_size=1) as rec:
        rec.log(5, [0], [1])
        with pytest.raises(ValueError) as err:
            call(rec)
        assert message in str(err.value)
    # the bad call wrote nothing: the file holds the one good micro-batch
    assert read_recording(tmp_path / "t.batches").table.drop(columns="loss").values.tolist() == [
        [5, 0, 0, 0, 1]
    ]


def test_bad_construction_and_a_closed_recorder(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="rank 2 is not below world size 2"):
        BatchRecorder(tmp_path / "a.batches", rank=2, world_size=2)
    monkeypatch.setenv("WORLD_SIZE", "eight")
    with pytest.raises(ValueError, match="environment variable WORLD_SIZE must be a whole number"):
        BatchRecorder(tmp_path / "a.batches")
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(ValueError, match="settings must be JSON-able"):
        BatchRecorder(tmp_path / "a.batches", settings={"x": object()})
    rec = BatchRecorder(tmp_path / "a.batches")
    rec.close()
    rec.close()  # (idempotent)
    assert rec.closed
    with pytest.raises(ValueError, match="the recorder is closed"):
        rec.log(0, [1], [1])
    (tmp_path / "other.batches").write_text("not a recording\n")
    with pytest.raises(InputError, match="not a dflash-diag batch recording"):
        BatchRecorder(tmp_path / "other.batches")


def test_each_step_reaches_the_os_when_the_next_begins(tmp_path):
    # without close() or flush(): what another process reads is every finished step
    rec = BatchRecorder(tmp_path / "t.batches", rank=0, world_size=1)
    rec.log(1, [1, 2], [3, 4])
    rec.log(1, [5], [6], micro=1)
    assert read_recording(rec.path).table.empty
    rec.log(2, [7], [8])
    assert read_recording(rec.path).table["step"].tolist() == [1, 1, 1]
    rec.flush()
    assert read_recording(rec.path).table["step"].tolist() == [1, 1, 1, 2]
    rec.close()


def test_a_resumed_run_appends_and_supersedes_from_its_first_step(tmp_path):
    # killed after step 4 (step 4 torn), resumed from a checkpoint at step 3
    path = tmp_path / "t.batches"
    with BatchRecorder(path, rank=0, world_size=1, settings={"run": 1}) as rec:
        for s in range(5):
            rec.log(s, [s], [10 + s])
    data = path.read_bytes()
    path.write_bytes(data[:-3])
    assert read_recording(path).torn == 1
    with BatchRecorder(path, rank=0, world_size=1, settings={"run": 2}) as rec:
        for s in range(3, 6):
            rec.log(s, [s + 100], [20 + s])
    got = read_recording(path)
    assert got.torn == 0 and got.sessions == 2
    assert got.header["settings"] == {"run": 1}
    assert got.table[["step", "sample_id"]].values.tolist() == [
        [0, 0],
        [1, 1],
        [2, 2],
        [3, 103],
        [4, 104],
        [5, 105],
    ]


KILLED = """
import sys, time
from dflash_diag.record import BatchRecorder
rec = BatchRecorder(sys.argv[1], rank=0, world_size=1)
step = 0
while True:
    for micro in range(2):
        rec.log(step, range(step, step + 50), [step % 7 + 1] * 50, micro=micro)
    step += 1
    if step % 50 == 0:
        time.sleep(0.001)
"""


@pytest.mark.slow
def test_a_run_killed_with_sigkill_leaves_a_readable_file(tmp_path):
    path = tmp_path / "killed.batches"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(path)], env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if path.exists() and path.stat().st_size > 200_000:
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    got = read_recording(path)
    steps = got.table.drop_duplicates("step")["step"].to_numpy()
    assert len(steps) > 10
    assert (steps == np.arange(len(steps))).all()  # every finished step, none skipped
    per_step = got.table.groupby("step").size()
    assert (per_step == 100).all()  # every step whole: both micro-batches, all samples
    assert got.torn in (0, 1)


def test_ranks_are_found_beside_the_log_and_merged(tmp_path):
    for rank in (1, 0):
        with BatchRecorder(tmp_path / "run.batches", rank=rank, world_size=2) as rec:
            for s in range(3):
                rec.log(s, [10 * s + rank], [s + 1])
    assert find_recording(tmp_path / "run.log") == tmp_path / "run.batches"
    assert find_recording(tmp_path / "other.log") is None
    got = read_recording(find_recording(tmp_path / "run.log"))
    assert [Path(p).name for p in got.paths] == ["run.rank0.batches", "run.rank1.batches"]
    assert got.table[["step", "rank", "sample_id"]].values.tolist() == [
        [0, 0, 0],
        [0, 1, 1],
        [1, 0, 10],
        [1, 1, 11],
        [2, 0, 20],
        [2, 1, 21],
    ]
    one = read_recording(tmp_path / "run.rank1.batches")
    assert one.table["rank"].unique().tolist() == [1]


def test_the_same_micro_batch_in_two_files_is_refused(tmp_path):
    for name in ("a.rank0.batches", "a.rank1.batches"):
        with BatchRecorder(tmp_path / name, rank=0, world_size=1) as rec:
            rec.log(0, [1], [1])
    with pytest.raises(InputError, match="micro-batch 0 of step 0, rank 0 recorded twice"):
        read_recording(tmp_path / "a.batches")


def test_importing_the_package_imports_no_framework():
    code = (
        "import sys, dflash_diag.record as r; r.BatchRecorder, r.read_recording;"
        "print(','.join(m for m in ('torch', 'transformers', 'lightning', 'pytorch_lightning',"
        " 'numpy', 'pandas') if m in sys.modules))"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


@pytest.mark.slow
def test_logging_never_imports_torch(tmp_path):
    code = textwrap.dedent(
        f"""
        import sys
        from dflash_diag.record import BatchRecorder, read_recording
        with BatchRecorder({str(tmp_path / "x.batches")!r}, rank=0, world_size=1) as rec:
            rec.log(0, [1, 2], [3, 4])
        read_recording({str(tmp_path / "x.batches")!r}).to_replay()
        print('torch' in sys.modules)
        """
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_a_forked_child_does_not_write_the_parents_pending_step(tmp_path):
    # a DataLoader worker forked mid-step holds a copy of the recorder: at its exit
    # (or if it logs and closes) nothing of it reaches the file
    rec = BatchRecorder(tmp_path / "t.batches", rank=0, world_size=1)
    rec.log(0, [1, 2], [3, 4])
    pid = os.fork()
    if pid == 0:  # the child
        try:
            rec.log(1, [9], [9])
            rec.close()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    rec.log(1, [5], [6])
    rec.close()
    got = read_recording(tmp_path / "t.batches").table
    assert got[["step", "sample_id"]].values.tolist() == [[0, 1], [0, 2], [1, 5]]


def test_a_file_cut_inside_its_header_is_started_over(tmp_path):
    path = tmp_path / "t.batches"
    with BatchRecorder(path, rank=0, world_size=1, settings={"run": 1}) as rec:
        rec.log(0, [1], [2])
    path.write_bytes(path.read_bytes()[:30])
    with pytest.raises(InputError, match="holds no complete header"):
        read_recording(path)
    with BatchRecorder(path, rank=0, world_size=1, settings={"run": 2}) as rec:
        rec.log(5, [3], [4])
    got = read_recording(path)
    assert got.header["settings"] == {"run": 2} and got.sessions == 1
    assert got.table.drop(columns="loss").values.tolist() == [[5, 0, 0, 3, 4]]


def test_buffers_reused_by_the_caller_do_not_change_what_was_logged(tmp_path):
    ids, lens = np.array([4]), np.array([40])
    with BatchRecorder(tmp_path / "t.batches", rank=0, world_size=1) as rec:
        rec.log(0, ids, lens)
        ids[0], lens[0] = 5, 50  # (the step is still pending: not yet written)
        rec.log(1, ids, lens)
    got = read_recording(tmp_path / "t.batches").table
    assert got[["sample_id", "length"]].values.tolist() == [[4, 40], [5, 50]]
