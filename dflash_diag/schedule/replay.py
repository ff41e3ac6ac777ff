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
- ``--shard accelerate``: strided, over the epoch as accelerate's ``BatchSamplerShard``
  evens it out across processes (:mod:`dflash_diag.schedule.accelerate`), and an epoch's
  last step takes the micro-batches left, fewer than ``grad_accum`` (the HF Trainer);
- otherwise what does not fill a last step is dropped, every epoch (counted in
  ``Replay.dropped``);
- with ``--seeding global`` and ``dropout`` not ``False`` only epoch 0 is replayed
  (``Replay.determined_epochs``: later epochs do not follow from the seed);
- steps are numbered from ``first_step`` and keep counting across epochs.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from ..data import BATCH_FEATURES, Manifest, Progress, Replay, ScheduleParams, value_problem
from ..errors import InputError
from .accelerate import even_batches, step_positions
from .base import Batches, EpochPlan, FixedStrategy, Strategy, gather_segments, get_strategy
from .packing import stable_argsort
from .rng import EpochShufflers

if TYPE_CHECKING:
    import numpy as np


def sample_keys(ids: np.ndarray) -> np.ndarray:
    """A pseudo-random uint64 key per dataset index (splitmix64 of ``i + 1``): a batch's
    composition key is the wrapping sum of its samples' keys, the same in any order, and
    two different sets collide with probability about 2**-64.

    Worked out :data:`KEY_PIECE` values at a time in the answer's own array (each step
    over a piece in cache, not a fresh array of all the values a step).

    >>> import numpy as np
    >>> sample_keys(np.array([0, 1])).tolist()
    [16294208416658607535, 7960286522194355700]
    """
    import numpy as np

    ids = np.asarray(ids)
    out = np.empty(ids.shape, dtype=np.uint64)
    flat, src = out.reshape(-1), ids.reshape(-1)
    shifted = np.empty(min(KEY_PIECE, flat.size), dtype=np.uint64)
    mix = ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB), (31, 0))
    with np.errstate(over="ignore"):
        for lo in range(0, flat.size, KEY_PIECE):
            z = flat[lo : lo + KEY_PIECE]
            t = shifted[: z.size]
            z[:] = src[lo : lo + KEY_PIECE]  # (wraps as astype does: -1 -> 2**64 - 1)
            z += np.uint64(1)
            z *= np.uint64(0x9E3779B97F4A7C15)
            for shift, factor in mix:  # z ^= z >> shift, then z *= factor (not the last)
                np.right_shift(z, np.uint64(shift), out=t)
                z ^= t
                if factor:
                    z *= np.uint64(factor)
    return out


#: :func:`sample_keys` works on this many values at a time.
KEY_PIECE = 1 << 15


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
    out = arr.astype(np.int64, copy=False)
    if out.size and int(out.min()) < 0:  # (one pass; the rows only when some are)
        neg = np.flatnonzero(out < 0)
        rows = ", ".join(str(i) for i in neg[:5].tolist())
        raise InputError(what, f"negative lengths at rows {rows}", "")
    return out


def _categories(
    source: Manifest | np.ndarray | Sequence[int], categories: Any, n: int
) -> tuple[np.ndarray | None, tuple[str, ...]]:
    import numpy as np

    if categories is None:
        if isinstance(source, Manifest) and source.categories is not None:
            # (whole numbers of the manifest's own type: no int64 copy of them)
            codes = np.asarray(source.categories)
            if codes.dtype.kind not in "iu":
                codes = codes.astype(np.int64)
            return codes, tuple(source.category_names)
        return None, ()
    labels = np.asarray(categories)
    if labels.shape != (n,):
        raise InputError(
            "categories", f"need one category per sample ({n}), got shape {labels.shape}", ""
        )
    names, codes = np.unique(labels.astype(str), return_inverse=True)
    return codes.astype(np.int64), tuple(str(x) for x in names)


def micro_positions(m: int, params: ScheduleParams) -> tuple[np.ndarray, ...]:
    """``(pos, step, rank, micro)`` for an epoch of ``m`` micro-batches: the positions
    in the epoch's order of the micro-batches used, in row order (step, rank, micro),
    with each row's step (from 0 in the epoch), rank and micro."""
    import numpy as np

    w, g = params.world_size, params.grad_accum
    if params.shard != "contiguous":
        return step_positions(m, w, g, keep_partial=params.shard == "accelerate")
    block = m // w
    n_steps = block // g
    k, r, j = np.meshgrid(
        np.arange(n_steps), np.arange(w), np.arange(g), indexing="ij", sparse=True
    )
    shape = (n_steps, w, g)
    return tuple(
        np.broadcast_to(a, shape).reshape(-1).astype(np.int64, copy=False)
        for a in (r * block + k * g + j, k, r, j)
    )


