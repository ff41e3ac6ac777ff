"""What recording the batches costs a tiny model's CPU training step (target: under 1%).

Two figures, each a ratio to the same training step:

- per step, measured apart: what ``record_trainer`` adds to one optimizer step (the indexed
  view, the outer collate function's own work, taking the composition out of the batch,
  ``BatchRecorder.log`` and the per-step flush, file open and close included) over what
  the step itself costs
  (forward, backward and AdamW update of a GPT-2 of 2 layers, 64 wide, batch 8 x up to 128
  tokens, gradient accumulation 2);
- end to end: ``transformers.Trainer`` runs of the same model with and without
  ``record_trainer``, back to back, the median of their CPU-time ratios over rounds
  (noisier: on a shared machine the load moves one run by more than the recorder costs;
  the spread is printed).

Needs torch and transformers (the ``train-test`` extra)::

    python benchmarks/bench_record_overhead.py            # 200-step Trainer runs, 7 rounds
    python benchmarks/bench_record_overhead.py --quick    # 60-step runs, 3 rounds
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["TRANSFORMERS_OFFLINE"] = "1"

from common import alternating  # noqa: E402

BATCH, ACCUM, MAX_LEN, VOCAB = 8, 2, 128, 1024


def dataset(n: int) -> list[dict[str, Any]]:
    rng = random.Random(0)
    return [
        {"input_ids": [rng.randrange(1, VOCAB) for _ in range(rng.randint(16, MAX_LEN))]}
        for _ in range(n)
    ]


def collate(batch: list[dict[str, Any]]) -> dict[str, Any]:
    import torch

    width = max(len(x["input_ids"]) for x in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for i, x in enumerate(batch):
        ids[i, : len(x["input_ids"])] = torch.as_tensor(x["input_ids"])
        mask[i, : len(x["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def model() -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel, set_seed

    set_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=MAX_LEN, n_embd=64, n_layer=2, n_head=2)
    return GPT2LMHeadModel(cfg)


def step_seconds(data: list[dict[str, Any]], rounds: int) -> float:
    """Best time of one optimizer step: ACCUM forward/backward passes and an AdamW update."""
    import torch

    m = model()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    batches = [collate(data[i : i + BATCH]) for i in range(0, BATCH * ACCUM, BATCH)]

    def step() -> None:
        for b in batches:
            (m(**b).loss / ACCUM).backward()
        opt.step()
        opt.zero_grad()

    return alternating(rounds, step)[0][0]


def record_seconds(data: list[dict[str, Any]], path: Path, steps: int) -> float:
    """Per optimizer step, what the recorder adds: the indexed fetch, the outer collate
    function's own work (ids, real lengths, the composition in the batch), taking it out
    and ``BatchRecorder.log``, the per-step flush; minus the plain fetch. The real collate
    function runs in both paths alike, so it is left out of both (best of 5 each)."""
    from dflash_diag.record import BatchRecorder
    from dflash_diag.record.hf import IndexedView, IndexingCollator, StepRecorder

    view, outer = IndexedView(data), IndexingCollator(lambda items: {})
    idx = [list(range(i, i + BATCH)) for i in range(0, len(data) - BATCH, BATCH)]
    micro = steps * ACCUM

    def plain() -> None:
        for k in range(micro):
            [data[i] for i in idx[k % len(idx)]]

    def recorded() -> None:
        with BatchRecorder(path, rank=0, world_size=1) as rec:
            steps_ = StepRecorder(rec, 0)
            for k in range(micro):
                steps_.take(outer(view.__getitems__(idx[k % len(idx)])), k // ACCUM)
                if k % ACCUM == ACCUM - 1:
                    rec.flush()

    (t_plain, _), (t_rec, _) = alternating(5, plain, recorded)
    return (t_rec - t_plain) / steps


def trainer_ratios(data: list[dict[str, Any]], out: Path, steps: int, rounds: int) -> list:
    """Per round, ``trainer.train()`` CPU time with ``record_trainer`` over without (the
    two run back to back, their order alternating), after one untimed pair."""
    from transformers import Trainer, TrainingArguments

    from dflash_diag.record import record_trainer

    def run(record: bool) -> float:
        args = TrainingArguments(
            output_dir=str(out),
            per_device_train_batch_size=BATCH,
            gradient_accumulation_steps=ACCUM,
            max_steps=steps,
            seed=0,
            logging_steps=10,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            use_cpu=True,
            train_sampling_strategy="group_by_length",
            log_level="error",
        )
        trainer = Trainer(model=model(), args=args, train_dataset=data, data_collator=collate)
        if record:
            record_trainer(trainer, out / "train.batches")
        start = time.process_time()  # CPU time: what other sessions' load moves least
        trainer.train()
        return time.process_time() - start

    run(False), run(True)
    ratios = []
    for r in range(rounds):
        first = bool(r % 2)
        a, b = run(first), run(not first)
        t_with, t_without = (a, b) if first else (b, a)
        ratios.append(t_with / t_without)
    return sorted(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60-step runs, 3 rounds")
    args = parser.parse_args()
    steps, rounds = (60, 3) if args.quick else (200, 7)
    data = dataset(BATCH * ACCUM * steps)
    with tempfile.TemporaryDirectory() as tmp:
        t_step = step_seconds(data, 20)
        t_rec = record_seconds(data, Path(tmp) / "bench.batches", steps)
        ratios = trainer_ratios(data, Path(tmp), steps, rounds)
    print(f"GPT-2 2x64, batch {BATCH} x up to {MAX_LEN} tokens, accumulation {ACCUM}, CPU")
    print(f"training step (best of 20)            {t_step * 1e3:9.2f} ms   1.0000x")
    print(f"recorder per step (measured apart)    {t_rec * 1e3:9.3f} ms   {t_rec / t_step:.4f}x")
    spread = ", ".join(f"{r:.3f}" for r in ratios)
    print(
        f"Trainer, {steps} steps, with / without recorder (CPU time): median "
        f"{ratios[len(ratios) // 2]:.4f}x over {rounds} rounds ({spread})"
    )


if __name__ == "__main__":
    main()
