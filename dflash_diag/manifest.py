"""Read a dataset's per-sample lengths: Parquet, CSV, JSONL or .npy -> :class:`Manifest`.

Row order is the dataset index, as ``enumerate(all_lens)`` in a training script: the
replay's sample ids are row positions.  A ``sample_id`` column, when present, is kept in
``Manifest.ids`` (it does not reorder anything).

The length column is the one named, or the first of :data:`LENGTH_COLUMNS` present; the
category column is the one named, or the first of :data:`CATEGORY_COLUMNS` present (none
is fine).  Only these columns are read from a Parquet file.
"""

from __future__ import annotations

import os
import tokenize
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InputError
from .records import Manifest

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

#: Length column names looked for, in this order.
LENGTH_COLUMNS: tuple[str, ...] = (
    "length",
    "len",
    "num_tokens",
    "n_tokens",
    "seq_len",
    "input_len",
)
#: Lengths are token counts in ``0..MAX_LENGTH`` (2**40: a trillion tokens), so sums and
#: products of them (padded tokens = samples x longest) stay inside int64.
MAX_LENGTH = 2**40
#: Category column names looked for when none is named.
CATEGORY_COLUMNS: tuple[str, ...] = ("source", "category")
ID_COLUMN = "sample_id"
#: Category name given to rows with no category value.
MISSING_CATEGORY = "(missing)"

_FORMATS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".npy": "npy",
}

Progress = Callable[[int, int], None]


