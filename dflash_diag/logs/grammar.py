"""The grammar of a log line, before its message: what the line parser and the fast
path's templates both recognise (public names: each layer above imports them).

- rank prefixes (``[rank3]:``, torchrun's ``[default3]:``, ``[RANK 3]``);
- timestamps, log levels and logger names (Python logging, glog, loguru's
  ``__main__:<module>:32 - ``);
- warnings and tracebacks, with the lines that belong to them;
- rich's ``RichHandler`` layout (time, level and path columns; wrapped records);
- :data:`LINE_FORMATS`: the line formats and the message shapes each accepts.

Progress bars are in :mod:`~dflash_diag.logs.bars`; messages in
:mod:`~dflash_diag.logs.fields`.  Only the standard library is imported.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

#: Line formats (``--format``) and the message shapes each accepts: ``text`` (free
#: text), ``dict`` (a Python dict repr, the HF Trainer's) and ``json`` (a JSON object).
#: A new line format is one entry here and one row of the reader table
#: (:data:`dflash_diag.logs.formats.READERS`).
LINE_FORMATS: dict[str, frozenset[str]] = {
    "text": frozenset({"text", "dict", "json"}),
    "hf-dict": frozenset({"dict"}),
    "jsonl": frozenset({"json"}),
}


def format_of_shape(shape: str) -> str:
    """The line format that accepts only ``shape`` (``dict`` -> ``hf-dict``), else ``text``."""
    for name, shapes in LINE_FORMATS.items():
        if shapes == {shape}:
            return name
    return "text"


RANK_PREFIX = re.compile(
    r"^\s*(?:\[(?:rank|default|Rank|RANK)\s*(?P<a>\d+)\]:?|rank\s*(?P<b>\d+)\s*[|:]|"
    r"\[(?:rank|RANK|Rank)\s*(?P<c>\d+)\s*/\s*\d+\]:?)\s?"
)
TIMESTAMP = re.compile(
    r"^\s*\[?(?:"
    r"\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\d{1,2}/\d{1,2}/\d{2,4}(?:[ ,]+\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d+)?(?:\s?[AP]M)?)?"
    r"|\d{4}-\d{2}-\d{2}"
    r"|\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?"
    r"|[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+\s+\S+:\d+"
    r")\]?\s*(?:[-|,:]\s+|\s*)"
)
GLOG_WARN = re.compile(r"^W\d{4} \d{2}:\d{2}:\d{2}")
LEVEL = re.compile(
    r"^\s*[\[(]?(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|NOTICE)[\])]?"
    r"(?:\s*[-|:]\s*|\s+)"
)
LOGGER = re.compile(r"^[A-Za-z_][\w.]*(?::\d+)?\s*(?:[-|]\s+|:(?=\S))")
#: loguru's default record head after the level: ``__main__:<module>:32 - `` (module,
#: function, line); what follows `` - `` is the message.
LOGURU_SOURCE = re.compile(r"^[\w.<>-]+:[\w.<>-]+:\d+ - ")
DIGIT = re.compile(r"\d")
WARNING_TEXT = re.compile(r"\b\w*Warning:|^\s*warnings\.warn\(")
TB_START = "Traceback (most recent call last):"
TB_CHAIN = ("During handling of the above exception", "The above exception was the direct")
TB_END = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Warning)\b|^[\w.]+: ")


def warning_text(text: str) -> bool:
    """``WARNING_TEXT`` found in ``text``; the substrings it needs are looked for first
    (the regex tries a word at every boundary: slow on every line of a large log)."""
    return ("Warning:" in text or "warnings.warn(" in text) and bool(WARNING_TEXT.search(text))


#: RichHandler's time column: ``[12:49:55]``, ``[12/01/26 12:43:17]`` or ``12:50:12``,
#: then one space; blank (spaces) while the time shown does not change.
RICH_TIME = re.compile(r"^(?:\[[^\]]{4,30}\]|\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?) ")
#: Its level column: the level name padded to 8, then one space.
RICH_LEVEL = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) +$")
#: Its path column at the right: ``train.py:86`` (``show_path``).
RICH_PATH_END = re.compile(r"\s+[\w.<>-]+\.py:\d+\s*$")


@dataclass(frozen=True)
class RichLayout:
    """Where RichHandler's columns are, measured on a record's head line.

    :param time: width of the time column with its separating space.
    :param level: width of the level column (9: the name padded to 8 and a space), or 0
        with ``show_level=False``.
    :param path: whether head lines end in a ``file.py:NN`` path column.
    """

    time: int
    level: int
    path: bool

    @property
    def message(self) -> int:
        """The column where a record's message, and each of its continuation lines, starts."""
        return self.time + self.level

    def is_head(self, line: str) -> bool:
        """A line that starts a record: a time (or a blank time column), then a level
        column (when the layout has one) or, without one, the path column at the end."""
        head = line[: self.time]
        if not (RICH_TIME.match(line) or (head.isspace() and len(head) == self.time)):
            return False
        if self.level:
            return bool(RICH_LEVEL.match(line[self.time : self.message]))
        return not head.isspace() or bool(self.path and RICH_PATH_END.search(line))

    def is_continuation(self, line: str) -> bool:
        """A line indented to the message column (a wrapped or multi-line message)."""
        pad = line[: self.message]
        return (
            len(line) > self.message
            and pad.isspace()
            and not line[self.message].isspace()
            and not self.is_head(line)
        )


