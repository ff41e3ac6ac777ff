"""Make the trainer-run fixtures: real ``transformers.Trainer`` runs on CPU with known truth.

Each run trains a tiny GPT-2 (built from a ``GPT2Config``; nothing downloaded) with the stock
``Trainer`` on a synthetic corpus generated here, records its batches with
``dflash_diag.record.record_trainer`` and writes, into ``tests/data/trainer_runs/NAME/``:

- ``train.log``: what the Trainer printed (stdout and stderr to one file, as
  ``python train.py 2>&1 | tee train.log`` keeps it: tqdm's carriage returns included);
- ``trainer_state.json``: the Trainer's own (``trainer.state.save_to_json``);
- ``train.batches``: the recording;
- ``manifest.parquet``: ``sample_id, length, category`` (the synthetic source kind, never the
  poison), written with ``dflash_diag.manifest.write_manifest``;
- ``sample_loss.parquet``: the per-sample truth, from the same forward as the logged loss:
  ``step`` (int16, as the log numbers it), ``sample_id`` (int16, dataset index), ``loss``
  (float32, nats per predicted token: the mean over the sample's ``targets`` tokens),
  ``targets`` (int16, predicted tokens = length - 1);
- ``steps.parquet``: per optimizer step, ``step``, ``lr_applied`` (float64, the learning rate
  the optimizer really used: the scheduler's, times the hidden surge where there is one),
  ``grad_norm`` (float64, the pre-clip norm the Trainer logs) and ``loss_divisor`` (int32, the
  ``num_items_in_batch`` the Trainer divided the step's summed cross-entropy by: see README.md
  on why it is the step's real tokens, not its predicted ones, under transformers 5.24);
- ``truth.json``: the poison samples and their kind, the hidden lr surge, the run's settings,
  the versions.

Usage::

    python tests/data/trainer_runs/make_runs.py               # every run
    python tests/data/trainer_runs/make_runs.py --only clean  # one run (repeatable)

Each run is a child process (``--worker``) so that its log is what a user's terminal shows.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]

VOCAB = 128  # token 0 is padding; content tokens are 1..127
PAD = 0
N_SAMPLES = 2000
MIN_LEN, MAX_LEN = 16, 256
CORPUS_SEED = 20261201
SEED = 42
BATCH = 8
EPOCHS = 4
LR = 3e-3
WARMUP = 50
N_POISON = 10
#: share of each source kind in the corpus
KINDS = (("markov", 0.7), ("count", 0.15), ("motif", 0.15))
#: the Markov source: each token has 8 successors with these probabilities (1.86 nats)
SUCCESSOR_P = (0.3, 0.2, 0.15, 0.12, 0.09, 0.07, 0.04, 0.03)


@dataclass(frozen=True)
class RunSpec:
    """One fixture run.

    :param poison: ``"ordinary"`` (lengths in the 40-60th percentile), ``"long"`` (among the
        30 longest samples) or ``""`` (none).
    :param sampling: the Trainer's ``train_sampling_strategy``.
    :param surge_steps: logged steps whose update uses ``surge_factor`` x the scheduler's lr.
    """

    name: str
    about: str
    poison: str = ""
    sampling: str = "random"
    surge_steps: tuple[int, ...] = ()
    surge_factor: float = 1.0


RUNS = {
    r.name: r
    for r in (
        RunSpec("poison_ordinary", "10 poison samples of ordinary length", poison="ordinary"),
        RunSpec("poison_long", "10 poison samples among the longest", poison="long"),
        RunSpec(
            "lr_surge",
            "clean data; the optimizer's lr is 30x the scheduler's for 3 steps",
            surge_steps=(500, 501, 502),
            surge_factor=30.0,
        ),
        RunSpec("clean", "no poison, no surge"),
        RunSpec(
            "grouped",
            "as poison_ordinary, with train_sampling_strategy=group_by_length",
            poison="ordinary",
            sampling="group_by_length",
        ),
    )
}


# --- the corpus ------------------------------------------------------------------------


def sample_lengths(rng: random.Random, n: int) -> list[int]:
    """Log-uniform lengths in ``[MIN_LEN, MAX_LEN]`` tokens (median ~64)."""
    lo, hi = math.log(MIN_LEN), math.log(MAX_LEN + 1)
    return [min(MAX_LEN, int(math.exp(rng.uniform(lo, hi)))) for _ in range(n)]


def markov_table(rng: random.Random) -> list[list[int]]:
    """Successors of each token, most likely first (``SUCCESSOR_P``)."""
    content = list(range(1, VOCAB))
    return [rng.sample(content, len(SUCCESSOR_P)) for _ in range(VOCAB)]


def make_sample(kind: str, length: int, rng: random.Random, table: list[list[int]]) -> list[int]:
    """One clean sample of a source kind.

    - ``markov``: a walk on ``table`` (about 1.86 nats a token at best);
    - ``count``: ``1 + (a + k d) mod 127`` for a random start ``a`` and stride ``d`` of 1 or 2;
    - ``motif``: a random motif of 2-6 tokens, repeated.
    """
    if kind == "markov":
        out = [rng.randrange(1, VOCAB)]
        while len(out) < length:
            out.append(rng.choices(table[out[-1]], weights=SUCCESSOR_P)[0])
        return out
    if kind == "count":
        a, d = rng.randrange(VOCAB - 1), rng.choice((1, 2))
        return [1 + (a + k * d) % (VOCAB - 1) for k in range(length)]
    motif = [rng.randrange(1, VOCAB) for _ in range(rng.randint(2, 6))]
    return [motif[k % len(motif)] for k in range(length)]


def clean_corpus() -> tuple[list[list[int]], list[str]]:
    """The 2,000 clean samples and their source kinds, from ``CORPUS_SEED``."""
    rng = random.Random(CORPUS_SEED)
    table = markov_table(rng)
    lengths = sample_lengths(rng, N_SAMPLES)
    names, weights = zip(*KINDS, strict=True)
    kinds = rng.choices(names, weights=weights, k=N_SAMPLES)
    rows = [make_sample(k, n, rng, table) for k, n in zip(kinds, lengths, strict=True)]
    return rows, list(kinds)


def pick_poison(lengths: list[int], where: str, rng: random.Random) -> list[int]:
    """``N_POISON`` sample ids: of ordinary length (40th-60th percentile) or among the 30
    longest."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    if where == "ordinary":
        pool = order[int(0.4 * len(order)) : int(0.6 * len(order))]
    else:
        pool = order[-30:]
    return sorted(rng.sample(pool, N_POISON))


