"""Which Parquet shards of a folder make the dataset, and in what order: as Hugging Face
``datasets`` resolves a folder's data files in ``load_dataset(folder)`` (its
``data_files.py``, read to learn the rules; written here without it).

1. Shards named ``data/{split}-NNNNN-of-NNNNN*.*`` (``push_to_hub``'s layout): the
   split's shards.
2. Else file or folder names carrying a split keyword (``train``/``training``,
   ``validation``/``valid``/``dev``/``val``, ``test``/``testing``/``eval``/``evaluation``,
   between separators ``-._ `` or digits): the split's files, pattern by pattern.
3. Else every shard is the ``train`` split.

Within each pattern the files come in sorted order of their whole path as text (fsspec's
``find`` sorts so), and the patterns of a split are taken in ``datasets``' order; rows
within a shard keep their order.  Hidden files and folders (``.x``) and folders
``__x`` are skipped.
A ``save_to_disk`` folder is not this: its ``state.json`` lists its files (see
:mod:`.sources`).

>>> order_shards(["train-1.parquet", "test-0.parquet", "train-0.parquet"], None)[0]
['train-0.parquet', 'train-1.parquet']
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ..errors import InputError

SPLIT_KEYWORDS: dict[str, tuple[str, ...]] = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "dev", "val"),
    "test": ("test", "testing", "eval", "evaluation"),
}
_SEP = r"[-._ 0-9]"
_SHARDED = re.compile(r"^data/(?P<split>\w+(?:\.\w+)*)-\d{5}-of-\d{5}[^/]*\.[^/]*$")
IGNORED = {
    "README.md",
    "config.json",
    "dataset_info.json",
    "dataset_infos.json",
    "dummy_data.zip",
    "dataset_dict.json",
}


def _file_patterns(word: str) -> list[re.Pattern[str]]:
    """``**/{word}[sep]*`` and ``**/*[sep]{word}[sep]*``: the keyword begins a file name
    or follows a separator in it."""
    w = re.escape(word)
    return [
        re.compile(rf"^(?:.*/)?{w}{_SEP}[^/]*$"),
        re.compile(rf"^(?:.*/)?[^/]*{_SEP}{w}{_SEP}[^/]*$"),
    ]


def _dir_patterns(word: str) -> list[re.Pattern[str]]:
    """``**/{word}/**``, ``**/{word}[sep]*/**``, ``**/*[sep]{word}/**``,
    ``**/*[sep]{word}[sep]*/**``: the keyword names a folder above the file."""
    w = re.escape(word)
    return [
        re.compile(rf"^(?:.*/)?{w}/.*$"),
        re.compile(rf"^(?:.*/)?{w}{_SEP}[^/]*/.*$"),
        re.compile(rf"^(?:.*/)?[^/]*{_SEP}{w}/.*$"),
        re.compile(rf"^(?:.*/)?[^/]*{_SEP}{w}{_SEP}[^/]*/.*$"),
    ]


def _visible(rel: str) -> bool:
    """Not hidden (a ``.`` name, or a ``.`` or ``__`` folder above it) nor ignored."""
    *folders, name = rel.split("/")
    hidden = name.startswith(".") or any(f.startswith((".", "__")) for f in folders)
    return not hidden and name not in IGNORED


def _by_keywords(
    files: list[str], make: Callable[[str], list[re.Pattern[str]]]
) -> dict[str, list[str]]:
    """Each split's files, pattern by pattern in ``datasets``' order (a file matching two
    patterns is listed twice, as ``datasets`` lists it)."""
    out: dict[str, list[str]] = {}
    for split, words in SPLIT_KEYWORDS.items():
        chosen: list[str] = []
        for word in words:
            for pattern in make(word):
                chosen.extend(f for f in files if pattern.match(f))
        if chosen:
            out[split] = chosen
    return out


def split_files(files: list[str]) -> tuple[dict[str, list[str]], str]:
    """The splits of a folder's files (paths relative to it, ``/``-separated) and the
    rule that made them."""
    files = sorted(f for f in files if _visible(f))
    sharded = [(m["split"], f) for f in files if (m := _SHARDED.match(f))]
    if sharded:
        names = sorted({s for s, _ in sharded}, key=lambda s: (s not in SPLIT_KEYWORDS, s))
        return {s: [f for t, f in sharded if t == s] for s in names}, "data/{split}-NNNNN-of-NNNNN"
    for make, rule in ((_dir_patterns, "folder names"), (_file_patterns, "file names")):
        splits = _by_keywords(files, make)
        if splits:
            return splits, f"split keywords in {rule}"
    return {"train": files}, "all files"


def order_shards(
    files: list[str], split: str | None, shown: str | None = None
) -> tuple[list[str], str]:
    """The shards of ``split`` (default ``train``) in dataset order, and a note saying
    how the order was decided (for the manifest's description).

    :raises InputError: the split is not there (naming the splits that are).
    """
    splits, rule = split_files(files)
    want = split or "train"
    if want not in splits:
        raise InputError(
            shown,
            f"no split {want!r} among the shards (splits by {rule}: {', '.join(splits)})",
            "choose one with --split",
        )
    note = "as datasets' load_dataset resolves a folder"
    if rule != "all files" or len(splits) > 1:
        note += f"; split {want!r} by {rule}"
    return splits[want], note
