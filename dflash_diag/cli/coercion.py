"""How a command-line value becomes a parameter's value, without pydantic where typer's
answer is plain.

typer (>= 0.27) coerces every parameter through a pydantic adapter it builds on first
use, and importing pydantic for it costs a command a noticeable share of its start-up
(docs/performance.md, *Start-up*).  :class:`PlainCoercion` stands in for typer's
coercion and answers itself only where typer's answer is certain and simple
(:func:`plain_value`); any other value is handed to typer's own coercion, built then,
so the values, the checks and the error messages stay typer's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Any

#: Decimal integers and floats as Python's ``int`` and ``float`` read them, and pydantic
#: reads them alike (no spaces, underscores, ``inf`` or ``nan``: typer decides those).
_INT = re.compile(r"[+-]?[0-9]{1,18}")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")

#: Marks a value :func:`plain_value` leaves to typer.
TYPERS = object()


def plain_coercion(params: Sequence[Any]) -> None:
    """Give each typer parameter :class:`PlainCoercion` (where typer has the hook: a
    lazily built ``_runtime_param``, ``get_runtime_param`` and ``type_descriptor``)."""
    for param in params:
        hooked = hasattr(param, "get_runtime_param") and hasattr(param, "type_descriptor")
        if hooked and getattr(param, "_runtime_param", False) is None:
            param._runtime_param = PlainCoercion()


class PlainCoercion:
    """Stands in for typer's coercion of one parameter: an option not given (None, or
    ``()`` for a repeated one) and the values :func:`plain_value` reads are answered
    here; any other value gets typer's own coercion, built then (and kept)."""

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        many = param.multiple or param.nargs == -1
        if value is None:
            return () if many else None
        out = TYPERS if many else plain_value(value, param.type_descriptor)
        if out is not TYPERS:
            return out
        param._runtime_param = None  # (typer builds its own, from here on)
        return param.get_runtime_param().coerce(value, param=param, ctx=ctx)


def plain_value(value: Any, desc: Any) -> Any:
    """``value`` (one command-line value) as typer coerces it for a parameter of type
    descriptor ``desc``, or :data:`TYPERS` where typer must say: a string for a plain
    ``str``; a decimal integer or float (:data:`_INT`, :data:`_FLOAT`) for an ``int``
    or ``float`` without bounds; a flag's ``True``/``False``; a member of an ``Enum``
    parameter's enum (its default: typer returns a member as it is); a non-empty
    string for a ``Path`` without path checks beyond typer's default one (an existing
    path must be readable: :func:`_readable_or_absent`).  No parser, no file."""
    info = desc.parameter_info
    kind = desc.annotation
    if info.parser is not None or desc.file_annotation is not None:
        return TYPERS
    if kind is bool:
        return value if type(value) is bool else TYPERS
    if isinstance(kind, type) and issubclass(kind, Enum):  # (a default: one of its members)
        return value if type(value) is kind else TYPERS
    if type(value) is not str:
        return TYPERS
    if kind is str:
        return value
    if kind in (int, float):
        bounded = info.min is not None or info.max is not None or info.clamp
        pattern = _INT if kind is int else _FLOAT
        return kind(value) if not bounded and pattern.fullmatch(value) else TYPERS
    if kind is Path and value and _default_path_checks(info) and _readable_or_absent(value):
        return Path(value)
    return TYPERS


def _default_path_checks(info: Any) -> bool:
    """Whether a path parameter asks for nothing but typer's defaults (may be absent, a
    file or a folder, readable if present; not resolved; no ``-``)."""
    return (
        not info.exists
        and info.file_okay
        and info.dir_okay
        and info.readable
        and not info.writable
        and not info.resolve_path
        and not info.allow_dash
        and info.path_type is None
    )


def _readable_or_absent(path: str) -> bool:
    """typer's check of such a path: one that cannot be looked at passes (it may be
    made later); one that exists must be readable."""
    try:
        os.stat(path)
    except OSError:
        return True
    except ValueError:  # (a NUL in it: typer says what)
        return False
    return os.access(path, os.R_OK)
