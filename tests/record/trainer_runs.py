"""Tiny real training runs for the recorder tests (and the overhead benchmark).

A GPT-2 of two layers from a config, on CPU, over a synthetic token dataset whose samples
say who they are: sample ``i`` starts with token ``FIRST + i`` (never padding, never another
sample's first token), so what the model's forward received can be read back as sample ids
with a forward pre-hook, independently of any recorder.

Run as a script for the multi-process tests::

    torchrun --standalone --nproc_per_node 2 tests/record/trainer_runs.py OUT_DIR
    python tests/record/trainer_runs.py OUT_DIR lightning    # Lightning's ddp, 2 CPU ranks

torch, transformers (and datasets for the Arrow case) are imported inside the functions:
pytest imports this module (``--doctest-modules``) where they may be missing.
"""

from __future__ import annotations

import json
import os
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
for _k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ[_k] = "1"

PAD = 0
FIRST = 4  # sample i starts with token FIRST + i
VOCAB = 256
N_SAMPLES = 60


def sample_lengths(n: int = N_SAMPLES, seed: int = 11) -> list[int]:
    """Tokens per sample: 4..24, seeded."""
    rng = random.Random(seed)
    return [rng.randint(4, 24) for _ in range(n)]


def token_rows(n: int = N_SAMPLES) -> list[list[int]]:
    """Sample ``i``: ``FIRST + i``, then random tokens above every first token."""
    rng = random.Random(7)
    low = FIRST + n
    return [
        [FIRST + i] + [rng.randrange(low, VOCAB) for _ in range(k - 1)]
        for i, k in enumerate(sample_lengths(n))
    ]


def list_dataset(n: int = N_SAMPLES) -> list[dict[str, Any]]:
    """A plain list of dicts; ``note`` is a column the model does not take (the Trainer's
    RemoveColumnsCollator drops it)."""
    return [{"input_ids": row, "note": f"sample {i}"} for i, row in enumerate(token_rows(n))]


def arrow_dataset(n: int = N_SAMPLES) -> Any:
    """The same samples as a ``datasets.Dataset`` (the Trainer drops ``note`` from its
    columns) with a ``length`` column."""
    from datasets import Dataset

    rows = token_rows(n)
    return Dataset.from_dict(
        {
            "input_ids": rows,
            "note": [f"sample {i}" for i in range(n)],
            "length": [len(r) for r in rows],
        }
    )


