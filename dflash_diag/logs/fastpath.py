"""The vectorised fast path for large free-text logs whose lines share one shape.

A trainer prints the same line template millions of times
(``... | INFO | dflash.train | epoch=0 step=254/3000 loss=4.8123 ... tok/s=25.1K``).
Parsing each line with the general regex parser costs microseconds per line; here the
template is learned once and applied with pyarrow's C++ kernels:

1. parse a sample of lines with the general parser (:func:`~.text.parse_line`) and turn
   the most common line into a template: the line split on single spaces, each token
   either literal (digit runs generalised to ``\\d{n}``; digits inside words kept) or a
   value token ``<literal prefix><number><tail>`` whose column, unit factor and tail
   come from the general parser's spans for that line;
2. read the file as one string per line (pyarrow CSV reader, no delimiter) and mark the
   lines matching the template's full-line regex (RE2, no captures: a DFA pass);
3. split the matching lines on spaces (each has exactly ``k`` tokens), take each value
   token and cast it to float64 after cutting its literal prefix (and tail) off.

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
SAMPLE_LINES = 1_000

_NUM_RE2 = r"(?:[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|NaN|NAN|inf|Inf|INF))"
_ANY_DIGITS = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_FREE_DIGITS = re.compile(r"(?<![A-Za-z_])\d+(?![A-Za-z_])")
_MAG = "".join(sorted(MAGNITUDE))


@dataclass(frozen=True)
class ValueToken:
    """Where one column's number sits in the template.

    :param name: the column.
    :param index: token index (line split on single spaces).
    :param prefix: literal text before the number in the token (``loss=``).
    :param tail: regex for the text after the number (``/\\d{4}``, ``[KMG]?``, ``ms``).
    :param factor: unit factor for a fixed tail; ignored when ``magnitude``.
    :param magnitude: the tail is an optional magnitude letter (``25.1K``).
    :param tail_len: characters of a fixed-width tail to cut off (``/3000``: 5).
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
    #: characters and tokens before the first value token (fixed width in every line
    #: that matches ``regex``: literal text, digit runs of fixed length)
    cut: int = 0
    cut_tokens: int = 0


def _literal(token: str) -> str:
    return _FREE_DIGITS.sub(lambda m: rf"\d{{{len(m.group())}}}", re.escape(token))


