"""The line reader: free-text trainer logs, HF dict lines and JSON lines.

A log is read through its fast paths when one applies (JSON lines and the HF Trainer's
dict lines by Arrow, :mod:`~dflash_diag.logs.fast.jsonlines`; a large log whose lines mostly
share one shape by the vectorised :mod:`~dflash_diag.logs.fast.lineshape`), with the general
line parser (:mod:`~dflash_diag.logs.lines`) for the lines no fast path reads.
"""

from __future__ import annotations

from typing import Any

from ..data import Progress, RunLog
from .bars import write_steps
from .fast import console, jsonlines
from .fast import lineshape as fastpath
from .grammar import LINE_FORMATS, logical_lines
from .io import RawLog, decode, strip_ansi
from .lines import LineState, count, parse_line, read_records

#: Dict lines in this much of a log's head send it to the dict-line path first.
DICT_HEAD_BYTES = 1 << 16


def read_lines(
    raw: RawLog,
    fmt: str | None = None,
    rank: int | str = 0,
    progress: Progress | None = None,
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
        count(skipped, "bad_bytes", bad_bytes)  # bytes, not lines: replaced, line kept
    writes = write_steps(text)  # (from the raw text: a clear is told by its escapes)
    lines = logical_lines(strip_ansi(text))
    del text
    return read_records(
        raw.path, data, lines, n_lines, None, skipped, fmt, rank, progress, writes=writes
    )


def read_lines_fast(
    path: str,
    data: Any,
    fmt: str | None = None,
    rank: int | str = 0,
    progress: Progress | None = None,
) -> RunLog | None:
    """:func:`read_lines` through the vectorised fast path only: None when it does not
    apply.  ``data`` may be any bytes-like object with ``find`` (a read-only ``mmap``)."""
    shapes = LINE_FORMATS[fmt or "text"]
    if data[:1] == b"{" and "json" in shapes:  # JSON lines, through Arrow
        run = jsonlines.read_json_lines(path, data, fmt, rank)
        if run is not None:
            if progress is not None:
                progress(run.n_lines, run.n_lines)
            return run
    # The HF Trainer's dict lines among others, through Arrow: first when the log's head
    # has some, else once the line-shape fast path has declined (a long log of other
    # lines is not searched for them first).
    if "dict" in shapes and data.find(b"\r", 0, DICT_HEAD_BYTES) >= 0:
        run = _read_console(path, data, fmt, rank, progress)
        if run is not None:
            return run
    dicts_first = "dict" in shapes and (
        data[:2] == b"{'" or data.find(b"\n{'", 0, DICT_HEAD_BYTES) >= 0
    )
    if dicts_first:
        run = _read_dict_lines(path, data, fmt, rank, progress)
        if run is not None:
            return run
    if "text" in shapes:
        skipped: dict[str, int] = {}
        got = fastpath.fast_records(data, skipped, progress)
        if got is not None:
            frames, lines = got
            n_lines = sum(len(f) for f in frames) + len(lines)  # every line is in one of them
            run = read_records(path, data, lines, n_lines, frames, skipped, fmt, rank, progress)
            if not (_back_to_start(run) and _totals_in(frames, data, shapes)):
                return run
            return None  # steps go back to the start, against totals: maybe runs appended
    if "dict" in shapes and not dicts_first:
        return _read_dict_lines(path, data, fmt, rank, progress)
    return None


def _read_dict_lines(
    path: str, data: Any, fmt: str | None, rank: int | str, progress: Progress | None
) -> RunLog | None:
    """:func:`read_lines` with the HF Trainer's dict lines read by Arrow
    (:func:`~dflash_diag.logs.fast.jsonlines.dict_line_records`), or None."""
    dicts = jsonlines.dict_line_records(data)
    if dicts is None:
        return None
    frame, dropped, others = dicts
    n_lines = len(frame) + sum(dropped.values()) + len(others)
    return read_records(path, data, others, n_lines, [frame], dropped, fmt, rank, progress, "dict")


def _read_console(
    path: str, data: Any, fmt: str | None, rank: int | str, progress: Progress | None
) -> RunLog | None:
    """:func:`read_lines` of the HF Trainer's console output (dict lines among tqdm
    redraws) through :func:`~dflash_diag.logs.fast.console.console_records`, or None."""
    got = console.console_records(data)
    if got is None:
        return None
    return read_records(
        path, data, got.others, got.n_lines, [got.frame], got.skipped, fmt, rank, progress, "dict",
        quiet=got.quiet,
    )  # fmt: skip


def _back_to_start(run: RunLog) -> bool:
    """Whether the steps go back to the lowest step logged: the only step back that can
    start another run (:func:`~dflash_diag.logs.normalise.run_starts`: back to the
    run's first step or below); a step back to the middle is a resume, whatever the
    totals."""
    return bool(run.restarts) and min(run.restarts) <= int(run.table["step"].iloc[0])


def _totals_in(frames: list[Any], data: Any, shapes: frozenset[str]) -> bool:
    """Whether the line-shape fast path's lines count their steps against a total
    (``step=17/2353``, ``iteration 17/ 2353``), which it does not carry: the first line
    of each of its templates, read by the line parser, says (a template's lines share
    one shape).  Only totals tell runs appended to one file from a resume
    (:func:`~dflash_diag.logs.normalise.run_starts`), so the caller asks only when
    steps went back to the start."""
    for frame in frames:
        if not len(frame):
            continue
        line_no = int(frame["line"].iloc[0])
        recs = parse_line(line_no, _line_text(data, line_no), LineState(), shapes, {}, {})
        if any("step_total" in r for r in recs):
            return True
    return False


def _line_text(data: Any, line_no: int) -> str:
    """Line ``line_no`` (from 1) of ``data``, decoded, its escape codes taken off."""
    start = 0
    for _ in range(line_no - 1):
        start = data.find(b"\n", start) + 1
    end = data.find(b"\n", start)
    text, _ = decode(bytes(data[start : end if end >= 0 else len(data)]))
    return strip_ansi(text).rstrip("\r")
