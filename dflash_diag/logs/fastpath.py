"""The vectorised fast path for large free-text logs whose lines share one shape.

A trainer prints the same line template millions of times
(``... | INFO | dflash.train | epoch=0 step=254/3000 loss=4.8123 ... tok/s=25.1K``).
Parsing each line with the general regex parser costs microseconds per line; here the
template is learned once and applied to the raw bytes with numpy and pyarrow's C++
kernels, without a Python object per line:

1. parse a sample of lines with the general parser (:func:`~.text.parse_line`) and turn
   the most common line into a template: the line split on single spaces, each token
   either literal (digit runs generalised to ``\\d{n}``; digits inside words kept) or a
   value token ``<literal prefix><number><tail>`` whose column, unit factor and tail
   come from the general parser's spans for that line;
2. cut the log into byte ranges of whole lines (:data:`PART_BYTES`), read by a few
   threads (numpy and Arrow release the GIL); in each range:
3. find every byte below ``!`` (numpy): the newlines give the lines, and in a line that
   fits the template the others are exactly its token-separating spaces;
4. view the bytes as an Arrow array of lines (zero-copy: the offsets are the line
   starts) and mark the lines matching the template's full-line regex (RE2, no
   captures: a DFA pass);
5. the byte span of every number in the matching lines (its token's bounds less the
   literal prefix and tail) is cast to float64 by Arrow, a block of lines per call
   (:func:`_value_matrix`); a magnitude letter (``25.1K``) is read from the span's
   last byte and its factor applied per line.

Costs on a 1M-line, 150 MB log, in CPU time: the regex pass about 0.3 s, finding the
bytes below ``!`` 0.2 s, the numbers 0.25 s (0.1 s of it Arrow's casts).  Each is a full
pass over the bytes, which is why this stays several times slower than
``pandas.read_csv`` on the same metrics as CSV (a third of the bytes, one pass in C).

Every line that does not match goes through the general parser, so the result is the
same table the general parser gives (the test suite checks this on every fixture).
Used only for logs of at least :data:`FAST_MIN_LINES` lines, valid UTF-8, without
ANSI codes, bare carriage returns or RichHandler layout.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .normalise import MAGNITUDE

#: Logs shorter than this take the general path (its per-line cost does not matter).
FAST_MIN_LINES = 20_000
#: Fewer lines than this fit the template: not worth it, the general parser reads all.
MIN_MATCHES = 1_000
#: Lines parsed by the general parser to learn the template.
SAMPLE_LINES = 400
#: Lines per Arrow cast (keeps the temporaries small).
BLOCK_LINES = 1 << 17
#: The log is read in byte ranges of about this size, by up to 4 threads (progress is
#: reported after each range).
PART_BYTES = 1 << 24

_FINITE_RE2 = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_NUM_RE2 = rf"(?:{_FINITE_RE2}|[-+]?(?:nan|NaN|NAN|inf|Inf|INF))"
_ANY_DIGITS = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_CONTROL = re.compile(r"[\x00-\x1f]")
_FREE_DIGITS = re.compile(r"(?<![A-Za-z_])\d+(?![A-Za-z_])")
_MAG = "".join(sorted(MAGNITUDE))


def _byte_tables() -> tuple[list[float], list[int]]:
    factor, letter = [1.0] * 256, [0] * 256
    for k, f in MAGNITUDE.items():
        factor[ord(k)], letter[ord(k)] = f, 1
    return factor, letter


#: by last byte of a magnitude span: its factor (1.0 for a digit), whether it is a letter
_MAG_FACTOR, _MAG_LETTER = _byte_tables()


@dataclass(frozen=True)
class ValueToken:
    """Where one column's number sits in the template.

    :param name: the column.
    :param index: token index (line split on single spaces).
    :param prefix: literal text before the number in the token (``loss=``).
    :param tail: regex for the text after the number (``/\\d{4}``, ``[KMG]?``, ``ms``).
    :param factor: unit factor for a fixed tail; ignored when ``magnitude``.
    :param magnitude: the tail is an optional magnitude letter (``25.1K``).
    :param tail_len: bytes of a fixed-width tail to cut off (``/3000``: 5).
    """

    name: str
    index: int
    prefix: str
    tail: str
    factor: float
    magnitude: bool
    tail_len: int = 0


@dataclass(frozen=True)
class Template:
    """A learned line shape: its full-line regex, token count and value tokens."""

    regex: str
    n_tokens: int
    values: tuple[ValueToken, ...]
    is_eval: bool
    rank: int


def _literal(token: str) -> str:
    return _FREE_DIGITS.sub(lambda m: rf"\d{{{len(m.group())}}}", re.escape(token))


def learn_template(
    line: str, rec: dict[str, Any], spans: dict[str, tuple[int, int, float]], offset: int
) -> Template | None:
    """The template of ``line`` given the general parser's record and value spans.

    ``offset`` is where the parsed message starts in ``line``.  None when a value does
    not sit alone at the end of a space-separated token's literal prefix.
    """
    if "  " in line or line != line.strip() or not line or _CONTROL.search(line):
        return None  # the fast path takes the only bytes below '!' for token bounds
    from .text import _TB_CHAIN, _TB_END, _TB_START

    if _TB_END.match(line) or line.startswith((*_TB_CHAIN, _TB_START)):
        return None  # after a traceback, the general parser would skip such a line
    tokens = line.split(" ")
    starts = []
    pos = 0
    for t in tokens:
        starts.append(pos)
        pos += len(t) + 1
    by_token: dict[int, ValueToken] = {}
    numbers: dict[int, str] = {}
    for name, (s, e, factor) in spans.items():
        if name not in rec:
            return None
        s, e = s + offset, e + offset
        idx = max(i for i, st in enumerate(starts) if st <= s)
        t_end = starts[idx] + len(tokens[idx])
        if e > t_end or idx in by_token:
            return None
        prefix = line[starts[idx] : s]
        if _literal(prefix) != re.escape(prefix):
            return None  # a free number in the prefix may vary from line to line
        if idx == 0 and re.fullmatch(r"[\w.]*", prefix):
            return None  # whether it reads as a traceback's last line depends on the number
        tail = line[e:t_end]
        # The general parser reads `nan`/`inf` only when no letter follows (`infK` is not
        # a number there), so such a tail takes finite numbers only.
        numbers[idx] = _FINITE_RE2 if re.match(r"\w", tail) else _NUM_RE2
        magnitude = len(tail) == 1 and tail in MAGNITUDE and factor == MAGNITUDE[tail]
        # The tail is literal (its unit factor is the same in every matching line), but
        # for an optional magnitude letter, whose factor is read per line.
        tail_re = f"[{_MAG}]?" if magnitude else _literal(tail)
        by_token[idx] = ValueToken(
            name,
            idx,
            prefix,
            tail_re,
            1.0 if magnitude else factor,  # per row from the letter
            magnitude,
            0 if magnitude else len(tail.encode()),
        )
    if len(by_token) != len(spans) or "step" not in {v.name for v in by_token.values()}:
        return None
    parts = []
    for i, t in enumerate(tokens):
        v = by_token.get(i)
        parts.append(_literal(t) if v is None else re.escape(v.prefix) + numbers[i] + v.tail)
    return Template(
        regex="^" + " ".join(parts) + "$",
        n_tokens=len(tokens),
        values=tuple(sorted(by_token.values(), key=lambda v: v.index)),
        is_eval=bool(rec.get("is_eval")),
        rank=int(rec.get("rank", 0)),
    )


def _sample_template(lines: list[str]) -> Template | None:
    """The most common template among the sample lines (at least half of them)."""
    from .fields import parse_text
    from .text import _RANK_PREFIX, _State, _strip_prefix, parse_line

    found: Counter[Template] = Counter()
    seen: dict[str, Template | None] = {}
    parsed = 0
    st = _State()
    for i, line in enumerate(lines, 1):
        recs = parse_line(i, line, st, frozenset({"text"}), {}, {})
        if len(recs) != 1 or recs[0].get("step_source") != "field" or _RANK_PREFIX.match(line):
            continue
        parsed += 1
        skeleton = _ANY_DIGITS.sub("0", line)
        if skeleton not in seen:
            message, _ = _strip_prefix(line)
            offset = len(line.rstrip()) - len(message)
            msg = parse_text(message)
            # `position 2, Acc: ...` renames by a number the template would generalise
            ok = message and not msg.positional
            seen[skeleton] = learn_template(line, recs[0], msg.spans, offset) if ok else None
        t = seen[skeleton]
        if t is not None:
            found[t] += 1
    if not found:
        return None
    best, count = found.most_common(1)[0]
    return best if count * 2 >= parsed else None


def _sample_lines(data: bytes) -> list[str]:
    """Up to :data:`SAMPLE_LINES` lines from the start, the middle and the end of the log
    (a log may open with thousands of lines of warnings)."""
    out: list[str] = []
    share = SAMPLE_LINES // 4
    for frac in (0.0, 0.25, 0.5, 0.75):
        start = int(len(data) * frac)
        if start:
            start = data.find(b"\n", start) + 1
            if start == 0:
                continue
        chunk = data[start : start + 400 * share].decode("utf-8", errors="replace")
        out.extend(x.rstrip("\r") for x in chunk.split("\n")[: share - 1])
    return out


def _rich(data: bytes) -> bool:
    """The general reader's RichHandler test, on the same first 500 lines."""
    from .text import is_rich

    end = -1
    for _ in range(500):
        end = data.find(b"\n", end + 1)
        if end < 0:
            break
    head = data if end < 0 else data[:end]
    return is_rich(head.decode("utf-8", errors="replace").split("\n"))


