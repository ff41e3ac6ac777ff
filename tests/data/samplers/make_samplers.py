"""Record what the real samplers draw: oracles for replaying torch-side schedules.

Run with a Python that has torch (CPU), transformers, accelerate and datasets (see
README.md)::

    python tests/data/samplers/make_samplers.py            # every oracle
    python tests/data/samplers/make_samplers.py trainer    # some of them

Writes one JSON file per sampler family next to this script.  Every index list is what
the real sampler yielded, drawn through a real ``DataLoader`` iterator where the brief
says so (each epoch's iterator first draws its 64-bit base seed from the global
generator, then the sampler draws).  Nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
for _k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ[_k] = "1"
os.environ["WANDB_DISABLED"] = "true"

import torch  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler  # noqa: E402

HERE = Path(__file__).resolve().parent
SIZES = (10, 37, 100)
SEEDS = (0, 42)
BATCH_SIZES = (4, 8)
EPOCHS = 3


def versions() -> dict[str, str]:
    import platform

    import accelerate
    import datasets
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "accelerate": accelerate.__version__,
        "datasets": datasets.__version__,
    }


def write(name: str, doc: dict) -> None:
    doc = {"versions": versions(), **doc}
    (HERE / f"{name}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"{name}.json: {len(doc['cases'])} cases", flush=True)


def lengths_for(n: int) -> list[int]:
    """Seeded sample lengths (tokens) for the length-grouped sampler."""
    rng = random.Random(1000 + n)
    return [rng.randint(1, 512) for _ in range(n)]


def epochs_through(loader: DataLoader) -> list[list[list[int]]]:
    """EPOCHS passes over the loader: per epoch, its batches of indices."""
    return [[b.tolist() for b in loader] for _ in range(EPOCHS)]


# ---- (a) RandomSampler without a generator, global seed ---------------------------------


def random_sampler() -> None:
    """``torch.manual_seed(seed)``, then ``DataLoader(range(n), batch_size,
    sampler=RandomSampler(ds))`` iterated EPOCHS times (same as ``shuffle=True``)."""
    cases = []
    for n in SIZES:
        for seed in SEEDS:
            for bs in BATCH_SIZES:
                torch.manual_seed(seed)
                ds = list(range(n))
                loader = DataLoader(ds, batch_size=bs, sampler=RandomSampler(ds))
                epochs = epochs_through(loader)
                cases.append({"n": n, "seed": seed, "batch_size": bs, "epochs": epochs})
    write(
        "random_sampler",
        {
            "what": "torch.manual_seed(seed); DataLoader(list(range(n)), batch_size, "
            "sampler=RandomSampler(ds)) iterated 3 times, num_workers=0; epochs[e] = batches",
            "cases": cases,
        },
    )


# ---- (b) transformers' LengthGroupedSampler, global seed --------------------------------


def length_grouped() -> None:
    """``LengthGroupedSampler(batch_size, lengths=...)`` with no generator (the Trainer's
    group_by_length): megabatches of 50 x batch_size sorted by length, longest first."""
    from transformers.trainer_pt_utils import LengthGroupedSampler

    cases = []
    for n in (*SIZES, 437):
        lengths = lengths_for(n)
        for seed in SEEDS:
            for bs in BATCH_SIZES:
                torch.manual_seed(seed)
                sampler = LengthGroupedSampler(bs, lengths=lengths)
                loader = DataLoader(list(range(n)), batch_size=bs, sampler=sampler)
                cases.append(
                    {
                        "n": n,
                        "seed": seed,
                        "batch_size": bs,
                        "lengths": lengths,
                        "epochs": epochs_through(loader),
                    }
                )
    write(
        "length_grouped",
        {
            "what": "torch.manual_seed(seed); DataLoader(list(range(n)), batch_size, "
            "sampler=LengthGroupedSampler(batch_size, lengths=lengths)) iterated 3 times; "
            "megabatch = 50 * batch_size",
            "cases": cases,
        },
    )


# ---- (c) DistributedSampler -----------------------------------------------------------------


def distributed() -> None:
    """``DistributedSampler(ds, num_replicas=W, rank=r, shuffle=True, seed, drop_last)``
    with ``set_epoch(e)``: each rank's index list."""
    cases = []
    for n in SIZES:
        ds = list(range(n))
        for seed in SEEDS:
            for world in (1, 2, 3):
                for drop_last in (False, True):
                    for epoch in range(EPOCHS):
                        ranks = []
                        for rank in range(world):
                            s = DistributedSampler(
                                ds,
                                num_replicas=world,
                                rank=rank,
                                shuffle=True,
                                seed=seed,
                                drop_last=drop_last,
                            )
                            s.set_epoch(epoch)
                            ranks.append(list(s))
                        cases.append(
                            {
                                "n": n,
                                "seed": seed,
                                "world_size": world,
                                "drop_last": drop_last,
                                "epoch": epoch,
                                "ranks": ranks,
                            }
                        )
    write(
        "distributed",
        {
            "what": "DistributedSampler(list(range(n)), num_replicas=world_size, rank=r, "
            "shuffle=True, seed=seed, drop_last=drop_last); set_epoch(epoch); "
            "ranks[r] = list(sampler)",
            "cases": cases,
        },
    )


