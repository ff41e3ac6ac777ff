"""Evidence on measured ground: per-sample losses logged by a recorder.

When the recorder logged each sample's own loss in each micro-batch (``sample_loss``,
aligned with ``Membership.samples``), nothing has to be inferred from batch means.  Four
steps, each robust (medians and MADs, so the poison cannot set its own yardstick):

1. **Against its batch mates.**  ``r_e = loss_e - median(losses of its micro-batch)``
   (nats per token).  A level shift or an lr surge raises a whole micro-batch and cancels
   out; a batch with fewer than :data:`MIN_ENTRIES` finite losses gives no ``r``.
2. **Against its own kind.**  Samples differ in how hard they are by kind (the manifest's
   category), by length (a short sample has less context a token) and by when (the gap
   between kinds opens as the model learns).  So ``r`` is compared with the entries of
   the same cell, ``u_e = (r_e - median_cell(r)) / s_kind``: the cell is (kind,
   half-octave of length, one of :data:`WINDOWS` stretches of the run); a cell with
   fewer than :data:`MIN_CELL` entries falls back to (kind, stretch), then to the kind;
   ``s_kind`` is ``1.4826 MAD`` of ``r - median_cell`` over the kind's entries.
3. **The sample's statistic.**  ``t_i``: the ``(allow_low + 1)``-th lowest ``u`` over
   its finite entries (as on inferred ground: every batch but ``allow_low`` high).
   Within its kind, ``z_i = (t_i - median_kind(t)) / (1.4826 MAD_kind(t))`` (a kind of
   fewer than :data:`MIN_KIND` testable samples is pooled with the others).
4. **The null, from the clean samples' own distribution.**  Samples are not exchangeable
   entries: a clean sample can be persistently hard, so a test against shuffled entries
   would name every hard sample.  The null is the kind's distribution of ``z``; its
   upper tail above the 90th percentile ``z_0`` is taken as exponential (peaks over a
   threshold, shape 0), its scale from the median excess, ``b = median(z - z_0 | z >
   z_0) / ln 2`` (robust: a few poison samples barely move a median), so

       p_i = 0.1 exp(-(z_i - z_0) / b)    for z_i > z_0,
       p_i = #{j of the kind: z_j >= z_i} / n_kind    otherwise,

   and Benjamini-Hochberg q-values over all testable samples.  The limit: a tail heavier
   than exponential (a kind of a few very odd clean samples) makes ``p`` too small at
   the extreme; the clean real runs of ``tests/data/trainer_runs`` fit a shape near 0
   or below (``docs/samples.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..arrays import chunks, unique_values
from ..errors import InputError
from .evidence import REASONS, SampleEvidence, SampleOptions
from .layout import DENSE_FROM, windows
from .membership import Membership
from .nulls import bh_qvalues

if TYPE_CHECKING:
    import pandas as pd

#: Micro-batches with fewer finite sample losses than this give their entries no ``r``
#: (a median of one or two losses is the loss itself).
MIN_ENTRIES = 3
#: Stretches of the run a kind's entries are compared within.
WINDOWS = 10
#: Entries a (kind, length, stretch) cell needs before its median is used.
MIN_CELL = 30
#: Testable samples a kind needs for a null of its own.
MIN_KIND = 50
#: The share of a kind's samples whose tail is modelled (above its 90th percentile).
TAIL = 0.1
#: A kind whose tail starts this many pooled tail scales beyond the pooled tail's start
#: has its tail fitted to its samples short of that fence (:func:`_tail_pvalues`).
FENCE = 10.0


def measured_z(
    membership: Membership, sample_loss: object, min_entries: int = MIN_ENTRIES
) -> np.ndarray:
    """Each entry's loss against its micro-batch's median, in robust z (step 1 over one
    run-wide ``1.4826 MAD``), float64 ``[n_entries]``.

    NaN where the loss is not finite or the point has fewer than ``min_entries`` finite
    losses.

    >>> m = Membership.from_entries([0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2])
    >>> measured_z(m, [1.0, 1.1, 3.0, 2.0, 2.1, 1.9]).round(2).tolist()
    [-0.67, 0.0, 12.82, 0.0, 0.67, -0.67]
    """
    resid = batch_residual(membership, sample_loss, min_entries)
    good = np.isfinite(resid)
    center = np.median(resid[good])
    scale = 1.4826 * float(np.median(np.abs(resid[good] - center)))
    if scale <= 0:
        scale = float(np.std(resid[good])) or 1.0
    return resid / scale


def order_within(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``np.lexsort((values, group))``: entries by group, then value (NaN last, ties in
    entry order), from one sort of the values and one of a unique int64 key
    ``group * n + rank`` (a two-key lexsort costs several times that).

    >>> order_within(np.array([1, 0, 1, 0]), np.array([0.5, np.nan, -1.0, 2.0])).tolist()
    [3, 1, 2, 0]
    """
    n = values.size
    within = _within_runs(group, values)
    if within is not None:
        return within
    rank = np.empty(n, dtype=np.int64)
    rank[np.argsort(values, kind="stable")] = np.arange(n, dtype=np.int64)
    key = group.astype(np.int64) * max(n, 1)
    key += rank
    return np.argsort(key)


