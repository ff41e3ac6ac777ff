"""The on-disk format of a batch recording (``train.batches``): framed, append-only.

Layout (all integers little-endian)::

    file   := MAGIC (8 bytes, b"DFDBATCH") version (u32) frame*
    frame  := size (u32) crc (u32, CRC-32 of payload) payload (size bytes)
    payload:= b"H" JSON        a header: format version, dflash_diag version, rank,
                               world size, the run's settings; the first frame, and
                               again at each reopening (a resumed run: a new session)
            | b"B" varint*     one optimizer step's micro-batches logged by one process

A ``B`` payload is unsigned LEB128 varints (7 bits a byte, low group first, high bit
set on every byte but the last)::

    step R (rank micro n) x R   code x sum(n)   length x sum(flags)

Record ``j`` (one micro-batch) holds ``n_j`` sample ids sorted ascending; each id is
written as ``code = delta << 1 | flag`` where ``delta`` is the id minus the previous id
of the micro-batch (the first id is its own delta) and ``flag`` says its length follows
in the length section.  A writer sets the flag the first time it records an id in its
session and whenever the id's length differs from the one it recorded before; a reader
takes an unflagged id's length from the last flagged record of that id before it.

A process killed in the middle of a write leaves a partial last frame (or a last
frame whose checksum fails): :func:`scan_frames` ignores it and counts it as torn.  A
bad frame anywhere else is corruption and is refused, naming the byte offset.
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
FORMAT_VERSION = 1
#: bytes before the first frame: magic and format version
PREAMBLE = MAGIC + struct.pack("<I", FORMAT_VERSION)
FRAME_HEAD = struct.Struct("<II")
KIND_HEADER = b"H"
KIND_BLOCK = b"B"
#: a frame larger than this is corruption, not data (a step of 64M samples at most)
MAX_FRAME = 1 << 30
#: bytes decoded at once (bounds the temporaries of the varint decoder)
DECODE_CHUNK = 1 << 24


def encode_varints(values: np.ndarray) -> bytes:
    """Unsigned LEB128 of every value (uint64, or ints >= 0), concatenated.

    >>> import numpy as np
    >>> encode_varints(np.array([0, 1, 127, 128, 300])).hex()
    '00017f8001ac02'
    """
    import numpy as np

    v = np.asarray(values).astype(np.uint64, copy=False)
    if not len(v):
        return b""
    top = int(v.max())
    if top < 128:  # (one byte each)
        return v.astype(np.uint8).tobytes()
    width = (top.bit_length() + 6) // 7  # bytes of the largest value
    pieces = []
    for a in range(0, len(v), DECODE_CHUNK // 4):
        part = v[a : a + DECODE_CHUNK // 4]
        n_bytes = np.ones(len(part), dtype=np.uint8)
        groups = np.empty((len(part), width), dtype=np.uint8)
        groups[:, 0] = part & np.uint64(0x7F)
        for k in range(1, width):
            shifted = part >> np.uint64(7 * k)
            groups[:, k] = shifted & np.uint64(0x7F)
            n_bytes += shifted > 0
        column = np.arange(width, dtype=np.uint8)
        groups |= (column < n_bytes[:, None] - 1).view(np.uint8) << 7  # (more follows)
        pieces.append(groups[column < n_bytes[:, None]].tobytes())
    return b"".join(pieces)


def decode_varints(data: np.ndarray) -> np.ndarray:
    """The uint64 values of concatenated LEB128 varints (``data``: uint8 array that ends
    on a last byte).  Raises ValueError on a varint longer than 10 bytes or a
    truncated end.

    >>> import numpy as np
    >>> decode_varints(np.frombuffer(bytes.fromhex('00017f8001ac02'), np.uint8)).tolist()
    [0, 1, 127, 128, 300]
    """
    import numpy as np

    if not len(data):
        return np.zeros(0, dtype=np.uint64)
    if data[-1] >= 128:
        raise ValueError("the last varint is cut short")
    pieces = []
    a = 0
    while a < len(data):
        b = min(a + DECODE_CHUNK, len(data))
        if b < len(data):  # end the chunk after a last byte
            last = np.flatnonzero(data[a:b] < 128)
            b = a + int(last[-1]) + 1 if len(last) else len(data)
        pieces.append(_decode_chunk(data[a:b]))
        a = b
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def _decode_chunk(data: np.ndarray) -> np.ndarray:
    import numpy as np

    ends = np.flatnonzero(data < 128)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    sizes = ends - starts + 1
    if int(sizes.max()) > 10:
        raise ValueError("a varint longer than 10 bytes")
    vals = (data[starts] & 0x7F).astype(np.uint64)
    for k in range(1, int(sizes.max())):
        sel = np.flatnonzero(sizes > k)
        vals[sel] |= (data[starts[sel] + k] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
    return vals


def frame(payload: bytes) -> bytes:
    """``payload`` with its size and CRC-32 in front."""
    return FRAME_HEAD.pack(len(payload), zlib.crc32(payload)) + payload


def header_frame(info: dict[str, Any]) -> bytes:
    """A header frame holding ``info`` as JSON."""
    text = json.dumps(info, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return frame(KIND_HEADER + text.encode())


def block_payload(
    step: int,
    ranks: list[int],
    micros: list[int],
    ids: list[Any],
    flags: list[Any],
    lens: list[Any],
) -> bytes:
    """The ``B`` payload of one step: micro-batch ``j`` has rank ``ranks[j]``, micro
    ``micros[j]``, sorted sample ids ``ids[j]`` (int64 arrays), their length flags
    ``flags[j]`` (bool arrays) and the flagged lengths ``lens[j]``."""
    import numpy as np

    head = [step, len(ids)]
    for r, m, x in zip(ranks, micros, ids, strict=True):
        head += (r, m, len(x))
    x = ids[0] if len(ids) == 1 else np.concatenate(ids)
    d = x.astype(np.uint64)  # (a copy: deltas in place; wrapping never happens, sorted)
    d[1:] -= d[:-1].copy()
    if len(ids) > 1:  # each micro-batch's first id is its own delta
        firsts = np.cumsum([0] + [len(y) for y in ids[:-1]])
        d[firsts] = x[firsts]
    codes = (d << np.uint64(1)) | np.concatenate(flags).astype(np.uint64)
    tail = lens[0] if len(lens) == 1 else np.concatenate(lens)
    if len(codes) + len(tail) <= SMALL:
        return KIND_BLOCK + small_varints(head + codes.tolist() + tail.tolist())
    body = np.concatenate([np.array(head, dtype=np.uint64), codes, tail.astype(np.uint64)])
    return KIND_BLOCK + encode_varints(body)


#: up to this many values, varints are encoded in Python (faster than numpy's set-up)
SMALL = 256


def small_varints(values: list[int]) -> bytes:
    """:func:`encode_varints` of a short list of ints >= 0, in plain Python.

    >>> small_varints([0, 1, 127, 128, 300]).hex()
    '00017f8001ac02'
    """
    out = bytearray()
    append = out.append
    for v in values:
        while v >= 0x80:
            append((v & 0x7F) | 0x80)
            v >>= 7
        append(v)
    return bytes(out)


@dataclass(frozen=True)
class Scan:
    """Where the frames of a file are.

    :param headers: the header frames' JSON, in file order, with their frame index.
    :param starts: int64 byte offset of every block payload (after its kind byte).
    :param ends: int64 byte offset one past every block payload.
    :param session: int64 session (index into ``headers``) of every block.
    :param end: byte offset one past the last good frame (where an appender writes).
    :param torn: 1 when the file ends in a partial or unchecked frame, else 0.
    """

    headers: list[dict[str, Any]]
    starts: np.ndarray
    ends: np.ndarray
    session: np.ndarray
    end: int
    torn: int


def scan_frames(buf: bytes, path: str) -> Scan:
    """Walk the frames of a file's bytes ``buf``; check every checksum.

    :raises InputError: not a recording, a newer format, a file without a complete
        header, or a bad frame that is not the last one (with its byte offset).
    """
    import numpy as np

    if len(buf) < len(PREAMBLE) or buf[: len(MAGIC)] != MAGIC:
        if MAGIC.startswith(buf[: len(MAGIC)]) and len(buf) < len(PREAMBLE):
            raise InputError(path, "holds no complete header (the run stopped at once)", "")
        raise InputError(path, "not a dflash-diag batch recording (no DFDBATCH header)", "")
    (version,) = struct.unpack_from("<I", buf, len(MAGIC))
    if version != FORMAT_VERSION:
        raise InputError(
            path,
            f"recording format version {version}; this dflash-diag reads {FORMAT_VERSION}",
            "upgrade dflash-diag" if version > FORMAT_VERSION else "",
        )
    headers: list[dict[str, Any]] = []
    starts: list[int] = []
    ends: list[int] = []
    session: list[int] = []
    pos = len(PREAMBLE)
    size_all = len(buf)
    crc32 = zlib.crc32
    view = memoryview(buf)
    unpack = FRAME_HEAD.unpack_from
    torn = 0
    while pos < size_all:
        if pos + 8 > size_all:
            torn = 1
            break
        size, crc = unpack(buf, pos)
        a, b = pos + 8, pos + 8 + size
        if b > size_all or size == 0 or size > MAX_FRAME or crc32(view[a:b]) != crc:
            if b >= size_all or not any(view[pos:]):  # the last frame, or a zeroed tail
                torn = 1
                break
            raise InputError(path, f"corrupt record at byte {pos}", "the file is damaged")
        kind = buf[a : a + 1]
        if kind == KIND_BLOCK:
            starts.append(a + 1)
            ends.append(b)
            session.append(len(headers) - 1)
        elif kind == KIND_HEADER:
            headers.append(_header_json(view[a + 1 : b], path, pos))
        else:
            raise InputError(path, f"unknown record kind {kind!r} at byte {pos}", "")
        if not headers:
            raise InputError(path, f"corrupt record at byte {pos}: data before the header", "")
        pos = b
    if not headers:
        raise InputError(path, "holds no complete header (the run stopped at once)", "")
    return Scan(
        headers=headers,
        starts=np.array(starts, dtype=np.int64),
        ends=np.array(ends, dtype=np.int64),
        session=np.array(session, dtype=np.int64),
        end=pos,
        torn=torn,
    )


def _header_json(data: memoryview, path: str, pos: int) -> dict[str, Any]:
    try:
        info = json.loads(bytes(data))
    except ValueError:
        info = None
    if not isinstance(info, dict):
        raise InputError(path, f"corrupt header at byte {pos}", "")
    return info


def block_bytes(buf: bytes, scan: Scan) -> np.ndarray:
    """The block payloads of ``buf`` concatenated (uint8), one copy."""
    import numpy as np

    data = np.frombuffer(buf, dtype=np.uint8)
    if not len(scan.starts):
        return data[:0]
    edge = np.zeros(len(data) + 1, dtype=np.int8)
    edge[scan.starts] = 1
    edge[scan.ends] -= 1
    inside = np.cumsum(edge[:-1], dtype=np.int8).view(np.bool_)
    return data[inside]


def decode_blocks(buf: bytes, scan: Scan, path: str) -> dict[str, np.ndarray]:
    """Every micro-batch and sample of the blocks of ``buf``, vectorised.

    Returns per micro-batch (file order) int64 ``step, rank, micro, n, session`` and per
    sample (file order) int64 ``sample_id``, ``length`` (-1 where the id's length is not
    in this record: see :func:`resolve_lengths`) and bool ``flag``.

    :raises InputError: a block whose varints do not add up (a foreign or damaged file
        whose checksums still pass).
    """
    import numpy as np

    data = block_bytes(buf, scan)
    try:
        vals = decode_varints(data)
    except ValueError as err:
        raise InputError(path, f"corrupt batch records ({err})", "") from None
    n_blocks = len(scan.starts)
    sizes = scan.ends - scan.starts
    bounds = np.zeros(n_blocks + 1, dtype=np.int64)
    if n_blocks:  # varints per block: the last bytes in it
        last = (data < 128).view(np.uint8)
        byte_starts = np.zeros(n_blocks, dtype=np.int64)
        np.cumsum(sizes[:-1], out=byte_starts[1:])
        np.cumsum(np.add.reduceat(last, byte_starts, dtype=np.int64), out=bounds[1:])
    recs = _block_records(vals, bounds, path)
    rows = _block_rows(vals, bounds, recs, path)
    recs["session"] = np.repeat(scan.session, recs.pop("per_block"))
    return recs | rows


def _bad(path: str, what: str) -> InputError:
    return InputError(path, f"corrupt batch records: {what}", "the file is damaged")


def _block_records(vals: np.ndarray, bounds: np.ndarray, path: str) -> dict[str, np.ndarray]:
    """Micro-batch heads of every block: step, rank, micro, n (int64) and the block of
    each, where each block's code section starts (``code_at``)."""
    import numpy as np

    v0 = bounds[:-1]
    count = np.diff(bounds)
    if (count < 5).any():
        raise _bad(path, "a step record too short")
    if len(vals) and int(vals.max()) >= 2**63:
        raise _bad(path, "a number beyond int64")
    ivals = vals.view(np.int64)
    per_block = ivals[v0 + 1]
    if (per_block < 1).any() or (2 + 3 * per_block > count).any():
        raise _bad(path, "a step record with a wrong micro-batch count")
    block = np.repeat(np.arange(len(v0)), per_block)
    first = np.zeros(len(v0), dtype=np.int64)
    np.cumsum(per_block[:-1], out=first[1:])
    j = np.arange(len(block), dtype=np.int64) - first[block]
    head = v0[block] + 2 + 3 * j
    if (ivals[head + 2] > len(vals)).any():
        raise _bad(path, "a micro-batch larger than the file")
    return {
        "step": ivals[v0][block],
        "rank": ivals[head],
        "micro": ivals[head + 1],
        "n": ivals[head + 2],
        "block": block,
        "per_block": per_block,
        "code_at": (v0 + 2 + 3 * per_block)[block],
        "first": first,
    }


