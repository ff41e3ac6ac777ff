"""Following a file being written: Follower.poll() returns complete new lines only."""

import gzip
import os

import pytest

from dflash_diag.errors import InputError
from dflash_diag.watch.follow import Follower


def append(path, text):
    with open(path, "a", encoding="utf-8", newline="") as f:
        f.write(text)


def test_a_missing_file_is_waited_for_and_said_once(tmp_path):
    log = tmp_path / "run.log"
    f = Follower(log)
    first = f.poll()
    assert first.lines == [] and first.notices == [f"waiting for {log} to appear"]
    assert f.poll().notices == []  # said once
    append(log, "step=1 loss=2.5\n")
    got = f.poll()
    assert got.lines == ["step=1 loss=2.5"]
    assert got.notices == [f"{log} appeared"]
    assert not got.backlog  # written after the watch began


def test_a_partial_last_line_is_held_until_its_newline(tmp_path):
    log = tmp_path / "run.log"
    append(log, "step=1 loss=2.5\nstep=2 lo")
    f = Follower(log)
    assert f.poll().lines == ["step=1 loss=2.5"]
    assert f.pending == b"step=2 lo"
    append(log, "ss=2.")
    assert f.poll().lines == []
    append(log, "4\nstep=3 loss=2.3\n")
    assert f.poll().lines == ["step=2 loss=2.4", "step=3 loss=2.3"]
    assert f.poll().lines == []


def test_what_the_file_held_at_the_start_is_the_backlog(tmp_path):
    log = tmp_path / "run.log"
    append(log, "step=1 loss=2.5\n")
    f = Follower(log)
    got = f.poll()
    assert got.lines == ["step=1 loss=2.5"] and got.backlog
    append(log, "step=2 loss=2.4\n")
    got = f.poll()
    assert got.lines == ["step=2 loss=2.4"] and not got.backlog


def test_from_end_skips_what_is_there(tmp_path):
    log = tmp_path / "run.log"
    append(log, "step=1 loss=2.5\n")
    f = Follower(log, from_start=False)
    assert f.poll().lines == []
    append(log, "step=2 loss=2.4\n")
    assert f.poll().lines == ["step=2 loss=2.4"]


def test_a_truncated_file_is_read_again_from_its_start(tmp_path):
    log = tmp_path / "run.log"
    append(log, "step=1 loss=2.5\nstep=2 loss=2.4\nstep=3 lo")
    f = Follower(log)
    assert len(f.poll().lines) == 2
    with open(log, "w") as w:  # `> run.log`, then a new run writes
        w.write("step=1 loss=3.0\n")
    got = f.poll()
    assert got.reset and got.lines == ["step=1 loss=3.0"]
    assert got.notices == [f"{log} was truncated: reading it again from its start"]
    assert f.partial_lines_dropped == 1  # the old file's half line is not glued on


def test_a_rotated_file_is_drained_then_the_new_one_read(tmp_path):
    log = tmp_path / "run.log"
    append(log, "step=1 loss=2.5\n")
    f = Follower(log)
    assert f.poll().lines == ["step=1 loss=2.5"]
    os.rename(log, tmp_path / "run.log.1")
    append(tmp_path / "run.log.1", "step=2 loss=2.4\n")  # the writer still had it open
    append(log, "step=3 loss=2.3\n")
    first = f.poll()
    assert first.lines == ["step=2 loss=2.4"] and not first.reset
    second = f.poll()
    assert second.reset and second.lines == ["step=3 loss=2.3"]
    assert second.notices == [f"{log} was replaced: reading the new file from its start"]


def test_a_log_that_disappears_is_waited_for(tmp_path):
    log = tmp_path / "run.log"
    append(log, "step=1 loss=2.5\n")
    f = Follower(log)
    f.poll()
    os.remove(log)
    assert f.poll().notices == [f"{log} disappeared: waiting for it"]
    assert f.poll().notices == []
    append(log, "step=1 loss=2.0\n")
    got = f.poll()
    assert got.reset and got.lines == ["step=1 loss=2.0"]
    assert got.notices == [f"{log} is back: reading the new file from its start"]


def test_gzip_is_refused_with_one_line(tmp_path):
    log = tmp_path / "run.log.gz"
    log.write_bytes(gzip.compress(b"step=1 loss=2.5\n"))
    with pytest.raises(InputError) as e:
        Follower(log).poll()
    assert str(e.value) == (
        f"{log}: is gzip-compressed, and a gzip stream can only be read once complete; "
        f"watch the uncompressed log, or run 'dflash-diag spikes {log}'"
    )


def test_gzip_is_refused_when_its_magic_arrives_a_byte_at_a_time(tmp_path):
    log = tmp_path / "run.log"
    log.write_bytes(b"\x1f")
    f = Follower(log)
    assert f.poll().lines == []
    with open(log, "ab") as w:
        w.write(b"\x8b\x08\x00")
    with pytest.raises(InputError):
        f.poll()


def test_crlf_ansi_and_bad_bytes_are_cleaned(tmp_path):
    log = tmp_path / "run.log"
    log.write_bytes(b"\x1b[32mstep=1\x1b[0m loss=2.5\r\nstep=2 loss=2.4 \xff\n")
    assert Follower(log).poll().lines == ["step=1 loss=2.5", "step=2 loss=2.4 \ufffd"]


def test_a_folder_is_refused(tmp_path):
    with pytest.raises(InputError, match="is a folder"):
        Follower(tmp_path).poll()


def test_what_was_written_and_not_read_is_counted(tmp_path):
    """A watch that stops behind the writer says how much of the log it never read."""
    from dflash_diag.render.watch import summary_lines
    from dflash_diag.watch.follow import Follower
    from dflash_diag.watch.session import Summary

    log = tmp_path / "run.log"
    log.write_text("step=1 loss=2.0\n")
    f = Follower(log)
    f.poll()
    assert f.unread() == 0
    with open(log, "a") as out:
        out.write("step=2 loss=2.1\nstep=3 lo")
    assert f.unread() == len("step=2 loss=2.1\nstep=3 lo")
    s = Summary(str(log), "loss", lines=1, points=1, last_step=1, unread_bytes=f.unread())
    said = " ".join(summary_lines(s, "interrupted", 200))
    assert (
        f"25 bytes of the log were written and not read before the watch ended: their "
        f"points were never judged (dflash-diag spikes {log} judges the whole log)"
    ) in said


@pytest.mark.parametrize("width", [20, 60, 200])
def test_the_command_to_judge_the_rest_keeps_its_path_whole(width):
    # a path with hyphens (pytest's own "popen-gw0", a run named "run-2024-05") and longer
    # than the width: the summary's lines cut around it, never inside it
    from dflash_diag.render.watch import summary_lines, unjudged_lines
    from dflash_diag.watch.session import Summary

    path = "/tmp/popen-gw0/a-long-run-name-2024-05-01-with-hyphens/run.log"
    s = Summary(path, "loss", lines=9, points=9, last_step=9, unread_bytes=25)
    assert any(path in line.split() for line in summary_lines(s, "interrupted", width))
    s = Summary(path, "loss", lines=9, points=9, last_step=9, unjudged_points=3)
    assert any(path in line.split() for line in unjudged_lines(s, width))
