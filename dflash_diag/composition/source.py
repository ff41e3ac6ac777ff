"""What each step held, and on what ground: :class:`Composition` and its sources.

A :class:`Composition` is the one answer every command works from: per step the
micro-batches and the samples they held (a :class:`~dflash_diag.data.Replay`: flat
``sample_ids`` + ``offsets``, and the ``micro``/``steps`` tables), the manifest that names
the samples (None: a recording read without one), and the
:class:`~dflash_diag.composition.ground.ScheduleGround` it rests on (``verified``,
``recorded``, ``given``, ``refuted``).

It comes from a :class:`Source`, one small class per origin, as datatrove's readers sit
on one base:

- :class:`~dflash_diag.composition.replayed.ReplayedSource`: a named schedule replayed
  from a manifest (checked against the logged tokens);
- :class:`~dflash_diag.composition.recorded.RecordedSource`: the batches recorded
  during training (:mod:`dflash_diag.record`), read again as a live run's file grows.

:func:`~dflash_diag.composition.request.resolve` picks the source for a command's
options (``spikes``, ``watch``, ``batches`` and ``samples`` all call it), so nothing
else forks on "recorded or replayed".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..data import Progress

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from ..data import Manifest, Replay
    from .ground import ScheduleGround


@dataclass(frozen=True, eq=False)
class Composition:
    """What each step held, and on what ground.

    :param replay: the micro-batches of every step (:class:`~dflash_diag.data.Replay`).
    :param ground: what it rests on, said beside every verdict.
    :param manifest: the samples' manifest (ids, lengths, categories); None: a
        recording read without one (its ids are the recorded dataset indices).
    :param kind: ``replayed`` or ``recorded``.
    :param epochs: epochs replayed (None: a recording).
    :param sample_loss: float64 per entry of ``replay.sample_ids``: each sample's
        token-averaged loss (nats per target token) as measured in the same forward by
        the recorder; None when nothing measured it (NaN: not measured there).
    """

    replay: Replay
    ground: ScheduleGround
    manifest: Manifest | None = None
    kind: str = "replayed"
    epochs: int | None = None
    sample_loss: np.ndarray | None = None

    @property
    def ids(self) -> np.ndarray | None:
        """Sample ids by dataset index (the manifest's ``sample_id`` column); None:
        the dataset indices are the ids."""
        return self.manifest.ids if self.manifest is not None else None

    @property
    def recorded(self) -> bool:
        """The batches were recorded during training (not replayed)."""
        return self.kind == "recorded"


class Source:
    """Where a run's composition comes from: the base every source extends.

    A source hands out a replay reaching a step (:meth:`replay_for`), says what it
    rests on given the logged points so far (:meth:`ground`), and puts the two together
    (:meth:`composition`).  Subclasses write :meth:`replay_for` and :meth:`ground`.

    :param named_by: where it came from, in words (``--config FILE``, ``run.batches
        (found beside the log)``), for the output.
    :param force: attribute on it even when the log's tokens refute it (``refuted``).
    """

    kind = "replayed"
    named_by: str = ""
    force: bool = False

    def load(self, stage: Any = None) -> None:
        """Read what the source needs now (a manifest, a recording), so a bad input
        is refused before long work starts; later calls do nothing."""

    def replay_for(self, step: int | None, progress: Progress | None = None) -> Replay:
        """A replay that reaches ``step`` (None: all the source holds)."""
        raise NotImplementedError

    def ground(self, replay: Replay, table: pd.DataFrame, steps: np.ndarray) -> ScheduleGround:
        """What the batches rest on, given the logged ``table`` (``step``, ``tokens``)
        and the steps of the points to be lined up."""
        raise NotImplementedError

    @property
    def manifest(self) -> Manifest | None:
        """The manifest read (None: none given)."""
        return None

    def epochs(self, replay: Replay) -> int | None:
        """Epochs replayed (None: not a replay)."""
        return None

    def notes(self) -> tuple[str, ...]:
        """What the reader should know about the source (torn records ignored ...)."""
        return ()

    def sample_loss(self, replay: Replay) -> np.ndarray | None:
        """Measured per-sample losses per entry of ``replay.sample_ids`` (None: none)."""
        return None

    def composition(
        self,
        table: pd.DataFrame,
        steps: np.ndarray,
        stage: Any = None,
    ) -> Composition:
        """The composition lined up with the logged points at ``steps``: a replay
        reaching the last of them, checked against ``table``.

        :param stage: a :data:`~dflash_diag.reports.common.Stage` for progress (None:
            none shown).
        """
        from contextlib import nullcontext

        self.load(stage)
        last = int(steps[-1]) if len(steps) else None
        shown = stage is not None and self.replaying
        with stage(self.replaying) if shown else nullcontext() as bar:
            rep = self.replay_for(last, bar)
        ground = self.ground(rep, table, steps)
        return Composition(
            rep, ground, self.manifest, self.kind, self.epochs(rep), self.sample_loss(rep)
        )

    #: the progress stage's words while :meth:`replay_for` runs ("": none shown)
    replaying = "replaying schedule"