#: samples handled at once when gathering or summing over batches: bounds the
#: temporaries (a few arrays of this many int64) whatever the manifest's size, and
#: keeps them in the cache (docs/performance.md)
CHUNK = 1 << 16


#: Samples handled per chunk by the vectorised moments and the export (memory ~ 30
#: bytes x this).
CHUNK_SAMPLES = 1 << 22


def pool_sizes(pool: Batches) -> np.ndarray:
    """The samples of each batch of a pool, checked: none empty."""
    sizes = pool.sizes()
    if (sizes <= 0).any():
        raise ValueError("a strategy produced an empty batch")
    return sizes


def pool_features(
    pool: Batches, lengths: np.ndarray, codes: np.ndarray | None, n_cat: int
) -> dict[str, np.ndarray]:
    """Per-batch sums of a pool: n, tokens, sum of squares, min, max, composition key
    (:func:`sample_keys` summed), category counts.  Computed chunk by chunk."""
    import numpy as np

    from ..arrays import group_chunks

    sizes = pool_sizes(pool)
    names = ["tokens", "sumsq", "min", "max", "key"] + [f"cat{c}" for c in range(n_cat)]
    parts: dict[str, list[np.ndarray]] = {name: [] for name in names}
    # codes outside 0 .. n_cat - 1 count in no category: then a pass a category
    counted = codes is not None and (
        not len(codes) or (0 <= int(codes.min()) and int(codes.max()) < n_cat)
    )
    # (a pool of few of the samples: the codes of all would cost more than they save)
    most = 2 * len(pool.ids) >= len(lengths)
    coded = coded_samples(lengths, codes, n_cat) if counted and codes is not None and most else None
    fields = count_fields(coded, sizes, n_cat) if coded is not None else None
    for a, b in group_chunks(pool.offsets, CHUNK):
        lo, hi = int(pool.offsets[a]), int(pool.offsets[b])
        ids = pool.ids[lo:hi]
        starts = pool.offsets[a:b] - lo
        c: np.ndarray | None
        if coded is not None:  # (one gather a sample, the rest from tables in cache)
            code = coded[0].take(ids).astype(np.intp)
            ls = coded[1].take(code)
            if fields is not None:  # tokens and category counts in one sum
                _add_fields(parts, np.add.reduceat(fields[0].take(code), starts), fields)
                c = None
            else:
                c = coded[2].take(code)
                parts["tokens"].append(np.add.reduceat(ls, starts))
            del code
        else:
            ls = lengths[ids]
            c = codes[ids] if codes is not None else None
            parts["tokens"].append(np.add.reduceat(ls, starts))
        parts["sumsq"].append(np.add.reduceat(np.square(ls, dtype=np.float64), starts))
        parts["min"].append(np.minimum.reduceat(ls, starts))
        parts["max"].append(np.maximum.reduceat(ls, starts))
        parts["key"].append(np.add.reduceat(sample_keys(ids), starts))
        if c is not None:
            counts = category_counts(c, sizes[a:b], n_cat) if counted else None
            for k in range(n_cat):
                parts[f"cat{k}"].append(
                    counts[:, k]
                    if counts is not None
                    else np.add.reduceat((c == k).astype(np.int64), starts)
                )
    feats = {"n": sizes}
    for name, pieces in parts.items():
        dtype = np.uint64 if name == "key" else (np.float64 if name == "sumsq" else np.int64)
        feats[name] = np.concatenate(pieces) if pieces else np.zeros(0, dtype=dtype)
    return feats


def count_fields(
    coded: tuple[np.ndarray, np.ndarray, np.ndarray], sizes: np.ndarray, n_cat: int
) -> tuple[np.ndarray, int, int] | None:
    """``(table, t, s)``: each code's length plus a 1 in its category's field, ``length
    + 2**(t + category x s)`` (int64), so one sum over a batch gives its tokens (the low
    ``t`` bits) and its count of each category (``s`` bits each); ``t`` and ``s`` hold
    the largest batch's tokens and size (``coded``: :func:`coded_samples`).  None when
    the fields need more than 63 bits.

    >>> import numpy as np
    >>> table, t, s = count_fields(coded_samples(np.array([3, 5]), np.array([1, 0]), 2),
    ...                            np.array([2]), 2)
    >>> total = int(table[[7, 10]].sum())
    >>> total & (2**t - 1), total >> t & (2**s - 1), total >> (t + s) & (2**s - 1)
    (8, 1, 1)
    """
    import numpy as np

    top_size = int(sizes.max()) if len(sizes) else 0
    top_length = int(coded[1].max()) if len(coded[1]) else 0
    t, s = (top_size * top_length).bit_length(), top_size.bit_length()
    if t + n_cat * s > 63:
        return None
    table = np.left_shift(1, t + coded[2] * s, dtype=np.int64)
    table += coded[1]
    return table, t, s