def poison(rows: list[list[int]], where: str) -> list[dict[str, Any]]:
    """Replace ``N_POISON`` samples' tokens, in place, keeping their lengths (and their
    manifest category): the first half by uniform random ids, the rest by a shuffled copy of
    the nearest-length clean sample (its tokens, in a random order). Returns their truth."""
    if not where:
        return []
    rng = random.Random(CORPUS_SEED + 1)
    lengths = [len(r) for r in rows]
    ids = pick_poison(lengths, where, rng)
    out, used = [], set()
    for k, i in enumerate(ids):
        n = lengths[i]
        if k < N_POISON // 2:
            rows[i] = [rng.randrange(1, VOCAB) for _ in range(n)]
            out.append({"sample_id": i, "kind": "random", "length": n})
            continue
        donors = [j for j in range(len(rows)) if j not in ids and j not in used]
        donor = min(donors, key=lambda j: (abs(lengths[j] - n), j))
        used.add(donor)
        garbled = [rows[donor][t % lengths[donor]] for t in range(n)]
        rng.shuffle(garbled)
        rows[i] = garbled
        out.append({"sample_id": i, "kind": "shuffled", "donor": donor, "length": n})
    return out


# --- training (the worker process) -----------------------------------------------------


def collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Right-pad with ``PAD``; ``attention_mask``; ``labels`` -100 on padding; the items'
    dataset indices as ``sample_index`` (taken out again before the model sees the batch)."""
    import torch

    width = max(len(x["input_ids"]) for x in items)
    ids = torch.full((len(items), width), PAD, dtype=torch.long)
    mask = torch.zeros(len(items), width, dtype=torch.long)
    for r, x in enumerate(items):
        ids[r, : len(x["input_ids"])] = torch.as_tensor(x["input_ids"])
        mask[r, : len(x["input_ids"])] = 1
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "labels": ids.masked_fill(mask == 0, -100),
        "sample_index": torch.as_tensor([x["idx"] for x in items], dtype=torch.long),
    }


def per_sample_loss(logits: Any, labels: Any) -> tuple[Any, Any]:
    """Each row's token-averaged next-token cross-entropy (nats) and its predicted tokens:
    ``loss_i = sum_t CE(logits[i, t], labels[i, t + 1]) / n_i`` over ``labels != -100``, so
    ``sum_i n_i loss_i / sum_i n_i`` is the batch loss the model computes."""
    import torch

    shift_logits = logits[:, :-1, :].float()
    shift_labels = labels[:, 1:]
    ce = torch.nn.functional.cross_entropy(
        shift_logits.reshape(-1, shift_logits.shape[-1]),
        shift_labels.reshape(-1),
        ignore_index=-100,
        reduction="none",
    ).view(shift_labels.shape)
    n = (shift_labels != -100).sum(dim=1)
    return ce.sum(dim=1) / n.clamp(min=1), n


def truth_trainer(base: Any) -> Any:
    """A ``Trainer`` subclass whose ``compute_loss`` also keeps, under ``no_grad`` and from
    the same logits, every trained sample's loss at the step the log gives its update."""

    class TruthTrainer(base):  # type: ignore[misc, valid-type]
        rows: list[tuple[int, int, float, int]]
        divisors: dict[int, int]

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # noqa: ANN001, ANN201
            import torch

            index = inputs.pop("sample_index")
            loss, outputs = super().compute_loss(
                model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch
            )
            if model.training:
                with torch.no_grad():
                    each, n = per_sample_loss(outputs.logits, inputs["labels"])
                step = self.state.global_step + 1
                if num_items_in_batch is not None:
                    self.divisors[step] = int(num_items_in_batch)
                for i, v, k in zip(index.tolist(), each.tolist(), n.tolist(), strict=True):
                    self.rows.append((step, i, v, k))
            return (loss, outputs) if return_outputs else loss

    return TruthTrainer


