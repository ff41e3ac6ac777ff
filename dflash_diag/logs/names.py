"""Column names and units: what a log calls a metric, and what its value is in.

:func:`canonical_name` maps a key as trainers print it (``train/loss``, ``lm loss``,
``learning_rate``, ``gnorm``, ``tok/s``, ``eval_loss``...) to the column every reader
uses, through :func:`snake` and :data:`ALIASES`; keys not listed keep their snake_case
name, and evaluation metrics get an ``eval_`` name of their own.  :func:`unit_factor`
brings a value with a unit or magnitude suffix (``87%``, ``25.1K``, ``14.2min``,
``8.1 Ktok/s``) to canonical units.

Only the standard library is imported at module level.
"""

from __future__ import annotations

import functools
import re
import struct
from typing import Any

#: snake_case key -> canonical column.  Keys not listed keep their snake_case name.
ALIASES: dict[str, str] = {
    # step: an explicit optimizer-step counter
    "step": "step",
    "global_step": "step",
    "globalstep": "step",
    "iter": "step",
    "iteration": "step",
    "_step": "step",
    "s": "step",  # llm.c main.log: `s:<step> trl:...`
    "num_updates": "step",  # fairseq
    "trainer_global_step": "step",
    "train_global_step": "step",
    "train_step": "step",
    "current_steps": "step",  # LLaMA-Factory trainer_log.jsonl (beside `total_steps`)
    # loss
    "loss": "loss",
    "train_loss": "loss",
    "training_loss": "loss",
    "trl": "loss",  # llm.c
    "lm_loss": "loss",  # Megatron
    "loss_step": "loss",  # Lightning `on_step=True`
    "train_loss_step": "loss",
    "train_acc_step": "acc",
    "acc_step": "acc",
    # accuracy
    "acc": "acc",
    "accuracy": "acc",
    "train_acc": "acc",
    "train_accuracy": "acc",
    "mean_token_accuracy": "acc",  # TRL SFTTrainer (a fraction)
    # learning rate
    "lr": "lr",
    "learning_rate": "lr",
    "train_lr": "lr",
    "train_learning_rate": "lr",
    "lr_0": "lr",  # Lightning LearningRateMonitor (`lr-AdamW` is kept as is)
    # gradient norm
    "grad_norm": "grad_norm",
    "gradnorm": "grad_norm",
    "gnorm": "grad_norm",
    "norm": "grad_norm",  # llm.c
    "train_grad_norm": "grad_norm",
    "grad_norm_total": "grad_norm",
    # tokens in the step's batch
    "tokens": "tokens",
    "ntok": "tokens",
    "ntokens": "tokens",
    "n_tokens": "tokens",
    # running totals of tokens seen since the start (HF `include_num_input_tokens_seen`,
    # TRL): never the per-step `tokens`
    "num_tokens": "tokens_seen",
    "num_input_tokens_seen": "tokens_seen",
    "total_tokens_seen": "tokens_seen",
    "wpb": "tokens",  # fairseq words (tokens) per batch
    "tokens_in_batch": "tokens",
    "train_tokens": "tokens",
    "train_ntok": "tokens",
    # throughput
    "tok_per_s": "tok_per_s",
    "tok_s": "tok_per_s",
    "toks_s": "tok_per_s",
    "tokens_s": "tok_per_s",
    "tokens_per_s": "tok_per_s",
    "tokens_per_sec": "tok_per_s",
    "tokens_per_second": "tok_per_s",
    "tok_sec": "tok_per_s",
    "tps": "tok_per_s",
    "wps": "tok_per_s",  # fairseq words (tokens) per second
    "throughput_tokens_per_s": "tok_per_s",
    # epoch
    "epoch": "epoch",
    "ep": "epoch",
    "train_epoch": "epoch",
    # evaluation metrics with a name of their own
    "tel": "val_loss",  # llm.c
    "eval": "eval_acc",  # llm.c: HellaSwag accuracy
}

# Keys that are never given an ``eval_`` prefix on an evaluation line.
NEUTRAL = frozenset({"step", "epoch", "lr", "rank", "position", "tokens_seen"})
EVAL_PREFIXES = ("eval_", "val_", "valid_", "validation_", "test_")

