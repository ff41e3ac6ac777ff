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
    """``(line number, text)`` per record: a head line and the lines that continue it
    joined (the head's line number), by layout (:func:`continues`); with RichHandler's
    layout (:func:`rich_layout`), its continuations too, its path column taken off."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    layout = rich_layout(lines)
    if layout is None:
        yield from _joined(lines)
        return
    head_no, head = 0, ""
    for i, line in enumerate(lines, 1):
        line = line.rstrip("\r")
        if layout.is_head(line):
            if head_no:
                yield head_no, head
            head_no, head = i, rich_head(line, layout)
        elif head_no and (layout.is_continuation(line) or continues(head, line)):
            head = head + " " + line.strip()
        else:
            if head_no:
                yield head_no, head
                head_no, head = 0, ""
            yield i, line
    if head_no:
        yield head_no, head


#: A line that starts a record of its own: a timestamp, a level, a rank prefix, a
#: traceback, or a bracket that closes nothing (``[step=5]``, ``[2024-..]``).
_RECORD_START = re.compile(
    r"^\s*(?:\d{1,4}[-/:]\d|\[|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b|[IWEF]\d{4} "
    r"|Traceback|File \"|rank\s*\d)"
)
#: A line of ``name=value`` fields only (``  loss=2.31``, ``lr=1e-4, grad_norm=0.5,``).
_FIELDS_ONLY = re.compile(r"^\s*(?:[A-Za-z_][\w./@-]*\s*=\s*[^\s=;|]+[\s,;|]*)+$")
#: At most this many lines join one record (a bracket never closed ends there).
MAX_CONTINUED = 64
_OPEN, _CLOSE = "([{", ")]}"


def is_open(head: str) -> bool:
    """Whether a record's text so far asks for more: it ends in a comma (after any
    ``file.py:NN`` path column), or it opened more brackets than it closed.

    >>> is_open("step=1, loss=2.5,   train.py:88"), is_open("{'loss': 2.5,"), is_open("a=1")
    (True, True, False)
    """
    end = RICH_PATH_END.sub("", head).rstrip()
    if end.endswith(","):
        return True
    if not any(c in end for c in _OPEN):
        return False
    return sum(end.count(c) for c in _OPEN) > sum(end.count(c) for c in _CLOSE)


def continues(head: str, line: str, first: str = "") -> bool:
    """Whether ``line`` continues the record whose text so far is ``head``, by layout:
    it is indented more than the head and starts no record of its own
    (:data:`_RECORD_START`), and either the head is open (:func:`is_open`: a trailing
    comma, an open bracket) or the line is ``name=value`` fields only under a head that
    is not indented (a trainer printing one metric per indented line under a
    ``[step=N]`` head); or the head is
    open and the line closes a bracket (``}`` of a pretty-printed dict); or, a layout
    wrapped to a width (RichHandler with neither time nor level column), the record's
    ``first`` line ends in a path column and ``line`` is padded to that width without one.

    >>> continues("[step=5/100,epoch=0]", "\tloss=2.31"), continues("Config:", "  x: 1")
    (True, False)
    """
    if not line or not head:
        return False
    indent = len(line) - len(line.lstrip())
    if first and len(line) == len(first) and line[-1:] == " " and not _RECORD_START.match(line):
        if RICH_PATH_END.search(first) and not RICH_PATH_END.search(line):
            return True
    if not indent:
        return line[0] in _CLOSE and is_open(head)
    head_indent = len(head) - len(head.lstrip())
    if indent <= head_indent or _RECORD_START.match(line):
        return False
    # (fields only under a head that is itself indented: a traceback's frame and code)
    return is_open(head) or (not head_indent and bool(_FIELDS_ONLY.match(line)))


def _joined(lines: list[str]) -> Iterator[tuple[int, str]]:
    """:func:`logical_lines` without RichHandler's layout: each line, with the lines
    that continue it (:func:`continues`) appended (a head's ``file.py:NN`` path column
    and its tab-separated cells without a ``=`` field taken off: labels such as a host
    name or ``module:line``, not metrics)."""
    head_no, head, first, parts = 0, "", "", 0
    for i, line in enumerate(lines, 1):
        if line.endswith("\r"):
            line = line[:-1]
        # (the cheap tests first: most lines are neither indented, nor a closing bracket,
        # nor padded to the width of the line before)
        if (
            head_no
            and (line[:1] in " \t)]}" or line[-1:] == " ")
            and parts < MAX_CONTINUED
            and continues(head, line, first)
        ):
            head = (_head_text(head) if parts == 1 else head) + " " + line.strip()
            parts += 1
            continue
        if head_no:
            yield head_no, head
        head_no, head, first, parts = i, line, line, 1
    if head_no:
        yield head_no, head


def _head_text(head: str) -> str:
    """A head line that continues on the next lines, as the start of its record."""
    head = RICH_PATH_END.sub("", head).rstrip()
    if "\t" in head.strip():
        cells = head.split("\t")
        head = " ".join(c for i, c in enumerate(cells) if i == 0 or "=" in c)
    return head


def spans_lines(lines: list[str]) -> bool:
    """Whether the first 500 of ``lines`` show RichHandler's layout or a record that
    continues on the next line (:func:`continues`)."""
    head = [x.rstrip("\r") for x in lines[:500]]
    if rich_layout(head) is not None:
        return True
    pairs = zip(head, head[1:], strict=False)
    return any(continues(a, b, a) for a, b in pairs if b[:1] in " \t)]}" or b[-1:] == " ")


def rich_head(line: str, layout: RichLayout) -> str:
    """A head line without its path column, and without its time column when blank."""
    if layout.path:
        line = RICH_PATH_END.sub("", line)
    return line.strip() if line[: layout.time].isspace() else line.rstrip()


def is_rich_bytes(data: Any) -> bool:
    """:func:`spans_lines` on the first 500 lines of undecoded bytes (or a read-only
    mmap): RichHandler's layout, or records that span lines."""
    end = -1
    for _ in range(500):
        end = data.find(b"\n", end + 1)
        if end < 0:
            break
    head = data if end < 0 else data[:end]
    return spans_lines(bytes(head).decode("utf-8", errors="replace").split("\n"))