#: Run lengths :func:`_within_runs` sorts a length at a time; more distinct lengths than
#: this, and the two whole sorts serve.
FEW_LENGTHS = 64


def _within_runs(group: np.ndarray, values: np.ndarray) -> np.ndarray | None:
    """:func:`order_within` when ``group`` never falls (the entries of a membership's
    points, point by point): each run of one group sorted alone, the runs of one length
    ``L`` as the rows of a ``[runs, L]`` table (a stable row sort: NaN last, ties in entry
    order, as the whole sort has them).  None when ``group`` falls somewhere or its runs
    have more than :data:`FEW_LENGTHS` lengths."""
    n = values.size
    if n == 0 or bool(np.any(group[1:] < group[:-1])):
        return None
    starts = np.flatnonzero(group[1:] != group[:-1]) + 1
    starts = np.concatenate([np.zeros(1, dtype=np.int64), starts])
    lengths = np.diff(np.append(starts, n))
    distinct = unique_values(lengths)
    if distinct.size > FEW_LENGTHS:
        return None
    out = np.empty(n, dtype=np.int64)
    for length in distinct.tolist():
        at = starts[lengths == length][:, None] + np.arange(length, dtype=np.int64)
        row = values[at].argsort(axis=1, kind="stable")
        out[at] = np.take_along_axis(at, row, axis=1)
    return out


def batch_residual(
    membership: Membership, sample_loss: object, min_entries: int = MIN_ENTRIES
) -> np.ndarray:
    """Step 1: ``r_e = loss_e - median(finite losses of e's point)``, float64, NaN where
    the loss is not finite or its point has fewer than ``min_entries`` finite losses.

    :raises InputError: misaligned losses, or no point with ``min_entries`` of them.
    """
    loss = np.asarray(sample_loss, dtype=np.float64)
    if loss.shape != membership.samples.shape:
        raise InputError(
            "sample_loss",
            f"has shape {loss.shape}, the membership {membership.n_entries} entries",
            "give one loss per entry, in the membership's order",
        )
    loss = np.where(np.isfinite(loss), loss, np.nan)
    median = point_medians(membership, loss, min_entries)
    resid = loss - np.repeat(median, membership.counts())
    if not np.isfinite(resid).any():
        raise InputError("sample_loss", f"no point has {min_entries} finite sample losses")
    return resid