def _format(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in (".gz", ".bz2", ".xz", ".zst") and len(suffixes) > 1:
        suffixes = suffixes[:-1]
    fmt = _FORMATS.get(suffixes[-1]) if suffixes else None
    if fmt is None:
        raise InputError(
            str(path),
            f"unknown manifest format {path.suffix or '(no extension)'!r}",
            "use .parquet, .csv, .tsv, .jsonl or .npy",
        )
    return fmt


def _rows(index: Any, limit: int = 5) -> str:
    items = [str(int(i)) for i in list(index[:limit])]
    more = f" and {len(index) - limit} more" if len(index) > limit else ""
    return ", ".join(items) + more


def _pick(
    path: Path, columns: list[str], named: str | None, candidates: tuple[str, ...], what: str
) -> str | None:
    if named is not None:
        if named not in columns:
            raise InputError(
                str(path),
                f"no column {named!r}",
                f"choose the {what} column from: {', '.join(columns)}",
            )
        return named
    for c in candidates:
        if c in columns:
            return c
    return None


def _columns_of(path: Path, fmt: str) -> list[str]:
    """The column names of the file, read without the data where the format allows."""
    import pandas as pd

    if fmt == "parquet":
        import pyarrow.parquet as pq

        return list(pq.ParquetFile(path).schema_arrow.names)
    if fmt in ("csv", "tsv"):
        sep = "\t" if fmt == "tsv" else ","
        return [str(c) for c in pd.read_csv(path, nrows=0, sep=sep).columns]
    raise AssertionError(fmt)  # pragma: no cover - only called for the formats above


def _read_table(path: Path, fmt: str, wanted: list[str] | None, progress: Progress | None) -> Any:
    """A DataFrame of the file (only ``wanted`` columns when given)."""
    import pandas as pd

    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(path)
        n = pf.num_row_groups
        tables = []
        for g in range(n):
            tables.append(pf.read_row_group(g, columns=wanted))
            if progress is not None:
                progress(g + 1, n)
        table = pa.concat_tables(tables) if tables else pf.schema_arrow.empty_table()
        # (the pandas metadata in a file's schema is not needed for a few columns, and a
        # damaged one would stop the conversion)
        return table.to_pandas(ignore_metadata=True)
    if fmt in ("csv", "tsv"):
        sep = "\t" if fmt == "tsv" else ","
        size = max(os.path.getsize(path), 1)
        chunks = []
        with open(path, "rb") as fh:
            reader = pd.read_csv(fh, usecols=wanted, sep=sep, chunksize=1_000_000)
            for chunk in reader:
                chunks.append(chunk)
                if progress is not None:
                    progress(min(fh.tell(), size), size)
        return pd.concat(chunks, ignore_index=True) if chunks else pd.DataFrame(columns=wanted)
    if fmt == "jsonl":
        return pd.read_json(path, lines=True, dtype=False)
    raise AssertionError(fmt)  # pragma: no cover


def _read_errors() -> tuple[type[BaseException], ...]:
    """What the format readers raise on a damaged file (Arrow's own errors included)."""
    import pyarrow as pa

    return (OSError, ValueError, EOFError, pa.ArrowException)


def _as_float(value: Any) -> float:
    """A cell as a float (NaN: not a number); ints too large for a float are +-inf."""
    import math

    if isinstance(value, bool) or value is None:
        return math.nan
    if isinstance(value, int):
        return float(value) if abs(value) < 2**1000 else (math.inf if value > 0 else -math.inf)
    if isinstance(value, (str, bytes)):
        try:
            return float(value)
        except ValueError:
            return math.nan
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return math.nan


def _numbers(s: pd.Series) -> Any:
    """The numbers of a column of cells (NaN where a cell holds none), exact for
    integer columns."""
    import numpy as np
    import pandas as pd

    if s.dtype.kind in "iuf":
        return s.to_numpy()
    if s.dtype.kind == "O":  # (cells of any type, lists from JSON too: one by one)
        return np.fromiter((_as_float(v) for v in s), np.float64, len(s))
    if pd.api.types.is_string_dtype(s.dtype):
        # each distinct cell once (a text column of a few repeated values is common)
        codes, uniques = pd.factorize(s, use_na_sentinel=True)
        table = np.array([_as_float(u) for u in uniques] + [np.nan], dtype=np.float64)
        return table[codes]
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _whole_numbers(
    path: Path, column: str, values: Any, what: str, bounds: tuple[int, int]
) -> np.ndarray:
    """int64 array of ``values``, or an InputError naming the rows that are missing, not
    numbers, not whole or outside ``bounds`` (inclusive), checked before the cast."""
    import numpy as np
    import pandas as pd

    s = pd.Series(values)
    if s.dtype == bool:
        raise InputError(str(path), f"column {column!r} holds true/false, not {what}", "")
    missing = np.flatnonzero(s.isna().to_numpy())
    if missing.size:
        raise InputError(
            str(path),
            f"column {column!r} has missing values at rows {_rows(missing)}",
            f"every sample needs its {what}",
        )
    arr = _numbers(s)
    shown = lambda rows: ", ".join(_cell(s.iloc[int(i)]) for i in rows[:3])  # noqa: E731
    if arr.dtype.kind == "f":
        not_number = np.flatnonzero(np.isnan(arr))
        if not_number.size:
            raise InputError(
                str(path),
                f"column {column!r} has non-numbers at rows {_rows(not_number)} "
                f"({shown(not_number)})",
                f"{what} must be whole numbers",
            )
        frac = np.flatnonzero(np.isfinite(arr) & (arr != np.floor(arr)))  # (inf: too big)
        if frac.size:
            raise InputError(
                str(path),
                f"column {column!r} has non-integer values at rows {_rows(frac)} ({shown(frac)})",
                f"{what} must be whole numbers",
            )
    lo, hi = bounds
    if arr.dtype.kind == "u":
        out = np.flatnonzero(arr > hi)
    elif arr.dtype.kind == "f":  # (hi + 1 as a float is exact: 2**63 rounds no value in)
        out = np.flatnonzero((arr < lo) | (arr >= float(hi + 1)))
    else:
        out = np.flatnonzero((arr < lo) | (arr > hi))
    if out.size:
        low = lo == 0 and arr.dtype.kind != "u" and bool((arr[out] < 0).any())
        kind = "negative lengths" if low and what == "lengths" else f"{what} outside {lo}..{hi}"
        hint = "lengths are token counts, 0 or more" if low else f"{what} must be in {lo}..{hi}"
        raise InputError(
            str(path), f"column {column!r} has {kind} at rows {_rows(out)} ({shown(out)})", hint
        )
    return np.asarray(arr, dtype=np.int64)


def _cell(value: Any) -> str:
    """A cell as shown in a message: text quoted, numbers plain, at most 24 characters."""
    text = repr(value) if isinstance(value, (str, bytes)) else str(value)
    return text if len(text) <= 24 else text[:21] + "..."


def _npy_header(path: Path) -> tuple[tuple[int, ...], Any]:
    """Shape and dtype of a .npy file, from its header alone, checked against the file's
    size before any memory is asked for."""
    import numpy as np

    fmt = np.lib.format
    size = path.stat().st_size
    try:
        with open(path, "rb") as fh:
            version = fmt.read_magic(fh)
            read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, _, dtype = read(fh)
            offset = fh.tell()
    except (ValueError, SyntaxError, EOFError, OverflowError, TypeError, tokenize.TokenError):
        raise InputError(
            str(path), "not a readable .npy file (its header is damaged)", "save it again"
        ) from None
    count = 1
    for d in shape:
        count *= d
    if count * dtype.itemsize > size - offset:
        raise InputError(
            str(path),
            f"the .npy header says shape {_short(shape)} ({count} items) but the file holds "
            f"{size - offset} bytes of data",
            "the file is cut short or damaged; save it again",
        )
    return shape, dtype


def _short(shape: tuple[int, ...]) -> str:
    text = str(shape)
    return text if len(text) <= 40 else text[:37] + "..."


def _npy(path: Path, length_column: str | None) -> tuple[Any, list[str]]:
    """A .npy file as a DataFrame: a 1-D array is the length column itself; a structured
    array's fields are columns."""
    import numpy as np
    import pandas as pd

    shape, dtype = _npy_header(path)
    if dtype.names is None and dtype.kind not in "iuf":
        raise InputError(
            str(path),
            f"holds {_kind_name(dtype)} (dtype {dtype.str}), not lengths",
            "save the lengths as an integer array",
        )
    if len(shape) != 1:
        raise InputError(str(path), f"expected a 1-D array of lengths, got shape {shape}", "")
    try:
        arr = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, OSError) as e:
        raise InputError(
            str(path), f"cannot read .npy ({e})", "save a plain numeric array"
        ) from None
    if arr.dtype.names:
        names = list(arr.dtype.names)
        return pd.DataFrame({name: _column(arr[name]) for name in names}), names
    name = length_column or "length"
    return pd.DataFrame({name: arr}), [name]


