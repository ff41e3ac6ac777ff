"""A named schedule replayed from a manifest: :class:`ReplayedSource`.

The manifest is read once (:meth:`ReplayedSource.load`); the schedule is replayed for
as many epochs as reach the step asked for (:func:`~dflash_diag.composition.ground.
epochs_to_cover`), or the epochs the user gave, and again with twice as many when a
live run goes past the replay's last step.  Its ground is the token check of
:func:`~dflash_diag.composition.ground.check_schedule`: ``verified``, ``given`` or
``refuted``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..data import Progress
from .source import Source

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from ..data import Manifest, Replay, ScheduleParams
    from .ground import ScheduleGround


@dataclass
class ReplayedSource(Source):
    """A named schedule replayed from a manifest.

    :param params: the schedule (its ``epochs`` used when ``epochs_given``).
    :param manifest_path: the manifest (a file or a dataset folder).
    :param columns: the manifest's length and category columns (None: found).
    :param named_by: where the schedule came from, in words.
    :param named: the user named the strategy (without logged tokens, only a named
        schedule is attributed on).
    :param force: attribute even when the tokens disagree (``refuted``).
    :param path: the log, for messages.
    :param epochs_given: the user gave ``--epochs``: replay exactly those.
    :param replays: how many times the schedule was replayed (a live run's growth).
    """

    params: ScheduleParams
    manifest_path: Path | None = None
    columns: tuple[str | None, str | None] = (None, None)
    named_by: str = "flags"
    named: bool = True
    force: bool = False
    path: str = ""
    epochs_given: bool = False
    replays: int = 0
    _manifest: Any = field(default=None, repr=False)
    _replay: Any = field(default=None, repr=False)
    _epochs: int | None = field(default=None, repr=False)

    def load(self, stage: Any = None) -> None:
        from contextlib import nullcontext

        from ..manifest import read_manifest, release_read_buffers

        if self._manifest is not None:
            return
        if self.manifest_path is None:
            raise ValueError("a ReplayedSource needs a manifest or a manifest path")
        with stage("reading manifest") if stage is not None else nullcontext() as bar:
            self._manifest = read_manifest(self.manifest_path, *self.columns, progress=bar)
        release_read_buffers()

    @property
    def manifest(self) -> Manifest | None:
        return self._manifest  # type: ignore[no-any-return]

    def replay_for(self, step: int | None, progress: Progress | None = None) -> Replay:
        from ..schedule import replay
        from .ground import epochs_to_cover

        self.load()
        rep = self._replay
        if rep is not None and (
            step is None or self.epochs_given or int(rep.steps["step"].max()) >= step
        ):
            return rep  # type: ignore[no-any-return]
        if self.epochs_given or step is None:
            epochs = int(self.params.epochs)
        else:
            need = epochs_to_cover(self._manifest, self.params, step, self.path)
            have = 0 if rep is None else int(rep.steps["epoch"].max()) + 1
            epochs = max(need, 2 * have)
        self._replay = replay(self._manifest, self.params, epochs=epochs, progress=progress)
        self._epochs = epochs
        self.replays += 1
        return self._replay  # type: ignore[no-any-return]

    def ground(self, replay: Replay, table: pd.DataFrame, steps: np.ndarray) -> ScheduleGround:
        from .ground import check_schedule

        return check_schedule(
            replay, table, self.force, self.path, named_by=self.named_by, named=self.named
        )

    def epochs(self, replay: Replay) -> int | None:
        return self._epochs
