"""The batches recorded during training: :class:`RecordedSource`.

The recording (:mod:`dflash_diag.record`) is read as it is, no replay; a manifest, when
given, is checked against the recorded ids and lengths and adds the categories
(:meth:`~dflash_diag.record.Recording.to_replay`).  A live run's recording grows: a
step past what was read makes it read again.  Its ground is
:func:`~dflash_diag.composition.ground.check_recording`: ``recorded``, or ``refuted``
with ``--force`` when its tokens disagree with the log's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..data import Progress
from .source import Source

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from ..data import Manifest, Replay
    from .ground import ScheduleGround

#: A recording that does not reach a live step yet is read again this many times ...
RECORD_RETRIES = 3
#: ... this many seconds apart (the recorder writes a step when the next one starts:
#: its line in the log may come a moment before it is in the file).
RECORD_RETRY_SECONDS = 0.1


@dataclass
class RecordedSource(Source):
    """A composition recorded during training.

    :param path: the recording (a file, or the base path of rank files).
    :param named_by: where it came from, in words (``--composition FILE``).
    :param manifest_path: lengths to check it against (None: the recorded lengths).
    :param columns: the manifest's length and category columns (None: found).
    :param force: attribute even when the recorded tokens disagree with the log's
        (``refuted``), as ``spikes --force``.
    :param live: read again when a step past the last read is asked for (``watch``).
    :param reads: how many times the recording was read.
    """

    path: Path
    named_by: str = ""
    manifest_path: Path | None = None
    columns: tuple[str | None, str | None] = (None, None)
    force: bool = False
    live: bool = False
    reads: int = 0
    recording: Any = field(default=None, repr=False)
    _manifest: Any = field(default=None, repr=False)
    _replay: Any = field(default=None, repr=False)

    kind = "recorded"
    replaying = ""  # (read by load, under its own stage)

    def load(self, stage: Any = None) -> None:
        if self.recording is None:
            self.read(stage)

    def read(self, stage: Any = None) -> None:
        """Read the recording (again) as it is now, and the manifest the first time."""
        from contextlib import nullcontext

        from ..manifest import read_manifest
        from ..record import read_recording

        quiet = nullcontext
        with stage("reading recording") if stage is not None else quiet():
            self.recording = read_recording(self.path)
        if self.manifest_path is not None and self._manifest is None:
            with stage("reading manifest") if stage is not None else quiet() as bar:
                self._manifest = read_manifest(self.manifest_path, *self.columns, progress=bar)
        self._replay = self.recording.to_replay(lengths=self._manifest)
        self.reads += 1

    @property
    def manifest(self) -> Manifest | None:
        return self._manifest  # type: ignore[no-any-return]

    def replay_for(self, step: int | None, progress: Progress | None = None) -> Replay:
        self.load()
        for attempt in range(RECORD_RETRIES + 1 if self.live else 0):
            rep = self._replay
            if step is None or int(rep.steps["step"].max()) >= step:
                break
            if attempt:
                time.sleep(RECORD_RETRY_SECONDS)
            self.read()
        return self._replay  # type: ignore[no-any-return]

    def ground(self, replay: Replay, table: pd.DataFrame, steps: np.ndarray) -> ScheduleGround:
        from .ground import check_recording

        return check_recording(replay, table, steps, self.force, str(self.path), self.named_by)

    def sample_loss(self, replay: Replay) -> np.ndarray | None:
        """The per-sample losses the recorder measured, per entry of
        ``replay.sample_ids`` (None: none recorded)."""
        import numpy as np

        rec = self.recording
        if rec is None or not getattr(rec, "has_losses", False):
            return None
        ids = rec.sample_id
        if ids.shape != replay.sample_ids.shape or not np.array_equal(ids, replay.sample_ids):
            return None  # (not in the replay's order: nothing to line up)
        return rec.loss.astype(np.float64)

    def notes(self) -> tuple[str, ...]:
        torn = self.recording.torn if self.recording is not None else 0
        if not torn:
            return ()
        return (
            f"{torn} partial record{'s' if torn != 1 else ''} in "
            f"{self.named_by.split(' (')[0]} cut short and skipped (a run stopped "
            "mid-write, or a write that failed)",
        )
