"""Replay a schedule: epochs, seeding, ranks, grad-accum and step numbers, for any strategy.

A strategy (:mod:`dflash_diag.schedule.base`) says which micro-batches an epoch has and in
what order.  This module maps that order onto optimizer steps, the same way for every
strategy:

- one optimizer step = ``world_size x grad_accum`` micro-batches;
- ``--shard strided``: step ``k`` of an epoch covers the epoch's micro-batches
  ``[k*W*G, (k+1)*W*G)`` and rank ``r`` takes those at ``r, r+W, r+2W, ...`` of that
  group, its ``m``-th being ``order[k*W*G + m*W + r]`` (accelerate's ``BatchSamplerShard``,
  fairseq's ``batches[r::W]`` then ``update_freq`` grouping);
- ``--shard contiguous``: rank ``r`` takes the ``r``-th block of ``M // W`` micro-batches
  (``M`` in the epoch) and its step ``k``, micro ``m`` is ``order[r*(M//W) + k*G + m]``;
- what does not fill a last step is dropped, every epoch (counted in ``Replay.dropped``);
- steps are numbered from ``first_step`` and keep counting across epochs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..records import Manifest, Replay, ScheduleParams
from .base import Batches, EpochPlan, Strategy, gather_segments, get_strategy
from .rng import EpochShufflers

if TYPE_CHECKING:
    import numpy as np

Progress = Callable[[int, int], None]


def sample_keys(n: int) -> np.ndarray:
    """A pseudo-random uint64 key per dataset index (splitmix64 of ``i + 1``): a batch's
    composition key is the wrapping sum of its samples' keys, the same in any order, and
    two different sets collide with probability about 2**-64."""
    import numpy as np

    with np.errstate(over="ignore"):
        z = (np.arange(1, n + 1, dtype=np.uint64)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def as_lengths(source: Manifest | np.ndarray | Sequence[int], what: str = "lengths") -> np.ndarray:
    """int64 lengths of a Manifest or array, checked: whole numbers, none negative."""
    import numpy as np

    if isinstance(source, Manifest):
        return np.asarray(source.lengths, dtype=np.int64)
    arr = np.asarray(source)
    if arr.ndim != 1:
        raise InputError(what, f"lengths must be one-dimensional, got shape {arr.shape}", "")
    if arr.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(arr) | (arr != np.round(arr)))
        if bad.size:
            rows = ", ".join(str(i) for i in bad[:5].tolist())
            raise InputError(what, f"lengths that are not whole numbers at rows {rows}", "")
    elif arr.dtype.kind not in "iub":
        raise InputError(what, f"lengths must be numbers, got dtype {arr.dtype}", "")
    out = arr.astype(np.int64)
    neg = np.flatnonzero(out < 0)
    if neg.size:
        rows = ", ".join(str(i) for i in neg[:5].tolist())
        raise InputError(what, f"negative lengths at rows {rows}", "")
    return out


def _categories(
    source: Manifest | np.ndarray | Sequence[int], categories: Any, n: int
) -> tuple[np.ndarray | None, tuple[str, ...]]:
    import numpy as np

    if categories is None:
        if isinstance(source, Manifest) and source.categories is not None:
            return np.asarray(source.categories, dtype=np.int64), tuple(source.category_names)
        return None, ()
    labels = np.asarray(categories)
    if labels.shape != (n,):
        raise InputError(
            "categories", f"need one category per sample ({n}), got shape {labels.shape}", ""
        )
    names, codes = np.unique(labels.astype(str), return_inverse=True)
    return codes.astype(np.int64), tuple(str(x) for x in names)


def _positions(m: int, params: ScheduleParams) -> tuple[np.ndarray, int]:
    """Positions in the epoch's order of the micro-batches used, in row order (step,
    rank, micro), and the number of steps."""
    import numpy as np

    w, g = params.world_size, params.grad_accum
    if params.shard == "strided":
        n_steps = m // (w * g)
        k, r, j = np.meshgrid(
            np.arange(n_steps), np.arange(w), np.arange(g), indexing="ij", sparse=True
        )
        pos = k * (w * g) + j * w + r
    else:
        block = m // w
        n_steps = block // g
        k, r, j = np.meshgrid(
            np.arange(n_steps), np.arange(w), np.arange(g), indexing="ij", sparse=True
        )
        pos = r * block + k * g + j
    return np.broadcast_to(pos, (n_steps, w, g)).reshape(-1).astype(np.int64), n_steps


def _pool_features(
    pool: Batches, lengths: np.ndarray, keys: np.ndarray, codes: np.ndarray | None, n_cat: int
) -> dict[str, np.ndarray]:
    """Per-batch sums of a pool: n, tokens, sum of squares, min, max, key, category counts."""
    import numpy as np

    sizes = pool.sizes()
    if (sizes <= 0).any():
        raise ValueError("a strategy produced an empty batch")
    starts = pool.offsets[:-1]
    ls = lengths[pool.ids]
    feats = {
        "n": sizes,
        "tokens": np.add.reduceat(ls, starts) if len(sizes) else sizes.copy(),
        "sumsq": (
            np.add.reduceat(ls.astype(np.float64) ** 2, starts) if len(sizes) else np.zeros(0)
        ),
        "min": np.minimum.reduceat(ls, starts) if len(sizes) else sizes.copy(),
        "max": np.maximum.reduceat(ls, starts) if len(sizes) else sizes.copy(),
        "key": (
            np.add.reduceat(keys[pool.ids], starts) if len(sizes) else np.zeros(0, dtype=np.uint64)
        ),
    }
    if codes is not None:
        c = codes[pool.ids]
        for k in range(n_cat):
            hit = (c == k).astype(np.int64)
            feats[f"cat{k}"] = np.add.reduceat(hit, starts) if len(sizes) else sizes.copy()
    return feats


def _frame(cols: dict[str, np.ndarray], cat_names: tuple[str, ...], n_col: np.ndarray) -> Any:
    import numpy as np
    import pandas as pd

    tokens = cols["tokens"]
    n = n_col.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = tokens / n
        var = np.maximum(cols["sumsq"] / n - mean**2, 0.0)
        eff = tokens / cols["padded_tokens"]
    out = {k: v for k, v in cols.items() if k not in ("sumsq",) and not k.startswith("cat")}
    out["mean_len"] = mean
    out["len_std"] = np.sqrt(var)
    out["padding_eff"] = eff
    for k, name in enumerate(cat_names):
        out[f"cat_{name}"] = cols[f"cat{k}"] / n
    return pd.DataFrame(out)


def replay(
    source: Manifest | np.ndarray | Sequence[int],
    params: ScheduleParams,
    epochs: int | None = None,
    categories: Sequence[Any] | np.ndarray | None = None,
    progress: Progress | None = None,
) -> Replay:
    """Replay a batch schedule: which samples every micro-batch and optimizer step held.

    Lengths are capped at ``params.max_seq_len`` first; the strategy sees capped lengths
    and every token count in the result is of capped lengths.  See the module docstring
    for ranks, grad-accum, dropped steps and step numbers, and :class:`Replay` for the
    tables' columns.

    :param source: a :class:`Manifest` or per-sample lengths (tokens) by dataset index.
    :param params: the schedule; ``params.epochs`` unless ``epochs`` is given.
    :param epochs: epochs to replay (None: ``params.epochs``).
    :param categories: a label per sample (strings or codes) for the ``cat_<name>``
        columns; None uses the manifest's categories, if any.
    :param progress: called as ``progress(done, total)`` with epochs done.

    >>> import numpy as np
    >>> r = replay(np.array([3, 1, 2, 2]), ScheduleParams(token_budget=4), epochs=2)
    >>> r.micro[["epoch", "step", "tokens", "padded_tokens"]].values.tolist()
    [[0, 0, 3, 4], [0, 1, 3, 3], [0, 2, 2, 2], [1, 3, 3, 3], [1, 4, 2, 2], [1, 5, 3, 4]]
    >>> r.batch(0).tolist(), r.micro.batch_id.tolist()
    ([1, 2], [0, 1, 2, 1, 2, 0])
    """
    import numpy as np

    n_epochs = params.epochs if epochs is None else int(epochs)
    if n_epochs < 1:
        raise InputError("--epochs", f"must be a positive whole number, got {n_epochs}", "")
    raw = as_lengths(source)
    lengths = raw if params.max_seq_len is None else np.minimum(raw, params.max_seq_len)
    n = len(lengths)
    codes, cat_names = _categories(source, categories, n)
    strategy = get_strategy(params.strategy)
    prepared = strategy.prepare(lengths, params)
    shufflers = EpochShufflers(params.rng, params.seed, params.seeding)
    keys = sample_keys(n)

    # Sample ids go straight into one buffer: built-in strategies use each sample at
    # most once per epoch, so n * epochs bounds it and untouched pages cost nothing.
    capacity = max(n * n_epochs, 1)
    flat = np.empty(capacity, dtype=np.int64)
    used = 0
    parts: list[dict[str, np.ndarray]] = []
    dropped: dict[str, int] = {
        "incomplete_last_step_micro_batches": 0,
        "incomplete_last_step_samples": 0,
    }
    cache: tuple[Batches | None, dict[str, np.ndarray]] = (None, {})
    step0 = params.first_step
    per_step = params.world_size * params.grad_accum
    if progress is not None:
        progress(0, n_epochs)
    for e in range(n_epochs):
        plan: EpochPlan = strategy.epoch(prepared, e, shufflers.for_epoch(e))
        for key, value in plan.dropped.items():
            dropped[key] = dropped.get(key, 0) + int(value)
        if cache[0] is not plan.pool:
            cache = (plan.pool, _pool_features(plan.pool, lengths, keys, codes, len(cat_names)))
        feats = cache[1]
        pos, n_steps = _positions(len(plan.order), params)
        chosen = plan.order[pos]
        unused = np.setdiff1d(np.arange(len(plan.order)), pos, assume_unique=True)
        dropped["incomplete_last_step_micro_batches"] += len(unused)
        dropped["incomplete_last_step_samples"] += int(feats["n"][plan.order[unused]].sum())

        ids = gather_segments(plan.pool.ids, plan.pool.offsets, chosen)
        if used + len(ids) > len(flat):
            flat = np.concatenate([flat[:used], np.empty(max(len(flat), len(ids)), np.int64)])
        flat[used : used + len(ids)] = ids
        used += len(ids)

        rows = len(chosen)
        part = {k: v[chosen] for k, v in feats.items()}
        part["epoch"] = np.full(rows, e, dtype=np.int64)
        part["step"] = step0 + np.repeat(np.arange(n_steps, dtype=np.int64), per_step)
        part["rank"] = np.tile(np.repeat(np.arange(params.world_size), params.grad_accum), n_steps)
        part["micro"] = np.tile(np.arange(params.grad_accum), n_steps * params.world_size)
        parts.append(part)
        step0 += n_steps
        if progress is not None:
            progress(e + 1, n_epochs)

    cols = {
        k: np.concatenate([p[k] for p in parts]).astype(np.int64, copy=False)
        for k in parts[0]
        if k not in ("key", "sumsq")
    }
    cols["sumsq"] = np.concatenate([p["sumsq"] for p in parts])
    all_keys = np.concatenate([p["key"] for p in parts])
    offsets = np.zeros(len(all_keys) + 1, dtype=np.int64)
    np.cumsum(cols["n"], out=offsets[1:])
    micro = _micro_table(cols, all_keys, cat_names)
    steps = _step_table(cols, micro, per_step, cat_names)
    return Replay(
        params=params,
        lengths=lengths,
        sample_ids=flat[:used],
        offsets=offsets,
        micro=micro,
        steps=steps,
        category_names=cat_names,
        dropped=dropped,
    )


def batch_ids(keys: np.ndarray) -> np.ndarray:
    """Dense ids of composition keys, numbered in order of first appearance."""
    import numpy as np

    if not len(keys):
        return np.zeros(0, dtype=np.int64)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse.reshape(-1)]


def _micro_table(cols: dict[str, np.ndarray], keys: np.ndarray, cat_names: tuple[str, ...]) -> Any:

    padded = cols["n"] * cols["max"]
    base = {
        "epoch": cols["epoch"],
        "step": cols["step"],
        "rank": cols["rank"],
        "micro": cols["micro"],
        "batch_id": batch_ids(keys),
        "n_samples": cols["n"],
        "tokens": cols["tokens"],
        "padded_tokens": padded,
        "min_len": cols["min"],
        "max_len": cols["max"],
        "sumsq": cols["sumsq"],
    }
    for k in range(len(cat_names)):
        base[f"cat{k}"] = cols[f"cat{k}"]
    return _frame(base, cat_names, cols["n"])[_MICRO_ORDER + [f"cat_{c}" for c in cat_names]]


_MICRO_ORDER = [
    "epoch",
    "step",
    "rank",
    "micro",
    "batch_id",
    "n_samples",
    "tokens",
    "padded_tokens",
    "min_len",
    "mean_len",
    "max_len",
    "len_std",
    "padding_eff",
]
_STEP_ORDER = [
    "step",
    "epoch",
    "n_micro",
    "n_samples",
    "tokens",
    "padded_tokens",
    "min_len",
    "mean_len",
    "max_len",
    "len_std",
    "padding_eff",
]


def _step_table(
    cols: dict[str, np.ndarray], micro: Any, per_step: int, cat_names: tuple[str, ...]
) -> Any:
    # Rows are in (step, rank, micro) order and every step has exactly per_step rows,
    # so a step's aggregates are reductions over rows of a (n_steps, per_step) reshape.
    import numpy as np

    def grid(a: np.ndarray) -> np.ndarray:
        return a.reshape(-1, per_step)

    n_col = grid(cols["n"]).sum(axis=1)
    base = {
        "step": grid(cols["step"])[:, 0],
        "epoch": grid(cols["epoch"])[:, 0],
        "n_micro": np.full(len(n_col), per_step, dtype=np.int64),
        "n_samples": n_col,
        "tokens": grid(cols["tokens"]).sum(axis=1),
        "padded_tokens": grid(micro["padded_tokens"].to_numpy()).sum(axis=1),
        "min_len": grid(cols["min"]).min(axis=1) if len(n_col) else n_col.copy(),
        "max_len": grid(cols["max"]).max(axis=1) if len(n_col) else n_col.copy(),
        "sumsq": grid(cols["sumsq"]).sum(axis=1),
    }
    for k in range(len(cat_names)):
        base[f"cat{k}"] = grid(cols[f"cat{k}"]).sum(axis=1)
    return _frame(base, cat_names, n_col)[_STEP_ORDER + [f"cat_{c}" for c in cat_names]]


def epoch_batches(
    source: Manifest | np.ndarray | Sequence[int], params: ScheduleParams, epoch: int = 0
) -> Batches:
    """All micro-batches of one epoch in the epoch's order (before ranks and steps).

    Under ``--seeding once`` the shuffles of epochs ``0..epoch-1`` are drawn first, so
    the result is what the run saw in that epoch.

    >>> import numpy as np
    >>> epoch_batches(np.array([3, 1, 2, 2]), ScheduleParams(token_budget=4)).tolist()
    [[1, 2], [0], [3]]
    """
    import numpy as np

    raw = as_lengths(source)
    lengths = raw if params.max_seq_len is None else np.minimum(raw, params.max_seq_len)
    strategy: Strategy = get_strategy(params.strategy)
    prepared = strategy.prepare(lengths, params)
    shufflers = EpochShufflers(params.rng, params.seed, params.seeding)
    first = 0 if params.seeding == "once" else epoch
    plan = None
    for e in range(first, epoch + 1):
        plan = strategy.epoch(prepared, e, shufflers.for_epoch(e))
    if plan is None:
        raise InputError("--epochs", f"epoch must be 0 or more, got {epoch}", "")
    return plan.pool.take(plan.order)
