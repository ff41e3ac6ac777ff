"""Training logs in, one tidy per-step table out: :func:`read_log`.

Importing this package is cheap (no pandas); the readers import what they need.
"""

from __future__ import annotations

import os

from ..data import Progress, RunLog
from ..errors import InputError
from . import io, text
from .csv import metrics_file_in
from .detect import detect_format, refuse_binary
from .fast import lineshape as fastpath
from .formats import FORMAT_HELP, FORMATS, check_format, read_as
from .normalise import MultiRunLog
from .tensorboard import is_event_path, read_tensorboard
from .trackers import is_mlflow_path, read_mlflow
from .wandb_run import is_wandb_path, read_wandb

__all__ = [
    "FORMATS",
    "FORMAT_HELP",
    "MultiRunLog",
    "check_format",
    "pick_run",
    "detect_format",
    "read_log",
    "with_interval",
]


def read_log(
    path: str | os.PathLike[str],
    format: str | None = None,
    rank: int | str = 0,
    progress: Progress | None = None,
    step_every: int | None = None,
    run: int | None = None,
    tracking_uri: str | None = None,
) -> RunLog:
    """Read a training log into a :class:`~dflash_diag.data.RunLog`.

    The table has one row per optimizer step (per ``(rank, step)`` with
    ``rank="all"``), sorted by step, with the canonical columns ``step`` (int64),
    ``loss``, ``acc`` (fraction 0..1), ``lr``, ``grad_norm``, ``tokens`` (tokens in the
    step's batch), ``tok_per_s`` (tokens per second), ``epoch`` (float64, NaN where the
    log does not say), then every other numeric field in snake_case (``eval_loss``,
    ``val_loss``, ``acc_0``.., durations in seconds).  A running total of tokens
    (``num_input_tokens_seen``, TRL's ``num_tokens``) is ``tokens_seen``, never
    ``tokens``; ``tokens`` is its difference from step to step only when every step from
    1 on was logged (else NaN).  See
    :mod:`dflash_diag.logs.names` for names and units, and
    :mod:`dflash_diag.logs.normalise` for steps, restarts and ranks.

    :param path: a log file (plain or gzip), a TensorBoard event file or folder, an
        MLflow run (its file-store folder, or ``mlflow://HOST:PORT/RUN_ID``:
        :mod:`~dflash_diag.logs.trackers`), a W&B run (its folder or its ``.wandb``
        file: :mod:`~dflash_diag.logs.wandb_run`), or ``"-"`` for standard input.
    :param format: one of :data:`FORMATS`, or None to detect it.
    :param rank: ``0`` (rank 0, or the only rank), a rank number, or ``"all"``.
    :param progress: called with ``(lines done, lines total)`` while reading text.
    :param step_every: for a log whose records carry no step (``step_source`` "line
        order", e.g. HF Trainer dict lines without the progress bar): the trainer logged
        every ``step_every`` optimizer steps (its ``logging_steps``), so record ``i``
        (from 1) is step ``i * step_every``.  ``step_source`` becomes "given interval".
    :param run: for a file holding several runs appended one after another (each
        starting again from its first step, or counting against another total): the
        run to read, from 1 in file order.  None: the last; the result is then a
        :class:`~dflash_diag.logs.normalise.MultiRunLog` whose ``runs`` holds each
        run's RunLog.  The other runs' rows are counted as ``other_run``.
    :param tracking_uri: an MLflow tracking server (``path`` is then a run id).
    :raises InputError: missing/empty/unreadable file, unknown format, no step-like data,
        ``step_every`` on a log that numbers its own steps.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "run.log"
    >>> _ = p.write_text("step=1 loss=2.5 acc=50%\\nstep=2 loss=2.25 acc=55%\\n")
    >>> run = read_log(p)
    >>> run.format, run.table["loss"].tolist(), run.table["acc"].tolist()
    ('text', [2.5, 2.25], [0.5, 0.55])
    """
    name = os.fspath(path)
    if tracking_uri is not None or (format is None and name != "-" and is_mlflow_path(name)):
        log = read_mlflow(name, rank, tracking_uri)
    elif format is None and name != "-" and is_wandb_path(name):
        log = read_wandb(name, rank)
    elif format in (None, "csv") and name != "-" and (found := metrics_file_in(name)):
        log = _read(found, format, rank, progress)  # (Lightning's CSVLogger folder)
    else:
        log = _read(path, format, rank, progress)
    if run is not None:
        log = pick_run(log, run)
    return log if step_every is None else with_interval(log, step_every)