def pad_collate(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """Right-pad with ``PAD``; mask; labels -100 on padding. Fails on a column it does not
    expect, so the Trainer's column removal is checked too."""
    import torch

    for x in batch:
        extra = set(x) - {"input_ids", "length"}
        if extra:
            raise KeyError(f"unexpected columns {sorted(extra)}")
    width = max(len(x["input_ids"]) for x in batch)
    ids = torch.full((len(batch), width), PAD, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for i, x in enumerate(batch):
        ids[i, : len(x["input_ids"])] = torch.as_tensor(x["input_ids"])
        mask[i, : len(x["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def tiny_gpt2(dropout: float = 0.1) -> Any:
    """Two layers, 32 wide, dropout on embeddings, attention and residuals."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=VOCAB,
        n_positions=32,
        n_embd=32,
        n_layer=2,
        n_head=2,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
    )
    return GPT2LMHeadModel(cfg)


@dataclass
class Seen:
    """What the model's forward received, per micro-batch, and what it returned."""

    steps: list[int] = field(default_factory=list)  # the logged step of the update
    ids: list[list[int]] = field(default_factory=list)  # first token - FIRST, per row
    lengths: list[list[int]] = field(default_factory=list)  # mask sums
    losses: list[float] = field(default_factory=list)
    targets: list[list[int]] = field(default_factory=list)  # labels that are not -100, shifted
    num_items: list[int | None] = field(default_factory=list)  # the loss's divisor, if given


def watch_forward(model: Any, step_of: Any, seen: Seen) -> None:
    """Hooks on the model: its inputs (and ``step_of()``, the step the log will give this
    update) before the forward, its loss after."""

    def before(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        if not module.training:
            return
        ids = kwargs["input_ids"]
        seen.steps.append(step_of())
        seen.ids.append((ids[:, 0] - FIRST).tolist())
        seen.lengths.append(kwargs["attention_mask"].sum(dim=1).tolist())
        seen.targets.append((kwargs["labels"][:, 1:] != -100).sum(dim=1).tolist())
        items = kwargs.get("num_items_in_batch")
        seen.num_items.append(None if items is None else int(items))

    def after(module: Any, args: Any, kwargs: dict[str, Any], out: Any) -> None:
        if module.training:
            seen.losses.append(float(out.loss.detach()))

    model.register_forward_pre_hook(before, with_kwargs=True)
    model.register_forward_hook(after, with_kwargs=True)


def train(
    out: Path,
    *,
    record: Path | None,
    arrow: bool = False,
    workers: int = 0,
    epochs: int = 3,
    max_steps: int = -1,
    sample_losses: bool = False,
    **overrides: Any,
) -> tuple[Any, Seen]:
    """One Trainer run: group_by_length, dropout 0.1, gradient accumulation 2, batch 4,
    seed 42, a loss logged every step; with ``record_trainer`` when ``record`` is a path.
    Returns the trainer and what its model's forward saw."""
    from transformers import Trainer, TrainingArguments, set_seed

    set_seed(42)  # the model's initial weights: the same in every run
    args = TrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        num_train_epochs=epochs,
        max_steps=max_steps,
        seed=42,
        train_sampling_strategy="group_by_length",
        dataloader_num_workers=workers,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        learning_rate=1e-3,
        **overrides,
    )
    model = tiny_gpt2()
    trainer = Trainer(
        model=model,
        args=args,
        data_collator=pad_collate,
        train_dataset=arrow_dataset() if arrow else list_dataset(),
    )
    seen = Seen()
    watch_forward(model, lambda: trainer.state.global_step + 1, seen)
    if record is not None:
        from dflash_diag.record import record_trainer

        record_trainer(trainer, record, sample_losses=sample_losses, run="trainer_runs")
    trainer.train()
    return trainer, seen


def sft_train(out: Path, *, record: Path | None) -> tuple[Any, Seen]:
    """TRL's SFTTrainer over the same samples, already tokenized (a word-level tokenizer
    built here gives it its padding token): group_by_length, dropout, accumulation 2,
    2 epochs."""
    from datasets import Dataset
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast, set_seed
    from trl import SFTConfig, SFTTrainer

    words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t1"))
    tok = PreTrainedTokenizerFast(tokenizer_object=words, pad_token="t0", eos_token="t2")
    set_seed(42)
    args = SFTConfig(
        output_dir=str(out),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        num_train_epochs=2,
        seed=42,
        train_sampling_strategy="group_by_length",
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        max_length=None,
    )
    model = tiny_gpt2()
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_dict({"input_ids": token_rows()}),
        processing_class=tok,
    )
    seen = Seen()
    watch_forward(model, lambda: trainer.state.global_step + 1, seen)
    if record is not None:
        from dflash_diag.record import record_trainer

        record_trainer(trainer, record)
    trainer.train()
    return trainer, seen


def item_collate(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """Lightning has no column removal: keep the model's columns, then pad."""
    return pad_collate([{"input_ids": x["input_ids"]} for x in batch])


def lightning_train(
    out: Path,
    *,
    record: Path | None,
    workers: int = 0,
    epochs: int = 3,
    sample_losses: bool = False,
    **trainer_kw: Any,
) -> tuple[Any, Seen]:
    """One Lightning fit of the same GPT-2: shuffled DataLoader (its RandomSampler draws from
    the global generator, as dropout does), batch 4, accumulate_grad_batches 2, the loss
    logged every step to a CSV file in ``out``; with ``LightningRecorder`` when ``record``;
    ``training_step`` returns ``{"loss", "sample_losses"}`` with ``sample_losses``."""
    import lightning as L
    import torch
    from lightning.pytorch.loggers import CSVLogger

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = tiny_gpt2()

        def training_step(self, batch: dict[str, Any], batch_idx: int) -> Any:
            if set(batch) != {"input_ids", "attention_mask", "labels"}:
                raise KeyError(f"training_step got {sorted(batch)}")
            out = self.model(**batch)
            self.log("loss", out.loss)
            if not sample_losses:
                return out.loss
            from dflash_diag.record.hf import per_sample_losses

            per = torch.as_tensor(per_sample_losses(out, batch["labels"]))
            return {"loss": out.loss, "sample_losses": per}

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

        def train_dataloader(self) -> Any:
            return torch.utils.data.DataLoader(
                list_dataset(),
                batch_size=4,
                shuffle=True,
                collate_fn=item_collate,
                num_workers=workers,
                persistent_workers=workers > 0,
            )

    L.seed_everything(42, verbose=False)
    module = Module()
    seen = Seen()
    callbacks = []
    if record is not None:
        from dflash_diag.record import LightningRecorder

        callbacks.append(LightningRecorder(record, settings={"run": "lightning_runs"}))
    trainer = L.Trainer(
        max_epochs=epochs,
        accumulate_grad_batches=2,
        log_every_n_steps=1,
        logger=CSVLogger(str(out), name="log", version=0),
        accelerator="cpu",
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=callbacks,
        **trainer_kw,
    )
    # Lightning's loggers number an update by the global_step before it
    watch_forward(module.model, lambda: trainer.global_step, seen)
    trainer.fit(module)
    return trainer, seen


def write_log(trainer: Any, path: Path) -> None:
    """The trainer's log history as the JSON lines a run's log holds."""
    lines = [json.dumps(h) for h in trainer.state.log_history if "loss" in h]
    path.write_text("\n".join(lines) + "\n")


def main(out_dir: str, family: str = "hf") -> None:
    """The multi-process entry (torchrun for ``hf``; Lightning launches its own ranks for
    ``lightning``): each rank trains and writes what its forward saw."""
    out = Path(out_dir)
    if family == "lightning":
        trainer, seen = lightning_train(
            out, record=out / "train.batches", epochs=2, strategy="ddp", devices=2
        )
        rank, world = trainer.global_rank, trainer.world_size
    else:
        trainer, seen = train(out / "trainer", record=out / "train.batches", epochs=2)
        rank, world = trainer.args.process_index, trainer.args.world_size
    (out / f"seen.rank{rank}.json").write_text(
        json.dumps(
            {"steps": seen.steps, "ids": seen.ids, "lengths": seen.lengths, "world_size": world}
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
