"""Validating an output path (``--plot``, ``--to``, ``--export``) before any work is done."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .errors import InputError


def _or(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def check_output_path(
    path: str | Path,
    suffixes: Sequence[str],
    noun: str,
    protect: Sequence[str | Path] = (),
    clash: tuple[str, str] = ("refusing to overwrite an input file", "choose another file"),
) -> Path:
    """The output ``path`` if it can be written: a known suffix (case-insensitive), an
    existing folder, and none of the ``protect`` input files; else an InputError.

    :param suffixes: allowed extensions, e.g. ``(".png", ".svg", ".pdf")``.
    :param noun: what is written (``plot``, ``output``, ``export``), for the messages.
    :param clash: ``(what, hint)`` of the error when ``path`` is one of ``protect``.

    >>> check_output_path("loss.PNG", (".png", ".svg", ".pdf"), "plot").name
    'loss.PNG'
    """
    p = Path(path)
    if p.suffix.lower() not in suffixes:
        raise InputError(
            str(p),
            f"cannot tell the {noun} format from {p.suffix or 'no extension'!r}",
            f"name the file {_or(list(suffixes))}",
        )
    if not p.parent.exists():
        raise InputError(str(p), f"the folder for the {noun} does not exist", "create it first")
    for q in protect:
        if str(q) != "-" and p.exists() and Path(q).exists() and p.resolve() == Path(q).resolve():
            raise InputError(str(p), *clash)
    return p
