"""``dflash-diag manifest DATA --to FILE``: a length manifest from a dataset."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .listing import command_help
from .options import progress

if TYPE_CHECKING:
    from ..data import Manifest

_HELP = command_help(
    "manifest",
    """DATA is a Parquet, JSONL or Arrow/Feather file with a list column of token ids
(input_ids, or --length-column), a folder written by Hugging Face datasets'
save_to_disk (a DatasetDict: its train split, or --split), or a folder or a glob of
Parquet shards (sorted path order, and datasets' split rules, as load_dataset
resolves a folder).  DATA may be a URI (s3://bkt/data/, gs://..., hf://...):
credentials come from the environment and the store's config files.  Padded
input_ids with an attention_mask: the mask sums.  A text column: --tokenizer
tokenizer.json counts its tokens (the optional 'tokenizers' package; nothing is
downloaded).  Rows stay in dataset order; the output says how it was decided.

--engine ray computes the lengths of Parquet shards in parallel Ray tasks (the
optional 'ray[data]': dflash-diag[ray]) on a local Ray, or on a cluster with
--address auto; the manifest is the same, row for row.  --shards DIR writes the
manifest as Parquet shards (part-00000-of-0000N.parquet), --to FILE as one file.
""",
)


class Engine(StrEnum):
    local = "local"
    ray = "ray"


def _summary(m: Manifest, to: Path) -> list[str]:
    """What was written, for the terminal (counts read off the manifest)."""
    lens = m.lengths
    lines = [
        f"wrote {to}: {len(m):,} samples, {int(lens.sum()):,} tokens "
        f"(lengths {int(lens.min())}..{int(lens.max())}, mean {lens.mean():.1f})",
        f"from {m.path}: {m.description}",
    ]
    if m.categories is not None:
        import numpy as np

        counts = np.bincount(m.categories, minlength=len(m.category_names))
        shown = ", ".join(f"{n} {c:,}" for n, c in zip(m.category_names, counts, strict=True))
        lines.append(f"category (from {m.category_column!r}): {shown}")
    return lines


def manifest(
    data: Annotated[str, typer.Argument(help="The dataset: a file or a folder.")],
    to: Annotated[
        Path | None, typer.Option("--to", help="The manifest to write: .parquet or .csv.")
    ] = None,
    length_column: Annotated[
        str | None,
        typer.Option(
            "--length-column",
            help="The column of lengths, of token ids (a list column) or, with "
            "--tokenizer, of text (default: length, ..., else input_ids; text).",
        ),
    ] = None,
    category_column: Annotated[
        str | None,
        typer.Option(
            "--category-column", help="A column of categories (default: source, category)."
        ),
    ] = None,
    split: Annotated[
        str | None,
        typer.Option("--split", help="The split of a DatasetDict folder (default: train)."),
    ] = None,
    tokenizer: Annotated[
        Path | None,
        typer.Option("--tokenizer", help="A local tokenizer.json counting a text column's tokens."),
    ] = None,
    special_tokens: Annotated[
        bool,
        typer.Option(
            "--special-tokens/--no-special-tokens",
            help="With --tokenizer, count the special tokens it adds (BOS, EOS...).",
        ),
    ] = True,
    engine: Annotated[
        Engine, typer.Option("--engine", help="Where the lengths are computed.")
    ] = Engine.local,
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            help="With --engine ray: the cluster (auto, or ray://HOST:10001; "
            "default: a local Ray).",
        ),
    ] = None,
    shards: Annotated[
        Path | None,
        typer.Option("--shards", help="A folder to write the manifest to as Parquet shards."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace the --to file or --shards folder.")
    ] = False,
) -> None:
    """Write a length manifest from a dataset."""
    from ..errors import InputError
    from ..manifest.write import WRITE_SUFFIXES, write_manifest, write_shards
    from ..outpath import check_output_path
    from .consoles import out_console

    if to is None and shards is None:
        raise InputError("--to", "no output named", "give --to FILE and/or --shards DIR")
    if address is not None and engine is not Engine.ray:
        raise InputError("--address", "applies to --engine ray", "add --engine ray")
    out = None
    if to is not None:
        out = check_output_path(to, WRITE_SUFFIXES, "manifest", protect=[data])
        if out.exists() and not force:
            raise InputError(str(out), "already exists", "add --force to replace it")
    if shards is not None:
        _check_shards(shards, data, force)
    options = (length_column, category_column)
    kwargs: dict[str, Any] = {
        "split": split,
        "tokenizer": tokenizer,
        "special_tokens": special_tokens,
    }
    with progress(f"reading the dataset ({engine.value} engine)") as tick:
        if engine is Engine.ray:
            from ..manifest.ray_engine import ray_manifest

            m = ray_manifest(data, *options, tick, address=address, **kwargs).manifest
        else:
            from ..manifest import read_manifest

            m = read_manifest(data, *options, progress=tick, **kwargs)
    written: list[Path] = []
    if out is not None:
        written.append(write_manifest(m, out, force=force))
    if shards is not None:
        parts = write_shards(m, shards, force=force)
        written.append(shards)
        print(f"wrote {len(parts)} Parquet shards in {shards}")
    for line in _summary(m, written[0]):
        out_console.print(line, markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``manifest`` to ``app``."""
    from typer.core import TyperCommand

    from .outputs import plain_help_types

    PLAIN = plain_help_types(TyperCommand)
    app.command("manifest", help=_HELP, cls=PLAIN)(manifest)


def _check_shards(folder: Path, data: str, force: bool) -> None:
    """The --shards folder can be written: its parent exists, it is not (or does not
    hold) the input, it exists only with --force."""
    from ..errors import InputError
    from ..storage import is_uri

    if not folder.parent.exists():
        raise InputError(str(folder), "the folder for the shards does not exist", "create it first")
    if not is_uri(data):
        src = Path(data).resolve()
        dst = folder.resolve()
        if src == dst or dst in src.parents or src in dst.parents:
            raise InputError(
                str(folder), "refusing to write into the input", "choose another folder"
            )
    if folder.exists() and not force:
        raise InputError(str(folder), "already exists", "add --force to replace it")