def _block_rows(
    vals: np.ndarray, bounds: np.ndarray, recs: dict[str, np.ndarray], path: str
) -> dict[str, np.ndarray]:
    """Sample ids, flags and flagged lengths of every micro-batch (file order)."""
    import numpy as np

    n, block, first = recs.pop("n"), recs.pop("block"), recs.pop("first")
    recs["n"] = n
    row_start = np.zeros(len(n) + 1, dtype=np.int64)
    np.cumsum(n, out=row_start[1:])
    # a micro-batch's codes start after those of the earlier micro-batches of its block
    within = row_start[:-1] - row_start[first][block]
    code_start = recs.pop("code_at") + within
    total = int(row_start[-1])
    if total > len(vals):
        raise _bad(path, "more sample ids announced than stored")
    at = np.arange(total, dtype=np.int64)
    at += np.repeat(code_start - row_start[:-1], n)
    n_block = np.add.reduceat(n, first) if len(first) else first
    length_at = bounds[:-1] + 2 + 3 * recs["per_block"] + n_block
    if (length_at > bounds[1:]).any():
        raise _bad(path, "fewer sample ids than announced")
    codes = vals[at]
    del at
    flag = (codes & np.uint64(1)).astype(bool)
    sums = np.zeros(total + 1, dtype=np.uint64)  # (wraps mod 2**64: differences stay exact)
    np.cumsum(codes >> np.uint64(1), out=sums[1:])
    ids = sums[1:] - np.repeat(sums[row_start[:-1]], n)
    del sums
    del codes
    row_block = np.repeat(block, n)
    k_block = np.bincount(row_block[flag], minlength=len(first))
    if (length_at + k_block != bounds[1:]).any():
        raise _bad(path, "lengths and flags do not match")
    flagged = np.flatnonzero(flag)
    k_first = np.zeros(len(first), dtype=np.int64)
    np.cumsum(k_block[:-1], out=k_first[1:])
    rb = row_block[flagged]
    length = np.full(total, -1, dtype=np.int64)
    length[flagged] = vals[length_at[rb] + np.arange(len(flagged)) - k_first[rb]].view(np.int64)
    if total and int(ids.max()) >= 2**63:
        raise _bad(path, "a sample id beyond int64")
    return {"sample_id": ids.view(np.int64), "length": length, "flag": flag}


def resolve_lengths(sample_id: np.ndarray, length: np.ndarray, flag: np.ndarray) -> np.ndarray:
    """Every row's length: a flagged row's own, else that of the last flagged row of the
    same id before it (rows in file order, one writer session's memory: the caller
    passes rows of one file, and a new session flags its first records again).

    Returns int64 lengths, with -1 where no flagged row of the id comes before."""
    import numpy as np

    if not len(sample_id):
        return length.copy()
    order = np.argsort(sample_id, kind="stable")
    sid = sample_id[order]
    pos = np.arange(len(order), dtype=np.int64)
    last = np.where(flag[order], pos, -1)
    np.maximum.accumulate(last, out=last)
    group_start = np.r_[0, np.flatnonzero(sid[1:] != sid[:-1]) + 1]
    starts = np.repeat(group_start, np.diff(np.r_[group_start, len(sid)]))
    ok = last >= starts
    out = np.full(len(order), -1, dtype=np.int64)
    out[order[ok]] = length[order][last[ok]]
    return out
