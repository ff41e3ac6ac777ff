"""Small files that ask for a lot: a gzip bomb is stopped at a budget, a line that
cannot be a record is refused with one line, an input that cannot fit says how much it
needs; ``watch`` holds a long partial line in linear time."""

from __future__ import annotations

import gzip
import time
import zlib

import pytest

from dflash_diag import limits
from dflash_diag.errors import InputError
from dflash_diag.logs.io import read_bytes
from dflash_diag.watch.follow import Follower


def bomb(lines: int) -> bytes:
    """gzip of ``lines`` identical log lines, compressed in a stream (never held whole)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"step=1 loss=2.5 acc=0.5\n" * 40_000
    parts = [c.compress(block) for _ in range(lines // 40_000)]
    return b"".join(parts) + c.flush()


@pytest.mark.slow
def test_a_gzip_bomb_is_stopped_at_the_budget_not_inflated_whole(tmp_path, monkeypatch):
    path = tmp_path / "run.log.gz"
    path.write_bytes(bomb(4_000_000))  # ~96 MB of text in ~0.2 MB
    monkeypatch.setattr(limits, "available_memory", lambda: 64 << 20)
    with pytest.raises(InputError, match=r"decompresses to more than .* GB .*available"):
        read_bytes(path)


def test_gunzip_reads_members_and_a_stream_cut_short():
    two = gzip.compress(b"step=1 loss=1\n") + gzip.compress(b"step=2 loss=2\n")
    assert limits.gunzip(two, "x") == (b"step=1 loss=1\nstep=2 loss=2\n", True)
    whole = gzip.compress(b"step=1 loss=1\n" * 1000)
    data, complete = limits.gunzip(whole[: len(whole) // 2], "x")
    assert not complete and b"step=1 loss=1\n".startswith(data[:14])
    with pytest.raises(InputError, match="broken gzip data"):
        limits.gunzip(b"\x1f\x8bnot gzip at all", "x")


def test_a_file_too_big_for_memory_says_what_it_needs(tmp_path, monkeypatch):
    path = tmp_path / "run.log"
    path.write_bytes(b"step=1 loss=1\n" * 100_000)
    monkeypatch.setattr(limits, "available_memory", lambda: 1 << 20)
    with pytest.raises(InputError) as e:
        read_bytes(path)
    assert "reading it needs ~" in str(e.value) and "GB available" in str(e.value)


def test_a_line_too_long_to_be_a_record_is_refused(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b'{"step": 1, "loss": 1}\n{"x": "' + b"a" * 200 + b'"}\n')
    with pytest.raises(InputError, match=r"^.*run.jsonl:2: a line longer than"):
        limits.check_lines(path.read_bytes(), str(path), limit=64)
    limits.check_lines(b"short\n" * 100, "x", limit=64)  # (lines under the limit pass)


@pytest.mark.slow
def test_watch_holds_a_long_partial_line_in_linear_time(tmp_path):
    """Polling a 60 MB line that has no newline yet costs the bytes read, not the bytes
    read times the polls (the old follower re-copied and re-searched it every poll)."""
    path = tmp_path / "run.log"
    path.write_bytes(b"")
    f = Follower(path)
    f.poll()
    piece = b"x" * (1 << 18)
    start = time.perf_counter()
    with path.open("ab") as w:
        for _ in range(240):
            w.write(piece)
            w.flush()
            assert f.poll().lines == []
        w.write(b"\nstep=2 loss=1\n")
    got = f.poll().lines
    elapsed = time.perf_counter() - start
    assert got[-1] == "step=2 loss=1" and len(got[0]) == 240 << 18
    assert elapsed < 2.0, elapsed


def test_watch_drops_a_line_past_the_limit_and_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr("dflash_diag.watch.follow.MAX_LINE_BYTES", 1000)
    path = tmp_path / "run.log"
    path.write_bytes(b"step=1 loss=1\n")
    f = Follower(path)
    assert f.poll().lines == ["step=1 loss=1"]
    with path.open("ab") as w:
        w.write(b"y" * 5000)
        w.flush()
        said = f.poll().notices
        w.write(b"y" * 10 + b"\nstep=2 loss=2\n")
    assert any("was skipped" in n for n in said)
    assert f.poll().lines == ["step=2 loss=2"]


def _manifest_with_a_long_line(path, size: int) -> None:
    rows = "".join(f'{{"length": {10 + i}, "category": "chat"}}\n' for i in range(40))
    long = '{"length": 7, "category": "' + "a" * size + '"}\n'
    path.write_text(rows + long + rows)


def test_a_jsonl_manifest_line_over_the_row_limit_is_one_error_line(tmp_path, monkeypatch):
    """A manifest row may not claim more than a row can be (one 2 GB line took 6 GB):
    refused with its size, what parsing it needs and what the machine has."""
    from typer.testing import CliRunner

    from dflash_diag.cli import app

    path = tmp_path / "m.jsonl"
    _manifest_with_a_long_line(path, 3 << 20)
    monkeypatch.setattr(limits, "MAX_LINE_BYTES", 1 << 20)
    monkeypatch.setattr(limits, "available_memory", lambda: 16 << 30)
    result = CliRunner().invoke(app, ["batches", str(path)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {path}:41: a line of 3 MB, over the 1 MB a manifest row may be (parsing "
        "it needs ~12 MB; this machine has 16 GB available); check the file is one "
        "manifest row a line, or split that line\n"
    )


def test_a_jsonl_line_whose_parse_does_not_fit_says_what_it_needs(tmp_path, monkeypatch):
    data = b'{"length": 1}\n' + b'{"x": "' + b"a" * (3 << 20) + b'"}\n'
    monkeypatch.setattr(limits, "available_memory", lambda: 8 << 20)
    with pytest.raises(InputError) as e:
        limits.check_line_claims(data, "m.jsonl", limits.JSON_OBJECT_COST, "manifest row")
    assert str(e.value) == (
        "m.jsonl:2: a line of 3 MB: parsing it needs ~120 MB; this machine has 8 MB "
        "available; check the file is one manifest row a line, or split that line"
    )


def test_a_jsonl_manifest_line_longer_than_arrows_block_is_read(tmp_path):
    """A 3 MB row is under the limit: read (Arrow's own 1 MB block would refuse it and
    send the file to pandas, at ~40 bytes of memory a byte)."""
    from dflash_diag.manifest import read_manifest
    from dflash_diag.manifest.sources import jsonl_file

    path = tmp_path / "m.jsonl"
    _manifest_with_a_long_line(path, 3 << 20)
    assert jsonl_file(path).columns == ["length", "category"]
    m = read_manifest(path)
    assert m.lengths.tolist() == [*range(10, 50), 7, *range(10, 50)]