_PER_POSITION = re.compile(r"^(?:train_)?acc(?:uracy)?_?(\d+)$")
#: a per-position metric under ``train/``: ``train_loss_0`` -> ``loss_0``
_TRAIN_PER_POSITION = re.compile(r"^train_([a-z][a-z_]*?)(_\d+)$")
_AT_STEP = re.compile(r"(?:^|_)at_(?:step|iteration|iter)$")
_LR_GROUP = re.compile(r"^lr_(?:adam|adamw|adam_w|sgd|adafactor|lion|muon|rmsprop)$")
_NON_WORD = re.compile(r"[^0-9a-zA-Z]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


@functools.lru_cache(maxsize=4096)
def snake(key: str) -> str:
    """``"train/Loss (ms)"`` -> ``"train_loss_ms"``; ``"accuracy@0"`` -> ``"accuracy_0"``.

    >>> snake("Train/gradNorm")
    'train_grad_norm'
    """
    key = _CAMEL.sub("_", key.strip())
    out = _NON_WORD.sub("_", key).strip("_").lower()
    if key.startswith("_") and not out.startswith("_"):
        out = "_" + out  # W&B's `_step` keeps its underscore
    return out or "value"


@functools.lru_cache(maxsize=4096)
def canonical_name(key: str, is_eval: bool = False) -> str:
    """The column a log key goes to.

    Aliases map to the canonical columns (``learning_rate`` -> ``lr``, ``lm loss`` ->
    ``loss``, ``ntok`` -> ``tokens``); per-position accuracies become ``acc_<i>``;
    everything else is kept in snake_case.  On an evaluation line (``is_eval``) every
    metric that does not already say so gets an ``eval_`` prefix, so evaluation never
    overwrites the training columns (``loss`` -> ``eval_loss``, nanoGPT's ``train loss``
    on its evaluation line -> ``eval_train_loss``).

    >>> canonical_name("Learning Rate"), canonical_name("loss", is_eval=True)
    ('lr', 'eval_loss')
    """
    s = snake(key)
    name = ALIASES.get(s)
    if name is None:
        # `eval step=10`, `val epoch 2`: a mode word before a neutral key is still that key
        for prefix in EVAL_PREFIXES:
            if s.startswith(prefix) and ALIASES.get(s[len(prefix) :]) in NEUTRAL:
                name = ALIASES[s[len(prefix) :]]
                break
    if name is None and _AT_STEP.search(s):
        name = "step"  # Megatron `validation loss at iteration 50`
    if name is None and _LR_GROUP.match(s):
        name = "lr"  # Lightning LearningRateMonitor `lr-AdamW`
    if name is None and (m := _TRAIN_PER_POSITION.match(s)):
        s = m.group(1) + m.group(2)  # vLLM speculators' `train/loss_0`, `train/full_acc_2`
    if name is None:
        m = _PER_POSITION.match(s)
        name = f"acc_{m.group(1)}" if m else s
    if is_eval and name not in NEUTRAL and not name.startswith(EVAL_PREFIXES):
        # keep the raw key (train_loss -> eval_train_loss) unless it is a plain alias
        base = s if s.startswith("train_") else name
        name = "eval_" + base
    return name


#: Magnitude suffixes (``25.1K``): factor.
MAGNITUDE = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "B": 1e9, "T": 1e12}
#: Duration units: factor to seconds.
DURATION = {
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "min": 60.0,
    "mins": 60.0,
    "m": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hrs": 3600.0,
    "us": 1e-6,
}
_RATE = re.compile(r"^([kKMGTB]?)(tok|toks|tokens|samples?|seqs?|sequences|it|img|imgs)/s$")


@functools.lru_cache(maxsize=256)
def unit_factor(unit: str | None) -> float:
    """The factor that brings a value with ``unit`` to canonical units.

    Percent -> fraction (``87%`` -> 0.87), magnitude suffixes (``K`` 1e3, ``M`` 1e6,
    ``G``/``B`` 1e9, ``T`` 1e12), durations -> seconds (``ms`` 1e-3, ``min`` 60, ``h``
    3600), rates with a magnitude (``Ktok/s`` 1e3).  Unknown units (``BPC``, ``ppl``) 1.

    >>> unit_factor("%"), unit_factor("Ktok/s"), unit_factor("ms")
    (0.01, 1000.0, 0.001)
    """
    if not unit:
        return 1.0
    if unit == "%":
        return 0.01
    if unit in MAGNITUDE:
        return MAGNITUDE[unit]
    if unit in DURATION:
        return DURATION[unit]
    m = _RATE.match(unit)
    if m:
        return MAGNITUDE.get(m.group(1), 1.0)
    return 1.0


def rate_key(unit: str) -> str | None:
    """Column for a bare ``8.1 Ktok/s`` field: ``tok_per_s`` (``samples/s`` -> samples_per_s)."""
    m = _RATE.match(unit)
    if not m:
        return None
    what = m.group(2)
    if what.startswith("tok"):
        return "tok_per_s"
    return snake(what) + "_per_s"


#: Bits of :data:`LOGGED_NAN`: a quiet NaN with a payload no arithmetic produces.
LOGGED_NAN_BITS = 0x7FF8_0000_00D1_AF1A
#: The NaN a reader stores where the log PRINTED a value as nan (a numerical failure).
#: Every other NaN in a reader's records is pandas' "no such value in this record", so
#: :func:`~dflash_diag.logs.normalise.build_table` can tell "logged as NaN" from "not
#: logged at this step" by the bits (:func:`is_logged_nan`), before records are merged.
LOGGED_NAN: float = struct.unpack("<d", struct.pack("<Q", LOGGED_NAN_BITS))[0]


def logged(value: float) -> float:
    """``value``, with a NaN replaced by :data:`LOGGED_NAN`: call it on every number a
    reader took from the log's own text, so a printed ``nan`` stays known as printed.

    >>> import math
    >>> logged(2.5), math.isnan(logged(float("nan"))), bool(is_logged_nan(logged(float("nan"))))
    (2.5, True, True)
    """
    return LOGGED_NAN if value != value else value


def is_logged_nan(values: Any) -> Any:
    """Whether each value is :data:`LOGGED_NAN` (a float, or a float64 numpy array ->
    a bool array).  A plain NaN is not."""
    import numpy as np

    a = np.asarray(values, dtype=np.float64)
    return a.view(np.uint64) == np.uint64(LOGGED_NAN_BITS)


def to_float(text: Any) -> float | None:
    """A number from a log value, or None: ``"nan"`` -> nan (:data:`LOGGED_NAN`),
    ``"1e-3"``, ``"0.5"`` (quoted)."""
    if isinstance(text, bool) or text is None:
        return None
    if isinstance(text, (int, float)):
        return logged(float(text))
    if isinstance(text, str):
        try:
            return logged(float(text.strip()))
        except ValueError:
            return None
    return None
