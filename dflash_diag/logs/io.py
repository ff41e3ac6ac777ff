"""Getting a log's bytes: files, gzip, standard input, and text that is not quite UTF-8.

The input is only ever opened for reading.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..limits import PARSE_COST, check_fits, check_lines, gunzip
from ..storage import stage

GZIP_MAGIC = b"\x1f\x8b"
STDIN = "-"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_ANSI_BYTES = re.compile(_ANSI.pattern.encode())


@dataclass(frozen=True)
class RawLog:
    """A log's content as read, before any parsing.

    :param path: the name to show in messages (``-`` for standard input).
    :param data: the bytes, decompressed when the input was gzip.
    :param gzipped: whether the input was gzip-compressed.
    """

    path: str
    data: bytes
    gzipped: bool = False


def read_bytes(path: str | os.PathLike[str]) -> RawLog:
    """Read ``path`` (``-`` = standard input), gunzipping when it starts with gzip's magic.

    :raises InputError: missing file, a directory, unreadable, empty, broken gzip; a
        file or its decompressed text too big for this machine's memory, or a line
        too long to be a record (:mod:`dflash_diag.limits`).
    """
    name = os.fspath(path)
    if name == STDIN:
        data = sys.stdin.buffer.read()
    else:
        p = Path(stage(name))  # (a URI: a local copy, see dflash_diag.storage)
        if not p.exists():
            raise InputError(name, "no such file", "check the path")
        if p.is_dir():
            raise InputError(name, "is a folder, not a log file", "give the log file inside it")
        try:
            check_fits(p.stat().st_size * PARSE_COST, name, "reading it")
            data = p.read_bytes()
        except OSError as e:
            raise InputError(
                name, f"cannot read the file ({e.strerror})", "check its permissions"
            ) from None
    gzipped = data[:2] == GZIP_MAGIC
    if gzipped:
        # (in pieces, to a budget: a 10 MB gzip may hold 4 GiB of lines)
        data, _ = gunzip(data, name)
    check_lines(data, name)
    if not data or (data[:65536].isspace() and not data.strip()):
        raise InputError(name, "the log is empty", "give a log that has training lines in it")
    return RawLog(name, data, gzipped)


def decode(data: bytes) -> tuple[str, int]:
    """UTF-8 text of ``data`` with bad bytes replaced (U+FFFD), and how many were bad.

    >>> decode(b"loss=1.5 \\xff")
    ('loss=1.5 \\ufffd', 1)
    """
    try:
        return data.decode("utf-8"), 0
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        return text, text.count("\ufffd") - data.decode("utf-8", "ignore").count("\ufffd")


def strip_ansi(text: str) -> str:
    """Remove ANSI colour and cursor codes (``\\x1b[32mINFO\\x1b[0m`` -> ``INFO``)."""
    if "\x1b" not in text:
        return text
    return _ANSI.sub("", text)


def strip_ansi_bytes(data: Any) -> bytes | None:
    """:func:`strip_ansi` on undecoded bytes (for the text reader's fast path), or None
    where the two could differ in lines: an OSC sequence (``\\x1b]...``, a terminal
    title) may hold newlines and any text, and a code after the last newline would
    leave the log ending in one.  The other codes are ASCII bytes that never hold an
    escape or a newline past their first byte, so stripping them from the bytes or from
    the decoded text comes to the same.
    """
    if data.find(b"\x1b]") >= 0:
        return None
    out = _ANSI_BYTES.sub(b"", data)
    if out[-1:] == b"\n" and data[-1:] != b"\n":
        return None
    return out
