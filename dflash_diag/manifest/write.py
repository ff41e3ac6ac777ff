"""Write a :class:`~dflash_diag.data.Manifest` as a length manifest file:
``sample_id, length[, category]``, one row per sample in dataset order."""

from __future__ import annotations

import os
import tempfile
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


#: Rows per shard of :func:`write_shards` (about 80-160 MB of Parquet at most).
SHARD_ROWS = 10_000_000


def write_shards(
    m: Manifest, folder: str | os.PathLike[str], force: bool = False, rows: int = SHARD_ROWS
) -> list[Path]:
    """Write ``m`` as Parquet shards ``part-00000-of-0000N.parquet`` in ``folder``, each
    of ``rows`` samples (the last fewer), in dataset order: read back as a folder
    (:func:`~dflash_diag.manifest.read_manifest`), sorted names give the same manifest.
    Written in a temporary folder beside it, renamed into place once complete.

    :param force: replace an existing folder (else an InputError, nothing written).
    :raises InputError: an empty manifest, an existing folder without ``force``, a file
        where the folder would go.
    """
    import shutil

    import pyarrow.parquet as pq

    p = Path(folder)
    if p.exists() and not (force and p.is_dir()):
        hint = "add --force to replace it" if p.is_dir() else "give a folder name"
        raise InputError(str(p), "already exists", hint)
    if len(m) == 0:
        raise InputError(m.path, "holds no samples", "nothing written")
    table = manifest_table(m)
    n = max(1, -(-table.num_rows // rows))
    tmp = Path(tempfile.mkdtemp(prefix=f".{p.name}.", dir=p.parent))
    try:
        dictionary = ["category"] if "category" in table.column_names else False
        for i in range(n):
            part = table.slice(i * rows, rows)
            pq.write_table(
                part, tmp / f"part-{i:05d}-of-{n:05d}.parquet", use_dictionary=dictionary
            )
        tmp.chmod(0o777 & ~_umask())
        if p.exists():
            old = p.with_name(f".{p.name}.old")
            os.replace(p, old)
            os.replace(tmp, p)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, p)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return sorted(p.glob("part-*.parquet"))


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask
