"""Write a :class:`~dflash_diag.data.Manifest` as a length manifest file:
``sample_id, length[, category]``, one row per sample in dataset order."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..data import Manifest
from ..errors import InputError
from ..outpath import atomic_output

#: Output extensions and their format.
WRITE_SUFFIXES = (".parquet", ".csv")


def manifest_table(m: Manifest) -> Any:
    """The manifest as a ``pyarrow.Table``: ``sample_id`` (int64), ``length`` (int64,
    tokens) and, when there are categories, ``category`` (dictionary-encoded text; the
    source column's name is not kept, so reading it back finds it)."""
    import pyarrow as pa

    cols: dict[str, Any] = {"sample_id": pa.array(m.ids), "length": pa.array(m.lengths)}
    if m.categories is not None:
        names = pa.array(list(m.category_names), pa.string())
        cols["category"] = pa.DictionaryArray.from_arrays(pa.array(m.categories, pa.int32()), names)
    return pa.table(cols)


def write_manifest(m: Manifest, to: str | os.PathLike[str], force: bool = False) -> Path:
    """Write ``m`` to ``to`` (``.parquet`` or ``.csv``) atomically: a temporary file in
    the same folder, renamed over ``to`` once complete, so a reader never sees half a
    file and an interrupted run leaves the old one.

    :param force: replace an existing file (else an InputError, nothing written).
    :raises InputError: an empty manifest, an unknown extension, an existing file
        without ``force``.
    """
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    p = Path(to)
    if p.suffix.lower() not in WRITE_SUFFIXES:
        raise InputError(
            str(p), f"cannot write {p.suffix or 'no extension'!r}", "use .parquet or .csv"
        )
    if p.exists() and not force:
        raise InputError(str(p), "already exists", "add --force to replace it")
    if len(m) == 0:
        raise InputError(m.path, "holds no samples", "nothing written")
    table = manifest_table(m)
    with atomic_output(p, "manifest") as tmp:
        if p.suffix.lower() == ".parquet":
            # (dictionary pages for the category only: on the int columns they cost 4x)
            dictionary = ["category"] if "category" in table.column_names else False
            pq.write_table(table, tmp, use_dictionary=dictionary)
        else:
            pcsv.write_csv(table, tmp)
    return p
