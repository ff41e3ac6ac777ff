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


def high_kinds(excess: np.ndarray, kinds: np.ndarray) -> tuple[HighKind, ...]:
    """The kinds high as a whole (the module docstring), highest first.

    :param excess: float ``[n_samples]``, each sample's own loss over its batch mates'
        (NaN: not measured).
    :param kinds: each sample's kind name (None or NaN: none), the same length.

    >>> ex = np.r_[np.zeros(20), [2.5, 2.7, 2.6]]
    >>> [k.name for k in high_kinds(ex, np.array(["clean"] * 20 + ["bad"] * 3))]
    ['bad']
    """
    named = np.array([k is not None and k == k for k in kinds], dtype=bool)  # (NaN: none)
    has = np.isfinite(excess) & named
    names = sorted({str(k) for k in kinds[has]})
    if len(names) < 2:
        return ()
    label = np.array([str(k) for k in kinds], dtype=object)
    out = []
    for name in names:
        mine = has & (label == name)
        others = has & ~mine
        if mine.sum() < MIN_SAMPLES or others.sum() < MIN_SAMPLES:
            continue
        med = float(np.median(excess[mine]))
        if med > float(np.quantile(excess[others], OTHERS_QUANTILE)):
            out.append(HighKind(name, int(mine.sum()), med, float(np.median(excess[others]))))
    return tuple(sorted(out, key=lambda k: -k.median_nats))