def point_medians(
    membership: Membership, loss: np.ndarray, min_entries: int = MIN_ENTRIES
) -> np.ndarray:
    """The median of each point's finite losses (``loss``: float64 per entry, NaN where
    not finite), float64 ``[n_points]``; NaN where fewer than ``min_entries`` (at least
    one) are finite.  The median of ``f`` finite values sorted ascending is the mean of
    those at ``(f - 1) // 2`` and ``f // 2``.

    The points of one size ``L`` are sorted as the rows of a ``[points, L]`` table (a
    value sort, NaN last: the order statistics, whichever of equal values stands where),
    a chunk of rows at a time; with more than :data:`FEW_LENGTHS` sizes, one order of
    every entry (:func:`order_within`) instead."""
    need = max(min_entries, 1)
    counts = membership.counts()
    start = membership.offsets[:-1]
    sizes = unique_values(counts)
    if sizes.size > FEW_LENGTHS:
        return _medians_by_order(membership, loss, need)
    out = np.full(membership.n_points, np.nan)
    for size in sizes[sizes >= need].tolist():
        points = np.flatnonzero(counts == size)
        for part in chunks(points.size * size):
            rows = points[part.start // size : part.stop // size]
            table = loss[start[rows][:, None] + np.arange(size)]
            finite = size - np.count_nonzero(np.isnan(table), axis=1)
            table.sort(axis=1)
            ok = finite >= need
            at = np.flatnonzero(ok)
            lo = table[at, (finite[at] - 1) // 2]
            hi = table[at, finite[at] // 2]
            out[rows[ok]] = (lo + hi) / 2
    return out


def _medians_by_order(membership: Membership, loss: np.ndarray, need: int) -> np.ndarray:
    """:func:`point_medians` from one order of every entry by point, then loss."""
    point = membership.point_of_entry()
    order = order_within(point, loss)
    nf = np.bincount(point, weights=np.isfinite(loss), minlength=membership.n_points)
    nf = nf.astype(np.int64)
    start = membership.offsets[:-1]
    return _middle(loss, start, np.where(nf >= need, nf, 0), order)


def measured_evidence(
    membership: Membership,
    sample_loss: object,
    options: SampleOptions | None = None,
    min_entries: int = MIN_ENTRIES,
    kinds: object | None = None,
    residual: np.ndarray | None = None,
) -> SampleEvidence:
    """Test every sample on its own measured losses (the module docstring), ground
    ``measured``.

    :param membership: the micro-batches (points) and their samples, their tokens
        (``tokens`` or ``sample_tokens``) each entry's real tokens (for the length
        cells; none: one length).
    :param sample_loss: float ``[n_entries]``, each entry's own mean loss per token.
    :param kinds: optional int ``[n_samples]``: each sample's kind (category code;
        negative: none); None: one kind.
    :param residual: step 1's ``r``, ``batch_residual(membership, sample_loss,
        min_entries)``, when the caller has it already (None: computed here).
    :returns: :class:`.SampleEvidence` whose ``score`` is ``z_i``, ``min_z`` the lowest
        ``u``, ``high`` the entries with ``u >= options.high_z``, ``own_excess_nats`` the
        median ``r`` (nats per token over its batch mates), ``share`` its mean token share;
        each sample is its own group (nothing is inseparable on measured ground).
    """
    import pandas as pd

    opts = options or SampleOptions()
    r = batch_residual(membership, sample_loss, min_entries) if residual is None else residual
    n = membership.n_samples
    kind = _kinds(kinds, n)
    u = _against_kind(membership, r, kind)
    share = membership.entry_share()
    enough = membership.n_entries >= DENSE_FROM * n
    slots = windows(membership.samples, n) if enough else None
    if slots is not None:
        table = _per_sample_dense(slots, u, r, share, opts)
    else:
        frame = pd.DataFrame({"s": membership.samples, "u": u, "r": r, "share": share})
        table = _per_sample(frame[np.isfinite(u)], n, opts)
    need = max(opts.min_appearances, opts.allow_low + 1)
    seen = np.bincount(membership.samples, minlength=n) > 0
    k = table["appearances"].to_numpy()
    reason = np.where(~seen, 1, np.where(k == 0, 2, np.where(k < need, 3, 0))).astype(np.int8)
    testable = reason == 0
    groups = _pooled(kind, testable)
    z = _within_kind(table["t"].to_numpy(), groups, testable)
    p = _tail_pvalues(z, groups, testable)
    return _evidence(table, z, p, reason, membership, opts)


def _kinds(kinds: object | None, n: int) -> np.ndarray:
    if kinds is None:
        return np.zeros(n, dtype=np.int64)
    arr = np.asarray(kinds)
    if arr.shape != (n,) or (arr.size and arr.dtype.kind not in "iu"):
        raise InputError("kinds", f"must be {n} integer codes, one per sample", "or None")
    return np.where(arr < 0, int(arr.max(initial=0)) + 1, arr).astype(np.int64)


def _against_kind(membership: Membership, r: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """Step 2: ``u_e``, float64 (NaN where ``r`` is).

    The cells nest: a (kind, stretch, length) cell is within its (kind, stretch), which is
    within its kind, so one order of the entries by ``(kind x WINDOWS + stretch) x
    n_lengths + length`` makes every cell of every level a run of it; each cell's
    median is taken over its run (:func:`_nested_medians`), the centre chosen per finest
    cell (its own median when it holds :data:`MIN_CELL` entries, else its (kind,
    stretch)'s when that does, else its kind's: a coarser median only where some cell
    takes it) and each entry's looked up once."""
    good = np.flatnonzero(np.isfinite(r))
    point = membership.point_of_entry()[good]
    w = (point * WINDOWS) // max(membership.n_points, 1)
    del point
    tokens = membership.tokens_at(good) if membership.has_tokens else np.ones(good.size)
    lb = np.floor(2 * np.log2(np.maximum(tokens, 1.0))).astype(np.int64)
    del tokens
    k = kind[membership.samples[good]]
    rr = r[good]
    n_l = int(lb.max(initial=0)) + 1
    fine = k * WINDOWS
    fine += w
    fine *= n_l
    fine += lb
    del w, lb
    cell, order, codes, counts = _cells(fine)
    del fine
    widths = (1, n_l, n_l * WINDOWS)
    fine_size, kw_size, _ = (_level_sizes(codes, counts, width) for width in widths)
    own = fine_size >= MIN_CELL
    wanted = (own, ~own & (kw_size >= MIN_CELL), ~own & (kw_size < MIN_CELL))
    medians = _nested_medians(rr[order], codes, counts, widths, wanted)
    centre = np.where(wanted[0], medians[0], np.where(wanted[1], medians[1], medians[2]))
    d = rr - centre[cell]
    del rr
    every = np.ones(codes.size, dtype=bool)
    (mad,) = _nested_medians(np.abs(d[order]), codes, counts, (n_l * WINDOWS,), (every,))
    scale = np.where(mad > 0, 1.4826 * mad, np.nan)
    out = np.full(r.size, np.nan)
    out[good] = d / scale[cell]
    return out


def _cells(code: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The cells of ``code`` (int >= 0), numbered densely in the codes' order: each
    entry's cell, the entries ordered by cell (a stable sort of 16-bit cell numbers
    where the cells are that few: numpy's radix sort), each cell's code and its size."""
    present = np.bincount(code)
    codes = np.flatnonzero(present)
    number = np.cumsum(present > 0) - 1
    cell = number[code].astype(np.int16 if codes.size < 2**15 else np.int64)
    return cell, np.argsort(cell, kind="stable"), codes, present[codes]


def _level_sizes(codes: np.ndarray, sizes: np.ndarray, width: int) -> np.ndarray:
    """Per cell, the entries of the cell of the level ``width`` (the cells whose codes
    agree once divided by it) that holds it."""
    key = codes // width
    new = np.r_[True, key[1:] != key[:-1]]
    group = np.cumsum(new) - 1
    return np.add.reduceat(sizes, np.flatnonzero(new))[group] if sizes.size else sizes


def _nested_medians(
    ordered: np.ndarray,
    codes: np.ndarray,
    sizes: np.ndarray,
    widths: tuple[int, ...],
    wanted: tuple[np.ndarray, ...],
) -> list[np.ndarray]:
    """Per cell (as :func:`_cells` gives them), the median of its cell at each level
    ``width`` (the cells whose codes agree once divided by it: 1 is the cells
    themselves), where ``wanted`` (a bool per cell, one array a level) asks for it (NaN
    elsewhere).  ``ordered``: the values ordered by cell, partitioned here in place.  A
    median is the middle value of the run, or the mean of the middle two, as
    ``np.median`` (and pandas' group-by median) gives it."""
    first = np.zeros(codes.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=first[1:])
    out = []
    for width, want in zip(widths, wanted, strict=True):
        key = codes // width
        new = np.r_[True, key[1:] != key[:-1]]
        group = np.cumsum(new) - 1
        asked = np.zeros(int(group[-1]) + 1 if group.size else 0, dtype=bool)
        asked[group[want]] = True
        bounds = first[np.r_[np.flatnonzero(new), codes.size]]
        med = np.full(asked.size, np.nan)
        for g in np.flatnonzero(asked).tolist():
            med[g] = _run_median(ordered[bounds[g] : bounds[g + 1]])
        out.append(med[group])
    return out


def _run_median(run: np.ndarray) -> float:
    """``np.median(run)`` of a non-empty run without NaN, partitioning it in place."""
    m = run.size
    lo, hi = (m - 1) // 2, m // 2
    if lo == hi:
        run.partition(hi)
        return float(run[hi])
    run.partition([lo, hi])
    return float((run[lo] + run[hi]) / 2)


def _per_sample(frame: pd.DataFrame, n: int, opts: SampleOptions) -> pd.DataFrame:
    """Per sample: appearances, high, min u, the statistic ``t`` (its ``allow_low``-th
    lowest u, counting from 0), median ``r`` and ``u``, mean share (NaN shares left
    out).  Sorted within each sample (:func:`order_within`), read at its offsets."""
    import pandas as pd

    smp = frame["s"].to_numpy().astype(np.int64)
    u, r, share = (frame[c].to_numpy(dtype=np.float64) for c in ("u", "r", "share"))
    k = np.bincount(smp, minlength=n).astype(np.int64)
    start = np.zeros(n, dtype=np.int64)
    np.cumsum(k[:-1], out=start[1:])
    has = k > 0
    u_sorted = u[order_within(smp, u)]
    r_sorted = r[order_within(smp, r)]

    def at(sorted_values: np.ndarray, where: np.ndarray, ok: np.ndarray) -> np.ndarray:
        out = np.full(n, np.nan)
        out[ok] = sorted_values[where[ok]]
        return out

    finite = np.isfinite(share)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_share = np.bincount(smp, weights=np.where(finite, share, 0.0), minlength=n) / (
            np.bincount(smp, weights=finite, minlength=n)
        )
    high = np.bincount(smp, weights=u >= opts.high_z, minlength=n).astype(np.int64)
    return pd.DataFrame(
        {
            "appearances": k,
            "high": high,
            "min_z": at(u_sorted, start, has),
            "t": at(u_sorted, start + opts.allow_low, k > opts.allow_low),
            "median_r": _middle(r_sorted, start, k),
            "share": mean_share,
            "median_z": _middle(u_sorted, start, k),
        }
    )


def _per_sample_dense(
    slots: tuple[np.ndarray, ...],
    u: np.ndarray,
    r: np.ndarray,
    share: np.ndarray,
    opts: SampleOptions,
) -> pd.DataFrame:
    """:func:`_per_sample` from the samples' entries a window a row (:func:`.windows`:
    at most one entry of a sample a window, the windows in the entries' order), over
    the entries with a finite ``u``: the same table, bit for bit.

    ``u`` and ``r`` are put in ``[n_windows, n_samples]`` tables (+inf where a window
    holds no such entry) and each column sorted (a few values a sample, not a sort of
    every entry): the order statistics are the same values whatever the order of
    ties.  The counts and the share sums are added a window at a time, which is each
    sample's entries in their order, as :func:`np.bincount` adds them."""
    import pandas as pd

    n = slots[0].size
    u_tab = np.full((len(slots), n), np.inf)
    r_tab = np.full((len(slots), n), np.inf)
    k = np.zeros(n, dtype=np.int64)
    high = np.zeros(n, dtype=np.int64)
    total, count = np.zeros(n), np.zeros(n)
    for w, col in enumerate(slots):
        entry = np.maximum(col, 0)  # (a sample without an entry reads entry 0: masked)
        uu = u[entry]
        valid = col >= 0
        valid &= np.isfinite(uu)
        np.copyto(u_tab[w], uu, where=valid)
        np.copyto(r_tab[w], r[entry], where=valid)
        k += valid
        high += valid & (uu >= opts.high_z)
        sh = share[entry]
        fine = valid & np.isfinite(sh)
        total += np.where(fine, sh, 0.0)  # (+0.0 leaves a sum of shares >= 0 as it is)
        count += fine
    u_tab.sort(axis=0)
    r_tab.sort(axis=0)
    has = k > 0

    def row(table: np.ndarray, i: np.ndarray | int, ok: np.ndarray) -> np.ndarray:
        if isinstance(i, int):
            picked = table[min(i, table.shape[0] - 1)]
        else:
            picked = np.take_along_axis(table, np.clip(i, 0, table.shape[0] - 1)[None], 0)[0]
        return np.where(ok, picked, np.nan)

    with np.errstate(invalid="ignore", divide="ignore"):
        mean_share = total / count
    return pd.DataFrame(
        {
            "appearances": k,
            "high": high,
            "min_z": row(u_tab, 0, has),
            "t": row(u_tab, opts.allow_low, k > opts.allow_low),
            "median_r": _table_middle(r_tab, k),
            "share": mean_share,
            "median_z": _table_middle(u_tab, k),
        }
    )


def sample_medians(samples: np.ndarray, values: np.ndarray, n_samples: int) -> np.ndarray:
    """Each sample's median over its entries' non-NaN ``values`` (float64 per entry),
    float64 ``[n_samples]``, NaN where it has none: ``pandas``' group-by median of
    ``values`` by ``samples``, as a look-up per sample.

    Where the entries fall into a few windows in which no sample repeats
    (:func:`.windows`), the values are put in a ``[n_windows, n_samples]`` table (NaN where
    a window holds none of a sample's) whose columns are sorted; else one order of the
    entries by sample, then value (:func:`order_within`)."""
    slots = windows(samples, n_samples) if samples.size >= DENSE_FROM * n_samples else None
    if slots is None:
        order = order_within(samples, values)
        k = np.bincount(samples, weights=~np.isnan(values), minlength=n_samples)
        start = np.zeros(n_samples, dtype=np.int64)
        np.cumsum(np.bincount(samples, minlength=n_samples)[:-1], out=start[1:])
        return _middle(values, start, k.astype(np.int64), order)
    table = np.full((len(slots), n_samples), np.nan)
    for w, col in enumerate(slots):
        there = np.flatnonzero(col >= 0)
        table[w, there] = values[col[there]]
    k = len(slots) - np.count_nonzero(np.isnan(table), axis=0)
    table.sort(axis=0)
    return _table_middle(table, k)


def _middle(
    values: np.ndarray, start: np.ndarray, k: np.ndarray, order: np.ndarray | None = None
) -> np.ndarray:
    """The median of each run ``values[order][start : start + k]`` (sorted ascending;
    ``order`` None: ``values`` are in that order), the mean of the values at ``(k - 1)
    // 2`` and ``k // 2`` into the run, NaN where ``k`` is 0."""
    has = k > 0
    if not has.any():
        return np.full(k.size, np.nan)
    lo = np.where(has, start + (k - 1) // 2, 0)
    hi = np.where(has, start + k // 2, 0)
    if order is not None:
        lo, hi = order[lo], order[hi]
    with np.errstate(invalid="ignore"):  # (inf and -inf: NaN, as pandas has it)
        return np.where(has, (values[lo] + values[hi]) / 2, np.nan)


def _table_middle(table: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The median of each column's first ``k`` values (``table`` sorted down its
    columns), NaN where ``k`` is 0: :func:`_middle` of a ``[rows, columns]`` table."""
    rows = table.shape[0] - 1
    lo = np.take_along_axis(table, np.clip((k - 1) // 2, 0, rows)[None], 0)[0]
    hi = np.take_along_axis(table, np.clip(k // 2, 0, rows)[None], 0)[0]
    with np.errstate(invalid="ignore"):
        return np.where(k > 0, (lo + hi) / 2, np.nan)


def _within_kind(t: np.ndarray, kind: np.ndarray, testable: np.ndarray) -> np.ndarray:
    """Step 3: ``z_i`` of the testable samples (NaN elsewhere), within ``kind`` (the
    kinds as :func:`_pooled` makes them)."""
    z = np.full(t.shape, np.nan)
    for k in unique_values(kind[testable]):
        sel = testable & (kind == k)
        x = t[sel]
        med = float(np.median(x))
        mad = 1.4826 * float(np.median(np.abs(x - med)))
        z[sel] = (x - med) / (mad if mad > 0 else (float(np.std(x)) or 1.0))
    return z


def _pooled(kind: np.ndarray, testable: np.ndarray) -> np.ndarray:
    """The kinds with fewer than :data:`MIN_KIND` testable samples merged into one
    (code -1)."""
    counts = np.bincount(kind[testable], minlength=int(kind.max(initial=0)) + 1)
    return np.where(counts[kind] < MIN_KIND, -1, kind)


def _tail_pvalues(z: np.ndarray, kind: np.ndarray, testable: np.ndarray) -> np.ndarray:
    """Step 4: ``p_i`` against the kind's own distribution (NaN where untestable), the
    kinds as :func:`_pooled` makes them.

    A kind whose own tail starts beyond the tail of all testable samples together (its
    ``z_0`` over the fence ``z_0 + FENCE b`` of the pooled tail, where that tail gives
    ``p`` under ``0.1 exp(-FENCE)``) holds more extreme samples than its top tenth can
    hold (a web source one sample in six of which is garbage): its tail is the poison's
    own.  Its tail is then fitted to its samples inside the fence, and every sample of
    the kind tested against that."""
    p = np.full(z.shape, np.nan)
    pooled = _tail_fit(z[testable])
    fence = pooled[0] + FENCE * pooled[1]
    for k in unique_values(kind[testable]):
        idx = np.flatnonzero(testable & (kind == k))
        x = z[idx]
        p[idx] = (x.size - _first_at_or_above(x)) / x.size
        z0, b = _tail_fit(x)
        inside = x <= fence
        if pooled[1] > 0 and z0 > fence and inside.sum() >= 1 / TAIL:
            z0, b = _tail_fit(x[inside])
        above = x > z0
        if b > 0:
            p[idx[above]] = TAIL * np.exp(-(x[above] - z0) / b)
    return p


def _tail_fit(x: np.ndarray) -> tuple[float, float]:
    """``(z_0, b)``: the ``1 - TAIL`` quantile of ``x`` and the exponential scale of the
    excess over it, ``median(x - z_0 | x > z_0) / ln 2`` (0: no excess, or no ``x``)."""
    if x.size == 0:
        return float(np.inf), 0.0
    z0 = float(np.quantile(x, 1.0 - TAIL))
    above = x > z0
    b = float(np.median(x[above] - z0)) / np.log(2) if above.any() else 0.0
    return z0, b


def _first_at_or_above(x: np.ndarray) -> np.ndarray:
    """``np.searchsorted(np.sort(x), x, side="left")``, int64: how many values lie below
    each, from one sort (ties share the first position of their value, whatever order
    the sort left them in); the
    search itself, whose 10M random probes cost several sorts, only when ``x`` holds NaN
    (each NaN sorts apart)."""
    if np.isnan(x).any():
        return np.searchsorted(np.sort(x), x, side="left")
    order = np.argsort(x)  # (ties all get their value's first position: any order serves)
    ranked = x[order]
    first = np.arange(x.size, dtype=np.int64)
    same = np.flatnonzero(ranked[1:] == ranked[:-1]) + 1
    first[same] = 0
    np.maximum.accumulate(first, out=first)
    out = np.empty(x.size, dtype=np.int64)
    out[order] = first
    return out


def _evidence(
    t: pd.DataFrame,
    z: np.ndarray,
    p: np.ndarray,
    reason: np.ndarray,
    membership: Membership,
    opts: SampleOptions,
) -> SampleEvidence:
    import pandas as pd

    n = membership.n_samples
    k = t["appearances"].to_numpy()
    q = bh_qvalues(np.where(reason == 0, p, np.nan))
    nan = np.full(n, np.nan)
    table = pd.DataFrame(
        {
            "sample": np.arange(n, dtype=np.int64),
            "group": np.where(k > 0, np.arange(n), -1).astype(np.int64),
            "group_size": (k > 0).astype(np.int64),
            "appearances": k,
            "explained": np.zeros(n, dtype=np.int64),
            "tested": np.where(reason == 0, k, 0).astype(np.int64),
            "high": t["high"].to_numpy(),
            "min_z": t["min_z"].to_numpy(),
            "score": z,
            "n_ge": np.zeros(n, dtype=np.int64),
            "p": np.where(reason == 0, p, np.nan),
            "q": q,
            "testable": reason == 0,
            "reason": pd.Categorical.from_codes(reason, categories=list(REASONS)),
            "median_z": t["median_z"].to_numpy(),
            "median_z_lo": nan,
            "median_z_hi": nan,
            "median_coverage": nan,
            "share": t["share"].to_numpy(),
            "excess": nan,
            "own_excess": nan,
            "own_excess_se": nan,
            "own_excess_nats": t["median_r"].to_numpy(),
        },
        copy=False,
    )
    n_tested = int((reason == 0).sum())
    usable = int(np.isfinite(t["min_z"].to_numpy()).sum())
    return SampleEvidence(table, "measured", opts, membership.n_points, usable, n_tested, 0, 0)
