"""Datasets read through Arrow: a Parquet file, a folder of Parquet shards, an Arrow IPC /
Feather file, JSON lines, and a Hugging Face ``datasets`` folder written by ``save_to_disk``.

Each becomes a :class:`Source`: its schema and its parts in dataset order, each part read
with only the columns asked for.  Nothing here looks at the values; :mod:`.columns`
turns a part's columns into lengths.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from .shards import order_shards

#: File extensions read as Arrow IPC (the file or the stream format).
ARROW_SUFFIXES = (".arrow", ".feather", ".ipc")
#: Text shown from an exception or a list of names, at most (an error line stays short).
CLIP = 120


def clip(text: str, most: int = CLIP) -> str:
    """``text`` on one line, cut to ``most`` characters (``...`` marks the cut).

    >>> clip("a" * 200, 10)
    'aaaaaaa...'
    """
    text = " ".join(str(text).split())
    return text if len(text) <= most else text[: most - 3] + "..."


def names(items: list[str], most: int = 8, width: int = 64) -> str:
    """The first names (at most ``most``, in about ``width`` characters, each cut to 32),
    then how many more: an error line stays short.

    >>> names(["a", "b", "c"], 2)
    'a, b and 1 more'
    """
    shown: list[str] = []
    for n in items[:most]:
        text = clip(str(n), 32)
        if shown and len(", ".join([*shown, text])) > width:
            break
        shown.append(text)
    more = len(items) - len(shown)
    return (", ".join(shown) or "(none)") + (f" and {more} more" if more > 0 else "")


@dataclass(frozen=True)
class Source:
    """A dataset read by parts, in dataset order.

    :param path: what was given.
    :param schema: the columns (``pyarrow.Schema``).
    :param parts: one callable per part (row group, shard, Arrow file), each reading a
        ``pyarrow.Table`` of the columns asked for.
    :param description: where the rows come from and in what order, for a reader.
    :param files: Parquet shards only: their paths in ``filesystem``, in dataset order
        (what an engine reading them elsewhere needs; empty for other sources).
    :param filesystem: the ``pyarrow.fs.FileSystem`` of ``files``.
    :param as_codes: where the source can read columns dictionary-encoded, the same
        source reading the named columns so (a column of a few category names then comes
        as codes and the names once a part, not a string a row); None: it cannot.
    """

    path: Path | str
    schema: Any
    parts: tuple[Callable[[list[str]], Any], ...]
    description: str
    files: tuple[str, ...] = ()
    filesystem: Any = None
    as_codes: Callable[[tuple[str, ...]], Source] | None = None

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names)


def _read_errors() -> tuple[type[BaseException], ...]:
    import pyarrow as pa

    return (OSError, ValueError, EOFError, pa.ArrowException)


def parquet_file(path: Path, dictionary: tuple[str, ...] = (), schema: Any = None) -> Source:
    """A Parquet file, one part per row group; the columns ``dictionary`` names are read
    dictionary-encoded (Parquet's own dictionary pages, not decoded into a value a row).

    :param schema: the file's schema as stored (None: read it), kept as the source's
        whatever is read encoded.
    """
    import pyarrow.parquet as pq

    from ..limits import ROW_BYTES, check_fits

    pf = pq.ParquetFile(path, read_dictionary=list(dictionary) or None)
    rows = pf.metadata.num_rows  # (a few KB of run-length pages may claim 4e8 rows)
    check_fits(rows * ROW_BYTES, str(path), f"reading its {rows:,} rows")

    def group(g: int) -> Callable[[list[str]], Any]:
        return lambda cols: pf.read_row_group(g, columns=cols)

    parts = tuple(group(g) for g in range(pf.num_row_groups))
    if not parts:  # (a file of no row groups still has its columns)
        parts = (lambda cols: pf.schema_arrow.empty_table().select(cols),)
    schema = pf.schema_arrow if schema is None else schema
    return Source(
        path,
        schema,
        parts,
        "Parquet file",
        as_codes=lambda cols: parquet_file(path, cols, schema),
    )


def _ipc_table(path: Path) -> Any:
    """An Arrow IPC file or stream, memory-mapped (nothing copied until a value is read)."""
    import pyarrow as pa

    source = pa.memory_map(str(path))
    try:
        return pa.ipc.open_file(source).read_all()
    except pa.ArrowInvalid:
        source.seek(0)
        return pa.ipc.open_stream(source).read_all()


def arrow_file(path: Path) -> Source:
    """An Arrow IPC / Feather file (one part)."""
    table = _ipc_table(path)
    return Source(path, table.schema, (lambda cols: table.select(cols),), "Arrow file")


def jsonl_file(path: Path) -> Source:
    """JSON lines read by Arrow (list cells become list columns; gzip etc. detected).

    :raises ValueError: a line nests deeper than Arrow's reader can take (it recurses in
        C per level), or a key is not UTF-8; the caller reads such a file another way.
    """
    import pyarrow as pa

    from ..limits import JSON_COST, check_fits, check_line_claims
    from ..logs.fast.jsonlines import too_nested

    check_fits(path.stat().st_size * JSON_COST, str(path), "reading it")
    with pa.input_stream(str(path), compression="detect") as fh:
        data = fh.read()
    # (one line may not claim more than a row can be: a 2 GB line took 6 GB)
    check_line_claims(data, str(path), JSON_COST, "manifest row")
    if too_nested(data):
        raise ValueError("nested too deep for Arrow's JSON reader")
    table = _arrow_json(data)
    try:
        table.schema.names  # noqa: B018 - Arrow keeps a key's bytes; Python decodes them here
    except UnicodeDecodeError:
        raise ValueError("a key that is not UTF-8") from None
    return Source(path, table.schema, (lambda cols: table.select(cols),), "JSON lines")


def _arrow_json(data: bytes) -> Any:
    """JSON lines parsed by Arrow; a file whose longest line passes Arrow's block (1 MB)
    is read again in blocks as large as a line may be (Arrow refuses a row that
    straddles two blocks)."""
    import pyarrow as pa
    import pyarrow.json as pj

    from ..limits import MAX_LINE_BYTES

    try:
        return pj.read_json(pa.BufferReader(data))
    except pa.ArrowInvalid as e:
        if "straddl" not in str(e):
            raise
    block = min(max(len(data), 1), 2 * MAX_LINE_BYTES + 1)
    return pj.read_json(pa.BufferReader(data), pj.ReadOptions(block_size=block))


def parquet_shards(shown: Path | str, fs: Any, files: list[str], description: str) -> Source:
    """Parquet shards in a filesystem (local or a store's), one part per file in the order
    given; every shard must have the first one's columns and types.

    :param shown: the folder or glob as a message shows it.
    :param files: the shards' paths in ``fs``, in dataset order.
    """
    import pyarrow.dataset as ds

    dataset = ds.dataset(files, format="parquet", filesystem=fs)
    fragments = list(dataset.get_fragments())
    schema = dataset.schema.remove_metadata()

    def frag(f: Any, name: str) -> Callable[[list[str]], Any]:
        def read(cols: list[str]) -> Any:
            own = f.physical_schema.remove_metadata()
            if not own.equals(schema):
                raise InputError(
                    str(shown),
                    f"shards of mixed schemas: {clip(name, 60)} has "
                    f"{clip(_fields(own), 80)}, the first shard {clip(_fields(schema), 80)}",
                    "write the shards with one schema",
                )
            return f.to_table(columns=cols, schema=dataset.schema)

        return read

    return Source(
        shown,
        dataset.schema,
        tuple(frag(f, n.rsplit("/", 1)[-1]) for f, n in zip(fragments, files, strict=True)),
        description,
        tuple(files),
        fs,
    )


def _fields(schema: Any) -> str:
    """A schema's columns and types, short: ``input_ids: list<int32>, source: string``."""
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def _local_fs() -> Any:
    import pyarrow.fs as pafs

    return pafs.LocalFileSystem()


def _json(path: Path) -> Any:
    """A dataset folder's JSON file (``state.json``...), or an InputError naming it."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(
            str(path), f"not readable JSON ({clip(str(e), 80)})", "save the dataset again"
        ) from None


def hf_dataset(path: Path, split_note: str = "") -> Source:
    """A ``datasets`` folder written by ``Dataset.save_to_disk``: its ``data-*.arrow``
    files in the order of ``state.json``'s ``_data_files``; ``dataset_info.json`` for the
    features when there is no data file to take the schema from."""
    import pyarrow as pa

    state = _json(path / "state.json")
    files = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(files, list) or not all(
        isinstance(f, dict) and isinstance(f.get("filename"), str) for f in files
    ):
        raise InputError(
            str(path / "state.json"),
            "has no '_data_files' list of file names",
            "is this a folder written by Dataset.save_to_disk?",
        )
    paths = [path / f["filename"] for f in files]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise InputError(str(path), f"state.json names missing data files: {names(missing, 3)}", "")
    tables = [_ipc_table(p) for p in paths]
    if tables:
        schema = tables[0].schema
    else:
        info = _json(path / "dataset_info.json")
        features = info.get("features") if isinstance(info, dict) else None
        schema = pa.schema([(str(k), pa.null()) for k in (features or {})])
    for p, t in zip(paths, tables, strict=True):
        if t.schema.names != schema.names:
            raise InputError(
                str(p), f"has columns {names(t.schema.names, 5)}, not those of {paths[0].name}", ""
            )

    def part(t: Any) -> Callable[[list[str]], Any]:
        return lambda cols: t.select(cols)

    return Source(
        path,
        schema,
        tuple(part(t) for t in tables) or (lambda cols: schema.empty_table().select(cols),),
        f"Hugging Face dataset (save_to_disk){split_note}, {len(paths)} Arrow file"
        f"{'s' if len(paths) != 1 else ''} in state.json order",
    )


def hf_dataset_dict(path: Path, split: str | None) -> Source:
    """A ``DatasetDict`` folder: the split named, else ``train``, else an error naming
    the splits."""
    info = _json(path / "dataset_dict.json")
    splits = info.get("splits") if isinstance(info, dict) else None
    if not isinstance(splits, list) or not all(isinstance(s, str) for s in splits):
        raise InputError(str(path / "dataset_dict.json"), "has no 'splits' list", "")
    if split is None and "train" in splits:
        split = "train"
        note = f", split 'train' (of {names(splits, 5)})"
    elif split is None:
        raise InputError(
            str(path),
            f"is a DatasetDict with splits {names(splits, 5)} and no 'train'",
            "choose one with --split NAME (dflash-diag manifest) or give the split's folder",
        )
    else:
        note = f", split {clip(split, 40)!r}"
    if split not in splits:
        raise InputError(
            str(path), f"has no split {clip(split, 40)!r}", f"choose from {names(splits, 5)}"
        )
    return hf_dataset(path / split, note)


def open_folder(path: Path, split: str | None) -> Source:
    """A folder as a dataset: ``save_to_disk`` (``state.json``), a DatasetDict
    (``dataset_dict.json``) or Parquet shards (``*.parquet`` at any depth)."""
    if (path / "dataset_dict.json").is_file():
        return hf_dataset_dict(path, split)
    if (path / "state.json").is_file():
        if split is not None:
            raise InputError(str(path), "--split applies to a DatasetDict folder", "drop --split")
        return hf_dataset(path)
    found = [p for p in path.rglob("*") if p.suffix.lower() in (".parquet", ".pq")]
    if found:
        rel = [p.relative_to(path).as_posix() for p in found]
        chosen, note = order_shards(rel, split, str(path))
        return parquet_shards(
            path,
            _local_fs(),
            [str(path / r) for r in chosen],
            f"folder of {len(chosen)} Parquet files, read in sorted file-name order ({note})",
        )
    raise InputError(
        str(path),
        "is a folder, not a manifest file or a dataset (no state.json, dataset_dict.json or "
        ".parquet files)",
        "give a folder written by save_to_disk, a folder of Parquet shards, or one file",
    )


def open_source(path: Path, fmt: str, split: str | None = None) -> Source:
    """The dataset at ``path`` (a folder, or a file of format ``fmt``), or an InputError
    saying why it cannot be read."""
    try:
        if path.is_dir():
            return open_folder(path, split)
        if fmt == "parquet":
            return parquet_file(path)
        if fmt == "arrow":
            return arrow_file(path)
        return jsonl_file(path)
    except InputError:
        raise
    except _read_errors() as e:
        what = "a dataset folder" if path.is_dir() else f"{fmt}"
        raise InputError(str(path), f"cannot read as {what} ({clip(str(e))})", "") from None
