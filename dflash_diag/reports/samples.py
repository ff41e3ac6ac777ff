"""``dflash-diag samples``: every sample of the run, ranked by how high its batches are
wherever it goes, with the ground it rests on (:func:`samples_report`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError
from .common import Context, Stage, quiet
from .spikes import PointsRead, SpikesOptions, high_kinds_of, read_points, sample_losses

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from ..composition import Composition, Request
    from ..samples.kinds import HighKind
    from ..spikes.culprits import SampleFindings
    from ..spikes.detect import Detection

#: The suffixes ``--to`` writes.
TO_SUFFIXES = (".parquet", ".csv")

#: Columns of :attr:`SamplesReport.table`, in order.
COLUMNS = (
    "sample_id",
    "length",
    "category",
    "appearances",
    "high",
    "min_z",
    "score",
    "p",
    "q",
    "named",
    "unit",
    "group_size",
    "ground",
    "measured_excess",
)


@dataclass(frozen=True, eq=False)
class SamplesReport:
    """Everything ``samples`` shows.

    ``table`` has one row per sample of the dataset, most suspect first (by ``q``, then
    ``score``; untested samples last):

    =============== ======== =======================================================
    column          dtype    meaning (units)
    =============== ======== =======================================================
    sample_id       int64    the manifest's ``sample_id`` (else the dataset index)
    length          int64    real tokens (capped at ``max_seq_len``)
    category        category the manifest's category (object None: none)
    appearances     int64    logged points whose batches held it
    high            int64    of those, with z >= 2
    min_z           float64  its lowest z over them
    score           float64  the z it was tested on (second-lowest: one may be ordinary)
    p, q            float64  exact p under shuffled points; Benjamini-Hochberg q
    named           bool     named at the false-discovery rate (``q <= 0.05``)
    unit            category ``sample``, or ``group`` when it always travels with others
    group_size      int64    samples in its group (1: it can be told apart)
    ground          category ``inferred`` (group testing over the logged points)
    measured_excess float64  its own loss over its batch mates' median (nats per token),
                             median over its appearances, where the recorder measured
                             per-sample losses (NaN elsewhere)
    =============== ======== =======================================================

    :param context: where the inputs came from.
    :param detection: the log's points the samples were tested over.
    :param composition: what each step held.
    :param findings: the per-sample evidence behind the table (the same as
        ``spikes_report(...).attribution.samples``).
    :param written: the file ``to`` wrote (None: none).
    :param high_kinds: the categories whose samples are high as a whole, on measured
        ground (:func:`~dflash_diag.samples.kinds.high_kinds`).
    """

    context: Context
    detection: Detection
    composition: Composition
    findings: SampleFindings
    table: pd.DataFrame
    written: str | None = None
    high_kinds: tuple[HighKind, ...] = ()


def samples_report(
    log: str | Path,
    options: SpikesOptions | None = None,
    batches: Request | None = None,
    to: str | Path | None = None,
    stage: Stage = quiet,
) -> SamplesReport:
    """Rank every sample of the run (``dflash-diag samples``): the spikes report of the
    log, then its per-sample evidence as one table, written to ``to`` (Parquet or CSV)
    when given.

    :raises InputError: no composition (nothing says which samples each step held), or
        ``to`` that cannot be written (checked before the analysis).
    """
    from ..data import display_path
    from ..outpath import check_output_path, write_table

    out = None
    if to is not None:
        out = check_output_path(to, TO_SUFFIXES, "output", protect=_inputs(log, batches))
    o = options or SpikesOptions()
    read = read_points(log, o, batches, stage)
    comp = read.composition
    if comp is None:
        raise InputError(
            str(log),
            "no composition: nothing says which samples each step held",
            "give --composition FILE (a recording), or --manifest and the run's schedule",
        )
    findings = _findings(read, comp, o, stage)
    table = sample_table(findings, comp)
    if out is not None:
        write_table(table, out)
    where = display_path(out) if out else None
    kinds = high_kinds_of(findings, comp)
    return SamplesReport(read.context, read.detection, comp, findings, table, where, kinds)


def _findings(
    read: PointsRead, comp: Composition, o: SpikesOptions, stage: Stage
) -> SampleFindings:
    """The per-sample test on the points, as ``spikes`` runs it, without its verdicts."""
    from ..spikes.attribute import samples_only

    measured = sample_losses(comp, o.ground)
    with stage("testing the samples"):
        findings, _ = samples_only(
            read.detection, comp.replay, o.covers, read.metric_rank, comp.ids, measured
        )
    return findings


def _inputs(log: str | Path, batches: Request | None) -> list[str | Path]:
    """The files the report reads: the log, and what its composition is read from,
    named or found beside the log (a config's manifest, a recording)."""
    from dataclasses import replace

    from ..composition import Request, resolve

    named = (
        [x for x in (batches.manifest, batches.composition, batches.config) if x] if batches else []
    )
    return [log, *named, *resolve(replace(batches or Request(), log=str(log))).inputs]


def sample_table(findings: SampleFindings, comp: Composition) -> pd.DataFrame:
    """:attr:`SamplesReport.table` (its columns and order in the class docstring).

    The order is found on the score and q arrays first, and each column taken in it
    once; the strings are categoricals (codes taken, not 10M strings made)."""
    import numpy as np
    import pandas as pd

    t = findings.evidence.table
    n = len(t)
    score, q = t["score"].to_numpy(dtype=np.float64), t["q"].to_numpy(dtype=np.float64)
    order = table_order(score, q)
    ids = None if findings.ids is None else np.asarray(findings.ids)  # None: 0 .. n - 1
    named = np.zeros(n, dtype=bool)
    for members in findings.named["members"]:
        named[list(members)] = True
    size = t["group_size"].to_numpy()[order]

    def col(values: np.ndarray, dtype: type) -> np.ndarray:
        return np.asarray(values)[order].astype(dtype, copy=False)

    return pd.DataFrame(
        {
            "sample_id": order.astype(np.int64) if ids is None else col(ids, np.int64),
            "length": col(comp.replay.lengths[:n], np.int64),
            "category": _categories(comp, n, order),
            "appearances": col(t["appearances"].to_numpy(), np.int64),
            "high": col(t["high"].to_numpy(), np.int64),
            "min_z": col(t["min_z"].to_numpy(), np.float64),
            "score": score[order],
            "p": col(t["p"].to_numpy(), np.float64),
            "q": q[order],
            "named": named[order],
            "unit": pd.Categorical.from_codes((size > 1).astype(np.int8), ["sample", "group"]),
            "group_size": size.astype(np.int64, copy=False),
            "ground": pd.Categorical.from_codes(np.zeros(n, np.int8), [findings.evidence.ground]),
            "measured_excess": _measured_excess(comp, n, order),
        },
        copy=False,  # (each column is a new array already)
    )


def table_order(score: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The rows by ``q`` ascending, then ``score`` descending, then row (NaN last in
    both): ``np.lexsort((-score, q))``, int64.

    Each key is replaced by its rank among its distinct values (a hash of the values,
    then a sort of the distinct ones: q-values take few), and the ranks and the row
    packed into one unsigned integer whose values are sorted (no arg-sort, no sort of a
    float as long as the table); :func:`np.lexsort` when they do not fit in 64 bits."""
    import numpy as np

    descending = np.negative(score)  # (NaN last: one array, made in place)
    descending[np.isnan(descending)] = np.inf
    descending += 0.0  # (-0.0 is 0.0: a tie, as lexsort sees it)
    n = q.size
    q_rank, n_q = _dense_rank(q)
    s_rank, n_s = _dense_rank(descending)
    if n_q * n_s * max(n, 1) >= 2**64:
        if max(n_q, n_s) * n >= 2**64:
            return np.lexsort((descending, q))
        return _by_ranks(q_rank, s_rank)
    key = q_rank.astype(np.uint64)  # ((q rank x n_s + score rank) x n + row, in place)
    del q_rank
    key *= np.uint64(n_s)
    key += s_rank.astype(np.uint64, copy=False)
    del s_rank
    key *= np.uint64(n)
    key += np.arange(n, dtype=np.uint64)
    key.sort()
    key %= np.uint64(max(n, 1))
    return key.view(np.int64)  # (rows < 2**63: the same values)


def _by_ranks(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """``np.lexsort((second, first))`` of two rank arrays (ints >= 0 whose counts times
    the rows fit in 64 bits): the rows by ``second`` then row (a sort of the unique keys
    ``second x n + row``), then that order by ``first`` then position in it."""
    import numpy as np

    n = first.size
    size = np.uint64(max(n, 1))
    key = second.astype(np.uint64)
    key *= size
    key += np.arange(n, dtype=np.uint64)
    key.sort()
    key %= size
    order = key.view(np.int64)
    key = first[order].astype(np.uint64)
    key *= size
    key += np.arange(n, dtype=np.uint64)
    key.sort()
    key %= size
    return order[key.view(np.int64)]


def _dense_rank(x: np.ndarray) -> tuple[np.ndarray, int]:
    """The rank of each value among the distinct values of ``x`` (float64; NaN after
    every number), int64, and how many ranks there are."""
    import numpy as np
    import pandas as pd

    codes, distinct = pd.factorize(x, use_na_sentinel=True)
    rank_of_code = np.empty(distinct.size + 1, dtype=np.int64)  # (the last: NaN's, -1)
    rank_of_code[np.argsort(distinct)] = np.arange(distinct.size, dtype=np.int64)
    rank_of_code[-1] = distinct.size
    return rank_of_code[codes], distinct.size + 1


def _categories(comp: Composition, n: int, order: np.ndarray) -> object:
    """The manifest's category of each sample, in ``order``: a categorical of its
    names, or None throughout without categories."""
    import numpy as np
    import pandas as pd

    m = comp.manifest
    if m is None or m.categories is None or not m.category_names:
        return np.full(n, None, dtype=object)
    codes = np.asarray(m.categories)[:n][order]
    return pd.Categorical.from_codes(codes, list(m.category_names))


def _measured_excess(comp: Composition, n: int, order: np.ndarray) -> np.ndarray:
    """Per sample in ``order``, the median over its entries of (its loss - the median
    loss of its micro-batch), nats per token; NaN without measured losses (no gather)."""
    import numpy as np

    from ..samples import Membership, batch_residual, sample_medians

    loss = comp.sample_loss
    if loss is None or not np.isfinite(loss).any():
        return np.full(n, np.nan)
    rep = comp.replay
    micro = Membership(np.asarray(rep.offsets, dtype=np.int64), rep.sample_ids, len(rep.lengths))
    excess = batch_residual(micro, loss, min_entries=1)
    return sample_medians(rep.sample_ids, excess, len(rep.lengths))[:n][order]
