"""The line reader: free-text trainer logs, HF dict lines and JSON lines.

A log is read line by line (``\\n``; a ``\\r\\n`` ending is one line end).  Each line
goes through, in order:

1. ANSI codes removed; ``\\r``-separated tqdm refreshes split apart, a bar's postfix
   metrics (``loss=4.81, acc=0.031``) kept with the bar's counter as the step, and any
   text glued after a bar read as a line of its own;
2. a rank prefix (``[rank3]:``, torchrun's ``[default3]:``, ``[RANK 3]``) taken off;
3. tracebacks and warnings recognised and skipped, with the lines that belong to them;
4. timestamps, a log level and a logger name taken off the front;
5. the message parsed as a JSON object, a Python dict repr, or free text
   (:mod:`dflash_diag.logs.fields`).

Records from rich's ``RichHandler`` (a record wrapped over several indented lines, the
source file on the right) are joined first.  The records then go to
:func:`dflash_diag.logs.normalise.build_table`.  A large log whose lines mostly share
one shape is parsed by the vectorised :mod:`~dflash_diag.logs.fastpath` instead, with
this parser for the lines that do not fit the shape.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..records import RunLog
from .bars import TQDM, is_training_bar, write_steps
from .fields import FIELD, Message, parse_dict_repr, parse_json_object, parse_text
from .io import RawLog, decode, strip_ansi
from .names import EVAL_PREFIXES
from .normalise import build_table

ProgressFn = Callable[[int, int], None]

#: formats this reader answers for, and the message shapes each accepts
#: Dict lines in this much of a log's head send it to the dict-line path first.
DICT_HEAD_BYTES = 1 << 16

LINE_FORMATS: dict[str, frozenset[str]] = {
    "text": frozenset({"text", "dict", "json"}),
    "hf-dict": frozenset({"dict"}),
    "jsonl": frozenset({"json"}),
}

_RANK_PREFIX = re.compile(
    r"^\s*(?:\[(?:rank|default|Rank|RANK)\s*(?P<a>\d+)\]:?|rank\s*(?P<b>\d+)\s*[|:]|"
    r"\[(?:rank|RANK|Rank)\s*(?P<c>\d+)\s*/\s*\d+\]:?)\s?"
)
_TIMESTAMP = re.compile(
    r"^\s*\[?(?:"
    r"\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\d{1,2}/\d{1,2}/\d{2,4}(?:[ ,]+\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d+)?(?:\s?[AP]M)?)?"
    r"|\d{4}-\d{2}-\d{2}"
    r"|\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?"
    r"|[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+\s+\S+:\d+"
    r")\]?\s*(?:[-|,:]\s+|\s*)"
)
_GLOG_WARN = re.compile(r"^W\d{4} \d{2}:\d{2}:\d{2}")
_LEVEL = re.compile(
    r"^\s*[\[(]?(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|NOTICE)[\])]?"
    r"(?:\s*[-|:]\s*|\s+)"
)
_LOGGER = re.compile(r"^[A-Za-z_][\w.]*(?::\d+)?\s*(?:[-|]\s+|:(?=\S))")
#: loguru's default record head after the level: ``__main__:<module>:32 - `` (module,
#: function, line); what follows `` - `` is the message.
_LOGURU_SOURCE = re.compile(r"^[\w.<>-]+:[\w.<>-]+:\d+ - ")
_DIGIT = re.compile(r"\d")
_WARNING_TEXT = re.compile(r"\b\w*Warning:|^\s*warnings\.warn\(")
_TB_START = "Traceback (most recent call last):"
_TB_CHAIN = ("During handling of the above exception", "The above exception was the direct")
_TB_END = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Warning)\b|^[\w.]+: ")
_TQDM = TQDM


@dataclass
class _State:
    """What a line means can depend on the lines before it."""

    in_traceback: bool = False
    after_warning: bool = False
    bar_offset: int = 0
    bar_last_n: int = -1
    bar_last_total: int = 0
    bar_step: int | None = None
    bar_step_used: int | None = None
    #: the training bar's count at each ``tqdm.write`` (:func:`~.bars.write_steps`)
    writes: list[int] = field(default_factory=list)
    #: dict/JSON records seen so far, per family (printed bare / after a logger prefix)
    dicts: dict[str, int] = field(default_factory=dict)
    #: a non-training bar (validation) was drawn since the training bar last was: the
    #: next training bar's ``val_*`` postfix values are that validation's
    val_fresh: bool = False
    #: rich progress bars (Lightning's RichProgressBar): the last training frame, not yet
    #: read (its postfix may go on on the next line), and the training step at the last
    #: validation frame, while its values are not yet shown
    rich_frame: dict[str, Any] | None = None
    rich_val_at: int | None = None
    rich_step: int = 0


def _warning_text(text: str) -> bool:
    """``_WARNING_TEXT`` found in ``text``; the substrings it needs are looked for first
    (the regex tries a word at every boundary: slow on every line of a large log)."""
    return ("Warning:" in text or "warnings.warn(" in text) and bool(_WARNING_TEXT.search(text))


def _rank_of(field: float | None, default: int) -> int:
    """A record's rank: its ``rank`` field when that is a whole number a rank can be
    (``"rank": "nan"`` or ``1e30`` is no rank), else ``default`` (a prefix's, or 0)."""
    if field is None or not (field == field and abs(field) < 2**31):
        return default
    return int(field)


def _count(skipped: dict[str, int], reason: str, n: int = 1) -> None:
    skipped[reason] = skipped.get(reason, 0) + n


#: RichHandler's time column: ``[12:49:55]``, ``[12/01/26 12:43:17]`` or ``12:50:12``,
#: then one space; blank (spaces) while the time shown does not change.
_RICH_TIME = re.compile(r"^(?:\[[^\]]{4,30}\]|\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?) ")
#: Its level column: the level name padded to 8, then one space.
_RICH_LEVEL = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) +$")
#: Its path column at the right: ``train.py:86`` (``show_path``).
_RICH_PATH_END = re.compile(r"\s+[\w.<>-]+\.py:\d+\s*$")


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
        if not (_RICH_TIME.match(line) or (head.isspace() and len(head) == self.time)):
            return False
        if self.level:
            return bool(_RICH_LEVEL.match(line[self.time : self.message]))
        return not head.isspace() or bool(self.path and _RICH_PATH_END.search(line))

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
    line does (a plain ``[12:00:00] INFO step=1`` has one space after its level)."""
    for line in lines[:500]:
        line = line.rstrip("\r")
        m = _RICH_TIME.match(line)
        if not m:
            continue
        t = m.end()
        level = 9 if _RICH_LEVEL.match(line[t : t + 9]) and line[t + 9 : t + 10].strip() else 0
        path = bool(_RICH_PATH_END.search(line))
        if level and (path or line[t : t + 9].count(" ") >= 2):
            return RichLayout(t, level, path)
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
            head_no, head = i, _rich_head(line, layout)
        elif head_no and layout.is_continuation(line):
            head = head + " " + line.strip()
        else:
            if head_no:
                yield head_no, head
                head_no, head = 0, ""
            yield i, line
    if head_no:
        yield head_no, head


def _rich_head(line: str, layout: RichLayout) -> str:
    """A head line without its path column, and without its time column when blank."""
    if layout.path:
        line = _RICH_PATH_END.sub("", line)
    return line.strip() if line[: layout.time].isspace() else line.rstrip()


def _holds_field(text: str) -> bool:
    """Whether :data:`FIELD` matches in ``text``; a field's value is a number, so text
    with no digit and no ``nan``/``inf`` holds none (the regex costs ~3 µs)."""
    low = text.lower()
    if not _DIGIT.search(text) and "nan" not in low and "inf" not in low:
        return False
    return FIELD.search(text) is not None


def _strip_prefix(text: str) -> tuple[str, str | None]:
    """Take timestamps, a level and a logger name off the front; return (message, level)."""
    level = None
    for _ in range(3):
        m = _TIMESTAMP.match(text)
        if not m or not m.group(0).strip():
            break
        text = text[m.end() :]
    m = _LEVEL.match(text)
    if m:
        level = m.group("level")
        text = text[m.end() :]
        for _ in range(2):  # `14:03:11 INFO` orders vary: timestamps after the level too
            t = _TIMESTAMP.match(text)
            if not t or not t.group(0).strip():
                break
            text = text[t.end() :]
        src = _LOGURU_SOURCE.match(text)
        if src:  # loguru: `name:function:line` is the record's source, not a metric
            return text[src.end() :].strip(), level
        lg = _LOGGER.match(text)
        if lg and not _holds_field(text[: lg.end()]):
            text = text[lg.end() :]
    return text.strip(), level


def parse_message(message: str, shapes: frozenset[str]) -> tuple[str, Message | None]:
    """``(shape, Message)`` of a message; the shape is ``json``, ``dict`` or ``text``."""
    if message.startswith("{"):
        # (`{'` starts no JSON object: a Python dict repr is not tried as JSON)
        if "json" in shapes and not message.startswith("{'"):
            m = parse_json_object(message)
            if m is not None:
                return "json", m
        if "dict" in shapes and message.startswith("{'"):
            return "dict", parse_dict_repr(message)
        if "json" in shapes and message.startswith('{"'):
            return "json", None  # a broken JSON object
        if "text" not in shapes:
            return "dict", parse_dict_repr(message) if "dict" in shapes else None
    if "text" not in shapes:
        return "text", None
    return "text", parse_text(message)


def _bar(
    match: re.Match[str], desc_text: str, st: _State, rank: int, line_no: int
) -> list[dict[str, Any]]:
    """A tqdm refresh: follow the training bar's counter; a postfix with metrics is a record.

    The training bar is the one with the largest total seen so far whose description
    names no other loop (:func:`~.bars.is_training_bar`: an evaluation bar's counter,
    or Lightning's ``Sanity Checking`` and ``Validation`` bars', is not a training
    step).  When its counter starts again (a new epoch's bar), steps number on from the
    previous bar's total.  A draw at count 0 is no step (its postfix shows the step
    before).  ``val_*`` values in the postfix (Lightning keeps the last validation's
    there) are an evaluation record only on the first training-bar draw after a
    validation bar; elsewhere they are the same values again.
    """
    n, total = int(match.group("n")), int(match.group("total"))
    if not is_training_bar(desc_text):
        st.val_fresh = True
        return []
    if total >= st.bar_last_total:
        if n < st.bar_last_n:
            st.bar_offset += st.bar_last_total
        st.bar_last_n, st.bar_last_total = n, total
        st.bar_step = st.bar_offset + n
    fresh, st.val_fresh = st.val_fresh, False
    info = match.group("info").split(",")
    pairs = [p for p in info[2:] if p.strip() and not p.strip().startswith("v_num=")]
    if not pairs or st.bar_step is None or n == 0:
        return []
    train = ",".join(p for p in pairs if not p.strip().startswith(EVAL_PREFIXES))
    evals = ",".join(p for p in pairs if p.strip().startswith(EVAL_PREFIXES))
    desc = parse_text(desc_text).fields
    out = []
    for text, is_eval in ((train, False), (evals if fresh else "", True)):
        msg = parse_text(text) if text.strip() else Message()
        if not msg.metrics:
            continue
        rec: dict[str, Any] = {"line": line_no, "rank": rank, "is_eval": is_eval or msg.is_eval}
        rec.update(msg.fields)
        if "epoch" in desc:
            rec["epoch"] = desc["epoch"]
        if "step" in msg.fields:
            rec["step_source"] = "field"
        else:
            rec["step"] = float(st.bar_step)
            rec["step_source"] = "progress"
        out.append(rec)
    return out


#: A rich progress bar frame (Lightning's ``RichProgressBar``): ``Epoch 0/1  ━━━╸━━
#: 21/60 0:00:00 • 0:00:01 153.61it/s v_num: 0 train_loss: 1.412 lr: 0.010``.
_RICH_BAR = re.compile(
    r"^\s*(?P<desc>\S.*?)\s+[\u2500-\u257f]+\s+(?P<n>\d+)/(?P<total>\d+)\s+"
    r"[\d:-]+\s+\u2022\s+[\d:-]+(?:\s+[\d.]+it/s)?(?P<postfix>.*)$"
)
_RICH_POSTFIX = re.compile(r"(?:[\w./-]+: \S+\s*)+")
_RICH_EPOCH = re.compile(r"^Epoch (\d+)/\d+$")


def _rich_bar(seg: str, st: _State, line_no: int) -> bool:
    """A rich progress-bar frame: a training frame is kept until its postfix is whole
    (:func:`flush_rich_frame`); a validation frame notes the training step it
    interrupted.  Steps: ``Epoch E/L`` (E from 0; L the last index) ``n/total`` is
    step ``E x total + n``.  Sanity-check frames are no step."""
    m = _RICH_BAR.match(seg)
    if not m:
        return False
    desc, n, total = m.group("desc").strip(), int(m.group("n")), int(m.group("total"))
    epoch = _RICH_EPOCH.match(desc)
    if epoch is None:
        if "valid" in desc.lower():
            st.rich_val_at = st.rich_step
        return True
    st.rich_step = int(epoch.group(1)) * total + n
    st.rich_frame = {
        "step": st.rich_step, "n": n, "epoch": float(epoch.group(1)),
        "postfix": m.group("postfix"), "line": line_no,
    }  # fmt: skip
    return True


def flush_rich_frame(st: _State, last: bool = False) -> list[dict[str, Any]]:
    """The records of the pending rich training frame: its train values at its step
    (none at count 0: those are the step before's), and the ``val_*`` values it shows
    as the evaluation of the step a validation frame interrupted, once training has
    gone past that step (the frame drawn right after validation may still show the
    values before it) or, ``last``, in the log's last frame (rich prints only the last
    frame when not on a terminal)."""
    frame, st.rich_frame = st.rich_frame, None
    if frame is None:
        return []
    pairs = re.findall(r"([\w./-]+): (\S+)", frame["postfix"])
    train = " ".join(f"{k}={v}" for k, v in pairs if k != "v_num" and not k.startswith("val"))
    evals = " ".join(f"{k}={v}" for k, v in pairs if k.startswith(EVAL_PREFIXES))
    out: list[dict[str, Any]] = []
    msg = parse_text(train)
    if frame["n"] and msg.metrics:
        rec = {"line": frame["line"], "rank": 0, "is_eval": False, **msg.fields}
        out.append(rec | {"step": float(frame["step"]), "step_source": "progress"})
    val_at = st.rich_val_at
    if last and val_at is None and not st.dicts.get("rich_eval"):
        val_at = frame["step"]
    if evals and val_at is not None and (frame["step"] > val_at or last):
        msg = parse_text(evals)
        rec = {"line": frame["line"], "rank": 0, "is_eval": True, **msg.fields}
        out.append(rec | {"step": float(val_at), "step_source": "progress"})
        st.rich_val_at = None
        st.dicts["rich_eval"] = st.dicts.get("rich_eval", 0) + 1
    return out


def parse_line(
    line_no: int,
    line: str,
    st: _State,
    shapes: frozenset[str],
    skipped: dict[str, int],
    shapes_seen: dict[str, int],
) -> list[dict[str, Any]]:
    """Records from one physical line (tqdm refreshes may make several)."""
    out: list[dict[str, Any]] = []
    segments = line.split("\r") if "\r" in line else [line]
    for seg in segments:
        if st.rich_frame is not None:
            if seg[:1].isspace() and _RICH_POSTFIX.fullmatch(seg.strip()):
                st.rich_frame["postfix"] += " " + seg.strip()  # the postfix wrapped
                continue
            out.extend(flush_rich_frame(st))
        if "\u2022" in seg and _rich_bar(seg, st, line_no):
            continue
        rest = seg
        while "%|" in rest:
            m = _TQDM.search(rest)
            if not m:
                break
            pm = _RANK_PREFIX.match(rest)
            rank = int(pm.group("a") or pm.group("b") or pm.group("c")) if pm else 0
            recs = _bar(m, rest[: m.start()], st, rank, line_no)
            if not recs:
                _count(skipped, "progress_bar")
            out.extend(recs)
            rest = rest[m.end() :]
        if rest.strip() or len(segments) == 1:
            rec = _parse_plain(line_no, rest, st, shapes, skipped, shapes_seen)
            if rec is not None:
                out.append(rec)
    return out


def _parse_plain(
    line_no: int,
    text: str,
    st: _State,
    shapes: frozenset[str],
    skipped: dict[str, int],
    shapes_seen: dict[str, int],
) -> dict[str, Any] | None:
    rank = 0
    m = _RANK_PREFIX.match(text)
    if m:
        rank = int(m.group("a") or m.group("b") or m.group("c"))
        text = text[m.end() :]
    if not text.strip():
        _count(skipped, "blank")
        return None
    # Tracebacks: the header, its indented frames, chained headers, the exception line.
    if st.in_traceback:
        # a frame is indented; an indented line that opens with a timestamp is a new
        # record (Megatron prints ` [2026-03-02 14:03:10] iteration ...`)
        frame = text[:1].isspace() and not _TIMESTAMP.match(text)
        if frame or text.startswith(_TB_CHAIN) or text.startswith(_TB_START):
            _count(skipped, "traceback")
            return None
        st.in_traceback = False
        if _TB_END.match(text):
            _count(skipped, "traceback")
            return None
    if text.startswith(_TB_START) or text.lstrip().startswith(_TB_START):
        st.in_traceback = True
        _count(skipped, "traceback")
        return None
    new_record = _LEVEL.match(text.lstrip()) or _TIMESTAMP.match(text)
    if st.after_warning and text[:1].isspace() and not new_record:
        _count(skipped, "warning")
        return None
    st.after_warning = False
    if _GLOG_WARN.match(text) or _warning_text(text):
        st.after_warning = True
        _count(skipped, "warning")
        return None
    message, level = _strip_prefix(text)
    if level in ("WARNING", "WARN"):
        st.after_warning = True
        _count(skipped, "warning")
        return None
    if not message:
        _count(skipped, "text")
        return None
    shape, msg = parse_message(message, shapes)
    if msg is None:
        _count(skipped, "bad_record" if shape != "text" else "text")
        return None
    order = None
    if shape != "text" and st.writes:
        # the k-th dict of its family is the k-th tqdm.write (see _date_by_writes)
        family = "bare" if message == text.strip() else "logger"
        order = (family, st.dicts.get(family, 0))
        st.dicts[family] = order[1] + 1
    if msg.summary:
        _count(skipped, "summary")
        return None
    if not msg.metrics:
        _count(skipped, "text")
        return None
    shapes_seen[shape] = shapes_seen.get(shape, 0) + 1
    rec: dict[str, Any] = {"line": line_no, "is_eval": msg.is_eval}
    rec.update(msg.fields)
    rec["rank"] = _rank_of(msg.fields.get("rank"), rank)
    rec["step_source"] = "field" if "step" in msg.fields else "none"
    rec["attach"] = shape != "text"
    if order is not None and "step" not in msg.fields:
        rec["write"] = order
        return rec
    fresh = st.bar_step is not None and st.bar_step != st.bar_step_used
    if shape != "text" and "step" not in msg.fields and not msg.is_eval and fresh:
        # HF Trainer stdout: a dict line comes right after the training bar reached the
        # step it was logged at; the bar's counter is that step.  (A bar that has not
        # moved since the last dict says nothing about this one.)
        rec["step"] = float(st.bar_step)  # type: ignore[arg-type]
        rec["step_source"] = "progress"
        st.bar_step_used = st.bar_step
    return rec


def read_lines(
    raw: RawLog,
    fmt: str | None = None,
    rank: int | str = 0,
    progress: ProgressFn | None = None,
    fast: bool = True,
) -> RunLog:
    """Read a line-oriented log (free text, HF dict lines, JSON lines) into a RunLog.

    :param fmt: ``text`` (any line shape), ``hf-dict`` or ``jsonl`` (only that shape),
        or None (any shape; the format is named after the shape most records had).
    :param fast: use the vectorised fast path for large regular logs.
    """
    if fast:
        run = read_lines_fast(raw.path, raw.data, fmt, rank, progress)
        if run is not None:
            return run
    data = raw.data
    skipped: dict[str, int] = {}
    n_lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    text, bad_bytes = decode(data)
    if bad_bytes:
        _count(skipped, "bad_bytes", bad_bytes)  # bytes, not lines: replaced, line kept
    writes = write_steps(text)  # (from the raw text: a clear is told by its escapes)
    lines = logical_lines(strip_ansi(text))
    del text
    return _read_records(
        raw.path, data, lines, n_lines, None, skipped, fmt, rank, progress, writes=writes
    )


def read_lines_fast(
    path: str,
    data: Any,
    fmt: str | None = None,
    rank: int | str = 0,
    progress: ProgressFn | None = None,
) -> RunLog | None:
    """:func:`read_lines` through the vectorised fast path only: None when it does not
    apply.  ``data`` may be any bytes-like object with ``find`` (a read-only ``mmap``)."""
    shapes = LINE_FORMATS[fmt or "text"]
    if data[:1] == b"{" and "json" in shapes:  # JSON lines, through Arrow
        from .jsonlines import read_json_lines

        run = read_json_lines(path, data, fmt, rank)
        if run is not None:
            if progress is not None:
                progress(run.n_lines, run.n_lines)
            return run
    # The HF Trainer's dict lines among others, through Arrow: first when the log's head
    # has some, else once the line-shape fast path has declined (a long log of other
    # lines is not searched for them first).
    dicts_first = "dict" in shapes and (
        data[:2] == b"{'" or data.find(b"\n{'", 0, DICT_HEAD_BYTES) >= 0
    )
    if dicts_first:
        run = _read_dict_lines(path, data, fmt, rank, progress)
        if run is not None:
            return run
    if "text" in shapes:
        from .fastpath import fast_records

        skipped: dict[str, int] = {}
        got = fast_records(data, skipped, progress)
        if got is not None:
            frames, lines = got
            n_lines = sum(len(f) for f in frames) + len(lines)  # every line is in one of them
            return _read_records(path, data, lines, n_lines, frames, skipped, fmt, rank, progress)
    if "dict" in shapes and not dicts_first:
        return _read_dict_lines(path, data, fmt, rank, progress)
    return None


def _read_dict_lines(
    path: str, data: Any, fmt: str | None, rank: int | str, progress: ProgressFn | None
) -> RunLog | None:
    """:func:`read_lines` with the HF Trainer's dict lines read by Arrow
    (:func:`~dflash_diag.logs.jsonlines.dict_line_records`), or None."""
    from .jsonlines import dict_line_records

    dicts = dict_line_records(data)
    if dicts is None:
        return None
    frame, dropped, others = dicts
    n_lines = len(frame) + sum(dropped.values()) + len(others)
    return _read_records(path, data, others, n_lines, [frame], dropped, fmt, rank, progress, "dict")


def _read_records(
    path: str,
    data: Any,
    lines: Any,
    n_lines: int,
    extra: Any,
    skipped: dict[str, int],
    fmt: str | None,
    rank: int | str,
    progress: ProgressFn | None,
    extra_shape: str = "text",
    writes: list[int] | None = None,
) -> RunLog:
    """Parse ``lines`` (``(line number, text)``), join the fast path's records
    (``extra``: a DataFrame per template, or None; ``extra_shape``: the shape of their
    lines), and build the table."""
    shapes = LINE_FORMATS[fmt or "text"]
    records: list[dict[str, Any]] = []
    shapes_seen: dict[str, int] = {}
    fast_used = extra is not None
    if fast_used:
        shapes_seen[extra_shape] = sum(len(f) for f in extra)
    ends_cleanly = data[-1:] == b"\n"
    st = _State(writes=writes or [])
    step_every = max(1, n_lines // 100)
    last_no = n_lines
    prev_no = 0
    prev: dict[str, Any] | None = None  # the record before the current line
    for line_no, line in lines:
        if fast_used and line_no != prev_no + 1:
            # lines in between were metric lines read by the fast path: they end any
            # traceback or warning block, as they would have here
            st.in_traceback = st.after_warning = False
        prev_no = line_no
        recs = parse_line(line_no, line, st, shapes, skipped, shapes_seen)
        if line_no == last_no and not ends_cleanly and recs:
            before = _fast_before(extra, line_no, prev) if fast_used else prev
            if not _complete(line, recs, before):
                _count(skipped, "truncated")
                continue
        records.extend(recs)
        if recs:
            prev = recs[-1]
        if progress is not None and not fast_used and line_no % step_every == 0:
            progress(line_no, n_lines)
    if progress is not None:
        progress(n_lines, n_lines)
    if st.rich_frame is not None:
        records.extend(flush_rich_frame(st, last=True))
    if st.writes:
        _date_by_writes(records, st, skipped)
    name = fmt or _format_name(shapes_seen)
    return build_table(
        records,
        path=path,
        fmt=name,
        rank=rank,
        skipped=skipped,
        n_lines=n_lines,
        extra=extra or (),
    )


def _date_by_writes(records: list[dict[str, Any]], st: _State, skipped: dict[str, int]) -> None:
    """Steps for the dict records of a console log with ``tqdm.write`` clears (the HF
    Trainer's, :mod:`~dflash_diag.logs.bars`): the ``k``-th dict of a family (printed
    bare by the Trainer, or by a logger from its ``on_log``) was written at the ``k``-th
    write, so its step is ``st.writes[k]``, however far stdout's buffering moved it.

    A family with more dicts than writes was not (only) written by ``tqdm.write``: its
    records keep no step and are counted as ``no_step`` (rather than dated wrongly).
    A family with fewer (a run cut short, its last stdout lump never written) is dated
    from the first write on.
    """
    for rec in records:
        order = rec.pop("write", None)
        if order is None:
            continue
        family, k = order
        if st.dicts.get(family, 0) <= len(st.writes):
            rec["step"] = float(st.writes[k])
            rec["step_source"] = "progress"
        else:
            rec["step_source"] = "none"
            _count(skipped, "undated_dict")


def _fast_before(
    frames: list[Any], line_no: int, prev: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The record before line ``line_no``: ``prev`` (the general parser's last), or a
    fast-path record after it, with the keys its template gives every record."""
    import numpy as np

    best, at = prev, (prev or {}).get("line", 0)
    for f in frames:
        lines = f["line"].to_numpy()
        i = int(np.searchsorted(lines, line_no)) - 1
        if i >= 0 and lines[i] > at:
            best, at = dict.fromkeys(f.columns), lines[i]
            best["is_eval"] = bool(f["is_eval"].iloc[i])
    return best


def _complete(line: str, recs: list[dict[str, Any]], before: dict[str, Any] | None) -> bool:
    """Whether a last line without a newline looks whole.

    A JSON/dict line must close its brace; a text line must end in a number or unit,
    not in the middle of a key (``... loss=2.31 ac``), and must have every field the
    record before it had (``s:3 trl:10.71`` after ``s:2 trl:10.86 lr:... norm:...`` was
    cut short, so its last number may be too).
    """
    s = line.rstrip()
    if s.startswith("{") or s.endswith("}"):
        return s.endswith("}")
    if not re.search(r"(?:\d|%|[A-Za-z]/s|ms|BPC|\]|\|)$", s):
        return False
    if before:
        keys = set(before)
        return all(keys <= set(r) for r in recs if r.get("is_eval") == before.get("is_eval"))
    return True


def _format_name(shapes_seen: dict[str, int]) -> str:
    if not shapes_seen:
        return "text"
    best = max(shapes_seen, key=lambda k: shapes_seen[k])
    return {"json": "jsonl", "dict": "hf-dict"}.get(best, "text")
