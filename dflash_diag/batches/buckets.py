"""Bucket edges for the ``bucketed`` strategy that waste the least padding.

Four ways to choose ``K`` buckets from a manifest's (capped) lengths, each for
``k = 1..K`` so the trade-off is visible:

- ``dp-edge``: exact dynamic programming over the length histogram minimising the
  padding of *pad-to-bucket-edge* (every sample padded to the longest length of its
  bucket).  With the ``U`` distinct lengths ``L_1 < ... < L_U``, counts ``c_u``, and
  prefix sums ``C`` (counts) and ``S`` (tokens), a bucket ``(L_a, L_b]`` costs
  ``cost(a, b) = L_b (C_b - C_a) - (S_b - S_a)`` padded-but-empty tokens, and
  ``D[k][b] = min_{a<b} D[k-1][a] + cost(a, b)``; ``O(K U^2)`` in numpy blocks, pruned
  by the monotone split points of a Monge cost, with ``U <= max_seq_len``.
- ``dp-batch-max``: the same DP with each bucket's padding modelled per *batch*: a batch
  of ``n`` samples is padded to its longest, near the ``n/(n+1)`` quantile of the
  bucket, with ``n`` set by the token budget (:func:`expected_batch_max`).
- ``lhotse``: lhotse's ``estimate_duration_buckets``: equal total tokens per bucket
  (sorted lengths; a new edge at the first length reached once the running sum
  exceeds ``sum / K``), upper-inclusive as its ``bisect_left``.
- ``quantile``: equal numbers of samples per bucket (the ``j/K`` quantiles).

Real padding is to each *batch's* longest sample, not the bucket edge, so what matters is
the distribution of batch maxima (for ``n`` samples a batch max has density
``n f(x) F(x)^(n-1)``): where batches hold few samples (the long tail) their maxima sit
well below the edge, and pad-to-edge over-weights the tail.  Pad-to-edge is an upper
bound on the padding of any batch packed inside one bucket, so its efficiency is a lower
bound.  Every edge set is therefore also *simulated*: the bucketed strategy is replayed
with it for one epoch, and the recommendation for each ``k`` is the option with the best
simulated padding efficiency (:meth:`BucketPlan.recommended`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..data import Progress, ScheduleParams
from ..errors import InputError
from ..schedule.edges import (
    Histogram,
    edges_from_uppers,
    length_histogram,
    quantile_uppers,
)

if TYPE_CHECKING:
    import numpy as np

    from ..data import Manifest


METHODS: tuple[str, ...] = ("dp-batch-max", "dp-edge", "lhotse", "quantile")
#: Above this many samples, simulations replay a uniform random subsample of this size.
SIMULATION_SAMPLES = 200_000
#: Candidate edges of the batch-max DP (its cost matrix is GRID x GRID).
GRID = 1024
#: Rows of the DP's cost matrix computed at once (memory ~ 8 x this x U bytes).
_BLOCK = 256


@dataclass(frozen=True)
class BucketOption:
    """One edge set and what it costs.

    :param method: a name from :data:`METHODS`.
    :param k: buckets asked for; ``boundaries`` may hold fewer when lengths repeat.
    :param boundaries: edges for ``--buckets``: bucket i is ``[e_i, e_{i+1})``, the last
        one closed above.
    :param model_efficiency: real tokens / pad-to-bucket-edge tokens (a lower bound).
    :param batch_max_efficiency: real tokens / tokens padded to the modelled batch
        maxima (:func:`batch_max_efficiency`).
    :param padding_efficiency: simulated: real / padded tokens of the bucketed strategy
        replayed with these edges (None when not simulated).
    :param training_seconds: :func:`training_time` at the simulated efficiency, when a
        throughput was given.
    """

    method: str
    k: int
    boundaries: tuple[int, ...]
    model_efficiency: float
    batch_max_efficiency: float
    padding_efficiency: float | None = None
    training_seconds: float | None = None


@dataclass(frozen=True)
class BucketPlan:
    """All options for ``k = 1..K`` and the figures behind them.

    :param options: every (method, k), methods in :data:`METHODS` order, k ascending.
    :param n_samples: samples in the manifest; ``n_distinct``: distinct capped lengths.
    :param simulated_samples: samples each simulation replayed (a uniform subsample when
        the manifest is larger than :data:`SIMULATION_SAMPLES`).
    :param real_tokens_per_epoch: sum of capped lengths (tokens).
    :param epochs: epochs the training times are for; ``throughput``: padded tokens/s.
    """

    options: tuple[BucketOption, ...]
    n_samples: int
    n_distinct: int
    simulated_samples: int
    real_tokens_per_epoch: int
    epochs: int
    throughput: float | None = None

    def best(self, method: str = "dp-batch-max") -> list[BucketOption]:
        """The options of one method, k ascending."""
        return [o for o in self.options if o.method == method]

    def recommended(self) -> list[BucketOption]:
        """Per k, the option with the best simulated padding efficiency (the best
        batch-max model efficiency when not simulated); ties go to :data:`METHODS` order."""
        out = []
        for k in sorted({o.k for o in self.options}):
            same_k = [o for o in self.options if o.k == k]
            out.append(
                max(
                    same_k,
                    key=lambda o: (
                        o.padding_efficiency
                        if o.padding_efficiency is not None
                        else o.batch_max_efficiency,
                        -METHODS.index(o.method),
                    ),
                )
            )
        return out


def optimal_uppers(hist: Histogram, k_max: int) -> list[list[int]]:
    """Exact minimum pad-to-edge bucketings for ``k = 1..k_max``: per k, the bucket
    upper lengths (inclusive, ascending; the last is the longest length).

    With ``k >= U`` every distinct length is its own bucket (no padding).
    """
    import numpy as np

    values = hist.values.astype(np.float64)
    u = values.shape[0]
    if u == 0:
        return [[] for _ in range(k_max)]
    c = np.concatenate([[0.0], np.cumsum(hist.counts, dtype=np.float64)])
    s = np.concatenate([[0.0], np.cumsum(hist.values * hist.counts, dtype=np.float64)])
    # D[k][b]: least padding putting the first b distinct lengths into k buckets
    prev = np.full(u + 1, np.inf)
    prev[0] = 0.0
    choice = np.zeros((k_max, u + 1), dtype=np.int64)
    out: list[list[int]] = []
    for k in range(k_max):
        cur = np.full(u + 1, np.inf)
        a_lo = 0
        for lo in range(1, u + 1, _BLOCK):
            b = np.arange(lo, min(lo + _BLOCK, u + 1))
            # The cost is Monge (cost(a,d) + cost(b,c) >= cost(a,c) + cost(b,d)), so the
            # leftmost best split never moves left as b grows: start at the last one.
            a = np.arange(a_lo, int(b[-1]))
            # cost of bucket (a, b]: every length in it padded to L_b (values[b - 1])
            cost = values[b - 1, None] * (c[b, None] - c[None, a]) - (s[b, None] - s[None, a])
            total = prev[None, a] + np.where(a[None, :] < b[:, None], cost, np.inf)
            best = np.argmin(total, axis=1)
            cur[b] = total[np.arange(b.shape[0]), best]
            choice[k, b] = a[best]
            a_lo = int(a[best[-1]])
        # "at most k+1 buckets": keep the previous layer where it is as good (-1 marks it)
        same = prev <= cur
        cur[same] = prev[same]
        choice[k, same] = -1
        prev = cur
        uppers = []
        end, kk = u, k
        while end > 0:
            split = int(choice[kk, end])
            kk -= 1
            if split >= 0:
                uppers.append(int(hist.values[end - 1]))
                end = split
        out.append(sorted(uppers))
    return out


def expected_batch_max(
    hist: Histogram,
    lo: np.ndarray,
    hi: np.ndarray,
    params: ScheduleParams,
) -> np.ndarray:
    """Modelled longest sample of a batch packed from bucket ``(L_lo, L_hi]`` (indices
    into the distinct lengths, ``lo < hi``, any broadcastable shapes); NaN for ``n = 1``.

    A batch of ``n`` samples drawn from the bucket has its longest near the
    ``n / (n + 1)`` quantile of the bucket's lengths (exact in expectation for a uniform
    distribution).  ``n`` follows the budget: ``padded`` mode ``budget // longest``
    (starting from the bucket's edge, then once more from the first estimate),
    ``tokens`` mode ``budget // mean``, capped by ``max_batch_size``.
    """
    import numpy as np

    values = hist.values.astype(np.float64)
    c = np.concatenate([[0.0], np.cumsum(hist.counts, dtype=np.float64)])
    s = np.concatenate([[0.0], np.cumsum(hist.values * hist.counts, dtype=np.float64)])
    cap = params.max_batch_size or np.inf
    budget = float(params.token_budget)
    c_lo, c_hi = c[lo], c[hi]

    def quantile(n: np.ndarray) -> np.ndarray:
        target = c_lo + (c_hi - c_lo) * (n / (n + 1))
        idx = np.searchsorted(c, np.ravel(target), side="left").reshape(np.shape(target))
        return values[np.clip(idx, 1, values.shape[0]) - 1]

    if params.budget_mode == "tokens":
        mean = (s[hi] - s[lo]) / np.maximum(c_hi - c_lo, 1.0)
        n = np.minimum(np.maximum(np.floor(budget / np.maximum(mean, 1.0)), 1.0), cap)
    else:
        n = np.minimum(np.maximum(np.floor(budget / np.maximum(values[hi - 1], 1.0)), 1), cap)
        first = quantile(n)
        n = np.minimum(np.maximum(np.floor(budget / np.maximum(first, 1.0)), 1.0), cap)
    return np.where(n > 1, quantile(n), np.nan)


def batch_max_uppers(hist: Histogram, k_max: int, params: ScheduleParams) -> list[list[int]]:
    """Exact DP for ``k = 1..k_max`` buckets under the batch-max padding model.

    A bucket's cost is ``sum_u c_u max(M - L_u, 0)`` with ``M`` from
    :func:`expected_batch_max` (0 when batches hold one sample).  The cost matrix is
    computed once over at most :data:`GRID` candidate edges (every distinct length when
    there are fewer, else every ``ceil(U / GRID)``-th one and the longest), so the DP is
    exact on that grid and ``O(K GRID^2)``.
    """
    import numpy as np

    u = hist.values.shape[0]
    if u == 0:
        return [[] for _ in range(k_max)]
    step = max(1, math.ceil(u / GRID))
    grid = np.unique(np.concatenate([np.arange(0, u + 1, step), [u]]))  # split positions
    c = np.concatenate([[0.0], np.cumsum(hist.counts, dtype=np.float64)])
    s = np.concatenate([[0.0], np.cumsum(hist.values * hist.counts, dtype=np.float64)])
    lo, hi = grid[:, None], grid[None, :]
    valid = lo < hi
    lo_b, hi_b = np.broadcast_arrays(lo, np.maximum(hi, lo + 1))
    hi_b = np.minimum(hi_b, u)
    m = expected_batch_max(hist, lo_b, hi_b, params)
    # samples shorter than M are padded up to it; longer ones are their batch's longest
    j = np.clip(np.searchsorted(hist.values, np.nan_to_num(m, nan=0.0), side="left"), lo_b, hi_b)
    cost = np.where(np.isnan(m), 0.0, m * (c[j] - c[lo_b]) - (s[j] - s[lo_b]))
    cost = np.where(valid, np.maximum(cost, 0.0), np.inf)
    g = grid.shape[0]
    prev = np.full(g, np.inf)
    prev[0] = 0.0
    choice = np.full((k_max, g), -1, dtype=np.int64)
    out: list[list[int]] = []
    for k in range(k_max):
        total = prev[:, None] + cost  # total[a, b]: best of k buckets to a, then (a, b]
        best = np.argmin(total, axis=0)
        cur = total[best, np.arange(g)]
        choice[k] = best
        same = prev <= cur  # at most k+1 buckets
        cur[same] = prev[same]
        choice[k, same] = -1
        prev = cur
        uppers = []
        b, kk = g - 1, k
        while b > 0:
            a = int(choice[kk, b])
            kk -= 1
            if a >= 0:
                uppers.append(int(hist.values[grid[b] - 1]))
                b = a
        out.append(sorted(uppers))
    return out


def lhotse_uppers(hist: Histogram, k: int) -> list[int]:
    """lhotse ``estimate_duration_buckets`` on the histogram, as bucket upper lengths.

    Its rule over the sorted lengths: ``if tot > size_per_bucket: bins.append(size);
    tot = 0`` before adding each ``size``, ``size_per_bucket = sum / k``; bucket i is
    ``(bins[i-1], bins[i]]``.  Runs of equal lengths are stepped arithmetically.
    """
    if hist.values.shape[0] == 0:
        return []
    per_bucket = hist.tokens / k
    bins: list[int] = []
    tot = 0.0
    for length, count in zip(hist.values.tolist(), hist.counts.tolist(), strict=True):
        left = count
        while left:
            if tot > per_bucket:
                bins.append(length)
                tot = 0.0
            if length == 0:
                break
            # items added before the running sum next exceeds the target
            fit = int((per_bucket - tot) // length) + 1
            step = min(fit, left)
            tot += step * length
            left -= step
    uppers = sorted(set(bins) | {int(hist.values[-1])})
    return uppers


def pad_to_edge_efficiency(hist: Histogram, uppers: list[int]) -> float:
    """Real tokens / tokens when every sample is padded to its bucket's upper length."""
    import numpy as np

    if not uppers:
        return math.nan
    edge = np.asarray(uppers, dtype=np.int64)[
        np.searchsorted(np.asarray(uppers), hist.values, side="left")
    ]
    padded = float((edge * hist.counts).sum())
    return hist.tokens / padded if padded else math.nan


def batch_max_efficiency(hist: Histogram, uppers: list[int], params: ScheduleParams) -> float:
    """Real tokens / tokens padded to each bucket's modelled batch maximum.

    Per bucket, samples shorter than :func:`expected_batch_max` are padded up to it and
    longer ones are their batch's longest; buckets whose batches hold one sample cost 0.
    """
    import numpy as np

    if not uppers:
        return math.nan
    c = np.concatenate([[0.0], np.cumsum(hist.counts, dtype=np.float64)])
    s = np.concatenate([[0.0], np.cumsum(hist.values * hist.counts, dtype=np.float64)])
    hi = np.searchsorted(hist.values, np.asarray(uppers), side="right")
    lo = np.concatenate([[0], hi[:-1]])
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    m = expected_batch_max(hist, lo, hi, params)
    j = np.clip(np.searchsorted(hist.values, np.nan_to_num(m, nan=0.0), side="left"), lo, hi)
    pad = np.where(np.isnan(m), 0.0, m * (c[j] - c[lo]) - (s[j] - s[lo]))
    return hist.tokens / (hist.tokens + float(np.maximum(pad, 0.0).sum()))


def parse_throughput(text: str | float) -> float:
    """``"25.1k"`` -> 25100.0 tokens/s (suffixes k, M, G; ``_`` and ``,`` ignored).

    >>> parse_throughput("25.1k")
    25100.0
    """
    raw = str(text).strip().replace("_", "").replace(",", "")
    m = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)([kKmMgG]?)(?:tok/s)?", raw)
    if not m:
        raise InputError(
            "--throughput", f"not a throughput: {text!r}", "give tokens per second like 25.1k"
        )
    scale = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()]
    value = float(m.group(1)) * scale
    if value <= 0:
        raise InputError("--throughput", f"must be above 0, got {text!r}", "")
    return value


