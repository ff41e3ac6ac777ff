"""The help screens are drawn as typer draws them, without typer's renderer's imports.

Each screen is drawn twice through the same app, once by ``dflash_diag.cli.helpscreen``
and once by typer's own renderer (``typer.rich_utils``, imported here), and the two must
be the same characters at every width, each printed character in the same style (the
escape codes may split a run of one style differently; a space's style is not seen).
The prose of a help text is drawn as rich's Markdown draws it whenever
:func:`plain_paragraphs` says it can be.
"""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.markdown import Markdown
from typer.testing import CliRunner

from dflash_diag.cli import COMMANDS, app, helpscreen
from tests.budget import examples

SCREENS = [[], *([name] for name in COMMANDS)]


def _screen(args: list[str], width: int, monkeypatch, ours: bool) -> str:
    if not ours:
        monkeypatch.setattr(helpscreen, "can_draw", lambda command: False)
    env = {"COLUMNS": str(width), "FORCE_COLOR": "1", "TERM": "xterm-256color"}
    result = CliRunner().invoke(app, [*args, "--help"], env=env)
    monkeypatch.undo()
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("width", [60, 100, 200])
@pytest.mark.parametrize("args", SCREENS, ids=lambda a: " ".join(a) or "dflash-diag")
def test_every_help_screen_is_typers_to_the_colour(args, width, monkeypatch):
    ours = _screen(args, width, monkeypatch, ours=True)
    typers = _screen(args, width, monkeypatch, ours=False)
    assert "\x1b[" in ours  # the colours are compared too
    assert _seen(ours) == _seen(typers)


def _seen(drawn: str) -> list[list[tuple[str, str]]]:
    """Each line of ``drawn`` (with its escape codes) as (character, style) pairs, a
    space's style and the spaces that end a line left out."""
    from rich.text import Text

    lines = []
    for line in drawn.split("\n"):
        text = Text.from_ansi(line)
        text.rstrip()
        styles = [""] * len(text.plain)
        for span in text.spans:
            for i in range(span.start, span.end):
                styles[i] = f"{styles[i]} {span.style}".strip()
        pairs = zip(text.plain, styles, strict=True)
        lines.append([(c, "" if c == " " else st) for c, st in pairs])
    return lines


def test_the_screens_are_drawn_here_not_by_typer(monkeypatch):
    """Every help text of the app is plain paragraphs, so no screen needs Markdown."""
    drawn = []
    monkeypatch.setattr(helpscreen, "print_help", lambda command, ctx: drawn.append(command))
    for args in SCREENS:
        assert CliRunner().invoke(app, [*args, "--help"]).exit_code == 0
    assert len(drawn) == len(SCREENS)


def test_typer_draws_plain_help_when_told_to(monkeypatch):
    import typer.core

    monkeypatch.setattr(typer.core, "HAS_RICH", False)
    out = CliRunner().invoke(app, ["parse", "--help"], env={"COLUMNS": "100"}).stdout
    assert out.startswith("Usage: dflash-diag parse") and "╭" not in out


def _drawn(renderable, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system="256")
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]


# pieces of help text: what plain paragraphs hold, and Markdown's marks
PLAIN_BITS = st.sampled_from(
    [" ", "  ", "\n", "\n\n", "word", "grad_norm", "--flag", "`code`", "` c `", "\\[",
     "\\]", "W&B", " <= ", " >= ", "a|b", "!", ".", "(", ")", "x[, y]", "HOST:PORT"]
)  # fmt: skip
MARKDOWN_BITS = st.sampled_from(
    ["\n    ", "_x", "x_", "*", "**", "- ", "1. ", "#", "> ", "`", "\\", "\\`", "\\*", "[a](b)",
     "[x]", "<a>", "&amp;", "~~", ":smile:", "---", "===", "\t", "  \n", "``"]
)  # fmt: skip


def _with(bits: list[str], odd: str, at: int) -> str:
    bits.insert(min(at, len(bits)), odd)
    return "".join(bits)


# plain pieces, and half the time one of Markdown's marks among them
TEXTS = st.builds(
    _with, st.lists(PLAIN_BITS, max_size=16), st.one_of(st.just(""), MARKDOWN_BITS),
    st.integers(0, 16),
)  # fmt: skip


@settings(max_examples=examples(400), deadline=None)
@given(TEXTS, st.integers(20, 90))
def test_plain_paragraphs_are_drawn_as_markdown_draws_them(text, width):
    text = text.strip()
    if not text or not helpscreen.plain_paragraphs(text):
        return
    ours = _drawn(helpscreen.prose(text, style="dim"), width)
    assert _seen(ours) == _seen(_drawn(Markdown(text, style="dim"), width))


@pytest.mark.parametrize(
    "text",
    ["a *b* c", "- item", "# Title", "see [this](http://x)", "a `b", "x  \ny", "__a__",
     "> quote", "1. one", "a ~~b~~", "&amp;", ":smile:", "<b>bold</b>", "---"],
)  # fmt: skip
def test_markdown_that_is_not_plain_goes_to_rich(text):
    assert not helpscreen.plain_paragraphs(text)
    assert isinstance(helpscreen.prose(text), Markdown)


