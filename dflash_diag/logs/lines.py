"""The general line parser: one line of a log at a time, with what the lines before
it decide (a traceback, a warning's continuation, a progress bar's count).

Each line goes through, in order:

1. ``\\r``-separated tqdm refreshes split apart, a bar's postfix metrics
   (``loss=4.81, acc=0.031``) kept with the bar's counter as the step, and any text
   glued after a bar read as a line of its own; rich progress-bar frames (Lightning's
   ``RichProgressBar``) read the same way;
2. a rank prefix (``[rank3]:``, torchrun's ``[default3]:``, ``[RANK 3]``) taken off;
3. tracebacks and warnings recognised and skipped, with the lines that belong to them;
4. timestamps, a log level and a logger name taken off the front;
5. the message parsed as a JSON object, a Python dict repr, or free text
   (:mod:`dflash_diag.logs.fields`).

:func:`read_records` drives it over a log's lines (ANSI codes already removed,
RichHandler records joined: :func:`~dflash_diag.logs.grammar.logical_lines`), joins
the fast paths' records, and builds the table
(:func:`~dflash_diag.logs.normalise.build_table`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..data import Progress, RunLog
from .bars import LIGHTNING_EPOCH, RICH_BAR, RICH_EPOCH, RICH_POSTFIX, TQDM, is_training_bar
from .fields import FIELD, Message, parse_dict_repr, parse_json_object, parse_text
from .grammar import (
    DIGIT,
    GLOG_WARN,
    LEVEL,
    LINE_FORMATS,
    LOGGER,
    LOGURU_SOURCE,
    RANK_PREFIX,
    TB_CHAIN,
    TB_END,
    TB_START,
    TIMESTAMP,
    format_of_shape,
    warning_text,
)
from .names import EVAL_PREFIXES
from .normalise import build_table


@dataclass
class LineState:
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


def rank_of(field: float | None, default: int) -> int:
    """A record's rank: its ``rank`` field when that is a whole number a rank can be
    (``"rank": "nan"`` or ``1e30`` is no rank), else ``default`` (a prefix's, or 0)."""
    if field is None or not (field == field and abs(field) < 2**31):
        return default
    return int(field)


def count(skipped: dict[str, int], reason: str, n: int = 1) -> None:
    skipped[reason] = skipped.get(reason, 0) + n


def holds_field(text: str) -> bool:
    """Whether :data:`FIELD` matches in ``text``; a field's value is a number, so text
    with no digit and no ``nan``/``inf`` holds none (the regex costs ~3 µs)."""
    low = text.lower()
    if not DIGIT.search(text) and "nan" not in low and "inf" not in low:
        return False
    return FIELD.search(text) is not None


def strip_prefix(text: str) -> tuple[str, str | None]:
    """Take timestamps, a level and a logger name off the front; return (message, level)."""
    level = None
    for _ in range(3):
        m = TIMESTAMP.match(text)
        if not m or not m.group(0).strip():
            break
        text = text[m.end() :]
    m = LEVEL.match(text)
    if m:
        level = m.group("level")
        text = text[m.end() :]
        for _ in range(2):  # `14:03:11 INFO` orders vary: timestamps after the level too
            t = TIMESTAMP.match(text)
            if not t or not t.group(0).strip():
                break
            text = text[t.end() :]
        src = LOGURU_SOURCE.match(text)
        if src:  # loguru: `name:function:line` is the record's source, not a metric
            return text[src.end() :].strip(), level
        lg = LOGGER.match(text)
        if lg and not holds_field(text[: lg.end()]):
            text = text[lg.end() :]
    return text.strip(), level


def parse_message(message: str, shapes: frozenset[str]) -> tuple[str, Message | None]:
    """``(shape, Message)`` of a message; the shape is ``json``, ``dict`` or ``text``.

    A JSON object or dict repr that ends the message after any prefix the line grammar
    did not take off (fairseq under hydra: ``[train_inner][INFO] - {"loss": "9.276",
    ...}``) is the record; the prefix is not read.
    """
    if message[-1:] == "}" and not message.startswith("{") and ("{" in message):
        inner = _object_after_prefix(message, shapes)
        if inner is not None:
            return inner
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


def _object_after_prefix(message: str, shapes: frozenset[str]) -> tuple[str, Message] | None:
    """The record of a JSON object (``{"``) or dict repr (``{'``) that ends ``message``
    after a prefix, or None (also when the prefix ends in ``:`` or ``=``: the object is
    then a named value, ``config: {...}``)."""
    for opener, shape in (('{"', "json"), ("{'", "dict")):
        at = message.find(opener)
        if at > 0 and message[:at].rstrip().endswith((":", "=")):
            return None  # the object is a key's value (`config: {...}`), not a record
        if at > 0 and shape in shapes:
            msg = parse_json_object(message[at:]) if shape == "json" else None
            if shape == "dict" and message[at:].count("{") == 1:
                msg = parse_dict_repr(message[at:])
            if msg is not None:
                return shape, msg
    return None


def prefix_rank(m: re.Match[str]) -> int:
    """The rank of a rank prefix's match; digits no rank has (2**31 or more) are rank
    0, as a ``rank`` field of 1e30 is."""
    digits = m.group("a") or m.group("b") or m.group("c")
    return int(digits) if len(digits) < 10 or int(digits) < 2**31 else 0


def _bar(
    match: re.Match[str], desc_text: str, st: LineState, rank: int, line_no: int
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
    if max(n, total) > 2**53:  # (digits no counter reaches; a float step could not hold them)
        return []
    if not is_training_bar(desc_text):
        st.val_fresh = True
        return []
    if total >= st.bar_last_total:
        if n < st.bar_last_n:
            st.bar_offset += st.bar_last_total
        st.bar_last_n, st.bar_last_total = n, total
        # (Lightning's bar, ``Epoch E``: its loggers number a batch's step from 0)
        st.bar_step = st.bar_offset + n - (LIGHTNING_EPOCH.match(desc_text) is not None)
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


def _rich_bar(seg: str, st: LineState, line_no: int) -> bool:
    """A rich progress-bar frame: a training frame is kept until its postfix is whole
    (:func:`flush_rich_frame`); a validation frame notes the training step it
    interrupted.  Steps: ``Epoch E/L`` (E from 0; L the last index) ``n/total`` is
    step ``E x total + n``.  Sanity-check frames are no step."""
    m = RICH_BAR.match(seg)
    if not m:
        return False
    desc, n, total = m.group("desc").strip(), int(m.group("n")), int(m.group("total"))
    epoch = RICH_EPOCH.match(desc)
    if epoch is None:
        if "valid" in desc.lower():
            st.rich_val_at = st.rich_step
        return True
    st.rich_step = int(epoch.group(1)) * total + n - 1  # (as Lightning's loggers number it)
    st.rich_frame = {
        "step": st.rich_step, "n": n, "epoch": float(epoch.group(1)),
        "postfix": m.group("postfix"), "line": line_no,
    }  # fmt: skip
    return True


def flush_rich_frame(st: LineState, last: bool = False) -> list[dict[str, Any]]:
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
    st: LineState,
    shapes: frozenset[str],
    skipped: dict[str, int],
    shapes_seen: dict[str, int],
) -> list[dict[str, Any]]:
    """Records from one physical line (tqdm refreshes may make several)."""
    out: list[dict[str, Any]] = []
    segments = line.split("\r") if "\r" in line else [line]
    for seg in segments:
        if st.rich_frame is not None:
            if seg[:1].isspace() and RICH_POSTFIX.fullmatch(seg.strip()):
                st.rich_frame["postfix"] += " " + seg.strip()  # the postfix wrapped
                continue
            out.extend(flush_rich_frame(st))
        if "\u2022" in seg and _rich_bar(seg, st, line_no):
            continue
        rest = seg
        while "%|" in rest:
            m = TQDM.search(rest)
            if not m:
                break
            pm = RANK_PREFIX.match(rest)
            rank = prefix_rank(pm) if pm else 0
            recs = _bar(m, rest[: m.start()], st, rank, line_no)
            if not recs:
                count(skipped, "progress_bar")
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
    st: LineState,
    shapes: frozenset[str],
    skipped: dict[str, int],
    shapes_seen: dict[str, int],
) -> dict[str, Any] | None:
    rank = 0
    m = RANK_PREFIX.match(text)
    if m:
        rank = prefix_rank(m)
        text = text[m.end() :]
    if not text.strip():
        count(skipped, "blank")
        return None
    # Tracebacks: the header, its indented frames, chained headers, the exception line.
    if st.in_traceback:
        # a frame is indented; an indented line that opens with a timestamp is a new
        # record (Megatron prints ` [2026-03-02 14:03:10] iteration ...`)
        frame = text[:1].isspace() and not TIMESTAMP.match(text)
        if frame or text.startswith(TB_CHAIN) or text.startswith(TB_START):
            count(skipped, "traceback")
            return None
        st.in_traceback = False
        if TB_END.match(text):
            count(skipped, "traceback")
            return None
    if text.startswith(TB_START) or text.lstrip().startswith(TB_START):
        st.in_traceback = True
        count(skipped, "traceback")
        return None
    new_record = LEVEL.match(text.lstrip()) or TIMESTAMP.match(text)
    if st.after_warning and text[:1].isspace() and not new_record:
        count(skipped, "warning")
        return None
    st.after_warning = False
    if GLOG_WARN.match(text) or warning_text(text):
        st.after_warning = True
        count(skipped, "warning")
        return None
    message, level = strip_prefix(text)
    if level in ("WARNING", "WARN"):
        st.after_warning = True
        count(skipped, "warning")
        return None
    if not message:
        count(skipped, "text")
        return None
    shape, msg = parse_message(message, shapes)
    if msg is None:
        count(skipped, "bad_record" if shape != "text" else "text")
        return None
    order = None
    if shape != "text" and st.writes:
        # the k-th dict of its family is the k-th tqdm.write (see _date_by_writes)
        family = "bare" if message == text.strip() else "logger"
        order = (family, st.dicts.get(family, 0))
        st.dicts[family] = order[1] + 1
    if msg.summary:
        count(skipped, "summary")
        return None
    if not msg.metrics:
        count(skipped, "text")
        return None
    shapes_seen[shape] = shapes_seen.get(shape, 0) + 1
    rec: dict[str, Any] = {"line": line_no, "is_eval": msg.is_eval}
    rec.update(msg.fields)
    # a free-text `rank N` without a step is prose (NCCL's `comm 0x.. rank 3 nranks 8`,
    # `distributed init (rank 3)`), not whose record this is
    own_rank = shape != "text" or "step" in msg.fields
    rec["rank"] = rank_of(msg.fields.get("rank"), rank) if own_rank else rank
    rec["step_source"] = "field" if "step" in msg.fields else "none"
    if msg.total is not None:
        rec["step_total"] = msg.total
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


