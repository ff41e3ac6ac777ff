"""The contracts every command keeps: exit codes, one-line errors, a fast --help."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app

runner = CliRunner()


def test_unknown_command_is_a_usage_error_on_one_line():
    result = runner.invoke(app, ["bogus"])
    assert result.exit_code == 2
    assert result.stderr == "error: No such command 'bogus'; see 'dflash-diag --help'\n"


def test_unknown_option_names_the_command():
    result = runner.invoke(app, ["parse", "--no-such-flag"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: No such option: --no-such-flag")
    assert result.stderr.count("\n") == 1


SAMPLE_LOG = str(Path(__file__).resolve().parents[2] / "sample_logs" / "run.log")
BUG = (
    "error: internal error (RuntimeError: a bug planted by the test); this is a bug, "
    "please report it with the output of --debug\n"
)


@pytest.fixture
def planted_bug(monkeypatch):
    """``parse``'s report raises what no input can cause: a bug."""
    import dflash_diag.reports

    def broken(*args, **kwargs):
        raise RuntimeError("a bug planted by the test")

    monkeypatch.setattr(dflash_diag.reports, "parse_report", broken)
    monkeypatch.delenv("DFLASH_DIAG_DEBUG", raising=False)


def test_a_bug_is_exit_1_and_one_line_that_asks_for_debug(planted_bug):
    result = runner.invoke(app, ["parse", SAMPLE_LOG])
    assert result.exit_code == 1
    assert result.stderr == BUG


@pytest.mark.parametrize(
    "args",
    [["--debug", "parse", SAMPLE_LOG], ["parse", SAMPLE_LOG, "--debug"],
     ["parse", "--debug", SAMPLE_LOG]],
    ids=["before the command", "at the end", "among the options"],
)  # fmt: skip
def test_debug_shows_the_traceback_wherever_it_is_given(planted_bug, args):
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "Traceback" in result.stderr and "broken" in result.stderr  # (the raising frame)
    assert result.stderr.endswith("RuntimeError: a bug planted by the test\n")


def test_debug_from_the_environment(planted_bug, monkeypatch):
    monkeypatch.setenv("DFLASH_DIAG_DEBUG", "1")
    result = runner.invoke(app, ["parse", SAMPLE_LOG], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "Traceback" in result.stderr
    assert result.stderr.endswith("RuntimeError: a bug planted by the test\n")


def test_debug_after_a_double_dash_is_an_argument():
    # (`parse -- --debug`: a log named "--debug", which is not there)
    result = runner.invoke(app, ["parse", "--", "--debug"])
    assert result.exit_code == 2
    assert result.stderr == "error: --debug: no such file; check the path\n"


def _imported(code: str, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter has imported after running ``code``."""
    check = f"import sys\n{code}\nprint(','.join(m for m in {modules!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


def test_help_does_not_import_heavy_libraries():
    heavy = ("pandas", "scipy", "matplotlib", "pyarrow")
    assert _imported("from dflash_diag.cli import app", heavy) == []


@pytest.mark.slow
def test_the_analyses_do_not_import_scipy_stats():
    """scipy.stats adds about 0.45 s to start-up; the tests and intervals come from
    dflash_diag.stattests, on scipy.special."""
    code = (
        "import dflash_diag.spikes.attribute, dflash_diag.spikes.variance\n"
        "import dflash_diag.batches.stats\n"
        "import dflash_diag.compare.summary\n"
        "from dflash_diag import stattests\n"
        "stattests.pearson([1, 2, 3], [1, 3, 2]); stattests.f_sf(1.0, 2, 3)"
    )
    assert _imported(code, ("scipy.special", "scipy.stats")) == ["scipy.special"]


@pytest.mark.slow
def test_python_dash_m_is_the_same_program():
    out = subprocess.run(
        [sys.executable, "-m", "dflash_diag", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0
    for command in ("parse", "spikes", "batches", "compare"):
        assert command in out.stdout


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_is_the_installed_packages(flag):
    from importlib.metadata import version

    import dflash_diag

    result = runner.invoke(app, [flag])
    assert result.exit_code == 0
    assert result.stdout == f"dflash-diag {dflash_diag.__version__}\n"
    # one source: the package's metadata takes its version from dflash_diag.__version__
    assert version("dflash-diag") == dflash_diag.__version__


@pytest.mark.parametrize("rich_help", ["1", "0"])
def test_the_command_alone_shows_its_help_once_and_exits_2(rich_help):
    """typer makes the no-arguments error with the help, which prints a rich screen
    then: the screen is not printed a second time (TYPER_USE_RICH=0: plain help)."""
    out = subprocess.run(
        [sys.executable, "-m", "dflash_diag"],
        capture_output=True,
        text=True,
        env={**os.environ, "TYPER_USE_RICH": rich_help, "COLUMNS": "100"},
    )
    assert out.returncode == 2
    assert out.stdout.count("Usage: dflash-diag") == 1, out.stdout
    assert all(name in out.stdout for name in ("parse", "spikes", "compare"))


@pytest.mark.parametrize("args", [["--help"], ["spikes", "--help"], []], ids=repr)
def test_a_help_screen_into_a_closed_pipe_is_not_a_bug(args):
    # `dflash-diag --help | head -1`: exit 0 (rich's console would end with 1, a bug's);
    # `dflash-diag | head -1`: 2, as with the whole screen read (no arguments is usage)
    shell = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "dflash_diag", *args])
    out = subprocess.run(
        ["bash", "-c", f"{shell} | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "100"},
    )
    assert out.stdout.strip() == ("0" if args else "2")
    assert out.stderr == ""


@pytest.mark.slow
@pytest.mark.parametrize("command", ["parse", "spikes"])
def test_a_reader_that_closes_the_pipe_is_not_a_bug(command):
    # `dflash-diag parse run.log | head -1`: exit 0 (1 is reserved for bugs), stderr empty
    log = Path(__file__).resolve().parents[2] / "sample_logs" / "run.log"
    shell = f"{shlex.quote(sys.executable)} -m dflash_diag {command} {shlex.quote(str(log))}"
    out = subprocess.run(
        ["bash", "-c", f"{shell} | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == "0"
    assert out.stderr == ""


@pytest.mark.parametrize(
    "args",
    [[], ["parse"], ["spikes"], ["samples"], ["batches"], ["compare"], ["watch"], ["manifest"]],
)
def test_help_shows_no_python_type_names(args):
    """``<bool>``, ``<str>``, ``<path>`` and ``{data}`` are Python's names, not a CLI's."""
    from typer.testing import CliRunner

    from dflash_diag.cli import app

    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0
    for word in ("<bool>", "<str>", "<path>", "<int>", "{data}", "{log}"):
        assert word not in result.stdout, (args, word)
