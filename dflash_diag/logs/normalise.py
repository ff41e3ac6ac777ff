"""Names, units and the per-step table every reader ends with.

Readers produce *raw records*: one dict per log record with the keys ``line`` (1-based
line or record number), ``rank`` (int), ``step`` (float or NaN), ``step_source``
(``field`` / ``progress`` / ``none``), ``is_eval`` (bool) and any number of metric
columns, already under their canonical names (:func:`canonical_name`) and in canonical
units (:func:`unit_factor`).  :func:`build_table` turns those into the tidy table of a
:class:`~dflash_diag.records.RunLog`: steps filled in, restarts resolved, one rank
chosen, one row per step.

Only the standard library is imported at module level; pandas is imported inside
:func:`build_table`.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import InputError
from ..records import CANONICAL_COLUMNS, RunLog

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
    "num_tokens": "tokens",
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
NEUTRAL = frozenset({"step", "epoch", "lr", "rank", "position"})
EVAL_PREFIXES = ("eval_", "val_", "valid_", "validation_", "test_")

_PER_POSITION = re.compile(r"^(?:train_)?acc(?:uracy)?_?(\d+)$")
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


def to_float(text: Any) -> float | None:
    """A number from a log value, or None: ``"nan"`` -> nan, ``"1e-3"``, ``"0.5"`` (quoted)."""
    if isinstance(text, bool) or text is None:
        return None
    if isinstance(text, (int, float)):
        return float(text)
    if isinstance(text, str):
        try:
            return float(text.strip())
        except ValueError:
            return None
    return None


# ----------------------------------------------------------------------------- table


def _records_frame(records: Iterable[Mapping[str, Any]], extra: Sequence[Any]) -> Any:
    import pandas as pd

    frames = []
    recs = list(records)
    if recs:
        frames.append(pd.DataFrame.from_records(recs))
    frames += [f for f in extra if len(f)]
    if not frames:
        return pd.DataFrame(columns=["line", "rank", "step", "step_source", "is_eval"])
    df = pd.concat(frames, ignore_index=True, sort=False) if len(frames) > 1 else frames[0]
    if df["line"].is_monotonic_increasing:
        return df.reset_index(drop=True)
    return df.sort_values("line", kind="stable", ignore_index=True)


def build_table(
    records: Iterable[Mapping[str, Any]],
    *,
    path: str,
    fmt: str,
    rank: int | str = 0,
    skipped: dict[str, int] | None = None,
    n_lines: int = 0,
    extra: Sequence[Any] = (),
) -> RunLog:
    """Turn raw records into a :class:`RunLog`.

    Rules, in order:

    1. The step source is the best one any record has: an explicit field, else a
       progress-bar counter, else line order (train records numbered 1, 2, ...).
       Records without that kind of step are skipped (reason ``no_step``), except
       structured evaluation records (HF ``{'eval_loss': ...}`` lines, which carry no
       step; ``attach`` true), which belong to the last step logged before them.
    2. Ranks: ``rank=0`` keeps rank 0 (or the lowest rank when there is no rank 0),
       ``rank=N`` keeps rank N, ``"all"`` keeps every rank and adds a ``rank`` column.
    3. Restarts: per rank, a training record whose step is below the highest step seen
       so far starts a restart; its step is reported and, for every step logged more than
       once, the later value of each column wins (``groupby(...).last()``, which also
       merges a step's train and eval records).

    :param extra: DataFrames of records already in columnar form (the fast path of the
        text reader), concatenated with ``records``.
    """
    import numpy as np
    import pandas as pd

    skipped = dict(skipped or {})
    df = _records_frame(records, extra)
    if df.empty:
        raise InputError(path, "no step-like data found", _hint_for(fmt, skipped))
    if "step_source" not in df:
        df["step_source"] = "field"
    df["step_source"] = df["step_source"].fillna("none")
    for col, default in (("is_eval", False), ("rank", 0), ("step", np.nan)):
        if col not in df:
            df[col] = default
    df["is_eval"] = df["is_eval"].fillna(False).astype(bool)
    if df["rank"].dtype != np.int64:  # (the fast path's records are already typed)
        df["rank"] = pd.to_numeric(df["rank"], errors="coerce").fillna(0).astype("int64")
    if df["step"].dtype != np.float64:
        df["step"] = pd.to_numeric(df["step"], errors="coerce").astype("float64")

    sources = _values_of(df["step_source"])
    best = "field" if "field" in sources else "progress" if "progress" in sources else "none"
    df = _assign_steps(df, best, skipped)
    if df.empty:
        raise InputError(path, "no step-like data found", _hint_for(fmt, skipped))

    rank_col = df["rank"].to_numpy()
    if _one_value(rank_col):
        ranks: tuple[int, ...] = (int(rank_col[0]),)  # one rank: no need to hash them all
    else:
        ranks = tuple(int(r) for r in sorted(df["rank"].unique()))
    df = _select_rank(df, rank, ranks, path, skipped)
    restarts = _restarts(df)

    keys = ["rank", "step"] if rank == "all" else ["step"]
    bookkeeping = ("line", "rank", "step", "step_source", "is_eval", "attach")
    metrics = [c for c in df.columns if c not in bookkeeping]
    for c in metrics:
        if df[c].dtype != np.float64:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    df["step"] = df["step"].astype("int64")
    steps = df["step"].to_numpy()
    if rank != "all" and (len(steps) < 2 or bool((steps[1:] > steps[:-1]).all())):
        # Already one row per step, in order (the common case): no grouping needed.
        table = df[["step", *metrics]].reset_index(drop=True)
    elif rank == "all" and (order := _one_row_per_key(df["rank"].to_numpy(), steps)) is not None:
        table = df[[*keys, *metrics]].take(order).reset_index(drop=True)
    else:
        table = df.groupby(keys, sort=True)[metrics].last().reset_index()
    # Fields only dropped records had (a banner's `model params 264320`) leave no column.
    table = table.drop(
        columns=[c for c in metrics if c not in CANONICAL_COLUMNS and table[c].isna().all()]
    )
    for c in CANONICAL_COLUMNS:
        if c not in table:
            table[c] = np.nan
    ordered = list(CANONICAL_COLUMNS)
    if rank == "all":
        ordered.insert(0, "rank")
    others = sorted(c for c in table.columns if c not in ordered)
    table = table[ordered + others]
    want = {c: np.dtype("int64" if c in ("step", "rank") else "float64") for c in table}
    table = table.astype({c: t for c, t in want.items() if table[c].dtype != t})
    table = table.reset_index(drop=True)
    return RunLog(
        table=table,
        path=path,
        format=fmt,
        restarts=tuple(restarts),
        ranks=ranks,
        skipped={k: v for k, v in sorted(skipped.items()) if v},
        n_lines=int(n_lines),
        step_source="line order" if best == "none" else best,
    )


def _one_row_per_key(ranks: Any, steps: Any) -> Any | None:
    """The row order by (rank, step) when every (rank, step) has one row (then grouping
    would only sort), else None."""
    import numpy as np

    order = np.lexsort((steps, ranks))
    r, s = ranks[order], steps[order]
    if len(order) > 1 and not ((r[1:] != r[:-1]) | (s[1:] != s[:-1])).all():
        return None
    return order


def _values_of(col: Any) -> set[Any]:
    """The distinct values of a column (of a categorical of one value, from its codes)."""
    import pandas as pd

    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy()
        if _one_value(codes) and codes[0] >= 0:  # (the fast path's records)
            return {col.cat.categories[codes[0]]}
    return set(col.unique())


def _one_value(a: Any) -> bool:
    """Whether a numpy array holds a single distinct value (and is not empty)."""
    return bool(len(a)) and a.min() == a.max()


def _hint_for(fmt: str, skipped: Mapping[str, int]) -> str:
    seen = ", ".join(f"{k} {v}" for k, v in sorted(skipped.items()) if v)
    base = (
        "expected lines with a step and metrics such as 'step=10 loss=2.3'"
        if fmt in ("text", "hf-dict")
        else f"expected a {fmt} log with a step and numeric metrics"
    )
    return f"{base} (lines skipped: {seen})" if seen else base


def _assign_steps(df: Any, best: str, skipped: dict[str, int]) -> Any:
    """Give every kept record an integer step (rule 1 of :func:`build_table`)."""
    import numpy as np

    if best == "none":
        # Steps by line order: train records are logging events 1, 2, ...  When some
        # records are structured (HF dict / JSON lines), free-text numbers beside them
        # (`Num examples = 1,000`) are not steps.
        if "attach" in df and df["attach"].fillna(False).astype(bool).any():
            structured = df["attach"].fillna(False).astype(bool).to_numpy()
            if (~structured).any():
                skipped["no_step"] = skipped.get("no_step", 0) + int((~structured).sum())
            df = df[structured].copy()
        train = ~df["is_eval"].to_numpy()
        df["step"] = np.cumsum(train).astype("float64")
        drop = df["step"].to_numpy() == 0  # evaluation before any train record
        df.loc[drop, "step"] = 0.0
        return df
    own = (df["step_source"] == best).to_numpy() & df["step"].notna().to_numpy()
    if own.all():  # every record has its own step (the common case): nothing to attach
        return _finite_steps(df, skipped)
    if best == "field":
        progress = (df["step_source"] == "progress").to_numpy()
        skipped["progress_bar"] = skipped.get("progress_bar", 0) + int(progress.sum())
    else:
        progress = np.zeros(len(df), dtype=bool)
    # Evaluation records without a step: the last step logged before them, per rank.
    if _one_value(df["rank"].to_numpy()):  # one rank (the common case): no grouping
        carried = df["step"].where(own).ffill()
    else:
        carried = df["step"].where(own).groupby(df["rank"]).ffill()
    attach = df["attach"].fillna(False).to_numpy(dtype=bool) if "attach" in df else True
    evals = (~own) & df["is_eval"].to_numpy() & attach & (~progress) & carried.notna().to_numpy()
    df.loc[evals, "step"] = carried[evals]
    keep = own | evals
    lost = int((~keep & ~progress).sum())
    if lost:
        skipped["no_step"] = skipped.get("no_step", 0) + lost
    if not keep.all():
        df = df[keep].copy()
    return _finite_steps(df, skipped)


def _finite_steps(df: Any, skipped: dict[str, int]) -> Any:
    """Drop records whose step is NaN or infinite (reason ``bad_step``)."""
    import numpy as np

    finite = np.isfinite(df["step"].to_numpy())
    if not finite.all():
        skipped["bad_step"] = skipped.get("bad_step", 0) + int((~finite).sum())
        df = df[finite]
    return df


def _select_rank(
    df: Any, rank: int | str, ranks: tuple[int, ...], path: str, skipped: dict[str, int]
) -> Any:
    if rank == "all":
        return df
    want = int(rank)
    if want == 0 and 0 not in ranks:
        want = ranks[0]  # the only (or lowest) rank when nothing is labelled rank 0
    if want not in ranks:
        raise InputError(
            path,
            f"no lines for rank {rank}",
            f"ranks with data: {', '.join(str(r) for r in ranks)}; use --rank with one of "
            "those, or --rank all",
        )
    other = df["rank"].to_numpy() != want
    if other.any():
        skipped["other_rank"] = skipped.get("other_rank", 0) + int(other.sum())
    return df[~other] if other.any() else df


def _restarts(df: Any) -> list[int]:
    """Steps at which a rank's training step counter went back (rule 3)."""
    import numpy as np

    out: set[int] = set()
    train = ~df["is_eval"].to_numpy(dtype=bool)
    all_steps, ranks = df["step"].to_numpy(), df["rank"].to_numpy()
    if not train.all():
        all_steps, ranks = all_steps[train], ranks[train]
    if len(all_steps) < 2 or (all_steps[1:] > all_steps[:-1]).all():
        return []  # steps only ever go up: no restart
    one = len(ranks) == 0 or _one_value(ranks)
    for r in ranks[:1] if one else np.unique(ranks):
        steps = all_steps if one else all_steps[ranks == r]
        if len(steps) < 2:
            continue
        prev_max = np.maximum.accumulate(steps)[:-1]
        back = steps[1:] < prev_max
        out.update(int(s) for s in steps[1:][back & ~_continues(steps[1:], back)])
    return sorted(out)


def _continues(steps: Any, back: Any) -> Any:
    """True where a backwards step only continues a restart already counted.

    After a resume at step 251 the next steps 252, 253 ... are still below the old
    maximum; only the first record of each backwards run is a restart point.
    """
    import numpy as np

    cont = np.zeros(len(steps), dtype=bool)
    cont[1:] = back[:-1] & back[1:] & (steps[1:] > steps[:-1])
    return cont


def finite_or_nan(x: float | None) -> float:
    """``None`` -> NaN, numbers unchanged."""
    return math.nan if x is None else float(x)


ProgressFn = Callable[[int, int], None]
