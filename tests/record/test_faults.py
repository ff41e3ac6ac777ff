"""The recorder under real faults: two writers on one file, a full disk, a torn frame in the
middle of a file; and hostile files, each refused in one line."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.errors import InputError
from dflash_diag.record import BatchRecorder, read_recording
from dflash_diag.record import recorder as recorder_module
from dflash_diag.record.fileformat import block_payload
from dflash_diag.record.frames import FRAME_HEAD, PREAMBLE, frame, header_frame
from dflash_diag.record.recorder import RecordingBusy

ROOT = Path(__file__).resolve().parents[2]


def python(code: str, *args: str, **kw: object) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kw,  # type: ignore[arg-type]
    )


def expected(steps: range) -> list[list[int]]:
    """The rows ``log_steps`` writes: step s holds ids 3s, 3s+1 (lengths s+1, 2s+1)."""
    return [[s, 0, 0, i, n] for s in steps for i, n in ((3 * s, s + 1), (3 * s + 1, 2 * s + 1))]


def log_steps(rec: BatchRecorder, steps: range) -> None:
    for s in steps:
        rec.log(s, [3 * s + 1, 3 * s], [2 * s + 1, s + 1])


def rows(path: Path) -> list[list[int]]:
    return read_recording(path).table.drop(columns="loss").values.tolist()


# --- two recorders on one file -------------------------------------------------------


HOLDER = """
import sys
from dflash_diag.record import BatchRecorder
rec = BatchRecorder(sys.argv[1], rank=0, world_size=1)
rec.log(0, [1, 0], [3, 1])
rec.flush()
print("ready", flush=True)
sys.stdin.readline()
rec.log(1, [4, 3], [3, 2])
rec.close()
"""


def test_a_second_process_on_the_same_file_is_refused_and_the_file_is_untouched(tmp_path):
    # two jobs with one output path, or a restarted job whose old process still runs
    path = tmp_path / "train.batches"
    holder = python(HOLDER, str(path))
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        before = path.read_bytes()
        with pytest.raises(RecordingBusy) as err:
            BatchRecorder(path, rank=0, world_size=1)
        assert str(err.value) == (
            f"{path}: another recorder is writing this file (pid {holder.pid} on "
            f"{socket.gethostname()}); two runs must not share an output path: give this "
            "one its own, or stop the other process first"
        )
        assert isinstance(err.value, RuntimeError)
        assert path.read_bytes() == before  # (nothing truncated, nothing appended)
        holder.communicate("go\n", timeout=60)
    finally:
        holder.kill() if holder.poll() is None else None
    assert holder.returncode == 0
    assert rows(path) == [[0, 0, 0, 0, 1], [0, 0, 0, 1, 3], [1, 0, 0, 3, 2], [1, 0, 0, 4, 3]]
    # the lock goes with the process: now the file can be reopened (a new session)
    with BatchRecorder(path, rank=0, world_size=1) as rec:
        rec.log(2, [9], [9])
    assert read_recording(path).sessions == 2


def test_two_recorders_in_one_process_are_refused_too(tmp_path):
    path = tmp_path / "t.batches"
    with BatchRecorder(path, rank=0, world_size=1) as first:
        with pytest.raises(RecordingBusy, match=rf"\(pid {os.getpid()} on "):
            BatchRecorder(path, rank=0, world_size=1)
        log_steps(first, range(3))
    assert rows(path) == expected(range(3))


# --- short writes and a full disk ---------------------------------------------------


class Flaky:
    """The recorder's raw file, made to write at most ``most`` bytes a call and, while
    ``full``, to fail with ENOSPC after ``room`` bytes; ``stuck``: truncate fails too."""

    def __init__(self, file, most=3):
        self.file, self.most = file, most
        self.full, self.room, self.stuck = False, 0, False
        self.calls = 0

    def write(self, data):
        self.calls += 1
        if self.full:
            if self.room <= 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            n = self.file.write(bytes(data[: min(self.most, self.room)]))
            self.room -= n
            return n
        return self.file.write(bytes(data[: self.most]))

    def truncate(self, at):
        if self.stuck:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.file.truncate(at)

    def __getattr__(self, name):
        return getattr(self.file, name)


def flaky(rec: BatchRecorder, **kw: object) -> Flaky:
    sink = rec._sink
    sink.file = Flaky(sink.file, **kw)
    return sink.file


def test_short_writes_are_written_whole(tmp_path):
    path = tmp_path / "t.batches"
    with BatchRecorder(path, rank=0, world_size=1) as rec:
        f = flaky(rec, most=3)
        log_steps(rec, range(20))
    assert f.calls > 100  # (the frames really went 3 bytes at a time)
    assert rows(path) == expected(range(20))
    assert read_recording(path).torn == 0


@pytest.mark.parametrize("stuck", [False, True])
def test_a_full_disk_keeps_the_steps_and_writes_them_when_there_is_room(tmp_path, stuck):
    # ENOSPC in the middle of a frame: the part written is cut back (or, when even that
    # fails, left for the reader to skip as torn) and the step is written at the next one
    path = tmp_path / "t.batches"
    rec = BatchRecorder(path, rank=0, world_size=1)
    f = flaky(rec, most=1000)
    log_steps(rec, range(3))
    f.full, f.room, f.stuck = True, 7, stuck
    with pytest.warns(RuntimeWarning, match="no room to write step 2 .*written at the next"):
        log_steps(rec, range(3, 8))
    assert rec.waiting_steps == 5 and rec.dropped_steps == 0
    f.full = False
    log_steps(rec, range(8, 10))
    assert rec.waiting_steps == 0
    rec.close()
    got = read_recording(path)
    assert got.table.drop(columns="loss").values.tolist() == expected(range(10))
    assert got.torn == (1 if stuck else 0)


def test_steps_waiting_too_long_are_dropped_and_counted_and_the_rest_stay_exact(
    tmp_path, monkeypatch
):
    # more waiting than QUEUE_LIMIT samples: the oldest go; the others keep their steps
    # and lengths (ids seen in a dropped step have their lengths given again)
    monkeypatch.setattr(recorder_module, "QUEUE_LIMIT", 6)
    path = tmp_path / "t.batches"
    rec = BatchRecorder(path, rank=0, world_size=1)
    f = flaky(rec, most=1000)
    rec.log(0, [0, 1], [5, 6])
    rec.flush()
    f.full = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for s in range(1, 7):  # ids 0 and 1 again, their lengths known from step 0
            rec.log(s, [0, 1, 10 + s], [5, 6, s])
        assert rec.dropped_steps > 0
        f.full = False
        rec.log(7, [0, 1], [5, 6])
        rec.close()
    kept = sorted(set(read_recording(path).table["step"]))
    assert kept[0] == 0 and kept[-1] == 7 and len(kept) == 8 - rec.dropped_steps
    for _, g in read_recording(path).table.groupby("step"):
        assert g["length"].tolist()[:2] == [5, 6]


RLIMITED = """
import json, os, resource, signal, sys, warnings
from dflash_diag.record import BatchRecorder
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (else the kernel kills at the limit)
path = sys.argv[1]
rec = BatchRecorder(path, rank=0, world_size=1)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path) + 150, hard))
with warnings.catch_warnings(record=True) as said:
    warnings.simplefilter("always")
    for s in range(40):
        rec.log(s, [3 * s + 1, 3 * s], [2 * s + 1, s + 1])
