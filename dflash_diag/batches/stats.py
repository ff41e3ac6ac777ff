"""What a batch schedule does to padding and batch composition: :func:`schedule_stats`.

Everything is computed from a :class:`~dflash_diag.data.Replay` with numpy over its
flat ``sample_ids``/``offsets`` arrays, in chunks of a few million samples, so a
10,000,000-sample manifest replayed for several epochs stays in memory and in seconds.

The numbers, each over every replayed micro-batch ``b`` with ``n_b`` samples of (capped)
lengths ``x_bi``:

- padding efficiency = ``sum_b sum_i x_bi / sum_b n_b max_i x_bi`` (real / padded tokens);
- within-batch spread = mean over batches of the population std of ``x_bi``, and the mean
  of ``std_b / mean_b`` (coefficient of variation);
- length ICC = ICC(1) of a one-way ANOVA of lengths grouped by micro-batch: the share of
  length variance that lies between batches (~1 sorted-greedy, ~0 random);
- adjacent length correlation = lag-1 autocorrelation of the mean length of consecutive
  micro-batches (of consecutive steps when a step pools several micro-batches);
- recurrence = share of epoch ``e``'s micro-batches whose exact composition (``batch_id``)
  is trained on again in epoch ``e + 1``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..arrays import group_chunks, unique_values
from ..data import STRATEGY_NAMES, Progress, Replay, ScheduleParams
from ..errors import InputError
from ..schedule.base import is_sized
from ..schedule.replay import CHUNK_SAMPLES, determined_epochs
from ..schedule.rows import ReplayRows

if TYPE_CHECKING:
    import numpy as np

    from ..data import Manifest


#: Fewer points than this and a correlation is "not enough data" (None).
MIN_POINTS = 10


@dataclass(frozen=True)
class ScheduleStats:
    """Padding and composition statistics of one replayed schedule.

    :param strategy: the strategy replayed.
    :param n_samples: samples in the manifest.
    :param epochs: epochs replayed.
    :param batches_per_epoch: micro-batches trained on in the first epoch (an incomplete
        last step, dropped by the replay, is not counted).
    :param steps_per_epoch: optimizer steps in the first epoch.
    :param micro_per_step: micro-batches pooled in one step (world_size x grad_accum).
    :param tokens_per_epoch: real tokens trained on in the first epoch.
    :param padding_efficiency: real tokens / padded tokens over all micro-batches, where a
        micro-batch's padded tokens are ``n_samples x longest``.
    :param tokens_per_step_min: fewest real tokens in a step.
    :param tokens_per_step_median: median real tokens per step.
    :param tokens_per_step_max: most real tokens in a step.
    :param length_std: population std of the replayed samples' lengths (tokens).
    :param within_batch_std: mean over micro-batches of the population std of their
        lengths (tokens); compare with ``length_std``.
    :param within_batch_cv: mean over micro-batches of std / mean length.
    :param length_icc: ICC(1), see :func:`length_icc`; None if it cannot be estimated.
    :param length_icc_ci: approximate 95% confidence interval of ``length_icc``.
    :param length_icc_p: p-value of the ANOVA F test of "no between-batch variance".
    :param adjacent_length_corr: lag-1 autocorrelation of batch (or step) mean length in
        schedule order; None with fewer than :data:`MIN_POINTS` batches or no variation.
    :param adjacent_length_corr_p: two-sided p-value of "no autocorrelation" (Fisher z).
    :param recurrence: share of epoch-e micro-batches whose ``batch_id`` comes back in
        epoch e+1, pooled over epoch pairs; None ("not enough data") with one epoch.
    :param category_share_std: per category, std over micro-batches of its share.
    :param category_dispersion: observed variance of the category shares over the
        variance random batches of the same sizes would give (binomial ``p(1-p)/n``),
        pooled over categories: ~1 mixed like random, >>1 segregated by category.
    :param dropped: what the replay left out, as :attr:`Replay.dropped`.
    :param batch_size: samples per batch for strategies with a fixed size (``random``,
        ``length-grouped``; :func:`default_batch_size` in a comparison), else None.
    """

    strategy: str
    n_samples: int
    epochs: int
    batches_per_epoch: int
    steps_per_epoch: int
    micro_per_step: int
    tokens_per_epoch: int
    padding_efficiency: float
    tokens_per_step_min: float
    tokens_per_step_median: float
    tokens_per_step_max: float
    length_std: float
    within_batch_std: float
    within_batch_cv: float
    length_icc: float | None
    length_icc_ci: tuple[float, float] | None
    length_icc_p: float | None
    adjacent_length_corr: float | None
    adjacent_length_corr_p: float | None
    recurrence: float | None
    category_share_std: dict[str, float] | None = None
    category_dispersion: float | None = None
    dropped: dict[str, int] = field(default_factory=dict)
    batch_size: int | None = None


#: Samples per chunk of :func:`batch_moments` (its temporaries: ~16 bytes x this).
MOMENT_CHUNK = 1 << 20


@dataclass(frozen=True)
class BatchMoments:
    """Per micro-batch sums of a replay, in schedule order (int64 arrays).

    :param n: samples; ``total``: sum of lengths; ``sumsq``: sum of squared lengths
        (float64, exact below 2**53); ``longest``: the largest length.
    """

    n: np.ndarray
    total: np.ndarray
    sumsq: np.ndarray
    longest: np.ndarray


def batch_moments(replay: Replay, chunk: int = MOMENT_CHUNK, table: bool = False) -> BatchMoments:
    """Samples, token sum, sum of squares and longest length of every micro-batch.

    Works through ``sample_ids`` in chunks of about ``chunk`` samples with
    ``np.add.reduceat``, so memory stays bounded for any manifest size.

    :param table: read ``n``, ``total`` and ``longest`` from the replay's micro table
        (``n_samples``, ``tokens``, ``max_len``: the same sums, as :class:`~dflash_diag.
        data.Replay` defines them), the pass over the samples making ``sumsq`` alone.
    """
    import numpy as np

    offsets = np.asarray(replay.offsets, dtype=np.int64)
    lengths = np.asarray(replay.lengths, dtype=np.int64)
    n_batches = offsets.shape[0] - 1
    n = np.diff(offsets)
    sumsq = np.zeros(n_batches, dtype=np.float64)
    sums = not table
    total = np.zeros(n_batches if sums else 0, dtype=np.int64)
    longest = np.zeros(n_batches if sums else 0, dtype=np.int64)
    # (the squares alone are read from a table of the smallest integers that hold the
    # lengths: a quarter of the bytes to gather from, at random places, for every sample)
    source = lengths if sums else _narrowest(lengths)
    for lo, hi in group_chunks(offsets, chunk):
        start, stop = offsets[lo], offsets[hi]
        if stop == start:
            continue
        x = source[replay.sample_ids[start:stop]]
        # reduceat misreads empty groups, so reduce over the non-empty ones only
        nonempty = np.flatnonzero(n[lo:hi] > 0)
        idx = offsets[lo:hi][nonempty] - start
        where = lo + nonempty
        sumsq[where] = np.add.reduceat(np.square(x, dtype=np.float64), idx)
        if sums:
            total[where] = np.add.reduceat(x, idx)
            longest[where] = np.maximum.reduceat(x, idx)
    if table:
        micro = replay.micro
        total = micro["tokens"].to_numpy(dtype=np.int64)
        longest = micro["max_len"].to_numpy(dtype=np.int64)
    return BatchMoments(n=n, total=total, sumsq=sumsq, longest=longest)


def _narrowest(lengths: np.ndarray) -> np.ndarray:
    """``lengths`` (int64) as uint16 when all are in ``[0, 2**16)``, else themselves.

    >>> import numpy as np
    >>> _narrowest(np.array([3, 65535])).dtype.name, _narrowest(np.array([65536])).dtype.name
    ('uint16', 'int64')
    """
    import numpy as np

    if lengths.size and int(lengths.max()) < 1 << 16 and int(lengths.min()) >= 0:
        return lengths.astype(np.uint16)
    return lengths


def length_icc(m: BatchMoments) -> tuple[float | None, tuple[float, float] | None, float | None]:
    """ICC(1) of lengths grouped by micro-batch, with a 95% CI and the F-test p-value.

    One-way ANOVA over ``g`` batches of sizes ``n_b`` (``N`` samples):
    ``MSB = sum_b n_b (mean_b - mean)^2 / (g - 1)``,
    ``MSW = sum_b sum_i (x_bi - mean_b)^2 / (N - g)``,
    ``k0 = (N - sum_b n_b^2 / N) / (g - 1)`` (the adjusted mean group size) and
    ``ICC(1) = (MSB - MSW) / (MSB + (k0 - 1) MSW)``.
    The estimate can fall below 0 by sampling noise when the true value is ~0; it is
    clipped to ``[0, 1]`` (the CI too), since a share of variance cannot be negative.
    The CI is the F-based interval of Shrout & Fleiss (1979) with ``k0`` for the group
    size (exact for equal sizes, approximate otherwise); p is ``P(F > MSB / MSW)``.
    None when there are fewer than 2 batches, every batch has one sample (no
    within-batch variance to compare with), or all lengths are equal.

    >>> import numpy as np
    >>> m = BatchMoments(np.array([2, 2]), np.array([2, 6]), np.array([2.0, 18.0]),
    ...                  np.array([1, 3]))
    >>> length_icc(m)[0]   # batches (1, 1) and (3, 3): all variance is between batches
    1.0
    """
    import numpy as np

    from ..stattests import f_quantile, f_sf

    keep = m.n > 0
    whole = bool(keep.all())  # (then no copies of the kept batches)
    n = m.n if whole else m.n[keep]
    total = m.total if whole else m.total[keep]
    g = n.shape[0]
    # Sums of the float64 values, as the formulas read; int64 arrays enter each product
    # or quotient cast to float64 exactly as an .astype copy would, without the copies.
    big_n = float(n.astype(np.float64).sum())
    if g < 2 or big_n - g < 1:
        return None, None, None
    grand = total.astype(np.float64).sum() / big_n
    means = np.true_divide(total, n, dtype=np.float64)
    spread = means - grand
    ssb = float(np.sum(_times_square(n, spread)))
    np.multiply(total, means, out=spread)  # ssw = sum(sumsq - total * means)
    del means
    np.subtract(m.sumsq if whole else m.sumsq[keep], spread, out=spread)
    ssw = float(np.sum(spread))
    del spread
    ssw = max(ssw, 0.0)  # rounding can leave -1e-9 for constant batches
    df_b, df_w = g - 1, big_n - g
    msb, msw = ssb / df_b, ssw / df_w
    if msb + msw <= 0:
        return None, None, None
    k0 = (big_n - float(np.sum(np.square(n, dtype=np.float64))) / big_n) / df_b
    if msw == 0:
        return 1.0, (1.0, 1.0), 0.0
    icc = (msb - msw) / (msb + (k0 - 1) * msw)
    f = msb / msw
    p = f_sf(f, df_b, df_w)
    f_lo = f / f_quantile(0.975, df_b, df_w)
    f_hi = f * f_quantile(0.975, df_w, df_b)
    lo = (f_lo - 1) / (f_lo + k0 - 1)
    hi = (f_hi - 1) / (f_hi + k0 - 1)
    return _clip01(icc), (_clip01(lo), _clip01(hi)), p


def _times_square(n: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``n * d**2``, written into ``d``."""
    import numpy as np

    np.square(d, out=d)
    d *= n
    return d


