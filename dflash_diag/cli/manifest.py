"""``dflash-diag manifest DATA --to FILE``: a length manifest from a dataset."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .options import progress

if TYPE_CHECKING:
    from ..data import Manifest

_HELP = """Write a length manifest (sample_id, length[, category]) from a dataset.

DATA is a Parquet, JSONL or Arrow/Feather file with a list column of token ids
(input_ids, or --length-column), a folder written by Hugging Face datasets'
save_to_disk (a DatasetDict: its train split, or --split), or a folder of Parquet
shards (sorted file-name order).  Padded input_ids with an attention_mask: the mask
sums.  A text column: --tokenizer tokenizer.json counts its tokens (the optional
'tokenizers' package; nothing is downloaded).  Rows stay in dataset order.
"""


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


def register(app: typer.Typer) -> None:
    @app.command("manifest", help=_HELP)
    def manifest(
        data: Annotated[str, typer.Argument(help="The dataset: a file or a folder.")],
        to: Annotated[Path, typer.Option("--to", help="The manifest to write: .parquet or .csv.")],
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
            typer.Option(
                "--tokenizer", help="A local tokenizer.json counting a text column's tokens."
            ),
        ] = None,
        special_tokens: Annotated[
            bool,
            typer.Option(
                "--special-tokens/--no-special-tokens",
                help="With --tokenizer, count the special tokens it adds (BOS, EOS...).",
            ),
        ] = True,
        force: Annotated[
            bool, typer.Option("--force", help="Replace the --to file if it exists.")
        ] = False,
    ) -> None:
        """Write a length manifest from a dataset."""
        from ..errors import InputError
        from ..manifest import read_manifest
        from ..manifest.write import WRITE_SUFFIXES, write_manifest
        from ..outpath import check_output_path

        out = check_output_path(to, WRITE_SUFFIXES, "manifest", protect=[data])
        if out.exists() and not force:
            raise InputError(str(out), "already exists", "add --force to replace it")
        with progress("reading the dataset") as tick:
            m = read_manifest(
                data,
                length_column,
                category_column,
                progress=tick,
                split=split,
                tokenizer=tokenizer,
                special_tokens=special_tokens,
            )
        write_manifest(m, out, force=force)
        from .consoles import out_console

        for line in _summary(m, out):
            out_console.print(line, markup=False, highlight=False, soft_wrap=True)
