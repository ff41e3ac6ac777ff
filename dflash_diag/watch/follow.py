"""Follow a growing log file: :class:`Follower`.

``Follower(path).poll()`` returns what was written since the last poll as complete
lines, and never blocks: the caller sleeps between polls (:data:`POLL_SECONDS`), so a
log that stops growing costs one ``stat`` and one empty ``read`` per poll.

What a log being written can do, and what the follower does:

- **not there yet** (the trainer has not started): poll until it appears; one notice;
- **a partial last line** (the writer is between ``write`` calls): held back until its
  newline arrives, so a line is never parsed half-written;
- **truncated** (``> run.log``, copy-and-truncate rotation: the size drops below what
  was read): read again from its start; one notice, and ``Chunk.reset`` so the caller
  starts its line parser over;
- **replaced** (rotation by rename, or deleted and written again: the path names a new
  file): what the old file still held is read first, then the new file from its start;
  one notice and ``Chunk.reset``;
- **gone** (deleted, nothing new yet): one notice, then waiting for it as above;
- **gzip**: refused with an :class:`~dflash_diag.errors.InputError`: a gzip stream is
  readable only once it is complete (``spikes`` reads finished ``.gz`` logs).

Bytes are decoded as UTF-8 with bad bytes replaced, ANSI codes removed, and a trailing
``\\r`` (CRLF line ends) dropped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import BinaryIO

from ..errors import InputError
from ..limits import MAX_LINE_BYTES
from ..logs.io import GZIP_MAGIC, decode, strip_ansi

#: Seconds between polls: a line is seen at most this long after it is written.
POLL_SECONDS = 0.1
#: Bytes read per poll at most, so a long backlog is parsed in pieces and the caller can
#: report progress between them.
READ_BYTES = 1 << 18


@dataclass
class Chunk:
    """What one poll found.

    :param lines: complete new lines (without their newline), decoded.
    :param notices: what happened to the file, in words (waiting, truncated, replaced).
    :param reset: the file started over (truncated or replaced) before ``lines``: a
        line parser's state from the old content no longer applies.
    :param backlog: ``lines`` were already in the file when it was first opened.
    :param raw: the same lines with their escape codes kept, when they hold a ``\\r``
        (progress bars: a bar closed with a cursor-up escape is no ``tqdm.write``); None
        otherwise.
    """

    lines: list[str] = field(default_factory=list)
    raw: list[str] | None = None
    notices: list[str] = field(default_factory=list)
    reset: bool = False
    backlog: bool = False


class Follower:
    """Polls ``path`` for new complete lines (module docstring).

    :param path: the log file.
    :param from_start: read what the file already holds (True) or only what is written
        after the first open (False).

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "run.log"
    >>> f = Follower(p)
    >>> f.poll().notices[0].startswith("waiting for")
    True
    >>> _ = p.write_text("step=1 loss=2.5\\nstep=2 lo")
    >>> f.poll().lines
    ['step=1 loss=2.5']
    >>> with p.open("a") as w:
    ...     _ = w.write("ss=2.4\\n")
    >>> f.poll().lines
    ['step=2 loss=2.4']
    """

    def __init__(self, path: str | os.PathLike[str], from_start: bool = True) -> None:
        self.path = os.fspath(path)
        self.from_start = from_start
        self._file: BinaryIO | None = None
        self._identity: tuple[int, int] | None = None
        self._pos = 0
        self._pending = bytearray()  # (grown in place: a long line is never re-copied)
        self._backlog_end = -1  # bytes present at the first open (-1: not opened yet)
        self._head = b""  # the file's first two bytes, once read (gzip's magic?)
        self._said_waiting = False
        self._said_gone = False
        self.partial_lines_dropped = 0
        #: Bytes read so far, over every file the path named (for the status line's
        #: "lines behind": unread bytes at the mean length of the lines read).
        self.bytes_read = 0
        self._skipping = False  # dropping the rest of an over-long line

    def close(self) -> None:
        """Close the file (the follower can be polled again: it reopens)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def unread(self) -> int:
        """Bytes written to the file that were not read yet (with the partial last line
        held back): what a watch that stops now leaves unjudged."""
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return 0
        return max(0, size - self._pos) + len(self._pending)

    @property
    def pending(self) -> bytes:
        """The partial last line held back (no newline yet)."""
        return bytes(self._pending)

    def poll(self) -> Chunk:
        """New complete lines, and what happened to the file (never blocks)."""
        chunk = Chunk()
        if self._file is None and not self._open(chunk):
            return chunk
        data = self._read()
        if not data and self._check_replaced(chunk):
            data = self._read()
        self._split(data, chunk)
        return chunk

    def _open(self, chunk: Chunk) -> bool:
        """Open the path; False (and one notice) while it does not exist."""
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - kept open between polls
        except FileNotFoundError:
            if not self._said_waiting:
                chunk.notices.append(f"waiting for {self.path} to appear")
                self._said_waiting = True
            return False
        except IsADirectoryError:
            raise InputError(
                self.path, "is a folder, not a log file", "give the log file"
            ) from None
        except OSError as e:
            raise InputError(
                self.path, f"cannot read it ({e.strerror})", "check permissions"
            ) from None
        st = os.fstat(f.fileno())
        self._file, self._identity, self._pos, self._head = f, (st.st_dev, st.st_ino), 0, b""
        if self._backlog_end < 0:  # the first open: what is there now is the backlog
            self._backlog_end = 0 if self._said_waiting else st.st_size
            if not self.from_start:
                self._pos = st.st_size
                self._head = b"--"  # (mid-file: no header to check)
                f.seek(self._pos)
        else:
            self._backlog_end = 0
        if self._said_waiting:
            chunk.notices.append(f"{self.path} appeared")
        self._said_waiting = False
        return True

    def _read(self) -> bytes:
        """Up to :data:`READ_BYTES` new bytes (never across the backlog's end, so a
        chunk is all backlog or all new); a gzip header is refused."""
        assert self._file is not None  # (poll opened it)
        size = READ_BYTES
        if self._pos < self._backlog_end:
            size = min(size, self._backlog_end - self._pos)
        data = self._file.read(size)
        self._pos += len(data)
        self.bytes_read += len(data)
        if len(self._head) < 2 and data:
            self._head = (self._head + data)[:2]
            if self._head == GZIP_MAGIC:
                self.close()
                raise InputError(
                    self.path,
                    "is gzip-compressed, and a gzip stream can only be read once complete",
                    f"watch the uncompressed log, or run 'dflash-diag spikes {self.path}'",
                )
        return data

    def _check_replaced(self, chunk: Chunk) -> bool:
        """Truncated, replaced or gone (module docstring): say so; True when reading
        starts over from the start of a file."""
        assert self._file is not None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if not self._said_gone:
                chunk.notices.append(f"{self.path} disappeared: waiting for it")
                self._said_gone = True
            return False
        if (st.st_dev, st.st_ino) != self._identity:
            self._drop_partial()
            self.close()
            was_gone, self._said_gone = self._said_gone, False
            if not self._open(chunk):
                return False  # (gone again between the stat and the open)
            what = "is back" if was_gone else "was replaced"
            chunk.notices.append(f"{self.path} {what}: reading the new file from its start")
            chunk.reset = True
            return True
        if st.st_size < self._pos:
            self._drop_partial()
            self._file.seek(0)
            self._pos, self._head, self._backlog_end = 0, b"", 0
            chunk.notices.append(f"{self.path} was truncated: reading it again from its start")
            chunk.reset = True
            return True
        return False

    def _drop_partial(self) -> None:
        if self._pending:
            self.partial_lines_dropped += 1
            self._pending = bytearray()

    def _split(self, data: bytes, chunk: Chunk) -> None:
        """Complete lines of ``pending + data`` into ``chunk``.  Only ``data`` is searched
        for a newline and the pending part is appended to in place, so the work is
        linear in the bytes read however long a line waits for its newline; a pending
        line past :data:`~dflash_diag.limits.MAX_LINE_BYTES` is dropped (counted, said)."""
        if not data:
            return
        cut = data.rfind(b"\n")
        if cut < 0:
            self._pending += data
            if len(self._pending) > MAX_LINE_BYTES:
                self._drop_partial()
                self._skipping = True
                chunk.notices.append(
                    f"a line longer than {MAX_LINE_BYTES >> 20} MB was skipped (not a record)"
                )
            return
        whole = bytes(self._pending) + data[:cut]
        self._pending = bytearray(data[cut + 1 :])
        if self._skipping:  # (the rest of the over-long line: dropped up to its newline)
            self._skipping = False
            end = whole.find(b"\n")
            if end < 0:
                return
            whole = whole[end + 1 :]
        chunk.backlog = self._pos <= self._backlog_end
        text, _ = decode(whole)
        for line in strip_ansi(text).split("\n"):
            chunk.lines.append(line[:-1] if line.endswith("\r") else line)
        if "\r" in text:
            raw = [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]
            chunk.raw = raw if len(raw) == len(chunk.lines) else None