def _clip01(x: float) -> float:
    return float(min(1.0, max(0.0, x)))


def lag1_corr(x: np.ndarray) -> tuple[float | None, float | None]:
    """Pearson correlation of ``x[t]`` with ``x[t+1]`` and its two-sided p-value.

    The p-value uses Fisher's z: ``atanh(r) sqrt(n - 3)`` is ~N(0, 1) when consecutive
    values are independent.  None with fewer than :data:`MIN_POINTS` values or a
    constant series.

    >>> import numpy as np
    >>> round(lag1_corr(np.arange(20.0))[0], 6)
    1.0
    """
    import numpy as np

    from ..stattests import normal_sf

    x = np.asarray(x, dtype=np.float64)
    if x.shape[0] < MIN_POINTS:
        return None, None
    a, b = x[:-1], x[1:]
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return None, None
    r = float(np.corrcoef(a, b)[0, 1])
    r = min(1.0, max(-1.0, r))
    n = a.shape[0]
    if abs(r) >= 1.0:
        return r, 0.0
    z = math.atanh(r) * math.sqrt(max(n - 3, 1))
    return r, 2 * normal_sf(abs(z))


def recurrence(epochs: np.ndarray, batch_ids: np.ndarray) -> float | None:
    """Share of epoch-e micro-batches whose ``batch_id`` is trained on in epoch e+1.

    Pooled over the consecutive epoch pairs present (hits / batches of the earlier
    epochs).  None with fewer than two epochs.

    >>> import numpy as np
    >>> recurrence(np.array([0, 0, 1, 1]), np.array([7, 8, 8, 9]))
    0.5
    """
    import numpy as np

    epochs = np.asarray(epochs)
    values = unique_values(epochs)
    if values.shape[0] < 2:
        return None
    hits = 0
    seen = 0
    for e, nxt in zip(values[:-1], values[1:], strict=True):
        this_ids = batch_ids[epochs == e]
        hits += int(np.isin(this_ids, batch_ids[epochs == nxt]).sum())
        seen += this_ids.shape[0]
    return hits / seen if seen else None