def pick_run(log: RunLog, run: int) -> RunLog:
    """Run ``run`` (from 1) of a log; its ``skipped`` counts the other runs' rows as
    ``other_run``.

    :raises InputError: no such run.
    """
    from dataclasses import replace

    runs = log.runs if isinstance(log, MultiRunLog) else (log,)
    if not 1 <= run <= len(runs):
        have = "one run" if len(runs) == 1 else f"{len(runs)} runs"
        raise InputError("--run", f"no run {run}: the log holds {have}", f"give 1 to {len(runs)}")
    if len(runs) == 1:
        return log
    skipped = dict(log.skipped)
    skipped["other_run"] = sum(int(r.table.shape[0]) for i, r in enumerate(runs) if i != run - 1)
    return replace(runs[run - 1], skipped=skipped, n_lines=log.n_lines)


_SOURCES = {"field": "a step field", "progress": "a progress-bar counter"}


def with_interval(run: RunLog, step_every: int) -> RunLog:
    """A line-numbered log (``step_source`` "line order") renumbered: record ``i`` is
    optimizer step ``i x step_every``; ``step_source`` becomes "given interval".

    :raises InputError: ``step_every`` below 1, or a log that numbers its own steps.
    """
    from dataclasses import replace

    if step_every < 1:
        raise InputError("--step-every", f"must be a positive whole number, got {step_every}")
    if run.step_source != "line order":
        raise InputError(
            run.path,
            f"the log numbers its own steps (from {_SOURCES.get(run.step_source, 'its records')}),"
            " so --step-every does not apply",
            "leave --step-every out",
        )
    table = run.table.copy()
    table["step"] = table["step"] * step_every
    restarts = tuple(r * step_every for r in run.restarts)
    return replace(run, table=table, restarts=restarts, step_source="given interval")


def _read(
    path: str | os.PathLike[str],
    format: str | None,
    rank: int | str,
    progress: Progress | None,
) -> RunLog:
    fmt = check_format(format)
    if rank != "all":
        try:
            rank = int(rank)
        except (TypeError, ValueError):
            raise InputError("--rank", f"not a rank: {rank!r}", "give a number, or 'all'") from None
    name = os.fspath(path)
    if fmt == "tensorboard" or (fmt is None and name != "-" and is_event_path(name)):
        return read_tensorboard(name, rank)
    fast = True
    if name != "-" and fmt in (None, *MAPPED_FORMATS):
        run, tried = _read_mapped(name, fmt, rank, progress)
        if run is not None:
            return run
        fast = not tried  # the fast path declined this log: do not try it twice
    raw = io.read_bytes(name)
    if fmt is None:
        seen = detect_format(name, raw.data)
    else:
        refuse_binary(name, raw.data)  # a forced text format must not read a binary file
        seen = fmt
    return read_as(seen, name, raw, fmt, rank, progress, fast)


#: Formats a large log of which is read through a memory map: both are read by the line
#: reader with the same rules (free text, and the HF Trainer's console or dict lines).
MAPPED_FORMATS = ("text", "hf-dict")


def _read_mapped(
    name: str, fmt: str | None, rank: int | str, progress: Progress | None
) -> tuple[RunLog | None, bool]:
    """A large plain text log (free text, the HF Trainer's console output or dict lines)
    read through a read-only memory map by the fast paths, so its bytes are never copied
    (a copy of a 200 MB log is 200 MB of fresh memory to fault in).

    :returns: ``(run, tried)``: the RunLog, or None when that does not apply (small,
        gzip, not text, lines of no common shape) and the caller reads the file the
        usual way; ``tried``: the fast path looked at the log (and declined it, when
        ``run`` is None).

    The map is only read while this runs (well under a second per million lines).  A
    file truncated in that window (a log rotated by copy-and-truncate) would end the
    process with SIGBUS; a log being appended to is fine: what is mapped is read.
    """
    import mmap

    try:
        if not os.path.isfile(name) or os.path.getsize(name) < 10 * fastpath.FAST_MIN_LINES:
            return None, False
        with open(name, "rb") as f:  # (pages are faulted in by the reading threads)
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None, False  # the usual reader gives the error, if there is one
    try:
        head = data[:65536]
        if head.startswith(io.GZIP_MAGIC) or head.lstrip().startswith(b"{"):
            return None, False  # gzip; a JSON document or JSON lines: not this fast path's
        if fmt is None and detect_format(name, head) not in MAPPED_FORMATS:
            return None, False
        if fmt is not None:
            refuse_binary(name, head)  # a forced text format must not read a binary file
        return text.read_lines_fast(name, data, fmt, rank, progress), True
    finally:
        try:
            data.close()
        except BufferError:  # a view is still alive: the map closes when it is freed
            pass
