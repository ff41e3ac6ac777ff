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
2. find every byte below ``!`` in the log (numpy): the newlines give the lines, and in
   a line that fits the template the others are exactly its token-separating spaces;
3. view the bytes as an Arrow array of lines (zero-copy: the offsets are the line
   starts) and mark the lines matching the template's full-line regex (RE2, no
   captures: a DFA pass);
4. per value column, the byte span of the number in every matching line (the token's
   bounds less its literal prefix and tail) is cast to float64 in one Arrow call
   (:func:`_numbers`); a magnitude letter (``25.1K``) is read from the span's last byte.

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
#: Lines per call of the regex kernel (progress is reported after each).
BLOCK_LINES = 1 << 17

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
        return None
    if b"\r" in data and data.count(b"\r") != data.count(b"\r\n"):
        return None  # tqdm refreshes: one physical line holds several records
    if _rich(data):
        return None  # records wrapped over several lines
    template = _sample_template(_sample_lines(data))
    if template is None or template.n_tokens < 2:
        return None
    try:
        return _apply(data, template, progress)
    except Exception:  # noqa: BLE001 - any surprise (bad UTF-8...): the general parser reads all
        return None


def _cuts(buf: Any) -> Any:
    """Positions of every byte below ``!`` (spaces, line ends, other control bytes), found
    a block at a time so the boolean temporary stays small."""
    import numpy as np

    block = 1 << 24
    parts = [np.flatnonzero(buf[s : s + block] <= 32) + s for s in range(0, len(buf), block)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _line_array(data: bytes, starts: Any) -> Any:
    """A zero-copy Arrow string array over ``data``: element ``i`` is
    ``data[starts[i]:starts[i + 1]]`` (a line with its ``\\n``)."""
    import pyarrow as pa

    return pa.Array.from_buffers(
        pa.large_string(), len(starts) - 1, [None, pa.py_buffer(starts), pa.py_buffer(data)]
    )


def _matching(lines: Any, template: Template, progress: Callable[[int, int], None] | None) -> Any:
    """Boolean numpy mask of the lines that match the template (``\\r\\n`` or ``\\n``
    included, so a last line without a newline never matches: it may be cut short)."""
    import numpy as np
    import pyarrow.compute as pc

    regex = template.regex[:-1] + r"\r?\n$"
    n = len(lines)
    mask = np.empty(n, dtype=bool)
    for s in range(0, n, BLOCK_LINES):
        block = pc.match_substring_regex(lines.slice(s, BLOCK_LINES), regex)
        mask[s : s + len(block)] = block.to_numpy(zero_copy_only=False)
        if progress is not None:
            progress(min(n, s + BLOCK_LINES), n)
    return mask


def _columns(matrix: Any, cols: list[int]) -> Any:
    """``matrix[:, cols]``, as a view when ``cols`` is a run (the common case)."""
    if cols == list(range(cols[0], cols[0] + len(cols))):
        return matrix[:, cols[0] : cols[0] + len(cols)]
    return matrix[:, cols]


def _value_matrix(data: bytes, template: Template, cuts: Any, first: Any) -> Any:
    """float64 ``(lines, values)`` matrix of the template's numbers in the matching lines.

    ``cuts[first[i] + k]`` is the byte where token ``k`` of matching line ``i`` ends (a
    space, or the line's ``\\r``/``\\n``); ``cuts[first[i] - 1]`` is the newline before
    the line.  The number of value token ``k`` runs from the token's start plus its
    literal prefix to its end less its tail (and less a magnitude letter, whose factor is
    read from that byte).  The spans are not contiguous, so they are read through an
    Arrow string array over ``data`` whose elements alternate number / the text up to the
    next number, the latter null: the cast parses only the numbers (Arrow's parser, as
    exact as Python's ``float``: both round correctly).  Each value is then
    ``float(text) * factor`` as in the general parser.  Done a block of lines at a time,
    so the temporaries stay small.
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
        before_log = rows[0] < 0  # value token 0 of the log's first line: no byte before
        bounds = windows[np.maximum(rows, 0)]
        if before_log:
            bounds[0] = np.concatenate([[-1], cuts[: width - 1]])
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


def _apply(
    data: bytes,
    template: Template,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Any, Any] | None:
    import numpy as np
    import pandas as pd

    buf = np.frombuffer(data, dtype=np.uint8)
    # In a matching line the bytes below '!' are exactly its `n_tokens - 1` single spaces,
    # then `\\r\\n` or `\\n` (the template has no other), in order: token k of the line
    # whose first such byte is cuts[f] ends at byte cuts[f + k].
    cuts = _cuts(buf)
    at_nl = np.flatnonzero(buf[cuts] == 10)
    ended = len(at_nl)
    n_lines = ended + (0 if data.endswith(b"\n") else 1)
    if n_lines < FAST_MIN_LINES:
        return None
    starts = np.empty(n_lines + 1, dtype=np.int64)
    starts[0] = 0
    starts[1 : ended + 1] = cuts[at_nl] + 1
    starts[n_lines] = len(data)
    lines = _line_array(data, starts)
    if not data.isascii():
        lines.validate(full=True)  # bad UTF-8 raises: the general parser reads all
    mask = _matching(lines, template, progress)
    del lines
    idx = np.flatnonzero(mask)
    if len(idx) < MIN_MATCHES:
        return None
    first = np.zeros(len(idx), dtype=np.int64)
    later = idx > 0
    first[later] = at_nl[idx[later] - 1] + 1
    del at_nl, later
    values = _value_matrix(data, template, cuts, first)
    del cuts, first
    frame = pd.DataFrame(values, columns=[v.name for v in template.values], copy=False)
    frame.insert(0, "line", idx + 1)
    if "rank" not in frame:  # a `rank=3` field varies by line; a prefix does not match others
        frame["rank"] = template.rank
    frame["step_source"] = "field"
    frame["is_eval"] = template.is_eval
    frame["attach"] = False
    other = np.flatnonzero(~mask)
    rest = [
        (i + 1, _text(data[s:e]))
        for i, s, e in zip(
            other.tolist(), starts[other].tolist(), starts[other + 1].tolist(), strict=True
        )
    ]
    return frame, rest


def _text(line: bytes) -> str:
    """A line's text as the general reader sees it: no ``\\n``, no ``\\r`` before it."""
    if line.endswith(b"\n"):
        line = line[:-1]
    if line.endswith(b"\r"):
        line = line[:-1]
    return line.decode("utf-8")
