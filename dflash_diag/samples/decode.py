"""Group-testing decoding: test every sample, then explain points away by the named ones.

**First pass.**  Each sample's statistic is the ``(a + 1)``-th lowest z of its ``k``
appearances, tested against exchangeable points (:mod:`.nulls`).

**Explaining away.**  The poison's own points fatten the upper tail of the null
(``n_ge``): with 10 poison samples seen 4 times in 250 points, 40 points are high, and
every p is too large to survive 2,000 tests.  And a clean sample that shared two of its
four batches with poison samples owes them two high points; counted as chance, they make
its other two look like a pattern.  So, as group-testing decoders do once a defective is
found, a set ``S`` of named samples explains its points away: every sample ``i`` is
tested again on its points holding no member of ``S`` outside its own group, against the
usable points holding no member of ``S`` outside its group,

    p_i = P(statistic >= score_i)  under exchangeability of those points.

For a sample outside ``S`` that is the points of ``S`` removed; for a member, the other
members' points (its own stay: they are its evidence; a point it shares with another
member is nobody's).  ``S`` grows from the strongest: each round, of the candidates
(``q <= explain_q``, not yet in ``S``), those that are the strongest candidate in every
point they are in join (:func:`strongest`), and all tests are redone.  The rounds stop
when no candidate is left, or after ``explain_rounds``.  A sample left with fewer than
``min_appearances`` points is not tested (reason ``explained``).  ``S`` only conditions
the tests: a member is named only if its own q, so computed, is small.

**Settling.**  A false member costs the others its points, and the points of clean
samples are the moderately high ones, so false members make each other look rarer.  The
rounds grow ``S`` wide (``q <= explain_q``, for power); then :func:`settle` lets only the
named explain away: ``S`` becomes the samples at ``q <= name_q`` (the FDR they are named
at) and every test is redone, while ``S`` changes.  The named samples are then the ones
the tests name given the named alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..arrays import unique_values
from .appearances import Appearances
from .layout import sample_entries
from .membership import Membership
from .nulls import bh_below, bh_qvalues_keyed, order_pvalue

#: Why a sample is not tested (``reason``; "" when it is).
REASONS = ("", "not seen", "no usable point", "too few appearances", "explained")


@dataclass(frozen=True, eq=False)
class Tested:
    """One pass of tests, arrays over samples.

    :param k: appearances tested; ``explained``: appearances set aside (named samples').
    :param score_rank: int64, the rank among the usable points of the statistic's point
        (``n_usable``: none); ``score``: its z (NaN: none).
    :param n_ge: points of the null population with z at least the score; ``p``: the
        p-value (NaN: untested).
    :param reason: int8 index into :data:`REASONS`; ``n_null``: the null population.
    :param own: bool, the samples tested against a null of their own (not ``n_null``
        points: named members, :func:`explain_away`); None: none.
    """

    k: np.ndarray
    explained: np.ndarray
    score_rank: np.ndarray
    score: np.ndarray
    n_ge: np.ndarray
    p: np.ndarray
    reason: np.ndarray
    n_null: int
    own: np.ndarray | None = None


def first_pass(
    membership: Membership,
    app: Appearances,
    k: np.ndarray,
    score_rank: np.ndarray,
    allow_low: int,
    need: int,
) -> Tested:
    """Every sample tested on all its ``k`` usable appearances."""
    seen = k > 0
    if app.kept is not None and app.layout is not None:
        seen = app.layout.seen
    elif app.kept is not None:  # (a mask put in place: no count per sample)
        seen = np.zeros(membership.n_samples, dtype=bool)
        seen[membership.samples] = True
    reason = np.zeros(membership.n_samples, dtype=np.int8)
    reason[k < need] = 3
    reason[(k == 0) & seen] = 2
    reason[~seen] = 1
    return pvalues(app, k, constant(k.size, 0), score_rank, reason, None, allow_low)


def constant(n: int, value: float | int) -> np.ndarray:
    """``n`` copies of ``value`` (int64 for an int, else float64) in a read-only view of
    one element: a per-sample column that every sample holds alike costs no memory."""
    dtype = np.int64 if isinstance(value, int) else np.float64
    return np.broadcast_to(np.array(value, dtype=dtype), (n,))


def pvalues(
    app: Appearances,
    k: np.ndarray,
    explained: np.ndarray,
    score_rank: np.ndarray,
    reason: np.ndarray,
    held_rank: np.ndarray | None,
    allow_low: int,
) -> Tested:
    """Test the samples with ``reason == 0`` against the usable points whose ranks are
    not in ``held_rank``.  ``n_ge`` is a look-up, not a search: the points not held at or
    above the first rank holding the score's value (ties counted in)."""
    n = app.n_usable
    kept = np.ones(n, dtype=np.int64)
    if held_rank is not None:
        kept[held_rank] = 0
    at_or_above = np.append(np.cumsum(kept[::-1])[::-1], 0)
    tie_start = np.append(np.searchsorted(app.z_sorted, app.z_sorted, side="left"), n)
    n_null = int(at_or_above[0])
    test = reason == 0
    if not test.any():  # (e.g. a sorted-greedy epoch: every sample seen once)
        score = _scores(app, score_rank)
        nan = constant(k.size, np.nan)
        return Tested(k, explained, score_rank, score, constant(k.size, 0), nan, reason, n_null)
    # per rank (n: none) the score and the null points reaching it: one look-up a sample
    score = np.append(app.z_sorted, np.nan)[score_rank]
    n_ge = at_or_above[tie_start][score_rank]
    n_ge[~test] = 0
    if test.all():
        p = order_pvalue(k, n_ge, n_null, allow_low)
    else:
        idx = np.flatnonzero(test)
        p = np.full(k.shape, np.nan)
        p[idx] = order_pvalue(k[idx], n_ge[idx], n_null, allow_low)
    return Tested(k, explained, score_rank, score, n_ge, p, reason, n_null)


def _scores(app: Appearances, score_rank: np.ndarray) -> np.ndarray:
    """The z at each sample's score rank (NaN: ``n_usable``, none), one read-only NaN
    when no sample has a score."""
    if not bool((score_rank < app.n_usable).any()):
        return constant(score_rank.size, np.nan)
    return np.append(app.z_sorted, np.nan)[score_rank]


def singletons(group: np.ndarray) -> bool:
    """Whether every sample is a group of its own and in some point: numbered by first
    member, ``group`` is then ``0 .. n - 1``, and a group's p or q is its sample's."""
    return bool(group.size) and int(group.max()) + 1 == group.size and int(group.min()) == 0


def _group_p(p: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    idx = np.flatnonzero(np.isfinite(p))
    n_groups = int(group.max()) + 1 if group.size else 0
    p_group = np.full(n_groups, np.nan)
    p_group[group[idx]] = p[idx]
    return p_group, idx


def group_q(tested: Tested, group: np.ndarray, n_usable: int) -> tuple[np.ndarray, int]:
    """BH q-values with each group counted once (members share their p), and ``m``.

    A p is a function of ``(k, n_ge)`` over the ``n_null`` points (but for the ``own``
    samples), so BH sorts the distinct pairs only (:func:`.bh_qvalues_keyed`).
    """
    p = tested.p
    width = n_usable + 1
    key = tested.k.astype(np.int64)  # (in place: one array, not three)
    key *= width
    key += tested.n_ge
    if tested.own is not None:
        key[tested.own] = -1
    n_keys = (int(tested.k.max(initial=0)) + 1) * width
    if singletons(group):  # (no gather into groups and back)
        return bh_qvalues_keyed(p, key, n_keys), int(np.isfinite(p).sum())
    p_group, idx = _group_p(p, group)
    key_group = np.full(p_group.shape, -1, dtype=np.int64)
    key_group[group[idx]] = key[idx]  # the same member as p_group's
    q_group = bh_qvalues_keyed(p_group, key_group, n_keys)
    q = np.full(p.shape, np.nan)
    q[idx] = q_group[group[idx]]
    return q, int(np.isfinite(p_group).sum())


def group_q_below(p: np.ndarray, group: np.ndarray, level: float) -> np.ndarray:
    """``q <= level`` per sample, as :func:`group_q` would say, sorting only ``p <= level``."""
    if singletons(group):
        return bh_below(p, level)
    p_group, idx = _group_p(p, group)
    out = np.zeros(p.shape, dtype=bool)
    out[idx] = bh_below(p_group, level)[group[idx]]
    return out


def held_points(membership: Membership, entries: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Named groups per point, int64 ``[n_points]``, from the named samples' entries."""
    point = np.searchsorted(membership.offsets, entries, side="right") - 1
    width = int(group.max()) + 1
    pairs = unique_values(point * width + group[membership.samples[entries]])
    return np.bincount(pairs // width, minlength=membership.n_points)


def samples_entries(membership: Membership, app: Appearances, ids: np.ndarray) -> np.ndarray:
    """The entries of the samples ``ids`` (distinct), int64 ascending: from the layout's
    columns for a few samples, else by a pass over every entry
    (:func:`.membership.entries_with`)."""
    return sample_entries(membership.samples, ids, membership.n_samples, app.layout)


def entries_of(membership: Membership, points: np.ndarray) -> np.ndarray:
    """The entry indices of the given points, int64, point by point."""
    starts = membership.offsets[points]
    lengths = membership.offsets[points + 1] - starts
    first = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return first + np.arange(int(lengths.sum()), dtype=np.int64)


def explain_away(
    membership: Membership,
    app: Appearances,
    first: Tested,
    named: np.ndarray,
    named_entries: np.ndarray,
    group: np.ndarray,
    allow_low: int,
    need: int,
) -> Tested:
    """Every sample tested again given the named set (see the module docstring);
    ``named_entries``: the entries of the named samples."""
    n_held = held_points(membership, named_entries, group)
    held = np.flatnonzero(n_held > 0)
    held_rank = app.rank_of_point[held]
    held_rank = held_rank[held_rank >= 0]
    # a point is lost to a sample when it holds a named group other than the sample's;
    # only the entries of held points can be lost (few: no pass over all entries)
    entries = entries_of(membership, held)
    sample = membership.samples[entries]
    lost = entries[np.repeat(n_held[held], membership.counts()[held]) > named[sample]]
    touched = np.zeros(membership.n_samples, dtype=bool)
    touched[membership.samples[lost]] = True
    touched |= named
    touched &= first.reason == 0
    ids = np.flatnonzero(touched)  # (few: their figures put in place in copies)
    k_ids, rank_ids, at_least = _retest(membership, app, ids, lost, allow_low)
    k, score_rank = first.k.copy(), first.score_rank.copy()
    k[ids], score_rank[ids] = k_ids, rank_ids
    reason = first.reason.copy()
    reason[ids[k_ids < need]] = REASONS.index("explained")
    again = pvalues(app, k, first.k - k, score_rank, reason, held_rank, allow_low)
    own = named & (reason == 0)
    if own.any():
        # a member's own points are in its null population too (a member is touched)
        n_own = again.n_null + k[own]
        n_ge = again.n_ge[own] + at_least[np.searchsorted(ids, np.flatnonzero(own))]
        again.n_ge[own], again.p[own] = n_ge, order_pvalue(k[own], n_ge, n_own, allow_low)
    return replace(again, own=own)


def _retest(
    membership: Membership,
    app: Appearances,
    ids: np.ndarray,
    lost: np.ndarray,
    allow_low: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``k``, the score's rank and how many kept points reach the score, of the samples
    ``ids`` (ascending) over their usable points not ``lost`` (entry indices); int64
    each, aligned with ``ids`` (the samples renumbered ``0 .. len(ids) - 1``: no array
    as long as the dataset)."""
    idx = samples_entries(membership, app, ids)
    idx = idx[~np.isin(idx, lost)]
    rank = app.rank_of_point[np.searchsorted(membership.offsets, idx, side="right") - 1]
    idx, rank = idx[rank >= 0], rank[rank >= 0]
    local = np.searchsorted(ids, membership.samples[idx])
    sub = replace(app, sample=local, rank=rank, kept=None, layout=None, n_samples=ids.size)
    _, score_rank = sub.lowest(allow_low)
    z = np.append(app.z_sorted, np.inf)  # rank n_usable: no score
    reach = (z[sub.rank] >= z[score_rank[sub.sample]]).astype(np.float64)
    at_least = np.bincount(sub.sample, weights=reach, minlength=ids.size)
    return sub.counts(), score_rank, at_least.astype(np.int64)


def decode(
    membership: Membership,
    app: Appearances,
    k: np.ndarray,
    group: np.ndarray,
    score_rank: np.ndarray,
    opts: DecodeOptions,
) -> tuple[Tested, np.ndarray, int, int]:
    """First pass, then explaining away while candidates remain.

    :param k: appearances per sample (``app.counts()``).
    :returns: the final tests, their q-values, the units tested and the rounds run.
    """
    first = first_pass(membership, app, k, score_rank, opts.allow_low, opts.need)
    tested = first
    named = np.zeros(membership.n_samples, dtype=bool)
    named_entries = np.zeros(0, dtype=np.int64)
    rounds = 0
    if not bool((first.reason == 0).any()):  # nothing tested: no q, no round
        return first, constant(k.size, np.nan), 0, 0
    while rounds < opts.explain_rounds:
        candidates = group_q_below(tested.p, group, opts.explain_q) & ~named
        candidates &= tested.reason == 0
        if not candidates.any():
            break
        new, entries = strongest(membership, app, candidates, tested)
        named |= new
        # the entries of the newly named are among the candidates': no pass over all
        named_entries = np.union1d(named_entries, entries[new[membership.samples[entries]]])
        tested = explain_away(
            membership, app, first, named, named_entries, group, opts.allow_low, opts.need
        )
        rounds += 1
    if rounds:
        tested = settle(membership, app, first, tested, group, opts)
    q, m = group_q(tested, group, app.n_usable)
    return tested, q, m, rounds


def settle(
    membership: Membership,
    app: Appearances,
    first: Tested,
    tested: Tested,
    group: np.ndarray,
    opts: DecodeOptions,
) -> Tested:
    """The tests redone with only the named explaining away, until the named are what
    the tests name: ``S`` = the samples with ``q <= opts.name_q`` (the FDR they are named
    at), all tests redone given ``S``, again while ``S`` changes (at most
    ``opts.explain_rounds`` times; a set seen before ends it with the samples named
    both times, tested once more).

    The rounds before grow ``S`` from every candidate at ``q <= explain_q``, and a
    candidate that is not a culprit takes its points out of the others' null
    populations: the points of clean samples are the moderately high ones, so each such
    member makes the others' scores rarer, and theirs makes its own; the q-values drift
    below the FDR together.  Tested given the named only, a sample must stand against
    the points of every sample not named."""
    named = None
    seen: set[bytes] = set()
    for _ in range(max(opts.explain_rounds, 1)):
        q, _ = group_q(tested, group, app.n_usable)
        now = np.isfinite(q) & (q <= opts.name_q)
        if named is not None and np.array_equal(now, named):
            return tested
        last = now.tobytes() in seen
        if last and named is not None:
            now &= named
        seen.add(now.tobytes())
        named = now
        if not named.any():  # (nothing named explains anything: the first pass)
            return first
        entries = samples_entries(membership, app, np.flatnonzero(named))
        tested = explain_away(
            membership, app, first, named, entries, group, opts.allow_low, opts.need
        )
        if last:
            break
    return tested


def strongest(
    membership: Membership, app: Appearances, candidates: np.ndarray, tested: Tested
) -> tuple[np.ndarray, np.ndarray]:
    """The candidates that are the strongest candidate in every usable point they are in
    (bool ``[n_samples]``), and the entries of all candidates (int64, ascending).

    Strength: smaller p, then higher score; equally strong candidates (the members of a
    group, or ties) do not beat each other, so the choice never depends on the labels.
    The very strongest are always among them.
    """
    ids = np.flatnonzero(candidates)
    p, score = tested.p[ids], tested.score[ids]
    order = np.lexsort((-score, p))
    p, score = p[order], score[order]
    new_value = np.concatenate([[True], (p[1:] != p[:-1]) | (score[1:] != score[:-1])])
    strength = np.full(membership.n_samples, ids.size, dtype=np.int64)
    strength[ids[order]] = np.cumsum(new_value) - 1
    every = samples_entries(membership, app, ids)
    point = np.searchsorted(membership.offsets, every, side="right") - 1
    usable = app.rank_of_point[point] >= 0
    entries, point = every[usable], point[usable]
    mine = strength[membership.samples[entries]]
    best = np.full(membership.n_points, ids.size, dtype=np.int64)
    np.minimum.at(best, point, mine)
    beaten = np.zeros(membership.n_samples, dtype=bool)
    beaten[membership.samples[entries[best[point] < mine]]] = True
    return candidates & ~beaten, every


@dataclass(frozen=True)
class DecodeOptions:
    """What :func:`decode` needs of :class:`.SampleOptions`."""

    allow_low: int
    need: int
    explain_q: float
    explain_rounds: int
    name_q: float = 0.05
