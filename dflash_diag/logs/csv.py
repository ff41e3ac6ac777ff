"""CSV and TSV metric tables: Lightning ``metrics.csv``, W&B exports, plain step tables.

* Lightning's ``CSVLogger`` writes sparse rows (train and validation metrics on rows
  of their own, several rows per step); rows of the same step are merged.
* A W&B UI export has ``Step`` and ``<run name> - <metric>`` columns (plus
  ``__MIN``/``__MAX`` band columns, dropped); the run name is taken off.  A W&B
  history written by pandas (``run.history().to_csv(f)``) has ``_step`` and the
  metrics' own names, after pandas' row index (no header, rows 0, 1, ...: dropped).
* Anything else with a header row and numeric columns: a ``step`` column gives the step,
  else the row order does.
"""

from __future__ import annotations

import io
import math
import re
from typing import Any

from ..data import RunLog
from ..errors import InputError
from .fields import takes_step
from .io import RawLog, decode
from .names import EVAL_PREFIXES, LOGGED_NAN, NEUTRAL, canonical_name, is_logged_nan
from .normalise import build_table

_WANDB_COL = re.compile(r"^(?P<run>.+?) - (?P<metric>.+)$")


def sniff_delimiter(header: str) -> str:
    """Tab, semicolon or comma: whichever the header line has most of."""
    counts = {d: header.count(d) for d in ("\t", ";", ",")}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else ","


#: A cell that holds a printed NaN (pandas reads it, and an empty cell, as NaN alike).
#: A printed NaN cell.  A tab is a separator or a blank, never both: a cell after a tab
#: may be padded with spaces only, so a run of tabs is not matched in quadratic time.
_NAN_CELL = re.compile(r"(?:(?:^|[,;])[ \t]*|\t *)[-+]?(?:nan|NaN|NAN)[ \t]*(?=[,;\t\r]|$)", re.M)


def _frame(text: str, sep: str, **options: Any) -> Any:
    """The CSV text as pandas reads it here: BOM dropped, bad and blank lines skipped.

    ``index_col=False``: a first row longer than the header is not made an index of its
    leading cells (a 60,000-level MultiIndex took minutes); its extra cells are dropped.
    """
    import warnings

    import pandas as pd

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pd.errors.ParserWarning)
        return pd.read_csv(
            io.StringIO(text.lstrip("\ufeff")),
            sep=sep,
            on_bad_lines="skip",
            skip_blank_lines=True,
            index_col=False,
            **options,
        )


def _printed_nan(text: str, sep: str, df: Any) -> dict[Any, Any]:
    """Column -> bool per row of ``df``: the cell was printed as ``nan`` (a logged
    NaN), not left empty (not logged there).  Read again as text, the same rows."""

    cells = _frame(text, sep, dtype=str, keep_default_na=False, na_filter=False)
    if cells.shape != df.shape:
        return {}  # (cannot line the two reads up: every NaN stays "not logged")
    out = {}
    for c in df.columns:
        if c in cells.columns and df[c].dtype.kind == "f":
            words = cells[c].str.strip().str.lstrip("+-").str.lower()
            mask = (words == "nan").to_numpy()
            if mask.any():
                out[c] = mask
    return out


def metrics_file_in(folder: str) -> str | None:
    """The ``metrics.csv`` a Lightning ``CSVLogger`` wrote under ``folder``: the folder's
    own (a ``version_N/`` folder), or its only ``version_*/metrics.csv`` (the logger's
    root); None when ``folder`` is no folder or holds neither.

    :raises InputError: several versions under the folder (which one is the user's)."""
    from pathlib import Path

    p = Path(folder)
    if not p.is_dir():
        return None
    if (p / "metrics.csv").is_file():
        return str(p / "metrics.csv")
    found = sorted(f.parent.name for f in p.glob("version_*/metrics.csv") if f.is_file())
    if len(found) > 1:
        shown = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
        raise InputError(folder, f"{len(found)} CSVLogger versions ({shown})", "give one's folder")
    return str(p / found[0] / "metrics.csv") if found else None


def _rename(columns: list[str], path: str) -> dict[str, str]:
    """Column -> canonical name; W&B ``run - metric`` columns lose the run name."""
    runs = {m.group("run") for c in columns if (m := _WANDB_COL.match(c))}
    if len(runs) > 1:
        shown = ", ".join(r if len(r) <= 30 else r[:27] + "..." for r in sorted(runs)[:3])
        raise InputError(
            path, f"{len(runs)} runs in one export ({shown}...)", "export one run per file"
        )
    out = {}
    for c in columns:
        m = _WANDB_COL.match(c)
        metric = m.group("metric") if m else c
        out[c] = canonical_name(metric)
    return out


