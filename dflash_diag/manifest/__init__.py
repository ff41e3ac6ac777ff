"""Read a dataset's per-sample lengths -> :class:`Manifest`: a length manifest (Parquet,
Arrow, JSONL, CSV/TSV, .npy) or a dataset itself (a list column of token ids, a Hugging
Face ``save_to_disk`` folder, a folder of Parquet shards, a text column + tokenizer.json).

Row order is the dataset index, as ``enumerate(all_lens)`` in a training script: the
replay's sample ids are row positions.  A ``sample_id`` column, when present, is kept in
``Manifest.ids`` (it does not reorder anything).

The length column is the one named, or the first of :data:`LENGTH_COLUMNS` present, else
``input_ids`` as a list column; the category column is the one named, or the first of
:data:`CATEGORY_COLUMNS` present (none is fine).  Only these columns are read from
Parquet and Arrow data.  Error lines name rows and the kind of their cells, never a
cell's whole content.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..data import Manifest, Progress
from ..errors import InputError
from ..limits import JSON_OBJECT_COST, check_fits, check_line_claims
from ..storage import display, has_glob, is_uri, local_path, uri_text
from .columns import IDS_COLUMN, kind_of, no_length_column, pick_list_or_text, read_lengths
from .npy import read_npy
from .remote import local_copy, renamed, uri_source
from .sources import ARROW_SUFFIXES, Source, clip, jsonl_file, names, open_source

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
    **dict.fromkeys(ARROW_SUFFIXES, "arrow"),
}


def _format(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in (".gz", ".bz2", ".xz", ".zst") and len(suffixes) > 1:
        suffixes = suffixes[:-1]
    fmt = _FORMATS.get(suffixes[-1]) if suffixes else None
    if fmt is None:
        raise InputError(
            str(path),
            f"unknown manifest format {path.suffix or '(no extension)'!r}",
            "use .parquet, .arrow, .feather, .jsonl, .csv, .tsv or .npy, or a dataset folder",
        )
    return fmt


def _rows(index: Any, limit: int = 5) -> str:
    items = [str(int(i)) for i in list(index[:limit])]
    more = f" and {len(index) - limit} more" if len(index) > limit else ""
    return ", ".join(items) + more


def _pick(
    path: Path | str, columns: list[str], named: str | None, candidates: tuple[str, ...], what: str
) -> str | None:
    if named is not None:
        if named not in columns:
            raise InputError(
                str(path),
                f"no column {clip(named, 60)!r}",
                f"choose the {what} column from: {names(columns)}",
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
        # (a Python object per cell: the costliest way to read a file, so bounded first)
        check_fits(os.path.getsize(path) * JSON_OBJECT_COST, str(path), "reading it")
        data = Path(path).read_bytes()
        check_line_claims(data, str(path), JSON_OBJECT_COST, "manifest row")
        return pd.read_json(io.BytesIO(data), lines=True, dtype=False)
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
    path: Path | str, column: str, values: Any, what: str, bounds: tuple[int, int]
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
    """A cell as shown in a message: text quoted, numbers plain, at most 24 characters;
    a list or an object by its kind (never its content)."""
    kind = _kind(value)
    if kind not in ("a number", "text"):
        return kind
    text = repr(value) if isinstance(value, (str, bytes)) else str(value)
    return text if len(text) <= 24 else text[:21] + "..."


def _kind(value: Any) -> str:
    """What a cell is, in a few words: ``a list of 3``, ``an object``, ``text``..."""
    if isinstance(value, (str, bytes)):
        return "text"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)) or getattr(value, "ndim", 0) == 1:
        return f"a list of {len(value)}"
    if value is None or (isinstance(value, float) and value != value):
        return "missing"
    if isinstance(value, bool):
        return "true/false"
    return "a number" if isinstance(value, (int, float)) or hasattr(value, "dtype") else "a value"


def _list_cells(path: Path | str, column: str, s: Any) -> Any:
    """``len(cell)`` of a column whose cells are mostly lists (JSON lines of mixed
    cells), or the column as it is; the rows that are not lists are named by kind."""
    import numpy as np

    if s.dtype.kind != "O" or len(s) == 0:
        return s
    is_list = np.fromiter((_kind(v).startswith("a list") for v in s), bool, len(s))
    if 2 * int(is_list.sum()) <= len(s):
        return s
    bad = np.flatnonzero(~is_list)
    if bad.size:
        kinds = sorted({_kind(s.iloc[int(i)]) for i in bad[:3]})
        raise InputError(
            str(path),
            f"column {column!r} is a list column, but rows {_rows(bad, 3)} are "
            f"{' / '.join(kinds)}, not a list",
            "each row needs its list of token ids",
        )
    return np.fromiter((len(v) for v in s), np.int64, len(s))


def read_manifest(
    path: str | os.PathLike[str],
    length_column: str | None = None,
    category_column: str | None = None,
    progress: Progress | None = None,
    *,
    split: str | None = None,
    tokenizer: str | os.PathLike[str] | None = None,
    special_tokens: bool = True,
) -> Manifest:
    """Read per-sample lengths (tokens) from a manifest or a dataset.

    Files: Parquet, Arrow IPC / Feather, JSONL, CSV/TSV, ``.npy``.  Folders: a Hugging
    Face ``datasets`` folder written by ``save_to_disk`` (a ``DatasetDict`` too: its
    ``train`` split, or ``split``) or a folder of Parquet shards (sorted file-name order).

    The lengths are a number column, else a list column of token ids (``input_ids``, or
    named): ``len(row)``, from the list offsets alone; where those rows are all padded
    to one length and an ``attention_mask`` list column is there, the mask's row sums.
    With ``tokenizer``, a text column's token counts.  ``Manifest.description`` says
    which.

    :param path: the manifest file or dataset folder; a file's extension picks the reader.
    :param length_column: the column of lengths (default: the first of
        :data:`LENGTH_COLUMNS` present, else ``input_ids``; with ``tokenizer``, ``text``).
    :param category_column: a column of categories such as ``source`` (default: the first
        of :data:`CATEGORY_COLUMNS` present, else none).  Missing values become the
        category ``(missing)``; names are sorted.
    :param progress: called as ``progress(done, total)`` while reading (row groups,
        shards or Arrow files of a dataset, bytes of a CSV).
    :param split: the split of a ``DatasetDict`` folder.
    :param tokenizer: a local ``tokenizer.json`` counting the tokens of a text column
        (needs the ``tokenizers`` package: ``dflash-diag[tokenize]``).
    :param special_tokens: with ``tokenizer``, count the special tokens it adds.
    :raises InputError: the file, folder or a column is missing, or a length is missing,
        negative or not a whole number (naming the first rows, 0-based).

    >>> import numpy as np, tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "lens.npy"; np.save(p, np.array([3, 1, 2]))
    >>> read_manifest(p).lengths.tolist()
    [3, 1, 2]
    """
    if is_uri(path) or has_glob(path):
        local = local_path(path)
        if local is None or _is_glob(local):
            options = (length_column, category_column, progress)
            return _read_uri(uri_text(path), options, split, tokenizer, special_tokens)
        path = local
    p = Path(path)
    if not p.exists():
        raise InputError(str(p), "manifest not found", "check the path")
    if p.is_dir():
        return _from_source(
            p,
            open_source(p, "folder", split),
            length_column,
            category_column,
            progress,
            tokenizer,
            special_tokens,
        )
    fmt = _format(p)
    if not p.is_file():
        raise InputError(str(p), "manifest not found", "check the path")
    if split is not None:
        raise InputError(str(p), "--split applies to a DatasetDict folder", "drop --split")
    source = _file_source(p, fmt)
    if source is not None:
        return _from_source(
            p, source, length_column, category_column, progress, tokenizer, special_tokens
        )
    if tokenizer is not None:
        raise InputError(
            str(p),
            f"--tokenizer reads a text column, not a {fmt} file",
            "give Parquet, JSONL, Arrow or a dataset folder",
        )
    return _from_table(p, fmt, length_column, category_column, progress)


def release_read_buffers() -> None:
    """Hand back to the system what pyarrow's pool kept after reading a manifest (~20
    bytes a sample: the pool keeps freed buffers for reuse); nothing when pyarrow was
    not needed.  Callers that go on to replay the schedule call it after the read."""
    import sys

    if "pyarrow" in sys.modules:
        sys.modules["pyarrow"].default_memory_pool().release_unused()


def _is_glob(local: str) -> bool:
    """A local path read as a glob of shards (a file named ``a[1].parquet`` is a file)."""
    return has_glob(local) and not os.path.exists(local)


def _read_uri(
    uri: str,
    options: tuple[str | None, str | None, Progress | None],
    split: str | None,
    tokenizer: str | os.PathLike[str] | None,
    special_tokens: bool,
) -> Manifest:
    """A manifest at a URI or a glob of shards: Parquet read in place, any other format
    from a temporary local copy (:mod:`.remote`)."""
    import dataclasses

    length_column, category_column, progress = options
    source = uri_source(uri, split)
    if source is not None:
        return _from_source(
            display(uri),
            source,
            length_column,
            category_column,
            progress,
            tokenizer,
            special_tokens,
        )
    with local_copy(uri) as local:
        try:
            m = read_manifest(
                local,
                length_column,
                category_column,
                progress,
                split=split,
                tokenizer=tokenizer,
                special_tokens=special_tokens,
            )
        except InputError as e:
            raise renamed(e, local, uri) from None
    return dataclasses.replace(m, path=display(uri))


def _file_source(p: Path, fmt: str) -> Any:
    """The columnar source of a Parquet, Arrow or JSONL file; None for the formats read
    through pandas (and for JSON lines of mixed cells, whose rows the checks then name)."""
    if fmt in ("parquet", "arrow"):
        return open_source(p, fmt)
    if fmt == "jsonl":
        try:
            return jsonl_file(p)
        except _read_errors():
            return None
    return None


def _from_table(
    p: Path,
    fmt: str,
    length_column: str | None,
    category_column: str | None,
    progress: Progress | None,
) -> Manifest:
    """A manifest read through pandas (CSV/TSV, ``.npy``, JSON lines of mixed cells): the
    columns are listed first, then only the wanted ones read."""
    try:
        if fmt == "npy":
            df, columns = read_npy(p, length_column)
        elif fmt == "jsonl":
            df = _read_table(p, fmt, None, progress)
            columns = [str(c) for c in df.columns]
        else:
            columns = _columns_of(p, fmt)
            df = None
    except InputError:
        raise
    except _read_errors() as e:
        raise InputError(
            str(p), f"cannot read as {fmt} ({clip(str(e))})", "check the file"
        ) from None
    length_col = _pick(p, columns, length_column, LENGTH_COLUMNS, "length")
    if length_col is None and IDS_COLUMN in columns:  # (JSON lines of mixed cells)
        length_col = IDS_COLUMN
    if length_col is None:
        raise InputError(
            str(p),
            f"no length column (looked for {', '.join(LENGTH_COLUMNS)}); "
            f"columns are: {names(columns)}",
            "name it with --length-column",
        )
    cat_col = _pick(p, columns, category_column, CATEGORY_COLUMNS, "category")
    if cat_col is not None and cat_col == length_col:
        raise InputError(
            str(p), f"the category column {cat_col!r} is the length column", "name another"
        )
    has_id = ID_COLUMN in columns and ID_COLUMN not in (length_col, cat_col)
    if df is None:
        wanted = [length_col] + ([cat_col] if cat_col else []) + ([ID_COLUMN] if has_id else [])
        try:
            df = _read_table(p, fmt, wanted, progress)
        except _read_errors() as e:
            raise InputError(
                str(p), f"cannot read as {fmt} ({clip(str(e))})", "check the file"
            ) from None
    return finish_manifest(
        p, df, length_col, cat_col, has_id, f"{fmt} file; lengths: column {length_col!r}"
    )


def _from_source(
    p: Path | str,
    source: Source,
    length_column: str | None,
    category_column: str | None,
    progress: Progress | None,
    tokenizer: str | os.PathLike[str] | None,
    special_tokens: bool,
) -> Manifest:
    """A manifest from a dataset read through Arrow (see :mod:`.sources`)."""
    length_col, cat_col, has_id = plan_columns(p, source, length_column, category_column, tokenizer)
    others = ([cat_col] if cat_col else []) + ([ID_COLUMN] if has_id else [])
    if cat_col is not None and source.as_codes is not None and kind_of(source, cat_col) == "text":
        # category names as codes and a few names a part (the same categories, their
        # names sorted by _factorize either way), not a string object a row
        source = source.as_codes((cat_col,))
    try:
        read = read_lengths(source, length_col, others, progress, tokenizer, special_tokens)
    except _read_errors() as e:
        raise InputError(str(p), f"cannot read ({clip(str(e))})", "check the data") from None
    if len(read.table) == 0:
        raise InputError(str(p), "holds no samples (0 rows)", "check the dataset or its split")
    return finish_manifest(
        p, read.table, length_col, cat_col, has_id, f"{source.description}; {read.how}"
    )


def plan_columns(
    p: Path | str,
    source: Source,
    length_column: str | None,
    category_column: str | None,
    tokenizer: str | os.PathLike[str] | None,
) -> tuple[str, str | None, bool]:
    """The columns a source's manifest is read from: ``(length column, category column or
    None, whether a sample_id column is read)``, as :func:`read_manifest` picks them."""
    columns = source.columns
    if tokenizer is not None:
        length_col = _pick(p, columns, length_column, (), "text") or pick_list_or_text(
            source, str(tokenizer)
        )
        if length_col is None:
            raise InputError(
                str(p),
                f"no 'text' column; columns are: {names(columns)}",
                "name the text column with --length-column",
            )
    else:
        length_col = _pick(p, columns, length_column, LENGTH_COLUMNS, "length")
        length_col = length_col or pick_list_or_text(source, None)
        if length_col is None:
            raise no_length_column(source, LENGTH_COLUMNS)
    cat_col = _pick(p, columns, category_column, CATEGORY_COLUMNS, "category")
    if cat_col is not None and cat_col == length_col:
        raise InputError(
            str(p), f"the category column {cat_col!r} is the length column", "name another"
        )
    has_id = ID_COLUMN in columns and ID_COLUMN not in (length_col, cat_col)
    return length_col, cat_col, has_id


def finish_manifest(
    p: Path | str, df: Any, length_col: str, cat_col: str | None, has_id: bool, description: str
) -> Manifest:
    """The Manifest of the columns read (``df``: the length column as numbers, the
    category and sample_id columns as read), checked as every reader's is."""
    import numpy as np

    column = _list_cells(p, length_col, df[length_col])
    lengths = _whole_numbers(p, length_col, column, "lengths", (0, MAX_LENGTH))
    if has_id:
        ids = _whole_numbers(p, ID_COLUMN, df[ID_COLUMN], "sample ids", (-(2**63), 2**63 - 1))
        _check_unique(p, ids)
    else:
        ids = np.arange(len(lengths), dtype=np.int64)
    categories: np.ndarray | None = None
    cat_names: tuple[str, ...] = ()
    if cat_col is not None:
        categories, cat_names = _factorize(df[cat_col])
    return Manifest(
        path=str(p),
        lengths=lengths,
        ids=ids,
        categories=categories,
        category_names=cat_names,
        length_column=length_col,
        category_column=cat_col,
        description=description,
    )