waiting = rec.waiting_steps
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
rec.log(40, [121, 120], [81, 41])
rec.close()
print(json.dumps({"waiting": waiting, "dropped": rec.dropped_steps,
                  "said": [str(w.message) for w in said]}))
"""


def test_a_real_file_size_limit_is_met_as_a_full_disk(tmp_path):
    # RLIMIT_FSIZE: the kernel cuts a write short at the limit, then fails with EFBIG
    path = tmp_path / "t.batches"
    child = python(RLIMITED, str(path))
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    report = json.loads(out)
    assert report["waiting"] > 10 and report["dropped"] == 0
    assert "File too large" in report["said"][0]
    got = read_recording(path)
    assert got.table.drop(columns="loss").values.tolist() == expected(range(41))
    assert got.torn == 0


# --- a torn frame in the middle of a file -------------------------------------------


def frames_of(data: bytes) -> list[bytes]:
    out, pos = [], len(PREAMBLE)
    while pos < len(data):
        end = pos + FRAME_HEAD.size + FRAME_HEAD.unpack_from(data, pos)[0]
        out.append(data[pos:end])
        pos = end
    return out


def test_a_frame_cut_short_in_the_middle_is_skipped_at_every_cut(tmp_path):
    # the writer's own failure: part of a frame, then the same frame whole (written again)
    # and the steps after it; the reader skips the part and loses nothing
    path = tmp_path / "t.batches"
    with BatchRecorder(path, rank=0, world_size=1) as rec:
        log_steps(rec, range(6))
    data = path.read_bytes()
    parts = frames_of(data)
    assert len(parts) == 7  # (the header, six steps)
    torn_path = tmp_path / "torn.batches"
    for k in (1, 3):
        for cut in range(1, len(parts[k])):
            torn = PREAMBLE + b"".join(parts[:k]) + parts[k][:cut] + b"".join(parts[k:])
            torn_path.write_bytes(torn)
            got = read_recording(torn_path)
            assert got.torn == 1, (k, cut)
            assert got.table.drop(columns="loss").values.tolist() == expected(range(6))


def test_a_lost_frame_in_the_middle_loses_only_its_step(tmp_path):
    # a frame cut short and never written again (a dropped step): the steps after it read
    path = tmp_path / "t.batches"
    with BatchRecorder(path, rank=0, world_size=1) as rec:
        log_steps(rec, range(6))
    parts = frames_of(path.read_bytes())
    cut = PREAMBLE + b"".join(parts[:3]) + parts[3][:9] + b"".join(parts[4:])
    path.write_bytes(cut)
    got = read_recording(path)
    assert got.torn == 1
    assert got.table.drop(columns="loss").values.tolist() == expected(r for r in range(6) if r != 2)


# --- hostile recordings -------------------------------------------------------------


def with_header(tmp_path: Path, info: object, name: str = "h.batches") -> Path:
    path = tmp_path / name
    payload = b"H" + json.dumps(info).encode()
    block = frame(block_payload(0, [0], [0], [np.array([1])], [np.array([True])], [np.array([3])]))
    path.write_bytes(PREAMBLE + frame(payload) + block)
    return path


GOOD = {"format_version": 2, "rank": 0, "world_size": 1, "settings": {}}


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"world_size": "x"}, 'world_size is "x"'),
        ({"world_size": None}, "world_size is null"),
        ({"world_size": [1]}, "world_size is [1]"),
        ({"world_size": float("inf")}, "world_size is Infinity"),
        ({"world_size": 0}, "world_size is 0"),
        ({"world_size": True}, "world_size is true"),
        ({"rank": -1}, "rank is -1"),
        ({"rank": 3}, "rank 3 of 1"),
        ({"settings": [1, 2]}, "settings is [1, 2], not an object"),
        ({"settings": {"first_step": 1e20}}, "setting first_step is 1e+20"),
        ({"settings": {"first_step": 10**20}}, "setting first_step is 100000000000000000000"),
        ({"settings": {"steps_per_epoch": "8"}}, 'setting steps_per_epoch is "8"'),
        ({"settings": {"max_seq_len": -5}}, "setting max_seq_len is -5"),
    ],
)
def test_header_fields_of_the_wrong_type_are_one_line(tmp_path, change, said):
    path = with_header(tmp_path, GOOD | change)
    with pytest.raises(InputError) as err:
        read_recording(path).to_replay()
    assert str(err.value) == (
        f"{path}: header at byte {len(PREAMBLE)}: {said}; the file is damaged or was not "
        "written by dflash-diag"
    )


def test_1e400_in_the_file_is_refused(tmp_path):
    path = tmp_path / "big.batches"
    payload = b'H{"rank":0,"settings":{},"world_size":1e400}'
    path.write_bytes(PREAMBLE + frame(payload))
    with pytest.raises(InputError, match="world_size is Infinity"):
        read_recording(path)


def test_json_nested_200k_deep_is_a_corrupt_header(tmp_path):
    path = tmp_path / "deep.batches"
    deep = b'{"settings":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    path.write_bytes(PREAMBLE + frame(b"H" + deep))
    with pytest.raises(InputError, match="corrupt header at byte 12"):
        read_recording(path)
    result = CliRunner().invoke(app, ["batches", "--composition", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {path}: corrupt header at byte 12"


def test_a_header_too_big_to_be_one_is_refused(tmp_path):
    path = tmp_path / "huge.batches"
    info = {"rank": 0, "world_size": 1, "settings": {"x": "y" * (1 << 20)}}
    path.write_bytes(PREAMBLE + header_frame(info))
    with pytest.raises(InputError, match=r"a header of \d+ bytes at byte 12 \(at most 1048576\)"):
        read_recording(path)


def repeated_ids(n: int) -> bytes:
    """A file whose second micro-batch holds id 0 ``n`` times without a length (the
    first gave it): one bit a row in the file, tens of bytes a row in memory."""
    one = block_payload(0, [0], [0], [np.array([0])], [np.array([True])], [np.array([7])])
    empty = np.zeros(0, dtype=np.int64)
    many = block_payload(1, [0], [0], [np.zeros(n, np.int64)], [np.zeros(n, bool)], [empty])
    return PREAMBLE + header_frame(GOOD) + frame(one) + frame(many)


@pytest.mark.slow
def test_repeated_ids_without_their_lengths_are_refused_before_the_table_is_built(tmp_path):
    # the writer gives every copy of a repeated id its length (a byte at least a copy);
    # a file that does not is refused, in one line, as the CLI says it
    path = tmp_path / "rep.batches"
    path.write_bytes(repeated_ids(1 << 20))
    assert path.stat().st_size < 140_000
    with pytest.raises(InputError) as err:
        read_recording(path)
    assert str(err.value) == (
        f"{path}: corrupt batch records: a sample id repeated in a micro-batch without its "
        "length; the file is damaged"
    )
    result = CliRunner().invoke(app, ["batches", "--composition", str(path)])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {path}: corrupt")


def test_more_samples_than_memory_holds_are_refused_in_one_line(tmp_path, monkeypatch):
    # samples that cannot fit (here: a machine of 1 MiB) are refused before decoding
    from dflash_diag.record import fileformat

    path = tmp_path / "many.batches"
    with BatchRecorder(path, rank=0, world_size=1) as rec:
        rec.log(0, np.arange(20_000), np.ones(20_000, dtype=np.int64))
    monkeypatch.setattr(fileformat, "memory_limit", lambda: 1 << 20)
    with pytest.raises(InputError) as err:
        read_recording(path)
    size = path.stat().st_size
    assert str(err.value) == (
        f"{path}: claims 20000 samples in {size} bytes: reading them needs about 0.0 GiB, "
        "more than this machine's 0.0 GiB; read it on a larger machine, or it is damaged"
    )


# --- files of format version 1 ------------------------------------------------------


def version_1_file(path: Path) -> None:
    """What dflash-diag wrote before per-sample losses: version 1, ``B`` blocks whose step
    is the zigzag of the change from the previous block's."""
    import struct

    from dflash_diag.record.fileformat import zigzag

    head = header_frame({"format_version": 1, "rank": 0, "world_size": 1, "settings": {}})
    out, last = [b"DFDBATCH" + struct.pack("<I", 1), head], 0
    for s in range(4):
        ids, lens = np.array([3 * s, 3 * s + 1]), np.array([s + 1, 2 * s + 1])
        flags = np.ones(2, dtype=bool)
        out.append(
            frame(block_payload(zigzag(s - last), [0], [0], [ids], [flags], [lens], delta=True))
        )
        last = s
    path.write_bytes(b"".join(out))


def test_a_version_1_file_reads_with_nan_losses_and_is_appended_to_as_version_2(tmp_path):
    path = tmp_path / "v1.batches"
    version_1_file(path)
    got = read_recording(path)
    assert got.table.drop(columns="loss").values.tolist() == expected(range(4))
    assert got.table["loss"].isna().all() and not got.has_losses
    with BatchRecorder(path, rank=0, world_size=1) as rec:  # a resumed run
        rec.log(4, [13, 12], [9, 5], losses=[0.25, 1.5])
    data = path.read_bytes()
    assert data[:12] == PREAMBLE  # (now version 2: older readers refuse it, and say so)
    got = read_recording(path)
    assert got.sessions == 2 and got.has_losses
    assert got.table.drop(columns="loss").values.tolist() == expected(range(5))
    assert got.table["loss"].tolist()[:8] == [pytest.approx(float("nan"), nan_ok=True)] * 8
    assert got.table["loss"].tolist()[8:] == [1.5, 0.25]