def fast_records(
    data: bytes,
    skipped: dict[str, int],
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Any, Any] | None:
    """Records of the lines that fit the log's dominant template, or None.

    Works on the bytes: the full text is never decoded into one Python string, and no
    Python object is made per matching line.

    :returns: ``(frame, rest)``: a DataFrame of raw records (``line``, ``rank``,
        ``step_source``, ``is_eval``, value columns) and the ``(line number, text)`` of
        every line the frame does not cover (so the log has ``len(frame) + len(rest)``
        lines).  None when the fast path does not apply.
    """
    if len(data) < 10 * FAST_MIN_LINES or b"\x1b" in data:
        return None  # ANSI codes: the general reader strips them first
    if _rich(data):
        return None  # records wrapped over several lines
    template = _sample_template(_sample_lines(data))
    if template is None or template.n_tokens < 2:
        return None
    try:
        return _apply(data, template, progress)
    except Exception:  # noqa: BLE001 - any surprise (bad UTF-8...): the general parser reads all
        return None


def _line_array(data: bytes, starts: Any) -> Any:
    """A zero-copy Arrow string array over ``data``: element ``i`` is
    ``data[starts[i]:starts[i + 1]]`` (a line with its ``\\n``)."""
    import pyarrow as pa

    return pa.Array.from_buffers(
        pa.large_string(), len(starts) - 1, [None, pa.py_buffer(starts), pa.py_buffer(data)]
    )