def _check_unique(path: Path | str, ids: np.ndarray) -> None:
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

    if isinstance(values.dtype, pd.CategoricalDtype):  # (read dictionary-encoded)
        codes, uniques = _used_categories(values)
    else:
        codes, uniques = pd.factorize(values, use_na_sentinel=True)
    # (bytes, from a .npy of dtype S, are read as UTF-8 with bad bytes replaced)
    labels = [u.decode("utf-8", "replace") if isinstance(u, bytes) else str(u) for u in uniques]
    if (codes < 0).any():
        labels.append(MISSING_CATEGORY)
        codes = np.where(codes < 0, len(labels) - 1, codes)
    # Distinct labels may collide once stringified (1 and "1"): merge them, sorted by name.
    names, remap = np.unique(np.array(labels, dtype=object).astype(str), return_inverse=True)
    if np.array_equal(remap, np.arange(len(remap))):  # (names read in sorted order)
        return codes.astype(np.int32), tuple(str(n) for n in names)
    return remap.astype(np.int32)[codes], tuple(str(n) for n in names)


#: Up to this many names :func:`_used_categories` looks for each in a pass of its own.
_FEW_CATEGORIES = 64


def _used_categories(values: pd.Series) -> tuple[np.ndarray, Any]:
    """``pd.factorize`` of a categorical column up to the order of the names: its own
    codes (-1 where missing) and the categories some row holds, renumbered ``0 .. k - 1``
    in their order (a dictionary may hold names no row uses).  :func:`_factorize` sorts
    the names after, so the order does not reach its answer."""
    import numpy as np

    codes = np.asarray(values.cat.codes)
    names = values.cat.categories
    if len(names) <= _FEW_CATEGORIES:  # (a pass a name: no count of int64s made)
        held = np.array([bool((codes == k).any()) for k in range(len(names))], dtype=bool)
    else:
        held = np.bincount(codes[codes >= 0], minlength=len(names)) > 0
    if held.all():
        return codes, names
    renumber = np.cumsum(held) - 1
    return np.where(codes >= 0, renumber[np.maximum(codes, 0)], -1), names[held]


def open_shards(data: str | os.PathLike[str], split: str | None = None) -> tuple[str, Source]:
    """``(data as shown, its Source)`` for a Parquet file or a folder or glob of Parquet
    shards, local or at a URI, in dataset order; what an engine that reads the shards
    elsewhere (:mod:`.ray_engine`) starts from.

    :raises InputError: ``data`` is not Parquet (name the local engine), or unreadable.
    """
    local = None if is_uri(data) and local_path(data) is None else local_path(data)
    if local is None or _is_glob(local):
        source = uri_source(uri_text(data), split)
    else:
        p = Path(local)
        if not p.exists():
            raise InputError(str(p), "dataset not found", "check the path")
        if p.is_dir():
            source = open_source(p, "folder", split)
        elif _format(p) == "parquet":
            source = uri_source(str(p.resolve()), split)
        else:
            source = None
    if source is None or not source.files:
        raise InputError(
            display(data),
            "the ray engine reads Parquet files and folders of Parquet shards",
            "use --engine local for this dataset",
        )
    return display(data), source
