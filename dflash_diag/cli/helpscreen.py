"""The help screens (``--help``): the usage line, the command's text, and panels of its
arguments, options and commands, drawn with rich's tables and panels in typer's layout.

typer draws them itself (``typer.rich_utils``), but that module imports rich's
Markdown and traceback renderers (markdown-it, pygments) when it is imported, a large
share of ``dflash-diag --help``'s start-up (docs/performance.md, *Start-up*).  The help
texts here are plain paragraphs (escaped punctuation and `code` at most), which
:func:`prose` draws as rich's Markdown would, line for line; a text with anything more
(emphasis, lists, links, headings, ...) goes to rich's Markdown itself, imported then.
Where this typer lacks what the screen reads (:data:`TYPER_NEEDS`), or the app's markup
is not Markdown, typer's own renderer draws it.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from rich.align import Align
from rich.columns import Columns
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.highlighter import RegexHighlighter
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from rich.theme import Theme

#: What this module reads from typer's parameters (typer >= 0.29): with any of them
#: missing, typer's own renderer draws the screen.
TYPER_NEEDS = ("display_type_rich", "_extract_default_help_str", "_get_default_string")

#: Markdown that :func:`prose` does not draw: a line that starts a block (heading,
#: quote, list item, fence, HTML, table row, rule, indented code; ``--flag`` at the
#: start of a line starts none), a hard line break, a backslash that escapes nothing or
#: a backtick, emphasis marks, links and images, autolinks and HTML tags, entities,
#: strikethrough, emoji codes (typer replaces them), tabs, and any backtick outside a
#: one-backtick code span.
_NOT_PLAIN = re.compile(
    r"^ *(?:[#>=|:\[<]|[-*+](?: |$)|\d+[.)]|```|~~~| {4})|^ *[-*_=][-*_= ]*$"
    r"|(?:  |\\)$|\\(?![!-/:-@\[-_{-~])"
    r"|\*|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])"
    r"|!?\[[^\]]*\][(\[]|<[A-Za-z/!?]|&#?\w+;|~~|:[\w+-]+:|\t",
    re.M,
)
_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")

STYLE_OPTION_LONG = "bold cyan"
STYLE_OPTION_SHORT = "bold green"
STYLE_TYPES = "bold yellow"
STYLE_REQUIRED = "red"
STYLE_DIM = "dim"


class _Options(RegexHighlighter):
    """Option names (``--metric``, ``-f``) and the usage word."""

    base_style = "help."
    highlights = [
        r"(?:^|\W)(?P<switch>-\w+)(?![\w-])",
        r"(?:^|\W)(?P<option>--[\w-]+)(?![\w-])",
        r"(?P<usage>Usage: )",
    ]


class _Negative(RegexHighlighter):
    """A flag's negative names (``--no-dropout``)."""

    base_style = "help.negative_"
    highlights = [
        r"(?:^|\W)(?P<switch>-\w+)(?![\w-])",
        r"(?:^|\W)(?P<option>--[\w-]+)(?![\w-])",
    ]


class _Types(RegexHighlighter):
    """A type's brackets and choice bars, dimmed (``<int>``, ``a|b|c``, ``[x]...``)."""

    base_style = "help."
    highlights = [
        r"^(?P<types_sep>[\[<])",
        r"(?P<types_sep>\|)",
        r"(?P<types_sep>[\]>])(?:\.\.\.)?$",
    ]


_THEME = Theme(
    {
        "help.option": STYLE_OPTION_LONG,
        "help.switch": STYLE_OPTION_SHORT,
        "help.usage": "yellow",
        "help.types": STYLE_TYPES,
        "help.types_sep": STYLE_DIM,
        "help.negative_option": "bold magenta",
        "help.negative_switch": "bold red",
    }
)
_negative = _Negative()
_options = _Options()
_types = _Types()


def plain_paragraphs(text: str) -> bool:
    """Whether ``text`` is paragraphs that :func:`prose` draws as Markdown would: no
    block but paragraphs, no inline markup but escapes and one-backtick code spans."""
    if _NOT_PLAIN.search(text):
        return False
    return "`" not in _CODE.sub("", text)


