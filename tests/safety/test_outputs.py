"""No output is written over an input (links included), and every output is written
atomically: a full disk, a read-only folder or a missing permission leaves the old
file, no temporary file, and one ``error:`` line with exit status 2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.errors import InputError
from dflash_diag.outpath import atomic_output, check_output_path, same_file

ROOT = Path(__file__).resolve().parents[2]
REAL = Path(__file__).parents[1] / "data" / "real_run"
FLAGS = ["--seed", "1234", "--token-budget", "16384", "--max-seq-len", "2048", "--first-step", "1"]
runner = CliRunner()


@pytest.fixture()
def work(tmp_path, monkeypatch) -> Path:
    for name in ("run.log", "manifest.parquet"):
        shutil.copy(REAL / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def digest(path: Path) -> bytes:
    return path.read_bytes()


def one_error(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def link(kind: str, target: Path, name: Path) -> Path:
    (os.symlink if kind == "symlink" else os.link)(target, name)
    return name


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
@pytest.mark.parametrize(
    "args, target, out",
    [
        (["spikes", "run.log", "--html"], "run.log", "x.html"),
        (["spikes", "run.log", "--plot"], "run.log", "x.png"),
        (["parse", "run.log", "--to"], "run.log", "x.csv"),
        (["batches", "manifest.parquet", *FLAGS, "--html"], "manifest.parquet", "x.html"),
        (["batches", "manifest.parquet", *FLAGS, "--export"], "manifest.parquet", "x.parquet"),
    ],
)
def test_an_output_linked_to_an_input_is_refused(work, kind, args, target, out):
    before = digest(work / target)
    link(kind, work / target, work / out)
    line = one_error(runner.invoke(app, [*args, out]))
    assert "input" in line
    assert digest(work / target) == before


def test_same_file_is_by_identity(tmp_path):
    a = tmp_path / "a"
    a.write_text("x")
    os.link(a, tmp_path / "b")
    os.symlink(a, tmp_path / "c")
    assert same_file(a, tmp_path / "b") and same_file(a, tmp_path / "c")
    assert not same_file(a, tmp_path / "missing") and not same_file("-", "-")


def test_a_read_only_folder_is_refused_before_the_work(tmp_path, monkeypatch):
    # (os.access answers as the file system would for a user; root passes every mode bit)
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != tmp_path)
    with pytest.raises(InputError, match="cannot write the output: the folder is not writable"):
        check_output_path(tmp_path / "x.csv", (".csv",), "output")


def test_a_read_only_file_system_at_write_time_is_one_line(tmp_path, monkeypatch):
    import errno
    import tempfile

    def refuse(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(InputError, match="x.csv: cannot write the output: the folder is on a"):
        with atomic_output(tmp_path / "x.csv"):
            pass


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    old = tmp_path / "t.csv"
    old.write_text("old\n")
    with pytest.raises(InputError, match="cannot write the output: no space left"):
        with atomic_output(old) as tmp:
            tmp.write_text("new, half")
            raise OSError(28, "No space left on device")
    assert old.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]


#: Run a command with files limited to 4 KB (RLIMIT_FSIZE; SIGXFSZ ignored so the
#: write fails with EFBIG as a full disk fails with ENOSPC).
LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
from dflash_diag.cli import main
main(sys.argv[1:])
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, out",
    [
        (["parse", "run.log", "--to"], "t.csv"),
        (["spikes", "run.log", "--plot"], "t.svg"),
        (["spikes", "run.log", "--html"], "t.html"),
        (["batches", "manifest.parquet", *FLAGS, "--export"], "t.csv"),
    ],
)
def test_a_full_disk_is_one_error_line_and_the_old_file_stays(work, args, out):
    (work / out).write_text("the previous output\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", LIMITED, *args, out], capture_output=True, text=True, env=env
    )
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(err) == 1 and err[0].startswith(f"error: {out}: cannot write the "), err
    assert (work / out).read_text() == "the previous output\n"
    assert not [p for p in work.iterdir() if p.name.endswith(".tmp")]


def _config_beside(folder: Path, manifest: str) -> None:
    flags = dict(zip(FLAGS[::2], FLAGS[1::2], strict=True))
    lines = [f'manifest = "{manifest}"', 'strategy = "sorted-greedy"']
    lines += [f"{k[2:].replace('-', '_')} = {v}" for k, v in flags.items()]
    (folder / "dflash-diag.toml").write_text("[schedule]\n" + "\n".join(lines) + "\n")


@pytest.mark.parametrize("how", ["found beside the log", "named with --config"])
def test_samples_does_not_write_over_the_manifest_its_config_names(work, how):
    """The manifest a config names is an input, whether the config was found beside the
    log or named; ``samples --to`` it is refused and the manifest kept."""
    _config_beside(work, "manifest.parquet")
    args = ["samples", "run.log", "--to", "manifest.parquet"]
    if how == "named with --config":
        (work / "dflash-diag.toml").rename(work / "cfg.toml")
        args += ["--config", "cfg.toml"]
    before = digest(work / "manifest.parquet")
    assert "refusing to overwrite an input" in one_error(runner.invoke(app, args))
    assert digest(work / "manifest.parquet") == before


def test_samples_does_not_write_over_the_recording_beside_the_log(work, tmp_path):
    """A recording found beside the log (``run.batches``) is an input too."""
    from dflash_diag.composition import Request, resolve

    (work / "run.batches").write_bytes(b"")  # (found by its name: not read here)
    res = resolve(Request(log=str(work / "run.log")))
    assert (work / "run.batches") in res.inputs


def test_samples_writes_beside_the_inputs_it_found(work):
    _config_beside(work, "manifest.parquet")
    result = runner.invoke(app, ["samples", "run.log", "--to", "suspects.parquet"])
    assert result.exit_code == 0, result.output
    assert (work / "suspects.parquet").stat().st_size > 0
