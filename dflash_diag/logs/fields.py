"""One log message -> its numeric fields.

Three shapes of message carry metrics:

* free text, ``key=value`` / ``key: value`` / ``key value`` fields separated by ``|``,
  ``,``, ``;`` or spaces, with progress (``step 254/3000``), bracketed counters
  (``Epoch [1/3]``), units and magnitude suffixes (``25.1 Ktok/s``, ``87%``, ``14.2min``);
* Python dict reprs as the Hugging Face Trainer prints them (``{'loss': 0.87, ...}``);
* JSON objects (one per line), nested objects flattened with ``/``.

Each returns a :class:`Message`: the fields under their canonical names
(:func:`~dflash_diag.logs.names.canonical_name`), in canonical units, plus where in
the text each value was (the text reader's fast path builds its templates from those
spans).
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from .names import (
    DURATION,
    EVAL_PREFIXES,
    NEUTRAL,
    canonical_name,
    logged,
    rate_key,
    snake,
    to_float,
    unit_factor,
)

NUM = (
    r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
    r"|[-+]?(?:nan|NaN|NAN|inf|Inf|INF)(?![A-Za-z])"
)
_WORD = r"[A-Za-z_@][\w./@-]*"
_RATE_UNIT = r"[kKMGTB]?(?:tok|toks|tokens|samples?|seqs?|sequences|it|img|imgs)/s"
_UNIT = rf"%|{_RATE_UNIT}|[kKMGTB](?![\w])|ms|us|secs?|mins?|hrs?|h|s|BPC|bpc|BPB|bpb|ppl|nats|bits"
_END = r"(?=$|[\s,;|\])}:'\"])"
#: Numbers as people print them, beside :data:`NUM`: thousands separators (``2,578``,
#: ``1,234.5``) and durations of several units (``1h02m``, ``3m12s``, ``1h5s``).
HUMAN_NUM = (
    r"\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,]\d)"
    r"|\d+h\d{1,2}m(?:\d{1,2}(?:\.\d+)?s)?(?![\w/])|\d+h\d{1,2}(?:\.\d+)?s(?![\w/])"
    r"|\d+m\d{1,2}(?:\.\d+)?s(?![\w/])"
)
_HUMAN = re.compile(rf"(?:{HUMAN_NUM})$")
_DURATION_PARTS = re.compile(r"(\d+(?:\.\d+)?)([hms])")
#: A clock duration ``H:MM:SS`` (``0:14:07``), as a string value in a record.
_CLOCK = re.compile(r"\s*(\d+):([0-5]\d):([0-5]\d(?:\.\d+)?)\s*")
#: A count of a total, as a string value (``"17/2353"``).
_OF_TOTAL = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


def is_count_of_total(value: str) -> bool:
    """Whether a string value is a count of a total, ``"17/2353"`` (which
    :func:`fields_from_mapping` splits into the count and its total).

    >>> is_count_of_total("17/2353"), is_count_of_total("0.5")
    (True, False)
    """
    return _OF_TOTAL.fullmatch(value) is not None


FIELD = re.compile(
    rf"(?<![\w./@-])(?P<key>{_WORD}(?: {_WORD}){{0,6}})(?:\s*\((?P<kunit>[^()]{{1,12}})\))?"
    rf"(?:\s*[=:]\s*|\s+)\[?(?P<val>{HUMAN_NUM}|{NUM})(?P<total>\s*/\s*(?:\d+|\?)\??)?\]?"
    rf"(?:\s?(?P<unit>{_UNIT})(?![\w/]))?{_END}"
    rf"|(?<![\w.])(?P<bval>{NUM})\s?(?P<bunit>{_RATE_UNIT})(?![\w/])"
)
# Words that make a free-text line an evaluation line (outside `val_loss`-like keys).
EVAL_WORDS = re.compile(
    r"(?i)(?<![\w/])(?:eval|evaluation|evaluating|validation|validating|valid|val|test|testing)"
    r"(?![\w/])"
)
_GROUPS = ("key", "kunit", "val", "unit", "bval", "bunit")  # of a FIELD match
_DICT_PAIR = re.compile(r"""(['"])(?P<key>[^'"]{1,80})\1\s*:\s*(?P<val>'[^']*'|"[^"]*"|[^,}]+)""")


@dataclass
class Message:
    """What one message says.

    :param fields: canonical column -> value (canonical units).  ``step`` is here when
        the message names one.
    :param is_eval: an evaluation record (its metrics went to ``eval_*`` columns).
    :param spans: per column, (start, end) of the number in the text and the factor
        applied to it, for the fast path.  Only for free text.
    :param summary: an end-of-training summary (HF ``train_runtime``), not a step.
    :param positional: a ``position <i>`` field renamed the metrics (``acc`` -> ``acc_<i>``).
    :param human: a value was printed as people print numbers (``2,578``, ``1h02m``:
        :data:`HUMAN_NUM`), which the fast path's templates do not read.
    :param total: the total a step was counted against (``step 17/2353``: 2353), or None.
    """

    fields: dict[str, float] = field(default_factory=dict)
    is_eval: bool = False
    spans: dict[str, tuple[int, int, float]] = field(default_factory=dict)
    summary: bool = False
    positional: bool = False
    human: bool = False
    total: float | None = None

    @property
    def metrics(self) -> int:
        """How many fields other than step/epoch there are."""
        return sum(1 for k in self.fields if k not in ("step", "epoch", "rank"))


def parse_text(message: str) -> Message:
    """Fields of a free-text message.

    >>> m = parse_text("epoch=0 step=254/3000 loss=4.8123 acc=87% tok/s=25.1K")
    >>> m.fields == {"epoch": 0.0, "step": 254.0, "loss": 4.8123, "acc": 0.87,
    ...              "tok_per_s": 25100.0}
    True
    """
    matches = list(FIELD.finditer(message))
    if not matches:
        return Message()
    is_eval = _is_eval_text(message, matches)
    out = Message(is_eval=is_eval)
    raw: list[tuple[str, float, tuple[int, int, float]]] = []
    position: float | None = None
    for m in matches:
        key, kunit, text, unit, bval, bunit = m.group(*_GROUPS)
        try:
            v = logged(float(text or bval))
        except ValueError:
            human = human_number(text or bval)
            if human is None:
                continue
            v, out.human = human, True
        f = unit_factor(unit or bunit)
        if key and key.endswith(".py"):
            continue  # a source position (`train.py:42`, a log's path column): no metric
        if key:
            if kunit:
                f *= unit_factor(kunit.strip())
            start, end = m.span("val")
            if " " in key and key.rsplit(" ", 1)[1].lower() == "epoch":
                key = "epoch"  # `Training Epoch 1`, `Finished epoch 1/3`
        else:
            start, end = m.span("bval")
            key = rate_key(bunit) or "rate"
        name = canonical_name(key, is_eval)
        total = m.group("total") if key else None
        if name == "step" and total and out.total is None:
            out.total = to_float(total.strip(" /?")) or None
        if name == "position":
            position = v
            out.positional = True
            continue
        raw.append((name, v * f, (start, end, f)))
    for name, value, span in raw:
        if position is not None and name not in ("step", "epoch", "lr"):
            name = f"{name}_{int(position)}" if math.isfinite(position) else name
        if name == "step" and "step" in out.fields:
            continue  # the first step-like field wins (`step` before a later `iter`)
        out.fields[name] = value
        out.spans[name] = span
    if not out.is_eval:
        # a line of validation metrics only (llm.c `s:250 tel:4.1`) is an evaluation record
        names = [k for k in out.fields if k not in NEUTRAL]
        out.is_eval = bool(names) and all(k.startswith(EVAL_PREFIXES) for k in names)
    return out


def may_hold_eval_word(message: str) -> bool:
    """False when :data:`EVAL_WORDS` cannot match: every one of its words holds ``val``
    or ``test`` in any case (and ``re.IGNORECASE`` reads ``ſ`` as ``s``).  A substring
    test, far cheaper than the regex, for the many lines without one."""
    low = message.lower()
    return "val" in low or "test" in low or "\u017f" in message


def _is_eval_text(message: str, matches: list[re.Match[str]]) -> bool:
    """An evaluation line: a mode word outside keys, or val keys beside a `train ...` key.

    ``Eval - Step 50, Loss: ...`` and nanoGPT's ``step 250: train loss 3.13, val loss
    3.14`` are evaluation lines; ``step=100 loss=2.3 val_loss=2.5`` is a training line
    that also carries a validation loss (its ``loss`` stays the training loss).
    """
    if not may_hold_eval_word(message):
        return False
    for w in EVAL_WORDS.finditer(message):
        inside = [m for m in matches if m.group("key") and m.start("key") <= w.start() < m.end()]
        if not inside:
            return True
        key = snake(inside[0].group("key"))
        if not key.startswith(EVAL_PREFIXES) or canonical_name(key) == "step":
            return True  # `Eval - Step 5`, Megatron's `validation loss at iteration 50`
        # `val loss` beside `train loss` on a step's line: an evaluation summary
        # (nanoGPT, whose training lines come between); on a line with no step
        # (`Epoch 12: Train Loss=0.41, Val Loss=0.52`) it is the training record
        keys = [snake(m.group("key")) for m in matches if m.group("key")]
        if any(k.startswith("train_") for k in keys) and any(
            canonical_name(k) == "step" for k in keys
        ):
            return True
    return False


def _flat_items(obj: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """``(key path, value)`` of a JSON object's leaves, nested objects flattened with
    ``/``; a loop over a stack, not recursion (``json.loads`` takes deeper objects than
    Python's recursion limit leaves room for)."""
    items: list[tuple[str, Any]] = []
    stack = [(prefix, iter(obj.items()))]  # depth first, keys in their order
    while stack:
        here, rest = stack[-1]
        for k, v in rest:
            key = f"{here}/{k}" if here else str(k)
            if isinstance(v, dict):
                stack.append((key, iter(v.items())))
                break
            items.append((key, v))
        else:
            stack.pop()
    return items


def _json_int(text: str) -> int | float:
    """A JSON integer literal: an int, or a float when it has more digits than a float
    can hold (``float("1" + "0" * 400)`` is inf, as ``1e400`` would be; ``int()`` of it
    would only fail later, converting to float)."""
    return int(text) if len(text) <= 300 else float(text)


def load_json(text: str) -> Any:
    """``json.loads`` with integers beyond a float's range read as +-inf.

    :raises ValueError: not JSON.  :raises RecursionError: nested deeper than the
        interpreter's recursion limit (about 1000 levels).
    """
    return json.loads(text, parse_int=_json_int)


def fields_from_mapping(items: list[tuple[str, Any]]) -> Message:
    """Message from already-split key/value pairs (dict lines, JSON, CSV rows, HF state).

    A record is an evaluation record when any of its keys starts with ``eval_``,
    ``val_`` or ``test_`` and it has no plain ``loss``: the HF Trainer logs those
    separately, and their other keys (``epoch``) stay as they are.  An end-of-training
    summary (``train_runtime``) is flagged so it is not taken for a step.
    """
    total = None
    if any(isinstance(v, str) and "/" in v for _, v in items):
        items, total = _counts_of_totals(items)
    names, out_summary, out_eval = mapping_shape(tuple(k for k, _ in items))
    out = Message(is_eval=out_eval, summary=out_summary, total=total)
    step_key = ""
    for (key, value), name in zip(items, names, strict=True):
        v = to_float(value)
        if v is None and isinstance(value, str):
            v = number_with_unit(value)
        if v is None:
            continue
        if name == "step":
            if "step" in out.fields and not takes_step(key, step_key):
                continue
            step_key = key
        out.fields[name] = v
    return out


def takes_step(key: str, held: str) -> bool:
    """Whether step key ``key`` takes the step from ``held``, the record's earlier one:
    only from W&B's ``_step``, its count of ``run.log`` calls, when the record also
    holds a trainer's own step (Lightning's ``trainer/global_step``), which is the
    optimizer step.  Otherwise the first step key holds (a record's keys' order).

    >>> takes_step("trainer/global_step", "_step"), takes_step("_step", "step")
    (True, False)
    """
    return snake(held) == "_step" and snake(key) != "_step"


def _counts_of_totals(items: list[tuple[str, Any]]) -> tuple[list[tuple[str, Any]], float | None]:
    """String values ``"N/M"`` split: under a key ``a/b`` (``"global_step/max_steps":
    "17/2353"``) into ``a`` = N and ``b`` = M; under a step key (``"step": "17/2353"``)
    into the step N.  When the count is the step, M is its total (returned, not a
    column)."""
    out: list[tuple[str, Any]] = []
    total = None
    for key, value in items:
        m = _OF_TOTAL.fullmatch(value) if isinstance(value, str) else None
        if m is None:
            out.append((key, value))
            continue
        count, of = m.groups()
        head, _, tail = key.rpartition("/")
        if canonical_name(snake(head or tail)) == "step":
            total = float(of)
            out.append((head or tail, count))
        elif head:
            out += [(head, count), (tail, of)]
        else:
            out.append((key, count))
    return out, total


@functools.lru_cache(maxsize=1024)
def mapping_shape(keys: tuple[str, ...]) -> tuple[tuple[str, ...], bool, bool]:
    """What a record's keys alone decide (the same for every line with these keys):
    each key's column, whether it is a summary, whether it is an evaluation record."""
    snakes = [snake(k) for k in keys]
    # The HF Trainer's end-of-training summary by its whole shape: its run totals
    # (`train_runtime`, `train_samples_per_second`...) and no per-step `loss`.  With
    # `include_num_input_tokens_seen` every train record carries `train_runtime` and
    # `train_tokens_per_second` too, beside its `loss`.
    summary = ("train_runtime" in snakes or "train_samples_per_second" in snakes) and (
        "loss" not in snakes
    )
    is_eval = any(k.startswith(EVAL_PREFIXES) for k in snakes) and not any(
        canonical_name(k) == "loss" for k in snakes if not k.startswith(EVAL_PREFIXES)
    )
    if _per_epoch(snakes) and not summary:
        # an epoch's summary (fairseq's `[train]` record): its loss is the epoch's mean,
        # not a step's; its step key (`train_num_updates`) is still the step
        rest = ["epoch" if k == "epoch" else canonical_name(k[6:]) for k in snakes]
        names = tuple(n if n in ("epoch", "step") else "epoch_" + n for n in rest)
        return names, False, False
    return tuple(canonical_name(k) for k in snakes), summary, is_eval


def _per_epoch(snakes: list[str]) -> bool:
    """A record of one epoch's training totals, by its own keys: ``epoch`` unprefixed
    and every other key prefixed ``train_`` (fairseq: ``{"epoch": 1, "train_loss":
    ..., "train_num_updates": ...}``, beside per-step ``{"loss": ..., "num_updates":
    ...}``).  W&B's ``train/epoch`` is prefixed too: no such record."""
    rest = [k for k in snakes if k != "epoch"]
    return "epoch" in snakes and len(rest) >= 2 and all(k.startswith("train_") for k in rest)


def human_number(text: str) -> float | None:
    """A number as people print it (:data:`HUMAN_NUM`): ``2,578`` -> 2578.0, ``1h02m``
    -> 3720.0 (seconds); None for anything else.

    >>> human_number("2,578"), human_number("1h02m"), human_number("3m12.5s"), human_number("2.5")
    (2578.0, 3720.0, 192.5, None)
    """
    if not _HUMAN.match(text):
        return None
    if "," in text:
        return float(text.replace(",", ""))
    return sum(float(v) * DURATION[u] for v, u in _DURATION_PARTS.findall(text))


def number_with_unit(text: str) -> float | None:
    """A string value as a number in its unit: ``"9.276"``, ``"45%"`` (0.45), ``"1.2k"``,
    ``"2,578"``, ``"1h02m"`` and ``"0:14:07"`` (seconds); None when it is none of those.

    >>> number_with_unit("45%"), number_with_unit("0:14:07"), number_with_unit("1.2k")
    (0.45, 847.0, 1200.0)
    """
    m = re.fullmatch(rf"\s*({NUM})\s*({_UNIT})?\s*", text)
    if m:
        return logged(float(m.group(1)) * unit_factor(m.group(2)))
    human = human_number(text.strip())
    if human is not None:
        return human
    clock = _CLOCK.fullmatch(text)
    if clock:
        h, mi, sec = clock.groups()
        return int(h) * 3600.0 + int(mi) * 60.0 + float(sec)
    return None


def parse_dict_repr(message: str) -> Message | None:
    """Fields of a Python dict repr (``{'loss': 0.87, 'learning_rate': 8.8e-05}``).

    Tolerant of what ``ast.literal_eval`` rejects: bare ``nan``/``inf`` and values the
    Trainer quotes (``'loss': '0.87'``).  None when no pair is found.
    """
    pairs = [
        (m.group("key"), m.group("val").strip().strip("'\"")) for m in _DICT_PAIR.finditer(message)
    ]
    if not pairs:
        return None
    return fields_from_mapping(pairs)


def parse_json_object(message: str) -> Message | None:
    """Fields of a JSON object line, nested objects flattened (``{"train": {"loss": 1}}``
    -> ``train/loss`` -> ``loss``).  None if the text is not a JSON object."""
    try:
        obj = load_json(message)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    return fields_from_mapping(_flat_items(obj))
