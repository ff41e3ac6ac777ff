"""A replayed schedule written out as a table: one row per (epoch, step, rank, micro,
sample), in schedule order, to ``.parquet`` or ``.csv`` (``dflash-diag batches
--export``), piece by piece so a 10M-sample, several-epoch schedule is never held whole.

Two sources give the same pieces: a :class:`~dflash_diag.data.Replay` already held
(:func:`schedule_tables`), or the replay's epochs as they are made
(:func:`replayed_tables`), which never holds more than one epoch's pool and a piece's
rows: a 100M-sample manifest's schedule is written in the memory of one epoch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .replay import CHUNK_SAMPLES, new_dropped, replay_epochs, replay_setup

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from ..data import Manifest, Progress, Replay, ScheduleParams

#: The table's columns, in order.
COLUMNS = ("epoch", "step", "rank", "micro", "sample_id", "index", "batch_id")


def schedule_tables(
    replay: Replay, ids: np.ndarray | None = None, chunk: int = CHUNK_SAMPLES
) -> Iterator[pd.DataFrame]:
    """:func:`schedule_table` in consecutive pieces of about ``chunk`` rows each, so a
    10M-sample, 6-epoch schedule can be written without holding 60M rows at once.

    A piece holds whole micro-batches: those of :func:`~dflash_diag.arrays.group_chunks`
    over the replay's offsets."""
    import numpy as np

    from ..arrays import group_chunks

    offsets = np.asarray(replay.offsets, dtype=np.int64)
    micro = {c: replay.micro[c].to_numpy() for c in ("epoch", "step", "rank", "micro", "batch_id")}
    for lo, hi in group_chunks(offsets, chunk):
        index = np.asarray(replay.sample_ids[offsets[lo] : offsets[hi]], dtype=np.int64)
        yield _piece(
            {c: a[lo:hi] for c, a in micro.items()}, np.diff(offsets[lo : hi + 1]), index, ids
        )


def _piece(
    rows: dict[str, np.ndarray], n: np.ndarray, index: np.ndarray, ids: np.ndarray | None
) -> pd.DataFrame:
    """The table's rows of some whole micro-batches: ``rows`` one value per micro-batch
    (epoch, step, rank, micro, batch_id), ``n`` its samples, ``index`` theirs in order."""
    import numpy as np
    import pandas as pd

    table = {c: np.repeat(rows[c], n) for c in ("epoch", "step", "rank", "micro")}
    table["sample_id"] = index if ids is None else np.asarray(ids)[index]
    table["index"] = index
    table["batch_id"] = np.repeat(rows["batch_id"], n)
    return pd.DataFrame(table, copy=False)  # (the columns as they are: no 2-D block)


def replayed_tables(
    source: Manifest | np.ndarray | Sequence[int],
    params: ScheduleParams,
    epochs: int | None = None,
    ids: np.ndarray | None = None,
    chunk: int = CHUNK_SAMPLES,
    progress: Progress | None = None,
) -> Iterator[pd.DataFrame]:
    """The pieces :func:`schedule_tables` gives of ``replay(source, params, epochs)``,
    the same rows cut at the same places, made epoch by epoch as the replay walks them
    (:func:`~dflash_diag.schedule.replay.replay_epochs`): no epoch's sample ids are
    held past its pieces, and a piece's tail waits for the next epoch's rows.

    ``batch_id`` numbers compositions in order of first appearance, as
    :func:`~dflash_diag.schedule.replay.batch_ids` does over the whole schedule: the keys
    seen so far are kept, sorted, with their ids (16 bytes a distinct composition).
    """
    setup = replay_setup(source, params, epochs)
    numbered = FirstSeen()
    pending = _Pending(chunk)
    for ep in replay_epochs(setup, params, new_dropped(), progress):
        rows = {c: ep.rows[c] for c in ("epoch", "step", "rank", "micro")}
        rows["batch_id"] = numbered.number(ep.feats["key"][ep.chosen])
        pending.add(ep.pool, ep.chosen, ep.feats["n"][ep.chosen], rows)
        del ep  # (its pool, before the next epoch makes one)
        for part in pending.ready():
            yield _piece(*part, ids)
    for part in pending.ready(last=True):
        yield _piece(*part, ids)


class _Pending:
    """Micro-batches replayed and not yet written: cut into the pieces
    :func:`~dflash_diag.arrays.group_chunks` makes of the whole schedule (a piece takes
    whole micro-batches while its samples stay within ``chunk``, at least one), each
    piece given out once the micro-batch after it is known.  The samples are gathered
    from the pools a piece at a time (an epoch's are never gathered whole)."""

    def __init__(self, chunk: int) -> None:
        self.chunk = chunk
        # per stretch of micro-batches waiting: (pool, its batches, their sizes, rows)
        self.parts: list[tuple[Any, np.ndarray, np.ndarray, dict[str, np.ndarray]]] = []

    def add(
        self, pool: Any, chosen: np.ndarray, n: np.ndarray, rows: dict[str, np.ndarray]
    ) -> None:
        """An epoch's rows: ``pool``'s batches ``chosen``, ``n`` samples each."""
        self.parts.append((pool, chosen, n, rows))

    def ready(
        self, last: bool = False
    ) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]]:
        """The pieces complete so far (``last``: all that are left), as (rows, n, index)."""
        import numpy as np

        if not self.parts:
            return
        parts, self.parts = self.parts, []
        n = np.concatenate([p[2] for p in parts])
        rows = {c: np.concatenate([p[3][c] for p in parts]) for c in parts[0][3]}
        offsets = np.zeros(n.size + 1, dtype=np.int64)
        np.cumsum(n, out=offsets[1:])
        starts = np.cumsum([0] + [len(p[1]) for p in parts])  # (each part's first row)
        lo = 0
        while lo < n.size:
            # the piece from ``lo``: micro-batches while it stays within ``chunk`` samples
            hi = int(np.searchsorted(offsets, offsets[lo] + self.chunk, side="right")) - 1
            hi = min(max(hi, lo + 1), n.size)
            if hi == n.size and not last:
                break  # (the next epoch's first micro-batch may still fit in it)
            index = _gathered(parts, starts, lo, hi)
            yield {c: v[lo:hi] for c, v in rows.items()}, n[lo:hi], index
            lo = hi
        if lo < n.size:  # (the tail waits, as one part of its own)
            k = int(np.searchsorted(starts, lo, side="right")) - 1
            for j in range(k, len(parts)):
                pool, chosen, size, part_rows = parts[j]
                cut = max(lo - int(starts[j]), 0)
                tail = {c: v[cut:] for c, v in part_rows.items()}
                self.parts.append((pool, chosen[cut:], size[cut:], tail))