class Prose:
    """Paragraphs drawn as rich's Markdown draws them (each wrapped to the width, a
    blank line between): a renderable with no measure of its own, as Markdown has
    none, so a table or a row of columns gives it the whole width as it gives
    Markdown."""

    def __init__(self, text: Text) -> None:
        self.text = text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.text


def prose(text: str, style: str = "") -> RenderableType:
    """``text`` (already dedented) as Markdown would draw it: :class:`Prose` when it
    is plain paragraphs (:func:`plain_paragraphs`), else rich's Markdown."""
    if not plain_paragraphs(text):
        from rich.markdown import Markdown

        return Markdown(text, style=style)
    out = Text(style=style, justify="left")
    paragraphs = [p for p in re.split(r"\n[ \n]*\n", text.strip("\n")) if p.strip()]
    for i, para in enumerate(paragraphs):
        if i:
            out.append("\n\n")
        joined = " ".join(line.strip() for line in para.split("\n"))
        _append_inline(out, joined)
    return Prose(out)


def _append_inline(out: Text, line: str) -> None:
    """``line`` with its escapes undone and its code spans styled as Markdown's."""
    at = 0
    for m in _CODE.finditer(line):
        out.append(_ESCAPED.sub(r"\1", line[at : m.start()]))
        code = m.group(1)
        if code.startswith(" ") and code.endswith(" ") and code.strip():
            code = code[1:-1]
        out.append(code, style="markdown.code")
        at = m.end()
    out.append(_ESCAPED.sub(r"\1", line[at:]))


def format_help(command: Any, ctx: Any, formatter: Any, typers: Callable[..., None]) -> None:
    """Draw ``command``'s help with :func:`print_help`, or with typer's own renderer
    (``typers``: the command's ``format_help`` of typer) where typer would not draw rich
    help (``TYPER_USE_RICH=0``, no markup mode), reads rich markup rather than Markdown,
    or :func:`can_draw` says no."""
    import typer.core

    markdown = getattr(typer.core, "HAS_RICH", True) and command.rich_markup_mode == "markdown"
    if markdown and can_draw(command):
        print_help(command, ctx)
    else:
        typers(ctx, formatter)


def can_draw(command: Any) -> bool:
    """Whether this typer's parameters give what :func:`print_help` reads."""
    return all(
        all(hasattr(p, need) for need in TYPER_NEEDS)
        for p in command.params
        if type(p).__name__ in ("TyperOption", "TyperArgument")
    )


class Row(NamedTuple):
    """A parameter as its screen shows it: whether it is required, its long names, short
    names (an argument's: its metavar), the negative flag's long and short names, its
    type (and range), its help (paragraphs already joined), and the ``[env var: ...]``
    and ``[default: ...]`` shown under it ('' for none)."""

    required: bool
    long: str
    short: str
    negative_long: str
    negative_short: str
    type: str
    help: str
    envvar: str = ""
    default: str = ""


class Screen(NamedTuple):
    """What a help screen shows, in plain text: the usage line, the command's help,
    its panels of parameters (title, rows; the arguments' panels first), and the
    commands of a group (name, the first paragraph of its help)."""

    usage: str
    help: str
    panels: tuple[tuple[str, tuple[Row, ...]], ...]
    commands: tuple[tuple[str, str], ...] = ()


def print_help(command: Any, ctx: Any) -> None:
    """Print ``command``'s help screen (a click command or group of typer's) on
    standard output."""
    draw(screen_of(command, ctx))


def screen_of(command: Any, ctx: Any) -> Screen:
    """What ``command``'s screen shows (a click command or group of typer's)."""
    arguments: dict[str, list[Row]] = {"Arguments": []}
    options: dict[str, list[Row]] = {"Options": []}
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        group = arguments if type(param).__name__ == "TyperArgument" else options
        panel = getattr(param, "rich_help_panel", None) or next(iter(group))
        group.setdefault(panel, []).append(_row(param, ctx))
    panels = tuple(
        (name, tuple(rows)) for found in (arguments, options) for name, rows in found.items()
    )
    listed = [c for c in _commands(command, ctx) if not c.hidden]
    return Screen(
        usage=command.get_usage(ctx),
        help=command.help or "",
        panels=tuple((name, rows) for name, rows in panels if rows),
        commands=tuple((c.name or "", _first_paragraph(c)) for c in listed),
    )


