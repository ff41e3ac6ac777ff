"""Named presets: a trainer's own settings, in its own words, -> the schedule it runs.

``hf-trainer``: the Hugging Face ``Trainer`` (checked: transformers 5.24.0, accelerate
1.15.0, torch 2.13.0, CPU, ``tests/data/samplers``).  Its keys are ``TrainingArguments``
names; each becomes ScheduleParams fields:

============================== =========================================================
key                            schedule
============================== =========================================================
per_device_train_batch_size    ``batch_size`` (samples per micro-batch per process)
gradient_accumulation_steps    ``grad_accum``
world_size                     ``world_size`` (processes)
seed                           the seed of ``set_seed`` (the global torch generator)
data_seed                      the seed of the default sampler, if given (else ``seed``)
train_sampling_strategy        ``random`` (default) or ``group_by_length``
group_by_length                ``true`` = ``train_sampling_strategy = "group_by_length"``
dataloader_drop_last           ``drop_last``
num_train_epochs               ``epochs``
dropout                        ``true``/``false``; not given: possibly (only epoch 0 of
                               ``group_by_length`` is then determined)
============================== =========================================================

What the Trainer runs (and so the replay):

- ``random``: accelerate's ``SeedableRandomSampler`` (the Trainer's default
  ``use_seedable_sampler``): every epoch ``randperm(n)`` seeded ``data_seed or seed``
  ``+ epoch`` -> ``strategy random, rng torch, seeding per-epoch``.  Every epoch is
  determined, dropout or not.
- ``group_by_length``: ``LengthGroupedSampler(per_device * grad_accum)`` on the global
  generator seeded by ``set_seed(seed)``; each epoch the DataLoader's base-seed draw, then
  the sampler's ``randperm`` -> ``strategy length-grouped, rng torch, seeding global``.
  Dropout (and anything else drawing from the CPU generator while training) moves that
  generator: then only epoch 0 follows from the seed.
- both: ``shard accelerate`` (more than one process: accelerate's ``BatchSamplerShard``
  with even batches; an epoch's last step takes the micro-batches left: checked against
  ``BatchSamplerShard`` on 2 and 3 processes and real runs with gradient accumulation 2
  and 3, ``tests/data/samplers/accelerate_shard.json``, ``trainer_accum.json``) and
  ``first_step 1`` (the Trainer's ``global_step`` starts at 1; a ``first_step`` given
  wins).  ``sequential`` is not replayed.
"""

from __future__ import annotations

from typing import Any

from ..errors import InputError

PRESETS: tuple[str, ...] = ("hf-trainer",)

#: The Trainer's words taken by ``hf-trainer`` (besides ScheduleParams fields).
HF_TRAINER_KEYS: tuple[str, ...] = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "data_seed",
    "train_sampling_strategy",
    "group_by_length",
    "dataloader_drop_last",
    "num_train_epochs",
)
#: Keys a preset reads; the CLI and ``[schedule]`` accept them.
PRESET_KEYS: tuple[str, ...] = ("preset", *HF_TRAINER_KEYS)

#: Fields a preset decides: giving them too is a contradiction, refused.
_DECIDED = ("strategy", "rng", "seeding", "shard")
_ALIASES = {
    "per_device_train_batch_size": "batch_size",
    "gradient_accumulation_steps": "grad_accum",
    "dataloader_drop_last": "drop_last",
    "num_train_epochs": "epochs",
}


def apply_preset(values: dict[str, Any], where: str = "--preset") -> dict[str, Any]:
    """``values`` (ScheduleParams fields and :data:`PRESET_KEYS`) with the preset's keys
    turned into ScheduleParams fields; without ``preset``, its keys are refused.

    >>> apply_preset({"preset": "hf-trainer", "per_device_train_batch_size": 8, "seed": 42})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'seed': 42, 'batch_size': 8, 'strategy': 'random', 'rng': 'torch',
     'seeding': 'per-epoch', 'shard': 'accelerate', 'first_step': 1}
    """
    out = dict(values)
    name = out.pop("preset", None)
    words = {k: out.pop(k) for k in HF_TRAINER_KEYS if out.get(k) is not None}
    for k in HF_TRAINER_KEYS:
        out.pop(k, None)
    if name is None:
        if words:
            raise InputError(
                where,
                f"{', '.join(sorted(words))} are the Hugging Face Trainer's words",
                'give --preset hf-trainer (or preset = "hf-trainer" in [schedule])',
            )
        return out
    if name != "hf-trainer":
        raise InputError(where, f"unknown preset {name!r}", f"choose from {', '.join(PRESETS)}")
    clash = sorted(k for k in _DECIDED if out.get(k) is not None)
    if clash:
        raise InputError(
            where,
            f"preset 'hf-trainer' decides {', '.join(clash)}",
            "drop them, or drop the preset",
        )
    return _hf_trainer(out, words, where)


def _hf_trainer(out: dict[str, Any], words: dict[str, Any], where: str) -> dict[str, Any]:
    """The ``hf-trainer`` preset (see the module docstring)."""
    for word, fld in _ALIASES.items():
        if word not in words:
            continue
        if out.get(fld) is not None and out[fld] != words[word]:
            raise InputError(
                where, f"{word} = {words[word]!r} and {fld} = {out[fld]!r} disagree", "give one"
            )
        out[fld] = words[word]
    sampling = words.get("train_sampling_strategy", "random")
    by_length = words.get("group_by_length")
    if by_length is not None and not isinstance(by_length, bool):
        raise InputError(where, f"group_by_length must be true or false, got {by_length!r}", "")
    if by_length:
        sampling = "group_by_length"
    if sampling == "random":
        data_seed = words.get("data_seed")
        if data_seed is not None:
            out["seed"] = data_seed
        out.update(strategy="random", rng="torch", seeding="per-epoch")
    elif sampling == "group_by_length":
        out.update(strategy="length-grouped", rng="torch", seeding="global")
    else:
        raise InputError(
            where,
            f"train_sampling_strategy {sampling!r} is not replayed",
            "choose from random, group_by_length",
        )
    out["shard"] = "accelerate"
    out.setdefault("first_step", 1)
    if out["first_step"] is None:
        out["first_step"] = 1
    return out
