"""The ``dflash-diag`` command group: typer's app, its error boundary, and its commands,
each built the first time it is looked up.

One error boundary lives here: :class:`~dflash_diag.errors.InputError` and click usage
errors become one ``error: ...`` line on stderr and exit status 2; anything else is a
bug (exit 1; ``--debug`` or ``DFLASH_DIAG_DEBUG=1`` shows the traceback).

Start-up imports only what runs: typer here; a command's module (``cli/parse.py``, ...)
the first time the group looks the command up, so ``dflash-diag parse LOG`` imports
``cli/parse.py`` and none of the other commands, and the group's own help (which lists
them all) imports the command modules but none of the libraries behind them.  The
libraries a command needs (pandas, numpy, scipy, matplotlib, pyarrow) are imported inside
its body.  ``dflash-diag --help`` itself is drawn before this module is imported
(:func:`dflash_diag.cli.main`).  ``benchmarks/bench_startup.py`` times it.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperGroup

from ..errors import InputError
from .coercion import plain_coercion
from .listing import APP_HELP, COMMANDS, DEBUG, HELP, PROG, VERSION, version_line


def _click_classes(name: str) -> tuple[type[BaseException], ...]:
    """``name`` from click and from typer's vendored copy of click (typer >= 0.26).

    click itself only when typer has imported it (typer < 0.26): with the vendored copy
    nothing here raises click's own errors, and importing it would cost start-up."""
    found: list[type[BaseException]] = []
    for module in ("typer._click.exceptions", "click.exceptions", "typer.exceptions"):
        if module.startswith("click.") and "click" not in sys.modules:
            continue
        try:
            cls = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if isinstance(cls, type) and cls not in found:
            found.append(cls)
    return tuple(found)


_NO_ARGS = _click_classes("NoArgsIsHelpError")
_USAGE = _click_classes("UsageError")
_EXIT = _click_classes("Exit")
_ABORT = _click_classes("Abort")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _err_console() -> Any:
    # rich's console is imported when there is an error to print, not at start-up
    from .consoles import err_console

    return err_console


class _LazyCommands(MutableMapping[str, Any]):
    """The group's commands by name, each built the first time it is looked up.

    The names are known without importing anything (so a misspelt command still gets
    "Did you mean ...?"); looking one up imports its module and turns the function it
    registers into a click command, as typer would have at start-up."""

    def __init__(self, modules: dict[str, str], build: Callable[[str], Any]) -> None:
        self._modules = dict(modules)
        self._build = build
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in self._modules:
                raise KeyError(name)
            self._built[name] = self._build(self._modules[name])
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self._modules and name not in self._built:
            raise KeyError(name)
        self._modules.pop(name, None)
        self._built.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        yield from self._modules
        yield from (name for name in self._built if name not in self._modules)

    def __len__(self) -> int:
        return len(set(self._modules) | set(self._built))

    def listed(self, name: str) -> Any:
        """The command ``name`` if it is built, else it as ``--help`` lists it
        (:func:`_listed`), without building it."""
        if name in self._built or name not in self._modules:
            return self[name]
        return _listed(self._modules[name])


@functools.cache
def _registered(module_name: str) -> Any:
    """What ``dflash_diag.cli.<module_name>`` registers with typer (its ``CommandInfo``:
    the function, the name, the help), not yet made a click command."""
    module = importlib.import_module(f"{__package__}.{module_name}")
    one = typer.Typer(rich_markup_mode=app.rich_markup_mode)
    module.register(one)
    (info,) = one.registered_commands
    return info


def _build_command(module_name: str) -> Any:
    """The click command that ``dflash_diag.cli.<module_name>`` registers."""
    command = typer.main.get_command_from_info(
        _registered(module_name),
        pretty_exceptions_short=app.pretty_exceptions_short,
        rich_markup_mode=app.rich_markup_mode,
    )
    plain_coercion(command.params)
    return command


@dataclass(frozen=True)
class Listed:
    """A command as the group's ``--help`` lists it: what typer would make its click
    command's ``name``, ``help``, ``short_help``, ``hidden`` and ``deprecated``."""

    name: str
    help: str
    short_help: str | None = None
    hidden: bool = False
    deprecated: bool | str = False


def _listed(module_name: str) -> Listed:
    """The command of ``dflash_diag.cli.<module_name>`` as ``--help`` lists it, read
    from what the module registers, without typer reading its function's parameters
    (the help as typer takes it: the registered help, else the function's docstring)."""
    info = _registered(module_name)
    text = info.help if info.help is not None else inspect.getdoc(info.callback)
    return Listed(
        name=info.name or info.callback.__name__.replace("_", "-"),
        help=inspect.cleandoc(text or ""),
        short_help=info.short_help,
        hidden=bool(info.hidden),
        deprecated=info.deprecated,
    )