def _category_spread(
    shares: dict[str, np.ndarray], names: Sequence[str], n: np.ndarray
) -> tuple[dict[str, float] | None, float | None]:
    import numpy as np

    cols = [name for name in names if name in shares]
    keep = n > 0
    if not cols or not keep.any():  # no categories, or no batch trained on
        return None, None
    weights = n[keep].astype(np.float64)
    stds: dict[str, float] = {}
    observed = 0.0
    expected = 0.0
    for col in cols:
        share = shares[col][keep]
        stds[col] = float(np.std(share))
        p = float(np.sum(share * weights) / weights.sum())
        observed += float(np.mean((share - p) ** 2))
        expected += float(np.mean(p * (1 - p) / weights))
    dispersion = observed / expected if expected > 0 else None
    return stds, dispersion


def schedule_stats(replay: Replay | ReplayRows) -> ScheduleStats:
    """Padding and composition statistics of a replayed schedule.

    :param replay: the output of :func:`dflash_diag.schedule.replay`, or of
        :func:`~dflash_diag.schedule.rows.replay_rows` (the same schedule without its
        sample ids: the same statistics, in a fraction of the memory).
    :returns: a :class:`ScheduleStats`; the module docstring gives every formula.

    >>> from dflash_diag.schedule import replay
    >>> from dflash_diag.data import ScheduleParams
    >>> import numpy as np
    >>> lengths = np.array([100, 100, 100, 100, 400, 400])
    >>> s = schedule_stats(replay(lengths, ScheduleParams(token_budget=800, epochs=2)))
    >>> s.padding_efficiency, s.length_icc, s.recurrence
    (1.0, 1.0, 1.0)
    """
    rows = replay if isinstance(replay, ReplayRows) else replay_as_rows(replay)
    del replay
    return _rows_stats(rows)


