"""What the log says about the update at a spike, apart from its batch.

A spike whose batch is ordinary is only pinned on the optimizer when the log shows
something on the optimizer's side (:func:`optimizer_signs`):

- **grad_norm surge**: the largest grad_norm in the event's span (and the point before
  it) is at least :data:`GRAD_SURGE` times the median of the window before
  (``SpikeEvent.grad_norm_ratio``);
- **lr off its schedule**: the logged lr at the peak departs from the lr projected by a
  least-squares line through the :data:`LR_POINTS` logged points before the event by at
  least :data:`LR_DEPARTURE` (``|lr / projected - 1|``; a linear warmup or a cosine decay
  is locally a line, so only a jump, a restart or a wrong multiplier departs);
- **no recurrence**: the same batch came back in another epoch without a rise.

Without any of these the spike stays ``inconclusive``: neither its batch's features nor
the optimizer's signals explain it, and "look at the optimizer" would be a guess.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from .detect import SpikeEvent
    from .recurrence import Recurrence

#: grad_norm over its baseline from which a surge is optimizer-side evidence.
GRAD_SURGE = 1.5
#: ``|lr / projected - 1|`` from which the lr is off its schedule.
LR_DEPARTURE = 0.5
#: Logged points before an event through which its lr is projected.
LR_POINTS = 20


def lr_departure(steps: np.ndarray, lr: np.ndarray | None, event: SpikeEvent) -> float | None:
    """``lr_peak / projected - 1`` (see the module docstring), or None when the lr is not
    logged around the event or fewer than 3 points precede it.

    >>> import numpy as np
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class E:
    ...     start_step: int
    ...     peak_step: int
    >>> steps = np.arange(1, 41)
    >>> lr = 1e-5 * steps.astype(float)  # a linear warmup: on schedule
    >>> round(lr_departure(steps, lr, E(30, 30)), 6)
    0.0
    >>> lr[29] *= 3  # a wrong multiplier at step 30
    >>> round(lr_departure(steps, lr, E(30, 30)), 6)
    2.0
    """
    import numpy as np

    if lr is None:
        return None
    start = int(np.searchsorted(steps, event.start_step))
    peak = int(np.searchsorted(steps, event.peak_step))
    if peak >= len(steps) or not math.isfinite(lr[peak]):
        return None
    x, y = steps[max(0, start - LR_POINTS) : start], lr[max(0, start - LR_POINTS) : start]
    ok = np.isfinite(y)
    if ok.sum() < 3:
        return None
    # (lr values near the float range overflow the fit: no projection, and no warning)
    with np.errstate(all="ignore"):
        try:
            slope, icpt = np.polyfit(x[ok].astype(np.float64), y[ok], 1)
        except (np.linalg.LinAlgError, ValueError):
            return None
    projected = float(slope) * float(steps[peak]) + float(icpt)
    if not (math.isfinite(projected) and projected > 0):
        return None
    departure = float(lr[peak]) / projected - 1.0
    return departure if math.isfinite(departure) else None


def optimizer_signs(
    event: SpikeEvent, lr_off: float | None, recurrences: tuple[Recurrence, ...]
) -> tuple[str, ...]:
    """The optimizer-side evidence for ``event``, in words (empty: none)."""
    out = []
    if math.isfinite(event.grad_norm_ratio) and event.grad_norm_ratio >= GRAD_SURGE:
        out.append(f"grad_norm rose {event.grad_norm_ratio:.1f}x over its baseline")
    if lr_off is not None and abs(lr_off) >= LR_DEPARTURE:
        out.append(f"lr {event.lr:.3g} is {lr_off + 1:.2g}x what its schedule projects")
    if recurrences and not any(r.high for r in recurrences):
        out.append(f"its batch came back {len(recurrences)}x without a rise")
    return tuple(out)


def lr_at(table: pd.DataFrame, steps: np.ndarray) -> np.ndarray | None:
    """The logged lr at each of ``steps`` (NaN where not logged; the mean over ranks of
    a table with several), or None when the table has no lr at all."""
    import numpy as np

    if "lr" not in table.columns or not np.isfinite(table["lr"].to_numpy(np.float64)).any():
        return None
    per_step = table.groupby("step")["lr"].mean()
    return per_step.reindex(np.asarray(steps)).to_numpy(dtype=np.float64)