def _gathered(
    parts: Sequence[tuple[Any, np.ndarray, np.ndarray, dict[str, np.ndarray]]],
    starts: np.ndarray,
    lo: int,
    hi: int,
) -> np.ndarray:
    """The int64 sample ids of rows ``lo:hi`` of ``parts`` (part ``j`` starts at row
    ``starts[j]``), in order."""
    import numpy as np

    from .base import gather_segments

    out = []
    for j, (pool, chosen, _, _) in enumerate(parts):
        a, b = max(lo - int(starts[j]), 0), min(hi - int(starts[j]), len(chosen))
        if a < b:
            ids = gather_segments(pool.ids, pool.offsets, chosen[a:b])
            out.append(ids.astype(np.int64, copy=False))
    return out[0] if len(out) == 1 else np.concatenate(out)


class FirstSeen:
    """Dense ids of composition keys in order of first appearance, fed piece by piece:
    ``concatenate([number(k) for k in pieces])`` is ``batch_ids(concatenate(pieces))``.

    >>> import numpy as np
    >>> f = FirstSeen()
    >>> f.number(np.array([7, 3, 7], dtype=np.uint64)).tolist()
    [0, 1, 0]
    >>> f.number(np.array([5, 3, 9, 5], dtype=np.uint64)).tolist()
    [2, 1, 3, 2]
    """

    def __init__(self) -> None:
        import numpy as np

        self.keys = np.zeros(0, dtype=np.uint64)  # (sorted)
        self.ids = np.zeros(0, dtype=np.int64)  # (the id of each key)

    def number(self, keys: np.ndarray) -> np.ndarray:
        """The ids of ``keys`` (uint64), numbering new ones after all seen before."""
        import numpy as np

        if not len(keys):
            return np.zeros(0, dtype=np.int64)
        distinct, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        at = np.searchsorted(self.keys, distinct)
        known = at < len(self.keys)
        known[known] = self.keys[at[known]] == distinct[known]
        out = np.empty(len(distinct), dtype=np.int64)
        out[known] = self.ids[at[known]]
        new = np.flatnonzero(~known)
        fresh = np.empty(len(new), dtype=np.int64)
        fresh[np.argsort(first[new], kind="stable")] = len(self.keys) + np.arange(len(new))
        out[new] = fresh
        # (``distinct`` is sorted, so the new keys go in at non-decreasing places)
        self.keys = np.insert(self.keys, at[new], distinct[new])
        self.ids = np.insert(self.ids, at[new], fresh)
        return out[inverse.reshape(-1)]


def schedule_table(replay: Replay, ids: np.ndarray | None = None) -> pd.DataFrame:
    """One row per (epoch, step, rank, micro, sample_id), plus batch_id, in schedule order.

    :param ids: the manifest's ``sample_id`` per dataset index (None: the dataset index
        is the sample id).  The dataset index is kept as column ``index``.
    """
    import pandas as pd

    pieces = list(schedule_tables(replay, ids))
    return pd.concat(pieces, ignore_index=True) if pieces else _empty()


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
    p = check_export_path(path, protect)
    return write_pieces(schedule_tables(replay, ids, chunk), p)


def export_replayed(
    source: Manifest | np.ndarray | Sequence[int],
    params: ScheduleParams,
    path: str | Path,
    ids: np.ndarray | None = None,
    protect: Sequence[str | Path] = (),
    progress: Progress | None = None,
) -> Path:
    """:func:`export_schedule` of ``replay(source, params)``, the same file, written as
    the replay makes its epochs (:func:`replayed_tables`) instead of from a Replay held
    whole; ``progress`` is called with epochs done."""
    p = check_export_path(path, protect)
    return write_pieces(replayed_tables(source, params, ids=ids, progress=progress), p)


def write_pieces(pieces: Iterator[pd.DataFrame], p: Path) -> Path:
    """The pieces of a schedule table written to ``p`` (checked: :func:`check_export_path`)
    one after the other: one Parquet row group or one run of CSV lines each."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..outpath import atomic_output

    first = next(pieces, None)
    if first is None:
        first = _empty()
    with atomic_output(p, "export") as tmp:
        if p.suffix.lower() == ".csv":
            first.to_csv(tmp, index=False)
            for piece in pieces:
                piece.to_csv(tmp, mode="a", header=False, index=False)
            return p
        table = pa.Table.from_pandas(first, preserve_index=False)
        schema = table.schema
        del first  # (each piece is let go once written, before the next is made)
        with pq.ParquetWriter(tmp, schema) as writer:
            writer.write_table(table)
            del table
            for piece in pieces:
                writer.write_table(pa.Table.from_pandas(piece, schema=schema, preserve_index=False))
                del piece
    return p


def _empty() -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame({c: [] for c in COLUMNS})


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
