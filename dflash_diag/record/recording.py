"""Read a batch recording back: one table, and the Replay every analysis takes.

>>> import tempfile, os
>>> from dflash_diag.record import BatchRecorder
>>> path = os.path.join(tempfile.mkdtemp(), "train.batches")
>>> with BatchRecorder(path, world_size=1, rank=0) as rec:
...     for step, ids in enumerate([[0, 1], [2, 3], [1, 0], [3, 2]]):
...         rec.log(step, ids, [10 * (i + 1) for i in ids])
>>> r = read_recording(path).to_replay()
>>> r.micro[["epoch", "step", "batch_id", "tokens"]].values.tolist()
[[0, 0, 0, 30], [0, 1, 1, 70], [1, 2, 0, 30], [1, 3, 1, 70]]
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..storage import stage
from .fileformat import decode_blocks, resolve_lengths, scan_frames
from .recorder import RECORD_SUFFIX

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    import pandas as pd

    from ..data import Manifest, Replay, ScheduleParams

#: the table's columns: int64, then the float64 ``loss``
COLUMNS = ("step", "rank", "micro", "sample_id", "length", "loss")


@dataclass(frozen=True, eq=False)
class Recording:
    """What a run recorded: one row per sample of every micro-batch.

    The rows are kept as arrays (``heads``, ``sample_id``, ``length``, ``loss``, 21 bytes
    a row); :attr:`table` is their one table, built the first time it is asked for.
    Rows come in (step, rank, micro) order and, within a micro-batch, in ascending
    sample id (the order inside a micro-batch is not kept).

    :param header: the first header of the (lowest rank's) file: ``format_version``,
        ``dflash_diag`` (version that wrote it), ``rank``, ``world_size``, ``settings``,
        ``created``.
    :param paths: the files read (one per rank).
    :param torn: records cut short and skipped, over the files: the last one of a run
        killed mid-write, or one in the middle whose write a full disk cut short.
    :param heads: int64 arrays per micro-batch, in row order: ``step``, ``rank``,
        ``micro`` and ``n`` (its rows).
    :param sample_id: int64 dataset index of every row.
    :param length: int64 real tokens of every row, as logged.
    :param loss: float32 loss of every row in the forward that trained on it (nats per
        target token) where the recorder was given it; NaN elsewhere.
    :param sessions: times the files were opened for writing, over the files (a resumed
        run appends a session; its steps supersede the earlier ones from its first on).
    :param has_losses: some micro-batch of the table was recorded with its losses.
    """

    header: dict[str, Any]
    paths: tuple[str, ...]
    torn: int
    heads: dict[str, np.ndarray]
    sample_id: np.ndarray
    length: np.ndarray
    loss: np.ndarray
    sessions: int = 1
    has_losses: bool = False

    @cached_property
    def table(self) -> pd.DataFrame:
        """One row per sample: int64 ``step, rank, micro, sample_id, length`` and the
        float64 ``loss`` (about 48 bytes a row: built only when asked for)."""
        import numpy as np
        import pandas as pd

        n = self.heads["n"]
        columns = {k: np.repeat(self.heads[k], n) for k in ("step", "rank", "micro")}
        rows = {"sample_id": self.sample_id, "length": self.length}
        return pd.DataFrame(columns | rows | {"loss": self.loss.astype(np.float64)}, copy=False)

    @property
    def settings(self) -> dict[str, Any]:
        """The run's settings as the recorder was given them."""
        return dict(self.header.get("settings") or {})

    def micro_bounds(self) -> np.ndarray:
        """int64 row offsets of the micro-batches: micro-batch ``i`` is table rows
        ``[b[i], b[i + 1])``."""
        import numpy as np

        out = np.zeros(len(self.heads["n"]) + 1, dtype=np.int64)
        np.cumsum(self.heads["n"], out=out[1:])
        return out

    def to_replay(
        self,
        lengths: Manifest | np.ndarray | Sequence[int] | None = None,
        categories: Sequence[Any] | np.ndarray | None = None,
    ) -> Replay:
        """The recorded schedule as a :class:`~dflash_diag.data.Replay`.

        The ``micro`` and ``steps`` tables are built as a replay builds them (``batch_id``
        by composition, so recurrences are found); the ``epoch`` column comes from the
        settings' ``steps_per_epoch`` (``epoch = (step - first step) // steps_per_epoch``)
        when given, else from the rule of :func:`infer_epochs`.

        :param lengths: a manifest (or lengths by dataset index) to check the recording
            against and to take the lengths from; None: the recorded lengths (indices
            never recorded get length 0).
        :param categories: a label per dataset index (default: the manifest's).
        :raises InputError: a recorded sample id outside the manifest, or a recorded
            length that is not the manifest's (capped at ``max_seq_len``).
        """
        from ..schedule.replay import replay_from_batches

        if not len(self.sample_id):
            raise InputError(self.paths[0], "holds no recorded micro-batches", "")
        bounds = self.micro_bounds()
        ids = self.sample_id
        cap, source = self._lengths_source(lengths, ids, self.length)
        step = self.heads["step"]
        rows = {
            "step": step,
            "rank": self.heads["rank"],
            "micro": self.heads["micro"],
            "epoch": self._epochs(step, ids, bounds),
        }
        params = self.schedule_params(rows, cap)
        return replay_from_batches(source, params, ids, bounds, rows, categories)

    def _lengths_source(
        self, lengths: Any, ids: np.ndarray, recorded: np.ndarray
    ) -> tuple[int | None, Any]:
        """The cap on lengths and the lengths source for the replay, checked."""
        import numpy as np

        from ..data import value_problem
        from ..schedule.replay import as_lengths

        cap = _setting_int(self.settings, "max_seq_len")
        if cap is not None and value_problem("max_seq_len", cap) is not None:
            cap = None  # (not a cap a schedule can have: not used)
        if lengths is None:
            top = int(ids.max())
            if top >= max(4 * len(ids), 1 << 26):  # (a table by dataset index that big)
                raise InputError(
                    self.paths[0],
                    f"sample ids up to {top} for {len(ids)} recorded samples",
                    "give the manifest's lengths: to_replay(manifest)",
                )
            full = np.zeros(top + 1, dtype=np.int64)
            full[ids] = recorded
            return cap, full
        man = as_lengths(lengths)
        return check_fit(self.paths[0], ids, recorded, man, cap), lengths

    def _epochs(self, step: np.ndarray, ids: np.ndarray, bounds: np.ndarray) -> np.ndarray:
        import numpy as np

        per = _setting_int(self.settings, "steps_per_epoch")
        if per is not None and per > 0:
            first = _setting_int(self.settings, "first_step")
            first = int(step.min()) if first is None else first
            return np.maximum((step - first) // per, 0)
        return infer_epochs(step, ids, bounds)

    def schedule_params(self, rows: dict[str, np.ndarray], cap: int | None) -> ScheduleParams:
        """ScheduleParams describing the recording: the settings' fields that are
        ScheduleParams fields (valid ones), with world size, grad accum, first step,
        epochs and max_seq_len from what was recorded."""
        import numpy as np

        from ..data import INT_BOUNDS, ScheduleParams, strategy_info

        known = set(ScheduleParams.field_names())
        params = ScheduleParams()
        for name, value in self.settings.items():
            if name == "strategy" and strategy_info(str(value)) is None:
                continue  # (a file's settings never name code to run: registered names only)
            if name in known:
                try:
                    params = params.replace(**{name: value})
                except (InputError, TypeError, ValueError):
                    continue  # (a setting named like a field but not one: left out)
        step, rank = rows["step"], rows["rank"]  # (in step, rank, micro order)
        new = np.r_[True, (step[1:] != step[:-1]) | (rank[1:] != rank[:-1]), True]
        per_rank = np.diff(np.flatnonzero(new))  # micro-batches of a rank in a step
        world = max(int(self.header.get("world_size", 1)), int(rows["rank"].max()) + 1)
        lo, hi = INT_BOUNDS["grad_accum"]
        changes: dict[str, Any] = {
            "world_size": min(world, INT_BOUNDS["world_size"][1]),
            "grad_accum": min(max(int(per_rank.max()), lo), hi),
            "first_step": min(int(rows["step"].min()), INT_BOUNDS["first_step"][1]),
            "epochs": min(int(rows["epoch"].max()) + 1, INT_BOUNDS["epochs"][1]),
            "max_seq_len": cap,
        }
        return params.replace(**changes)


def _setting_int(settings: dict[str, Any], name: str) -> int | None:
    value = settings.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def check_fit(
    path: str, ids: np.ndarray, recorded: np.ndarray, man: np.ndarray, cap: int | None
) -> int | None:
    """Check recorded lengths against a manifest's; returns the cap on lengths.

    A recorded length fits when it equals the manifest's, or ``min(manifest, cap)``;
    without a cap in the settings, the longest recorded length is taken as the cap when
    that explains every difference (the run truncated at its max_seq_len).

    :raises InputError: ``recorded file ... does not fit the manifest``.
    """
    import numpy as np

    from ..arrays import chunks

    def refuse(what: str) -> InputError:
        return InputError(
            path,
            f"recorded file does not fit the manifest: {what}",
            "give the manifest of the run that wrote it",
        )

    if len(ids) and int(ids.max()) >= len(man):
        first = int(ids[np.flatnonzero(ids >= len(man))[0]])
        raise refuse(f"sample id {first} beyond its {len(man)} samples")
    top = int(recorded.max()) if len(recorded) and cap is None else 0
    first_bad: tuple[int, int, int] | None = None
    explained = True  # (every difference so far: the longest recorded, cut from longer)
    for part in chunks(len(ids)):  # (no temporaries as long as the rows)
        rec = recorded[part]
        expected = man[ids[part]]
        bad = rec != expected
        if cap is not None:
            bad &= rec != np.minimum(expected, cap)
        if not bad.any():
            continue
        if first_bad is None:
            i = int(np.flatnonzero(bad)[0])
            first_bad = (int(ids[part.start + i]), int(rec[i]), int(expected[i]))
        if cap is not None:
            break
        explained = explained and bool(((rec[bad] == top) & (expected[bad] > top)).all())
    if first_bad is None:
        return cap
    if cap is None and explained:
        return top
    sample, got, want = first_bad
    raise refuse(f"sample {sample} has length {got} recorded, {want} in the manifest")


def infer_epochs(step: np.ndarray, ids: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The epoch of every micro-batch, from recurrences of sample ids.

    Rule: epoch 0 starts at the first step; a new epoch starts at the first later step
    in which more than half of the samples were already seen in the current epoch (every
    sampler covers the dataset once an epoch, so the first step of the next epoch is
    made of samples seen before, while a padded last step of an epoch, as
    ``DistributedSampler`` and accelerate pad it, repeats only a few).  Steps never
    straddle epochs under this rule.

    :param step: int64 step of each micro-batch (rows in step order).
    :param ids: int64 sample ids, micro-batch ``i`` at ``ids[bounds[i]:bounds[i + 1]]``.
    """
    import numpy as np

    n_micro = len(bounds) - 1
    out = np.zeros(n_micro, dtype=np.int64)
    if n_micro == 0:
        return out
    top = int(ids.max())
    if top >= 4 * len(ids) + (1 << 20):  # sparse ids: number them densely first
        ids = np.unique(ids, return_inverse=True)[1].reshape(-1)
        top = int(ids.max())
    rows = np.int32 if len(ids) < 2**31 else np.int64  # (row numbers: half the cache misses)
    first = np.empty(top + 1, dtype=rows)  # scratch: first row of an id in a window
    micro_starts = np.r_[0, np.flatnonzero(step[1:] != step[:-1]) + 1]  # step -> micro
    row_starts = np.r_[bounds[micro_starts], len(ids)]  # step -> rows
    n_steps = len(micro_starts)
    epoch_steps = [0]
    a = 0
    window = 64
    while a + 1 < n_steps:
        b = min(a + 1 + window, n_steps)
        lo, hi = int(row_starts[a]), int(row_starts[b])
        # a row was seen in the epoch begun at step a when its id came earlier in it;
        # (every id of the window is written, so no stale entry is read)
        window_ids = ids[lo:hi]
        first[window_ids[::-1]] = np.arange(hi - 1, lo - 1, -1, dtype=rows)
        seen = (first[window_ids] < np.arange(lo, hi, dtype=rows)).astype(np.int64)
        counts = np.add.reduceat(seen, row_starts[a + 1 : b] - lo)
        hit = np.flatnonzero(2 * counts > np.diff(row_starts[a + 1 : b + 1]))
        if len(hit):
            window = max(64, a + 1 + int(hit[0]) - a)
            a = a + 1 + int(hit[0])
            epoch_steps.append(a)
        elif b == n_steps:
            break
        else:
            window *= 2
    for e, s in enumerate(epoch_steps[1:], start=1):
        out[micro_starts[s] :] = e
    return out


def recording_files(path: Path) -> list[Path]:
    """The files a recording is read from: ``path`` itself, or its rank files."""
    return [path] if path.is_file() else _rank_files(path)


def _rank_files(p: Path) -> list[Path]:
    """``train.rank*.batches`` beside the base path ``train.batches``, by rank."""
    suffix = p.suffix or RECORD_SUFFIX
    stem = p.name[: -len(p.suffix)] if p.suffix else p.name
    pattern = re.compile(re.escape(stem) + r"\.rank(\d+)" + re.escape(suffix) + "$")
    found = []
    if p.parent.is_dir():
        for child in p.parent.iterdir():
            m = pattern.match(child.name)
            if m and child.is_file():
                found.append((int(m.group(1)), child))
    return [c for _, c in sorted(found)]


def find_recording(log_path: str | os.PathLike[str]) -> Path | None:
    """The recording beside a log: ``run.log`` -> ``run.batches`` when there, else the
    same base path when rank files ``run.rank*.batches`` are there (read_recording
    reads them all from it); None when there is none.

    >>> find_recording("no/such/run.log") is None, find_recording(".") is None
    (True, True)
    """
    log = Path(log_path)
    if log.name in ("", ".", "..") or log.is_dir():  # (a folder: no log, no recording)
        return None
    base = log.with_suffix(RECORD_SUFFIX)
    if base.is_file() or _rank_files(base):
        return base
    return None


def read_recording(path: str | os.PathLike[str]) -> Recording:
    """Read a recording: one file, or every rank file of a run given its base path
    (``train.batches`` reads ``train.rank*.batches`` when it is not a file itself).

    Vectorised but for one Python loop over the file's records (one per step of each
    rank); ``benchmarks/bench_record_size.py`` says how long 60 million samples take.

    :raises InputError: no such file(s), a foreign or corrupt file (one line, with the
        byte offset), rank files of different runs, a micro-batch recorded twice.
    """
    import numpy as np

    p = Path(stage(path))  # (a URI: a local copy of one file, see dflash_diag.storage)
    files = recording_files(p)
    if not files:
        raise InputError(str(p), "no such file", "record the run with dflash_diag.record")
    parts = [_read_file(f) for f in files]
    headers = [h for h, *_ in parts]
    worlds = {h.get("world_size") for h in headers}
    if len(worlds) > 1:
        shown = ", ".join(sorted(str(w) for w in worlds))
        raise InputError(str(p), f"rank files of different runs (world sizes {shown})", "")
    recs = {k: np.concatenate([r[k] for _, r, _, _ in parts]) for k in ("step", "rank", "micro")}
    recs["n"] = np.concatenate([r["n"] for _, r, _, _ in parts])
    rows = [_joined([rows[k] for *_, rows, _ in parts]) for k in range(3)]
    heads, ids, length, loss = _merge(str(p), recs, *rows)
    return Recording(
        header=headers[0],
        paths=tuple(str(f) for f in files),
        torn=sum(t for *_, t in parts),
        heads=heads,
        sample_id=ids,
        length=length,
        loss=loss,
        sessions=sum(r["sessions"] for _, r, _, _ in parts),
        has_losses=any(bool(r["losses"].any()) for _, r, _, _ in parts),
    )


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """The parts one after the other (the one part itself: no copy)."""
    import numpy as np

    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _merge(
    path: str,
    recs: dict[str, np.ndarray],
    ids: np.ndarray,
    lens: np.ndarray,
    loss: np.ndarray,
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """The micro-batches sorted by (step, rank, micro), each (step, rank, micro) once,
    and the rows gathered in that order (no gather when they already are: one file); a
    row's loss travels with it.  Returns ``(heads, ids, lengths, losses)``."""
    import numpy as np

    step, rank, micro, n = recs["step"], recs["rank"], recs["micro"], recs["n"]
    later = (step[1:] > step[:-1]) | (
        (step[1:] == step[:-1])
        & ((rank[1:] > rank[:-1]) | ((rank[1:] == rank[:-1]) & (micro[1:] > micro[:-1])))
    )
    if not later.all():  # (several files, or ranks interleaved): sort, then find repeats
        order = np.lexsort((micro, rank, step))
        step, rank, micro = step[order], rank[order], micro[order]
        same = (step[1:] == step[:-1]) & (rank[1:] == rank[:-1]) & (micro[1:] == micro[:-1])
        twice = np.flatnonzero(same)
        if len(twice):
            s, r, m = (int(a[twice[0]]) for a in (step, rank, micro))
            raise InputError(path, f"micro-batch {m} of step {s}, rank {r} recorded twice", "")
        from ..schedule.base import gather_segments

        offsets = np.zeros(len(n) + 1, dtype=np.int64)
        np.cumsum(n, out=offsets[1:])
        ids = gather_segments(ids, offsets, order)
        lens = gather_segments(lens, offsets, order)
        loss = gather_segments(loss, offsets, order)
        n = n[order]
    return {"step": step, "rank": rank, "micro": micro, "n": n}, ids, lens, loss


def _read_file(f: Path) -> tuple[dict[str, Any], dict[str, Any], tuple[Any, Any, Any], int]:
    """One file: its first header, its micro-batches (step, rank, micro, n), its rows
    (sample ids, lengths) in file order, superseded sessions dropped, and torn count."""
    import numpy as np

    try:
        buf = f.read_bytes()
    except OSError as err:
        raise InputError(str(f), f"cannot read: {err.strerror or err}", "") from None
    scan = scan_frames(buf, str(f))
    d = decode_blocks(buf, scan, str(f))
    del buf
    length = _fill_lengths(d["sample_id"], d["length"], d["flag"], str(f))
    keep = _current(d["step"], d["session"], len(scan.headers))
    rows = (d["sample_id"], length, d["loss"])
    if not keep.all():  # (a resumed run's superseded steps: dropped)
        row_keep = np.repeat(keep, d["n"])
        rows = (rows[0][row_keep], rows[1][row_keep], rows[2][row_keep])
    recs = {k: d[k][keep] for k in ("step", "rank", "micro", "n", "losses")}
    recs["sessions"] = len(scan.headers)
    return scan.headers[0], recs, rows, scan.torn


def _fill_lengths(ids: np.ndarray, length: np.ndarray, flag: np.ndarray, path: str) -> np.ndarray:
    """Every row's length (see :func:`resolve_lengths`); a fast path when no id's length
    ever changed and the ids are dense."""
    import numpy as np

    if not len(ids):
        return length
    top = int(ids.max())
    if top < 4 * len(ids) + (1 << 20):
        known = np.full(top + 1, -1, dtype=np.int64)
        known[ids[flag]] = length[flag]
        if (known[ids[flag]] == length[flag]).all():
            # in place, the decoder's own array: flagged rows keep their lengths, which
            # is all resolve_lengths reads should an id have none
            np.take(known, ids, out=length)
            if (length >= 0).all():
                return length
    out = resolve_lengths(ids, length, flag)
    if (out < 0).any():
        i = int(np.flatnonzero(out < 0)[0])
        raise InputError(path, f"corrupt batch records: no length for sample {int(ids[i])}", "")
    return out


def _current(step: np.ndarray, session: np.ndarray, n_sessions: int) -> np.ndarray:
    """Bool per micro-batch: not superseded by a later session (a resumed run) that
    starts at or before its step."""
    import numpy as np

    if n_sessions <= 1 or not len(step):
        return np.ones(len(step), dtype=bool)
    first = np.full(n_sessions + 1, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, session, step)
    later = np.minimum.accumulate(first[::-1])[::-1]  # later[j]: min over sessions >= j
    return step < later[session + 1]