def _kind_name(dtype: Any) -> str:
    return {"U": "text", "S": "bytes", "O": "Python objects", "b": "true/false"}.get(
        dtype.kind, f"values of kind {dtype.kind!r}"
    )


def _column(values: np.ndarray) -> np.ndarray:
    """A structured array's field as a column.  A text field may hold 32-bit values that
    are no character (surrogates, or past U+10FFFF: a .npy does not check); Arrow-backed
    text would refuse them or keep bytes it cannot decode, so they become U+FFFD."""
    import numpy as np

    if values.dtype.kind != "U":
        return values
    points = np.ascontiguousarray(values).view(np.uint32).copy()
    bad = (points > 0x10FFFF) | ((points >= 0xD800) & (points < 0xE000))
    if bad.any():
        points[bad] = 0xFFFD
    return points.view(values.dtype)


def read_manifest(
    path: str | os.PathLike[str],
    length_column: str | None = None,
    category_column: str | None = None,
    progress: Progress | None = None,
) -> Manifest:
    """Read per-sample lengths (tokens) from a Parquet, CSV/TSV, JSONL or .npy file.

    :param path: the manifest; its extension picks the reader.
    :param length_column: the column of lengths (default: the first of
        :data:`LENGTH_COLUMNS` present).
    :param category_column: a column of categories such as ``source`` (default: the first
        of :data:`CATEGORY_COLUMNS` present, else none).  Missing values become the
        category ``(missing)``; names are sorted.
    :param progress: called as ``progress(done, total)`` while reading (row groups of a
        Parquet file, bytes of a CSV).
    :raises InputError: the file or a column is missing, or a length is missing,
        negative or not a whole number (naming the first rows, 0-based).

    >>> import numpy as np, tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "lens.npy"; np.save(p, np.array([3, 1, 2]))
    >>> read_manifest(p).lengths.tolist()
    [3, 1, 2]
    """
    import numpy as np

    p = Path(path)
    if p.is_dir():
        raise InputError(
            str(p),
            "is a folder, not a manifest file",
            "give one .parquet, .csv, .tsv, .jsonl or .npy file of per-sample lengths",
        )
    fmt = _format(p)
    if not p.is_file():
        raise InputError(str(p), "manifest not found", "check the path")
    try:
        if fmt == "npy":
            df, columns = _npy(p, length_column)
        elif fmt == "jsonl":
            df = _read_table(p, fmt, None, progress)
            columns = [str(c) for c in df.columns]
        else:
            columns = _columns_of(p, fmt)
            df = None
    except InputError:
        raise
    except _read_errors() as e:
        raise InputError(str(p), f"cannot read as {fmt} ({e})", "check the file") from None
    length_col = _pick(p, columns, length_column, LENGTH_COLUMNS, "length")
    if length_col is None:
        raise InputError(
            str(p),
            f"no length column (looked for {', '.join(LENGTH_COLUMNS)}); "
            f"columns are: {', '.join(columns) or '(none)'}",
            "name it with --length-column",
        )
    cat_col = _pick(p, columns, category_column, CATEGORY_COLUMNS, "category")
    has_id = ID_COLUMN in columns and ID_COLUMN not in (length_col, cat_col)
    if df is None:
        wanted = [length_col] + ([cat_col] if cat_col else []) + ([ID_COLUMN] if has_id else [])
        try:
            df = _read_table(p, fmt, wanted, progress)
        except _read_errors() as e:
            raise InputError(str(p), f"cannot read as {fmt} ({e})", "check the file") from None

    lengths = _whole_numbers(p, length_col, df[length_col], "lengths", (0, MAX_LENGTH))
    if has_id:
        ids = _whole_numbers(p, ID_COLUMN, df[ID_COLUMN], "sample ids", (-(2**63), 2**63 - 1))
        _check_unique(p, ids)
    else:
        ids = np.arange(len(lengths), dtype=np.int64)
    categories: np.ndarray | None = None
    names: tuple[str, ...] = ()
    if cat_col is not None:
        categories, names = _factorize(df[cat_col])
    return Manifest(
        path=str(path),
        lengths=lengths,
        ids=ids,
        categories=categories,
        category_names=names,
        length_column=length_col,
        category_column=cat_col,
    )


