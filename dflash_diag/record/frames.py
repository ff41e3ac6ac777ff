"""The frames of a batch recording: checked, resynchronised past a torn write, bounded.

Layout (all integers little-endian)::

    file   := MAGIC (8 bytes, b"DFDBATCH") version (u32) frame*
    frame  := size (u32) check (u16) crc (u32) payload (size bytes)
              check: the low 16 bits of the CRC-32 of the 4 size bytes, so that a
              damaged size is told from a frame cut short; crc: CRC-32 of payload
    payload:= b"H" JSON        a header (see :func:`check_header`)
            | b"B" block       one optimizer step's micro-batches, its step as the change
                               from the previous block's (version 1; fileformat.py)
            | b"S" block       the same, its step written whole (version 2)
            | b"L" block losses   an ``S`` block, then a float32 loss per sample (version 2)

A version 2 writer writes ``S`` and ``L`` blocks only: a step written whole stays right
when a frame before it is lost.

A frame is *good* when its size check and CRC pass.  :func:`scan_frames` walks the good
frames one after the other; at a bad one it looks for the next good frame inside the
bytes the bad one could have held:

- found, and the bad frame's declared end lies beyond it (or its head is cut): a write
  cut short (a full disk, a killed process whose file was appended to later), skipped
  and counted as *torn*;
- found exactly at the bad frame's declared end: the frame is whole but damaged, which
  is corruption, refused with its byte offset;
- not found: a partial last frame or a zeroed tail is torn; anything else is corruption.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import InputError

if TYPE_CHECKING:
    import numpy as np

MAGIC = b"DFDBATCH"
#: 2: adds the ``L`` frame (per-sample losses); files of version 1 still read
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)
#: bytes before the first frame: magic and format version
PREAMBLE = MAGIC + struct.pack("<I", FORMAT_VERSION)
FRAME_HEAD = struct.Struct("<IHI")
KIND_HEADER = b"H"
KIND_BLOCK = b"B"
KIND_STEP = b"S"
KIND_BLOCK_LOSSES = b"L"
#: the kinds a file of each version may hold
KINDS = {1: KIND_HEADER + KIND_BLOCK, 2: KIND_HEADER + KIND_BLOCK + KIND_STEP + KIND_BLOCK_LOSSES}
#: a frame larger than this is corruption, not data (a step of 64M samples at most)
MAX_FRAME = 1 << 30
#: a header is a few hundred bytes of settings; more than this is not one
MAX_HEADER = 1 << 20
#: header fields read as whole numbers, with their bounds
HEADER_INTS = {"world_size": (1, 2**20), "rank": (0, 2**20)}
#: settings the reader interprets, with their bounds (None allowed)
SETTING_INTS = {
    "steps_per_epoch": (0, 2**53),
    "first_step": (0, 2**53),
    "max_seq_len": (0, 2**53),
}


def frame(payload: bytes) -> bytes:
    """``payload`` with its size and CRC-32 in front."""
    size = len(payload)
    return FRAME_HEAD.pack(size, size_check(size), zlib.crc32(payload)) + payload


def size_check(size: int) -> int:
    """The 16-bit check of a frame's size field."""
    return zlib.crc32(size.to_bytes(4, "little")) & 0xFFFF


