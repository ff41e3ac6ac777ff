"""Manifests and datasets at a URI (``s3://bkt/data/``, ``gs://.../*.parquet``), through
:mod:`dflash_diag.storage`.

Parquet files and folders or globs of Parquet shards are read in place: row groups and
only the columns asked for, by ranged reads.  Every other format (CSV, JSONL, ``.npy``,
Arrow files, a ``save_to_disk`` folder) is copied to a temporary folder first and read
there; messages then name the URI.  For a corpus of terabytes, use Parquet shards.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import InputError
from ..storage import (
    NOT_FOUND,
    Location,
    copy_file,
    display,
    has_glob,
    info,
    list_files,
    list_shards,
    locate,
    named,
)
from .shards import order_shards
from .sources import Source, parquet_shards

PARQUET = (".parquet", ".pq")


def uri_source(uri: str, split: str | None) -> Source | None:
    """The Source of a Parquet file, folder or glob of shards at ``uri``; None when the
    URI names another format or a ``save_to_disk`` folder (see :func:`local_copy`).

    :raises StorageError: the store cannot be read, or nothing is there.
    """
    shown = display(uri)
    if has_glob(uri):
        loc, files = list_shards(uri)
        return _shards(loc, [f[len(loc.path) :].lstrip("/") for f in files], split, "glob")
    loc = locate(uri)
    kind = info(loc)
    if kind == "missing":
        raise named(shown, NOT_FOUND)
    if kind == "file":
        if not loc.path.lower().endswith(PARQUET):
            return None
        if split is not None:
            raise InputError(shown, "--split applies to a dataset folder", "drop --split")
        return parquet_shards(shown, loc.fs, [loc.path], "Parquet file")
    rel = [f[len(loc.path) :].lstrip("/") for f in list_files(loc)]
    if "state.json" in rel or "dataset_dict.json" in rel:
        return None
    shards = [r for r in rel if r.lower().endswith(PARQUET)]
    if not shards:
        raise InputError(
            shown, "holds no .parquet shards, state.json or dataset_dict.json", "check the URI"
        )
    return _shards(loc, shards, split, "folder")


def _shards(loc: Location, rel: list[str], split: str | None, what: str) -> Source:
    chosen, note = order_shards(rel, split, loc.shown)
    base = loc.path.rstrip("/")
    paths = [f"{base}/{r}" for r in chosen]
    return parquet_shards(
        loc.shown,
        loc.fs,
        paths,
        f"{what} of {len(paths)} Parquet files, read in sorted file-name order ({note})",
    )


@contextmanager
def local_copy(uri: str) -> Iterator[str]:
    """A temporary local copy of the file or folder at ``uri`` (its path), removed after.

    :raises StorageError: the store cannot be read.
    """
    loc = locate(uri)
    tmp = tempfile.mkdtemp(prefix="dflash-diag-")
    try:
        name = loc.path.rstrip("/").rsplit("/", 1)[-1] or "data"
        target = os.path.join(tmp, name)
        if info(loc) == "file":
            copy_file(loc, loc.path, target)
        else:
            base = loc.path.rstrip("/")
            for f in list_files(loc):
                dest = os.path.join(target, *f[len(base) :].lstrip("/").split("/"))
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                copy_file(loc, f, dest)
        yield target
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def renamed(e: InputError, local: str, uri: str) -> InputError:
    """``e`` with the temporary copy's path replaced by the URI's."""
    shown = display(uri)
    path = e.path.replace(local, shown.rstrip("/")) if e.path.startswith(local) else e.path
    out: Any = type(e).__new__(type(e))
    InputError.__init__(out, path, e.what, e.hint, e.line)
    return out
