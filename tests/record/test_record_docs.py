"""docs/record.md's plain-loop example runs, on a tiny GPT-2, and records what it says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.record import trainer_runs as runs
from tests.record.test_trainer_record import need

torch = need("torch")
need("transformers")

from dflash_diag.record import read_recording  # noqa: E402

pytestmark = pytest.mark.slow

DOC = Path(__file__).resolve().parents[2] / "docs" / "record.md"


def plain_loop_example() -> str:
    text = DOC.read_text(encoding="utf-8")
    after = text[text.index("a plain loop gives them to `BatchRecorder.log`") :]
    block = re.search(r"```python\n(.*?)```", after, re.S)
    assert block is not None
    return "\n".join(line[2:] for line in block.group(1).splitlines())  # (indented 2)


@pytest.mark.slow
def test_the_plain_loop_example_records_per_sample_losses(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    model = runs.tiny_gpt2(dropout=0.0)
    rows = runs.list_dataset(12)
    loader = []
    for a in range(0, 12, 4):
        batch = runs.pad_collate([{"input_ids": r["input_ids"]} for r in rows[a : a + 4]])
        batch["idx"] = list(range(a, a + 4))
        batch["lengths"] = batch["attention_mask"].sum(dim=1)
        loader.append(batch)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # (the weights stay: checkable)
    exec(plain_loop_example(), {"model": model, "loader": loader, "optimizer": optimizer})
    rec = read_recording(tmp_path / "train.batches")
    assert rec.has_losses and rec.table["sample_id"].tolist() == list(range(12))
    with torch.no_grad():  # each sample alone: its mean loss over its own targets
        for i, got in zip(rec.table["sample_id"], rec.table["loss"], strict=True):
            ids = torch.tensor([rows[i]["input_ids"]])
            assert got == pytest.approx(float(model(ids, labels=ids).loss), rel=1e-4)
