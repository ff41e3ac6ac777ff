"""The one exception that becomes exit status 2.

Every piece of bad input the library detects is raised as :class:`InputError` (or a
subclass).  The CLI catches it once and prints ``error: FILE[:LINE]: what; hint`` on
stderr.  Anything else escaping a command is a bug (exit status 1).
"""

from __future__ import annotations

import os


class InputError(Exception):
    """Bad input: a file, a value or a combination of options that cannot be used.

    :param path: the file (or option name, e.g. ``--token-budget``) the problem is in.
    :param what: what is wrong, naming the bad values.
    :param hint: what the user can do about it.
    :param line: 1-based line number in ``path`` where it applies, if any.

    >>> str(InputError("run.log", "no step-like data", "check the file is a training log", 3))
    'run.log:3: no step-like data; check the file is a training log'
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        what: str,
        hint: str = "",
        line: int | None = None,
    ) -> None:
        self.path = "" if path is None else os.fspath(path)
        self.what = what
        self.hint = hint
        self.line = line
        super().__init__(self.message)

    @property
    def message(self) -> str:
        where = self.path
        if self.line is not None:
            where = f"{where}:{self.line}"
        text = f"{where}: {self.what}" if where else self.what
        if self.hint:
            text = f"{text}; {self.hint}"
        # One line, always: a newline in a value must not break the contract.
        return " ".join(text.splitlines())

    def __str__(self) -> str:
        return self.message


class MissingDependency(InputError):
    """An optional extra (e.g. ``tensorboard``) is needed for this input but not installed."""

    def __init__(self, path: str | os.PathLike[str] | None, package: str, extra: str) -> None:
        super().__init__(
            path,
            f"reading this file needs the optional package '{package}'",
            f"install it with: pip install 'dflash-diag[{extra}]'",
        )