def header_frame(info: dict[str, Any]) -> bytes:
    """A header frame holding ``info`` as JSON."""
    text = json.dumps(info, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return frame(KIND_HEADER + text.encode())


class NoHeader(InputError):
    """A recording cut before its header was whole (the run stopped at once)."""

    def __init__(self, path: str) -> None:
        super().__init__(path, "holds no complete header (the run stopped at once)", "")


@dataclass(frozen=True)
class Scan:
    """Where the frames of a file are.

    :param headers: the header frames' JSON, in file order.
    :param starts: int64 byte offset of every block payload (after its kind byte).
    :param ends: int64 byte offset one past every block payload.
    :param session: int64 session (index into ``headers``) of every block.
    :param losses: bool per block: an ``L`` block (per-sample losses follow its bits).
    :param whole: bool per block: its step is written whole (``S`` and ``L``), not as a
        change from the previous block's (``B``).
    :param end: byte offset one past the last good frame (where an appender writes).
    :param torn: frames cut short and skipped (in the middle or at the end).
    :param version: the file's format version.
    """

    headers: list[dict[str, Any]]
    starts: np.ndarray
    ends: np.ndarray
    session: np.ndarray
    losses: np.ndarray
    whole: np.ndarray
    end: int
    torn: int
    version: int = FORMAT_VERSION


def file_version(buf: bytes, path: str) -> int:
    """The format version of a file's bytes; refuses a foreign or newer file."""
    if len(buf) < len(PREAMBLE) or buf[: len(MAGIC)] != MAGIC:
        if MAGIC.startswith(buf[: len(MAGIC)]) and len(buf) < len(PREAMBLE):
            raise NoHeader(path)
        raise InputError(path, "not a dflash-diag batch recording (no DFDBATCH header)", "")
    (version,) = struct.unpack_from("<I", buf, len(MAGIC))
    if version not in READ_VERSIONS:
        raise InputError(
            path,
            f"recording format version {version}; this dflash-diag reads versions "
            f"{READ_VERSIONS[0]} to {READ_VERSIONS[-1]}",
            "upgrade dflash-diag" if version > FORMAT_VERSION else "",
        )
    return int(version)


def scan_frames(buf: bytes, path: str) -> Scan:
    """Walk the frames of a file's bytes ``buf``; check every checksum and header.

    :raises InputError: not a recording, a newer format, a file without a complete
        header, a bad header, or a damaged frame (with its byte offset).
    """
    import numpy as np

    version = file_version(buf, path)
    kinds_ok = KINDS[version]
    frames, ends_l, end, torn = _walk(buf, path)
    data = np.frombuffer(buf, dtype=np.uint8)
    at = np.array(frames, dtype=np.int64)
    ends = np.array(ends_l, dtype=np.int64)
    kinds = data[at + FRAME_HEAD.size] if len(at) else data[:0]
    odd = np.flatnonzero(~np.isin(kinds, np.frombuffer(kinds_ok, dtype=np.uint8)))
    if len(odd):
        pos = int(at[odd[0]])
        kind = bytes(data[pos + FRAME_HEAD.size : pos + FRAME_HEAD.size + 1])
        raise InputError(path, f"unknown record kind {kind!r} at byte {pos}", "")
    is_head = kinds == KIND_HEADER[0]
    if not len(at) or not is_head[0]:
        if len(at):
            where = int(at[0])
            raise InputError(path, f"corrupt record at byte {where}: data before the header", "")
        raise NoHeader(path)
    view = memoryview(buf)
    headers = [
        _header_json(view[int(a) + FRAME_HEAD.size + 1 : int(b)], path, int(a))
        for a, b in zip(at[is_head], ends[is_head], strict=True)
    ]
    blocks = ~is_head
    return Scan(
        headers=headers,
        starts=at[blocks] + FRAME_HEAD.size + 1,
        ends=ends[blocks],
        session=(np.cumsum(is_head) - 1)[blocks],
        losses=kinds[blocks] == KIND_BLOCK_LOSSES[0],
        whole=kinds[blocks] != KIND_BLOCK[0],
        end=end,
        torn=torn,
        version=version,
    )


def _walk(buf: bytes, path: str) -> tuple[list[int], list[int], int, int]:
    """The byte offset of every good frame and one past its end, where the last good
    frame ends, and the count of torn frames skipped.  The one Python loop of the
    reader: a frame's size says where the next one starts."""
    frames: list[int] = []
    ends: list[int] = []
    pos = len(PREAMBLE)
    size_all = len(buf)
    end = pos
    torn = 0
    checks: dict[int, int] = {}
    view = memoryview(buf)
    head, unpack, crc32 = FRAME_HEAD.size, FRAME_HEAD.unpack_from, zlib.crc32
    while pos < size_all:
        # the good frame, inline (a million frames a run): see _good_end
        b = None
        if pos + head <= size_all:
            size, check, crc = unpack(buf, pos)
            if checks.get(size) == check and 0 < size <= MAX_FRAME:
                b = pos + head + size
                if b > size_all or crc32(view[pos + head : b]) != crc:
                    b = None
            else:  # (a size not seen yet, or a bad one)
                b = _good_end(buf, pos, checks)
        if b is not None:
            frames.append(pos)
            ends.append(b)
            pos = end = b
            continue
        # a bad frame: a write cut short, or damage
        if not any(memoryview(buf)[pos:]):  # a zeroed tail (a crash before the data reached disk)
            return frames, ends, end, torn + 1
        declared = _declared_end(buf, pos, checks)
        limit = declared if declared is not None else pos + FRAME_HEAD.size - 1
        nxt = _resync(buf, pos + 1, min(limit, size_all - FRAME_HEAD.size - 1), checks)
        if nxt is None:
            if declared is None and pos + FRAME_HEAD.size > size_all:
                return frames, ends, end, torn + 1  # (its head cut short)
            if declared is not None and declared >= size_all:
                return frames, ends, end, torn + 1  # the last record, cut short
            raise InputError(path, f"corrupt record at byte {pos}", "the file is damaged")
        if declared is not None and nxt >= declared:  # whole, yet failing its checksum
            raise InputError(path, f"corrupt record at byte {pos}", "the file is damaged")
        torn += 1
        pos = nxt
    return frames, ends, end, torn


def _declared_end(buf: bytes, pos: int, checks: dict[int, int]) -> int | None:
    """Where the frame at ``pos`` says it ends, when its size passes its check."""
    if pos + FRAME_HEAD.size > len(buf):
        return None
    size, check, _ = FRAME_HEAD.unpack_from(buf, pos)
    good = checks.get(size)
    if good is None:
        good = checks[size] = size_check(size)
    if check != good or size == 0 or size > MAX_FRAME:
        return None
    return pos + FRAME_HEAD.size + size


def _good_end(buf: bytes, pos: int, checks: dict[int, int]) -> int | None:
    """One past the frame at ``pos`` when it is whole and its CRC passes, else None."""
    b = _declared_end(buf, pos, checks)
    if b is None or b > len(buf):
        return None
    crc = FRAME_HEAD.unpack_from(buf, pos)[2]
    if zlib.crc32(memoryview(buf)[pos + FRAME_HEAD.size : b]) != crc:
        return None
    return b


def _resync(buf: bytes, lo: int, hi: int, checks: dict[int, int]) -> int | None:
    """The first offset in ``lo..hi`` where a good frame starts, else None.  Candidates
    are filtered in numpy first (a known kind byte, a size that fits the file)."""
    import numpy as np

    if hi < lo:
        return None
    head = FRAME_HEAD.size
    span = np.frombuffer(buf, dtype=np.uint8, count=hi - lo + head + 1, offset=lo)
    kinds = span[head:]
    known = np.frombuffer(KINDS[FORMAT_VERSION], dtype=np.uint8)
    sizes = np.ndarray((hi - lo + 1,), dtype="<u4", buffer=span, strides=(1,))
    room = len(buf) - head - (lo + np.arange(hi - lo + 1))
    for k in np.flatnonzero(np.isin(kinds, known) & (sizes <= room) & (sizes > 0)):
        if _good_end(buf, lo + int(k), checks) is not None:
            return lo + int(k)
    return None


def _header_json(data: memoryview, path: str, pos: int) -> dict[str, Any]:
    if len(data) > MAX_HEADER:
        raise InputError(
            path, f"a header of {len(data)} bytes at byte {pos} (at most {MAX_HEADER})", ""
        )
    try:
        info = json.loads(bytes(data))
    except (ValueError, RecursionError):  # (RecursionError: JSON nested too deep)
        info = None
    if not isinstance(info, dict):
        raise InputError(path, f"corrupt header at byte {pos}", "")
    check_header(info, path, pos)
    return info


def check_header(info: dict[str, Any], path: str, pos: int) -> None:
    """Refuse a header whose fields the reader uses have the wrong type or range.

    ``world_size`` (1 .. 2**20) and ``rank`` (below it) are whole numbers when given;
    ``settings`` is an object or null; its ``steps_per_epoch``, ``first_step`` and
    ``max_seq_len`` are whole numbers (0 .. 2**53) or null.  Other settings are the run's
    own and are kept as they are.
    """
    where = f"header at byte {pos}"
    hint = "the file is damaged or was not written by dflash-diag"
    for name, (lo, hi) in HEADER_INTS.items():
        if name in info and _whole_problem(info[name], lo, hi):
            raise InputError(path, f"{where}: {name} is {_shown(info[name])}", hint)
    if info.get("rank", 0) >= info.get("world_size", 1) and "world_size" in info:
        raise InputError(path, f"{where}: rank {info['rank']} of {info['world_size']}", hint)
    settings = info.get("settings")
    if settings is not None and not isinstance(settings, dict):
        raise InputError(path, f"{where}: settings is {_shown(settings)}, not an object", hint)
    for name, (lo, hi) in SETTING_INTS.items():
        value = (settings or {}).get(name)
        if value is not None and _whole_problem(value, lo, hi):
            raise InputError(path, f"{where}: setting {name} is {_shown(value)}", hint)


def _whole_problem(value: Any, lo: int, hi: int) -> bool:
    return isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi


def _shown(value: Any) -> str:
    """A value as the message shows it: JSON, cut at 40 characters."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."
