"""Kinds (the manifest's categories) whose samples are high as a whole.

On measured ground each sample is compared with its own kind (``measured.py``, step 2):
a kind whose every sample is harder than the rest is explained by its kind, and none of
its samples is named from within it.  That is right for a hard source, and hides a
source that is all garbage; either way the reader should be told that the kind itself
stands out.  A kind is high as a whole when the median of its samples' own loss over
their batch mates (``measured_excess``, nats per token) lies above the 99th percentile
of the other kinds' samples' (:data:`OTHERS_QUANTILE`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: A kind is high as a whole when its median lies above this quantile of the others'.
OTHERS_QUANTILE = 0.99
#: Samples with a value a kind needs before it is judged.
MIN_SAMPLES = 3


@dataclass(frozen=True)
class HighKind:
    """A kind high as a whole: its name, its samples with a value, their median own
    loss over their batch mates and the other kinds' median (nats per token)."""

    name: str
    n: int
    median_nats: float
    others_nats: float


def high_kinds(excess: np.ndarray, codes: np.ndarray, names: Sequence[str]) -> tuple[HighKind, ...]:
    """The kinds high as a whole (the module docstring), highest first.

    :param excess: float ``[n_samples]``, each sample's own loss over its batch mates'
        (NaN: not measured).
    :param codes: int ``[n_samples]``, each sample's kind, an index into ``names``
        (negative: none).
    :param names: the kinds' names.

    >>> ex = np.r_[np.zeros(20), [2.5, 2.7, 2.6]]
    >>> [k.name for k in high_kinds(ex, np.r_[np.zeros(20, int), [1, 1, 1]], ["clean", "bad"])]
    ['bad']
    """
    codes = np.asarray(codes)
    has = np.isfinite(excess) & (codes >= 0)
    present = np.unique(codes[has])
    if present.size < 2:
        return ()
    out = []
    for code in present.tolist():
        mine = has & (codes == code)
        others = has & ~mine
        if mine.sum() < MIN_SAMPLES or others.sum() < MIN_SAMPLES:
            continue
        med = float(np.median(excess[mine]))
        if med > float(np.quantile(excess[others], OTHERS_QUANTILE)):
            others_med = float(np.median(excess[others]))
            out.append(HighKind(str(names[code]), int(mine.sum()), med, others_med))
    return tuple(sorted(out, key=lambda k: -k.median_nats))
