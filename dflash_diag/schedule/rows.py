"""A replay's per-micro-batch sums without its sample ids: :func:`replay_rows`.

What :func:`~dflash_diag.batches.stats.schedule_stats` reads of a replay is, per
micro-batch in schedule order, its samples, token sum, sum of squares, longest length
and step, plus which compositions come back in the next epoch.  :func:`replay_rows`
walks the same epochs as :func:`~dflash_diag.schedule.replay.replay` (the same
shuffles, the same pool features, :func:`~dflash_diag.schedule.replay.replay_epochs`)
and keeps only those: no sample ids (8 bytes a sample an epoch), no tables.  On the
default schedule that is about 45 bytes a sample for 6 epochs instead of ~180.

Recurrence is counted epoch by epoch: the share of epoch ``e``'s micro-batches whose
composition comes back in epoch ``e + 1``.  A composition is its key (the sum of its
samples' :func:`~dflash_diag.schedule.replay.sample_keys`), which is what ``batch_id``
numbers; an epoch drawn from the same pool as the one before compares the pool's key
classes (one ``np.unique`` of the pool's keys, then a mask) instead of sorting the keys
of both epochs: the same counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..data import Manifest, Progress, ScheduleParams
from .replay import new_dropped, replay_epochs, replay_setup

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True, eq=False)
class ReplayRows:
    """Per micro-batch (in schedule order) what the schedule statistics read.

    :param params: the schedule replayed.
    :param n_samples: samples in the manifest.
    :param n: int64 samples of each micro-batch; ``total``: int64 sum of its (capped)
        lengths; ``sumsq``: float64 sum of their squares; ``longest``: int64 longest.
    :param step: int64 optimizer step of each micro-batch; None when every micro-batch
        is a step of its own and the steps count up by one (the rows' own order).
    :param first: the rows of the first epoch that has any (a slice or a boolean mask).
    :param epochs: how many distinct epochs have rows.
    :param recurrence: share of epoch-e micro-batches whose composition is trained on
        in the next epoch that has rows (pooled); None with fewer than two epochs.
    :param shares: per category name, each micro-batch's share of its samples in it
        (float64).
    :param category_names: the categories, in code order.
    :param dropped: as :attr:`~dflash_diag.data.Replay.dropped`.
    """

    params: ScheduleParams
    n_samples: int
    n: np.ndarray
    total: np.ndarray
    sumsq: np.ndarray
    longest: np.ndarray
    step: np.ndarray | None
    first: Any
    epochs: int
    recurrence: float | None
    shares: dict[str, np.ndarray] = field(default_factory=dict)
    category_names: tuple[str, ...] = ()
    dropped: dict[str, int] = field(default_factory=dict)


class _Recurrence:
    """Hits and batches seen for :attr:`ReplayRows.recurrence`, fed epoch by epoch."""

    def __init__(self) -> None:
        self.hits = 0
        self.seen = 0
        self.epochs = 0
        self.prev: tuple[int, np.ndarray, np.ndarray] | None = None  # pool, rows, their keys
        self.classes: tuple[int, np.ndarray] | None = None  # pool, key class of each batch

    def add(self, pool: int, keys: np.ndarray, chosen: np.ndarray) -> None:
        """One epoch with rows: pool ``pool``'s batches ``chosen``, of keys ``keys``."""
        import numpy as np

        mine = keys[chosen]
        if self.prev is not None:
            before, prev_rows, prev_keys = self.prev
            if before == pool:  # (one pool: its key classes and a mask, not a sort)
                if self.classes is None or self.classes[0] != pool:
                    self.classes = (pool, np.unique(keys, return_inverse=True)[1].reshape(-1))
                klass = self.classes[1]
                there = np.zeros(len(klass), dtype=bool)
                there[klass[chosen]] = True
                self.hits += int(np.count_nonzero(there[klass[prev_rows]]))
            else:
                self.hits += count_in(prev_keys, mine)
            self.seen += len(prev_rows)
        self.prev = (pool, chosen, mine)
        self.epochs += 1

    def share(self) -> float | None:
        return self.hits / self.seen if self.epochs >= 2 and self.seen else None


def count_in(values: np.ndarray, pool: np.ndarray) -> int:
    """``np.isin(values, pool).sum()`` by a binary search in ``pool`` sorted (two
    arrays of temporaries, where ``isin``'s sort of both makes about six)."""
    import numpy as np

    if not len(values) or not len(pool):
        return 0
    ordered = np.sort(pool)
    at = np.searchsorted(ordered, values)
    np.minimum(at, len(ordered) - 1, out=at)
    return int(np.count_nonzero(ordered[at] == values))


def replay_rows(
    source: Manifest | np.ndarray | Sequence[int],
    params: ScheduleParams,
    epochs: int | None = None,
    categories: Sequence[Any] | np.ndarray | None = None,
    progress: Progress | None = None,
) -> ReplayRows:
    """The schedule of :func:`~dflash_diag.schedule.replay.replay` (same arguments), as
    :class:`ReplayRows`: the same per-micro-batch values, without the sample ids.

    >>> import numpy as np
    >>> r = replay_rows(np.array([3, 1, 2, 2]), ScheduleParams(token_budget=4), epochs=2)
    >>> r.total.tolist(), r.step, r.recurrence
    ([3, 3, 2, 3, 2, 3], None, 1.0)
    """
    import numpy as np

    setup = replay_setup(source, params, epochs, categories)
    names = ["n", "tokens", "sumsq", "max", *(f"cat{k}" for k in range(len(setup.cat_names)))]
    cols = _Columns(setup.n_epochs)
    dropped = new_dropped()
    seen = _Recurrence()
    steps = _Steps()
    first_rows = 0
    for ep in replay_epochs(setup, params, dropped, progress):
        if not len(ep.chosen):
            continue
        for k in names:
            cols.append(k, ep.feats[k][ep.chosen])
        steps.add(cols, ep.rows["step"])
        seen.add(ep.pool_index, ep.feats["key"], ep.chosen)
        first_rows = first_rows or len(ep.chosen)
        del ep  # (its pool, before the next epoch makes one)
    step = None if steps.consecutive else cols.done("step", np.int64)
    done = {k: cols.done(k, np.float64 if k == "sumsq" else np.int64) for k in names}
    n = done["n"]
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = {
            name: np.true_divide(done[f"cat{k}"], n, dtype=np.float64)
            for k, name in enumerate(setup.cat_names)
        }
    return ReplayRows(
        params=params,
        n_samples=len(setup.lengths),
        n=n,
        total=done["tokens"],
        sumsq=done["sumsq"],
        longest=done["max"],
        step=step,
        first=slice(0, first_rows),
        epochs=seen.epochs,
        recurrence=seen.share(),
        shares=shares,
        category_names=setup.cat_names,
        dropped=dropped,
    )


class _Steps:
    """Each row's step, stored only once the steps stop being one a row, counting up
    without a gap (one micro-batch a step, no step dropped: the default)."""

    def __init__(self) -> None:
        self.consecutive = True
        self.start: int | None = None
        self.rows = 0

    def add(self, cols: _Columns, step: np.ndarray) -> None:
        import numpy as np

        if self.consecutive:
            begin = int(step[0]) if self.start is None else self.start + self.rows
            if int(step[0]) == begin and (len(step) < 2 or bool(np.all(np.diff(step) == 1))):
                self.start = begin if self.start is None else self.start
                self.rows += len(step)
                return
            self.consecutive = False
            if self.start is not None:  # the rows so far, which were not stored
                cols.append("step", np.arange(self.start, self.start + self.rows))
        cols.append("step", step)


class _Columns:
    """Row arrays filled epoch by epoch.  Each is allocated once, at its first epoch,
    for ``epochs x 1.25`` times that epoch's rows (pages never written cost no memory),
    and grown only when a later epoch has more rows than that leaves: no per-epoch
    pieces concatenated at the end (the pieces would stay in the heap: two copies)."""

    def __init__(self, epochs: int) -> None:
        self.epochs = epochs
        self.arrays: dict[str, np.ndarray] = {}
        self.used: dict[str, int] = {}

    def append(self, name: str, values: np.ndarray) -> None:
        import numpy as np

        a, at = self.arrays.get(name), self.used.get(name, 0)
        if a is None or at + len(values) > len(a):
            want = max(at + len(values), (len(values) * self.epochs * 5) // 4 + 16)
            grown = np.empty(want, dtype=values.dtype)
            if a is not None:
                grown[:at] = a[:at]
            a = self.arrays[name] = grown
        a[at : at + len(values)] = values
        self.used[name] = at + len(values)

    def done(self, name: str, dtype: Any) -> np.ndarray:
        """The filled part of ``name`` (empty, of ``dtype``, when nothing came)."""
        import numpy as np

        a = self.arrays.pop(name, None)
        return np.zeros(0, dtype=dtype) if a is None else a[: self.used[name]]
