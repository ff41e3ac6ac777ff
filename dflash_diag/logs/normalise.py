"""The per-step table every reader ends with: :func:`build_table`.

Readers produce *raw records*: one dict per log record with the keys ``line`` (1-based
line or record number), ``rank`` (int), ``step`` (float or NaN), ``step_source``
(``field`` / ``progress`` / ``none``), ``is_eval`` (bool) and any number of metric
columns, already under their canonical names
(:func:`~dflash_diag.logs.names.canonical_name`) and in canonical units
(:func:`~dflash_diag.logs.names.unit_factor`).  :func:`build_table` turns those into the
tidy table of a :class:`~dflash_diag.data.RunLog`: steps filled in, restarts
resolved, one rank chosen, one row per step.

Only the standard library is imported at module level; pandas is imported inside
:func:`build_table`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from ..data import CANONICAL_COLUMNS, RunLog
from ..errors import InputError
from .names import is_logged_nan


def _records_frame(records: Iterable[Mapping[str, Any]], extra: Sequence[Any]) -> Any:
    """All records as one DataFrame in line order (records, then the ``extra`` frames)."""
    import numpy as np
    import pandas as pd

    frames = []
    recs = list(records)
    if recs:
        frames.append(pd.DataFrame.from_records(recs))
    frames += [f for f in extra if len(f)]
    if not frames:
        return pd.DataFrame(columns=["line", "rank", "step", "step_source", "is_eval"])
    df = pd.concat(frames, ignore_index=True, sort=False) if len(frames) > 1 else frames[0]
    line = df["line"].to_numpy()
    if len(line) < 2 or bool((line[1:] >= line[:-1]).all()):
        return df.reset_index(drop=True)
    # (numpy's argsort and one take: DataFrame.sort_values takes about half as long again)
    return df.take(np.argsort(line, kind="stable")).reset_index(drop=True)


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
       progress-bar counter, else the epoch when each training record is one epoch
       (``Epoch 12: Train Loss=0.41``: nothing finer; ``step_source`` "epoch"), else
       line order (train records numbered 1, 2, ...).
       Records without that kind of step are skipped (reason ``no_step``), except
       structured evaluation records (HF ``{'eval_loss': ...}`` lines, which carry no
       step; ``attach`` true), which belong to the last step logged before them.  A step
       that is NaN, infinite or :data:`MAX_STEP` and beyond is skipped (``bad_step``).
    2. Ranks: ``rank=0`` keeps rank 0 (or the lowest rank when there is no rank 0),
       ``rank=N`` keeps rank N, ``"all"`` keeps every rank and adds a ``rank`` column.
    3. Restarts: per rank, a training record whose step is below the highest step seen
       so far starts a restart; its step is reported and, for every step logged more than
       once, the later value of each column wins (``groupby(...).last()``, which also
       merges a step's train and eval records).

    :param extra: DataFrames of records already in columnar form (the fast path of the
        text reader), concatenated with ``records``.
    """

    skipped = dict(skipped or {})
    df = _typed_records(_records_frame(records, extra), path, fmt, skipped)
    sources = _values_of(df["step_source"])
    best = "field" if "field" in sources else "progress" if "progress" in sources else "none"
    if best == "none" and _epochs_as_steps(df):
        best = "epoch"  # an epoch log: nothing finer than the epoch numbers its records
        df = _steps_from_epochs(df, skipped)
    else:
        df = _assign_steps(df, best, skipped, single_source=len(sources) == 1)
    if df.empty:
        raise InputError(path, "no step-like data found", _hint_for(fmt, skipped))

    rank_col = df["rank"].to_numpy()
    if _one_value(rank_col):
        ranks: tuple[int, ...] = (int(rank_col[0]),)  # one rank: no need to hash them all
    else:
        ranks = tuple(int(r) for r in sorted(df["rank"].unique()))
    df = _select_rank(df, rank, ranks, path, skipped)
    source = "line order" if best == "none" else best
    common = {"path": path, "format": fmt, "ranks": ranks, "n_lines": int(n_lines)}
    starts = run_starts(df) if rank != "all" else [0]
    if len(starts) == 1:
        return _one_run(df, rank, common | {"step_source": source}, skipped)
    bounds = [*starts, len(df)]
    parts = [
        _one_run(df.iloc[a:b], rank, common | {"step_source": source}, {})
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    last = parts[-1]
    skipped["other_run"] = sum(len(p.table) for p in parts[:-1])  # (their rows, per step)
    return MultiRunLog(
        **{f.name: getattr(last, f.name) for f in fields(RunLog)} | {"skipped": _tidy(skipped)},
        runs=tuple(parts),
    )


def _tidy(skipped: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in sorted(skipped.items()) if v}


def _one_run(df: Any, rank: int | str, common: dict[str, Any], skipped: dict[str, int]) -> RunLog:
    """The RunLog of one run's records (restarts, one row per step)."""
    restarts = _restarts(df)
    table, logged_nan = _step_table(df, rank)
    if not restarts and rank != "all":
        table["tokens"] = _tokens_from_running_total(table)
    return RunLog(
        table=_canonical_order(table, rank),
        restarts=tuple(restarts),
        skipped=_tidy(skipped),
        logged_nan=logged_nan,
        **common,
    )


@dataclass(frozen=True, eq=False)
class MultiRunLog(RunLog):
    """A log holding several runs appended to one file (a sweep's ``>> train.log``):
    the fields of a :class:`RunLog` are the last run's (``skipped["other_run"]``
    counts the rows of the others), and ``runs`` holds each run's own RunLog, in
    file order (:func:`run_starts` tells them apart).  No value is carried from one run
    to another."""

    runs: tuple[RunLog, ...] = ()


def run_starts(df: Any) -> list[int]:
    """Where each run starts among the records (row positions, from 0), in line order.

    A training record starts a new run when its step goes back to the run's first
    step or below and counts against another total than the run's (``step 10/40``
    after ``step 60/60``).  Any other step back is a resume in the same run
    (:func:`_restarts`): without totals the two cannot be told apart.  (The fast
    path's records carry no total yet: a large log's runs read as resumes there.)  A step that
    goes back, but not that far, with the same total, is a resume in the same run
    (:func:`_restarts`).  Evaluation records belong to the run before them.
    """
    import numpy as np

    train = ~df["is_eval"].to_numpy(dtype=bool)
    steps = df["step"].to_numpy(dtype=np.float64)
    has_total = "step_total" in df
    totals = df["step_total"].to_numpy(dtype=np.float64) if has_total else None
    if train.sum() < 2 or not has_total or (np.diff(steps[train]) > 0).all():
        return [0]  # (the common case: steps only go up, no totals to compare)
    starts, first, peak, total = [0], None, -np.inf, np.nan
    for i in np.flatnonzero(train):
        t = totals[i] if totals is not None else np.nan
        new_total = not np.isnan(t) and not np.isnan(total) and t != total
        if first is not None and steps[i] < peak and new_total and steps[i] <= first:
            starts.append(int(i))
            first, peak, total = None, -np.inf, np.nan
        first = steps[i] if first is None else first
        peak = max(peak, steps[i])
        total = t if not np.isnan(t) else total
    return starts


def _epochs_as_steps(df: Any) -> bool:
    """Whether a log without steps numbers its training records by epoch: at least two
    carry an ``epoch``, every one of those a distinct whole number, rising (one record
    per epoch; the HF Trainer's fractional epochs are no such log)."""
    import numpy as np

    if "epoch" not in df:
        return False
    train = ~df["is_eval"].to_numpy()
    epochs = df["epoch"].to_numpy(dtype=np.float64)[train]
    epochs = epochs[~np.isnan(epochs)]
    if len(epochs) < 2 or not np.isfinite(epochs).all():
        return False
    return bool((epochs == np.round(epochs)).all() and (np.diff(epochs) > 0).all())


def _steps_from_epochs(df: Any, skipped: dict[str, int]) -> Any:
    """Each record's epoch as its step (``step_source`` "epoch"); records without one
    are skipped (``no_step``)."""
    has = df["epoch"].notna().to_numpy()
    if not has.all():
        skipped["no_step"] = skipped.get("no_step", 0) + int((~has).sum())
        df = df[has].copy()
    df["step"] = df["epoch"].astype("float64")
    df["step_source"] = "epoch"
    return _finite_steps(df, skipped)


def _typed_records(df: Any, path: str, fmt: str, skipped: dict[str, int]) -> Any:
    """The records frame with its bookkeeping columns present and typed: ``step_source``
    (``none`` when missing), ``is_eval`` bool, ``rank`` int64, ``step`` float64."""
    import numpy as np
    import pandas as pd

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
    return df


def _step_table(df: Any, rank: int | str) -> tuple[Any, dict[str, Any]]:
    """One row per step (per rank and step with ``rank="all"``), the later value of each
    metric winning, and where each metric was printed as NaN/inf (the
    :attr:`RunLog.logged_nan` masks).  A field only dropped records had leaves no column."""
    import numpy as np
    import pandas as pd

    keys = ["rank", "step"] if rank == "all" else ["step"]
    bookkeeping = ("line", "rank", "step", "step_source", "is_eval", "attach", "step_total")
    metrics = [c for c in df.columns if c not in bookkeeping]
    for c in metrics:
        if df[c].dtype != np.float64:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    marks = _logged_nan_marks(df, metrics)
    if marks:
        df = df.assign(**marks)
    steps = df["step"].to_numpy().astype(np.int64)  # (NaN, inf and 1e30 were dropped)
    table = _one_row_per_step(df, steps, keys, [*metrics, *marks], rank)
    logged_nan = {
        c: (table.pop(m).to_numpy() == 1.0) & np.isnan(table[c].to_numpy())
        for c, m in zip(metrics, [_MARK + c for c in metrics], strict=True)
        if m in marks
    }
    logged_nan = {c: m for c, m in logged_nan.items() if m.any()}
    # Fields only dropped records had (a banner's `model params 264320`) leave no column.
    table = table.drop(
        columns=[
            c
            for c in metrics
            if c not in CANONICAL_COLUMNS and c not in logged_nan and table[c].isna().all()
        ]
    )
    missing = [c for c in CANONICAL_COLUMNS if c not in table]
    if missing:  # (at once: one insert per column fragments a wide frame, and pandas warns)
        import pandas as pd

        table = pd.concat([table, pd.DataFrame(np.nan, index=table.index, columns=missing)], axis=1)
    return table, logged_nan


def _canonical_order(table: Any, rank: int | str) -> Any:
    """The canonical columns first (``rank`` before them with ``rank="all"``), the others
    sorted; ``step`` and ``rank`` int64, the rest float64; a fresh 0-based index."""
    import numpy as np

    ordered = list(CANONICAL_COLUMNS)
    if rank == "all":
        ordered.insert(0, "rank")
    others = sorted(c for c in table.columns if c not in ordered)
    table = table[ordered + others]
    want = {c: np.dtype("int64" if c in ("step", "rank") else "float64") for c in table}
    if convert := {c: t for c, t in want.items() if table[c].dtype != t}:
        table = table.astype(convert)
    return table.reset_index(drop=True)


def _tokens_from_running_total(table: Any) -> Any:
    """Per-step ``tokens`` from a running total ``tokens_seen`` (HF
    ``num_input_tokens_seen``, TRL ``num_tokens``): ``tokens[s] = tokens_seen[s] -
    tokens_seen[s - 1]``, counted from 0 before step 1.  Exact only when every step from
    1 on was logged with its total (``logging_steps=1``) and the log has ``tokens`` of
    its own nowhere; otherwise ``tokens`` stays as it was (NaN: a difference over several
    steps is no step's tokens)."""
    import numpy as np

    tokens = table["tokens"]
    if "tokens_seen" not in table or tokens.notna().any() or not len(table):
        return tokens
    seen = table["tokens_seen"].to_numpy()
    steps = table["step"].to_numpy()
    if np.isnan(seen).any() or not np.array_equal(steps, np.arange(1, len(steps) + 1)):
        return tokens
    return np.diff(seen, prepend=0.0)


#: Prefix of the helper columns that carry "logged as NaN" through the grouping.
_MARK = "\0logged_nan:"


def _logged_nan_marks(df: Any, metrics: list[str]) -> dict[str, Any]:
    """For each metric with a value the log printed as NaN (:data:`~.names.LOGGED_NAN`,
    set by the readers), a helper column: 1.0 on those records, NaN elsewhere.  Grouping
    keeps the last non-NaN value per step, so after it the mark says "some record of this
    step printed NaN", and the step's value being NaN says none printed a number."""
    import numpy as np

    marks = {}
    for c in metrics:
        printed = is_logged_nan(df[c].to_numpy())
        if printed.any():
            marks[_MARK + c] = np.where(printed, 1.0, np.nan)
    return marks


def _one_row_per_step(df: Any, steps: Any, keys: list[str], columns: list[str], rank: Any) -> Any:
    """The records' ``columns`` with one row per step (per rank and step with
    ``rank="all"``), sorted; for a step logged more than once, the last non-NaN value of
    each column (rule 3 of :func:`build_table`)."""
    import pandas as pd

    if rank != "all" and (len(steps) < 2 or bool((steps[1:] > steps[:-1]).all())):
        # Already one row per step, in order (the common case): no grouping needed.
        # (built from the arrays: setting int steps into the records' frame copies more)
        arrays = {"step": steps} | {c: df[c].to_numpy() for c in columns}
        return pd.DataFrame(arrays, copy=False)
    df = df.assign(step=steps)
    order = _one_row_per_key(df["rank"].to_numpy(), steps) if rank == "all" else None
    if order is not None:
        return df[[*keys, *columns]].take(order).reset_index(drop=True)
    return df.groupby(keys, sort=True)[columns].last().reset_index()


def _one_row_per_key(ranks: Any, steps: Any) -> Any | None:
    """The row order by (rank, step) when every (rank, step) has one row (then grouping
    would only sort), else None."""
    import numpy as np

    if len(ranks) and 0 <= ranks.min() and ranks.max() < 1 << 15:
        # a stable radix sort by rank keeps each rank's rows in log order: that is the
        # (rank, step) order when each rank's steps ascend (the common case)
        by_rank = np.argsort(ranks.astype(np.int16), kind="stable")
        r, s = ranks[by_rank], steps[by_rank]
        if len(r) < 2 or ((r[1:] != r[:-1]) | (s[1:] > s[:-1])).all():
            return by_rank
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


def _assign_steps(df: Any, best: str, skipped: dict[str, int], single_source: bool) -> Any:
    """Give every kept record an integer step (rule 1 of :func:`build_table`).

    :param single_source: every record's step comes from ``best``.
    """
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
    if single_source and _all_below(df["step"].to_numpy(), MAX_STEP):
        return df  # every record has its own step (the common case): nothing to attach
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


#: Steps at or beyond this magnitude are no step counter (``step=1e30``): a float64
#: holds every integer below it exactly, and an int64 every one.
MAX_STEP = 2.0**53


def _all_below(a: Any, limit: float) -> bool:
    """Whether every value of a float array is finite and below ``limit`` in magnitude
    (two reductions, no temporary; NaN fails: its comparisons are False)."""
    return bool(len(a)) and bool(-limit < a.min()) and bool(a.max() < limit)


def _finite_steps(df: Any, skipped: dict[str, int]) -> Any:
    """Drop records whose step is NaN, infinite or at least :data:`MAX_STEP` in
    magnitude (reason ``bad_step``)."""
    import numpy as np

    with np.errstate(invalid="ignore"):
        finite = np.abs(df["step"].to_numpy()) < MAX_STEP  # (False for NaN)
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
