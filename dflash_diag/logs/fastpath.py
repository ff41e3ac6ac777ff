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


