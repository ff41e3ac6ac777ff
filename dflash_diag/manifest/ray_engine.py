"""``dflash-diag manifest DATA --engine ray``: the lengths of a corpus of Parquet shards
computed on a Ray cluster (the optional ``ray[data]``: ``dflash-diag[ray]``).

The driver resolves the shards and their order exactly as the local engine does
(:func:`~dflash_diag.manifest.open_shards`: sorted paths, ``datasets``' split rules),
checks that every shard has the first one's schema (its footer only), and picks the
columns as :func:`~dflash_diag.manifest.read_manifest` does.  Ray Data then reads the
shards (``ray.data.read_parquet``, only those columns) and computes per row, in parallel
tasks, ``len(input_ids)`` (list offsets), the ``attention_mask`` sum, or the token count
of a text column by a local ``tokenizer.json`` (shipped to the tasks as its JSON text).
With ``preserve_order`` the rows come back in dataset order; the driver keeps 8-16 bytes
per sample (length, id, category code) and makes the Manifest with the local engine's
checks, so both engines give the same manifest row for row.

Cost: reading is ``bytes / (tasks x per-task GB/s)``; the driver's share is the
per-sample columns only (docs/storage.md gives figures measured here).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..data import Manifest, Progress
from ..errors import InputError, MissingDependency
from ..storage import classify, is_store_error
from . import ID_COLUMN, finish_manifest, open_shards, plan_columns
from .columns import MASK_COLUMN, kind_of, numbers_of, padded_to
from .sources import Source, clip
from .text import count_tokens, describe_tokenizer, load_tokenizer

#: Columns the tasks return, beside the ones passed through.
LENGTH, MASK_SUM, MASK_LEN = "__length", "__mask_sum", "__mask_len"


@dataclass(frozen=True)
class RayResult:
    """A manifest made on Ray: ``manifest`` and what the run took (``rows``, ``files``,
    ``bytes``: the shards' compressed size, from their footers)."""

    manifest: Manifest
    files: int
    bytes: int


def connect(address: str | None, num_cpus: int | None = None) -> Any:
    """The ``ray`` module, connected: to ``address`` (``auto``: the cluster this machine
    belongs to; ``ray://host:10001``: a remote one), else a Ray already started in this
    process, else a local one (``num_cpus``: all cores by default).

    :raises MissingDependency: ``ray[data]`` is not installed.
    """
    try:
        import ray
        import ray.data  # noqa: F401 - the extra's second half
    except ImportError:
        raise MissingDependency("--engine", "ray[data]", "ray") from None
    if not ray.is_initialized():
        import logging

        kwargs: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "logging_level": logging.ERROR,
        }
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        if address is None:
            kwargs["num_cpus"] = num_cpus
        try:
            ray.init(address=address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise InputError(
                "--address",
                f"cannot connect to Ray at {clip(str(address), 60)} ({type(e).__name__})",
                "start the cluster (ray start --head) or drop --address",
            ) from None
    return ray


def _check_schemas(shown: str, source: Source) -> int:
    """Every shard's schema equals the first's (footers read in 16 threads); the shards'
    total compressed bytes."""
    import pyarrow.parquet as pq

    def footer(path: str) -> Any:
        with source.filesystem.open_input_file(path) as f:
            return pq.ParquetFile(f).metadata

    with ThreadPoolExecutor(16) as pool:
        metas = list(pool.map(footer, source.files))
    first = metas[0].schema.to_arrow_schema().remove_metadata()
    for path, meta in zip(source.files, metas, strict=True):
        own = meta.schema.to_arrow_schema().remove_metadata()
        if not own.equals(first):
            raise InputError(
                shown,
                f"shards of mixed schemas: {clip(path.rsplit('/', 1)[-1], 60)} differs "
                "from the first shard",
                "write the shards with one schema",
            )
    return sum(m.row_group(g).total_byte_size for m in metas for g in range(m.num_row_groups))


@lru_cache(maxsize=4)
def _tokenizer(json_text: str) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_str(json_text)


def lengths_batch(
    batch: Any, column: str, kind: str, mask: bool, tokenizer_json: str | None, special: bool
) -> Any:
    """One batch's lengths (runs in a Ray task): ``batch`` with ``column`` replaced by
    ``__length`` (int64, null where the row is), and ``__mask_sum`` / ``__mask_len``
    (the attention mask's row sum and length) when ``mask``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    col = batch.column(column).combine_chunks()
    if kind == "list":
        length = pc.list_value_length(col).cast(pa.int64())
    elif kind == "text":
        tok = _tokenizer(tokenizer_json or "")
        length = pa.array(count_tokens(tok, col.to_pylist(), special), type=pa.int64())
    else:
        length = col
    out = batch.drop_columns([column]).append_column(LENGTH, length)
    if mask:
        m = batch.column(MASK_COLUMN).combine_chunks()
        values = pc.list_flatten(m).to_numpy(zero_copy_only=False).astype(np.int64)
        parents = pc.list_parent_indices(m).to_numpy(zero_copy_only=False)
        sums = np.bincount(parents, weights=values, minlength=len(m)).astype(np.int64)
        out = out.append_column(MASK_SUM, pa.array(sums)).append_column(
            MASK_LEN, pc.list_value_length(m).cast(pa.int64())
        )
        out = out.drop_columns([MASK_COLUMN]) if MASK_COLUMN in out.column_names else out
    return out


def ray_manifest(
    data: str | os.PathLike[str],
    length_column: str | None = None,
    category_column: str | None = None,
    progress: Progress | None = None,
    *,
    split: str | None = None,
    tokenizer: str | os.PathLike[str] | None = None,
    special_tokens: bool = True,
    address: str | None = None,
) -> RayResult:
    """The manifest of Parquet shards, computed on Ray; the same Manifest, row for row,
    as :func:`~dflash_diag.manifest.read_manifest` gives for ``data``.

    :param address: the Ray cluster (see :func:`connect`).
    :param progress: called as ``progress(rows_done, rows)`` as results come back.
    :raises InputError: as ``read_manifest``; ``data`` is not Parquet; mixed schemas.
    """
    shown, source = open_shards(data, split)
    length_col, cat_col, has_id = plan_columns(
        shown, source, length_column, category_column, tokenizer
    )
    kind = kind_of(source, length_col)
    tok = load_tokenizer(tokenizer) if tokenizer is not None else None
    _check_kind(shown, length_col, kind, tok)
    size = _check_schemas(shown, source)
    mask = kind == "list" and length_col != MASK_COLUMN and MASK_COLUMN in source.columns
    mask = mask and kind_of(source, MASK_COLUMN) == "list"
    others = ([cat_col] if cat_col else []) + ([ID_COLUMN] if has_id else [])
    ray = connect(address)
    table = _run(
        ray,
        source,
        [length_col, *others] + ([MASK_COLUMN] if mask else []),
        progress,
        (length_col, kind, mask, tok.to_str() if tok is not None else None, special_tokens),
    )
    if table.num_rows == 0:
        raise InputError(shown, "holds no samples (0 rows)", "check the dataset or its split")
    lengths, how = _lengths(shown, table, length_col, kind, mask)
    if tok is not None and tokenizer is not None:
        how = describe_tokenizer(tok, tokenizer, special_tokens) + f" of column {length_col!r}"
    df = table.select(others).to_pandas(ignore_metadata=True)
    df[length_col] = numbers_of(lengths)
    description = f"{source.description}; lengths: {how} (engine: ray)"
    m = finish_manifest(shown, df, length_col, cat_col, has_id, description)
    return RayResult(m, len(source.files), size)


def _check_kind(shown: str, column: str, kind: str, tok: Any) -> None:
    if tok is not None and kind != "text":
        raise InputError(
            shown,
            f"column {column!r} is not text",
            "name the text column with --length-column, or drop --tokenizer",
        )
    if kind == "text" and tok is None:
        raise InputError(
            shown,
            f"column {column!r} holds text, not lengths",
            "count its tokens: dflash-diag manifest DATA --tokenizer tokenizer.json --to FILE",
        )


def _run(
    ray: Any, source: Source, columns: list[str], progress: Progress | None, args: tuple
) -> Any:
    """Read the shards with Ray Data and map :func:`lengths_batch` over them; the
    results gathered in dataset order (``preserve_order``)."""
    shown = str(source.path)
    import pyarrow as pa

    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    ds = ray.data.read_parquet(
        list(source.files), filesystem=source.filesystem, shuffle=None
    ).select_columns(columns)
    column, kind, mask, tok_json, special = args
    mapped = ds.map_batches(
        lengths_batch,
        batch_format="pyarrow",
        fn_kwargs={
            "column": column,
            "kind": kind,
            "mask": mask,
            "tokenizer_json": tok_json,
            "special": special,
        },
    )
    total = _rows(source)
    parts, done = [], 0
    try:
        for batch in mapped.iter_batches(batch_format="pyarrow", batch_size=None):
            parts.append(batch)
            done += batch.num_rows
            if progress is not None:
                progress(done, total)
    except ray.exceptions.RayTaskError as e:
        # (a task's store error: the workers' own credentials and endpoint are used)
        cause = e.as_instanceof_cause()
        if is_store_error(cause):
            raise classify(cause, shown) from None
        raise
    return pa.concat_tables(parts, promote_options="permissive") if parts else _empty(columns)


def _rows(source: Source) -> int:
    import pyarrow.dataset as ds

    dataset = ds.dataset(list(source.files), format="parquet", filesystem=source.filesystem)
    return sum(f.metadata.num_rows for f in dataset.get_fragments())


def _empty(columns: list[str]) -> Any:
    import pyarrow as pa

    return pa.table({LENGTH: pa.array([], pa.int64()), **{c: pa.array([]) for c in columns[1:]}})


def _lengths(shown: str, table: Any, column: str, kind: str, mask: bool) -> tuple[Any, str]:
    """The length column and how it was made, with the local engine's rule: padded ids
    (every row one length) with an attention mask take the mask's row sums."""
    import pyarrow.compute as pc

    lengths = table.column(LENGTH)
    how = f"ids per row of the list column {column!r}" if kind == "list" else f"column {column!r}"
    padded = padded_to(lengths) if mask else None
    if padded is None:
        return lengths, how
    mask_len = table.column(MASK_LEN)
    if mask_len.null_count or len(pc.unique(mask_len)) > 1:
        raise InputError(
            shown,
            f"column {MASK_COLUMN!r} has rows of other lengths than the padded ids",
            "check the dataset, or name the length column with --length-column",
        )
    how = f"row sums of {MASK_COLUMN!r} (the rows of {column!r} are all padded to {padded})"
    return table.column(MASK_SUM), how