# ---- (d) accelerate's SeedableRandomSampler -----------------------------------------------------


def seedable() -> None:
    """accelerate's SeedableRandomSampler, directly in a DataLoader after
    ``torch.manual_seed(seed)`` (its seed is ``torch.initial_seed()``; epoch e draws with
    seed + e), and through ``Accelerator.prepare`` with ``use_seedable_sampler=True``."""
    from accelerate import Accelerator, DataLoaderConfiguration
    from accelerate.data_loader import SeedableRandomSampler
    from accelerate.utils import set_seed

    cases = []
    for n in SIZES:
        ds = list(range(n))
        for seed in SEEDS:
            for bs in BATCH_SIZES:
                torch.manual_seed(seed)
                loader = DataLoader(ds, batch_size=bs, sampler=SeedableRandomSampler(ds))
                direct = epochs_through(loader)
                set_seed(seed)
                acc = Accelerator(
                    cpu=True, dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True)
                )
                prepared = acc.prepare(DataLoader(ds, batch_size=bs, shuffle=True))
                via = epochs_through(prepared)
                cases.append(
                    {
                        "n": n,
                        "seed": seed,
                        "batch_size": bs,
                        "direct": direct,
                        "accelerate_prepare": via,
                    }
                )
    write(
        "seedable",
        {
            "what": "direct: torch.manual_seed(seed); DataLoader(ds, batch_size, "
            "sampler=SeedableRandomSampler(ds)) iterated 3 times. accelerate_prepare: "
            "set_seed(seed); Accelerator(cpu=True, use_seedable_sampler=True)"
            ".prepare(DataLoader(ds, batch_size, shuffle=True)) iterated 3 times (1 process)",
            "cases": cases,
        },
    )


# ---- (e) a real Hugging Face Trainer's per-step sample ids -----------------------------------


def _token_dataset(n: int, lengths: list[int]):
    """``n`` samples of random token ids of the given lengths, each with its ``idx``."""
    from datasets import Dataset

    rng = random.Random(7)
    ids = [[rng.randrange(3, 128) for _ in range(length)] for length in lengths]
    return Dataset.from_dict({"input_ids": ids, "idx": list(range(n))})


def _padded(batch: list[dict]) -> dict:
    """The collator's tensors: ids right-padded with 0, mask, labels (-100 on padding)."""
    width = max(len(x["input_ids"]) for x in batch)
    t = torch.zeros(len(batch), width, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for i, x in enumerate(batch):
        t[i, : len(x["input_ids"])] = torch.tensor(x["input_ids"])
        mask[i, : len(x["input_ids"])] = 1
    return {"input_ids": t, "attention_mask": mask, "labels": t.masked_fill(mask == 0, -100)}


def _tiny_gpt2(dropout: float):
    """The tiny GPT-2 config both Trainer families train (dropout on resid/embd/attn)."""
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=128,
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=2,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
    )


def _trainer_run(strategy: str, dropout: float, n: int, lengths: list[int]) -> dict:
    from transformers import AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

    ds = _token_dataset(n, lengths)
    steps: list[list[int]] = []
    seen: dict[str, str] = {}

    def collate(batch: list[dict]) -> dict:
        steps.append([int(x["idx"]) for x in batch])
        return _padded(batch)

    class Where(TrainerCallback):
        def on_train_begin(self, args, state, control, train_dataloader=None, **kw):
            seen["dataloader"] = type(train_dataloader).__name__
            batch_sampler = train_dataloader.batch_sampler
            seen["batch_sampler"] = type(batch_sampler).__name__
            inner = getattr(batch_sampler, "batch_sampler", batch_sampler)  # a shard's
            seen["sampler"] = type(getattr(inner, "sampler", None)).__name__

    cfg = _tiny_gpt2(dropout)
    args = TrainingArguments(
        output_dir=str(HERE / "_trainer_out"),
        per_device_train_batch_size=8,
        num_train_epochs=EPOCHS,
        seed=42,
        train_sampling_strategy=strategy,
        remove_unused_columns=False,
        logging_steps=10_000,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
    )
    model = AutoModelForCausalLM.from_config(cfg)  # built after the args: as a script would
    trainer = Trainer(
        model=model, args=args, train_dataset=ds, data_collator=collate, callbacks=[Where()]
    )
    trainer.train()
    return {
        "train_sampling_strategy": strategy,
        "dropout": dropout,
        "n": n,
        "batch_size": 8,
        "seed": 42,
        "epochs": EPOCHS,
        "global_step": trainer.state.global_step,
        "classes": seen,
        "steps": steps,
    }