def _cell_float(value: Any) -> float:
    """One cell as a float, NaN for no number.  pandas keeps an integer too large for
    int64 as a Python int (an object column), which ``float()`` refuses beyond ~1e308:
    such an int is +-inf, as the same digits in a float's spelling would be."""
    if isinstance(value, bool) or value is None:
        return math.nan
    if isinstance(value, int):
        return float(value) if abs(value) < 2**1000 else (math.inf if value > 0 else -math.inf)
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def numeric_column(column: Any) -> Any:
    """A column's values as float64 (NaN where a cell holds no number); columns of
    cells pandas left as objects are read one distinct cell at a time."""
    import numpy as np
    import pandas as pd

    if column.dtype != object:
        return pd.to_numeric(column, errors="coerce")
    codes, uniques = pd.factorize(column, use_na_sentinel=True)
    table = np.array([_cell_float(u) for u in uniques] + [np.nan], dtype=np.float64)
    return pd.Series(table[codes], index=column.index, name=column.name)


def _is_row_index(df: Any) -> bool:
    """Whether the first column is pandas' row index, as ``DataFrame.to_csv`` writes it
    (``run.history().to_csv(f)``): no header, and the rows numbered 0, 1, 2, ..."""
    import numpy as np

    if not len(df.columns) or not str(df.columns[0]).startswith("Unnamed: 0"):
        return False
    first = df[df.columns[0]].to_numpy()
    return first.dtype.kind in "iu" and bool((first == np.arange(len(first))).all())


def read_csv(raw: RawLog, rank: int | str = 0) -> RunLog:
    """Read a CSV/TSV metrics table into a RunLog.

    :raises InputError: no header, no numeric column.
    """
    import numpy as np
    import pandas as pd

    text, bad = decode(raw.data)
    header = text.lstrip("\ufeff").split("\n", 1)[0]
    sep = sniff_delimiter(header)
    try:
        df = _frame(text, sep, low_memory=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as e:
        raise InputError(
            raw.path, f"cannot read as CSV ({e})", "check the delimiter and header"
        ) from None
    n_lines = len(df)
    skipped: dict[str, int] = {}
    if bad:
        skipped["bad_bytes"] = bad
    expected = max(0, text.count("\n") - 1 - text.count("\n\n"))
    if expected > n_lines:
        skipped["bad_record"] = expected - n_lines
    drop = [c for c in df.columns if str(c).endswith(("__MIN", "__MAX"))]
    if _is_row_index(df):
        drop.append(df.columns[0])
    df = df.drop(columns=drop)
    names = _rename([str(c) for c in df.columns], raw.path)
    printed = _printed_nan(text, sep, df) if _NAN_CELL.search(text) else {}
    cols: dict[str, Any] = {}
    step_key = ""
    for c in df.columns:
        values = numeric_column(df[c])
        if c in printed:
            # (np.where: pandas' mask would store its own NaN, not this one)
            values = pd.Series(np.where(printed[c], LOGGED_NAN, values), index=values.index)
        if values.notna().sum() == 0:
            continue
        name = names[str(c)]
        if name == "step" and "step" in cols and takes_step(str(c), step_key):
            cols[name] = values.fillna(cols[name])  # (a trainer's step over W&B's)
            step_key = str(c)
        else:
            step_key = str(c) if name == "step" and not step_key else step_key
            cols[name] = values if name not in cols else cols[name].fillna(values)
    if not cols or all(k in NEUTRAL for k in cols):
        only = f" (only {', '.join(cols)}: a step's context, not a metric)" if cols else ""
        raise InputError(
            raw.path,
            f"no numeric metric columns{only}",
            "expected a header row such as 'step,loss' and numbers below it",
        )
    table = pd.DataFrame(cols)
    table["line"] = np.arange(2, len(table) + 2)  # line 1 is the header
    if "rank" not in table:
        table["rank"] = 0
    metric_cols = [c for c in cols if c not in NEUTRAL]
    present = table[metric_cols].notna() | is_logged_nan(table[metric_cols].to_numpy(np.float64))
    evalish = np.array([c.startswith(EVAL_PREFIXES) for c in metric_cols])
    has_train = present.loc[:, ~evalish].any(axis=1) if (~evalish).any() else False
    table["is_eval"] = present.any(axis=1) & ~has_train
    empty = ~present.any(axis=1)
    if empty.any():
        skipped["text"] = int(empty.sum())
        table = table[~empty]
    if "step" in table:
        table["step_source"] = np.where(table["step"].notna(), "field", "none")
    else:
        table["step_source"] = "none"
    return build_table(
        [],
        path=raw.path,
        fmt="csv",
        rank=rank,
        skipped=skipped,
        n_lines=n_lines + 1,
        extra=[table],
    )