def training_time(
    total_real_tokens_per_epoch: float, epochs: int, efficiency: float, throughput: float
) -> float:
    """Seconds to train: ``real tokens x epochs / (throughput x efficiency)``.

    ``throughput`` is padded tokens per second (the rate at 100% efficiency), so at
    efficiency ``e`` only ``e x throughput`` of them are real.

    >>> training_time(25_100 * 86_400, 1, 0.5, 25_100) / 86_400   # days
    2.0
    """
    if efficiency <= 0 or throughput <= 0:
        return math.inf
    return total_real_tokens_per_epoch * epochs / (throughput * efficiency)


def _simulate(lengths: np.ndarray, params: ScheduleParams, edges: tuple[int, ...]) -> float:
    """Simulated padding efficiency of ``bucketed`` with ``edges`` (one epoch).

    Shuffles use numpy's generator whatever ``--rng`` says: padding depends on the
    distribution of the shuffle, not on which generator drew it, and numpy's is ~10x
    faster than Python's ``random.shuffle``.
    """
    from ..schedule import replay

    sim = params.replace(strategy="bucketed", buckets=edges, epochs=1, rng="numpy")
    r = replay(lengths, sim, epochs=1)
    real = float(r.micro["tokens"].sum())
    padded = float(r.micro["padded_tokens"].sum())
    return real / padded if padded else math.nan