def read_records(
    path: str,
    data: Any,
    lines: Any,
    n_lines: int,
    extra: Any,
    skipped: dict[str, int],
    fmt: str | None,
    rank: int | str,
    progress: Progress | None,
    extra_shape: str = "text",
    writes: list[int] | None = None,
    quiet: Any = None,
) -> RunLog:
    """Parse ``lines`` (``(line number, text)``), join the fast path's records
    (``extra``: a DataFrame per template, or None; ``extra_shape``: the shape of their
    lines), and build the table.  ``quiet``: line numbers (ascending) the fast path
    read that leave the parser's state as it was (tqdm redraws only); any other line it
    read ends a traceback or warning block."""
    shapes = LINE_FORMATS[fmt or "text"]
    records: list[dict[str, Any]] = []
    shapes_seen: dict[str, int] = {}
    fast_used = extra is not None
    if fast_used:
        shapes_seen[extra_shape] = sum(len(f) for f in extra)
    ends_cleanly = data[-1:] == b"\n"
    st = LineState(writes=writes or [])
    step_every = max(1, n_lines // 100)
    last_no = n_lines
    prev_no = 0
    prev: dict[str, Any] | None = None  # the record before the current line
    for line_no, line in lines:
        if fast_used and line_no != prev_no + 1 and _ends_block(quiet, prev_no, line_no):
            # lines in between were metric lines read by the fast path: they end any
            # traceback or warning block, as they would have here
            st.in_traceback = st.after_warning = False
        prev_no = line_no
        recs = parse_line(line_no, line, st, shapes, skipped, shapes_seen)
        if line_no == last_no and not ends_cleanly and recs:
            before = _fast_before(extra, line_no, prev) if fast_used else prev
            if not _complete(line, recs, before):
                count(skipped, "truncated")
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


def _ends_block(quiet: Any, prev_no: int, line_no: int) -> bool:
    """Whether a line between ``prev_no`` and ``line_no`` (both excluded) read by the
    fast path is not one of the ``quiet`` ones."""
    if quiet is None:
        return True
    import numpy as np

    inside = int(np.searchsorted(quiet, line_no)) - int(np.searchsorted(quiet, prev_no + 1))
    return inside < line_no - prev_no - 1


def _date_by_writes(records: list[dict[str, Any]], st: LineState, skipped: dict[str, int]) -> None:
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
            count(skipped, "undated_dict")


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
    return format_of_shape(max(shapes_seen, key=lambda k: shapes_seen[k]))
