"""Record what a Lightning ``Trainer`` really trains on: one callback.

::

    from dflash_diag.record import LightningRecorder

    trainer = L.Trainer(..., callbacks=[LightningRecorder("train.batches")])

Every micro-batch of every optimizer step is written to ``train.batches`` (rank ``r`` of a
run over several processes writes ``train.rank{r}.batches``): the step as Lightning's
loggers number it (``trainer.global_step`` before the update: the first update is step 0),
its place in the gradient accumulation (``micro``), the dataset indices it held and their
real (unpadded) lengths in tokens.

How it learns the indices (the same way as :func:`~dflash_diag.record.record_trainer`):
when the fit loop has built its train ``DataLoader`` (Lightning's own distributed sampler
and worker seeding in place) and before it is iterated, the strategy's
``process_dataloader`` hands it to the recorder, which gives it a dataset view whose items
carry their index and an outermost collate function that takes the indices and unpadded
lengths out before the real collate function runs (in the worker processes when
``num_workers > 0``). The composition travels in the batch under a private key, which
``on_train_batch_start`` takes out before ``training_step`` sees the batch. Nothing draws
from a random generator: what is trained is unchanged (``tests/record``).

Each sample's loss is recorded too when ``training_step`` returns it beside the loss::

    def training_step(self, batch, batch_idx):
        out = self.model(**batch)
        with torch.no_grad():  # per row: mean cross-entropy over its target tokens
            sample_losses = per_row_loss(out.logits, batch["labels"])
        return {"loss": out.loss, "sample_losses": sample_losses}

(``dflash_diag.record.hf.per_sample_losses(out, labels)`` computes that for a causal LM.)

Needs a map-style dataset, and batches that are dicts (``{"input_ids": ..., ...}``);
``lightning.pytorch`` (the ``lightning`` package). The class is built on first use, so
importing this module does not import lightning.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from dflash_diag.record import BatchRecorder
from dflash_diag.record.hf import Composition, StepRecorder, index_loader

#: the key of ``training_step``'s returned dict that holds each sample's loss
LOSSES_KEY = "sample_losses"


def lightning_settings(trainer: Any, loader: Any) -> dict[str, Any]:
    """What the trainer and its train loader say about the batch schedule (the header)."""
    import lightning

    sampler = getattr(loader, "sampler", None)
    settings: dict[str, Any] = {
        "recorder": "LightningRecorder",
        "lightning": lightning.__version__,
        "seed": os.environ.get("PL_GLOBAL_SEED"),
        "batch_size": getattr(loader, "batch_size", None),
        "accumulate_grad_batches": trainer.accumulate_grad_batches,
        # an epoch's last, shorter accumulation is a step of its own
        "steps_per_epoch": -(-len(loader) // max(1, trainer.accumulate_grad_batches)),
        "world_size": trainer.world_size,
        "max_epochs": trainer.max_epochs,
        "max_steps": trainer.max_steps,
        "sampler": type(sampler).__name__ if sampler is not None else None,
        "num_workers": getattr(loader, "num_workers", None),
        "drop_last": getattr(loader, "drop_last", None),
    }
    dataset: Any = getattr(loader, "dataset", None)
    if hasattr(dataset, "__len__"):
        settings["train_samples"] = len(dataset)
    return settings


class RecorderState:
    """The recording side of the callback, kept apart from Lightning's class.

    :param path: the file to write (``train.batches``; ranks get theirs).
    :param length_of: item -> real tokens of one dataset item; None: ``sum(attention_mask)``
        or ``len(input_ids)``.
    :param settings: more of the run's settings for the header (JSON-able).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        length_of: Callable[[Any], int] | None,
        settings: dict[str, Any] | None,
    ) -> None:
        self.path = path
        self.length_of = length_of
        self.settings = dict(settings or {})
        self.recorder: BatchRecorder | None = None
        self.steps: StepRecorder | None = None
        self.pending: tuple[Composition, int] | None = None

    def index(self, trainer: Any, loader: Any) -> None:
        """Index the train loader (not yet iterated) and open the file."""
        index_loader(loader, self.length_of, "input_ids")
        if self.recorder is None:
            header = lightning_settings(trainer, loader) | self.settings
            self.recorder = BatchRecorder(
                self.path,
                rank=trainer.global_rank,
                world_size=trainer.world_size,
                settings=header,
            )
            self.steps = StepRecorder(self.recorder, trainer.global_rank)

    def take(self, batch: Any, step: int) -> None:
        """Pop the composition out of the batch before ``training_step`` sees it; it is
        written as a micro-batch of ``step`` when the batch ends (:meth:`finish`)."""
        if self.steps is None:
            raise RuntimeError("LightningRecorder: training began before its loader was built")
        self.finish(None)  # (a batch whose end never came: written without losses)
        self.pending = (self.steps.pop(batch), step)

    def finish(self, outputs: Any) -> None:
        """Write the pending micro-batch, with ``outputs[LOSSES_KEY]`` as its samples'
        losses when ``training_step`` returned a dict holding it."""
        if self.pending is None or self.steps is None:
            return
        comp, step = self.pending
        self.pending = None
        losses = outputs.get(LOSSES_KEY) if isinstance(outputs, dict) else None
        if losses is not None and len(losses) != len(comp.ids):
            raise ValueError(
                f"LightningRecorder: training_step returned {len(losses)} {LOSSES_KEY} for "
                f"a batch of {len(comp.ids)} samples; give one loss per sample, in batch order"
            )
        self.steps.write(comp, step, losses)
        if self.recorder is not None:
            self.recorder.flush()

    def close(self) -> None:
        self.finish(None)
        if self.recorder is not None:
            self.recorder.close()