def replay_as_rows(replay: Replay) -> ReplayRows:
    """What :func:`schedule_stats` reads of a :class:`Replay`: its micro-batches' sums
    from its sample ids (:func:`batch_moments`), steps, epochs and ``batch_id``."""
    import numpy as np

    micro = replay.micro
    m = batch_moments(replay)
    epochs = micro["epoch"].to_numpy()
    first = epochs == epochs[0] if epochs.shape[0] else np.zeros(0, dtype=bool)
    names = [x for x in replay.category_names if f"cat_{x}" in micro.columns]
    return ReplayRows(
        params=replay.params,
        n_samples=int(replay.lengths.shape[0]),
        n=m.n,
        total=m.total,
        sumsq=m.sumsq,
        longest=m.longest,
        step=micro["step"].to_numpy(),
        first=first,
        epochs=_count_distinct(epochs),
        recurrence=recurrence(epochs, micro["batch_id"].to_numpy()),
        shares={x: micro[f"cat_{x}"].to_numpy(dtype=np.float64) for x in names},
        category_names=tuple(replay.category_names),
        dropped=dict(replay.dropped),
    )


def _rows_stats(rows: ReplayRows) -> ScheduleStats:
    import numpy as np

    m = BatchMoments(rows.n, rows.total, rows.sumsq, rows.longest)
    steps, first = rows.step, rows.first
    # Phases in an order that frees each one's arrays before the next makes its own.
    icc, icc_ci, icc_p = length_icc(m)
    padded = float(np.sum(m.n * m.longest))
    real = float(np.sum(m.total))
    big_n = float(np.sum(m.n))
    grand = real / big_n if big_n else math.nan
    length_var = float(np.sum(m.sumsq)) / big_n - grand**2 if big_n else math.nan
    tokens_per_epoch = int(m.total[first].sum())
    batches_per_epoch = int(m.n[first].shape[0])

    if steps is None:  # (one micro-batch a step, counting up: as sorted distinct steps)
        step_tokens, step_n = m.total.astype(np.float64), m.n.astype(np.float64)
    else:
        step_tokens, step_n = _step_sums(steps, m)
    n_steps = step_tokens.shape[0]
    micro_per_step = int(round(m.n.shape[0] / n_steps)) if n_steps else 0
    per_step = [_stat(fn, step_tokens) for fn in (np.min, np.median, np.max)]
    step_means = step_tokens / np.maximum(step_n, 1) if micro_per_step > 1 else None
    del step_tokens, step_n

    means, std_b = _batch_spread(m)
    sizes = m.n
    del m
    within_std = _stat(np.mean, std_b)
    cv = _mean_cv(means, std_b)
    del std_b
    corr, corr_p = lag1_corr(step_means if step_means is not None else means)
    del step_means, means
    cat_std, cat_disp = _category_spread(rows.shares, rows.category_names, sizes)
    return ScheduleStats(
        strategy=rows.params.strategy,
        n_samples=rows.n_samples,
        epochs=rows.epochs,
        batches_per_epoch=batches_per_epoch,
        steps_per_epoch=batches_per_epoch if steps is None else _count_distinct(steps[first]),
        micro_per_step=micro_per_step,
        tokens_per_epoch=tokens_per_epoch,
        padding_efficiency=real / padded if padded else math.nan,
        tokens_per_step_min=per_step[0],
        tokens_per_step_median=per_step[1],
        tokens_per_step_max=per_step[2],
        length_std=math.sqrt(max(length_var, 0.0)) if big_n else math.nan,
        within_batch_std=within_std,
        within_batch_cv=cv,
        length_icc=icc,
        length_icc_ci=icc_ci,
        length_icc_p=icc_p,
        adjacent_length_corr=corr,
        adjacent_length_corr_p=corr_p,
        recurrence=rows.recurrence,
        category_share_std=cat_std,
        category_dispersion=cat_disp,
        dropped=dict(rows.dropped),
        batch_size=rows.params.batch_size,
    )


