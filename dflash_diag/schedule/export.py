"""A replayed schedule written out as a table: one row per (epoch, step, rank, micro,
sample), in schedule order, to ``.parquet`` or ``.csv`` (``dflash-diag batches
--export``), piece by piece so a 10M-sample, several-epoch schedule is never held whole.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .replay import CHUNK_SAMPLES

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from ..data import Replay


def schedule_tables(
    replay: Replay, ids: np.ndarray | None = None, chunk: int = CHUNK_SAMPLES
) -> Iterator[pd.DataFrame]:
    """:func:`schedule_table` in consecutive pieces of about ``chunk`` rows each, so a
    10M-sample, 6-epoch schedule can be written without holding 60M rows at once."""
    import numpy as np
    import pandas as pd

    offsets = np.asarray(replay.offsets, dtype=np.int64)
    counts = np.diff(offsets)
    micro = {c: replay.micro[c].to_numpy() for c in ("epoch", "step", "rank", "micro", "batch_id")}
    from ..arrays import group_chunks

    for lo, hi in group_chunks(offsets, chunk):
        index = np.asarray(replay.sample_ids[offsets[lo] : offsets[hi]], dtype=np.int64)
        n = counts[lo:hi]
        table = {c: np.repeat(micro[c][lo:hi], n) for c in ("epoch", "step", "rank", "micro")}
        table["sample_id"] = index if ids is None else np.asarray(ids)[index]
        table["index"] = index
        table["batch_id"] = np.repeat(micro["batch_id"][lo:hi], n)
        yield pd.DataFrame(table)


def schedule_table(replay: Replay, ids: np.ndarray | None = None) -> pd.DataFrame:
    """One row per (epoch, step, rank, micro, sample_id), plus batch_id, in schedule order.

    :param ids: the manifest's ``sample_id`` per dataset index (None: the dataset index
        is the sample id).  The dataset index is kept as column ``index``.
    """
    import pandas as pd

    pieces = list(schedule_tables(replay, ids))
    if not pieces:
        return pd.DataFrame(
            {c: [] for c in ("epoch", "step", "rank", "micro", "sample_id", "index", "batch_id")}
        )
    return pd.concat(pieces, ignore_index=True)


def export_schedule(
    replay: Replay,
    path: str | Path,
    ids: np.ndarray | None = None,
    protect: Sequence[str | Path] = (),
    chunk: int = CHUNK_SAMPLES,
) -> Path:
    """Write :func:`schedule_table` to ``path`` (``.parquet`` or ``.csv``), piece by piece.

    :param protect: input files that must not be overwritten (manifest, log, config).
    :param chunk: rows per piece written.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..outpath import atomic_output

    p = check_export_path(path, protect)
    pieces = schedule_tables(replay, ids, chunk)
    first = next(pieces, None)
    if first is None:
        first = schedule_table(replay, ids)
    with atomic_output(p, "export") as tmp:
        if p.suffix.lower() == ".csv":
            first.to_csv(tmp, index=False)
            for piece in pieces:
                piece.to_csv(tmp, mode="a", header=False, index=False)
            return p
        table = pa.Table.from_pandas(first, preserve_index=False)
        with pq.ParquetWriter(tmp, table.schema) as writer:
            writer.write_table(table)
            for piece in pieces:
                writer.write_table(
                    pa.Table.from_pandas(piece, schema=table.schema, preserve_index=False)
                )
    return p


def check_export_path(path: str | Path, protect: Sequence[str | Path] = ()) -> Path:
    """Validate ``--export FILE`` before any work: extension, folder, not an input."""
    from ..outpath import check_output_path

    return check_output_path(
        path,
        (".parquet", ".csv"),
        "export",
        protect=protect,
        clash=("refusing to overwrite an input file", "choose another --export file"),
    )
