"""A batch coming back: which logged points hold a spike's micro-batches again, and
whether they were high again.

Under a schedule that rebuilds the same batches every epoch (sorted-greedy), a hard batch
comes back; where it lands on the logged rank its point shows it.  :class:`Recurrences`
finds, for one point, every other point holding any of its micro-batches (by
``batch_id``); :func:`high_again` decides whether such a point stood out; and
:func:`point_groups` labels points by the set of batches they hold, so a prediction for a
point can leave out its own recurrences.  Recurrence is evidence, not proof: the model
learns in between, so a batch that comes back spikes less.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from ..data import Replay

#: A recurrence is high again at this share of the spike's rise and these robust sigmas.
RECUR_SHARE = 0.25
RECUR_SIGMAS = 3.0


@dataclass(frozen=True)
class Recurrence:
    """A later or earlier point whose batches include the spike's micro-batches.

    :param shared: share of the spike point's micro-batches found at this point.
    :param residual: its detrended value; ``high``: residual >= half the spike's rise.
    """

    step: int
    epoch: int
    value: float
    residual: float
    z: float
    spiked: bool
    high: bool
    shared: float


class Recurrences:
    """Which logged points hold a given point's micro-batches (built once, for all spikes)."""

    def __init__(self, replay: Replay, point_of_micro: np.ndarray) -> None:
        import numpy as np

        self.ids = replay.micro["batch_id"].to_numpy()
        self.epoch = replay.micro["epoch"].to_numpy()
        self.point = point_of_micro
        self.order = np.argsort(self.ids, kind="stable")
        self.sorted_ids = self.ids[self.order]
        by_point = np.argsort(point_of_micro, kind="stable")
        self.by_point = by_point
        self.point_sorted = point_of_micro[by_point]

    def micro_of(self, p: int) -> np.ndarray:
        import numpy as np

        lo, hi = np.searchsorted(self.point_sorted, [p, p + 1])
        return self.by_point[lo:hi]

    def find(self, p: int) -> list[tuple[int, int, float]]:
        """``(point, epoch, shared share)`` of other points holding point ``p``'s batches."""
        import numpy as np

        mine = self.micro_of(p)
        if mine.size == 0:
            return []
        ids = np.unique(self.ids[mine])
        lo = np.searchsorted(self.sorted_ids, ids, side="left")
        hi = np.searchsorted(self.sorted_ids, ids, side="right")
        rows = np.concatenate([self.order[a:b] for a, b in zip(lo, hi, strict=True)])
        rows = rows[(self.point[rows] != p) & (self.point[rows] >= 0)]
        found: dict[int, tuple[set[int], int]] = {}
        for r in rows:
            q = int(self.point[r])
            seen, ep = found.get(q, (set(), int(self.epoch[r])))
            seen.add(int(self.ids[r]))
            found[q] = (seen, ep)
        return [(q, ep, len(seen) / ids.size) for q, (seen, ep) in sorted(found.items())]


def high_again(residual: float, rise: float, scale: float) -> bool:
    """A recurrence is "high again" when its residual is at least RECUR_SHARE of the
    spike's rise and RECUR_SIGMAS robust sigmas of the model's residuals: the model
    learns in between, so a hard batch that comes back spikes less, but still stands out."""
    if not (math.isfinite(residual) and math.isfinite(rise)) or rise <= 0:
        return False
    floor = RECUR_SIGMAS * scale if math.isfinite(scale) else 0.0
    return residual >= RECUR_SHARE * rise and residual >= floor


def point_groups(replay: Replay, point_of_micro: np.ndarray, n_points: int) -> np.ndarray:
    """A label per point for the set of batches it holds (the same set coming back in
    another epoch gets the same label): a wrapping sum of hashed batch ids."""
    import numpy as np

    keep = point_of_micro >= 0
    ids = replay.micro["batch_id"].to_numpy()[keep].astype(np.uint64)
    with np.errstate(over="ignore"):
        hashed = (ids + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
    out = np.zeros(n_points, dtype=np.uint64)
    np.add.at(out, point_of_micro[keep], hashed)
    return out
