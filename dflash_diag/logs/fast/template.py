"""The shape most lines of a large log share, learned from a sample of its lines.

A trainer prints the same line millions of times
(``... | INFO | dflash.train | epoch=0 step=254/3000 loss=4.8123 ... tok/s=25.1K``).
A :class:`Template` is that line's shape: fixed bytes, ASCII digit runs that vary
(a timestamp's, a ``/3000`` total), and the numbers to read, each with its column, unit
factor and tail.  It is learned from what the general parser (:func:`~.text.parse_line`)
makes of one line, so a line that fits the template reads the same either way.

For the fast path (:mod:`~dflash_diag.logs.fast.lineshape`) the template is then cut at one
delimiter byte into :class:`Segment` s, each holding at most one number:
:func:`split_template`.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..fields import parse_text
from ..grammar import RANK_PREFIX, TB_CHAIN, TB_END, TB_START, TIMESTAMP
from ..lines import LineState, parse_line, strip_prefix
from ..names import MAGNITUDE

#: Lines parsed by the general parser to learn the template.
SAMPLE_LINES = 400
#: Bytes the template may be cut at: ASCII punctuation and space, but not the ones a
#: number can hold (``.``, ``+``, ``-``).  A space serves whenever no token holds two
#: numbers (``[default3]:step=5`` does: there ``:`` or ``=`` serves); a byte that occurs
#: less often gives fewer columns.
DELIMITERS = b" =:|,;/()[]{}<>!?@#$%&*^~`'\"\\_"

#: ASCII digits the template generalises: a run not glued to a letter (``14:03:11``,
#: ``/3000``); digits inside a word (``acc_0``, ``dflash2``) stay literal.
_FREE_DIGITS = re.compile(r"(?<![A-Za-z_])[0-9]+(?![A-Za-z_])")
_DIGITS_TO_ZERO = str.maketrans("123456789", "000000000")
_CONTROL = re.compile(r"[\x00-\x1f]")


@dataclass(frozen=True)
class Pattern:
    """Fixed-length template bytes: ``text``, where each position in ``digits`` stands for
    any ASCII digit (it holds ``0`` in ``text``)."""

    text: bytes
    digits: tuple[int, ...] = ()

    @classmethod
    def of(cls, text: str) -> Pattern:
        """The pattern of literal ``text`` with its free digit runs generalised."""
        out = bytearray()
        digits: list[int] = []
        pos = 0
        for m in _FREE_DIGITS.finditer(text):
            out += text[pos : m.start()].encode()
            digits.extend(range(len(out), len(out) + m.end() - m.start()))
            out += b"0" * (m.end() - m.start())
            pos = m.end()
        out += text[pos:].encode()
        return cls(bytes(out), tuple(digits))

    def __add__(self, other: Pattern) -> Pattern:
        n = len(self.text)
        return Pattern(self.text + other.text, self.digits + tuple(n + d for d in other.digits))

    def __len__(self) -> int:
        return len(self.text)


@dataclass(frozen=True)
class ValueToken:
    """Where one column's number sits in the template.

    :param name: the column.
    :param tail: the fixed text after the number in the token (``/3000``, ``ms``), empty
        for an optional magnitude letter.
    :param factor: unit factor for the fixed tail; 1.0 when ``magnitude``.
    :param magnitude: the number may end in a magnitude letter (``25.1K``), whose factor
        is read per line.
    :param finite: only finite numbers are read here (a letter follows the number, and
        the general parser does not read ``nan``/``inf`` glued to a letter).
    :param digits: only a run of ASCII digits is read here (a rank prefix's number,
        ``[rank3]:``, which the general parser recognises only so).
    :param padded: spaces may come before the number: a right-aligned field
        (Megatron's ``iteration       10/``, ``consumed samples:         2560``), whose
        padding shrinks as the number grows.  The template's fixed text keeps one space.
    """

    name: str
    tail: Pattern
    factor: float
    magnitude: bool
    finite: bool
    digits: bool = False
    padded: bool = False


@dataclass(frozen=True)
class Template:
    """A learned line shape: fixed patterns and value tokens in line order."""

    layout: tuple[Pattern | ValueToken, ...]
    n_tokens: int
    is_eval: bool
    rank: int

    @property
    def values(self) -> tuple[ValueToken, ...]:
        return tuple(x for x in self.layout if isinstance(x, ValueToken))


@dataclass(frozen=True)
class Segment:
    """The part of a template line between two delimiters: ``head``, then (when
    ``value`` is not None) that value's number and ``tail``; a line's segment fits when
    its bytes are exactly that."""

    head: Pattern
    value: int | None  # index into Template.values
    tail: Pattern


def learn_template(
    line: str,
    rec: dict[str, Any],
    spans: dict[str, tuple[int, int, float]],
    offset: int,
    digits_only: frozenset[str] = frozenset(),
) -> Template | None:
    """The template of ``line`` given the general parser's record and value spans.

    ``offset`` is where the parsed message starts in ``line`` (a span may lie before
    it: a rank prefix's number).  The text between the numbers is the template's fixed
    part, its free digit runs generalised; two or more spaces before a value are
    padding (:attr:`ValueToken.padded`).  None when a value spans a space, two values
    touch, or the literal text before a value holds a free number.  The values named in
    ``digits_only`` take ASCII digit runs only.
    """
    if not line or line != line.rstrip() or _CONTROL.search(line):
        return None
    if line != line.lstrip() and not TIMESTAMP.match(line):
        return None  # an indented line may be a traceback's frame: a timestamp is not

    if TB_END.match(line) or line.startswith((*TB_CHAIN, TB_START)):
        return None  # after a traceback, the general parser would skip such a line
    if any(c.isdigit() and not c.isascii() for c in line):
        return None  # digits the fast path would not recognise as digits
    tokens = line.split(" ")
    starts = []
    pos = 0
    for t in tokens:
        starts.append(pos)
        pos += len(t) + 1
    found = []  # (start, end, name, factor, token)
    for name, (s, e, factor) in spans.items():
        if name not in rec:
            return None
        s, e = s + offset, e + offset
        idx = max(i for i, st in enumerate(starts) if st <= s)
        if e > starts[idx] + len(tokens[idx]):
            return None
        found.append((s, e, name, factor, idx))
    found.sort()
    if "step" not in spans or any(a[1] >= b[0] for a, b in zip(found[:-1], found[1:], strict=True)):
        return None
    layout: list[Pattern | ValueToken] = []
    pos = 0
    for k, (s, e, name, factor, idx) in enumerate(found):
        same_before = k > 0 and found[k - 1][4] == idx
        prefix = line[found[k - 1][1] if same_before else starts[idx] : s]
        if _FREE_DIGITS.search(prefix):
            return None  # a free number in the prefix may vary from line to line
        if idx == 0 and not same_before and re.fullmatch(r"[\w.]*", prefix):
            return None  # whether it reads as a traceback's last line depends on the number
        same_after = k + 1 < len(found) and found[k + 1][4] == idx
        tail = line[e : found[k + 1][0] if same_after else starts[idx] + len(tokens[idx])]
        magnitude = len(tail) == 1 and tail in MAGNITUDE and factor == MAGNITUDE[tail]
        fixed = line[pos:s]
        padded = fixed.endswith("  ")
        layout += [
            Pattern.of(fixed.rstrip(" ") + " " if padded else fixed),
            ValueToken(
                name,
                Pattern(b"") if magnitude else Pattern.of(tail),
                1.0 if magnitude else factor,  # per row from the letter
                magnitude,
                # The general parser reads `nan`/`inf` only when no letter follows
                # (`infK` is not a number there).
                bool(re.match(r"\w", tail)),
                name in digits_only,
                padded,
            ),
        ]
        pos = e + 1 if magnitude else e  # a magnitude letter is read with its number
    layout.append(Pattern.of(line[pos:]))
    return Template(
        layout=tuple(layout),
        n_tokens=len(tokens),
        is_eval=bool(rec.get("is_eval")),
        rank=int(rec.get("rank", 0)),
    )


def split_template(template: Template) -> tuple[bytes, tuple[Segment, ...]] | None:
    """Cut the template at the delimiter byte that gives the fewest segments while each
    holds at most one value; None when no byte does (two numbers in one token with no
    delimiter between them).

    A digit position or a number never holds a delimiter, so a line fits the template
    exactly when it has as many delimiters and each piece fits its segment.

    :returns: the delimiter and the segments, in line order.
    """
    atoms: list[int | ValueToken] = []  # a byte, -1 for any digit, or a value
    for item in template.layout:
        if isinstance(item, ValueToken):
            atoms.append(item)
        else:
            digits = set(item.digits)
            atoms += [-1 if j in digits else b for j, b in enumerate(item.text)]
    best: tuple[int, list[list[int | ValueToken]]] | None = None
    padded = any(v.padded for v in template.values)
    for d in DELIMITERS:
        if d not in atoms or (padded and d == ord(" ")):
            continue  # (padding varies the number of spaces in a line)
        pieces: list[list[int | ValueToken]] = [[]]
        for a in atoms:
            if a == d:
                pieces.append([])
            else:
                pieces[-1].append(a)
        if any(sum(isinstance(a, ValueToken) for a in p) > 1 for p in pieces):
            continue
        if best is None or len(pieces) < len(best[1]):
            best = (d, pieces)
    if best is None:
        return None
    index = {v.name: i for i, v in enumerate(template.values)}
    segments = []
    for p in best[1]:
        at = next((i for i, a in enumerate(p) if isinstance(a, ValueToken)), None)
        if at is None:
            segments.append(Segment(_pattern(p), None, Pattern(b"")))
        else:
            value = p[at]
            assert isinstance(value, ValueToken)
            segments.append(Segment(_pattern(p[:at]), index[value.name], _pattern(p[at + 1 :])))
    return bytes([best[0]]), tuple(segments)


def _pattern(atoms: list[int | ValueToken]) -> Pattern:
    text = bytes(48 if a == -1 else a for a in atoms if isinstance(a, int))
    return Pattern(text, tuple(i for i, a in enumerate(atoms) if a == -1))


def sample_template(lines: list[str]) -> Template | None:
    """The most common template among the sample lines (at least half of them)."""
    # by skeleton (every ASCII digit a 0): whether such a line is a step record, its
    # template.  (A line's shape decides both; the parser's traceback state is ignored
    # here, this only picks the template to try.)  Counted by skeleton: a template hashes
    # deeply.  A skeleton keeps the widths of numbers: lines whose fixed text holds a
    # number of another width (SpecForge's `Step 50 [50/187500?]`) are another template,
    # while values of any width give the same one.
    seen: dict[str, tuple[bool, Template | None]] = {}
    per_skeleton: Counter[str] = Counter()
    st = LineState()
    for i, line in enumerate(lines, 1):
        skeleton = line.translate(_DIGITS_TO_ZERO)
        if skeleton not in seen:
            recs = parse_line(i, line, st, frozenset({"text"}), {}, {})
            record = len(recs) == 1 and recs[0].get("step_source") == "field"
            seen[skeleton] = (record, _template_of(line, recs[0]) if record else None)
        per_skeleton[skeleton] += 1
    parsed = 0
    found: Counter[Template] = Counter()
    for skeleton, count in per_skeleton.items():
        record, template = seen[skeleton]
        parsed += count if record else 0
        if template is not None:
            found[template] += count
    if not found:
        return None
    best, count = found.most_common(1)[0]
    return best if count * 2 >= parsed else None


def _template_of(line: str, rec: dict[str, Any]) -> Template | None:
    """:func:`learn_template` for a line the general parser made ``rec`` of: the message
    parsed again for its value spans, and a rank prefix's number (``[rank3]:``,
    ``[default3]:``) taken as the ``rank`` value."""
    ranked = RANK_PREFIX.match(line)
    message, _ = strip_prefix(line[ranked.end() :] if ranked else line)
    offset = len(line.rstrip()) - len(message)
    msg = parse_text(message)
    # `position 2, Acc: ...` renames by a number the template would generalise
    if not message or msg.positional or msg.human:
        return None
    spans = dict(msg.spans)
    if ranked:
        if "rank" in spans or "rank" in msg.fields:
            return None  # two ranks: the field's wins in the general parser
        group = next(g for g in ("a", "b", "c") if ranked.group(g) is not None)
        s, e = ranked.span(group)
        spans["rank"] = (s - offset, e - offset, 1.0)
    return learn_template(line, rec, spans, offset, frozenset({"rank"}) if ranked else frozenset())


def sample_lines(data: Any) -> list[str]:
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
