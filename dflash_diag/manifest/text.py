"""Token counts of a text column, by a local ``tokenizer.json`` (the optional ``tokenizers``
package; nothing is downloaded)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..data import Progress
from ..errors import InputError, MissingDependency
from .sources import clip

#: Texts encoded per call (the tokenizer parallelises inside a call).
BATCH = 4096


def load_tokenizer(path: str | os.PathLike[str]) -> Any:
    """A ``tokenizers.Tokenizer`` from a local ``tokenizer.json``, with padding turned off
    (a padded count is not a length); its truncation, if it sets one, is kept.

    :raises InputError: ``tokenizers`` is not installed, or the file is missing or does
        not load.
    """
    p = Path(path)
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise MissingDependency(str(p), "tokenizers", "tokenize") from None
    if not p.is_file():
        raise InputError(str(p), "tokenizer file not found", "give a local tokenizer.json")
    try:
        tok = Tokenizer.from_file(str(p))
    except Exception as e:  # noqa: BLE001 - the Rust side raises plain Exceptions
        raise InputError(
            str(p),
            f"does not load as a tokenizer.json ({clip(str(e), 80)})",
            "give the tokenizer.json saved with the model (tokenizer.save or save_pretrained)",
        ) from None
    tok.no_padding()
    return tok


def describe_tokenizer(tok: Any, path: str | os.PathLike[str], special: bool) -> str:
    """How the counts were made, for the manifest's description."""
    trunc = tok.truncation
    cut = f", truncated at {trunc['max_length']}" if trunc else ""
    extra = "special tokens added" if special else "no special tokens"
    return f"tokens of the text by {Path(path).name} ({extra}{cut})"


def count_tokens(
    tok: Any,
    texts: list[Any],
    special: bool = True,
    progress: Progress | None = None,
) -> list[int | None]:
    """Tokens per text (``None`` where a text is missing), ``len(encode(text).ids)``.

    :param special: add the tokenizer's special tokens (BOS/EOS...), as
        ``tokenizer(text)`` does by default in ``transformers``.
    :param progress: called as ``progress(texts_done, len(texts))`` after each batch.
    :raises InputError: a cell is not text (names its row in ``texts``, 0-based).
    """
    bad = [i for i, t in enumerate(texts) if t is not None and not isinstance(t, str)]
    if bad:
        raise InputError(None, f"rows {', '.join(map(str, bad[:3]))} are not text", "")
    out: list[int | None] = [None] * len(texts)
    present = [i for i, t in enumerate(texts) if t is not None]
    for start in range(0, len(present), BATCH):
        rows = present[start : start + BATCH]
        encoded = tok.encode_batch([texts[i] for i in rows], add_special_tokens=special)
        for i, e in zip(rows, encoded, strict=True):
            out[i] = len(e.ids)
        if progress is not None:
            progress(rows[-1] + 1, len(texts))
    return out