def _add_fields(
    parts: dict[str, list[np.ndarray]], total: np.ndarray, fields: tuple[np.ndarray, int, int]
) -> None:
    """Each batch's tokens and category counts (``parts``' ``cat<k>``) from its sum of
    :func:`count_fields`."""
    import numpy as np

    _, t, s = fields
    parts["tokens"].append(np.bitwise_and(total, (1 << t) - 1))
    for k in range(len(parts) - 5):  # (tokens, sumsq, min, max, key, then the categories)
        parts[f"cat{k}"].append(np.right_shift(total, t + k * s) & ((1 << s) - 1))


def coded_samples(
    lengths: np.ndarray, codes: np.ndarray, n_cat: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(code, length, category)``: each sample's ``length x n_cat + category`` (int16
    where it fits, else int32), and each code's length and category (int64), so one
    gather of 2 bytes a sample reads both (not one of 8 and one of 4); None when the
    lengths are not whole numbers below :data:`~dflash_diag.arrays.COUNTED_BELOW` or
    there would be more codes than ``max(samples, 2**20)``.  ``codes`` must be in
    ``0 .. n_cat - 1``.

    >>> import numpy as np
    >>> code, length, cat = coded_samples(np.array([3, 0, 2]), np.array([1, 0, 1]), 2)
    >>> length[code].tolist(), cat[code].tolist(), code.dtype.name
    ([3, 0, 2], [1, 0, 1], 'int16')
    """
    import numpy as np

    from ..arrays import COUNTED_BELOW

    if not len(lengths) or lengths.dtype.kind not in "iu":
        return None
    top = int(lengths.max())
    n_codes = (top + 1) * n_cat
    if int(lengths.min()) < 0 or top >= COUNTED_BELOW or n_codes > max(len(lengths), 1 << 20):
        return None
    small = np.int16 if n_codes <= 1 << 15 else np.int32
    code: np.ndarray = np.empty(len(lengths), dtype=small)
    for lo in range(0, len(code), CHUNK):  # (each piece's three steps in cache)
        part: np.ndarray = code[lo : lo + CHUNK]
        part[:] = lengths[lo : lo + CHUNK]
        part *= n_cat
        part += codes[lo : lo + CHUNK]
    values = np.arange(n_codes, dtype=np.int64)
    return code, values // n_cat, values % n_cat


def category_counts(cats: np.ndarray, sizes: np.ndarray, n_cat: int) -> np.ndarray:
    """``(len(sizes), n_cat)`` int64: how many of each batch's entries (``sizes[i]``
    consecutive entries of ``cats``, in order) are of each category ``0 .. n_cat - 1``;
    one count of ``batch x n_cat + category`` (not a pass a category).

    >>> import numpy as np
    >>> category_counts(np.array([1, 0, 1, 1]), np.array([3, 1]), 2).tolist()
    [[1, 2], [0, 1]]
    """
    import numpy as np

    key = np.repeat(np.arange(len(sizes), dtype=np.int64) * n_cat, sizes)
    key += cats
    return np.bincount(key, minlength=len(sizes) * n_cat).reshape(len(sizes), n_cat)


def _frame(
    cols: dict[str, np.ndarray], cat_names: tuple[str, ...], n_col: np.ndarray, order: list[str]
) -> Any:
    """A table of ``order``'s columns (plus ``cat_<name>``) from per-row sums, built
    without copying the arrays (the replay of a big manifest has millions of rows)."""
    import numpy as np
    import pandas as pd

    tokens = cols["tokens"]

    def per_sample(x: np.ndarray) -> np.ndarray:  # x / n, n cast to float64 in the loop
        return np.true_divide(x, n_col, dtype=np.float64)

    with np.errstate(invalid="ignore", divide="ignore"):
        mean = per_sample(tokens)
        spread = per_sample(cols["sumsq"])  # -> sqrt(max(sumsq / n - mean^2, 0)), in place
        spread -= np.square(mean)
        np.maximum(spread, 0.0, out=spread)
        np.sqrt(spread, out=spread)
        derived = {
            "mean_len": mean,
            "len_std": spread,
            "padding_eff": tokens / cols["padded_tokens"],
        }
    out = {name: derived[name] if name in derived else cols[name] for name in order}
    for k, name in enumerate(cat_names):
        out[f"cat_{name}"] = per_sample(cols[f"cat{k}"])
    return pd.DataFrame(out, copy=False)


def _epoch_rows(
    plan: EpochPlan, params: ScheduleParams, epoch: int, step0: int
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """One epoch's micro rows (epoch, step, rank, micro; the features are gathered
    later, :func:`_gather_rows`), the pool batches they use, and the pool batches
    dropped with the incomplete step."""
    import numpy as np

    pos, step, rank, micro = micro_positions(len(plan.order), params)
    if in_order(params):  # (pos is arange: the rows take the order's first positions)
        chosen, unused = plan.order[: len(pos)], plan.order[len(pos) :]
    else:
        chosen = plan.order[pos]
        # the positions no row uses (ascending): a byte a position, not a set difference
        left = np.ones(len(plan.order), dtype=bool)
        left[pos] = False
        unused = plan.order[np.flatnonzero(left)]
        del left
    del pos
    part: dict[str, np.ndarray] = {}
    part["epoch"] = np.full(len(chosen), epoch, dtype=np.int64)
    # (the positions' own array, shifted in place unless it is a read-only broadcast)
    part["step"] = np.add(step, step0, out=step if step.flags.writeable else None)
    part["rank"] = rank
    part["micro"] = micro
    return part, chosen, unused


def in_order(params: ScheduleParams) -> bool:
    """Whether an epoch's rows take its micro-batches in the epoch's order, all but those
    of an incomplete last step: one micro-batch a rank and step, strided over the ranks
    (:func:`micro_positions` is then ``arange``).

    >>> in_order(ScheduleParams(world_size=8)), in_order(ScheduleParams(grad_accum=2))
    (True, False)
    """
    return params.shard != "contiguous" and params.grad_accum == 1


def _gather_into(
    flat: np.ndarray, used: int, pool: Batches, chosen: np.ndarray, sizes: np.ndarray
) -> tuple[np.ndarray, int]:
    """Append the sample ids of ``pool``'s batches ``chosen`` to ``flat[used:]``, chunk by
    chunk; returns the (possibly grown) buffer and the new fill level."""
    import numpy as np

    from ..arrays import group_chunks

    total = int(sizes.sum())
    if used + total > len(flat):  # only a user's function can use samples twice
        flat = np.concatenate([flat[:used], np.empty(max(len(flat), total), np.int64)])
    done = np.zeros(len(chosen) + 1, dtype=np.int64)
    np.cumsum(sizes, out=done[1:])
    for a, b in group_chunks(done, CHUNK):
        flat[used + done[a] : used + done[b]] = gather_segments(pool.ids, pool.offsets, chosen[a:b])
    return flat, used + total


@dataclass(frozen=True, eq=False)
class ReplaySetup:
    """What every epoch of a replay shares (:func:`replay_setup`).

    :param lengths: int64 capped lengths by dataset index.
    :param codes: integer category code per sample, or None.
    :param cat_names: the categories' names.
    :param n_epochs: epochs to replay (fewer than asked when the seed decides fewer).
    :param determined: :attr:`Replay.determined_epochs`.
    :param strategy: the strategy; ``prepared``: its :meth:`Strategy.prepare` result.
    :param shufflers: each epoch's shuffler.
    """

    lengths: np.ndarray
    codes: np.ndarray | None
    cat_names: tuple[str, ...]
    n_epochs: int
    determined: int | None
    strategy: Strategy
    prepared: Any
    shufflers: EpochShufflers


def replay_setup(
    source: Manifest | np.ndarray | Sequence[int],
    params: ScheduleParams,
    epochs: int | None = None,
    categories: Sequence[Any] | np.ndarray | None = None,
) -> ReplaySetup:
    """Check the epochs, cap the lengths and prepare the strategy, as :func:`replay`
    does before its first epoch."""
    n_epochs = params.epochs if epochs is None else epochs
    problem = value_problem("epochs", n_epochs)
    if problem is not None:  # (before the buffer of n x epochs sample ids is asked for)
        raise InputError("--epochs", problem, "")
    n_epochs = int(n_epochs)
    determined = determined_epochs(params)
    if determined is not None and determined < n_epochs:
        n_epochs = determined
    else:
        determined = None
    lengths = capped(as_lengths(source), params.max_seq_len)
    codes, cat_names = _categories(source, categories, len(lengths))
    strategy = get_strategy(params.strategy)
    prepared = strategy.prepare(lengths, params)
    shufflers = EpochShufflers(params.rng, params.seed, params.seeding)
    return ReplaySetup(
        lengths, codes, cat_names, n_epochs, determined, strategy, prepared, shufflers
    )


def new_dropped() -> dict[str, int]:
    """The counts of :attr:`Replay.dropped` before the first epoch."""
    return {"incomplete_last_step_micro_batches": 0, "incomplete_last_step_samples": 0}


@dataclass(frozen=True, eq=False)
class EpochRows:
    """One replayed epoch, as :func:`replay_epochs` yields it.

    :param epoch: the epoch (from 0).
    :param pool: the batches it draws from; ``pool_index`` counts the distinct pools
        drawn so far (the same index: the same pool as the epoch before).
    :param feats: the pool's per-batch features (``n, tokens, sumsq, min, max, key``,
        ``cat<k>``: :func:`pool_features`).
    :param rows: int64 ``epoch, step, rank, micro`` of each micro-batch used.
    :param chosen: the pool batch of each row.
    """

    epoch: int
    pool: Batches
    pool_index: int
    feats: dict[str, np.ndarray]
    rows: dict[str, np.ndarray]
    chosen: np.ndarray


def replay_epochs(
    setup: ReplaySetup,
    params: ScheduleParams,
    dropped: dict[str, int],
    progress: Progress | None = None,
    features: bool = True,
) -> Iterator[EpochRows]:
    """Each epoch of the replay in turn (what :func:`replay` keeps of it is its own
    choice); ``dropped`` is updated as epochs go.

    :param features: False: each pool's ``feats`` hold ``n`` only (its batch sizes),
        for a caller that reads the samples themselves (no pass of
        :func:`pool_features` over the pool).
    """
    if progress is not None:
        progress(0, setup.n_epochs)
    # The last pool's features, kept while the pool lives (a fixed pool lives in the
    # prepared state): only a weak reference, so an epoch's own pool is freed before
    # the next epoch builds its own.
    cache: tuple[Callable[[], Batches | None], dict[str, np.ndarray]] = (lambda: None, {})
    pools = -1
    step0 = params.first_step
    strategy, n_cat = setup.strategy, len(setup.cat_names)
    for e in range(setup.n_epochs):
        if cache[0]() is None:
            cache = (lambda: None, {})
        plan: EpochPlan = strategy.epoch(setup.prepared, e, setup.shufflers.for_epoch(e))
        plan = accelerate_shards(plan, params)
        for key, value in plan.dropped.items():
            dropped[key] = dropped.get(key, 0) + int(value)
        if cache[0]() is not plan.pool:
            feats = (
                pool_features(plan.pool, setup.lengths, setup.codes, n_cat)
                if features
                else {"n": pool_sizes(plan.pool)}
            )
            cache = (weakref.ref(plan.pool), feats)
            pools += 1
        feats = cache[1]
        part, chosen, dropped_micro = _epoch_rows(plan, params, e, step0)
        dropped["incomplete_last_step_micro_batches"] += len(dropped_micro)
        dropped["incomplete_last_step_samples"] += int(feats["n"][dropped_micro].sum())
        last = int(part["step"][-1]) if len(chosen) else None
        # handed over, not held here while the caller works: what it does not keep of
        # the epoch (columns it does not read) is freed at once
        out = [EpochRows(e, plan.pool, pools, feats, part, chosen)]
        del plan, dropped_micro, feats, part, chosen
        yield out.pop()
        if last is not None:
            step0 = last + 1
        if progress is not None:
            progress(e + 1, setup.n_epochs)


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

    setup = replay_setup(source, params, epochs, categories)
    # Sample ids go straight into one buffer: built-in strategies use each sample at
    # most once per epoch, so n * epochs bounds it and untouched pages cost nothing.
    flat = np.empty(max(len(setup.lengths) * setup.n_epochs, 1), dtype=np.int64)
    used = 0
    parts: list[dict[str, np.ndarray]] = []
    taken: list[tuple[dict[str, np.ndarray], np.ndarray]] = []  # (pool features, rows used)
    dropped = new_dropped()
    for ep in replay_epochs(setup, params, dropped, progress):
        taken.append((ep.feats, ep.chosen))
        flat, used = _gather_into(flat, used, ep.pool, ep.chosen, ep.feats["n"][ep.chosen])
        parts.append(ep.rows)
        del ep  # (its pool, before the next epoch makes one)
    lengths, cat_names, determined = setup.lengths, setup.cat_names, setup.determined
    del setup

    # concatenate column by column, releasing each epoch's piece as it goes
    cols = {k: _joined([p.pop(k) for p in parts]) for k in list(parts[0])}
    del parts
    cols |= _gather_rows(taken)
    del taken
    for name in ("rank", "micro"):  # one rank, or no grad-accum: one value, stored once
        cols[name] = constant_view(cols[name])
    offsets = np.zeros(len(cols["n"]) + 1, dtype=np.int64)
    np.cumsum(cols["n"], out=offsets[1:])
    cols["padded_tokens"] = cols["n"] * cols["max"]
    micro = _micro_table(cols, cat_names)
    steps = _step_table(cols, cat_names, micro)
    del cols
    return Replay(
        params=params,
        lengths=lengths,
        sample_ids=flat[:used],
        offsets=offsets,
        micro=micro,
        steps=steps,
        category_names=cat_names,
        dropped=dropped,
        determined_epochs=determined,
    )


def _joined(pieces: list[np.ndarray]) -> np.ndarray:
    """``pieces`` one after another (the one piece itself when there is one: no copy)."""
    import numpy as np

    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def replay_from_batches(
    source: Manifest | np.ndarray | Sequence[int],
    params: ScheduleParams,
    sample_ids: np.ndarray,
    offsets: np.ndarray,
    rows: dict[str, np.ndarray],
    categories: Sequence[Any] | np.ndarray | None = None,
) -> Replay:
    """A :class:`Replay` of micro-batches given rather than replayed (e.g. recorded).

    Micro-batch ``i`` holds ``sample_ids[offsets[i]:offsets[i + 1]]`` (dataset indices
    into ``source``'s lengths, capped at ``params.max_seq_len``); ``rows`` gives its
    int64 ``epoch``, ``step``, ``rank`` and ``micro``, the rows in (step, rank, micro)
    order.  The tables are built as :func:`replay` builds them.

    >>> import numpy as np
    >>> rows = {k: np.array(v) for k, v in
    ...         dict(epoch=[0, 1], step=[0, 1], rank=[0, 0], micro=[0, 0]).items()}
    >>> r = replay_from_batches(np.array([3, 1, 2]), ScheduleParams(), np.array([0, 1, 1, 0]),
    ...                         np.array([0, 2, 4]), rows)
    >>> r.micro[["step", "batch_id", "tokens", "padded_tokens"]].values.tolist()
    [[0, 0, 4, 6], [1, 0, 4, 6]]
    """
    import numpy as np

    raw = as_lengths(source)
    lengths = raw if params.max_seq_len is None else np.minimum(raw, params.max_seq_len)
    ids = np.asarray(sample_ids, dtype=np.int64)
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= len(lengths)):
        raise InputError("sample_ids", f"ids outside 0..{len(lengths) - 1}", "")
    codes, cat_names = _categories(source, categories, len(lengths))
    pool = Batches(ids, np.asarray(offsets, dtype=np.int64))
    cols = pool_features(pool, lengths, codes, len(cat_names))
    for name in ("epoch", "step", "rank", "micro"):
        cols[name] = np.asarray(rows[name], dtype=np.int64)
    cols["padded_tokens"] = cols["n"] * cols["max"]
    micro = _micro_table(cols, cat_names)
    steps = _step_table(cols, cat_names, micro)
    return Replay(
        params=params,
        lengths=lengths,
        sample_ids=ids,
        offsets=pool.offsets,
        micro=micro,
        steps=steps,
        category_names=cat_names,
    )


def determined_epochs(params: ScheduleParams) -> int | None:
    """How many epochs the seed determines: None (all), or 1 with ``--seeding global``
    unless ``dropout`` is ``False`` (training draws from the sampler's generator between
    epochs, so only the first epoch's draw follows from the seed).

    >>> determined_epochs(ScheduleParams(rng="torch", seeding="global"))
    1
    >>> determined_epochs(ScheduleParams(rng="torch", seeding="global", dropout=False))
    """
    if params.seeding == "global" and params.dropout is not False:
        return 1
    return None


def undetermined_notes(rep: Replay | None) -> tuple[str, ...]:
    """A note for a replay that holds fewer epochs than asked because the seed does not
    decide the later ones (:attr:`Replay.determined_epochs`), else nothing.

    >>> import numpy as np
    >>> p = ScheduleParams(strategy="random", batch_size=2, rng="torch", seeding="global")
    >>> undetermined_notes(replay(np.ones(4), p, epochs=2))[0][:40]
    'epochs from 1 on are not determined by t'
    """
    if rep is None or rep.determined_epochs is None:
        return ()
    n = rep.determined_epochs
    last = int(rep.steps["step"].max()) if len(rep.steps) else rep.params.first_step
    return (
        f"epochs from {n} on are not determined by the seed: the sampler draws from torch's "
        f"global generator, which dropout (or other training code) draws from too; only "
        f"steps up to {last} are replayed. To cover the rest, record each step's sample ids "
        f"during training (e.g. in the collator); give --no-dropout (dropout = false) only "
        f"if nothing else draws from that generator",
    )


def accelerate_shards(plan: EpochPlan, params: ScheduleParams) -> EpochPlan:
    """Under ``--shard accelerate``, the epoch as accelerate's processes see it
    (:func:`even_batches`), counting the samples added to even the processes out; else
    ``plan`` itself."""
    import numpy as np

    if params.shard != "accelerate" or params.world_size == 1 or not len(plan.order):
        return plan
    if params.batch_size is None:  # a budgeted batch sampler: no fixed size to even out
        return plan
    batches = plan.pool.take(plan.order)
    shards = even_batches(batches, params.world_size, params.batch_size, params.drop_last)
    dropped = dict(plan.dropped)
    extra = len(shards.ids) - len(batches.ids)
    if extra > 0:  # counted negative: samples added, not left out
        dropped["even_batches_samples"] = dropped.get("even_batches_samples", 0) - extra
    elif extra < 0:
        dropped["drop_last_samples"] = dropped.get("drop_last_samples", 0) - extra
    return EpochPlan(shards, np.arange(len(shards), dtype=np.int64), dropped)


def batch_ids(keys: np.ndarray) -> np.ndarray:
    """Dense ids of composition keys, numbered in order of first appearance."""
    import numpy as np

    if not len(keys):
        return np.zeros(0, dtype=np.int64)
    if _distinct(keys):  # (each key its own id, in order: no unique's inverse)
        return np.arange(len(keys), dtype=np.int64)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[stable_argsort(first)] = np.arange(len(first))
    return rank[inverse.reshape(-1)]


def constant_view(a: np.ndarray) -> np.ndarray:
    """``a`` itself, or, when all its values are one value, a read-only view of that
    value repeated (stride 0: 8 bytes, not 8 a row); the same values either way.

    >>> import numpy as np
    >>> v = constant_view(np.zeros(5, dtype=np.int64))
    >>> v.tolist(), v.strides, v.flags.writeable
    ([0, 0, 0, 0, 0], (0,), False)
    """
    import numpy as np

    if not len(a) or a.min() != a.max():
        return a
    return np.broadcast_to(a[:1].copy(), a.shape)


def _distinct(keys: np.ndarray) -> bool:
    """Whether no value of ``keys`` stands twice (one sort)."""
    import numpy as np

    ordered = np.sort(keys)
    return bool((ordered[1:] != ordered[:-1]).all())


def pool_batch_ids(pool_keys: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """:func:`batch_ids` of ``pool_keys[rows]``, without sorting a key per row: the
    distinct keys of the pool are numbered once, then by their first row.

    The same ids as ``batch_ids(pool_keys[rows])`` (both number the distinct keys that
    appear in order of first appearance); ``rows`` may be overwritten.

    >>> import numpy as np
    >>> keys = np.array([5, 9, 5, 7], dtype=np.uint64)
    >>> pool_batch_ids(keys, np.array([3, 1, 0, 2, 3])).tolist()
    [0, 1, 2, 2, 0]
    """
    import numpy as np

    from ..arrays import none_twice

    if not len(rows):
        return np.zeros(0, dtype=np.int64)
    if _distinct(pool_keys):  # (distinct batches: a class each)
        n_classes = len(pool_keys)
        if none_twice([rows], n_classes):  # (and no batch twice: each row a new id)
            return np.arange(len(rows), dtype=np.int64)
    else:
        _, klass = np.unique(pool_keys, return_inverse=True)
        n_classes = len(_)
        np.take(klass.reshape(-1), rows, out=rows)  # rows now hold each row's key class
    first = np.full(n_classes, len(rows), dtype=np.int64)
    np.minimum.at(first, rows, np.arange(len(rows), dtype=np.int64))
    rank = np.empty(len(first), dtype=np.int64)
    rank[stable_argsort(first)] = np.arange(len(first))
    return np.take(rank, rows, out=rows)


def _gather_rows(taken: list[tuple[dict[str, np.ndarray], np.ndarray]]) -> dict[str, np.ndarray]:
    """Every row's pool features (``n, tokens, sumsq, min, max, cat<k>``) and
    ``batch_id``, from each epoch's (pool features, pool batches used), each column
    gathered once into its final array.  When every epoch drew from one pool (a fixed
    composition) the batch ids come from :func:`pool_batch_ids`, else from
    :func:`batch_ids` of the rows' keys."""
    import numpy as np

    feats = taken[0][0]
    names = [k for k in feats if k != "key"]
    if all(f is feats for f, _ in taken):
        rows = np.concatenate([r for _, r in taken])
        out = {k: feats[k].take(rows) for k in names}
        out["batch_id"] = pool_batch_ids(feats["key"], rows)
        return out
    out = {k: np.concatenate([f[k][r] for f, r in taken]) for k in names}
    out["batch_id"] = batch_ids(np.concatenate([f["key"][r] for f, r in taken]))
    return out


def capped(raw: np.ndarray, cap: int | None) -> np.ndarray:
    """``min(raw, cap)`` per sample; ``raw`` itself (no copy) when no length exceeds
    ``cap`` or there is no cap.

    >>> import numpy as np
    >>> x = np.array([5, 9])
    >>> capped(x, 8).tolist(), capped(x, 9) is x, capped(x, None) is x
    ([5, 8], True, True)
    """
    import numpy as np

    if cap is None or not len(raw) or int(raw.max()) <= cap:
        return raw
    return np.minimum(raw, cap)


def _micro_table(cols: dict[str, np.ndarray], cat_names: tuple[str, ...]) -> Any:
    if "batch_id" not in cols:
        cols["batch_id"] = batch_ids(cols.pop("key"))
    cols["n_samples"] = cols["n"]
    cols["min_len"] = cols["min"]
    cols["max_len"] = cols["max"]
    return _frame(cols, cat_names, cols["n"], _MICRO_ORDER)


_MICRO_ORDER = ["epoch", "step", "rank", "micro", "batch_id", *BATCH_FEATURES]
_STEP_ORDER = ["step", "epoch", "n_micro", *BATCH_FEATURES]


def step_starts(step: np.ndarray) -> np.ndarray:
    """Indices where a new step begins in rows sorted by step."""
    import numpy as np

    if not len(step):
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, step[1:] != step[:-1]])