def rich_layout(lines: list[str]) -> RichLayout | None:
    """RichHandler's layout, measured on the first head line of the log's first 500
    lines that shows it: a time column, then a level padded to 8 (``INFO     ``) or, with
    ``show_level=False``, a path column (``train.py:86``) at the right.  None when no
    line does (a plain ``[12:00:00] INFO step=1`` has one space after its level).

    Without a path column, a padded level is also what ``%(levelname)-8s`` prints: the
    layout is rich's only when some line also shows rich's blank time column (a record
    in the same second as the one before) or a line indented to the message column (a
    wrapped record)."""
    head = [line.rstrip("\r") for line in lines[:500]]
    for line in head:
        m = RICH_TIME.match(line)
        if not m:
            continue
        t = m.end()
        level = 9 if RICH_LEVEL.match(line[t : t + 9]) and line[t + 9 : t + 10].strip() else 0
        path = bool(RICH_PATH_END.search(line))
        if level and path:
            return RichLayout(t, level, path)
        if level and line[t : t + 9].count(" ") >= 2:
            layout = RichLayout(t, level, path)
            blank = " " * t
            if any(x.startswith(blank) and layout.is_head(x) for x in head) or any(
                layout.is_continuation(x) for x in head
            ):
                return layout
            return None
        if not level and path and line[t : t + 1].strip():
            return RichLayout(t, 0, path)
    return None


def is_rich(lines: list[str]) -> bool:
    """Whether the log's first 500 lines show rich's ``RichHandler`` layout."""
    return rich_layout(lines) is not None


def logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` per line, RichHandler continuations joined to their record
    (by the layout measured from its head lines, :func:`rich_layout`), its path column
    taken off."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    layout = rich_layout(lines)
    if layout is None:
        for i, line in enumerate(lines, 1):
            yield i, line[:-1] if line.endswith("\r") else line
        return
    head_no, head = 0, ""
    for i, line in enumerate(lines, 1):
        line = line.rstrip("\r")
        if layout.is_head(line):
            if head_no:
                yield head_no, head
            head_no, head = i, rich_head(line, layout)
        elif head_no and layout.is_continuation(line):
            head = head + " " + line.strip()
        else:
            if head_no:
                yield head_no, head
                head_no, head = 0, ""
            yield i, line
    if head_no:
        yield head_no, head


def rich_head(line: str, layout: RichLayout) -> str:
    """A head line without its path column, and without its time column when blank."""
    if layout.path:
        line = RICH_PATH_END.sub("", line)
    return line.strip() if line[: layout.time].isspace() else line.rstrip()


def is_rich_bytes(data: Any) -> bool:
    """:func:`is_rich` on the first 500 lines of undecoded bytes (or a read-only mmap)."""
    end = -1
    for _ in range(500):
        end = data.find(b"\n", end + 1)
        if end < 0:
            break
    head = data if end < 0 else data[:end]
    return is_rich(bytes(head).decode("utf-8", errors="replace").split("\n"))
