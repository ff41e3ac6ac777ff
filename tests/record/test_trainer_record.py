"""record_trainer on real transformers.Trainer runs: the recording is what the model trained on.

Every run is a tiny GPT-2 on CPU (``trainer_runs.py``) with group_by_length (whose sampler
draws from the global torch generator), dropout 0.1 (which draws from the same generator) and
gradient accumulation 2. Sample ``i`` starts with token ``FIRST + i``, so a forward pre-hook
reads what the model received as sample ids without the recorder's help.

They need torch and transformers: skipped outside CI where those are missing; under CI
(``CI`` set) they must run, and ``.ci/run`` installs the ``train-test`` extra.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from tests.record import trainer_runs as runs


def need(name: str) -> ModuleType:
    """The module, or a skip outside CI; under CI a missing module is a failure."""
    if os.environ.get("CI"):
        return importlib.import_module(name)
    return pytest.importorskip(
        name, reason=f"{name} is not installed (CI installs the train-test extra and runs these)"
    )


torch = need("torch")
need("transformers")

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from dflash_diag.record import read_recording  # noqa: E402
from dflash_diag.record.hf import BATCH_KEY, IndexedView, IndexingCollator  # noqa: E402

pytestmark = pytest.mark.slow


def micro_batches(table: Any) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """The recording as (step, micro, sorted (id, length) pairs) per micro-batch, in file
    order (the file keeps which samples a micro-batch held, not their order inside it)."""
    out = []
    for (step, micro), g in table.groupby(["step", "micro"], sort=False):
        pairs = sorted(zip(g["sample_id"].tolist(), g["length"].tolist(), strict=True))
        out.append((int(step), int(micro), pairs))
    return out


def as_seen(steps: list[int], ids: list[list[int]], lengths: list[list[int]]) -> list[Any]:
    """What the forward received as (step, sorted (id, length) pairs) per micro-batch."""
    return [
        (s, sorted(zip(i, ls, strict=True))) for s, i, ls in zip(steps, ids, lengths, strict=True)
    ]


def seen_batches(seen: runs.Seen) -> list[Any]:
    return as_seen(seen.steps, seen.ids, seen.lengths)


def recorded_batches(table: Any) -> list[Any]:
    return [(s, pairs) for s, _, pairs in micro_batches(table)]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, runs.Seen, Path]:
    out = tmp_path_factory.mktemp("recorded")
    trainer, seen = runs.train(out / "run", record=out / "train.batches")
    runs.write_log(trainer, out / "train.log")
    return trainer, seen, out


@pytest.fixture(scope="module")
def unrecorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, runs.Seen]:
    out = tmp_path_factory.mktemp("unrecorded")
    return runs.train(out / "run", record=None)


def test_every_micro_batch_is_what_the_forward_received(recorded):
    trainer, seen, out = recorded
    got = recorded_batches(read_recording(out / "train.batches").table)
    # the same micro-batches, in the same order, with the step the update is logged as;
    # real lengths: the recorder's (from the items) are the mask sums the model got
    assert got == seen_batches(seen)
    assert len(got) == 45


def test_steps_are_the_logged_steps_and_accumulation_is_numbered(recorded):
    trainer, seen, out = recorded
    table = read_recording(out / "train.batches").table
    logged = [json.loads(line)["step"] for line in (out / "train.log").read_text().splitlines()]
    assert logged == list(range(1, trainer.state.global_step + 1))
    assert sorted(set(table["step"])) == logged
    # 60 samples / 4 = 15 micro-batches an epoch: 7 steps of 2, then one of 1
    micros = table.groupby("step")["micro"].nunique().tolist()
    assert micros == ([2] * 7 + [1]) * 3
    # every sample once per epoch
    assert Counter(table["sample_id"].tolist()) == {i: 3 for i in range(runs.N_SAMPLES)}
    # what spikes --composition takes: the log's steps and the recorded schedule line up
    from dflash_diag import read_log

    assert read_log(out / "train.log").table["step"].tolist() == logged
    replay = read_recording(out / "train.batches").to_replay()
    assert replay.steps["step"].tolist() == logged
    assert replay.steps["epoch"].tolist() == [e for e in range(3) for _ in range(8)]


def test_the_header_says_the_trainer_settings(recorded):
    _, _, out = recorded
    header = read_recording(out / "train.batches").header
    assert header["world_size"] == 1
    settings = header["settings"]
    assert settings["seed"] == 42
    assert settings["per_device_train_batch_size"] == 4
    assert settings["gradient_accumulation_steps"] == 2
    assert settings["world_size"] == 1
    assert settings["train_sampling_strategy"] == "group_by_length"
    assert settings["steps_per_epoch"] == 8  # 15 micro-batches, accumulation 2
    assert settings["run"] == "trainer_runs"  # the caller's own setting


def test_the_recorder_changes_nothing_that_is_trained(recorded, unrecorded):
    rec_trainer, rec_seen, _ = recorded
    trainer, seen = unrecorded
    # the same batches, the same dropout masks: every micro-batch loss equal to the bit
    assert seen_batches(rec_seen) == seen_batches(seen)
    assert rec_seen.losses == seen.losses
    assert [h.get("loss") for h in rec_trainer.state.log_history] == [
        h.get("loss") for h in trainer.state.log_history
    ]
    rec_params = dict(rec_trainer.model.named_parameters())
    for name, p in trainer.model.named_parameters():
        assert torch.equal(p, rec_params[name]), name


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, runs.Seen, Path]:
    out = tmp_path_factory.mktemp("measured")
    trainer, seen = runs.train(out / "run", record=out / "train.batches", sample_losses=True)
    return trainer, seen, out


def test_sample_losses_change_nothing_that_is_trained(measured, unrecorded):
    rec_trainer, rec_seen, _ = measured
    trainer, seen = unrecorded
    assert seen_batches(rec_seen) == seen_batches(seen)
    assert rec_seen.losses == seen.losses  # every micro-batch loss, to the bit
    assert [h.get("loss") for h in rec_trainer.state.log_history] == [
        h.get("loss") for h in trainer.state.log_history
    ]
    rec_params = dict(rec_trainer.model.named_parameters())
    for name, p in trainer.model.named_parameters():
        assert torch.equal(p, rec_params[name]), name


def test_sample_losses_average_to_the_micro_batch_loss(measured):
    _, seen, out = measured
    rec = read_recording(out / "train.batches")
    assert rec.has_losses and rec.table["loss"].notna().all()
    groups = list(rec.table.groupby(["step", "micro"], sort=False))
    assert len(groups) == len(seen.losses) == 45
    for (_, g), ids, targets, loss, items in zip(
        groups, seen.ids, seen.targets, seen.losses, seen.num_items, strict=True
    ):
        n_of = dict(zip(ids, targets, strict=True))
        n = np.array([n_of[i] for i in g["sample_id"]], dtype=np.float64)
        mean = float((g["loss"].to_numpy() * n).sum() / n.sum())
        # the model's loss is the sum over the micro-batch's target tokens divided by
        # num_items_in_batch (the accumulated batch's targets) when the Trainer gives it
        micro_mean = loss * items / n.sum() if items is not None else loss
        assert mean == pytest.approx(micro_mean, rel=1e-5)
    # the losses are per sample, not the micro-batch's copied: they differ inside one
    assert any(g["loss"].nunique() > 1 for _, g in groups)


def test_a_recording_without_sample_losses_has_none(recorded):
    _, _, out = recorded
    rec = read_recording(out / "train.batches")
    assert not rec.has_losses and rec.table["loss"].isna().all()


def test_arrow_dataset_with_workers(tmp_path):
    # the Trainer drops the unused column from the Arrow dataset itself, reads lengths from
    # its length column, and the collator runs in two worker processes
    need("datasets")
    trainer, seen = runs.train(
        tmp_path / "run", record=tmp_path / "train.batches", arrow=True, workers=2, epochs=2
    )
    got = recorded_batches(read_recording(tmp_path / "train.batches").table)
    assert got == seen_batches(seen)
    assert len(got) == 30


def test_trl_sft_trainer(tmp_path):
    # TRL's SFTTrainer: its own collator and dataset preparation, the same recorder
    need("trl")
    need("datasets")
    trainer, seen = runs.sft_train(tmp_path / "a", record=tmp_path / "train.batches")
    got = recorded_batches(read_recording(tmp_path / "train.batches").table)
    assert got == seen_batches(seen)
    assert len(got) == 30
    plain, plain_seen = runs.sft_train(tmp_path / "b", record=None)
    assert seen.losses == plain_seen.losses


@given(
    st.lists(
        st.tuples(st.integers(0, 10**9), st.integers(1, 40), st.integers(0, 40), st.booleans()),
        min_size=1,
        max_size=12,
    )
)
def test_the_outer_collate_takes_ids_and_real_lengths_and_passes_the_items_on(rows):
    # any items, padded (a mask) or not: the composition holds each item's index and real
    # tokens; the real collate function gets the very items the dataset gave, in order
    dataset = {}
    for index, real, pad, masked in rows:
        item = {"input_ids": list(range(real + (pad if masked else 0)))}
        if masked:
            item["attention_mask"] = [1] * real + [0] * pad
        dataset[index] = item
    indices = [r[0] for r in rows]
    got: list[Any] = []
    outer = IndexingCollator(lambda items: got.extend(items) or {"n": len(items)})
    batch = outer(IndexedView(dataset).__getitems__(indices))
    comp = batch.pop(BATCH_KEY)
    assert batch == {"n": len(indices)}
    assert got == [dataset[i] for i in indices]
    assert all(a is b for a, b in zip(got, (dataset[i] for i in indices), strict=True))
    assert comp.ids.tolist() == indices
    assert comp.lengths.tolist() == [
        dataset[i].get("attention_mask", dataset[i]["input_ids"]).count(1)
        if "attention_mask" in dataset[i]
        else len(dataset[i]["input_ids"])
        for i in indices
    ]


def test_a_batch_that_is_not_a_dict_or_an_item_without_tokens_is_said():
    view = IndexedView([{"input_ids": [1, 2]}, {"text": "no tokens"}])
    with pytest.raises(TypeError, match="returned a tuple; recorded batches must be dicts"):
        IndexingCollator(lambda items: tuple(items))(view.__getitems__([0]))
    with pytest.raises(TypeError, match="length of a dict item .*pass length_of="):
        IndexingCollator(lambda items: {})(view.__getitems__([1]))
    # length_of: the caller says what a sample's real length is
    batch = IndexingCollator(lambda items: {}, length_of=lambda x: 7)(view.__getitems__([1, 0]))
    assert batch[BATCH_KEY].lengths.tolist() == [7, 7]


def test_an_iterable_dataset_is_refused(tmp_path):
    from torch.utils.data import IterableDataset
    from transformers import Trainer, TrainingArguments

    from dflash_diag.record import record_trainer

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(runs.list_dataset(8))

    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=2,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=runs.tiny_gpt2(), args=args, train_dataset=Stream(), data_collator=runs.pad_collate
    )
    # refused at once, before anything is written or trained
    with pytest.raises(TypeError, match=r"\(Stream\) is iterable; it needs a map-style dataset"):
        record_trainer(trainer, tmp_path / "train.batches")
    assert not (tmp_path / "train.batches").exists()


def test_two_processes_write_one_file_each(tmp_path):
    # torchrun, gloo on CPU: each rank records its own micro-batches under the logged step
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    script = Path(runs.__file__)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            str(script),
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("*.batches")) == [
        "train.rank0.batches",
        "train.rank1.batches",
    ]
    rec = read_recording(tmp_path / "train.batches")
    table = rec.table
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"seen.rank{rank}.json").read_text())
        assert seen["world_size"] == 2
        got = recorded_batches(table[table["rank"] == rank])
        assert got == as_seen(seen["steps"], seen["ids"], seen["lengths"])
    # together the two ranks hold every step's micro-batches: 2 x 2 micro-batches of 4
    assert (table.groupby("step")["rank"].nunique() == 2).all()
    assert (table.groupby(["step", "rank"])["micro"].nunique() == 2).all()
    # epoch 1 (steps 1-4): every sample, 15 batches of 4 padded to 16 by accelerate's
    # even_batches (the first batch again). Epoch 2 is NOT a partition: dropout drew from
    # each rank's global generator differently, so the ranks' group_by_length permutations
    # differ; the recording says what really happened (checked against the forward above)
    first = table[table["step"] <= 4]["sample_id"]
    assert set(first) == set(range(runs.N_SAMPLES)) and len(first) == 64
    second = table[(table["step"] > 4) & (table["step"] <= 8)]["sample_id"]
    counts = second.value_counts()
    twice, never = int((counts > 1).sum()), runs.N_SAMPLES - second.nunique()
    # (the padding of even_batches repeats one batch of 4: more than that is the divergence)
    assert len(second) == 64 and never > 0 and twice > 4, (twice, never)