def optimize_buckets(
    source: Manifest | np.ndarray,
    params: ScheduleParams,
    k_max: int,
    throughput: float | None = None,
    epochs: int | None = None,
    simulate: bool = True,
    simulation_samples: int = SIMULATION_SAMPLES,
    progress: Progress | None = None,
) -> BucketPlan:
    """Bucket edges for ``k = 1..k_max`` by every method in :data:`METHODS`, modelled
    and simulated.

    Simulation replays ``bucketed`` with ``params`` (one epoch, on a uniform subsample
    of ``simulation_samples`` samples drawn with ``params.seed`` when the manifest is
    larger: within a bucket the packer sees a shuffled stream, which a subsample
    reproduces in distribution).  Identical edge sets are simulated once.

    :param source: a manifest or an array of lengths.
    :param params: the schedule (budget, cap, seed); its strategy and buckets are ignored.
    :param k_max: the largest number of buckets (>= 1).
    :param throughput: padded tokens per second, for :func:`training_time` (at the
        simulated efficiency, or the batch-max model's when not simulated).
    :param epochs: epochs for the training time (None: ``params.epochs``).

    >>> import numpy as np
    >>> plan = optimize_buckets(np.array([10, 10, 20, 90]), ScheduleParams(), 2,
    ...                         simulate=False)
    >>> [(o.k, o.boundaries) for o in plan.best("dp-edge")]
    [(1, (0, 90)), (2, (0, 21, 90))]
    """
    import numpy as np

    if int(k_max) < 1:
        raise InputError(
            "--optimize-buckets", f"must be 1 or more, got {k_max}", "give the most buckets, e.g. 6"
        )
    lengths = np.asarray(getattr(source, "lengths", source), dtype=np.int64)
    if lengths.shape[0] == 0:
        raise InputError("--optimize-buckets", "the manifest has no samples", "")
    hist = length_histogram(lengths, params.max_seq_len)
    epochs = params.epochs if epochs is None else epochs
    sim_lengths = lengths
    if simulate and lengths.shape[0] > simulation_samples:
        pick = np.random.default_rng(params.seed).choice(
            lengths.shape[0], simulation_samples, replace=False
        )
        sim_lengths = lengths[np.sort(pick)]
    uppers = {
        "dp-batch-max": batch_max_uppers(hist, k_max, params),
        "dp-edge": optimal_uppers(hist, k_max),
        "lhotse": [lhotse_uppers(hist, k) for k in range(1, k_max + 1)],
        "quantile": [quantile_uppers(hist, k) for k in range(1, k_max + 1)],
    }
    options: list[BucketOption] = []
    done, total = 0, len(METHODS) * k_max
    simulated: dict[tuple[int, ...], float] = {}
    for method in METHODS:
        for k, ups in enumerate(uppers[method], start=1):
            edges = edges_from_uppers(ups, params.max_seq_len)
            modelled = batch_max_efficiency(hist, ups, params)
            sim = None
            if simulate:
                if edges not in simulated:
                    simulated[edges] = _simulate(sim_lengths, params, edges)
                sim = simulated[edges]
            seconds = None
            if throughput is not None:
                eff = sim if sim is not None else modelled
                seconds = training_time(hist.tokens, epochs, eff, throughput)
            options.append(
                BucketOption(
                    method,
                    k,
                    edges,
                    pad_to_edge_efficiency(hist, ups),
                    modelled,
                    sim,
                    seconds,
                )
            )
            done += 1
            if progress is not None:
                progress(done, total)
    return BucketPlan(
        options=tuple(options),
        n_samples=int(lengths.shape[0]),
        n_distinct=int(hist.values.shape[0]),
        simulated_samples=int(sim_lengths.shape[0]) if simulate else 0,
        real_tokens_per_epoch=hist.tokens,
        epochs=int(epochs),
        throughput=throughput,
    )
