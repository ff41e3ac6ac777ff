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
from collections.abc import Callable, Iterable, Iterator
from typing import Any

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


def print_help(command: Any, ctx: Any) -> None:
    """Print ``command``'s help screen (a click command or group of typer's) on
    standard output."""
    console = _console()
    console.print(Padding(_options(command.get_usage(ctx)), 1), style="bold")
    if command.help:
        console.print(Padding(Align(_help_text(command.help), pad=False), (0, 1, 1, 1)))
    arguments: dict[str, list[Any]] = {"Arguments": []}
    options: dict[str, list[Any]] = {"Options": []}
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        group = arguments if type(param).__name__ == "TyperArgument" else options
        panel = getattr(param, "rich_help_panel", None) or next(iter(group))
        group.setdefault(panel, []).append(param)
    for panels in (arguments, options):
        for name, params in panels.items():
            if params:
                console.print(_panel(name, _params_table(params, ctx)))
    listed = [c for c in _commands(command, ctx) if not c.hidden]
    if listed:
        console.print(_panel("Commands", _commands_table(listed)))


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


def _params_table(params: list[Any], ctx: Any) -> Table:
    """One row a parameter: its required mark (when any is required), long names,
    short names, the negative flag's long and short names, its type, its help."""
    table = Table(
        highlight=True, show_header=False, expand=True, box=None, pad_edge=False,
        padding=(0, 1),
    )  # fmt: skip
    marks = [Text("*", style=STYLE_REQUIRED) if p.required else "" for p in params]
    for param, mark in zip(params, marks, strict=True):
        row = [*_names(param), _type_text(param, ctx), _param_help(param, ctx)]
        table.add_row(*([mark, *row] if any(marks) else row))
    return table


def _names(param: Any) -> Iterator[Text]:
    """Long names, short names, negative long and short names (an argument's short
    name is its metavar)."""
    shown = None
    if type(param).__name__ == "TyperArgument":
        shown = param.metavar if param.metavar is not None else param.name
        if param.metavar is None and param.nargs != 1:
            shown += "..."
    for opts, draw in ((param.opts, _options), (param.secondary_opts, _negative)):
        long = [o for o in opts if "--" in o]
        short = [shown or o for o in opts if "--" not in o]
        yield draw(",".join(long))
        yield draw(",".join(short))


def _type_text(param: Any, ctx: Any) -> Text:
    text = Text(style=STYLE_TYPES, overflow="fold")
    shown = param.display_type_rich(ctx=ctx)
    if shown is not None:
        text.append(shown)
    span = _range(param)
    if span:
        text.append(f" [{span}]")
    return _types(text)


def _range(param: Any) -> str | None:
    get = getattr(param, "_get_number_range_help_str", None)
    return get() if get is not None else None


def _param_help(param: Any, ctx: Any) -> Columns:
    """The parameter's help, then ``[env var: ...]``, ``[default: ...]`` and
    ``[required]`` where they apply, each on a line of its own as typer shows them."""
    items: list[RenderableType] = []
    if param.help:  # (paragraphs joined by one line break, as typer joins them)
        items.append(prose(inspect.cleandoc("\n".join(param.help.split("\n\n")).strip())))
    envvar = _envvar(param, ctx)
    if envvar and getattr(param, "show_envvar", None):
        items.append(Text(f"[env var: {envvar}]", style="dim yellow"))
    default = param._extract_default_help_str(ctx=ctx)
    as_str = isinstance(param.show_default, str)
    if as_str or (default is not None and (param.show_default or ctx.show_default)):
        shown = param._get_default_string(
            ctx=ctx, show_default_is_str=as_str, default_value=default
        )
        if shown:
            items.append(Text(f"[default: {shown}]", style=STYLE_DIM))
    if param.required:
        items.append(Text("[required]", style="dim red"))
    return Columns(items)


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


def _commands_table(commands: list[Any]) -> Table:
    """One row a command: its name and the first paragraph of its help."""
    table = Table(
        highlight=False, show_header=False, expand=True, box=None, pad_edge=False,
        padding=(0, 1),
    )  # fmt: skip
    width = max(len(c.name or "") for c in commands)
    table.add_column(style="bold cyan", no_wrap=True, width=width)
    table.add_column("Description", justify="left", no_wrap=False, ratio=10)
    for c in commands:
        first = inspect.cleandoc(c.short_help or c.help or "").split("\n\n")[0]
        table.add_row(Text(c.name or ""), prose(first.replace("\n", " ").strip()))
    return table