def step_callback(spec: RunSpec, steps: dict[int, dict[str, float]]) -> Any:
    """A ``TrainerCallback`` that applies the hidden surge (the optimizer's lr times
    ``spec.surge_factor`` between the scheduler's setting and ``optimizer.step()`` of the
    surge steps, restored right after, so the scheduler, and the logged ``learning_rate``,
    never see it) and keeps each step's applied lr and logged grad norm in ``steps``."""
    from transformers import TrainerCallback

    class Steps(TrainerCallback):  # type: ignore[misc]
        saved: list[float] = []

        def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kw):  # noqa: ANN001, ANN201
            step = state.global_step + 1
            self.saved = [g["lr"] for g in optimizer.param_groups]
            if step in spec.surge_steps:
                for g in optimizer.param_groups:
                    g["lr"] = g["lr"] * spec.surge_factor
            steps[step] = {"lr_applied": float(optimizer.param_groups[0]["lr"])}

        def on_optimizer_step(self, args, state, control, optimizer=None, **kw):  # noqa: ANN001, ANN201
            for g, lr in zip(optimizer.param_groups, self.saved, strict=True):
                g["lr"] = lr

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001, ANN201
            if logs and "grad_norm" in logs and state.global_step in steps:
                steps[state.global_step]["grad_norm"] = float(logs["grad_norm"])

    return Steps()