def _step_table(cols: dict[str, np.ndarray], cat_names: tuple[str, ...], micro: Any) -> Any:
    # Rows are in (step, rank, micro) order, so a step's aggregates are reductions over
    # its run of rows (an epoch's last step may have fewer, under --shard accelerate).
    import numpy as np

    step = cols["step"]
    starts = step_starts(step)
    if len(starts) == len(step):
        return _one_micro_steps(micro, cat_names)

    def total(a: np.ndarray) -> np.ndarray:
        return np.add.reduceat(a, starts) if len(starts) else a[:0]

    n_col = total(cols["n"])
    base = {
        "step": step[starts].copy(),
        "epoch": cols["epoch"][starts].copy(),
        "n_micro": np.diff(np.r_[starts, len(step)]).astype(np.int64),
        "n_samples": n_col,
        "tokens": total(cols["tokens"]),
        "padded_tokens": total(cols["padded_tokens"]),
        "min_len": np.minimum.reduceat(cols["min"], starts) if len(starts) else n_col.copy(),
        "max_len": np.maximum.reduceat(cols["max"], starts) if len(starts) else n_col.copy(),
        "sumsq": total(cols["sumsq"]),
    }
    for k in range(len(cat_names)):
        base[f"cat{k}"] = total(cols[f"cat{k}"])
    return _frame(base, cat_names, n_col, _STEP_ORDER)


