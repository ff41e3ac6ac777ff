"""Per-sample evidence: :func:`sample_evidence` (group testing over logged points).

Each logged point has a robust z of its detrended metric (``z_p = (x_p - m_p) / (1.4826
MAD_p)``, as :mod:`dflash_diag.spikes.detect` computes it; NaN: not usable).  A sample's
appearances are the distinct usable points it is in.  Under a shuffling sampler it comes
back in a different batch each epoch, so:

- a **poison** sample (one that raises its batch's loss) makes *every* batch it is in
  high: its lowest z is high;
- a clean sample that once shared a batch with a poison one, or was present during a
  level shift (an lr surge, a run of hard batches), is high in *that* point only: its
  other appearances are ordinary, and its lowest z is ordinary.

So the statistic is the lowest z over the appearances (``allow_low = a``: the
``(a + 1)``-th lowest, which lets ``a`` appearances be ordinary, e.g. after the model has
learned the sample), never a mean: a mean is carried by one very high point.  It is
tested against exchangeability of points (:mod:`.nulls`): ``p = C(n_ge, k) / C(n, k)``,
``n_ge`` the usable points with z at least the sample's lowest.  Samples seen in the same
points cannot be told apart (:mod:`.groups`): they share one p, and the Benjamini-Hochberg
q-values count each group once.

The screening columns are computed for every sample in a few passes over the entries;
the descriptive ones (median z and its interval, shares, excess) only for the
*candidates*, the testable samples with ``p <= options.detail_p`` or ``q <=
options.explain_q`` (so every sample named at an FDR up to it), and are NaN elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, partial
from typing import TYPE_CHECKING

import numpy as np

from ..errors import InputError
from .appearances import Appearances, appearances, point_array
from .decode import REASONS, DecodeOptions, constant, decode, entries_of, samples_entries
from .groups import group_of
from .membership import Membership
from .nulls import median_interval_ranks

if TYPE_CHECKING:
    import pandas as pd

GROUNDS = ("inferred", "measured")


@dataclass(frozen=True)
class SampleOptions:
    """How samples are tested.

    :param high_z: a z at least this is a "high" appearance (column ``high``; the test
        does not use it).  2.0: about the top 2% of a normal metric's points, so a
        clean sample seen 4 times is high in all of them with probability ~3e-7.
    :param min_appearances: fewer usable appearances than this: not tested (a sample
        seen once is inseparable from its batch mates).
    :param allow_low: appearances allowed to be ordinary (0: the minimum is tested).
    :param detail_p: candidates (descriptive columns filled): testable, ``p <=`` this
        or ``q <= explain_q``.
    :param interval: coverage aimed at by the median's order-statistic interval.
    :param explain_q: samples with ``q <=`` this explain their points away for the others
        (:mod:`.decode`); ``explain_rounds``: at most this many rounds (0: none).
    :param name_q: the FDR the samples are named at
        (:func:`~dflash_diag.samples.culprits.name_culprits`' default): after the rounds,
        only the samples at ``q <=`` this explain points away (:func:`.decode.settle`).
    """

    high_z: float = 2.0
    min_appearances: int = 2
    allow_low: int = 0
    detail_p: float = 0.01
    interval: float = 0.9
    explain_q: float = 0.25
    explain_rounds: int = 20
    name_q: float = 0.05

    def __post_init__(self) -> None:
        if not np.isfinite(self.high_z):
            raise InputError("high_z", f"is {self.high_z}", "give a finite z, e.g. 2.0")
        if self.min_appearances < 1 or self.allow_low < 0:
            raise InputError(
                "min_appearances",
                f"is {self.min_appearances} with allow_low {self.allow_low}",
                "give min_appearances >= 1 and allow_low >= 0",
            )
        if not (0.0 <= self.detail_p <= 1.0 and 0.0 < self.interval < 1.0):
            raise InputError("detail_p", "detail_p must be in [0, 1], interval in (0, 1)")
        if not 0.0 < self.name_q < 1.0:
            raise InputError("name_q", f"is {self.name_q}", "give a rate in (0, 1), e.g. 0.05")
        if not 0.0 <= self.explain_q < 1.0 or self.explain_rounds < 0:
            raise InputError(
                "explain_q",
                f"is {self.explain_q} with explain_rounds {self.explain_rounds}",
                "give explain_q in [0, 1) and explain_rounds >= 0",
            )


@dataclass(frozen=True, eq=False)
class SampleEvidence:
    """The evidence on every sample of the dataset.

    ``table`` has one row per sample (index: the dataset index), columns:

    - ``sample`` int64: dataset index;
    - ``group`` int64: its separable group (:func:`.separable_groups`; -1: no usable
      point); ``group_size`` int64: samples in that group (0 for -1);
    - ``appearances`` int64: distinct usable points holding it;
    - ``explained`` int64: of those, set aside because a named sample was there too
      (:mod:`.decode`); ``tested`` int64: the rest, the ``k`` of its test;
    - ``high`` int64: appearances with ``z >= options.high_z``;
    - ``min_z`` float64: lowest z over the appearances (NaN: none);
    - ``score`` float64: the tested statistic, the ``(allow_low + 1)``-th lowest z of the
      tested appearances (NaN: none);
    - ``n_ge`` int64: points of the null population with z at least ``score`` (0 if
      untested);
    - ``p`` float64 in (0, 1]: ``P(statistic >= score)`` under exchangeable points;
    - ``q`` float64: Benjamini-Hochberg q-value, each group counted once (NaN: untested);
    - ``testable`` bool, ``reason`` category (one of :data:`REASONS`);
    - candidates only (NaN elsewhere): ``median_z`` float64 and its distribution-free
      interval ``median_z_lo``/``median_z_hi`` with its exact ``median_coverage``;
      ``share`` float64: mean share of its points' tokens; ``excess`` float64: mean
      relative excess ``x / baseline - 1`` of its points; ``own_excess`` float64: the
      relative excess of its own tokens if it alone raised its points, the
      least-squares ``sum(s e) / sum(s^2)`` over appearances (``s`` share, ``e``
      excess), ``own_excess_se`` its standard error, ``own_excess_nats`` the same in
      nats per token (``e`` times the baseline loss; needs ``baseline``).

    :param made: the table, or what makes it when :attr:`table` is first read (its
        figures are then known without it: ``untested``).
    :param ground: ``inferred`` (from point-level z: group testing) or ``measured`` (from
        per-sample losses: :func:`.measured_evidence`).
    :param n_points: logged points; ``n_usable`` those with a finite z.
    :param n_tested: units tested (testable groups), the BH ``m``.
    :param n_null: points in the final null population (usable points holding no named
        sample); ``rounds``: explaining-away rounds run.
    :param untested: known without the table: no sample has enough appearances to be
        tested (each is in one point at most: a sorted-greedy epoch's), so none is.
    """

    made: pd.DataFrame | Callable[[], pd.DataFrame]
    ground: str
    options: SampleOptions
    n_points: int
    n_usable: int
    n_tested: int
    n_null: int
    rounds: int
    untested: bool = False

    @cached_property
    def table(self) -> pd.DataFrame:
        """One row per sample (the class docstring), made when first read if deferred."""
        import pandas as pd

        return self.made if isinstance(self.made, pd.DataFrame) else self.made()

    @property
    def method(self) -> str:
        """The method and its parameters, in one sentence."""
        o = self.options
        order = "lowest z" if o.allow_low == 0 else f"z number {o.allow_low + 1} from the bottom"
        if self.ground == "measured":
            return (
                f"each sample's own loss against its batch mates' and its kind's, {order} "
                f"over its batches (at least {o.min_appearances}), tested against its "
                f"kind's samples (exponential upper tail); Benjamini-Hochberg over "
                f"{self.n_tested} samples"
            )
        unit = "point" if self.ground == "inferred" else "entry (per-sample loss)"
        return (
            f"{order} over each sample's appearances (at least {o.min_appearances}), "
            f"tested against exchangeable {unit} z's (hypergeometric, exact); "
            f"Benjamini-Hochberg over {self.n_tested} separable groups; "
            f"{self.rounds} round(s) explaining away at q <= {o.explain_q}"
            + (f", then only the samples at q <= {o.name_q}" if self.rounds else "")
        )


def sample_evidence(
    membership: Membership,
    z: object,
    excess: object | None = None,
    baseline: object | None = None,
    options: SampleOptions | None = None,
) -> SampleEvidence:
    """Test every sample for making its points high (see the module docstring).

    :param z: float ``[n_points]``: robust z of each point's detrended metric; NaN or
        inf: not usable (e.g. inside an optimizer event that must be excluded).
    :param excess: optional float ``[n_points]``, ``x / baseline - 1``.
    :param baseline: optional float ``[n_points]``, the baseline loss (nats per token).

    >>> m = Membership.from_entries([0, 0, 1, 1, 2, 2], [0, 1, 0, 2, 0, 3])
    >>> ev = sample_evidence(m, [3.0, 2.5, 4.0])
    >>> row = ev.table.loc[0]  # in every point: p = C(3, 3) / C(3, 3)
    >>> int(row.appearances), float(row.min_z), float(row.p), str(row.reason)
    (3, 2.5, 1.0, '')
    >>> str(ev.table.loc[1, "reason"])
    'too few appearances'

    """
    return evidence_with_ground(membership, z, excess, baseline, options, "inferred")


def evidence_with_ground(
    membership: Membership,
    z: object,
    excess: object | None,
    baseline: object | None,
    options: SampleOptions | None,
    ground: str,
) -> SampleEvidence:
    """:func:`sample_evidence`, saying which ``ground`` (:data:`GROUNDS`) ``z`` rests on.

    When no sample can be tested (:func:`each_sample_once`, and a test needs two
    appearances or more) the table is made only when read (:attr:`SampleEvidence.
    table`): its figures are known without it (nothing tested, no round, every usable
    point in the null), and ``spikes`` reads none of its rows.
    """
    if ground not in GROUNDS:
        raise InputError("ground", f"is {ground!r}", f"choose from {', '.join(GROUNDS)}")
    opts = options or SampleOptions()
    n_points = membership.n_points
    zp = point_array(z, n_points, "z")
    # (checked now, as the table would check them; the table is made from these copies)
    ex, base = _optional(excess, n_points, "excess"), _optional(baseline, n_points, "baseline")
    if ground == "inferred" and untestable_once(opts) and each_sample_once(membership):
        return untested_evidence(membership, n_points, zp, ex, base, opts)
    return _evidence(membership, zp, ex, base, opts, ground)


def untestable_once(options: SampleOptions) -> bool:
    """Whether a sample seen once cannot be tested (a test needs two appearances)."""
    return max(options.min_appearances, options.allow_low + 1) >= 2


def untested_evidence(
    members: Membership | Callable[[], Membership],
    n_points: int,
    z: object,
    excess: object | None = None,
    baseline: object | None = None,
    options: SampleOptions | None = None,
) -> SampleEvidence:
    """The inferred evidence of a membership in which no sample is in two entries, when
    :func:`untestable_once`: nothing is tested, no round runs, every usable point is in
    the null; the table (and ``members``, if a function that makes the membership) is
    made when :attr:`SampleEvidence.table` is first read.

    :raises InputError: as :func:`sample_evidence` checks ``z``, ``excess``, ``baseline``.
    """
    opts = options or SampleOptions()
    zp = point_array(z, n_points, "z")
    ex, base = _optional(excess, n_points, "excess"), _optional(baseline, n_points, "baseline")
    usable = int(np.isfinite(zp).sum())
    make = partial(_table, members, zp, ex, base, opts, "inferred")
    return SampleEvidence(make, "inferred", opts, n_points, usable, 0, usable, 0, untested=True)


def each_sample_once(membership: Membership) -> bool:
    """Whether no sample is in two entries (so in two points) of ``membership``, read a
    chunk of entries at a time (:func:`~dflash_diag.arrays.none_twice`)."""
    from ..arrays import chunks, none_twice

    parts = (membership.samples[part] for part in chunks(membership.n_entries))
    return none_twice(parts, membership.n_samples)


def _table(
    members: Membership | Callable[[], Membership],
    zp: np.ndarray,
    excess: np.ndarray | None,
    baseline: np.ndarray | None,
    opts: SampleOptions,
    ground: str,
) -> pd.DataFrame:
    """The table of the evidence :func:`untested_evidence` defers."""
    membership = members if isinstance(members, Membership) else members()
    return _evidence(membership, zp, excess, baseline, opts, ground).table


def _evidence(
    membership: Membership,
    zp: np.ndarray,
    excess: np.ndarray | None,
    baseline: np.ndarray | None,
    opts: SampleOptions,
    ground: str,
) -> SampleEvidence:
    """The evidence with its table (:func:`evidence_with_ground`)."""
    import pandas as pd

    n_points = membership.n_points
    app = appearances(membership, zp)
    k = app.counts()
    lowest, score_rank = app.lowest(opts.allow_low, k)
    group, size = group_of(app, k, lowest)
    need = max(opts.min_appearances, opts.allow_low + 1)
    dec = DecodeOptions(opts.allow_low, need, opts.explain_q, opts.explain_rounds, opts.name_q)
    tested, q, n_tested, rounds = decode(membership, app, k, group, score_rank, dec)
    columns: dict[str, object] = {
        "sample": np.arange(membership.n_samples, dtype=np.int64),
        "group": group,
        "group_size": np.append(size, 0)[group],  # -1: the 0 appended
        "appearances": k,
        "explained": tested.explained,
        "tested": tested.k,
        "high": _high(membership, app, opts.high_z),
        "min_z": _z_at(app, lowest),
        "score": tested.score,
        "n_ge": tested.n_ge,
        "p": tested.p,
        "q": q,
        "testable": tested.reason == 0,
        "reason": pd.Categorical.from_codes(tested.reason, categories=list(REASONS)),
    }
    p = tested.p
    testable = tested.reason == 0
    cand = testable & ((p <= opts.detail_p) | (q <= opts.explain_q))
    columns.update(_details(membership, app, cand, excess, baseline, opts))
    # copy=False: a column a block (consolidating 20 columns of 10M rows copies them all)
    table = pd.DataFrame(columns, copy=False)
    n_null = int(tested.n_null)
    return SampleEvidence(table, ground, opts, n_points, app.n_usable, n_tested, n_null, rounds)


def _high(membership: Membership, app: Appearances, high_z: float) -> np.ndarray:
    """Appearances with ``z >= high_z`` per sample: over the entries of the high points
    only (a few percent of them)."""
    cut = np.searchsorted(app.z_sorted, high_z, side="left")
    high = membership.samples[entries_of(membership, app.point_of_rank[cut:])]
    return np.bincount(high, minlength=app.n_samples).astype(np.int64, copy=False)


def _z_at(app: Appearances, rank: np.ndarray) -> np.ndarray:
    """The z of each sample's given rank, NaN where the rank is ``n_usable`` (none):
    one look-up in the z's with a NaN appended."""
    return np.append(app.z_sorted, np.nan)[rank]


def _optional(values: object | None, n_points: int, name: str) -> np.ndarray | None:
    return None if values is None else point_array(values, n_points, name)


def _details(
    membership: Membership,
    app: Appearances,
    cand: np.ndarray,
    excess: np.ndarray | None,
    baseline: np.ndarray | None,
    opts: SampleOptions,
) -> dict[str, np.ndarray]:
    """The descriptive columns, filled for the candidate samples only.  A column no
    candidate fills is a read-only view of one NaN (:func:`.constant`: at 10M samples
    no memory, not 720 MB)."""
    n = membership.n_samples
    filled = ["median_z", "median_z_lo", "median_z_hi", "median_coverage", "share"]
    if excess is not None:
        filled += ["excess", "own_excess", "own_excess_se"]
        filled += ["own_excess_nats"] if baseline is not None else []
    names = ["median_z", "median_z_lo", "median_z_hi", "median_coverage", "share"]
    names += ["excess", "own_excess", "own_excess_se", "own_excess_nats"]
    cols = dict.fromkeys(names, constant(n, np.nan))
    entries = samples_entries(membership, app, np.flatnonzero(cand))
    if app.kept is not None:
        entries = entries[app.kept[entries]]
    if entries.size == 0:
        return cols
    cols.update({name: np.full(n, np.nan) for name in filled})
    point = np.searchsorted(membership.offsets, entries, side="right") - 1
    s, r = membership.samples[entries].astype(np.int64), app.rank_of_point[point]
    order = np.argsort(s * max(app.n_usable, 1) + r, kind="stable")
    s, r, point = s[order], r[order], point[order]
    ids, starts, kk = np.unique(s, return_index=True, return_counts=True)
    zs = app.z_sorted[r]
    cols["median_z"][ids] = (zs[starts + (kk - 1) // 2] + zs[starts + kk // 2]) / 2
    lo_rank, coverage = median_interval_ranks(kk, opts.interval)
    cols["median_z_lo"][ids] = zs[starts + lo_rank - 1]
    cols["median_z_hi"][ids] = zs[starts + kk - lo_rank]
    cols["median_coverage"][ids] = coverage
    share = membership.share_of(entries[order])
    cols["share"][ids] = np.add.reduceat(share, starts) / kk
    if excess is not None:
        _excess_columns(cols, ids, starts, kk, share, excess[point], baseline, point)
    return cols


def _excess_columns(
    cols: dict[str, np.ndarray],
    ids: np.ndarray,
    starts: np.ndarray,
    kk: np.ndarray,
    share: np.ndarray,
    e: np.ndarray,
    baseline: np.ndarray | None,
    point: np.ndarray,
) -> None:
    """``excess``, ``own_excess`` (+ se) and ``own_excess_nats`` of the candidates."""
    e = np.nan_to_num(e, nan=0.0)
    ss = np.add.reduceat(share * share, starts)
    own = np.add.reduceat(share * e, starts) / ss
    resid = e - share * np.repeat(own, kk)
    dof = np.maximum(kk - 1, 1)
    se = np.sqrt(np.add.reduceat(resid * resid, starts) / dof / ss)
    cols["excess"][ids] = np.add.reduceat(e, starts) / kk
    cols["own_excess"][ids] = own
    cols["own_excess_se"][ids] = np.where(kk >= 2, se, np.nan)
    if baseline is not None:
        d = np.nan_to_num(e * baseline[point], nan=0.0)
        cols["own_excess_nats"][ids] = np.add.reduceat(share * d, starts) / ss
