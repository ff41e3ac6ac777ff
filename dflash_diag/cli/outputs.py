"""Options and helpers the analysing commands share for their outputs: ``--html``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Annotated, Any

import typer

HtmlOpt = Annotated[
    Path | None,
    typer.Option(
        "--html",
        help="Write one self-contained HTML report (summary, tables, every spike with its "
        "samples, the plots; opens without a network).",
        metavar="FILE",
    ),
]


def check_html_path(path: str | Path, protect: Sequence[str | Path | None] = ()) -> Path:
    """Validate ``--html FILE`` before any work is done: an ``.html`` file whose folder
    exists and can be written, and that is not an input (by identity: links count)."""
    from ..outpath import check_output_path

    return check_output_path(path, (".html", ".htm"), "report", protect=protect)


def check_outputs(
    plot: str | Path | None,
    html: str | Path | None,
    inputs: Sequence[str | Path | None] = (),
) -> None:
    """Validate ``--plot FILE`` and ``--html FILE`` (when given) before any work is done:
    neither may be one of the ``inputs`` (log, manifest, config, recording), nor the
    other output."""
    from ..errors import InputError
    from ..outpath import same_file

    if plot is not None:
        from ..render.plots import check_plot_path

        check_plot_path(plot, inputs)
    if html is not None:
        check_html_path(html, inputs)
    if plot is not None and html is not None:
        if Path(plot).absolute() == Path(html).absolute() or same_file(plot, html):
            raise InputError(str(html), "--html and --plot name the same file", "name two")


def stages(enabled: bool) -> Any:
    """A :data:`~dflash_diag.reports.Stage` drawing progress bars on stderr (off when
    ``enabled`` is false, e.g. under ``--json``)."""
    from .options import progress

    def stage(description: str) -> AbstractContextManager[Any]:
        return progress(description, enabled=enabled)

    return stage


#: typer's type labels -> the words ``--help`` shows, as tools people know show them.
_TYPE_WORDS = {
    "<bool>": "",
    "<int>": "INTEGER",
    "<list[int]>": "INTEGER",
    "<float>": "NUMBER",
    "<str>": "TEXT",
    "<list[str]>": "TEXT",
    "<path>": "FILE",
    "<file>": "FILE",
}


def _shows(word: str) -> Callable[[Any], str]:
    """A ``display_type_rich`` that shows ``word``."""

    def display(ctx: Any) -> str:
        return word

    return display


def plain_help_types(command: Any) -> Any:
    """A typer command class whose ``--help`` shows flags without ``<bool>``, types as
    words (``INTEGER``, ``FILE``) rather than ``<int>``, ``<list[str]>``, and arguments
    by one upper-case name (``LOG``, ``LOG...``, ``[MANIFEST]``) in the usage line and the
    table alike; an option's own ``metavar`` wins."""
    from typer.core import TyperArgument, TyperOption

    class PlainTypes(command):  # type: ignore[misc, valid-type]
        def get_params(self, ctx: Any) -> list[Any]:
            params = super().get_params(ctx)
            for p in params:
                if isinstance(p, TyperOption) and p.metavar is None:
                    shown = str(p.display_type(ctx))
                    word = _TYPE_WORDS.get(shown)
                    if word is None and "|" in shown:  # choices: a|b|c, as click shows them
                        word = shown.strip("<>")
                    if word is not None:
                        p.metavar = word
                elif isinstance(p, TyperArgument):
                    p.metavar = (p.metavar or p.name or "").upper()
                    # the type column: every argument of these commands is a file
                    kind = "FILE..." if p.nargs != 1 else "FILE"
                    p.display_type_rich = _shows(kind)  # type: ignore[method-assign, assignment]
            return params

        def format_help(self, ctx: Any, formatter: Any) -> None:
            from .helpscreen import format_help

            format_help(self, ctx, formatter, super().format_help)

        def collect_usage_pieces(self, ctx: Any) -> list[str]:
            pieces = ["[OPTIONS]"]
            for p in self.get_params(ctx):
                if isinstance(p, TyperArgument):
                    name = str(p.metavar) + ("..." if p.nargs != 1 else "")
                    pieces.append(name if p.required else f"[{name}]")
            return pieces

    return PlainTypes


def say_written(console: Any, plot: Path | None, html: Path | None) -> None:
    """``plot written to FILE`` / ``report written to FILE``: every command that wrote a
    file says so, after its text."""
    if plot is not None:
        console.print(f"plot written to {plot}", markup=False)
    if html is not None:
        console.print(f"report written to {html}", markup=False)
