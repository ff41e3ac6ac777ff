"""Plain data passed between the stages: RunLog, Manifest, ScheduleParams, Replay.

These are the contracts between modules.  They hold data only; the functions that make
and use them live in ``logs/``, ``manifest.py``, ``schedule/``, ``spikes/``,
``compare/`` and ``batches/``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InputError
from .storage import display, is_uri

if TYPE_CHECKING:  # pandas/numpy stay out of `--help`'s import path
    import numpy as np
    import pandas as pd

#: ``progress(done, total)``: what long work calls as it goes (the CLI draws a bar).
Progress = Callable[[int, int], None]


def display_path(path: str | Path) -> str:
    """``path`` relative to the working directory when it is under it, else as given; a
    URI as :func:`dflash_diag.storage.display` shows it (no credentials, no query).

    >>> display_path("no/such/file.log"), display_path("s3://key:secret@bkt/m.parquet")
    ('no/such/file.log', 's3://bkt/m.parquet')
    """
    if is_uri(path):
        return display(path)
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


#: Name parts that make a metric accuracy-like: its drops are what is bad.
ACC_WORDS = frozenset({"acc", "accuracy", "top1", "top5", "f1", "em", "exact_match", "bleu"})


def metric_kind(name: str) -> str:
    """``acc`` for accuracy-like metrics (higher is better), ``loss`` for loss-like
    ones, else ``other``: the one rule every command uses.  The name is split at ``_``,
    ``/``, ``-``, ``.`` and spaces; a part in :data:`ACC_WORDS` (or starting with
    ``acc``, ``acc_3``) makes it accuracy-like.

    >>> [metric_kind(n) for n in ("val_acc", "eval_accuracy", "train/acc", "acc_3")]
    ['acc', 'acc', 'acc', 'acc']
    >>> metric_kind("eval_loss"), metric_kind("grad_norm"), metric_kind("ppl")
    ('loss', 'other', 'loss')
    """
    import re

    parts = [x for x in re.split(r"[_/\-. ]+", name.lower()) if x]
    if any(x in ACC_WORDS or x.startswith("acc") for x in parts):
        return "acc"
    if any("loss" in x or x in ("ppl", "perplexity", "nll", "bpc") for x in parts):
        return "loss"
    return "other"


def spike_direction(metric: str) -> str:
    """``down`` for an accuracy-like metric (:func:`metric_kind`: a spike is a drop),
    else ``up``.

    >>> spike_direction("val_acc"), spike_direction("loss")
    ('down', 'up')
    """
    return "down" if metric_kind(metric) == "acc" else "up"


#: Columns every RunLog table has (NaN where the log did not say), in this order.
CANONICAL_COLUMNS: tuple[str, ...] = (
    "step",
    "loss",
    "acc",
    "lr",
    "grad_norm",
    "tokens",
    "tok_per_s",
    "epoch",
)

#: Batch-feature columns of ``Replay.micro`` and ``Replay.steps`` (besides the ids and
#: the ``cat_<name>`` shares), in table order.
BATCH_FEATURES: tuple[str, ...] = (
    "n_samples",
    "tokens",
    "padded_tokens",
    "min_len",
    "mean_len",
    "max_len",
    "len_std",
    "padding_eff",
)

#: No bucket edges given: ``bucketed`` derives six equal-count buckets from the manifest
#: (:func:`dflash_diag.schedule.edges.default_edges`).
DEFAULT_BUCKETS: tuple[int, ...] = ()
#: The story's bucket edges (tokens), fitted to its dataset: six buckets ``[e_i, e_{i+1})``.
STORY_BUCKETS: tuple[int, ...] = (0, 770, 1216, 1728, 2432, 3296, 8192)


@dataclass(frozen=True)
class StrategyInfo:
    """A registered ``--strategy``: its name, where it lives and its declared traits.

    :param name: the ``--strategy`` value.
    :param implementation: ``module:Class`` under :mod:`dflash_diag.schedule`.
    :param sized: it cuts batches of ``--batch-size`` samples and never reads the token
        budget (False: it packs under the budget).
    :param fixed_batches: its batches are built once and only their order changes
        between epochs, so every epoch has the same number of steps.
    :param prepare_uses_seed: its one-time preparation draws from the seed (a seed
        search must prepare it again for every seed).
    :param ids_observable: which rows of the manifest fill a batch shows in the tokens
        per step: the batches are drawn by index (a random sampler), so the same lengths
        in another row order replay other token counts.  False where batches are formed
        by length order (sorted-greedy, fairseq): there matching tokens confirm the
        lengths, never which sample ids held them.
    """

    name: str
    implementation: str
    sized: bool
    fixed_batches: bool = False
    prepare_uses_seed: bool = False
    ids_observable: bool = True


#: Every registered strategy, in the order the help lists them: the one registry from
#: which ``--strategy``'s choices, the strategy classes' traits and the tests derive.
STRATEGIES: tuple[StrategyInfo, ...] = (
    StrategyInfo(
        "sorted-greedy",
        "sorted_greedy:SortedGreedy",
        sized=False,
        fixed_batches=True,
        ids_observable=False,
    ),
    StrategyInfo("bucketed", "bucketed:Bucketed", sized=False),
    StrategyInfo("length-grouped", "length_grouped:LengthGrouped", sized=True),
    StrategyInfo(
        "fairseq",
        "fairseq:Fairseq",
        sized=False,
        fixed_batches=True,
        prepare_uses_seed=True,
        ids_observable=False,
    ),
    StrategyInfo("random", "random_batches:RandomBatches", sized=True),
    StrategyInfo("distributed", "distributed:Distributed", sized=True),
)
STRATEGY_NAMES: tuple[str, ...] = tuple(s.name for s in STRATEGIES)


def strategy_info(name: str) -> StrategyInfo | None:
    """The registered strategy ``name`` (None: not registered, e.g. ``FILE.py:FUNC``).

    >>> strategy_info("bucketed").sized, strategy_info("train.py:build") is None
    (False, True)
    """
    return next((s for s in STRATEGIES if s.name == name), None)


def registered_strategy(name: str) -> StrategyInfo:
    """:func:`strategy_info` of a name that must be registered (ValueError if not)."""
    info = strategy_info(name)
    if info is None:
        raise ValueError(f"no registered strategy {name!r}")
    return info


BUDGET_MODES: tuple[str, ...] = ("padded", "tokens")
RNG_NAMES: tuple[str, ...] = ("python", "numpy", "numpy-legacy", "torch")
SEEDINGS: tuple[str, ...] = ("once", "per-epoch", "global", "loader")
#: The seedings that are torch's generators, in words.
_TORCH_SEEDINGS = {"global": "torch's global generator", "loader": "a DataLoader's own generator"}
SHARDS: tuple[str, ...] = ("strided", "contiguous", "accelerate")


@dataclass(frozen=True, eq=False)
class RunLog:
    """A training log read into one tidy table.

    ``table`` has one row per optimizer step (per ``(rank, step)`` when all ranks were
    asked for), sorted by step, with at least the :data:`CANONICAL_COLUMNS`:

    ========== ======= =====================================================
    column     dtype   meaning (units)
    ========== ======= =====================================================
    step       int64   optimizer step as the log numbers it
    loss       float64 training loss logged at that step (NaN if none)
    acc        float64 training accuracy, fraction 0..1 (``87%`` -> 0.87)
    lr         float64 learning rate
    grad_norm  float64 gradient norm as logged (pre- or post-clip: trainer's)
    tokens     float64 tokens in the step's batch (real, not padded)
    tok_per_s  float64 throughput, tokens per second (``25.1 Ktok/s`` -> 25100)
    epoch      float64 epoch as logged (fractional for the HF Trainer)
    ========== ======= =====================================================

    Every other numeric field is kept as a snake_case float64 column (``eval_loss``,
    ``acc_0``..``acc_7``, ``elapsed``...).  With several ranks in one table there is
    an int64 ``rank`` column too.

    :param path: the file read (``-`` for standard input).
    :param format: the detected (or forced) format name.
    :param restarts: steps at which the step counter went back (a resume); the later
        values superseded the earlier ones for the steps they cover.
    :param ranks: the ranks seen in the log (``(0,)`` when there is no rank prefix).
    :param skipped: lines not used, by reason (``{"banner": 3, "traceback": 40}``).
    :param n_lines: lines (or records) read.
    :param step_source: where the step numbers came from: ``field`` (a step, iter or
        iteration field, or the file's step column), ``progress`` (a progress bar's
        counter, e.g. tqdm's ``254/9000`` beside HF dict lines) or ``line order`` (the
        records carry no step: they are numbered 1, 2, ... as logging events, which is not
        the optimizer step when the trainer logs every N steps) or ``given interval``
        (such records renumbered ``i x N`` with ``read_log(..., step_every=N)``).
    :param logged_nan: per column, a bool array over the table's rows: the log PRINTED
        the value there as NaN (``loss=nan``: a numerical failure).  Every other NaN in
        the table means "not logged at this step" (an eval metric between evaluations, a
        training metric on an eval-only row).  Infinite values are in the table as
        ``inf``.  Columns without a printed NaN are not keys.
    """

    table: pd.DataFrame
    path: str
    format: str
    restarts: tuple[int, ...] = ()
    ranks: tuple[int, ...] = (0,)
    skipped: dict[str, int] = field(default_factory=dict)
    n_lines: int = 0
    step_source: str = "field"
    logged_nan: dict[str, Any] = field(default_factory=dict)

    def logged(self, column: str) -> Any:
        """Bool per table row: ``column`` was logged there, as a number, inf or NaN.

        >>> import pandas as pd, numpy as np
        >>> t = pd.DataFrame({"step": [1, 2, 3], "loss": [2.0, np.nan, np.nan]})
        >>> RunLog(t, "x.log", "text", logged_nan={"loss": np.array([0, 0, 1], bool)}).logged(
        ...     "loss").tolist()
        [True, False, True]
        """
        import numpy as np

        values = self.table[column].to_numpy(dtype=np.float64)
        printed = self.logged_nan.get(column)
        return ~np.isnan(values) if printed is None else ~np.isnan(values) | printed


@dataclass(frozen=True, eq=False)
class Manifest:
    """Per-sample lengths of a dataset.

    :param path: the file read.
    :param lengths: int64 array, tokens per sample, indexed by dataset index (row order,
        as ``enumerate(all_lens)`` in a training script; ``sample_id`` is kept in ``ids``).
    :param ids: int64 array, the ``sample_id`` of each dataset index (``arange`` if the
        file had none).
    :param categories: int32 array of codes into ``category_names`` per dataset index,
        or None.
    :param category_names: names of the categories (e.g. ``("chat", "code", "math")``).
    :param length_column: the column the lengths came from.
    :param category_column: the column the categories came from, if any.
    :param description: where the rows and lengths came from (the reader, its order,
        e.g. ``Parquet file; lengths: ids per row of the list column 'input_ids'``).
    """

    path: str
    lengths: np.ndarray
    ids: np.ndarray
    categories: np.ndarray | None = None
    category_names: tuple[str, ...] = ()
    length_column: str = "length"
    category_column: str | None = None
    description: str = ""

    def __len__(self) -> int:
        return int(self.lengths.shape[0])


#: Whole-number ScheduleParams fields and their bounds ``(least, most)``, inclusive.
#: The upper bounds keep every size computed from them (micro-batches per step =
#: world_size x grad_accum, sample ids replayed = samples x epochs, padded tokens =
#: samples x longest) far inside int64 and keep memory from being asked for a size
#: nobody trains with: 2**40 tokens is a trillion, 2**20 ranks or accumulation steps a
#: million, 100,000 epochs.
INT_BOUNDS: dict[str, tuple[int, int]] = {
    "seed": (-(2**63), 2**64 - 1),
    "token_budget": (1, 2**40),
    "max_seq_len": (1, 2**40),
    "max_batch_size": (1, 2**40),
    "batch_size": (1, 2**40),
    "world_size": (1, 2**20),
    "grad_accum": (1, 2**20),
    "first_step": (0, 2**53),
    "epochs": (1, 100_000),
    "required_batch_size_multiple": (1, 2**20),
    "mega_batch_mult": (1, 2**20),
}
#: Fields that may be None (not given).
OPTIONAL_FIELDS: tuple[str, ...] = (
    "max_seq_len",
    "max_batch_size",
    "batch_size",
    "mega_batch_mult",
    "dropout",
)
#: True/false fields (``dropout`` may also be None: not known).
FLAGS: tuple[str, ...] = ("drop_last", "sampler_drop_last", "dropout")
#: Text fields and the names each accepts (``strategy`` also takes ``FILE.py:FUNC``).
CHOICES: dict[str, tuple[str, ...]] = {
    "strategy": STRATEGY_NAMES,
    "budget_mode": BUDGET_MODES,
    "rng": RNG_NAMES,
    "seeding": SEEDINGS,
    "shard": SHARDS,
}
#: Bucket edges are token counts in ``0..MAX_EDGE``.
MAX_EDGE = 2**40


def _is_whole(value: Any) -> bool:
    import numbers

    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def value_problem(name: str, value: Any) -> str | None:
    """What is wrong with ``value`` for the ScheduleParams field ``name``, or None.

    Whole-number fields take integers within :data:`INT_BOUNDS` (not ``"8"``, ``8.0``,
    ``true`` or ``1e308``); text fields a name from :data:`CHOICES`; ``buckets`` at least
    two increasing whole numbers in ``0..MAX_EDGE``.

    >>> value_problem("epochs", "8")
    "must be a whole number, got '8'"
    >>> value_problem("grad_accum", 2**63 - 1)
    'must be at most 1048576, got 9223372036854775807'
    """
    if value is None and name in OPTIONAL_FIELDS:
        return None
    if name in INT_BOUNDS:
        lo, hi = INT_BOUNDS[name]
        if not _is_whole(value):
            return f"must be a whole number, got {_shown(value)}"
        if int(value) < lo:
            least = {1: "a positive whole number", 0: "0 or more"}.get(lo, f"at least {lo}")
            return f"must be {least}, got {_shown(value)}"
        if int(value) > hi:
            return f"must be at most {hi}, got {_shown(value)}"
        return None
    if name in FLAGS:
        if value is None and name in OPTIONAL_FIELDS:
            return None
        return None if isinstance(value, bool) else f"must be true or false, got {_shown(value)}"
    if name in CHOICES:
        if not isinstance(value, str):
            return f"must be text, got {_shown(value)}"
        if value in CHOICES[name] or (name == "strategy" and ":" in value):
            return None
        return f"unknown value {_shown(value)}; choose from {', '.join(CHOICES[name])}"
    if name == "buckets":
        if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
            value = value.tolist()  # (a numpy array of edges)
        edges = list(value) if isinstance(value, (list, tuple)) else None
        if edges is None or not all(_is_whole(e) and 0 <= e <= MAX_EDGE for e in edges):
            return f"must be whole numbers in 0..{MAX_EDGE}, got {_shown(value)}"
        if len(edges) == 1 or any(a >= b for a, b in zip(edges, edges[1:], strict=False)):
            return f"bucket edges must be at least two increasing numbers, got {_shown(edges)}"
    return None


def _check(name: str, value: Any) -> None:
    problem = value_problem(name, value)
    if problem is not None:
        hint = "give them like 0,770,1216,1728,2432,3296,8192" if name == "buckets" else ""
        raise InputError("--" + name.replace("_", "-"), problem, hint)


@dataclass(frozen=True)
class ScheduleParams:
    """Everything needed to replay a batch schedule exactly.

    :param strategy: a name from :data:`STRATEGY_NAMES`, or ``path/to/file.py:function``
        / ``module:function`` for a user's own ``build_batches``.
    :param seed: the shuffle seed.
    :param token_budget: tokens per micro-batch (padded tokens, i.e. samples x longest,
        with ``budget_mode="padded"``; the sum of lengths with ``"tokens"``).  fairseq's
        ``max_tokens``.
    :param budget_mode: ``padded`` or ``tokens``.
    :param max_seq_len: lengths are capped at this before batching (None: no cap).
    :param max_batch_size: at most this many samples per micro-batch (None: no limit).
        fairseq's ``max_sentences``.
    :param batch_size: samples per micro-batch for ``length-grouped`` and ``random``.
    :param buckets: bucket edges in tokens for ``bucketed``; bucket i is
        ``[buckets[i], buckets[i+1])``, the last one closed above.  Empty (the default):
        six equal-count buckets of the manifest's capped lengths.
    :param rng: shuffle convention: ``python`` (``random.Random``), ``numpy``
        (``numpy.random.default_rng``), ``numpy-legacy`` (``RandomState``, as fairseq),
        ``torch`` (``torch.randperm`` on a CPU generator, replicated without torch).
    :param seeding: ``once`` (seed once, state carries across epochs), ``per-epoch``
        (seed + epoch, as ``DistributedSampler.set_epoch``) or ``global`` (``--rng torch``
        only: torch's global generator seeded once by ``torch.manual_seed(seed)``, each
        epoch's DataLoader iterator drawing its 64-bit base seed from it before the
        sampler draws; see :mod:`dflash_diag.schedule.rng`).
    :param world_size: data-parallel ranks.
    :param grad_accum: micro-batches per rank per optimizer step.
    :param shard: ``strided`` (rank r takes micro-batches r, r+W, ...), ``contiguous``
        (rank r takes the r-th contiguous block of the epoch's order) or ``accelerate``
        (strided, as accelerate's ``BatchSamplerShard``: without ``drop_last`` the epoch's
        batches are padded to a multiple of world_size from its first samples, and an
        epoch's last optimizer step takes the micro-batches left, as the HF Trainer does).
    :param first_step: number of the first optimizer step (0 or 1, as the log counts).
    :param epochs: epochs to replay.
    :param required_batch_size_multiple: fairseq's ``required_batch_size_multiple``.
    :param mega_batch_mult: HF ``get_length_grouped_indices`` megabatch multiplier
        (None: its default ``min(n // (4 * batch_size), 50)``).
    :param drop_last: the DataLoader's ``drop_last`` (the HF Trainer's
        ``dataloader_drop_last``): fixed-size strategies drop each epoch's (each rank's,
        for ``distributed``) last, short batch.
    :param sampler_drop_last: ``DistributedSampler(drop_last=...)`` for ``distributed``:
        cut the epoch to a multiple of world_size instead of padding it.
    :param dropout: whether training draws from the same global torch generator as the
        sampler (dropout on the CPU, a random collator): ``True``, ``False`` or ``None``
        (not known, taken as possibly).  With ``--seeding global`` and anything but
        ``False``, only epoch 0 is determined by the seed.
    """

    strategy: str = "sorted-greedy"
    seed: int = 0
    token_budget: int = 16384
    budget_mode: str = "padded"
    max_seq_len: int | None = None
    max_batch_size: int | None = None
    batch_size: int | None = None
    buckets: tuple[int, ...] = DEFAULT_BUCKETS
    rng: str = "python"
    seeding: str = "once"
    world_size: int = 1
    grad_accum: int = 1
    shard: str = "strided"
    first_step: int = 0
    epochs: int = 1
    required_batch_size_multiple: int = 1
    mega_batch_mult: int | None = None
    drop_last: bool = False
    sampler_drop_last: bool = False
    dropout: bool | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            _check(f.name, getattr(self, f.name))
        for name in INT_BOUNDS:  # (numpy integers become ints)
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, int(value))
        object.__setattr__(self, "buckets", tuple(int(b) for b in self.buckets))
        if self.seeding in ("global", "loader") and self.rng != "torch":
            raise InputError(
                "--seeding",
                f"'{self.seeding}' is {_TORCH_SEEDINGS[self.seeding]}, got --rng {self.rng}",
                "give --rng torch",
            )
        if self.seeding == "loader" and self.strategy != "random":
            raise InputError(
                "--seeding",
                "'loader' is a DataLoader's own generator drawn by its RandomSampler",
                "give --strategy random",
            )

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def replace(self, **changes: Any) -> ScheduleParams:
        """A copy with some fields changed (validated again)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return ScheduleParams(**values)


@dataclass(frozen=True, eq=False)
class Replay:
    """The exact schedule a run saw: which samples every micro-batch and step held.

    Sample membership is stored flat: micro-batch ``i`` (a row of ``micro``) holds the
    dataset indices ``sample_ids[offsets[i]:offsets[i + 1]]``.

    ``micro`` has one row per micro-batch, in schedule order, with columns
    ``epoch, step, rank, micro, batch_id, n_samples, tokens, padded_tokens, min_len,
    mean_len, max_len, len_std, padding_eff`` and, with categories, ``cat_<name>``
    (share of the micro-batch's samples in that category).  ``tokens`` is the sum of the
    (capped) lengths, ``padded_tokens`` = n_samples x max_len, ``padding_eff`` =
    tokens / padded_tokens.  ``batch_id`` identifies the composition (the set of
    sample ids): the same samples coming back in another epoch get the same id.

    ``steps`` has one row per optimizer step (``world_size x grad_accum`` micro-batches
    pooled), columns ``step, epoch, n_micro, n_samples, tokens, padded_tokens, min_len,
    mean_len, max_len, len_std, padding_eff`` and the ``cat_<name>`` shares, where
    ``mean_len`` and ``len_std`` are over the step's samples and ``padding_eff`` is
    tokens / padded_tokens over its micro-batches.

    :param params: the schedule replayed.
    :param lengths: int64, capped lengths by dataset index (what the strategy saw).
    :param category_names: category names behind the ``cat_<name>`` columns.
    :param dropped: what was left out by a documented rule, summed over epochs:
        ``incomplete_last_step_micro_batches`` and ``incomplete_last_step_samples`` (an
        epoch's last step with fewer than world_size x grad_accum micro-batches), for
        fairseq ``samples_over_budget`` and ``batch_size_multiple_tail_samples``, for
        ``--drop-last`` ``drop_last_samples``, for ``distributed``
        ``sampler_drop_last_samples``; samples added are counted negative:
        ``distributed_padding_samples`` (DistributedSampler's padding) and
        ``even_batches_samples`` (accelerate's even batches).
    :param determined_epochs: None when every epoch asked for is determined by the
        schedule; else how many are (the replay holds only those): with ``--seeding
        global`` and ``dropout`` not ``False``, training drew from the sampler's generator
        during epoch 0, so epochs 1, 2, ... cannot be derived from the seed.
    """

    params: ScheduleParams
    lengths: np.ndarray
    sample_ids: np.ndarray
    offsets: np.ndarray
    micro: pd.DataFrame
    steps: pd.DataFrame
    category_names: tuple[str, ...] = ()
    dropped: dict[str, int] = field(default_factory=dict)
    determined_epochs: int | None = None

    def batch(self, i: int) -> np.ndarray:
        """Dataset indices of micro-batch ``i`` (row ``i`` of ``micro``)."""
        return self.sample_ids[self.offsets[i] : self.offsets[i + 1]]
