"""Record what a Hugging Face ``Trainer`` really trains on, step by step.

One line before ``trainer.train()``::

    from dflash_diag.record import record_trainer

    record_trainer(trainer, "train.batches")
    trainer.train()

Every micro-batch of every optimizer step is written to ``train.batches`` (one file per
process, ``train.rank{r}.batches``, when the world size is over 1): its step as the log numbers
it (``state.global_step`` after the update, so the micro-batches of the update logged as step
``k`` are recorded as step ``k``), its rank, its place in the gradient accumulation
(``micro``), the dataset indices it held and their real (unpadded) lengths in tokens.

How it learns the indices without changing what is trained:

- the train ``DataLoader`` the Trainer builds (sampler, column removal, accelerate's sharding,
  worker seeding: all its own) gets, before it is first iterated, a dataset view whose items
  carry their index and an outermost collate function that takes the indices and the
  unpadded lengths out of the items, calls the Trainer's own collate function on the items as
  they were, and carries the composition in the batch under a private key. Outermost, so the
  Trainer's column removal never sees the key; in the data loader, so it runs where the
  collate function runs (a worker process when ``dataloader_num_workers > 0``);
- ``training_step`` takes the key out of the batch, on every rank, before the model sees it,
  and writes the record.

Nothing here draws from a random generator: the global torch generator, which
``group_by_length``'s sampler and dropout share, is left exactly as it would be, and the
losses are the same to the bit with and without the recorder (``tests/record``).

Works for ``transformers.Trainer`` and trainers built on it (TRL's ``SFTTrainer``: there the
indices are those of the trainer's processed dataset, packed rows when packing is on).
Needs a map-style train dataset (``len`` and indexing); batches must be dicts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import numpy as np

from dflash_diag.record import BatchRecorder

#: the batch key the composition travels under from the collate function to training_step
BATCH_KEY = "_dflash_diag_composition"


class Composition:
    """The dataset indices of one micro-batch and their unpadded lengths (tokens).

    Neither a tensor nor a container, so device transfer and pinning pass it through
    untouched. Plain numpy arrays: pickles from a worker process cheaply.
    """

    __slots__ = ("ids", "lengths")

    def __init__(self, ids: np.ndarray, lengths: np.ndarray) -> None:
        self.ids = ids
        self.lengths = lengths

    def __reduce__(self) -> tuple[Any, ...]:
        return (Composition, (self.ids, self.lengths))


class Tagged:
    """One dataset item with its index, as the indexed view hands it to the collate function."""

    __slots__ = ("index", "item")

    def __init__(self, index: int, item: Any) -> None:
        self.index = index
        self.item = item

    def __reduce__(self) -> tuple[Any, ...]:
        return (Tagged, (self.index, self.item))


class IndexedView:
    """A map-style dataset whose items are :class:`Tagged` with their index.

    Same length and same items as the dataset it wraps (fetched with the dataset's own
    ``__getitems__`` when it has one, as the DataLoader would); anything else (``set_epoch``,
    columns) is the wrapped dataset's.
    """

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Tagged:
        return Tagged(int(index), self.dataset[index])

    def __getitems__(self, indices: list[int]) -> list[Tagged]:
        many = getattr(self.dataset, "__getitems__", None)
        items = many(indices) if many else [self.dataset[i] for i in indices]
        return [Tagged(int(i), item) for i, item in zip(indices, items, strict=True)]

    def __getattr__(self, name: str) -> Any:
        if name == "dataset":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.dataset, name)


def default_length(item: Any, input_name: str = "input_ids") -> int:
    """Real tokens of one dataset item, before padding.

    ``sum(attention_mask)`` when the item has a mask, else ``len(item[input_name])``.

    >>> default_length({"input_ids": [5, 6, 7]})
    3
    >>> default_length({"input_ids": [5, 6, 0], "attention_mask": [1, 1, 0]})
    2
    """
    if isinstance(item, Mapping):
        if "attention_mask" in item:
            return int(np.count_nonzero(np.asarray(item["attention_mask"])))
        if input_name in item:
            return len(item[input_name])
    raise TypeError(
        f"dflash_diag.record: cannot tell the length of a {type(item).__name__} item "
        f"(no 'attention_mask' or {input_name!r}); pass length_of=a function item -> tokens"
    )


class IndexingCollator:
    """The outermost collate function: composition out of the items, then the real collate.

    :param collate: the collate function the Trainer built (its column removal inside).
    :param length_of: item -> real tokens; None uses :func:`default_length`.
    :param input_name: the model's main input (``input_ids`` for language models).
    """

    def __init__(
        self,
        collate: Callable[[list[Any]], Any],
        length_of: Callable[[Any], int] | None = None,
        input_name: str = "input_ids",
    ) -> None:
        self.collate = collate
        self.length_of = length_of
        self.input_name = input_name

    def __call__(self, tagged: list[Tagged]) -> Any:
        items = [t.item for t in tagged]
        ids = np.fromiter((t.index for t in tagged), dtype=np.int64, count=len(tagged))
        if self.length_of is None:
            lengths = [default_length(x, self.input_name) for x in items]
        else:
            lengths = [int(self.length_of(x)) for x in items]
        batch = self.collate(items)
        if not isinstance(batch, MutableMapping):
            raise TypeError(
                f"dflash_diag.record: the collate function returned a "
                f"{type(batch).__name__}; recorded batches must be dicts"
            )
        batch[BATCH_KEY] = Composition(ids, np.asarray(lengths, dtype=np.int64))
        return batch


def base_loader(loader: Any) -> Any:
    """The torch ``DataLoader`` inside accelerate's wrappers (``DataLoaderShard`` and the
    like keep it as ``base_dataloader``; torch-xla's as ``_loader``)."""
    seen = loader
    for _ in range(8):
        attrs = getattr(seen, "__dict__", {})
        inner = attrs.get("base_dataloader") or attrs.get("_loader")
        if inner is None:
            return seen
        seen = inner
    return seen