def trainer() -> None:
    """A tiny GPT-2 (from a config) trained by the Trainer for 3 epochs, batch 8, seed 42:
    the ``idx`` of every sample in every step, recorded in the collator (num_workers=0,
    gradient_accumulation_steps=1: one collator call per optimizer step)."""
    import shutil

    n = 600
    lengths = [random.Random(11 + i).randint(4, 64) for i in range(n)]
    cases = [
        _trainer_run(strategy, dropout, n, lengths)
        for strategy in ("random", "group_by_length")
        for dropout in (0.0, 0.1)
    ]
    shutil.rmtree(HERE / "_trainer_out", ignore_errors=True)
    write(
        "trainer",
        {
            "what": "transformers Trainer, GPT2Config(n_embd=32, n_layer=2, n_head=2, "
            "vocab_size=128), per_device_train_batch_size=8, num_train_epochs=3, seed=42, "
            "train_sampling_strategy in (random, group_by_length), resid/embd/attn dropout "
            "0.0 or 0.1, remove_unused_columns=False; steps[i] = idx of the samples of "
            "optimizer step i+1, in the collator's order; lengths[idx] = tokens of sample idx",
            "lengths": lengths,
            "cases": cases,
        },
    )


# ---- (f) accelerate's BatchSamplerShard, one process at a time ---------------------------------


def _shard_batches(make_sampler, n: int, bs: int, drop_last: bool, world: int, even: bool):
    """The batch sampler's own batches and every process's shard of them; each process
    builds its sampler afresh (``make_sampler`` re-seeds), as separate processes would."""
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler

    batches = [list(b) for b in BatchSampler(make_sampler(), bs, drop_last)]
    ranks = []
    for r in range(world):
        shard = BatchSamplerShard(
            BatchSampler(make_sampler(), bs, drop_last),
            num_processes=world,
            process_index=r,
            split_batches=False,
            even_batches=even,
        )
        ranks.append([list(b) for b in shard])
    return batches, ranks


def _prepared(n: int, bs: int, drop_last: bool, world: int, even: bool, seed: int):
    """``prepare_data_loader`` (what ``Accelerator.prepare`` and so the Trainer call) with
    ``num_processes``/``process_index`` given and ``use_seedable_sampler=True``, over
    ``DataLoader(ds, bs, shuffle=True, drop_last)`` after ``set_seed(seed)``: 2 epochs
    per process."""
    from accelerate.data_loader import prepare_data_loader
    from accelerate.utils import set_seed

    ranks = []
    for r in range(world):
        set_seed(seed)
        dl = DataLoader(list(range(n)), batch_size=bs, shuffle=True, drop_last=drop_last)
        prepared = prepare_data_loader(
            dl,
            num_processes=world,
            process_index=r,
            split_batches=False,
            even_batches=even,
            use_seedable_sampler=True,
        )
        ranks.append([[b.tolist() for b in prepared] for _ in range(2)])
    return ranks


def accelerate_shard() -> None:
    """accelerate's ``BatchSamplerShard`` (split_batches=False) over a torch
    ``BatchSampler``, for each process index; and ``prepare_data_loader`` for the
    seedable sampler."""
    from accelerate.data_loader import SeedableRandomSampler
    from torch.utils.data import SequentialSampler

    seed = 42
    kinds = {
        "sequential": lambda ds: SequentialSampler(ds),
        "random": lambda ds: (torch.manual_seed(seed), RandomSampler(ds))[1],
        "seedable": lambda ds: (torch.manual_seed(seed), SeedableRandomSampler(ds))[1],
    }
    cases = []
    for kind, make in kinds.items():
        for n in SIZES:
            ds = list(range(n))
            for bs in (2, 4, 8):
                for world in (2, 3):
                    for even in (True, False):
                        for drop_last in (False, True):
                            batches, ranks = _shard_batches(
                                lambda: make(ds), n, bs, drop_last, world, even
                            )
                            case = {
                                "sampler": kind,
                                "n": n,
                                "seed": seed,
                                "batch_size": bs,
                                "num_processes": world,
                                "even_batches": even,
                                "drop_last": drop_last,
                                "batches": batches,
                                "ranks": ranks,
                            }
                            if kind == "seedable":
                                case["prepare_data_loader"] = _prepared(
                                    n, bs, drop_last, world, even, seed
                                )
                            cases.append(case)
    write(
        "accelerate_shard",
        {
            "what": "BatchSamplerShard(BatchSampler(sampler, batch_size, drop_last), "
            "num_processes, process_index=r, split_batches=False, even_batches): batches = "
            "list(BatchSampler(...)), ranks[r] = list(shard r); the sampler is built afresh "
            "per process after torch.manual_seed(seed) (random: RandomSampler, seedable: "
            "accelerate's SeedableRandomSampler). seedable also: prepare_data_loader("
            "DataLoader(ds, batch_size, shuffle=True, drop_last), num_processes, "
            "process_index=r, even_batches, use_seedable_sampler=True) after set_seed(seed), "
            "2 epochs: prepare_data_loader[r][epoch] = batches",
            "cases": cases,
        },
    )


