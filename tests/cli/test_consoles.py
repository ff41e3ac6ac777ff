"""The results console's width: 120 columns in a pipe or a file, ``$COLUMNS`` where it is
set, decided at each print (not when the module was first imported)."""

from __future__ import annotations

import io

from dflash_diag.cli.consoles import PIPE_WIDTH, _Results


def _printed_width(console: _Results) -> int:
    console.print("x" * 300, soft_wrap=False)
    return max(len(line) for line in console.file.getvalue().splitlines())


def test_a_pipe_gets_the_pipe_width(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    console = _Results(file=io.StringIO())
    assert console.width == PIPE_WIDTH
    assert _printed_width(console) == PIPE_WIDTH


def test_columns_set_when_the_console_was_made_do_not_stick(monkeypatch):
    # a notebook or a test that ran one command with COLUMNS=100 set for it
    monkeypatch.setenv("COLUMNS", "100")
    console = _Results(file=io.StringIO())
    assert console.width == 100
    monkeypatch.delenv("COLUMNS")
    assert console.width == PIPE_WIDTH
    monkeypatch.setenv("COLUMNS", "64")
    assert _printed_width(console) == 64


def test_a_width_given_is_kept(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    console = _Results(file=io.StringIO(), width=50)
    monkeypatch.delenv("COLUMNS")
    assert console.width == 50