def test_help_text_of_this_app_reads_as_markdown_would():
    text = "Also metric_rank in \\[schedule]; what `spikes` needs,\n--at STEP answers."
    assert helpscreen.plain_paragraphs(text)
    assert _seen(_drawn(helpscreen.prose(text), 40)) == _seen(_drawn(Markdown(text), 40))


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_is_listed_as_its_built_command_says(name):
    from dflash_diag.cli import group as cli

    listed = cli._listed(COMMANDS[name])
    built = cli._build_command(COMMANDS[name])
    fields = ("name", "help", "short_help", "hidden", "deprecated")
    assert [getattr(listed, f) for f in fields] == [getattr(built, f) for f in fields]


def test_the_list_of_commands_builds_none(monkeypatch):
    """The group's screen reads the commands' names and help, not their parameters."""
    from dflash_diag.cli import group as cli

    def refuse(module_name):
        raise AssertionError(f"built {module_name}")

    monkeypatch.setattr(cli, "_build_command", refuse)
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert all(name in result.stdout for name in COMMANDS)


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(st.sampled_from([*"ab Z_-()/.,[]:\\=\n", "smile", "Options"]), max_size=12).map(
        "".join
    ),
    st.integers(20, 90),
)
def test_a_panel_title_is_drawn_as_rich_draws_it_from_markup(title, width):
    from rich.errors import MarkupError
    from rich.panel import Panel
    from rich.table import Table

    table = Table(show_header=False)
    table.add_row("x")
    try:
        theirs = _drawn(Panel(table, border_style="dim", title=title, title_align="left"), width)
    except MarkupError:  # (a title that is not markup fails the same way here)
        with pytest.raises(MarkupError):
            _drawn(helpscreen._panel(title, table), width)
        return
    assert _drawn(helpscreen._panel(title, table), width) == theirs


# --- dflash-diag --help, drawn without typer -----------------------------------------


def test_the_top_screen_is_what_the_app_shows(monkeypatch):
    """``cli/listing.py`` says what the typer app's own screen says, item by item."""
    shown = []
    monkeypatch.setattr(helpscreen, "draw", shown.append)
    assert CliRunner().invoke(app, ["--help"]).exit_code == 0
    assert shown == [helpscreen.top_screen()]


ENVS = [
    {},
    {"FORCE_COLOR": "1", "TERM": "xterm-256color"},
    {"FORCE_COLOR": "1", "NO_COLOR": "1"},
    {"TERMINAL_WIDTH": "70"},
]


def _main_screen(args: list[str], env: dict[str, str], monkeypatch, capsys) -> tuple[int, str]:
    from dflash_diag.cli import main

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as ended:
        main(args)
    monkeypatch.undo()
    return ended.value.code, capsys.readouterr().out


@settings(max_examples=examples(40), deadline=None)
@given(st.integers(10, 240), st.sampled_from(ENVS), st.sampled_from([["--help"], ["-h"], []]))
def test_main_draws_the_apps_screen_byte_for_byte(width, env, args):
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("COLUMNS", str(width))
        capture = _Capture()
        monkeypatch.setattr("sys.stdout", capture)
        code, ours = _main_screen(args, env, monkeypatch, capture)
    typers = CliRunner().invoke(app, args, env={"COLUMNS": str(width), **env})
    assert (code, ours) == (typers.exit_code, typers.stdout)
    assert code == (0 if args else 2)


class _Capture:
    """A non-terminal standard output that keeps what is written (``readouterr``)."""

    def __init__(self) -> None:
        self.buffer = io.StringIO()

    def write(self, text: str) -> int:
        return self.buffer.write(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise io.UnsupportedOperation("fileno")

    def readouterr(self):
        from types import SimpleNamespace

        return SimpleNamespace(out=self.buffer.getvalue())


def test_typer_draws_the_apps_screen_when_told_to(monkeypatch, capsys):
    """``TYPER_USE_RICH=0``: typer's plain screen, as for every other screen."""
    import typer.core

    monkeypatch.setattr(typer.core, "HAS_RICH", False)
    code, out = _main_screen(
        ["--help"], {"TYPER_USE_RICH": "0", "COLUMNS": "100"}, monkeypatch, capsys
    )
    assert code == 0
    assert out.startswith("Usage: dflash-diag [OPTIONS] COMMAND") and "╭" not in out


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_is_the_apps(flag, monkeypatch, capsys):
    code, out = _main_screen([flag], {}, monkeypatch, capsys)
    typers = CliRunner().invoke(app, [flag])
    assert (code, out) == (typers.exit_code, typers.stdout)
    assert out.startswith("dflash-diag ")


def test_shell_completion_is_left_to_the_app(monkeypatch, capsys):
    """With click's completion variable set, no arguments is the app's business."""
    from dflash_diag.cli import COMPLETE_VAR, group

    assert COMPLETE_VAR == "_DFLASH_DIAG_COMPLETE"
    ran = []
    monkeypatch.setattr(group, "app", lambda args: ran.append(args))
    monkeypatch.setenv(COMPLETE_VAR, "bash_source")
    from dflash_diag.cli import main

    main([])
    assert ran == [[]] and capsys.readouterr().out == ""
