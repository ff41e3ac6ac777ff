"""Batch features of every logged point: :func:`point_features`, :func:`rank_features`.

A logged point at step ``s`` covers the optimizer steps ``(s - k, s]`` when the log has a
point every ``k`` steps and holds window means (``covers="window"``, the default for
``k > 1``), or only step ``s`` (``covers="step"``).  Its features pool every replayed
micro-batch of those steps (all ranks, all grad-accum micro-batches):

========================= ==================================================================
column                    meaning (units)
========================= ==================================================================
step                      the logged step
n_steps                   optimizer steps covered that the replay has (0: none, all NaN)
n_micro                   micro-batches pooled
n_samples                 samples
tokens                    real tokens, the sum of (capped) lengths
padded_tokens             sum over micro-batches of samples x longest
min_len, max_len          shortest and longest sample (tokens)
mean_len                  tokens / n_samples
len_std                   population std of the samples' lengths (tokens)
padding_eff               tokens / padded_tokens
cat_<name>                share of the samples in category ``name``
========================= ==================================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import InputError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from ..data import Replay

COVERS: tuple[str, ...] = ("window", "step")


def point_index(
    micro_steps: np.ndarray, logged_steps: np.ndarray, interval: int, covers: str = "window"
) -> np.ndarray:
    """For each micro-batch (by its step), the index of the logged point covering it, or -1.

    :param micro_steps: step of each micro-batch (any order).
    :param logged_steps: the logged steps, sorted ascending, unique.
    :param interval: optimizer steps per logged point.
    :param covers: ``window`` (point ``s`` covers ``(s - interval, s]``) or ``step``.

    >>> import numpy as np
    >>> point_index(np.array([1, 2, 3, 4, 5]), np.array([2, 4]), 2).tolist()
    [0, 0, 1, 1, -1]
    """
    import numpy as np

    if covers not in COVERS:
        raise InputError("covers", f"unknown value {covers!r}", f"choose from {', '.join(COVERS)}")
    s = np.asarray(logged_steps, dtype=np.int64)
    t = np.asarray(micro_steps, dtype=np.int64)
    if not s.shape[0]:  # (no logged point covers anything)
        return np.full(t.shape[0], -1, dtype=np.int64)
    j = np.searchsorted(s, t, side="left")
    inside = j < s.shape[0]
    jj = np.where(inside, j, 0)
    if covers == "step" or interval <= 1:
        ok = inside & (s[jj] == t)
    else:
        ok = inside & (t > s[jj] - interval)
    return np.where(ok, jj, -1)


def _pool(micro: pd.DataFrame, group: np.ndarray, n_groups: int, cats: list[str]) -> dict:
    """Sums, mins and maxes of micro-batch columns by group (group -1 is left out)."""
    import numpy as np

    keep = np.flatnonzero(group >= 0)  # (positions: one pass, then a take a column)
    return _sums(_weights(micro, keep, cats), group[keep], n_groups)


def _weights(micro: pd.DataFrame, keep: np.ndarray, cats: list[str]) -> dict:
    """What :func:`_sums` adds up, for the micro-batches at positions ``keep``: float64
    ``n_samples, tokens, padded_tokens``, ``sumsq = n (std^2 + mean^2)`` (the sum of
    squared lengths) and ``n x share`` a category; ``min_len``, ``max_len`` as read."""
    import numpy as np

    names = ["n_samples", "mean_len", "len_std", "tokens", "padded_tokens", "min_len", "max_len"]
    col = {c: micro[c].to_numpy()[keep] for c in [*names, *cats]}
    n = col["n_samples"].astype(np.float64)
    mean = col["mean_len"].astype(np.float64)
    std = col["len_std"].astype(np.float64)
    out = {
        "n_samples": n,
        "tokens": col["tokens"].astype(np.float64),
        "padded_tokens": col["padded_tokens"].astype(np.float64),
        "sumsq": n * (std**2 + mean**2),
        "min_len": col["min_len"],
        "max_len": col["max_len"],
    }
    for c in cats:
        out[c] = col[c].astype(np.float64) * n
    return out


def _sums(w: dict, g: np.ndarray, n_groups: int) -> dict:
    """The :func:`_weights` ``w`` summed by group ``g`` (every entry >= 0), in the
    order of the rows (``np.bincount`` adds them in turn); ``n_micro`` counts them,
    ``min_len`` / ``max_len`` the least / greatest."""
    import numpy as np

    def total(v: np.ndarray) -> np.ndarray:
        return np.bincount(g, weights=v, minlength=n_groups)

    out: dict[str, np.ndarray] = {"n_micro": np.bincount(g, minlength=n_groups).astype(np.int64)}
    for c in ["n_samples", "tokens", "padded_tokens", "sumsq"]:
        out[c] = total(w[c])
    out["min_len"], out["max_len"] = _extremes(g, w["min_len"], w["max_len"], n_groups)
    for c in w:
        if c.startswith("cat_"):
            out[c] = total(w[c])
    return out


def _extremes(
    g: np.ndarray, low: np.ndarray, high: np.ndarray, n_groups: int
) -> tuple[np.ndarray, np.ndarray]:
    """The least of ``low`` and the greatest of ``high`` in each group ``g`` (float64;
    ``inf`` / ``-inf`` for a group of none).  Groups in order (a replay's rows by step)
    take one ``reduceat`` over their runs, others ``minimum.at`` / ``maximum.at``: a
    least and a greatest are the same values in any order."""
    import numpy as np

    lo = np.full(n_groups, np.inf)
    hi = np.full(n_groups, -np.inf)
    if g.size and bool((g[1:] >= g[:-1]).all()):
        starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        lo[g[starts]] = np.minimum.reduceat(low, starts)
        hi[g[starts]] = np.maximum.reduceat(high, starts)
    else:
        np.minimum.at(lo, g, low.astype(np.float64))
        np.maximum.at(hi, g, high.astype(np.float64))
    return lo, hi


def _finish(pooled: dict, cats: list[str]) -> dict:
    import numpy as np

    n = pooled["n_samples"]
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = pooled["tokens"] / n
        var = np.maximum(pooled["sumsq"] / n - mean**2, 0.0)
        eff = pooled["tokens"] / pooled["padded_tokens"]
        shares = {c: pooled[c] / n for c in cats}
    empty = pooled["n_micro"] == 0
    out = {
        "n_micro": pooled["n_micro"],
        "n_samples": np.where(empty, np.nan, n),
        "tokens": np.where(empty, np.nan, pooled["tokens"]),
        "padded_tokens": np.where(empty, np.nan, pooled["padded_tokens"]),
        "min_len": np.where(empty, np.nan, pooled["min_len"]),
        "mean_len": np.where(empty, np.nan, mean),
        "max_len": np.where(empty, np.nan, pooled["max_len"]),
        "len_std": np.where(empty, np.nan, np.sqrt(var)),
        "padding_eff": np.where(empty, np.nan, eff),
    }
    for c in cats:
        out[c] = np.where(empty, np.nan, shares[c])
    return out


def micro_points(
    replay: Replay,
    logged_steps: np.ndarray,
    interval: int = 1,
    covers: str = "window",
    rank: int | None = None,
    pooled: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`point_index` of every micro-batch of ``replay``; with ``rank``, the other
    ranks' micro-batches get -1 (the logged metric is that rank's alone).

    :param pooled: this function's result without ``rank``, when already at hand (it
        is then not computed again)."""
    import numpy as np

    idx = pooled
    if idx is None:
        idx = point_index(replay.micro["step"].to_numpy(), logged_steps, interval, covers)
    if rank is not None:
        idx = np.where(replay.micro["rank"].to_numpy() == rank, idx, -1)
    return idx


def points_only(index: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``index`` (each micro-batch's point, -1: none) with the points not in ``keep`` (a
    boolean per point) set to -1: features pooled by it are those of the kept points,
    from the same micro-batches in the same order.

    >>> import numpy as np
    >>> points_only(np.array([0, 1, -1, 2]), np.array([True, False, True])).tolist()
    [0, -1, -1, 2]
    """
    import numpy as np

    kept = np.append(np.asarray(keep, dtype=bool), False)  # (index -1 reads the False)
    return np.where(kept[index], index, -1)


def steps_per_point(steps: np.ndarray, index: np.ndarray, n_points: int) -> np.ndarray:
    """How many distinct steps of ``steps`` (each micro-batch's) each point holds, given
    each micro-batch's point ``index`` (-1: none), a function of its step.

    A point's steps are counted once each: as the distinct (point, step) pairs, which
    are the distinct steps, the point being the step's.  Rows in step order (as
    replays hold them) are counted where the step changes; others, by ``np.unique``.

    >>> import numpy as np
    >>> steps_per_point(np.array([0, 0, 1, 2, 2, 3]), np.array([0, 0, 0, 1, 1, -1]), 2).tolist()
    [2, 1]
    """
    import numpy as np

    hit = index >= 0
    t, p = steps[hit], index[hit]
    if not t.size:
        return np.zeros(n_points, dtype=np.int64)
    if bool((t[1:] >= t[:-1]).all()):
        first = np.ones(t.size, dtype=bool)
        np.not_equal(t[1:], t[:-1], out=first[1:])
    else:
        _, at = np.unique(t, return_index=True)
        first = np.zeros(t.size, dtype=bool)
        first[at] = True
    return np.bincount(p[first], minlength=n_points).astype(np.int64)


def point_features(
    replay: Replay,
    logged_steps: np.ndarray,
    interval: int = 1,
    covers: str = "window",
    rank: int | None = None,
    pooled: np.ndarray | None = None,
) -> pd.DataFrame:
    """Batch features of each logged point (columns in the module docstring).

    :param replay: the replayed schedule.
    :param logged_steps: the logged steps, sorted ascending, unique.
    :param interval: optimizer steps per logged point (see :func:`log_interval`).
    :param covers: ``window`` or ``step``, see the module docstring.
    :param rank: pool only this rank's micro-batches (a trainer that logs rank 0's loss
        without an all-reduce); None: all ranks.
    :param pooled: ``micro_points(replay, logged_steps, interval, covers)`` if at hand.
    :returns: one row per logged step, in the order given.

    >>> import numpy as np
    >>> from dflash_diag.data import ScheduleParams
    >>> from dflash_diag.schedule import replay
    >>> r = replay(np.array([3, 1, 2, 2]), ScheduleParams(token_budget=4), epochs=2)
    >>> point_features(r, np.array([0, 1]))[["step", "n_samples", "tokens"]].values.tolist()
    [[0.0, 2.0, 3.0], [1.0, 1.0, 3.0]]
    """
    import numpy as np
    import pandas as pd

    s = np.asarray(logged_steps, dtype=np.int64)
    micro = replay.micro
    cats = [c for c in micro.columns if c.startswith("cat_")]
    idx = micro_points(replay, s, interval, covers, rank, pooled)
    sums = _pool(micro, idx, s.shape[0], cats)
    n_steps = steps_per_point(micro["step"].to_numpy(), idx, s.shape[0])
    cols = {"step": s, "n_steps": n_steps, **_finish(sums, cats)}
    return pd.DataFrame(cols)


def candidate_columns(
    replay: Replay,
    logged_steps: np.ndarray,
    interval: int = 1,
    covers: str = "window",
    ranks: tuple[int | None, ...] = (None,),
    pooled: np.ndarray | None = None,
) -> list[dict[str, np.ndarray]]:
    """``point_features(replay, logged_steps, interval, covers, r, pooled)`` for each
    ``r`` of ``ranks`` (a rank ``r >= 0``, or None: all pooled) as its columns by name,
    in the frame's order, the same to the bit (:func:`features_frame` makes the frame:
    a caller that keeps one candidate of several makes only its frame).  One read of the
    micro-batches: their columns are taken and weighted once, and every rank is summed
    in one ``np.bincount`` by ``point x world + rank``, which adds each rank's
    micro-batches in the same order as a pass over that rank alone."""
    import numpy as np

    s = np.asarray(logged_steps, dtype=np.int64)
    micro = replay.micro
    cats = [c for c in micro.columns if c.startswith("cat_")]
    idx = micro_points(replay, s, interval, covers, None, pooled)
    keep = np.flatnonzero(idx >= 0)
    g, n = idx[keep], s.shape[0]
    w = _weights(micro, keep, cats)
    steps = micro["step"].to_numpy()[keep]
    frames: dict[int | None, dict[str, np.ndarray]] = {}
    if None in ranks:
        feats = _finish(_sums(w, g, n), cats)
        frames[None] = {"step": s, "n_steps": steps_per_point(steps, g, n), **feats}
    one = [r for r in ranks if r is not None]
    if one:
        rk = micro["rank"].to_numpy()[keep].astype(np.int64)
        world = max(max(one), int(rk.max()) if rk.size else 0) + 1
        group = g * world + rk
        feats = _finish(_sums(w, group, n * world), cats)
        n_steps = _steps_per_group(steps, group, n * world)
        for r in one:
            at = {c: v[r::world] for c, v in feats.items()}
            frames[r] = {"step": s, "n_steps": n_steps[r::world], **at}
    return [frames[r] for r in ranks]


def features_frame(columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """The table of :func:`point_features` from its columns (:func:`candidate_columns`)."""
    import pandas as pd

    return pd.DataFrame(columns)


def _steps_per_group(steps: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """How many distinct ``steps`` each group holds (``group`` >= 0 a row): the distinct
    (group, step) pairs counted by group; rows in (step, group) order (as a replay's
    rows are by step and rank) are counted where the pair changes, others after a sort.

    >>> import numpy as np
    >>> _steps_per_group(np.array([0, 0, 0, 1, 1]), np.array([0, 1, 0, 0, 1]), 3).tolist()
    [2, 2, 0]
    """
    import numpy as np

    t, g = steps, group
    if not t.size:
        return np.zeros(n_groups, dtype=np.int64)
    up, same = t[1:] > t[:-1], t[1:] == t[:-1]
    if not bool((up | (same & (g[1:] >= g[:-1]))).all()):
        order = np.lexsort((t, g))
        t, g = t[order], g[order]
    first = np.ones(t.size, dtype=bool)
    np.not_equal(t[1:], t[:-1], out=first[1:])
    first[1:] |= g[1:] != g[:-1]
    return np.bincount(g[first], minlength=n_groups).astype(np.int64)


def rank_features(
    replay: Replay,
    logged_steps: np.ndarray,
    interval: int = 1,
    covers: str = "window",
    pooled: np.ndarray | None = None,
) -> pd.DataFrame:
    """Features per (logged point, rank): long format, columns ``step, rank`` then as
    :func:`point_features` (without ``n_steps``).  Rows only where the rank had data.
    ``pooled``: as :func:`point_features` takes it."""
    import numpy as np
    import pandas as pd

    from ..arrays import unique_values

    s = np.asarray(logged_steps, dtype=np.int64)
    micro = replay.micro
    cats = [c for c in micro.columns if c.startswith("cat_")]
    idx = micro_points(replay, s, interval, covers, None, pooled)
    ranks = micro["rank"].to_numpy().astype(np.int64)
    world = int(ranks.max()) + 1 if ranks.size else 1
    # only the points some micro-batch falls in get rows (a caller asks for a few
    # points' ranks, not a table of every point x rank), numbered in their order
    hit = idx >= 0
    used = unique_values(idx[hit])
    group = np.full(idx.shape[0], -1, dtype=np.int64)
    group[hit] = np.searchsorted(used, idx[hit]) * world + ranks[hit]
    feats = _finish(_pool(micro, group, used.shape[0] * world, cats), cats)
    frame = pd.DataFrame(
        {
            "step": np.repeat(s[used], world),
            "rank": np.tile(np.arange(world), used.shape[0]),
            **feats,
        }
    )
    return frame[frame["n_micro"] > 0].reset_index(drop=True)
