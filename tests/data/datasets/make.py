"""Make the dataset fixtures with the real Hugging Face ``datasets`` library.

Run from the repository root, in an environment with ``datasets`` (not needed by the tests):

    python -m venv /tmp/dsenv && /tmp/dsenv/bin/pip install datasets pyarrow pandas
    /tmp/dsenv/bin/python tests/data/datasets/make.py

Writes, next to this file (the tests read them without ``datasets``):

- ``expected.json``: the lengths the rows were built with (``input_ids`` lengths,
  ``attention_mask`` sums of the padded set, words per text) and the versions used;
- ``hf_dataset/``: ``Dataset.save_to_disk`` in 3 shards (``state.json`` names the files);
- ``hf_dict/``: ``DatasetDict.save_to_disk`` with ``train`` and ``test``;
- ``hf_dict_no_train/``: a DatasetDict with ``validation`` and ``test`` only;
- ``shards/``: ``to_parquet`` of 4 contiguous shards, ``part-00000.parquet``...;
- ``ids.jsonl``, ``ids.parquet``, ``ids.arrow`` (Feather): the same rows;
- ``padded.parquet``: ``input_ids`` padded to 48 with an ``attention_mask``.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.feather as feather

HERE = Path(__file__).resolve().parent
ROWS = 200
WORDS = ["alpha", "beta", "gamma", "delta", "loss", "spike", "batch", "token", "the", "a"]
SOURCES = ["chat", "code", "math"]
PAD_TO = 48


def rows(n: int, seed: int) -> dict[str, list]:
    """``n`` rows: token ids of 1..40 ids, a text of 1..30 words, a source."""
    rng = random.Random(seed)
    ids = [[rng.randrange(1000) for _ in range(rng.randint(1, 40))] for _ in range(n)]
    text = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30))) for _ in range(n)]
    source = [rng.choice(SOURCES) for _ in range(n)]
    return {"input_ids": ids, "text": text, "source": source}


FEATURES = datasets.Features(
    {
        "input_ids": datasets.Sequence(datasets.Value("int32")),
        "text": datasets.Value("string"),
        "source": datasets.Value("string"),
    }
)


def padded(data: dict[str, list]) -> datasets.Dataset:
    """The rows right-padded with 0 to ``PAD_TO`` ids, with their attention mask."""
    ids = [r + [0] * (PAD_TO - len(r)) for r in data["input_ids"]]
    mask = [[1] * len(r) + [0] * (PAD_TO - len(r)) for r in data["input_ids"]]
    features = datasets.Features(
        {
            "input_ids": datasets.Sequence(datasets.Value("int32")),
            "attention_mask": datasets.Sequence(datasets.Value("int8")),
        }
    )
    return datasets.Dataset.from_dict({"input_ids": ids, "attention_mask": mask}, features)


def main() -> None:
    for old in ("hf_dataset", "hf_dict", "hf_dict_no_train", "shards"):
        shutil.rmtree(HERE / old, ignore_errors=True)
    data = rows(ROWS, 0)
    ds = datasets.Dataset.from_dict(data, FEATURES)
    ds.save_to_disk(str(HERE / "hf_dataset"), num_shards=3)
    test = datasets.Dataset.from_dict(rows(50, 1), FEATURES)
    datasets.DatasetDict({"train": ds, "test": test}).save_to_disk(str(HERE / "hf_dict"))
    datasets.DatasetDict({"validation": test, "test": test}).save_to_disk(
        str(HERE / "hf_dict_no_train")
    )
    (HERE / "shards").mkdir()
    for i in range(4):
        part = ds.shard(num_shards=4, index=i, contiguous=True)
        part.to_parquet(str(HERE / "shards" / f"part-{i:05d}.parquet"))
    ds.to_json(str(HERE / "ids.jsonl"), lines=True)
    ds.to_parquet(str(HERE / "ids.parquet"))
    feather.write_feather(ds.data.table, str(HERE / "ids.arrow"), compression="uncompressed")
    padded(data).to_parquet(str(HERE / "padded.parquet"))
    expected = {
        "datasets": datasets.__version__,
        "pyarrow": pa.__version__,
        "lengths": [len(r) for r in data["input_ids"]],
        "test_lengths": [len(r) for r in rows(50, 1)["input_ids"]],
        "words": [len(t.split()) for t in data["text"]],
        "source": data["source"],
        "pad_to": PAD_TO,
    }
    (HERE / "expected.json").write_text(json.dumps(expected) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
