"""Docs that cannot drift: every command and every option is in the README, with help."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from dflash_diag.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]
runner = CliRunner()
#: The README's sessions: ```console blocks, each a `$ dflash-diag ...` line and what it printed.
SESSIONS = re.findall(r"```console\n\$ (dflash-diag [^\n]*)\n(.*?)```", README, flags=re.S)
#: The terminal width the sessions were captured at.
SESSION_COLUMNS = 110


def test_readme_starts_with_the_two_commands_of_a_fresh_machine():
    blocks = re.findall(r"```(?:bash|sh|console)?\n(.*?)```", README, flags=re.S)
    first = blocks[0].strip().splitlines()
    assert (
        first[0].startswith("pip install") and "dflash-diag spikes sample_logs/run.log" in first[0]
    )
    assert first[1].startswith("pip install") and "pytest" in first[1]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_has_help_and_a_readme_section(name):
    result = runner.invoke(app, [name, "--help"])
    assert result.exit_code == 0
    assert COMMANDS[name].help, f"{name} has no help text"
    assert f"### `dflash-diag {name}" in README, f"README has no section for {name}"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_is_documented(name):
    options = {
        opt
        for param in COMMANDS[name].params
        for opt in getattr(param, "opts", [])
        if opt.startswith("--")
    }
    missing = sorted(o for o in options if f"`{o}" not in README)
    assert not missing, f"README does not document {name} options {missing}"


@pytest.mark.slow
def test_the_readme_python_example_runs(monkeypatch, capsys):
    # Docs that cannot drift: the library example is executed as written, from the root.
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert blocks, "README has a Python example"
    monkeypatch.chdir(ROOT)
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip().endswith("1.0")


def test_the_readme_shows_a_session_of_every_command():
    # (without them the session test below would have no cases, and pass by not running)
    shown = {c.split()[1] for c, _ in SESSIONS}
    assert set(COMMANDS) <= shown, f"README sessions lack {sorted(set(COMMANDS) - shown)}"


@pytest.mark.slow
@pytest.mark.parametrize("command,shown", SESSIONS, ids=[c for c, _ in SESSIONS])
def test_the_readme_sessions_are_what_the_commands_print(command, shown):
    """Each line a README session shows (but its ``...`` elisions) is what the command
    prints today, in the same order, at the width the session was captured at (stdout;
    stderr for a session that ends in an error)."""
    env = {**os.environ, "COLUMNS": str(SESSION_COLUMNS), "TERM": "dumb"}
    args = [sys.executable, "-m", "dflash_diag", *shlex.split(command)[1:]]
    got = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env)
    printed = [x.rstrip() for x in (got.stdout if got.returncode == 0 else got.stderr).splitlines()]
    at = 0
    for line in (x.rstrip() for x in shown.splitlines() if x.strip() != "..."):
        assert line in printed[at:], f"{command!r} no longer prints this README line: {line!r}"
        at = printed.index(line, at) + 1