def learn_template(
    line: str, rec: dict[str, Any], spans: dict[str, tuple[int, int, float]], offset: int
) -> Template | None:
    """The template of ``line`` given the general parser's record and value spans.

    ``offset`` is where the parsed message starts in ``line``.  None when a value does
    not sit alone at the end of a space-separated token's literal prefix.
    """
    if "\t" in line or "  " in line or line != line.strip() or not line:
        return None
    tokens = line.split(" ")
    starts = []
    pos = 0
    for t in tokens:
        starts.append(pos)
        pos += len(t) + 1
    by_token: dict[int, ValueToken] = {}
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
        tail = line[e:t_end]
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
            0 if magnitude else len(tail),
        )
    if len(by_token) != len(spans) or "step" not in {v.name for v in by_token.values()}:
        return None
    parts = []
    for i, t in enumerate(tokens):
        v = by_token.get(i)
        parts.append(_literal(t) if v is None else re.escape(v.prefix) + _NUM_RE2 + v.tail)
    first = min(by_token)
    return Template(
        regex="^" + " ".join(parts) + "$",
        n_tokens=len(tokens),
        values=tuple(sorted(by_token.values(), key=lambda v: v.index)),
        is_eval=bool(rec.get("is_eval")),
        rank=int(rec.get("rank", 0)),
        cut=starts[first],
        cut_tokens=first,
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


def _csv_lines(data: bytes) -> Any:
    import pyarrow as pa
    import pyarrow.csv as pcsv

    return pcsv.read_csv(
        pa.BufferReader(data),
        read_options=pcsv.ReadOptions(column_names=["line"], block_size=1 << 24),
        parse_options=pcsv.ParseOptions(
            delimiter="\x01", quote_char=False, escape_char=False, ignore_empty_lines=False
        ),
        convert_options=pcsv.ConvertOptions(
            column_types={"line": pa.string()}, strings_can_be_null=False
        ),
    ).column("line")


def _values(col: Any, v: ValueToken) -> Any:
    """float64 numpy array of one value column (prefix and tail cut, units applied)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    s = pc.utf8_slice_codeunits(col, len(v.prefix)) if v.prefix else col
    if v.magnitude:
        last = pc.utf8_slice_codeunits(s, -1)
        has = pc.is_in(last, value_set=pa.array(list(MAGNITUDE)))
        s = pc.if_else(has, pc.utf8_slice_codeunits(s, 0, -1), s)
        num = pc.cast(s, pa.float64()).to_numpy(zero_copy_only=False)
        factor = np.ones(len(num))
        letters = last.to_numpy(zero_copy_only=False)
        for letter, f in MAGNITUDE.items():
            factor[letters == letter] = f
        return num * factor
    if v.tail_len:
        s = pc.utf8_slice_codeunits(s, 0, -v.tail_len)
    return pc.cast(s, pa.float64()).to_numpy(zero_copy_only=False) * v.factor


def fast_records(
    data: bytes,
    skipped: dict[str, int],
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Any, Any] | None:
    """Records of the lines that fit the log's dominant template, or None.

    Works on the bytes: the full text is never decoded into one Python string.

    :returns: ``(frame, rest)``: a DataFrame of raw records (``line``, ``rank``,
        ``step_source``, ``is_eval``, value columns) and the ``(line number, text)`` of
        every line the frame does not cover.  None when the fast path does not apply.
    """
    if len(data) < 10 * FAST_MIN_LINES:
        return None
    n_lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    if n_lines < FAST_MIN_LINES or b"\x1b" in data or b"\x01" in data:
        return None
    if b"\r" in data and data.count(b"\r") != data.count(b"\r\n"):
        return None
    sample = _sample_lines(data)
    from .text import _RICH_HEAD, _RICH_PATH

    if any(_RICH_HEAD.match(x) and _RICH_PATH.search(x) for x in sample[:500]):
        return None
    template = _sample_template(sample)
    if template is None or template.n_tokens < 2:
        return None
    try:
        return _apply(data, template, n_lines, progress)
    except Exception:  # noqa: BLE001 - any surprise (bad UTF-8...): the general parser reads all
        return None


def _chunk(
    chunk: Any, first: int, template: Template, last_cut: bool
) -> tuple[Any, dict[str, Any], list[tuple[int, str]]]:
    """One block of lines: (indices of matching lines, value arrays, the other lines)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    mask = pc.match_substring_regex(chunk, template.regex).to_numpy(zero_copy_only=False)
    if last_cut:
        mask[-1] = False  # a last line without newline may be cut: the general parser checks
    idx = np.flatnonzero(mask)
    values: dict[str, Any] = {}
    if len(idx):
        kept = chunk.filter(pa.array(mask))
        # A matching line is exactly `n_tokens` tokens joined by single spaces; the tokens
        # before the first value have a fixed width: cut off before splitting.
        if template.cut:
            kept = pc.utf8_slice_codeunits(kept, template.cut)
        tokens = pc.split_pattern(kept, " ")
        for v in template.values:
            values[v.name] = _values(pc.list_element(tokens, v.index - template.cut_tokens), v)
    other = np.flatnonzero(~mask)
    rest: list[tuple[int, str]] = []
    if len(other):
        texts = chunk.take(pa.array(other)).to_pylist()
        rest = list(zip((other + first + 1).tolist(), texts, strict=True))
    return idx + first, values, rest


def _apply(
    data: bytes,
    template: Template,
    n_lines: int,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Any, Any] | None:
    import numpy as np
    import pandas as pd

    lines = _csv_lines(data)
    if len(lines) != n_lines:
        return None
    # Block by block (the CSV reader's blocks), so the temporaries stay small.  (Threads
    # over blocks were tried: no faster on two busy cores, and more memory.)
    firsts = np.cumsum([0] + [len(c) for c in lines.chunks])
    cut_last = not data.endswith(b"\n")
    jobs = [
        (chunk, int(first), template, cut_last and int(first) + len(chunk) == n_lines)
        for chunk, first in zip(lines.chunks, firsts, strict=False)
    ]
    done = []
    for job in jobs:
        done.append(_chunk(*job))
        if progress is not None:
            progress(job[1] + len(job[0]), n_lines)
    line_idx = np.concatenate([d[0] for d in done]) if done else np.zeros(0, dtype=np.int64)
    if len(line_idx) < MIN_MATCHES:
        return None
    cols: dict[str, Any] = {"line": line_idx + 1}
    for v in template.values:
        cols[v.name] = np.concatenate([d[1][v.name] for d in done if v.name in d[1]])
    frame = pd.DataFrame(cols)
    if "rank" not in frame:  # a `rank=3` field varies by line; a prefix does not match others
        frame["rank"] = template.rank
    frame["step_source"] = "field"
    frame["is_eval"] = template.is_eval
    frame["attach"] = False
    rest = [r for d in done for r in d[2]]
    del lines, done, jobs
    import pyarrow as pa

    pa.default_memory_pool().release_unused()  # hand the line buffers back before pandas works
    return frame, rest
