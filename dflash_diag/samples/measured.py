"""Evidence on measured ground: per-sample losses logged by a recorder.

When the recorder logged each sample's own loss in each point (``sample_loss``, aligned
with ``Membership.samples``), nothing has to be inferred from batch means: each entry is
standardised against the other samples of its point,

    r_e = loss_e - median(losses of the point),   z_e = r_e / (1.4826 MAD(r)),

the MAD over all entries of the run (one scale: a batch of 8 gives a poor scale of its
own).  A poison sample is high against its batch mates wherever it goes; a level shift
or an lr surge raises a whole point and cancels out of ``r_e``.  Then every entry is its
own observation and :func:`.sample_evidence`'s machinery runs on entries instead of
points: the null is exchangeability of the entries' z's, and no two samples share an
entry, so there are no inseparable groups (a sample seen once is still untestable).
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from .evidence import SampleEvidence, SampleOptions, evidence_with_ground
from .membership import Membership

#: Points with fewer finite sample losses than this give their entries no z (a median
#: of one or two losses is the loss itself).
MIN_ENTRIES = 3


def measured_z(
    membership: Membership, sample_loss: object, min_entries: int = MIN_ENTRIES
) -> np.ndarray:
    """Each entry's loss against its point's median, in robust z, float64 ``[n_entries]``.

    NaN where the loss is not finite or the point has fewer than ``min_entries`` finite
    losses.

    >>> m = Membership.from_entries([0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2])
    >>> measured_z(m, [1.0, 1.1, 3.0, 2.0, 2.1, 1.9]).round(2).tolist()
    [-0.67, 0.0, 12.82, 0.0, 0.67, -0.67]
    """
    loss = np.asarray(sample_loss, dtype=np.float64)
    if loss.shape != membership.samples.shape:
        raise InputError(
            "sample_loss",
            f"has shape {loss.shape}, the membership {membership.n_entries} entries",
            "give one loss per entry, in the membership's order",
        )
    loss = np.where(np.isfinite(loss), loss, np.nan)
    point = membership.point_of_entry()
    order = np.lexsort((loss, point))
    finite = np.bincount(point, weights=np.isfinite(loss), minlength=membership.n_points)
    nf = finite.astype(np.int64)
    start = membership.offsets[:-1]
    ok = nf >= max(min_entries, 1)
    lo = order[np.where(ok, start + (nf - 1) // 2, 0)]
    hi = order[np.where(ok, start + nf // 2, 0)]
    median = np.where(ok, (loss[lo] + loss[hi]) / 2, np.nan)
    resid = loss - np.repeat(median, membership.counts())
    good = np.isfinite(resid)
    if not good.any():
        raise InputError("sample_loss", f"no point has {min_entries} finite sample losses")
    center = np.median(resid[good])
    scale = 1.4826 * float(np.median(np.abs(resid[good] - center)))
    if scale <= 0:
        scale = float(np.std(resid[good])) or 1.0
    return resid / scale


def measured_evidence(
    membership: Membership,
    sample_loss: object,
    options: SampleOptions | None = None,
    min_entries: int = MIN_ENTRIES,
) -> SampleEvidence:
    """:func:`.sample_evidence` on per-sample losses (ground ``measured``).

    :param sample_loss: float ``[n_entries]``, each entry's own mean loss per token.
    """
    z = measured_z(membership, sample_loss, min_entries)
    n = membership.n_entries
    per_entry = Membership(
        np.arange(n + 1, dtype=np.int64), membership.samples, membership.n_samples, None
    )
    return evidence_with_ground(per_entry, z, None, None, options, "measured")