def index_loader(loader: Any, length_of: Callable[[Any], int] | None, input_name: str) -> None:
    """Give the built (not yet iterated) train loader the indexed view and the outer collate.

    The DataLoader forbids assigning ``dataset`` after construction because a new dataset
    could disagree with the sampler already built on the old one; the view has the same
    length and items, so it is set past that guard.
    """
    base = base_loader(loader)
    if isinstance(base.dataset, IndexedView):
        return  # indexed already
    check_map_style(base.dataset)
    object.__setattr__(base, "dataset", IndexedView(base.dataset))
    base.collate_fn = IndexingCollator(base.collate_fn, length_of, input_name)


def check_map_style(dataset: Any) -> None:
    """Refuse a dataset without indices (an ``IterableDataset``, a generator)."""
    from torch.utils.data import IterableDataset

    if dataset is None:
        raise TypeError("dflash_diag.record: the trainer has no train_dataset to record")
    if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__len__"):
        raise TypeError(
            f"dflash_diag.record: the train dataset ({type(dataset).__name__}) is iterable; "
            "it needs a map-style dataset (len and indexing) to know the sample ids"
        )


def trainer_settings(trainer: Any) -> dict[str, Any]:
    """What the trainer's arguments say about the batch schedule (the file's header)."""
    import transformers

    args = trainer.args
    names = (
        "seed",
        "data_seed",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "world_size",
        "train_sampling_strategy",
        "group_by_length",
        "length_column_name",
        "max_steps",
        "num_train_epochs",
        "dataloader_num_workers",
        "dataloader_drop_last",
        "remove_unused_columns",
    )
    settings: dict[str, Any] = {n: getattr(args, n) for n in names if hasattr(args, n)}
    dataset = trainer.train_dataset
    settings.update(
        recorder="record_trainer",
        trainer=type(trainer).__name__,
        transformers=transformers.__version__,
        train_samples=len(dataset) if hasattr(dataset, "__len__") else None,
    )
    return {
        k: v if isinstance(v, int | float | str | bool) or v is None else str(v)
        for k, v in settings.items()
    }