def _stat(fn: Callable[[np.ndarray], Any], x: np.ndarray) -> float:
    """``fn(x)`` as a float; nan for an empty ``x``."""
    return float(fn(x)) if x.shape[0] else math.nan


def _mean_cv(means: np.ndarray, std_b: np.ndarray) -> float:
    """Mean over batches of ``std_b / mean_b`` (batches of positive mean); ``std_b`` is
    overwritten when every mean is positive (the quotients made in place)."""
    import numpy as np

    positive = means > 0
    if positive.all():
        std_b /= means
        return _stat(np.mean, std_b)
    return _stat(np.mean, std_b[positive] / means[positive])


def _is_sorted(x: np.ndarray) -> bool:
    """Whether ``x`` never decreases (checked in slices: no full-length bool array)."""
    import numpy as np

    for a in range(0, max(x.shape[0] - 1, 0), CHUNK_SAMPLES):
        b = min(a + CHUNK_SAMPLES, x.shape[0] - 1)
        if not np.all(x[a + 1 : b + 1] >= x[a:b]):
            return False
    return True


def _count_distinct(x: np.ndarray) -> int:
    """``np.unique(x).shape[0]``, without sorting when ``x`` is already sorted."""
    import numpy as np

    if _is_sorted(x):
        return int(np.count_nonzero(x[1:] != x[:-1])) + 1 if x.shape[0] else 0
    return int(unique_values(x).shape[0])