def _debug_first(argv: list[str]) -> list[str]:
    """``argv`` with ``--debug`` first, where the group reads it, wherever it was given
    before a ``--`` (``dflash-diag parse run.log --debug``: a bug's message asks for a
    run with ``--debug``, and it is added at the end as often as not)."""
    end = argv.index("--") if "--" in argv else len(argv)
    if "--debug" not in argv[:end]:
        return argv
    return ["--debug", *(a for a in argv[:end] if a != "--debug"), *argv[end:]]


class _Boundary(TyperGroup):
    """Runs the app with click's standalone mode off and maps exceptions to exit codes;
    its own flags show in ``--help`` without ``<bool>``; its commands are built when
    looked up (:class:`_LazyCommands`)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        lazy = _LazyCommands(COMMANDS, _build_command)
        lazy.update(self.commands)
        self.commands = self._lazy = lazy

    def get_help_option(self, ctx: Any) -> Any:
        # Not given, a --help flag's value is None, which typer would coerce through a
        # pydantic adapter (~0.1 s of imports) before the help is even read: the
        # group's own flag and each command's get :class:`~.coercion.PlainCoercion`.
        option = super().get_help_option(ctx)
        plain_coercion([option])
        return option

    def format_help(self, ctx: Any, formatter: Any) -> None:
        from .helpscreen import format_help

        format_help(self, ctx, formatter, super().format_help)

    def list_commands(self, ctx: Any) -> list[str]:
        # (typer's reads the mapping's items, which would build every command)
        return list(self._lazy)

    def listing(self, ctx: Any) -> list[Any]:
        """The commands as ``--help`` lists them (:meth:`_LazyCommands.listed`): the
        screen needs their names and help, not their parameters."""
        return [self._lazy.listed(name) for name in self.list_commands(ctx)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            plain_coercion([command.get_help_option(ctx)])
        return command

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        for p in params:
            if getattr(p, "is_flag", False) and p.metavar is None:
                p.metavar = ""
        return params

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        argv = _debug_first(list(sys.argv[1:] if args is None else args))
        debug = argv[:1] == ["--debug"] or os.environ.get("DFLASH_DIAG_DEBUG") == "1"
        try:
            rv = super().main(
                args=argv,
                prog_name=prog_name or PROG,
                complete_var=complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )
        except InputError as e:
            err_console = _err_console()
            if debug:
                err_console.print_exception()
            err_console.print(f"error: {e}", markup=False, highlight=False, soft_wrap=True)
            sys.exit(2)
        except SystemExit as e:
            # `dflash-diag | head`: a closed pipe ends the help screen with status 0 as
            # it prints (:func:`~.consoles.end_at_closed_pipe`); with no arguments the
            # status is usage's, 2, whoever reads the screen.
            if not argv and e.code == 0:
                sys.exit(2)
            raise
        except _NO_ARGS as e:
            # `dflash-diag` alone: the help, as --help shows it, but exit 2 (usage).  The
            # error is made with the help: a rich screen is printed then (its console
            # prints, the text is empty); plain help is the error's text.
            text = e.format_message()  # type: ignore[attr-defined]
            if text:
                print(text)
            sys.exit(2)
        except _USAGE as e:
            ctx = getattr(e, "ctx", None)
            where = ctx.command_path if ctx is not None else PROG
            hint = f"see '{where} --help'"
            what = _one_line(e.format_message()).rstrip(".")  # type: ignore[attr-defined]
            _err_console().print(
                f"error: {what}; {hint}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
            sys.exit(2)
        except _EXIT as e:
            sys.exit(getattr(e, "exit_code", 0))
        except _ABORT:
            _err_console().print("error: aborted", markup=False, highlight=False)
            sys.exit(130)
        except BrokenPipeError:
            # `dflash-diag parse run.log | head`: a closed pipe is not a bug.
            sys.exit(0)
        except Exception as e:  # noqa: BLE001 - the bug boundary
            err_console = _err_console()
            if debug:
                err_console.print_exception()
            else:
                err_console.print(
                    f"error: internal error ({type(e).__name__}: {_one_line(str(e))}); "
                    "this is a bug, please report it with the output of --debug",
                    markup=False,
                    highlight=False,
                    soft_wrap=True,
                )
            sys.exit(1)
        if isinstance(rv, int) and rv != 0:
            sys.exit(rv)
        if standalone_mode:
            sys.exit(0)
        return rv


app = typer.Typer(
    cls=_Boundary,
    name=PROG,
    help=APP_HELP,
    no_args_is_help=True,
    rich_markup_mode="markdown",
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": [HELP[1], HELP[0]]},
)


def _print_version(value: bool) -> None:
    if value:
        print(version_line())
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(False, DEBUG[0], help=DEBUG[2]),
    version: bool = typer.Option(
        False, VERSION[0], VERSION[1], callback=_print_version, is_eager=True, help=VERSION[2]
    ),
) -> None:
    """Is that loss spike your data pipeline or your optimizer?"""
