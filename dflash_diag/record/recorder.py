"""BatchRecorder: a training loop writes down what each optimizer step consumed.

>>> import tempfile, os
>>> from dflash_diag.record import BatchRecorder, read_recording
>>> path = os.path.join(tempfile.mkdtemp(), "train.batches")
>>> with BatchRecorder(path, rank=0, world_size=1, settings={"seed": 1}) as rec:
...     rec.log(1, [7, 3], [120, 80])
...     rec.log(2, [5], [64])
>>> read_recording(path).table.drop(columns="loss").values.tolist()
[[1, 0, 0, 3, 80], [1, 0, 0, 7, 120], [2, 0, 0, 5, 64]]

The file is written through the OS at every change of step (one ``write`` of the
finished step), so a process killed at any point loses at most the step in flight;
nothing is ``fsync``-ed but at :meth:`BatchRecorder.close`.  Sample lengths are written
the first time an id is recorded (and again if it changes), which is what keeps an
epoch after the first at a few bytes a sample (see the file format,
:mod:`dflash_diag.record.fileformat`).
"""

from __future__ import annotations

import errno
import operator
import os
import socket
import warnings
import weakref
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from .fileformat import block_payload
from .frames import FORMAT_VERSION, PREAMBLE, NoHeader, frame, header_frame, scan_frames

if TYPE_CHECKING:
    import numpy as np

RECORD_SUFFIX = ".batches"
#: lengths of sample ids below this are remembered (an int32 each, grown as ids come);
#: the lengths of larger ids are written every time
KNOWN_LIMIT = 1 << 27
#: samples pending before a step's micro-batches are written before the step ends
PENDING_LIMIT = 1 << 20


def rank_path(path: str | os.PathLike[str], rank: int, world_size: int) -> Path:
    """The file rank ``rank`` writes: ``path`` itself for one process, else the rank
    put before the suffix (``train.batches`` -> ``train.rank3.batches``).

    >>> rank_path("out/train.batches", 3, 8).as_posix(), rank_path("t.batches", 0, 1).name
    ('out/train.rank3.batches', 't.batches')
    """
    p = Path(path)
    if world_size <= 1:
        return p
    suffix = p.suffix or RECORD_SUFFIX
    stem = p.name[: -len(p.suffix)] if p.suffix else p.name
    return p.with_name(f"{stem}.rank{rank}{suffix}")


def _whole(value: Any, name: str) -> int:
    """``value`` as an int >= 0 (Python, numpy or a 0-d tensor's integer), else ValueError."""
    import numpy as np

    if type(value) is int and 0 <= value < 2**63:  # (the common case, first)
        return value
    if not isinstance(value, bool):
        out: int | None
        try:
            out = operator.index(value)
        except TypeError:
            arr = np.asarray(value)
            out = int(arr) if arr.ndim == 0 and arr.dtype.kind in "iu" else None
        if out is not None and 0 <= out < 2**63:
            return out
    raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")


def _env_int(name: str, given: int | None, default: int) -> int:
    if given is not None:
        return _whole(given, name.lower())
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        return _whole(int(text), name)
    except ValueError:
        raise ValueError(
            f"environment variable {name} must be a whole number, got {text!r}"
        ) from None


def _int_array(values: Any, name: str) -> np.ndarray:
    import numpy as np

    arr = np.asarray(values)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind != "b":
            try:  # (whole floats pass; Python ints beyond int64 do not)
                with np.errstate(invalid="ignore"):
                    exact = arr.astype(np.int64)
                if (exact == arr).all():
                    arr = exact
            except (TypeError, ValueError, OverflowError):
                pass
        if arr.dtype.kind not in "iu":
            raise ValueError(f"{name} must be whole numbers, got dtype {arr.dtype}")
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) >= 2**63:
        raise ValueError(f"{name} must be below 2**63")
    out = arr.astype(np.int64, copy=False)
    if out.size and int(out.min()) < 0:
        raise ValueError(f"{name} must be >= 0, got {int(out.min())}")
    return out