def tiny_gpt2() -> Any:
    """Two layers, 64 wide, 4 heads, 256 positions, no dropout (a deterministic forward)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=VOCAB,
        n_positions=MAX_LEN,
        n_embd=64,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=PAD,
        eos_token_id=PAD,
        pad_token_id=PAD,
    )
    return GPT2LMHeadModel(cfg)


def training_args(spec: RunSpec, out: str) -> Any:
    """The run's ``TrainingArguments``: batch 8, 4 epochs, AdamW at 3e-3 with 50 warmup
    steps and linear decay, a log line every step, no checkpoints."""
    import inspect

    from transformers import TrainingArguments

    extra: dict[str, Any] = {}
    params = inspect.signature(TrainingArguments).parameters
    if "include_num_input_tokens_seen" in params:
        extra["include_num_input_tokens_seen"] = "non_padding"
    if spec.sampling != "random":
        if "train_sampling_strategy" in params:
            extra["train_sampling_strategy"] = spec.sampling
        else:  # transformers before 5: the boolean
            extra["group_by_length"] = True
    return TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=BATCH,
        num_train_epochs=EPOCHS,
        learning_rate=LR,
        warmup_steps=WARMUP,
        lr_scheduler_type="linear",
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=SEED,
        remove_unused_columns=False,  # the collator takes the items' idx out itself
        **extra,
    )


def versions() -> dict[str, str]:
    """The versions that made the run."""
    import platform

    import numpy
    import pyarrow
    import torch
    import transformers

    import dflash_diag

    out = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": numpy.__version__,
        "pyarrow": pyarrow.__version__,
        "dflash_diag": dflash_diag.__version__,
    }
    try:
        import accelerate

        out["accelerate"] = accelerate.__version__
    except ImportError:
        pass
    return out


def write_manifest_file(rows: list[list[int]], kinds: list[str], path: Path) -> None:
    """``sample_id, length, category`` through the package's own manifest writer."""
    import numpy as np

    from dflash_diag.data import Manifest
    from dflash_diag.manifest.write import write_manifest

    names = tuple(sorted(set(kinds)))
    m = Manifest(
        path=str(path),
        lengths=np.array([len(r) for r in rows], dtype=np.int64),
        ids=np.arange(len(rows), dtype=np.int64),
        categories=np.array([names.index(k) for k in kinds], dtype=np.int32),
        category_names=names,
        category_column="category",
    )
    write_manifest(m, path, force=True)