# ---- (g) a real Trainer with gradient accumulation ---------------------------------------------


def _accum_run(strategy: str, accum: int, n: int, lengths: list[int]) -> dict:
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    ds = _token_dataset(n, lengths)
    micro: list[dict] = []

    def collate(batch: list[dict]) -> dict:
        return _padded(batch) | {"idx": torch.tensor([int(x["idx"]) for x in batch])}

    class Recording(Trainer):
        # the micro-batch as the model gets it, with the optimizer step it belongs to
        # (global_step counts the steps already taken); the collator may run ahead
        def compute_loss(self, model, inputs, *a, **kw):
            idx = inputs.pop("idx")
            micro.append({"step": self.state.global_step + 1, "ids": idx.tolist()})
            return super().compute_loss(model, inputs, *a, **kw)

    cfg = _tiny_gpt2(0.0)
    args = TrainingArguments(
        output_dir=str(HERE / "_trainer_out"),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=accum,
        num_train_epochs=2,
        seed=42,
        train_sampling_strategy=strategy,
        remove_unused_columns=False,
        logging_steps=10_000,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
    )
    model = AutoModelForCausalLM.from_config(cfg)
    trainer = Recording(model=model, args=args, train_dataset=ds, data_collator=collate)
    trainer.train()
    steps: list[list[list[int]]] = []
    for m in micro:
        while len(steps) < m["step"]:
            steps.append([])
        steps[m["step"] - 1].append(m["ids"])
    return {
        "train_sampling_strategy": strategy,
        "dropout": 0.0,
        "n": n,
        "batch_size": 4,
        "gradient_accumulation_steps": accum,
        "seed": 42,
        "epochs": 2,
        "global_step": trainer.state.global_step,
        "steps": steps,
    }


def trainer_accum() -> None:
    """The tiny GPT-2 of ``trainer`` on 90 samples (23 micro-batches of 4 per epoch, the
    last of 2: not a multiple of the accumulation), gradient_accumulation_steps 2 and 3,
    2 epochs, no dropout: per optimizer step, the ``idx`` of each micro-batch."""
    import shutil

    n = 90
    lengths = [random.Random(500 + i).randint(4, 64) for i in range(n)]
    cases = [
        _accum_run(strategy, accum, n, lengths)
        for strategy in ("random", "group_by_length")
        for accum in (2, 3)
    ]
    shutil.rmtree(HERE / "_trainer_out", ignore_errors=True)
    write(
        "trainer_accum",
        {
            "what": "transformers Trainer, the GPT-2 of trainer.json without dropout, 90 "
            "samples, per_device_train_batch_size=4, gradient_accumulation_steps in (2, 3), "
            "num_train_epochs=2, seed=42, train_sampling_strategy in (random, "
            "group_by_length); steps[i][j] = idx of micro-batch j of optimizer step i+1, "
            "as compute_loss received it",
            "lengths": lengths,
            "cases": cases,
        },
    )


ORACLES: dict[str, Callable[[], None]] = {
    f.__name__: f
    for f in (
        random_sampler,
        length_grouped,
        distributed,
        seedable,
        trainer,
        accelerate_shard,
        trainer_accum,
    )
}


def main(names: list[str]) -> None:
    unknown = [n for n in names if n not in ORACLES]
    if unknown:
        sys.exit(f"unknown oracle(s): {', '.join(unknown)}; choose from {', '.join(ORACLES)}")
    for name in names or list(ORACLES):
        ORACLES[name]()


if __name__ == "__main__":
    main(sys.argv[1:])
