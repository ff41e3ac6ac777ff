"""A :class:`~.sources.Source`'s length column as numbers: list lengths of a token-id
column (offsets only, the ids are never turned into Python objects), ``attention_mask``
sums where the ids are padded, token counts of a text column, or the numbers themselves.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..data import Progress
from ..errors import InputError
from .sources import Source, clip, names
from .text import count_tokens, describe_tokenizer, load_tokenizer

#: A list column taken as the lengths when no length column is there.
IDS_COLUMN = "input_ids"
#: A text column taken when a tokenizer is given and no column is named.
TEXT_COLUMN = "text"
MASK_COLUMN = "attention_mask"


@dataclass(frozen=True)
class Lengths:
    """The columns read from a source: ``table`` (a DataFrame: the length column as
    numbers, NaN where missing, and the other columns asked for) and how the lengths
    were made (``how``, for the manifest's description)."""

    table: Any
    how: str


def kind_of(source: Source, column: str) -> str:
    """``list``, ``text`` or ``number``: how a column's values become lengths."""
    import pyarrow as pa

    t = source.schema.field(column).type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return "list"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text"
    return "number"


def pick_list_or_text(source: Source, tokenizer: str | None) -> str | None:
    """The column used when no length column is named or found: ``text`` when a
    tokenizer is given, else ``input_ids`` when it is a list column."""
    cols = source.columns
    if tokenizer is not None:
        return TEXT_COLUMN if TEXT_COLUMN in cols else None
    if IDS_COLUMN in cols and (
        kind_of(source, IDS_COLUMN) == "list" or str(source.schema.field(IDS_COLUMN).type) == "null"
    ):  # (a column of nulls only: read, so the missing rows are named)
        return IDS_COLUMN
    return None


def read_lengths(
    source: Source,
    column: str,
    others: list[str],
    progress: Progress | None = None,
    tokenizer: str | os.PathLike[str] | None = None,
    special_tokens: bool = True,
) -> Lengths:
    """Read ``column`` as lengths and ``others`` as they are, part by part.

    A list column gives ``len(row)`` per row; if it is padded (every row the same
    length) and an ``attention_mask`` list column is there, the mask sums instead.
    A text column needs ``tokenizer`` (a ``tokenizer.json``).
    """
    kind = kind_of(source, column)
    if tokenizer is not None and kind != "text":
        raise InputError(
            str(source.path),
            f"column {column!r} is not text",
            "name the text column with --length-column, or drop --tokenizer",
        )
    if kind == "text" and tokenizer is None:
        raise InputError(
            str(source.path),
            f"column {column!r} holds text, not lengths",
            "count its tokens: dflash-diag manifest DATA --tokenizer tokenizer.json --to FILE",
        )
    import pyarrow as pa

    total = len(source.parts)
    tok = load_tokenizer(tokenizer) if tokenizer is not None else None
    lens: list[Any] = []
    rest: list[Any] = []
    for i, part in enumerate(source.parts):
        t = part([column, *others])
        # (text: the bar moves per batch of texts, in thousandths of a part)
        tick = None if progress is None or kind != "text" else _scaled(progress, i, total)
        lens.append(_part_lengths(t.column(column), kind, tok, special_tokens, tick))
        rest.append(t.select(others))
        if progress is not None and tick is None:
            progress(i + 1, total)
    lengths = pa.chunked_array(lens, type=None if kind == "number" else pa.int64())
    how = {"list": f"ids per row of the list column {column!r}"}.get(kind, f"column {column!r}")
    if tok is not None and tokenizer is not None:
        how = describe_tokenizer(tok, tokenizer, special_tokens) + f" of column {column!r}"
    if kind == "list" and column != MASK_COLUMN and MASK_COLUMN in source.columns:
        padded = padded_to(lengths)
        if padded is not None and kind_of(source, MASK_COLUMN) == "list":
            lengths = _mask_sums(source, lengths)
            how = f"row sums of {MASK_COLUMN!r} (the rows of {column!r} are all padded to {padded})"
    if not others:  # (setting a column on an empty frame reindexes it: seconds at 10M rows)
        import pandas as pd

        return Lengths(pd.DataFrame({column: numbers_of(lengths)}, copy=False), f"lengths: {how}")
    table = pa.concat_tables(rest) if rest else pa.table({})
    df = table.to_pandas(ignore_metadata=True)
    df[column] = numbers_of(lengths)
    return Lengths(df, f"lengths: {how}")


def _scaled(progress: Progress, part: int, parts: int) -> Progress:
    """``progress`` for work inside part ``part`` of ``parts`` (in thousandths of a part)."""
    return lambda done, total: progress(part * 1000 + 1000 * done // max(total, 1), parts * 1000)


def _part_lengths(col: Any, kind: str, tok: Any, special: bool, tick: Progress | None) -> Any:
    """One part's lengths as an int64 Arrow array (null where the row is null)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if kind == "list":
        return pc.list_value_length(col).cast(pa.int64())
    if kind == "text":
        return pa.array(count_tokens(tok, col.to_pylist(), special, tick), type=pa.int64())
    return col  # (numbers: checked later, as the other formats' numbers are)


def padded_to(lengths: Any) -> int | None:
    """The one row length when every row has it (and there are rows), else None."""
    import pyarrow.compute as pc

    if len(lengths) == 0 or lengths.null_count:
        return None
    mm = pc.min_max(lengths)
    lo, hi = mm["min"].as_py(), mm["max"].as_py()
    return int(lo) if lo == hi else None


def _mask_sums(source: Source, lengths: Any) -> Any:
    """Per-row sums of the attention mask (a second pass, over that column only)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    sums = []
    for part in source.parts:
        col = part([MASK_COLUMN]).column(MASK_COLUMN).combine_chunks()
        mask_len = pc.list_value_length(col)
        values = pc.list_flatten(col).to_numpy(zero_copy_only=False).astype(np.int64)
        parents = pc.list_parent_indices(col).to_numpy(zero_copy_only=False)
        sums.append(np.bincount(parents, weights=values, minlength=len(col)).astype(np.int64))
        if mask_len.null_count or len(set(pc.unique(mask_len).to_pylist())) > 1:
            raise InputError(
                str(source.path),
                f"column {MASK_COLUMN!r} has rows of other lengths than the padded ids",
                "check the dataset, or name the length column with --length-column",
            )
    out = np.concatenate(sums) if sums else np.zeros(0, np.int64)
    if out.shape[0] != len(lengths):  # pragma: no cover - parts read twice differ
        raise InputError(str(source.path), "the dataset changed while it was read", "")
    return pa.chunked_array([pa.array(out)])


def numbers_of(lengths: Any) -> Any:
    """An Arrow column as numbers for the checks: int64 numpy without nulls, else a
    float column with NaN (missing) or, for other types, the cells as pandas has them."""
    import numpy as np
    import pyarrow as pa

    arr = lengths.combine_chunks() if isinstance(lengths, pa.ChunkedArray) else lengths
    if pa.types.is_integer(arr.type) and arr.null_count == 0:
        return arr.to_numpy().astype(np.int64, copy=False)
    return arr.to_pandas()


def no_length_column(source: Source, looked_for: tuple[str, ...]) -> InputError:
    """The error when no length column is found, pointing to what would work."""
    cols = source.columns
    text = TEXT_COLUMN in cols and kind_of(source, TEXT_COLUMN) == "text"
    lists = [c for c in cols if kind_of(source, c) == "list"]
    if lists:
        hint = f"name a list column of token ids with --length-column (e.g. {clip(lists[0], 40)})"
    elif text:
        hint = "count the text's tokens: dflash-diag manifest DATA --tokenizer tokenizer.json"
    else:
        hint = "name it with --length-column"
    return InputError(
        str(source.path),
        f"no length column (looked for {', '.join(looked_for)}, {IDS_COLUMN}); "
        f"columns are: {names(cols)}",
        hint,
    )