def top_screen() -> Screen:
    """``dflash-diag --help``'s screen, from :mod:`~dflash_diag.cli.listing` alone: what
    :func:`screen_of` reads from the typer app (a test holds the two equal), without
    importing typer or the command modules."""
    from .listing import APP_HELP, COMMANDS, OPTIONS, PROG, SUMMARIES

    rows = tuple(Row(False, long, short, "", "", "", text) for long, short, text in OPTIONS)
    return Screen(
        usage=f"Usage: {PROG} [OPTIONS] COMMAND [ARGS]...",
        help=APP_HELP,
        panels=(("Options", rows),),
        commands=tuple((name, SUMMARIES[name]) for name in COMMANDS),
    )


def draw(screen: Screen) -> None:
    """Print ``screen`` on standard output, as typer draws a screen."""
    console = _console()
    console.print(Padding(_options(screen.usage), 1), style="bold")
    if screen.help:
        console.print(Padding(Align(_help_text(screen.help), pad=False), (0, 1, 1, 1)))
    for title, rows in screen.panels:
        console.print(_panel(title, _params_table(rows)))
    if screen.commands:
        console.print(_panel("Commands", _commands_table(screen.commands)))


class _Screen(Console):
    """Standard output's console for a help screen: a reader that closed the pipe
    (``--help | head``) is not a failure (:func:`~.consoles.end_at_closed_pipe`)."""

    def on_broken_pipe(self) -> None:
        from .consoles import end_at_closed_pipe

        end_at_closed_pipe(self)


def _console() -> Console:
    """Standard output's console, as typer makes it: ``TERMINAL_WIDTH`` caps the width;
    ``FORCE_COLOR``, ``PY_COLORS`` or ``GITHUB_ACTIONS`` force colours (rich reads
    ``NO_COLOR``, ``COLUMNS`` and the terminal itself)."""
    width = os.environ.get("TERMINAL_WIDTH")
    forced = any(os.environ.get(v) for v in ("GITHUB_ACTIONS", "FORCE_COLOR", "PY_COLORS"))
    return _Screen(
        theme=_THEME,
        highlighter=_options,
        width=int(width) if width else None,
        force_terminal=True if forced else None,
    )


def _help_text(help_text: str) -> RenderableType:
    """The command's text: its first paragraph, then the others dimmed."""
    from rich.console import Group

    first, *rest = inspect.cleandoc(help_text).partition("\f")[0].split("\n\n")
    parts: list[RenderableType] = [prose(first.strip())]
    if rest:
        parts += [Text(""), prose("\n\n".join(rest), style=STYLE_DIM)]
    return Group(*parts)


def _panel(title: str, table: Table) -> Panel:
    """``table`` in a dim panel titled ``title``, as typer draws it.  A title without
    markup or emoji codes (no ``[``, no ``:``) is given as text: rich would read it as
    markup, the same characters, after importing its table of emoji codes."""
    shown: str | Text = title if "[" in title or ":" in title else Text(title)
    return Panel(table, border_style=STYLE_DIM, title=shown, title_align="left")


def _params_table(rows: tuple[Row, ...]) -> Table:
    """One row a parameter: its required mark (when any is required), long names,
    short names, the negative flag's long and short names, its type, its help."""
    table = Table(
        highlight=True, show_header=False, expand=True, box=None, pad_edge=False,
        padding=(0, 1),
    )  # fmt: skip
    marks = [Text("*", style=STYLE_REQUIRED) if r.required else "" for r in rows]
    for row, mark in zip(rows, marks, strict=True):
        cells = [
            _options(row.long),
            _options(row.short),
            _negative(row.negative_long),
            _negative(row.negative_short),
            _types(Text(row.type, style=STYLE_TYPES, overflow="fold")),
            _help_items(row),
        ]
        table.add_row(*([mark, *cells] if any(marks) else cells))
    return table