def _matching(lines: Any, template: Template) -> Any:
    """Boolean numpy mask of the lines that match the template (``\\r\\n`` or ``\\n``
    included, so a last line without a newline never matches: it may be cut short)."""
    import pyarrow.compute as pc

    regex = template.regex[:-1] + r"\r?\n$"
    return pc.match_substring_regex(lines, regex).to_numpy(zero_copy_only=False)


def _columns(matrix: Any, cols: list[int]) -> Any:
    """``matrix[:, cols]``, as a view when ``cols`` is a run (the common case)."""
    if cols == list(range(cols[0], cols[0] + len(cols))):
        return matrix[:, cols[0] : cols[0] + len(cols)]
    return matrix[:, cols]


def _value_matrix(data: bytes, template: Template, cuts: Any, first: Any, before: int) -> Any:
    """float64 ``(lines, values)`` matrix of the template's numbers in the matching lines.

    ``cuts[first[i] + k]`` is the byte where token ``k`` of matching line ``i`` ends (a
    space, or the line's ``\\r``/``\\n``); ``cuts[first[i] - 1]`` is the newline before
    the line (``before`` when ``first[i]`` is 0).  The number of value token ``k`` runs
    from the token's start plus its literal prefix to its end less its tail (and less a
    magnitude letter, whose factor is read from that byte).  The spans are not
    contiguous, so they are read through an Arrow string array over ``data`` whose
    elements alternate number / the text up to the next number, the latter null: the
    cast parses only the numbers (Arrow's parser, as exact as Python's ``float``: both
    round correctly).  Each value is then ``float(text) * factor`` as in the general
    parser.  Done a block of lines at a time, so the temporaries stay small.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    from numpy.lib.stride_tricks import sliding_window_view

    n, m = len(first), len(template.values)
    lo = template.values[0].index
    width = template.values[-1].index - lo + 2
    # bounds[i, c]: where token lo - 1 + c of matching line i ends (a line's are adjacent)
    windows = sliding_window_view(cuts, width)
    start_cols = [v.index - lo for v in template.values]
    end_cols = [c + 1 for c in start_cols]
    start_adjust = np.array([1 + len(v.prefix.encode()) for v in template.values])
    end_adjust = np.array([v.tail_len for v in template.values])
    factor_of = np.asarray(_MAG_FACTOR)
    letter_of = np.asarray(_MAG_LETTER, dtype=np.int64)
    buf = np.frombuffer(data, dtype=np.uint8)
    values = np.empty((n, m), dtype=np.float64)
    for s in range(0, n, BLOCK_LINES):
        rows = first[s : s + BLOCK_LINES] + (lo - 1)
        k = len(rows)
        before_cuts = rows[0] < 0  # value token 0 of the first line: its start is not a cut
        bounds = windows[np.maximum(rows, 0)]
        if before_cuts:
            bounds[0] = np.concatenate([[before], cuts[: width - 1]])
        offsets = np.empty(2 * m * k + 1, dtype=np.int64)
        pairs = offsets[:-1].reshape(k, 2 * m)
        np.add(_columns(bounds, start_cols), start_adjust, out=pairs[:, 0::2])
        np.subtract(_columns(bounds, end_cols), end_adjust, out=pairs[:, 1::2])
        scales: dict[int, Any] = {}
        for j, v in enumerate(template.values):
            if v.magnitude:
                last = buf[pairs[:, 2 * j + 1] - 1]
                scales[j] = factor_of[last]
                pairs[:, 2 * j + 1] -= letter_of[last]
        offsets[-1] = offsets[-2]
        valid = np.full((2 * m * k + 7) // 8, 0x55, dtype=np.uint8)  # bits 0, 2, 4 ...
        spans = pa.Array.from_buffers(
            pa.large_string(),
            2 * m * k,
            [pa.py_buffer(valid), pa.py_buffer(offsets), pa.py_buffer(data)],
            null_count=m * k,
        )
        got = pc.cast(spans, pa.float64())
        raw = np.frombuffer(got.buffers()[1], np.float64, count=2 * m * k, offset=8 * got.offset)
        block = values[s : s + k]
        block[...] = raw.reshape(k, 2 * m)[:, 0::2]
        for j, v in enumerate(template.values):
            if j in scales or v.factor != 1.0:
                block[:, j] *= scales.get(j, v.factor)
    return values


class _NotFast(Exception):
    """The log has something the fast path does not reproduce: the general parser reads all."""


@dataclass
class _Part:
    """What :func:`_read_part` found in one byte range of the log."""

    starts: Any  # byte offset of each line's start, then the range's end
    mask: Any  # per line: it matches the template
    values: Any  # (matching lines, values) float64


def _parts(data: bytes) -> list[tuple[int, int]]:
    """Byte ranges of about :data:`PART_BYTES`, each ending just after a newline."""
    bounds = [0]
    while len(data) - bounds[-1] > PART_BYTES:
        cut = data.find(b"\n", bounds[-1] + PART_BYTES - 1) + 1
        if cut == 0 or cut == len(data):
            break
        bounds.append(cut)
    bounds.append(len(data))
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _read_part(data: bytes, lo: int, hi: int, template: Template, ascii: bool) -> _Part:
    """Match and read the lines in ``data[lo:hi]`` (whole lines).  Runs in a worker thread:
    numpy and Arrow release the GIL in everything that takes time here."""
    import numpy as np

    buf = np.frombuffer(data, dtype=np.uint8)
    # In a matching line the bytes below '!' are exactly its `n_tokens - 1` single spaces,
    # then `\\r\\n` or `\\n` (the template has no other), in order: token k of the line
    # whose first such byte is cuts[f] ends at byte cuts[f + k].
    cuts = np.flatnonzero(buf[lo:hi] <= 32)
    cuts += lo
    kind = buf[cuts]
    returns = cuts[kind == 13]
    if len(returns) and (returns[-1] + 1 == len(buf) or (buf[returns + 1] != 10).any()):
        raise _NotFast("a \\r not ending a line: tqdm refreshes, several records a line")
    at_nl = np.flatnonzero(kind == 10)
    del kind, returns
    ended = len(at_nl)
    n = ended + (1 if hi > lo and buf[hi - 1] != 10 else 0)  # the log's unterminated end
    starts = np.empty(n + 1, dtype=np.int64)
    starts[0] = lo
    starts[1 : ended + 1] = cuts[at_nl] + 1
    starts[n] = hi
    lines = _line_array(data, starts)
    if not ascii:
        lines.validate(full=True)  # bad UTF-8 raises: the general parser reads all
    mask = _matching(lines, template)
    del lines
    idx = np.flatnonzero(mask)
    first = np.zeros(len(idx), dtype=np.int64)
    later = idx > 0
    first[later] = at_nl[idx[later] - 1] + 1
    if len(idx):
        values = _value_matrix(data, template, cuts, first, lo - 1)
    else:
        values = np.zeros((0, len(template.values)))
    return _Part(starts, mask, values)


def _apply(
    data: bytes,
    template: Template,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Any, Any] | None:
    import os
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import pandas as pd

    ranges = _parts(data)
    ascii = data.isascii()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = max(1, min(len(ranges), cpus or 1, 4))
    parts: list[_Part] = []
    pool = ThreadPoolExecutor(workers)
    try:
        done = 0
        for part in pool.map(lambda r: _read_part(data, r[0], r[1], template, ascii), ranges):
            parts.append(part)
            done += len(part.mask)
            if progress is not None:  # lines so far, of a total guessed from the bytes
                progress(done, max(done, round(done * len(data) / int(part.starts[-1]))))
    except _NotFast:
        return None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # after a failure, skip the rest
    counts = [len(p.mask) for p in parts]
    n_lines = sum(counts)
    line0 = np.cumsum([0, *counts[:-1]])
    idx = np.concatenate([np.flatnonzero(p.mask) + o for p, o in zip(parts, line0, strict=True)])
    if n_lines < FAST_MIN_LINES or len(idx) < MIN_MATCHES:
        return None
    values = np.concatenate([p.values for p in parts])
    frame = pd.DataFrame(values, columns=[v.name for v in template.values], copy=False)
    frame.insert(0, "line", idx + 1)
    if "rank" not in frame:  # a `rank=3` field varies by line; a prefix does not match others
        frame["rank"] = template.rank
    frame["step_source"] = "field"
    frame["is_eval"] = template.is_eval
    frame["attach"] = False
    rest = []
    for p, o in zip(parts, line0, strict=True):
        other = np.flatnonzero(~p.mask)
        begin, end = p.starts[other].tolist(), p.starts[other + 1].tolist()
        rest += [
            (i + 1, _text(data[s:e]))
            for i, s, e in zip((other + o).tolist(), begin, end, strict=True)
        ]
    return frame, rest


def _text(line: bytes) -> str:
    """A line's text as the general reader sees it: no ``\\n``, no ``\\r`` before it."""
    if line.endswith(b"\n"):
        line = line[:-1]
    if line.endswith(b"\r"):
        line = line[:-1]
    return line.decode("utf-8")