def write_truth_tables(
    rows: list[tuple[int, int, float, int]], steps: dict[int, dict[str, float]], out: Path
) -> None:
    """``sample_loss.parquet`` and ``steps.parquet`` (see the module docstring)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    step, sid, loss, n = zip(*rows, strict=True)
    pq.write_table(
        pa.table(
            {
                "step": pa.array(step, pa.int16()),
                "sample_id": pa.array(sid, pa.int16()),
                "loss": pa.array(loss, pa.float32()),
                "targets": pa.array(n, pa.int16()),
            }
        ),
        out / "sample_loss.parquet",
        compression="zstd",
    )
    keys = sorted(steps)
    pq.write_table(
        pa.table(
            {
                "step": pa.array(keys, pa.int16()),
                "lr_applied": pa.array([steps[k]["lr_applied"] for k in keys], pa.float64()),
                "grad_norm": pa.array([steps[k].get("grad_norm") for k in keys], pa.float64()),
                "loss_divisor": pa.array([steps[k].get("loss_divisor") for k in keys], pa.int32()),
            }
        ),
        out / "steps.parquet",
        compression="zstd",
    )


def train_run(spec: RunSpec, out: Path) -> None:
    """The worker: train ``spec`` and write its files (but ``train.log``) into ``out``."""
    import torch
    from transformers import Trainer, set_seed

    from dflash_diag.record import record_trainer

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    rows, kinds = clean_corpus()
    bad = poison(rows, spec.poison)
    write_manifest_file(rows, kinds, out / "manifest.parquet")
    dataset = [{"input_ids": r, "idx": i} for i, r in enumerate(rows)]
    set_seed(SEED)
    steps: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trainer = truth_trainer(Trainer)(
            model=tiny_gpt2(),
            args=training_args(spec, tmp),
            train_dataset=dataset,
            data_collator=collate,
            callbacks=[step_callback(spec, steps)],
        )
        trainer.rows, trainer.divisors = [], {}
        record_trainer(trainer, out / "train.batches", sample_losses=True, run=spec.name)
        trainer.train()
        trainer.state.save_to_json(str(out / "trainer_state.json"))
    for k, v in trainer.divisors.items():
        steps[k]["loss_divisor"] = v
    write_truth_tables(trainer.rows, steps, out)
    truth = {
        "run": spec.name,
        "about": spec.about,
        "poison": {
            "where": spec.poison or None,
            "ids": [b["sample_id"] for b in bad],
            "samples": bad,
        },
        "lr_surge": (
            {"steps": list(spec.surge_steps), "factor": spec.surge_factor}
            if spec.surge_steps
            else None
        ),
        "settings": settings(spec),
        "versions": versions(),
    }
    (out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")


def settings(spec: RunSpec) -> dict[str, Any]:
    """What made the run, for ``truth.json``."""
    return {
        "spec": asdict(spec),
        "samples": N_SAMPLES,
        "corpus_seed": CORPUS_SEED,
        "kinds": dict(KINDS),
        "successor_p": list(SUCCESSOR_P),
        "lengths": [MIN_LEN, MAX_LEN],
        "vocab": VOCAB,
        "model": "GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=256, vocab_size=128)",
        "dropout": 0.0,
        "seed": SEED,
        "per_device_train_batch_size": BATCH,
        "gradient_accumulation_steps": 1,
        "num_train_epochs": EPOCHS,
        "learning_rate": LR,
        "warmup_steps": WARMUP,
        "lr_scheduler_type": "linear",
        "max_grad_norm": 1.0,
        "train_sampling_strategy": spec.sampling,
        "logging_steps": 1,
        "include_num_input_tokens_seen": "non_padding",
        "torch_threads": 1,
    }


# --- the driver ------------------------------------------------------------------------


def make(spec: RunSpec, to: Path = HERE) -> float:
    """Run the worker for ``spec`` in a child process, its stdout and stderr into
    ``to/NAME/train.log``; returns the wall time in seconds."""
    out = to / spec.name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONUNBUFFERED", "COLUMNS")}
    env |= {
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
    }
    start = time.perf_counter()
    with open(out / "train.log", "wb") as log:
        subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--worker", spec.name, str(out)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=out,
            check=True,
        )
    took = time.perf_counter() - start
    sanitize(out / "train.log")
    return took


def sanitize(path: Path) -> None:
    """Machine paths in warnings become ``/home/user/run`` and ``/venv``."""
    data = path.read_bytes()
    for old, new in (
        (str(path.parent), "/home/user/run"),
        (sys.prefix, "/venv"),
        (str(ROOT), "/home/user/src"),
    ):
        data = data.replace(old.encode(), new.encode())
    path.write_bytes(data)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", choices=sorted(RUNS), help="make only this run")
    ap.add_argument("--to", type=Path, default=HERE, help="write the run folders here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("out", nargs="?", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        train_run(RUNS[a.worker], Path(a.out))
        return
    for name in a.only or list(RUNS):
        took = make(RUNS[name], a.to)
        size = sum(p.stat().st_size for p in (a.to / name).iterdir())
        print(f"{name}: {took:.0f} s, {size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