def _help_items(row: Row) -> Columns:
    """The parameter's help, then ``[env var: ...]``, ``[default: ...]`` and
    ``[required]`` where they apply, each on a line of its own as typer shows them."""
    items: list[RenderableType] = []
    if row.help:
        items.append(prose(row.help))
    if row.envvar:
        items.append(Text(f"[env var: {row.envvar}]", style="dim yellow"))
    if row.default:
        items.append(Text(f"[default: {row.default}]", style=STYLE_DIM))
    if row.required:
        items.append(Text("[required]", style="dim red"))
    return Columns(items)


def _row(param: Any, ctx: Any) -> Row:
    """``param``'s :class:`Row` (a click parameter of typer's)."""
    shown = None
    if type(param).__name__ == "TyperArgument":
        shown = param.metavar if param.metavar is not None else param.name
        if param.metavar is None and param.nargs != 1:
            shown += "..."
    names = []
    for opts in (param.opts, param.secondary_opts):
        names.append(",".join(o for o in opts if "--" in o))
        names.append(",".join(shown or o for o in opts if "--" not in o))
    kind = param.display_type_rich(ctx=ctx) or ""
    span = _range(param)
    if span:
        kind += f" [{span}]"
    text = ""
    if param.help:  # (paragraphs joined by one line break, as typer joins them)
        text = inspect.cleandoc("\n".join(param.help.split("\n\n")).strip())
    envvar = _envvar(param, ctx) if getattr(param, "show_envvar", None) else ""
    long, short, negative_long, negative_short = names
    return Row(
        bool(param.required), long, short, negative_long, negative_short, kind, text, envvar,
        _default(param, ctx),
    )  # fmt: skip


def _default(param: Any, ctx: Any) -> str:
    """The default ``[default: ...]`` shows, as typer takes it ('' for none)."""
    default = param._extract_default_help_str(ctx=ctx)
    as_str = isinstance(param.show_default, str)
    if as_str or (default is not None and (param.show_default or ctx.show_default)):
        shown = param._get_default_string(
            ctx=ctx, show_default_is_str=as_str, default_value=default
        )
        return shown or ""
    return ""


def _range(param: Any) -> str | None:
    get = getattr(param, "_get_number_range_help_str", None)
    return get() if get is not None else None


def _envvar(param: Any, ctx: Any) -> str:
    envvar = getattr(param, "envvar", None)
    prefix = getattr(ctx, "auto_envvar_prefix", None)
    if envvar is None and getattr(param, "allow_from_autoenv", None) and prefix and param.name:
        envvar = f"{prefix}_{param.name.upper()}"
    if envvar is None:
        return ""
    return envvar if isinstance(envvar, str) else ", ".join(str(e) for e in envvar)


def _commands(command: Any, ctx: Any) -> Iterable[Any]:
    """A group's commands (each with ``name``, ``help``, ``short_help``, ``hidden``):
    the group's own ``listing`` where it has one (commands it need not build)."""
    if hasattr(command, "listing"):
        return command.listing(ctx)  # type: ignore[no-any-return]
    if not hasattr(command, "list_commands"):
        return ()
    found = (command.get_command(ctx, name) for name in command.list_commands(ctx))
    return [c for c in found if c is not None]


def _first_paragraph(command: Any) -> str:
    """The first paragraph of a listed command's help (its short help, if it has one),
    on one line."""
    first = inspect.cleandoc(command.short_help or command.help or "").split("\n\n")[0]
    return first.replace("\n", " ").strip()


def _commands_table(commands: tuple[tuple[str, str], ...]) -> Table:
    """One row a command: its name and the first paragraph of its help."""
    table = Table(
        highlight=False, show_header=False, expand=True, box=None, pad_edge=False,
        padding=(0, 1),
    )  # fmt: skip
    width = max(len(name) for name, _ in commands)
    table.add_column(style="bold cyan", no_wrap=True, width=width)
    table.add_column("Description", justify="left", no_wrap=False, ratio=10)
    for name, first in commands:
        table.add_row(Text(name), prose(first))
    return table