def _check_unique(path: Path, ids: np.ndarray) -> None:
    import numpy as np

    order = np.argsort(ids, kind="stable")
    dup = order[1:][ids[order][1:] == ids[order][:-1]]
    if dup.size:
        dup = np.sort(dup)
        raise InputError(
            str(path),
            f"column {ID_COLUMN!r} repeats ids at rows {_rows(dup)} (e.g. {int(ids[dup[0]])})",
            "each sample needs its own id",
        )


def _factorize(values: pd.Series) -> tuple[np.ndarray, tuple[str, ...]]:
    """Category codes (int32) and names, names sorted; missing values -> MISSING_CATEGORY.

    Factorises first (hashing, one pass) and turns only the distinct values into
    strings, so 10M rows of a few categories take well under a second.
    """
    import numpy as np
    import pandas as pd

    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    # (bytes, from a .npy of dtype S, are read as UTF-8 with bad bytes replaced)
    labels = [u.decode("utf-8", "replace") if isinstance(u, bytes) else str(u) for u in uniques]
    if (codes < 0).any():
        labels.append(MISSING_CATEGORY)
        codes = np.where(codes < 0, len(labels) - 1, codes)
    # Distinct labels may collide once stringified (1 and "1"): merge them, sorted by name.
    names, remap = np.unique(np.array(labels, dtype=object).astype(str), return_inverse=True)
    return remap[codes].astype(np.int32), tuple(str(n) for n in names)
