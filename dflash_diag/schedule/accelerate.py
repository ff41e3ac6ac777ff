"""accelerate's batch-sampler sharding across processes (``--shard accelerate``).

``accelerate.data_loader.BatchSamplerShard`` (``split_batches=False``,
``even_batches=True``, accelerate 1.15), which ``Accelerator.prepare`` and so the HF
Trainer put over the DataLoader's batch sampler when there is more than one process:
process ``r`` takes the batches ``r, r + W, r + 2W, ...`` of the epoch.  Without
``drop_last``, the epoch is made a multiple of ``W`` batches so every process runs as
many steps: the last, short batch is completed, and missing batches are made, from the
samples of the epoch's first ``W`` batches taken cyclically (``initial_data``).  With
``drop_last`` (the batch sampler has no short batch) an incomplete last round of ``W``
batches is left out.  One process (``W = 1``): no sharding, nothing added.

Seen as one list, position ``j * W + r`` is process ``r``'s ``j``-th batch: the replay's
strided positions.  The Trainer then steps every ``grad_accum`` batches of a process and
once more on what is left at the end of an epoch (:func:`step_positions`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Batches

if TYPE_CHECKING:
    import numpy as np


def even_batches(
    batches: Batches, world_size: int, batch_size: int, drop_last: bool, even: bool = True
) -> Batches:
    """The epoch's batches as ``W`` processes see them, in strided order (see the module).

    ``even=False`` is accelerate's ``even_batches=False``: nothing is added, so without
    ``drop_last`` the last round's processes run one batch fewer than the first ones
    (process ``r`` still takes positions ``r, r + W, ...``).  Checked against
    ``BatchSamplerShard`` itself (``tests/data/samplers/accelerate_shard.json``).

    >>> b = Batches.from_lists([[5, 6], [7, 8], [9]])
    >>> even_batches(b, 2, 2, False).tolist()
    [[5, 6], [7, 8], [9, 5], [6, 7]]
    >>> even_batches(b, 2, 2, True).tolist()
    [[5, 6], [7, 8]]
    >>> even_batches(b, 2, 2, False, even=False).tolist()
    [[5, 6], [7, 8], [9]]
    """
    import numpy as np

    m = len(batches)
    if world_size == 1 or m == 0:
        return batches
    if drop_last:
        keep = m // world_size * world_size
        return Batches(batches.ids[: batches.offsets[keep]], batches.offsets[: keep + 1])
    if not even:
        return batches
    head = batches.ids[: batches.offsets[min(world_size, m)]]
    initial = np.resize(head, world_size * batch_size)  # doubled until long enough
    sizes = batches.sizes().tolist()
    ids = [batches.ids]
    cycle = 0
    if sizes[-1] < batch_size:  # complete the short last batch
        cycle = batch_size - sizes[-1]
        ids.append(initial[:cycle])
        sizes[-1] = batch_size
    while len(sizes) % world_size:
        ids.append(initial[cycle : cycle + batch_size])
        cycle += batch_size
        sizes.append(batch_size)
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(np.asarray(sizes, dtype=np.int64), out=offsets[1:])
    return Batches(np.concatenate(ids).astype(np.int64, copy=False), offsets)


def step_positions(
    m: int, world_size: int, grad_accum: int, keep_partial: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Strided positions of an epoch of ``m`` batches, in row order (step, rank, micro):
    ``(pos, step, rank, micro)``, step counted from 0 in the epoch.

    Process ``r``'s ``i``-th batch is at ``i * W + r``; step ``k`` takes its batches
    ``k * G .. k * G + G - 1``.  With ``keep_partial`` the epoch's last step takes the
    ``L mod G`` batches left (``L = m // W`` per process), as the HF Trainer does;
    otherwise they are not used.

    >>> [a.tolist() for a in step_positions(6, 2, 2, True)]
    [[0, 2, 1, 3, 4, 5], [0, 0, 0, 0, 1, 1], [0, 0, 1, 1, 0, 1], [0, 1, 0, 1, 0, 0]]
    """
    import numpy as np

    w, g = world_size, grad_accum
    per_rank = m // w
    n_full = per_rank // g
    if not (keep_partial and per_rank % g):  # every step full: the rows a grid
        return _full_steps(n_full, w, g)
    micros = [g] * n_full
    if keep_partial and per_rank % g:
        micros.append(per_rank % g)
    counts = np.asarray(micros, dtype=np.int64)
    rows = counts * w
    step = np.repeat(np.arange(len(counts), dtype=np.int64), rows)
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(rows, out=starts[1:])
    within = np.arange(int(starts[-1]), dtype=np.int64)
    within -= starts[step]
    rank, micro = np.divmod(within, counts[step])
    del within
    # pos = (step * g + micro) * w + rank, in place
    pos = step * g
    pos += micro
    pos *= w
    pos += rank
    return pos, step, rank, micro


def _full_steps(
    n_steps: int, w: int, g: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`step_positions` when every step takes ``g`` batches of each of ``w``
    processes: the rows are the grid (step, rank, micro), ``pos = (step * g + micro) *
    w + rank`` made by broadcasting (no division a row); with ``g = 1``, ``pos`` is
    ``arange`` and ``micro`` zeros.

    >>> [a.tolist() for a in _full_steps(2, 2, 2)] == [
    ...     a.tolist() for a in step_positions(9, 2, 2, False)]
    True
    """
    import numpy as np

    shape = (n_steps, w, g)
    k = np.arange(n_steps, dtype=np.int64).reshape(-1, 1, 1)
    r = np.arange(w, dtype=np.int64).reshape(1, -1, 1)
    j = np.arange(g, dtype=np.int64).reshape(1, 1, -1)
    if g == 1:
        pos = np.arange(n_steps * w, dtype=np.int64)
        micro = np.zeros(n_steps * w, dtype=np.int64)
    else:
        pos = ((k * g + j) * w + r).reshape(-1)
        micro = _filled(shape, j)
    step = np.repeat(k.reshape(-1), w * g)
    return pos, step, _filled(shape, r), micro


def _filled(shape: tuple[int, ...], values: np.ndarray) -> np.ndarray:
    """A fresh (writeable) int64 array of ``values`` broadcast to ``shape``, flat."""
    import numpy as np

    out = np.empty(shape, dtype=np.int64)
    out[...] = values
    return out.reshape(-1)
