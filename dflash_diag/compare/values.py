"""Which cells of a log are values, which are absent, which are logged failures.

A metric not logged at a step is absent (``eval_loss`` on the steps between
evaluations): it is neither a value nor a failure.  A value logged as ``nan`` or
``inf`` is a numerical failure, and is reported (count, first step), never dropped
silently.  The reader marks the two apart (:attr:`RunLog.logged_nan
<dflash_diag.data.RunLog.logged_nan>`); :func:`logged_nonfinite` uses those marks, and
guesses from the table alone only for a table that did not come from a reader.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .results import NonFinite

if TYPE_CHECKING:
    import pandas as pd

#: Names of metrics logged at their own cadence (evaluation), never training columns.
EVAL_PREFIXES: tuple[str, ...] = ("eval_", "val_", "valid_", "validation_", "test_")
#: Columns that say where a record is, not what training did.
_BOOKKEEPING = frozenset({"step", "epoch", "rank", "elapsed"})


def _cells(table: pd.DataFrame, name: str) -> np.ndarray:
    return np.asarray(table[name].to_numpy(dtype=float, na_value=np.nan), dtype=float)


def _is_training(name: str) -> bool:
    low = str(name).lower()
    return low not in _BOOKKEEPING and not low.startswith(EVAL_PREFIXES) and "eval" not in low


def _every_training_row(present: np.ndarray) -> bool:
    """Logged on consecutive training rows (at least half its row gaps are 1), not on
    every N-th of them."""
    idx = np.flatnonzero(present)
    return idx.size >= 2 and float(np.mean(np.diff(idx) == 1)) >= 0.5


def logged_nonfinite(
    table: pd.DataFrame, name: str, printed_nan: dict[str, np.ndarray] | None = None
) -> np.ndarray:
    """Per row of ``table``: True where ``name`` was logged as ``nan``/``inf``.

    With ``printed_nan`` (the reader's marks, per column a bool per row: see
    :attr:`RunLog.logged_nan <dflash_diag.data.RunLog.logged_nan>`) that is exact:
    ``+-inf`` or a printed NaN.  Without it (a table from elsewhere) it is guessed:

    - ``+-inf``: logged non-finite.
    - NaN: absent, unless ``name`` is a training metric (not an eval/val/test metric)
      logged on every training row (at least half the gaps between its present cells
      are one row, among the rows with any training column) and another such every-row
      training column (lr, loss, grad_norm, ...) is present on that row: the record was
      there, and its ``name`` was nan.

    A metric logged every N-th training row (per-position acc every 10 steps) and
    evaluation metrics are absent where NaN.  A metric NaN on every row reads as not
    logged: the table has a column for every canonical metric, logged or not, so only
    the reader could tell a log of nothing but ``loss=nan`` from a log without loss.

    >>> import pandas as pd
    >>> t = pd.DataFrame({"step": [1, 2, 3, 4], "loss": [2.0, float("nan"), 1.8, 1.7],
    ...                   "lr": [1e-4, 1e-4, 1e-4, float("nan")],
    ...                   "eval_loss": [float("nan"), float("nan"), float("inf"), 2.1]})
    >>> logged_nonfinite(t, "loss").tolist(), logged_nonfinite(t, "eval_loss").tolist()
    ([False, True, False, False], [False, False, True, False])
    """
    if name not in table.columns:
        return np.zeros(len(table), dtype=bool)
    v = _cells(table, name)
    bad = np.isinf(v)
    if printed_nan is not None:
        marked = printed_nan.get(name)
        return bad if marked is None else bad | (np.asarray(marked, dtype=bool) & np.isnan(v))
    missing = np.isnan(v)
    if not (_is_training(name) and missing.any()):
        return bad
    from pandas.api.types import is_numeric_dtype

    cols = [
        c for c in table.columns if c != name and _is_training(c) and is_numeric_dtype(table[c])
    ]
    present = {c: ~np.isnan(_cells(table, c)) for c in cols}
    present[name] = ~missing
    rows = np.logical_or.reduce(list(present.values()))  # rows of a training record
    every = {c: _every_training_row(p[rows]) for c, p in present.items()}
    if not every[name]:
        return bad
    others = [present[c] for c in cols if every[c]]
    if not others:
        return bad
    return bad | (missing & np.logical_or.reduce(others))


def nonfinite_summary(steps: np.ndarray, bad: np.ndarray) -> NonFinite:
    """How many steps logged non-finite values (``bad``) and the first of them."""
    hit = np.flatnonzero(bad)
    return NonFinite(int(hit.size), int(steps[hit[0]]) if hit.size else None)