def build_class() -> type:
    """``LightningRecorder``, a ``lightning.pytorch.Callback`` (lightning imported here)."""
    from lightning.pytorch import Callback

    class LightningRecorder(Callback):  # type: ignore[misc]
        """Record every micro-batch of a Lightning fit: ``callbacks=[LightningRecorder(path)]``.

        :param path: the file to write, e.g. ``train.batches``; rank ``r`` of a run over
            several processes writes ``train.rank{r}.batches``.
        :param length_of: item -> real tokens of one dataset item (as the dataset returns
            it, before the collate function pads); default ``sum(attention_mask)`` or
            ``len(input_ids)``.
        :param settings: more of the run's settings for the file's header; the trainer's
            own (accumulation, world size, batch size, sampler, seed) are written anyway.

        Per-sample losses: when ``training_step`` returns a dict with, beside ``loss``,
        a ``sample_losses`` tensor (one value per sample of the batch, in batch order:
        the sample's mean loss over its target tokens, in nats, computed from the same
        forward, detached), each micro-batch is recorded with them.
        """

        def __init__(
            self,
            path: str | os.PathLike[str],
            *,
            length_of: Callable[[Any], int] | None = None,
            settings: dict[str, Any] | None = None,
        ) -> None:
            super().__init__()
            self.state = RecorderState(path, length_of, settings)
            self.restore: Callable[[], None] | None = None

        def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
            if stage != "fit" or self.restore is not None:
                return
            strategy = trainer.strategy
            process = strategy.process_dataloader
            state = self.state

            def process_dataloader(loader: Any) -> Any:
                loader = process(loader)
                if trainer.training:  # the train loader, not validation's or sanity's
                    state.index(trainer, loader)
                return loader

            strategy.process_dataloader = process_dataloader
            self.restore = lambda: vars(strategy).pop("process_dataloader", None)

        def on_train_batch_start(
            self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
        ) -> None:
            # Lightning's loggers number the update these micro-batches make with the
            # global_step before it (the first update's metrics are logged at step 0)
            self.state.take(batch, trainer.global_step)

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            self.state.finish(outputs)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            self.state.close()

        def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
            self.state.close()
            if self.restore is not None:
                self.restore()
                self.restore = None

    # pickled by name (ddp_spawn pickles the trainer's callbacks): found by __getattr__
    LightningRecorder.__module__ = __name__
    LightningRecorder.__qualname__ = "LightningRecorder"
    return LightningRecorder


_built: dict[str, type] = {}


def __getattr__(name: str) -> Any:
    # the class is made on first use, so importing this module does not import lightning
    if name != "LightningRecorder":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _built:
        _built[name] = build_class()
    return _built[name]