class StepRecorder:
    """Writes each micro-batch's composition with its step; counts micro-batches per step."""

    def __init__(self, recorder: BatchRecorder, rank: int) -> None:
        self.recorder = recorder
        self.rank = rank
        self.step = -1
        self.micro = 0

    def take(self, inputs: Any, step: int) -> None:
        """Pop the composition out of ``inputs`` and write it as micro-batch of ``step``."""
        self.write(self.pop(inputs), step)

    @staticmethod
    def pop(inputs: Any) -> Composition:
        """The composition, taken out of the batch before the model sees it."""
        comp = inputs.pop(BATCH_KEY, None) if isinstance(inputs, MutableMapping) else None
        if comp is None:
            raise RuntimeError(
                "dflash_diag.record: a training batch came without its sample ids (batches "
                "must be dicts, from the train DataLoader the trainer built)"
            )
        return comp

    def write(self, comp: Composition, step: int, losses: Any = None) -> None:
        """Write ``comp`` as the next micro-batch of ``step``, with its samples' losses
        when given (one per sample, in the batch's row order; any other count: none)."""
        if losses is not None and len(losses) != len(comp.ids):
            losses = None  # (rows that are not the samples: packed, padding-free)
        self.micro = self.micro + 1 if step == self.step else 0
        self.step = step
        self.recorder.log(
            step, comp.ids, comp.lengths, rank=self.rank, micro=self.micro, losses=losses
        )


def per_sample_losses(outputs: Any, labels: Any) -> np.ndarray | None:
    """Each row's mean causal-LM cross-entropy over its target tokens (nats per token,
    float32; NaN for a row without one), from a forward's detached logits.

    As the causal-LM loss shifts them: row ``i``'s loss is
    ``sum_t CE(logits[i, t], labels[i, t + 1]) / #{t : labels[i, t + 1] != -100}``,
    the logits upcast to float32, labels -100 ignored.  Computed row by row under
    ``torch.no_grad()`` (no graph, no random draw, one row's float32 copy at a time);
    None when the outputs hold no logits or the labels do not match them.
    """
    import torch
    import torch.nn.functional as F

    logits = getattr(outputs, "logits", None)
    if logits is None and isinstance(outputs, Mapping):
        logits = outputs.get("logits")
    if not isinstance(logits, torch.Tensor) or not isinstance(labels, torch.Tensor):
        return None
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        return None
    out = np.empty(len(logits), dtype=np.float32)
    with torch.no_grad():
        targets = labels[:, 1:].to(logits.device)
        for i in range(len(logits)):
            ce = F.cross_entropy(
                logits[i, :-1].detach().float(), targets[i], ignore_index=-100, reduction="sum"
            )
            n = int((targets[i] != -100).sum())
            out[i] = float(ce) / n if n else np.nan
    return out


class LossWatch:
    """The Trainer's ``compute_loss``, wrapped to keep the per-sample losses of a
    training micro-batch from its own forward; the loss object it returns is the one
    the Trainer's ``compute_loss`` returned."""

    def __init__(self, compute_loss: Callable[..., Any]) -> None:
        self.compute_loss = compute_loss
        self.active = False
        self.losses: np.ndarray | None = None

    def __call__(self, model: Any, inputs: Any, return_outputs: bool = False, **kw: Any) -> Any:
        if not self.active:  # (evaluation, or a call outside a recorded training step)
            return self.compute_loss(model, inputs, return_outputs, **kw)
        labels = inputs.get("labels") if isinstance(inputs, Mapping) else None
        loss, outputs = self.compute_loss(model, inputs, True, **kw)
        self.losses = per_sample_losses(outputs, labels)
        return (loss, outputs) if return_outputs else loss