def _one_micro_steps(micro: Any, cat_names: tuple[str, ...]) -> Any:
    """The step table when every step is one micro-batch: the micro table's own columns
    (a step's sums over one row are that row's values), shared, not copied."""
    import numpy as np
    import pandas as pd

    out = {name: micro[name].to_numpy() for name in _STEP_ORDER if name != "n_micro"}
    out["n_micro"] = constant_view(np.ones(len(micro), dtype=np.int64))
    out = {name: out[name] for name in _STEP_ORDER}
    for name in cat_names:
        out[f"cat_{name}"] = micro[f"cat_{name}"].to_numpy()
    return pd.DataFrame(out, copy=False)


def epoch_batches(
    source: Manifest | np.ndarray | Sequence[int], params: ScheduleParams, epoch: int = 0
) -> Batches:
    """All micro-batches of one epoch in the epoch's order (before ranks and steps).

    Under ``--seeding once``, ``global`` or ``loader`` the draws of epochs ``0..epoch-1``
    come first, so the result is what the run saw in that epoch.

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
    kept = determined_epochs(params)
    if kept is not None and epoch >= kept:
        raise InputError(
            "--epochs",
            f"epoch {epoch} is not determined by the seed (--seeding global, dropout possible)",
            "give --no-dropout if nothing else draws from torch's generator",
        )
    first = epoch if params.seeding == "per-epoch" else 0
    plan = None
    for e in range(first, epoch + 1):
        plan = strategy.epoch(prepared, e, shufflers.for_epoch(e))
    if plan is None:
        raise InputError("--epochs", f"epoch must be 0 or more, got {epoch}", "")
    return plan.pool.take(plan.order)


def micro_batches_per_epoch(
    source: Manifest | np.ndarray | Sequence[int], params: ScheduleParams
) -> int:
    """How many micro-batches epoch 0 holds (before ranks and steps):
    ``len(epoch_batches(source, params, 0))``, without drawing the epoch's order where
    the strategy's batches are fixed for the run (then it is its pool's size).

    >>> import numpy as np
    >>> micro_batches_per_epoch(np.array([3, 1, 2, 2]), ScheduleParams(token_budget=4))
    3
    """

    from ..data import strategy_info

    info = strategy_info(params.strategy)
    if info is None or not info.fixed_batches:
        return len(epoch_batches(source, params, 0))
    # (the registry's fixed_batches trait: tests/schedule/test_epoch_count.py checks pool)
    strategy = cast(FixedStrategy, get_strategy(params.strategy))
    lengths = capped(as_lengths(source), params.max_seq_len)  # (no copy when none is over)
    size = getattr(strategy, "pool_size", None)  # (the count alone, where it has a way)
    if size is not None:
        return int(size(lengths, params))
    return len(strategy.pool(strategy.prepare(lengths, params)))
