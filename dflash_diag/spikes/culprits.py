"""Which samples make the loss spike: the per-sample evidence of a run, lined up with its
spikes (:func:`sample_findings`, :func:`culprits_at`).

The logged points are lined up with the composition's micro-batches as attribution lines
them up (:func:`~dflash_diag.spikes.features.micro_points`: the metric's rank, the
points' windows), which makes the membership: which samples each point covers.  Each
point gets the z that is left once composition has had its say,

    z_p = (residual_p - predicted_p) / resid_scale

(the detrended metric minus what the composition model, fitted robustly on all the
points, predicts from the batch's features, over the model's robust residual scale), so
a sample of a hard *kind* (the longest, a hard category) is not named for what its
batch's features already explain; without a model (too few points), the detrended
residual over its robust scale.  :func:`dflash_diag.samples.sample_evidence` then tests
every sample (group testing: a sample whose batches are high wherever it goes), and
:func:`~dflash_diag.samples.name_culprits` names the samples, or the inseparable groups,
at the false-discovery rate ``fdr``.  The method, its null and its limits:
``docs/samples.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from ..data import Manifest, Replay
    from ..samples import Membership, SampleEvidence, SampleOptions

#: The false-discovery rate at which samples are named.
FDR = 0.05
#: A batch's samples whose median tested z is under this are ordinary elsewhere.
ORDINARY_Z = 2.0
#: Appearances allowed to be ordinary: a sample is judged on its second-lowest z, since
#: a corrupt sample is no worse than any other before the model has learned the rest.
ALLOW_LOW = 1


@dataclass(frozen=True)
class Culprit:
    """A sample (or an inseparable group) named as making its batches high.

    :param unit: ``sample`` or ``group`` (samples that always travel together).
    :param sample_id: the sample's id (the manifest's ``sample_id``; -1 for a group).
    :param members: the ids of its members (one for a sample).
    :param appearances: logged points holding it; ``high``: of those, with z >= 2.
    :param score: the z it was tested on (its second-lowest over its appearances).
    :param excess: mean relative rise of its points over their baseline (NaN: unknown).
    :param q: Benjamini-Hochberg q-value; ``ground``: ``inferred`` (group testing) or
        ``measured`` (its own losses, recorded).
    :param nats: on measured ground, its own loss over its batch mates' median, nats per
        token (median over its batches; NaN: inferred).
    :param here: on measured ground, what it added to this spike's logged loss, nats
        (its loss over its batch mates' median times its token share; NaN: inferred).
    """

    unit: str
    sample_id: int
    members: tuple[int, ...]
    appearances: int
    high: int
    score: float
    excess: float
    q: float
    ground: str = "inferred"
    nats: float = math.nan
    here: float = math.nan

    def describe(self) -> str:
        """``sample 1234: high in 3 of 4 of its batches (z >= 2; tested z 2.4), +31% over
        their baseline, q 0.001`` (a group: its members); on measured ground ``sample
        1234: its own loss is +4.6 nats a token over its batch mates' (high for its kind
        in 4 of 4 of its batches, measured), q 1e-09``."""
        who = (
            f"sample {self.sample_id}"
            if self.unit == "sample"
            else f"the group of {len(self.members)} samples {_ids(self.members)} (always together)"
        )
        if self.ground == "measured":
            here = f"; here it adds {self.here:+.2g} nats" if math.isfinite(self.here) else ""
            return (
                f"{who}: its own loss is {self.nats:+.2g} nats a token over its batch "
                f"mates' (high for its kind in {self.high} of {self.appearances} of its "
                f"batches, measured){here}, q {self.q:.2g}"
            )
        rise = f", {self.excess:+.0%} over their baseline" if math.isfinite(self.excess) else ""
        return (
            f"{who}: high in {self.high} of {self.appearances} of its batches (tested z "
            f"{self.score:.2g}){rise}, q {self.q:.2g}"
        )


def _ids(ids: tuple[int, ...], most: int = 5) -> str:
    shown = ", ".join(str(i) for i in ids[:most])
    return shown + (f" (+{len(ids) - most} more)" if len(ids) > most else "")


@dataclass(frozen=True, eq=False)
class SampleFindings:
    """The per-sample evidence of a run and what it names.

    :param evidence: every sample's evidence (:class:`~dflash_diag.samples.SampleEvidence`).
    :param named: :func:`~dflash_diag.samples.name_culprits`' table at :data:`FDR`.
    :param members: the samples of each logged point (:attr:`membership`), or what
        makes them when first read.
    :param ids: sample ids by dataset index (None: the indices are the ids).
    :param basis: what the points' z is, in words.
    :param separable: some samples can be told apart (False: every unit is a fixed
        batch, as sorted-greedy makes them).
    :param added: on measured ground, what each named sample added to each logged point
        it is in: ``{(point, dataset index): nats}``, its loss over its batch mates'
        median times its token share of the point (empty: inferred ground).
    """

    evidence: SampleEvidence
    named: pd.DataFrame
    members: Membership | Callable[[], Membership]
    ids: np.ndarray | None
    basis: str
    separable: bool
    added: dict[tuple[int, int], float] = field(default_factory=dict)

    @cached_property
    def membership(self) -> Membership:
        """The samples of each logged point (made when first read if deferred)."""
        return self.members() if callable(self.members) else self.members

    def sample_id(self, index: int) -> int:
        return int(index) if self.ids is None else int(self.ids[index])

    def note(self) -> str | None:
        """What a reader must know about naming samples here (None: nothing)."""
        if self.separable:
            return None
        if self.once():
            return (
                "each sample is in one logged batch only (the batches known cover one pass "
                "over the data): the batch, not a sample, is the unit"
            )
        return "batches are fixed groups: the batch, not a sample, is the unit"

    def once(self) -> bool:
        """No sample is in two of the logged points: nothing tells a sample from its
        batch mates, whatever the sampler (one epoch replayed, or logged)."""
        k = self.evidence.table["appearances"]
        return len(k) == 0 or int(k.max()) <= 1


@dataclass(frozen=True, eq=False)
class Measured:
    """Per-sample losses a recorder measured in the training forward.

    :param sample_loss: float64 per entry of the replay's ``sample_ids``: the sample's
        mean loss per target token in that micro-batch (NaN: not measured).
    :param kinds: int codes per dataset index, the kind a sample is compared within (the
        manifest's categories); None: one kind.
    """

    sample_loss: np.ndarray
    kinds: np.ndarray | None = None

    @classmethod
    def of(cls, sample_loss: np.ndarray, manifest: Manifest | None) -> Measured:
        """The losses, each sample compared within its manifest category (one kind
        without a manifest or categories)."""
        import numpy as np

        cats = None if manifest is None else manifest.categories
        return cls(sample_loss, None if cats is None else np.asarray(cats, dtype=np.int64))


#: What the points' z rests on when the samples are tested on their own losses.
MEASURED_BASIS = "each sample's own loss, measured in the training forward by the recorder"


def sample_findings(
    replay: Replay,
    point_index: np.ndarray,
    n_points: int,
    z: np.ndarray,
    excess: np.ndarray,
    ids: np.ndarray | None,
    basis: str,
    measured: Measured | None = None,
) -> SampleFindings:
    """Test every sample of ``replay`` over the logged points, or, with ``measured``, on
    its own losses (:func:`~dflash_diag.samples.measured_evidence`, over the
    micro-batches the logged points cover).

    :param point_index: the logged point of each micro-batch (-1: none), as
        :func:`~dflash_diag.spikes.features.micro_points` gives it.
    :param z: float64 ``[n_points]``: each point's z (module docstring).
    :param excess: float64 ``[n_points]``: ``x / baseline - 1``.
    """
    import numpy as np

    from ..samples import (
        Membership,
        SampleOptions,
        name_culprits,
        sample_evidence,
        untestable_once,
        untested_evidence,
    )

    counts = np.diff(replay.offsets)
    pidx: np.ndarray = np.asarray(point_index, dtype=np.int32 if n_points < 2**31 else np.int64)
    options = SampleOptions(allow_low=ALLOW_LOW, name_q=FDR)  # (settled at the rate named)

    @cache
    def members() -> Membership:
        point = np.repeat(pidx, counts)
        n = len(replay.lengths)
        return Membership.from_entries(
            point, replay.sample_ids, n, n_points, sample_tokens=replay.lengths
        )

    if measured is None and untestable_once(options) and covered_once(replay, pidx):
        # no sample can be tested: the membership and the table are made when read
        evidence = untested_evidence(members, n_points, z, excess, options=options)
        named = name_culprits(evidence, FDR)
        # (a group is then the samples of one usable point: its entries, none repeated)
        hit = pidx >= 0
        size = np.bincount(pidx[hit], weights=counts[hit], minlength=n_points)
        apart = bool(((size == 1) & np.isfinite(np.asarray(z, dtype=np.float64))).any())
        return SampleFindings(evidence, named, members, ids, basis, apart)
    membership = members()
    added: dict[tuple[int, int], float] = {}
    if measured is not None:
        point = np.repeat(pidx, counts)
        evidence, named, added = _measured(replay, point, n_points, measured, options)
        basis = MEASURED_BASIS
    else:
        evidence = sample_evidence(membership, z, excess=excess, options=options)
        named = name_culprits(evidence, FDR)
    apart = separable(evidence, membership, z)
    return SampleFindings(evidence, named, membership, ids, basis, apart, added)


def covered_once(replay: Replay, point_index: np.ndarray) -> bool:
    """Whether no sample is in two of the micro-batches some logged point covers
    (``point_index`` >= 0), read a chunk of micro-batches at a time
    (:func:`~dflash_diag.arrays.none_twice`)."""
    from ..arrays import none_twice

    return none_twice(_covered_ids(replay, point_index), len(replay.lengths))


def _covered_ids(replay: Replay, point_index: np.ndarray) -> Iterator[np.ndarray]:
    """The sample ids of the covered micro-batches, a chunk of micro-batches at a time."""
    import numpy as np

    from ..arrays import group_chunks
    from ..schedule.base import segment_positions

    offsets = replay.offsets
    for a, b in group_chunks(offsets):
        hit = np.flatnonzero(point_index[a:b] >= 0) + a
        if hit.size == b - a:  # (every row: one run of entries)
            yield replay.sample_ids[offsets[a] : offsets[b]]
        elif hit.size:
            yield replay.sample_ids[segment_positions(offsets, hit)]


def separable(evidence: SampleEvidence, membership: Membership, z: np.ndarray) -> bool:
    """Whether some sample seen in a usable point (finite ``z``) is a group of its own.
    Untested (each sample in one point at most) a group is the samples of one usable
    point: then whether a usable point holds one sample, the table not read."""
    import numpy as np

    if evidence.untested:
        m = membership
        return bool(((m.counts() == 1) & np.isfinite(np.asarray(z, dtype=np.float64))).any())
    t = evidence.table
    seen = t["group"].to_numpy() >= 0
    return bool((t["group_size"].to_numpy()[seen] == 1).any())


def _measured(
    replay: Replay,
    point: np.ndarray,
    n_points: int,
    measured: Measured,
    options: SampleOptions,
) -> tuple[SampleEvidence, pd.DataFrame, dict[tuple[int, int], float]]:
    """The measured evidence over the micro-batches (the losses of entries no logged
    point covers left out), the samples it names, and what each added to its points:
    the residual over the batch mates computed once for both."""
    import numpy as np

    from ..samples import batch_residual, measured_evidence, name_culprits

    micro = _micro(replay)
    loss = np.where(point >= 0, measured.sample_loss, np.nan)
    residual = batch_residual(micro, loss)
    evidence = measured_evidence(micro, loss, options, kinds=measured.kinds, residual=residual)
    named = name_culprits(evidence, FDR)
    added = {} if named.empty else _added(micro, point, n_points, residual, named)
    return evidence, named, added


def _micro(replay: Replay) -> Membership:
    """The replay's micro-batches as a membership (a point each), with their tokens."""
    import numpy as np

    from ..samples import Membership

    offsets = np.asarray(replay.offsets, dtype=np.int64)
    lengths = replay.lengths
    return Membership(offsets, replay.sample_ids, len(lengths), sample_tokens=lengths)


def _added(
    micro: Membership,
    point: np.ndarray,
    n_points: int,
    residual: np.ndarray,
    named: pd.DataFrame,
) -> dict[tuple[int, int], float]:
    """:attr:`SampleFindings.added` for the named samples: each entry's ``residual``
    (its loss over its micro-batch's median) times its share of its logged point's
    tokens, summed per (point, sample); a pass over the entries, the rest over the
    named ones' few."""
    import numpy as np

    sample = micro.samples
    covered = point >= 0
    at = np.flatnonzero(covered)
    weights = micro.tokens_at(at).astype(np.float64)
    totals = np.bincount(point[at], weights=weights, minlength=n_points)
    del at, weights
    ids = np.zeros(micro.n_samples, dtype=bool)
    ids[[m for members in named["members"] for m in members]] = True
    mine = np.flatnonzero(ids[sample] & covered & np.isfinite(residual))
    tokens = micro.tokens_at(mine).astype(np.float64)
    out: dict[tuple[int, int], float] = {}
    for e, tok in zip(mine.tolist(), tokens.tolist(), strict=True):
        key = (int(point[e]), int(sample[e]))
        share = tok / totals[point[e]] if totals[point[e]] > 0 else 0.0
        out[key] = out.get(key, 0.0) + float(residual[e] * share)
    return out


def culprits_at(findings: SampleFindings, point: int) -> tuple[Culprit, ...]:
    """The named units with a member in logged point ``point``."""
    import numpy as np

    if findings.named.empty:  # (none named: none here, the membership not read)
        return ()
    m = findings.membership
    here = set(m.samples[m.offsets[point] : m.offsets[point + 1]].tolist())
    out = []
    for row in findings.named.itertuples(index=False):
        members = tuple(int(x) for x in row.members)
        if not here.intersection(members):
            continue
        out.append(
            Culprit(
                unit=str(row.unit),
                sample_id=findings.sample_id(members[0]) if row.unit == "sample" else -1,
                members=tuple(findings.sample_id(x) for x in members),
                appearances=int(row.appearances),
                high=int(row.high),
                score=float(row.score),
                excess=float(row.excess) if np.isfinite(row.excess) else math.nan,
                q=float(row.q),
                ground=str(row.ground),
                nats=float(row.own_excess_nats),
                here=_here(findings, point, members),
            )
        )
    return tuple(out)


def _here(findings: SampleFindings, point: int, members: tuple[int, ...]) -> float:
    """What the members added to ``point`` (:attr:`SampleFindings.added`; NaN: none)."""
    got = [findings.added[(point, m)] for m in members if (point, m) in findings.added]
    return float(sum(got)) if got else math.nan


def ordinary_elsewhere(findings: SampleFindings, point: int) -> str | None:
    """``its 8 samples are ordinary in their other batches (...)`` when every sample of
    the point can be told apart (each in batches of its own) and was tested, the
    samples' median tested z is under :data:`ORDINARY_Z`, and none is named or a
    candidate (``q <=`` the evidence's ``explain_q``): one
    sample high wherever it goes, named or not, is no ordinary batch.  None otherwise
    (fixed batches have no "other batches")."""
    import numpy as np

    if findings.evidence.untested:  # (none is testable: the membership not read)
        return None
    m = findings.membership
    here = m.samples[m.offsets[point] : m.offsets[point + 1]]
    if not here.size:
        return None
    t = findings.evidence.table
    alone = t["group_size"].to_numpy()[here] == 1
    if not (t["testable"].to_numpy()[here].all() and alone.all()):
        return None
    median = float(np.median(t["score"].to_numpy()[here]))
    q = t["q"].to_numpy()[here]
    near = findings.evidence.options.explain_q
    if not median < ORDINARY_Z or bool((q <= near).any()):
        return None
    return (
        f"its {here.size} samples are ordinary in their other batches (median tested z "
        f"{median:.2g}; none is named, every q above {near:g})"
    )


def point_z(
    residual: np.ndarray, predicted: np.ndarray, scale: float, use_model: bool
) -> tuple[np.ndarray, str]:
    """Each point's z for the sample tests and its basis in words (module docstring)."""
    import numpy as np

    r = np.asarray(residual, dtype=np.float64)
    if use_model and math.isfinite(scale) and scale > 0:
        return (r - np.asarray(predicted, dtype=np.float64)) / scale, (
            "the loss left once the composition model has predicted the batch"
        )
    finite = r[np.isfinite(r)]
    if not finite.size:
        return np.full(r.shape, np.nan), "no finite residual"
    med = float(np.median(finite))
    mad = 1.4826 * float(np.median(np.abs(finite - med)))
    if not mad > 0:
        return np.full(r.shape, np.nan), "no spread in the residual"
    return (r - med) / mad, "the detrended loss"