def record_trainer(
    trainer: Any,
    path: str | os.PathLike[str],
    *,
    length_of: Callable[[Any], int] | None = None,
    sample_losses: bool = False,
    **settings: Any,
) -> None:
    """Record every micro-batch a ``transformers.Trainer`` trains on; call before ``train()``.

    The file is opened when training builds its train loader; its header holds the
    trainer's arguments (seed, batch size, gradient accumulation, world size, sampling
    strategy, data seed, max steps, epochs) and ``steps_per_epoch`` (optimizer steps in an
    epoch: ``ceil(micro-batches per rank / gradient_accumulation_steps)``).

    :param trainer: a ``transformers.Trainer`` (or a subclass: TRL's trainers).
    :param path: the file to write, e.g. ``train.batches``; rank ``r`` of a run over several
        processes writes ``train.rank{r}.batches``.
    :param length_of: item -> real tokens of one dataset item (as the dataset returns it,
        before the collator pads); default ``sum(attention_mask)`` or ``len(input_ids)``.
    :param sample_losses: also record each sample's loss (nats per target token, the
        causal-LM shift, labels -100 ignored) from the logits of the Trainer's own
        forward: ``compute_loss`` is asked for its outputs and returns the very loss it
        computed; no second forward, nothing trained changes (``tests/record``).  The
        batch's rows must be its samples (no packing into one row).
    :param settings: more of the run's settings for the file's header (JSON-able values).
    :raises TypeError: the trainer's train dataset is iterable (no indices to record).
    """
    check_map_style(trainer.train_dataset)
    input_name = getattr(trainer.model, "main_input_name", "input_ids")
    get_loader = trainer.get_train_dataloader
    training_step = trainer.training_step
    opened: list[StepRecorder] = []

    def get_train_dataloader() -> Any:
        loader = get_loader()
        index_loader(loader, length_of, input_name)
        if not opened:
            opened.append(open_recorder(trainer, loader, path, settings))
            trainer.add_callback(closing_callback(opened[0].recorder))
        return loader

    watch = LossWatch(trainer.compute_loss) if sample_losses else None

    def recorded_training_step(model: Any, inputs: Any, *rest: Any, **kw: Any) -> Any:
        # the update these micro-batches make will be logged as global_step + 1
        step = trainer.state.global_step + 1
        if watch is None:
            opened[0].take(inputs, step)
            return training_step(model, inputs, *rest, **kw)
        comp = opened[0].pop(inputs)
        watch.active, watch.losses = True, None
        try:
            out = training_step(model, inputs, *rest, **kw)
        finally:
            watch.active = False
        opened[0].write(comp, step, watch.losses)
        return out

    trainer.get_train_dataloader = get_train_dataloader
    trainer.training_step = recorded_training_step
    if watch is not None:
        trainer.compute_loss = watch


def open_recorder(
    trainer: Any, loader: Any, path: str | os.PathLike[str], settings: dict[str, Any]
) -> StepRecorder:
    """The rank's file, its header the trainer's settings, the loader's steps per epoch
    and the caller's ``settings``."""
    args = trainer.args
    accum = max(1, int(args.gradient_accumulation_steps))
    header = trainer_settings(trainer) | {"steps_per_epoch": -(-len(loader) // accum)}
    recorder = BatchRecorder(
        path, rank=args.process_index, world_size=args.world_size, settings=header | settings
    )
    return StepRecorder(recorder, args.process_index)


def closing_callback(recorder: BatchRecorder) -> Any:
    """A ``TrainerCallback`` that flushes the file after every optimizer step (so a step's
    composition is on disk before its log line) and closes it when training ends."""
    from transformers import TrainerCallback

    class RecordingCallback(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            recorder.flush()

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            recorder.close()

    return RecordingCallback()