class RecordingBusy(RuntimeError):
    """Another recorder holds the file (two jobs with one output path, or a restarted
    job whose old process still runs)."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(
            f"{path}: another recorder is writing this file ({holder}); two runs must not "
            "share an output path: give this one its own, or stop the other process first"
        )


def _lock(file: Any, path: Path) -> None:
    """An exclusive advisory lock on the open file (``flock``, non-blocking), held until
    it is closed.  A file system without ``flock`` (some network mounts): no lock."""
    try:
        import fcntl
    except ImportError:  # (not POSIX)
        return
    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RecordingBusy(path, _holder(file, path)) from None
    except OSError as err:
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise RecordingBusy(path, _holder(file, path)) from None


def _holder(file: Any, path: Path) -> str:
    """Who holds the file, from the last header it wrote (its pid and host)."""
    try:
        file.seek(0)
        heads = scan_frames(file.read(), str(path)).headers
    except (InputError, OSError):
        return "its pid is not known"
    pid, host = heads[-1].get("pid"), heads[-1].get("host")
    if not isinstance(pid, int):
        return "its pid is not known"
    return f"pid {pid}" + (f" on {host}" if isinstance(host, str) and host else "")


#: errors of a write that a later write may not meet (a full disk or quota, a file
#: size limit): the step is kept and written later
SPACE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
#: samples kept waiting for room before the oldest waiting steps are dropped
QUEUE_LIMIT = 1 << 22


def _loss_array(values: Any, n: int) -> np.ndarray:
    """Per-sample losses as float32 (a list, numpy array or CPU tensor), ``n`` of them."""
    import numpy as np

    if hasattr(values, "detach"):  # (a tensor: off the graph and the device)
        values = values.detach().float().cpu().numpy()
    try:
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(f"losses must be numbers, got {type(values).__name__}") from None
    if len(arr) != n:
        raise ValueError(f"{n} sample ids but {len(arr)} losses")
    return arr.astype(np.float32)


class _Sink:
    """The open, locked file, the step being gathered and the steps waiting for room.

    Steps are encoded when written, each with its step whole, so a step dropped for
    want of room leaves the others exact."""

    def __init__(self, path: Path, head: bytes) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        self.file = os.fdopen(fd, "r+b", buffering=0)
        try:
            _lock(self.file, path)  # (before anything is read or truncated)
            self.end = self._open_session(path, head)
        except BaseException:
            self.file.close()
            raise
        self.path = path
        self.step: int | None = None
        self.parts: tuple[list[Any], ...] = ([], [], [], [], [], [])
        self.pending = 0
        self.queue: deque[tuple[int, tuple[list[Any], ...], int]] = deque()
        self.queued = 0  # samples in the queue
        self.dropped = 0  # steps dropped for want of room
        self.forget = False  # (set when steps were dropped: the recorder's lengths are stale)
        self.failing = False
        self.pid = os.getpid()

    def _open_session(self, path: Path, head: bytes) -> int:
        """Write a new session's header (after the last good record of a recording
        already there); returns where the file ends."""
        self.file.seek(0)
        data = self.file.read()
        try:
            scan = scan_frames(data, str(path)) if data else None
        except NoHeader:  # (a run that stopped while writing the header: start over)
            scan = None
        if scan is None:
            self.file.truncate(0)
            self.file.seek(0)
            _write_all(self.file, PREAMBLE + head)
            return len(PREAMBLE) + len(head)
        self.file.truncate(scan.end)  # (drop a torn last record before appending)
        if scan.version < FORMAT_VERSION:  # (version 1 frames are version 2 frames)
            self.file.seek(0)
            _write_all(self.file, PREAMBLE)
        self.file.seek(scan.end)
        _write_all(self.file, head)
        return scan.end + len(head)

    def write(self) -> None:
        """Queue the step gathered so far and write every queued step there is room for."""
        # (a forked child, e.g. a DataLoader worker, holds a copy: it must not write it)
        if self.step is None or self.file.closed or os.getpid() != self.pid:
            return
        if self.parts[2]:
            parts = tuple(list(p) for p in self.parts)
            self.queue.append((self.step, parts, self.pending))
            self.queued += self.pending
        for part in self.parts:
            part.clear()
        self.pending = 0
        self.drain()

    def drain(self) -> None:
        while self.queue:
            step, (ranks, micros, ids, flags, lens, losses), n = self.queue[0]
            given = [x[f] for x, f in zip(lens, flags, strict=True)]
            data = frame(block_payload(step, ranks, micros, ids, flags, given, losses))
            if not self._put(data, step):
                break
            self.queue.popleft()
            self.queued -= n
        if self.queued > QUEUE_LIMIT and len(self.queue) > 1:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        """Drop the oldest waiting steps, keeping the newest.  A dropped step may have
        been the one to give an id's length: every step still waiting gives all its
        lengths, and so do later ones until each id is seen again (``forget``)."""
        while self.queued > QUEUE_LIMIT and len(self.queue) > 1:
            self.queued -= self.queue.popleft()[2]
            self.dropped += 1
        for _, parts, _ in self.queue:
            for f in parts[3]:
                f[:] = True
        self.forget = True

    def _put(self, data: bytes, step: int) -> bool:
        """Write one frame whole, or take back what was written of it and say False
        (no room: it stays queued)."""
        at = self.end
        try:
            _write_all(self.file, data)
        except OSError as err:
            if err.errno not in SPACE_ERRORS:
                raise
            self._take_back(at)
            if not self.failing:
                warnings.warn(
                    f"{self.path}: no room to write step {step} ({err.strerror}); it is "
                    "kept and written at the next step",
                    RuntimeWarning,
                    stacklevel=5,
                )
            self.failing = True
            return False
        self.end = at + len(data)
        self.failing = False
        return True

    def _take_back(self, at: int) -> None:
        """Cut the file back to ``at`` (truncating frees room even on a full disk); if
        even that fails, the partial frame stays and readers skip it as torn."""
        try:
            self.file.truncate(at)
            self.file.seek(at)
        except OSError:
            self.end = self.file.seek(0, os.SEEK_END)

    def close(self) -> None:
        if self.file.closed:
            return
        if os.getpid() != self.pid:
            self.file.close()
            return
        try:
            self.write()
            if self.queue:  # (still no room at the end)
                self.dropped += len(self.queue)
                warnings.warn(
                    f"{self.path}: no room for the last {len(self.queue)} steps; dropped",
                    RuntimeWarning,
                    stacklevel=4,
                )
                self.queue.clear()
            os.fsync(self.file.fileno())
        finally:
            self.file.close()


def _write_all(file: Any, data: bytes) -> None:
    """``data`` written whole: a raw write may take fewer bytes than it was given."""
    view = memoryview(data)
    done = 0
    while done < len(view):
        n = file.write(view[done:])
        if not n:  # (None: would block; 0: no progress) as a full disk
            raise OSError(errno.ENOSPC, "the write took no bytes")
        done += n


class BatchRecorder:
    """Record each optimizer step's micro-batches (sample ids and real lengths) to a file.

    :param path: the recording, e.g. ``train.batches`` beside ``train.log``; with a
        world size over 1, rank ``r`` writes ``train.rank{r}.batches``
        (:func:`rank_path`).  An existing recording there is appended to (a resumed run:
        a new session whose steps supersede the earlier ones from its first step on).
    :param rank: this process's rank (default: env ``RANK``, else 0).
    :param world_size: data-parallel processes (default: env ``WORLD_SIZE``, else 1).
    :param settings: the run's settings, JSON-able (seed, batch size, grad accum,
        sampler, ``max_seq_len``, ``steps_per_epoch``...), kept in the file's header.
    :raises ValueError: bad rank, world size or settings.
    :raises InputError: ``path`` holds something that is not a recording.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        rank: int | None = None,
        world_size: int | None = None,
        settings: dict[str, Any] | None = None,
    ) -> None:
        import numpy as np

        from .. import __version__

        self.world_size = _env_int("WORLD_SIZE", world_size, 1)
        self.rank = _env_int("RANK", rank, 0)
        if self.world_size < 1 or self.rank >= self.world_size:
            raise ValueError(f"rank {self.rank} is not below world size {self.world_size}")
        if settings is not None and not isinstance(settings, dict):
            raise ValueError(f"settings must be a dict, got {type(settings).__name__}")
        self.path = rank_path(path, self.rank, self.world_size)
        info = {
            "format": "dflash-diag batch recording",
            "format_version": FORMAT_VERSION,
            "dflash_diag": __version__,
            "rank": self.rank,
            "world_size": self.world_size,
            "settings": dict(settings or {}),
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }
        try:
            head = header_frame(info)
        except (TypeError, ValueError) as err:
            raise ValueError(f"settings must be JSON-able: {err}") from None
        self._sink = _Sink(self.path, head)
        self._finalizer = weakref.finalize(self, self._sink.close)
        self._known = np.full(0, -1, dtype=np.int32)
        self._last: dict[int, tuple[int, int]] = {}

    def log(
        self,
        step: Any,
        sample_ids: Any,
        lengths: Any,
        rank: Any = None,
        micro: Any = 0,
        losses: Any = None,
    ) -> None:
        """Record one micro-batch.

        :param step: the optimizer step it belongs to, as the training log numbers steps;
            per rank, ``(step, micro)`` must increase from one call to the next.
        :param sample_ids: the dataset indices it held (ints, a numpy array, a tensor).
        :param lengths: their real (unpadded) lengths in tokens, in the same order.
        :param rank: the rank that processed it (default: the recorder's rank).
        :param micro: its index among the rank's micro-batches of the step (0 without
            gradient accumulation).
        :param losses: optional, each sample's loss from the forward that trained on
            it, in the same order: the mean over its target tokens, in nats per token
            (NaN for a sample without a target token); kept as float32.
        :raises ValueError: a closed recorder, bad values, or a step or micro that goes
            back.
        """
        if self._sink.file.closed:
            raise ValueError(f"{self.path}: the recorder is closed")
        step_i = _whole(step, "step")
        rank_i = self.rank if rank is None else _whole(rank, "rank")
        micro_i = _whole(micro, "micro")
        ids = _int_array(sample_ids, "sample_ids")
        lens = _int_array(lengths, "lengths")
        if len(ids) != len(lens):
            raise ValueError(f"{len(ids)} sample ids but {len(lens)} lengths")
        if not len(ids):
            raise ValueError(
                f"an empty micro-batch (step {step_i}, rank {rank_i}, micro {micro_i})"
            )
        loss = None if losses is None else _loss_array(losses, len(ids))
        self._check_order(step_i, rank_i, micro_i)
        sink = self._sink
        if sink.step != step_i or sink.pending >= PENDING_LIMIT:
            sink.write()  # the previous step is complete: to the OS with it
            sink.step = step_i
        if sink.forget:  # (steps were dropped: lengths they gave must be given again)
            self._known.fill(-1)
            sink.forget = False
        if len(ids) > 1:  # (the gathers copy: the caller may reuse its buffers)
            order = ids.argsort(kind="stable")
            ids, lens = ids[order], lens[order]
            loss = None if loss is None else loss[order]
        else:
            ids, lens = ids.copy(), lens.copy()
            loss = None if loss is None else loss.copy()
        flags = self._flags(ids, lens)
        if len(ids) > 1:  # an id twice in one micro-batch: every copy carries its length
            twice = ids[1:] == ids[:-1]
            flags[1:] |= twice
            flags[:-1] |= twice
        values = (rank_i, micro_i, ids, flags, lens, loss)
        for part, value in zip(sink.parts, values, strict=True):
            part.append(value)
        sink.pending += len(ids)

    def _check_order(self, step: int, rank: int, micro: int) -> None:
        last = self._last.get(rank)
        if last is not None and (step, micro) <= last:
            if step < last[0]:
                raise ValueError(
                    f"step {step} logged after step {last[0]} for rank {rank}: steps must not "
                    "go back (a resumed run: open a new BatchRecorder on the same path)"
                )
            raise ValueError(
                f"micro-batch {micro} of step {step} (rank {rank}) logged after micro-batch "
                f"{last[1]}: give each micro-batch of a step its own increasing micro="
            )
        self._last[rank] = (step, micro)

    def _flags(self, ids: np.ndarray, lens: np.ndarray) -> np.ndarray:
        """True where a sample's length must be written (first seen, or changed)."""
        import numpy as np

        top = int(ids[-1])  # (sorted)
        if top >= len(self._known) and len(self._known) < KNOWN_LIMIT:
            cover = top if top < KNOWN_LIMIT else int(ids[ids < KNOWN_LIMIT].max(initial=-1))
            if cover >= len(self._known):
                size = min(max(cover + 1, 2 * len(self._known), 1024), KNOWN_LIMIT)
                grown = np.full(size, -1, dtype=np.int32)
                grown[: len(self._known)] = self._known
                self._known = grown
        known = self._known
        if top < len(known):
            seen = known[ids]
            flags = seen != lens
            known[ids] = np.where(lens < 2**31, lens, -1)
            return flags
        flags = np.ones(len(ids), dtype=bool)
        inside = ids < len(known)
        sub, sub_lens = ids[inside], lens[inside]
        flags[inside] = known[sub] != sub_lens
        known[sub] = np.where(sub_lens < 2**31, sub_lens, -1)
        return flags

    def flush(self) -> None:
        """Write the micro-batches of the step in progress to the OS now (they are
        written anyway when the step changes and at close)."""
        self._sink.write()

    def close(self) -> None:
        """Write what is pending, ``fsync`` and close the file (again: nothing)."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._sink.file.closed

    @property
    def waiting_steps(self) -> int:
        """Finished steps not yet written for want of room (a full disk): each write
        tries them again, oldest first."""
        return len(self._sink.queue)

    @property
    def dropped_steps(self) -> int:
        """Steps dropped for want of room: more than :data:`QUEUE_LIMIT` samples
        waiting (the oldest go), or still waiting at :meth:`close`."""
        return self._sink.dropped

    def __enter__(self) -> BatchRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"BatchRecorder({str(self.path)!r}, rank={self.rank}, world_size={self.world_size})"