def _step_sums(steps: np.ndarray, m: BatchMoments) -> tuple[np.ndarray, np.ndarray]:
    """Per distinct step (ascending): real tokens and samples (float64), by ``bincount``
    over the step of each micro-batch.  Rows sorted by step (every replay's) are indexed
    by a running count instead of ``np.unique``'s sort: the same index, the same sums."""
    import numpy as np

    if _is_sorted(steps):
        if not np.any(steps[1:] == steps[:-1]):  # one micro-batch a step: no index
            return m.total.astype(np.float64), m.n.astype(np.float64)
        index = np.zeros(steps.shape[0], dtype=np.int64)
        if steps.shape[0]:
            np.cumsum(steps[1:] != steps[:-1], out=index[1:])
        size = int(index[-1]) + 1 if steps.shape[0] else 0
    else:
        values, index = np.unique(steps, return_inverse=True)
        size = values.shape[0]
    tokens = np.bincount(index, weights=m.total, minlength=size)
    n = np.bincount(index, weights=m.n, minlength=size)
    return tokens, n


def _batch_spread(m: BatchMoments) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population std of each non-empty micro-batch's lengths (float64):
    ``mean_b = total_b / n_b``, ``std_b = sqrt(max(sumsq_b / n_b - mean_b^2, 0))``,
    computed in place (two arrays of one float a batch live at the end)."""
    import numpy as np

    keep = m.n > 0
    if keep.all():
        n, total, sumsq = m.n, m.total, m.sumsq
    else:
        n, total, sumsq = m.n[keep], m.total[keep], m.sumsq[keep]
    means = total / n
    spread = sumsq / n
    spread -= means**2
    np.maximum(spread, 0.0, out=spread)
    np.sqrt(spread, out=spread)
    return means, spread


@dataclass(frozen=True)
class ScheduleWarning:
    """Something the schedule does to some samples that the user should hear about.

    :param level: ``warning`` (likely not what was meant) or ``note`` (a fact to know).
    :param kind: ``over_budget`` (samples longer than the token budget, after the cap),
        ``truncated`` (samples longer than ``max_seq_len``, capped to it) or
        ``undetermined`` (epochs the seed does not decide; ``samples`` is 0).
    :param samples: how many samples it concerns.
    :param n_samples: samples in the manifest.
    :param message: one sentence saying how many, and what the schedule does with them.
    """

    level: str
    kind: str
    samples: int
    n_samples: int
    message: str


#: What each built-in strategy does with a sample longer than the token budget (the
#: packers of :mod:`dflash_diag.schedule.packing` and fairseq's ``batch_by_size``);
#: ``random`` and ``length-grouped`` take a batch size, not a budget.
OVER_BUDGET = {
    "sorted-greedy": "each is a micro-batch of its own, over the budget",
    "bucketed": "each is a micro-batch of its own, over the budget",
    "fairseq": "fairseq leaves them out of the schedule "
    "(as --skip-invalid-size-inputs-valid-test would)",
}


def _share(k: int, n: int) -> str:
    """``k`` of ``n`` as a percentage that reads 100% only when ``k == n``.

    >>> _share(82, 100_000), _share(5, 100), _share(999, 1000), _share(3, 3)
    ('0.082%', '5%', '>99%', '100%')
    """
    x = 100 * k / n
    if k == n:
        return "100%"
    if x > 99:
        return ">99%"
    return f"{x:.0f}%" if x >= 10 else f"{x:.2g}%"


def schedule_warnings(
    source: Manifest | np.ndarray | Sequence[int], params: ScheduleParams
) -> list[ScheduleWarning]:
    """What the schedule does to samples that do not fit it, as data (nothing printed).

    - ``truncated`` (a note): samples with ``length > max_seq_len``; the replay, like
      the trainer, counts each as ``max_seq_len`` tokens.
    - ``over_budget`` (a warning): samples whose capped length ``min(length,
      max_seq_len) > token_budget``.  Under ``sorted-greedy`` and ``bucketed`` each is a
      micro-batch of its own (a batch always takes its first sample), so a budget below
      every sample gives one-sample batches throughout; ``fairseq`` leaves them out.
      Not checked for ``random`` and ``length-grouped``, which take a batch size.

    >>> import numpy as np
    >>> from dflash_diag.data import ScheduleParams
    >>> w = schedule_warnings(np.array([50, 300, 900]),
    ...                       ScheduleParams(token_budget=100, max_seq_len=512))
    >>> [(x.level, x.kind, x.samples) for x in w]
    [('note', 'truncated', 1), ('warning', 'over_budget', 2)]
    """
    import numpy as np

    raw = np.asarray(source.lengths if hasattr(source, "lengths") else source, dtype=np.int64)
    n = int(raw.shape[0])
    out: list[ScheduleWarning] = []
    if not n:
        return out
    cap = params.max_seq_len
    capped = raw if cap is None else np.minimum(raw, cap)
    if cap is not None and (cut := int(np.count_nonzero(raw > cap))):
        out.append(
            ScheduleWarning(
                "note",
                "truncated",
                cut,
                n,
                f"{cut:,} of {n:,} samples ({_share(cut, n)}) are longer than max_seq_len "
                f"{cap:,}: the schedule counts each as {cap:,} tokens (truncated)",
            )
        )
    over = int(np.count_nonzero(capped > params.token_budget))
    if over and not is_sized(params.strategy):
        what = OVER_BUDGET.get(params.strategy, "the custom strategy decides what to do with them")
        after = f", even truncated to max_seq_len {cap:,}" if cap is not None else ""
        out.append(
            ScheduleWarning(
                "warning",
                "over_budget",
                over,
                n,
                f"{over:,} of {n:,} samples ({_share(over, n)}) are longer than the token "
                f"budget ({params.token_budget:,} tokens{after}): {what}",
            )
        )
    return out + _undetermined(params, n)


def _undetermined(params: ScheduleParams, n: int) -> list[ScheduleWarning]:
    """A warning when the seed decides fewer epochs than asked (torch's global generator
    with dropout not ruled out: :func:`~dflash_diag.schedule.replay.determined_epochs`)."""
    known = determined_epochs(params)
    if known is None or known >= params.epochs:
        return []
    return [
        ScheduleWarning(
            "warning",
            "undetermined",
            0,
            n,
            (f"only epochs 0..{known - 1}" if known > 1 else "only epoch 0")
            + f" of the {params.epochs} asked for follow{'' if known > 1 else 's'} "
            "from the seed: the sampler draws from torch's global generator, which dropout "
            "also draws from during training (--no-dropout if the model has none); later "
            "epochs are not replayed: record the batches during training",
        )
    ]


def check_strategy_names(names: Iterable[str], option: str = "--compare") -> list[str]:
    """Strip and validate strategy names (built-in names, or ``file.py:func``)."""
    out = [s.strip() for s in names if s.strip()]
    if not out:
        raise InputError(
            option, "no strategy named", f"give names from {', '.join(STRATEGY_NAMES)}"
        )
    bad = [s for s in out if s not in STRATEGY_NAMES and ":" not in s]
    if bad:
        raise InputError(
            option,
            f"unknown strategy {', '.join(repr(b) for b in bad)}",
            f"choose from {', '.join(STRATEGY_NAMES)} or FILE.py:FUNC",
        )
    return out


def default_batch_size(lengths: np.ndarray, params: ScheduleParams) -> int:
    """Samples per batch for ``random``/``length-grouped`` when none was given.

    ``max(1, token_budget // mean capped length)``: the batch size that holds, on average,
    the same real tokens as a budget-packed batch, so the strategies compare fairly.
    """
    import numpy as np

    x = np.asarray(lengths)
    total = _whole_sum(x, params.max_seq_len)
    if total is None:
        x = np.asarray(lengths, dtype=np.float64)
        if params.max_seq_len is not None:
            x = np.minimum(x, params.max_seq_len)
        mean = float(x.mean()) if x.shape[0] else 1.0
    else:
        mean = total / x.shape[0] if x.shape[0] else 1.0
    return max(1, int(params.token_budget // max(mean, 1.0)))


def _whole_sum(x: np.ndarray, cap: int | None) -> int | None:
    """The sum of whole-number lengths ``x`` capped at ``cap``, a chunk at a time in
    int64 (no float64 copy of the manifest); None when ``x`` is not of integers or the
    sum reaches 2**53.  Below 2**53 every partial sum of whole numbers is exact in
    float64, so ``sum / n`` is the float64 mean to the bit, in whatever order it was
    summed."""
    import numpy as np

    from ..arrays import chunks

    if x.dtype.kind not in "iu":
        return None
    total = 0
    for part in chunks(x.shape[0]):
        piece = x[part]
        if not piece.size:
            continue
        low, high = int(piece.min()), int(piece.max())
        if cap is not None and high > cap:  # (else capping changes nothing: no copy)
            piece = np.minimum(piece, cap)
            low, high = min(low, cap), cap
        # (no chunk sum can leave int64 below 2**32 a length; none is negative)
        if not (0 <= low and high < 1 << 32):
            return None
        total += int(piece.sum(dtype=np.int64))
    return total if total < 1 << 53 else None


def params_for(strategy: str, params: ScheduleParams, lengths: np.ndarray) -> ScheduleParams:
    """``params`` with ``strategy`` set, and a batch size where the strategy needs one (a
    DataLoader's own generator, ``--seeding loader``, is the random sampler's: another
    strategy is seeded once from the same seed)."""
    changes: dict[str, Any] = {"strategy": strategy}
    if params.seeding == "loader" and strategy != "random":
        changes["seeding"] = "once"
    if is_sized(strategy) and params.batch_size is None:
        changes["batch_size"] = default_batch_size(lengths, params)
    return params.replace(**changes)


def compare_strategies(
    source: Manifest | np.ndarray,
    params: ScheduleParams,
    names: Sequence[str],
    epochs: int | None = None,
    progress: Progress | None = None,
    reuse: ScheduleStats | None = None,
) -> list[ScheduleStats]:
    """Replay each named strategy with the same parameters and return their statistics.

    ``random`` and ``length-grouped`` need ``batch_size``; without one it is
    :func:`default_batch_size`.  ``progress(done, total)`` is called after each strategy.

    :param source: a manifest or an array of lengths.
    :param params: the shared schedule (its ``strategy`` is replaced by each name).
    :param names: strategy names, as ``--compare`` takes them.
    :param epochs: epochs to replay (None: ``params.epochs``).
    :param reuse: statistics already computed for ``params`` itself (same epochs), used
        for ``params.strategy`` instead of replaying it again.
    """
    from ..schedule import replay

    names = check_strategy_names(names)
    lengths = source if not hasattr(source, "lengths") else source.lengths
    out = []
    for i, name in enumerate(names):
        if reuse is not None and name == params.strategy == reuse.strategy:
            out.append(reuse)
        else:
            out.append(schedule_stats(replay(source, params_for(name, params, lengths), epochs)))
        if progress is not None:
            progress(i + 1, len(names))
    return out


def length_strip(
    replay: Replay, max_steps: int = 2000, rows: int = 32
) -> tuple[np.ndarray, np.ndarray]:
    """The lengths of each step's samples as a (rows, steps) image for a heat strip.

    Column j holds step j's sample lengths at ``rows`` evenly spaced quantiles (shortest
    at row 0, longest at the top; the "inverted CDF" rule, so every value is a real
    sample's length), so steps with many and few samples fill the same height.  Beyond
    ``max_steps`` steps only every k-th step is kept.  Returns ``(image, steps)``.
    """
    import numpy as np

    steps = replay.micro["step"].to_numpy()
    order = np.argsort(steps, kind="stable")
    ordered = steps[order]
    values = unique_values(steps)
    if values.shape[0] > max_steps:
        values = values[:: math.ceil(values.shape[0] / max_steps)]
    q = (np.arange(rows) + 0.5) / rows
    image = np.full((rows, values.shape[0]), np.nan)
    for j, step in enumerate(values):
        lo, hi = np.searchsorted(ordered, step, "left"), np.searchsorted(ordered, step, "right")
        parts = [replay.lengths[replay.batch(int(i))] for i in order[lo:hi]]
        x = np.concatenate(parts) if parts else np.zeros(0)
        if x.shape[0]:
            image[:, j] = np.quantile(x, q, method="inverted_cdf")
    return image, values
