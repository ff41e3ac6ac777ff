"""The blocks of a batch recording (``train.batches``): what one step's frame holds.

The framing (magic, version, frames with their checks, headers, what a torn write
leaves) is :mod:`dflash_diag.record.frames`.

A ``B`` payload (after its kind byte) is a count ``V`` of bytes, then ``V`` bytes of
unsigned LEB128 varints (7 bits a byte, low group first, high bit set on every byte but
the last), then raw bits::

    V | step R (rank micro n L H mode) x R  length x K | (low high flags) x R

``step`` is the step itself in an ``S`` or ``L`` block; in a ``B`` block (version 1) it
is the zigzag of the change from the previous block's step in the same session (the
first block's is from 0).  Micro-batch ``j``'s ``n`` sample ids, sorted
ascending, are Elias-Fano coded (:func:`elias_fano`): ``ceil(n*L/8)`` bytes of low bits
and ``H`` bytes of high bits.  ``mode`` says whose lengths follow in the ``K`` lengths
of the block: 0 none, 1 all, 2 those whose bit is set in ``ceil(n/8)`` flag bytes.  A
writer gives the length of an id the first time it records it in its session, when it
changes, and for every copy of an id held twice in one micro-batch; a reader takes an
id's length from the last record of it that gave one.

An ``L`` payload (format version 2) is a ``B`` payload followed by one little-endian
float32 per sample of the block, in the order of its rows (micro-batch by micro-batch, ids
ascending): the sample's loss, nats per target token, NaN where none was measured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import InputError
from .frames import (
    FORMAT_VERSION,
    FRAME_HEAD,
    KIND_BLOCK,
    KIND_BLOCK_LOSSES,
    KIND_HEADER,
    KIND_STEP,
    MAGIC,
    MAX_FRAME,
    PREAMBLE,
    NoHeader,
    Scan,
    frame,
    header_frame,
    scan_frames,
    size_check,
)

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "FORMAT_VERSION",
    "FRAME_HEAD",
    "KIND_BLOCK",
    "KIND_BLOCK_LOSSES",
    "KIND_HEADER",
    "KIND_STEP",
    "MAGIC",
    "MAX_FRAME",
    "PREAMBLE",
    "NoHeader",
    "Scan",
    "block_payload",
    "decode_blocks",
    "decode_varints",
    "elias_fano",
    "encode_varints",
    "frame",
    "header_frame",
    "resolve_lengths",
    "scan_frames",
    "size_check",
    "small_varints",
    "zigzag",
]

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


def zigzag(value: int) -> int:
    """A signed int as an unsigned one, small magnitudes small: 0, -1, 1, -2 -> 0, 1, 2, 3."""
    return 2 * value if value >= 0 else -2 * value - 1


def elias_fano(x: np.ndarray) -> tuple[int, bytes, bytes]:
    """Elias-Fano code of sorted ids ``x`` (int64 >= 0, at least one): ``(L, low, high)``.

    ``L = floor(log2(U / n))`` (``U`` = largest id + 1, at most 56); ``low`` packs the
    ``L`` low bits of every id (id ``i`` at bits ``i*L .. i*L+L-1``, least significant
    bit first); ``high`` is a bit vector with bit ``(x_i >> L) + i`` set for every ``i``.
    About ``2 + L`` bits an id (Elias 1974, Fano 1971).
    """
    import numpy as np

    n = len(x)
    width = min(max(((int(x[-1]) + 1) // n).bit_length() - 1, 0), 56)
    u = x.astype(np.uint64)
    if width:
        bits = (u[:, None] >> np.arange(width, dtype=np.uint64)) & np.uint64(1)
        low = np.packbits(bits.astype(np.uint8).ravel(), bitorder="little").tobytes()
    else:
        low = b""
    at = (u >> np.uint64(width)).astype(np.int64) + np.arange(n)
    vector = np.zeros(int(at[-1]) + 1, dtype=np.uint8)
    vector[at] = 1
    return width, low, np.packbits(vector, bitorder="little").tobytes()


def block_payload(
    step: int,
    ranks: list[int],
    micros: list[int],
    ids: list[Any],
    flags: list[Any],
    lens: list[Any],
    losses: list[Any] | None = None,
    delta: bool = False,
) -> bytes:
    """The ``S`` payload of one step's micro-batches (see the module docstring), or the
    ``L`` payload when ``losses`` gives any, or with ``delta`` the ``B`` payload of
    version 1 (``step`` then the zigzag of the change: what version 1 wrote).

    Micro-batch ``j`` has rank ``ranks[j]``, micro ``micros[j]``, sorted sample ids
    ``ids[j]`` (int64 arrays), their length flags ``flags[j]`` (bool arrays), the
    flagged lengths ``lens[j]`` and the samples' losses ``losses[j]`` (float32 arrays in
    the order of the ids, or None: NaN).
    """
    import numpy as np

    head = [step, len(ids)]
    raw: list[bytes] = []
    for r, m, x, f in zip(ranks, micros, ids, flags, strict=True):
        width, low, high = elias_fano(x)
        mode = 0 if not f.any() else (1 if f.all() else 2)
        head += (r, m, len(x), width, len(high), mode)
        raw += (low, high, np.packbits(f, bitorder="little").tobytes() if mode == 2 else b"")
    tail = lens[0] if len(lens) == 1 else np.concatenate(lens)
    if len(tail) <= SMALL:
        varints = small_varints(head + tail.tolist())
    else:
        varints = small_varints(head) + encode_varints(tail)
    kind = KIND_BLOCK if delta else KIND_STEP
    if delta and losses is not None:
        raise ValueError("a version 1 block holds no losses")
    if losses is not None and any(v is not None for v in losses):
        kind = KIND_BLOCK_LOSSES
        nan = np.float32("nan")
        raw += [
            (np.full(len(x), nan, np.float32) if v is None else v).astype("<f4").tobytes()
            for x, v in zip(ids, losses, strict=True)
        ]
    return kind + small_varints([len(varints)]) + varints + b"".join(raw)


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


def gather_ranges(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``concatenate([data[a:b] for a, b in zip(starts, ends)])`` for sorted,
    non-overlapping ranges, without a Python loop a range: a mask over ``data`` where
    the ranges hold much of it, else an index of each byte gathered, a run of ranges of
    about :data:`~dflash_diag.arrays.CHUNK` bytes at a time."""
    import numpy as np

    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return data[:0]
    lengths = ends - starts
    done = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=done[1:])
    if 4 * int(done[-1]) < data.size:  # (a few bytes of many: each gathered)
        return _gathered(data, starts, lengths, done)
    edge = np.zeros(len(data) + 1, dtype=np.int8)
    edge[starts] = 1
    edge[ends] -= 1  # (an end meeting the next start cancels it: the range goes on)
    return data[np.cumsum(edge[:-1], dtype=np.int8).view(np.bool_)]


def _gathered(
    data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, done: np.ndarray
) -> np.ndarray:
    """:func:`gather_ranges` by index: byte ``i`` of the output, in range ``r``, is
    ``data[starts[r] + i - done[r]]`` (``done``: the bytes of the ranges before)."""
    import numpy as np

    from ..arrays import CHUNK

    out = np.empty(int(done[-1]), dtype=data.dtype)
    r0 = 0
    while r0 < len(starts):
        r1 = int(np.searchsorted(done, done[r0] + CHUNK, side="right")) - 1
        r1 = min(max(r1, r0 + 1), len(starts))
        at = np.repeat(starts[r0:r1] - done[r0:r1], lengths[r0:r1])
        at += np.arange(done[r0], done[r1], dtype=np.int64)
        np.take(data, at, out=out[done[r0] : done[r1]])
        r0 = r1
    return out


def first_varints(data: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint starting at each offset ``at`` of ``data``: (values, bytes each)."""
    import numpy as np

    vals = np.zeros(len(at), dtype=np.uint64)
    n_bytes = np.zeros(len(at), dtype=np.int64)
    live = np.ones(len(at), dtype=bool)
    for k in range(10):
        if not live.any():
            break
        b = data[np.minimum(at + k, len(data) - 1)]
        vals[live] |= (b[live] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        n_bytes += live
        live &= b >= 128
    return vals, n_bytes


def _bad(path: str, what: str) -> InputError:
    return InputError(path, f"corrupt batch records: {what}", "the file is damaged")


#: bytes of memory a row costs the reader at its peak (decoding, the table, the sort)
ROW_BYTES = 96


def memory_limit() -> int:
    """Bytes of physical memory on this machine (2**62 when it cannot be told)."""
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 2**62


def decode_blocks(buf: bytes, scan: Scan, path: str) -> dict[str, np.ndarray]:
    """Every micro-batch and sample of the blocks of ``buf``, vectorised.

    Returns per micro-batch (file order) int64 ``step, rank, micro, n, session`` and
    bool ``losses`` (its block carried losses), and per sample (file order) int64
    ``sample_id``, ``length`` (-1 where the id's length is not in this record: see
    :func:`resolve_lengths`), bool ``flag`` and float32 ``loss`` (NaN where none).

    :raises InputError: a block whose parts do not add up (a foreign or damaged file
        whose checksums still pass), or more samples than this machine's memory holds
        (:data:`ROW_BYTES` a sample).
    """
    import numpy as np

    data = np.frombuffer(buf, dtype=np.uint8)
    vlen, nb = first_varints(data, scan.starts)
    vstart = scan.starts + nb
    vend = vstart + vlen.astype(np.int64)
    if (vlen == 0).any() or (vlen >= 2**40).any() or (vend > scan.ends).any():
        raise _bad(path, "a step record with a wrong size")
    if len(vend) and (data[vend - 1] >= 128).any():
        raise _bad(path, "a step record cut inside a number")
    vbytes = gather_ranges(data, vstart, vend)
    try:
        vals = decode_varints(vbytes)
    except ValueError as err:
        raise _bad(path, str(err)) from None
    bounds = np.zeros(len(vstart) + 1, dtype=np.int64)
    if len(vstart):  # varints per block: the last bytes in its section
        section = np.zeros(len(vstart), dtype=np.int64)
        np.cumsum(vlen[:-1].astype(np.int64), out=section[1:])
        last = (vbytes < 128).view(np.uint8)
        np.cumsum(np.add.reduceat(last, section, dtype=np.int64), out=bounds[1:])
    recs = _block_heads(vals, bounds, scan.session, scan.whole, path)
    _check_room(recs["n"], len(buf), path)
    recs["losses"] = scan.losses[recs["block"]]
    raw_at = _raw_layout(recs, vend, scan.ends, path)
    rows = _rows_in_chunks(data, vals, bounds, recs, raw_at, scan.ends, path)
    return {k: recs[k] for k in ("step", "rank", "micro", "n", "session", "losses")} | rows


#: rows decoded at once: the decoder's temporaries stay near the CPU's caches, and its
#: memory beyond the output is bounded by a chunk
ROWS_CHUNK = 1 << 19


def _rows_in_chunks(
    data: np.ndarray,
    vals: np.ndarray,
    bounds: np.ndarray,
    recs: dict[str, np.ndarray],
    raw_at: dict[str, np.ndarray],
    ends: np.ndarray,
    path: str,
) -> dict[str, np.ndarray]:
    """:func:`_block_rows` and :func:`_losses` over runs of whole blocks of about
    :data:`ROWS_CHUNK` rows each, written into the output arrays (rows in file order).

    Each run sees only its own bytes ``data[lo:hi]``, its micro-batches and its blocks,
    its offsets taken from ``lo``, its block numbers from its first block."""
    import numpy as np

    first, n = recs["first"], recs["n"]
    n_blocks = len(first)
    row_at = np.zeros(len(n) + 1, dtype=np.int64)
    np.cumsum(n, out=row_at[1:])
    total = int(row_at[-1])
    out = {
        "sample_id": np.empty(total, dtype=np.int64),
        "flag": np.empty(total, dtype=bool),
        "length": np.empty(total, dtype=np.int64),
        "loss": np.empty(total, dtype=np.float32),
    }
    block_rows = row_at[np.r_[first, len(n)]]  # the first row of every block, and the end
    b0 = 0
    while b0 < n_blocks:
        b1 = int(np.searchsorted(block_rows, block_rows[b0] + ROWS_CHUNK, side="right")) - 1
        b1 = min(max(b1, b0 + 1), n_blocks)
        m0, m1 = int(first[b0]), int(first[b1]) if b1 < n_blocks else len(n)
        lo, hi = int(raw_at["low"][m0]), int(ends[b1 - 1])  # (the run's raw bits, losses)
        sub = {k: recs[k][m0:m1] for k in ("n", "width", "high", "mode", "losses")}
        sub["block"] = recs["block"][m0:m1] - b0
        sub["first"] = first[b0:b1] - m0
        sub["per_block"] = recs["per_block"][b0:b1]
        at = {k: raw_at[k][m0:m1] - lo for k in raw_at}
        window = data[lo:hi]
        r0, r1 = int(row_at[m0]), int(row_at[m1])
        into = {k: v[r0:r1] for k, v in out.items()}
        _block_rows(window, vals, bounds[b0 : b1 + 1], sub, at, path, into)
        _losses(window, sub, at["losses"], ends[b0:b1] - lo, into["loss"])
        b0 = b1
    return out


def _check_room(n: np.ndarray, size: int, path: str) -> None:
    """Refuse, in one line, samples whose table would not fit in memory."""
    total = int(n.sum())
    need = total * ROW_BYTES
    have = memory_limit()
    if need > have:
        raise InputError(
            path,
            f"claims {total} samples in {size} bytes: reading them needs about "
            f"{need / 2**30:.1f} GiB, more than this machine's {have / 2**30:.1f} GiB",
            "read it on a larger machine, or it is damaged",
        )


def _losses(
    data: np.ndarray,
    recs: dict[str, np.ndarray],
    at: np.ndarray,
    ends: np.ndarray,
    out: np.ndarray,
) -> np.ndarray:
    """float32 loss of every row, written into ``out`` (as long as the rows): from the
    ``L`` blocks' tails, NaN elsewhere."""
    import numpy as np

    with_losses = recs["losses"]
    out.fill(np.nan)
    if not with_losses.any():
        return out
    first = recs["first"]
    blocks = np.flatnonzero(with_losses[first])
    tails = gather_ranges(data, at[first[blocks]], ends[blocks])
    out[np.repeat(with_losses, recs["n"])] = tails.view("<f4")
    return out


def _block_heads(
    vals: np.ndarray, bounds: np.ndarray, session: np.ndarray, whole: np.ndarray, path: str
) -> dict[str, np.ndarray]:
    """The head of every micro-batch (int64): step, rank, micro, n, width L, high
    bytes, flag mode, and its block and session; per block ``per_block`` and ``first``."""
    import numpy as np

    v0 = bounds[:-1]
    count = np.diff(bounds)
    if (count < 8).any():
        raise _bad(path, "a step record too short")
    if (vals[v0 + 1] > np.uint64(2**32)).any():
        raise _bad(path, "a step record with a wrong micro-batch count")
    per_block = vals[v0 + 1].astype(np.int64)
    if (per_block < 1).any() or (2 + 6 * per_block > count).any():
        raise _bad(path, "a step record with a wrong micro-batch count")
    # steps: whole, or zigzag deltas summed within each session (mod 2**64: exact); a
    # writer never mixes the two in one session
    z = vals[v0]
    delta = (z >> np.uint64(1)) ^ (np.uint64(0) - (z & np.uint64(1)))
    delta[whole] = 0
    sums = np.cumsum(delta)
    new_session = np.r_[True, session[1:] != session[:-1]] if len(session) else session
    base = (sums - delta)[new_session]
    steps = sums - np.repeat(base, np.diff(np.r_[np.flatnonzero(new_session), len(z)]))
    steps[whole] = z[whole]
    block = np.repeat(np.arange(len(v0)), per_block)
    first = np.zeros(len(v0), dtype=np.int64)
    np.cumsum(per_block[:-1], out=first[1:])
    j = np.arange(len(block), dtype=np.int64) - first[block]
    head = v0[block] + 2 + 6 * j
    fields = {}
    for k, name in enumerate(("rank", "micro", "n", "width", "high", "mode")):
        column = vals[head + k]
        if (column >= np.uint64(2**63)).any():
            raise _bad(path, f"a {name} beyond int64")
        fields[name] = column.astype(np.int64)
    steps_i = steps.view(np.int64)
    if (steps_i < 0).any():
        raise _bad(path, "a step beyond int64")
    if (fields["width"] > 56).any() or (fields["mode"] > 2).any():
        raise _bad(path, "a micro-batch head out of range")
    if (fields["n"] < 1).any() or (fields["n"] > 8 * fields["high"]).any():
        raise _bad(path, "a micro-batch size out of range")
    fields |= {"step": steps_i[block], "session": session[block], "block": block}
    return fields | {"per_block": per_block, "first": first}


def _raw_layout(
    recs: dict[str, np.ndarray], vend: np.ndarray, ends: np.ndarray, path: str
) -> dict[str, np.ndarray]:
    """Byte offsets of every micro-batch's low bits, high bits and flag bits, and of
    its block's losses (the same for every micro-batch of a block)."""
    import numpy as np

    n, width, high, mode = recs["n"], recs["width"], recs["high"], recs["mode"]
    low = (n * width + 7) // 8
    flags = np.where(mode == 2, (n + 7) // 8, 0)
    size = low + high + flags
    block, first = recs["block"], recs["first"]
    done = np.zeros(len(size) + 1, dtype=np.int64)
    np.cumsum(size, out=done[1:])
    start = vend[block] + done[:-1] - done[first][block]
    per_block = np.add.reduceat(size, first) if len(first) else first
    loss_at = vend + per_block
    tail = np.add.reduceat(n, first) * 4 if len(first) else first
    tail = np.where(recs["losses"][first], tail, 0) if len(first) else tail
    if (loss_at + tail != ends).any():
        raise _bad(path, "micro-batch bits and record size do not match")
    return {
        "low": start,
        "high": start + low,
        "flags": start + low + high,
        "losses": loss_at[block],
    }


def _block_rows(
    data: np.ndarray,
    vals: np.ndarray,
    bounds: np.ndarray,
    recs: dict[str, np.ndarray],
    raw_at: dict[str, np.ndarray],
    path: str,
    into: dict[str, np.ndarray],
) -> dict[str, np.ndarray]:
    """Sample ids (Elias-Fano decoded), flags and flagged lengths, rows in file order,
    written into ``into``'s arrays (int64 ``sample_id`` and ``length``, bool ``flag``,
    each as long as the rows)."""
    import numpy as np

    n, width = recs["n"], recs["width"]
    row_start = np.zeros(len(n) + 1, dtype=np.int64)
    np.cumsum(n, out=row_start[1:])
    total = int(row_start[-1])
    # (in place where it can be: fresh big arrays cost page faults)
    rec = np.repeat(np.arange(len(n)), n)
    j = np.arange(total, dtype=np.int64)
    j -= row_start[:-1][rec]
    # high parts: the set bits of each micro-batch's bit vector, minus their rank
    high_bits = np.unpackbits(
        gather_ranges(data, raw_at["high"], raw_at["high"] + recs["high"]), bitorder="little"
    )
    ones = np.flatnonzero(high_bits)
    del high_bits
    bit0 = np.zeros(len(n) + 1, dtype=np.int64)
    np.cumsum(8 * recs["high"], out=bit0[1:])
    if len(ones) != total or (np.diff(np.searchsorted(ones, bit0)) != n).any():
        raise _bad(path, "sample id bits do not match the micro-batch sizes")
    ones -= bit0[:-1][rec]
    ones -= j
    hi = ones.view(np.uint64)
    # ids are sorted in a micro-batch: its last high part is its largest
    if (hi[row_start[1:] - 1] >> (np.uint64(63) - width.view(np.uint64))).any():
        raise _bad(path, "a sample id beyond int64")
    # low parts: L bits at bit j*L of the micro-batch's low bits, read 8 bytes at a time
    padded = np.concatenate([data, np.zeros(8, dtype=np.uint8)])
    words = np.ndarray((len(data) + 1,), dtype="<u8", buffer=padded, strides=(1,))
    w = width[rec]
    at = raw_at["low"][rec]
    at <<= 3
    j *= w
    at += j  # (bit address of each low part)
    del j
    lo = words[at >> 3]
    at &= 7
    lo >>= at.view(np.uint64)
    del at
    w = w.view(np.uint64)
    mask = np.left_shift(np.uint64(1), w)
    mask -= np.uint64(1)
    lo &= mask
    del mask
    hi <<= w
    ids = into["sample_id"]
    np.bitwise_or(hi, lo, out=ids.view(np.uint64))
    del lo, w, hi
    flag = into["flag"]
    np.equal(recs["mode"][rec], 1, out=flag)
    two = np.flatnonzero(recs["mode"] == 2)
    if len(two):
        nbytes = (n[two] + 7) // 8
        bits = np.unpackbits(
            gather_ranges(data, raw_at["flags"][two], raw_at["flags"][two] + nbytes),
            bitorder="little",
        )
        at = np.zeros(len(two), dtype=np.int64)
        np.cumsum(8 * nbytes[:-1], out=at[1:])
        mark = np.zeros(len(n), dtype=bool)
        mark[two] = True
        rows = np.flatnonzero(mark[rec])
        within = rows - row_start[rec[rows]]
        flag[rows] = bits[np.repeat(at, n[two]) + within].astype(bool)
    # the writer gives every copy of an id held twice in a micro-batch its length: a
    # copy without one is not the writer's (and would cost the reader for nothing)
    dup = np.flatnonzero((ids[1:] == ids[:-1]) & (rec[1:] == rec[:-1]))
    if len(dup) and not (flag[dup].all() and flag[dup + 1].all()):
        raise _bad(path, "a sample id repeated in a micro-batch without its length")
    _flagged_lengths(vals, bounds, recs, rec, flag, path, into["length"])
    return into


def _flagged_lengths(
    vals: np.ndarray,
    bounds: np.ndarray,
    recs: dict[str, np.ndarray],
    rec: np.ndarray,
    flag: np.ndarray,
    path: str,
    out: np.ndarray,
) -> np.ndarray:
    """The lengths of flagged rows, in order, from each block's length varints; -1 else
    (written into ``out``)."""
    import numpy as np

    per_block = recs["per_block"]
    length_at = bounds[:-1] + 2 + 6 * per_block
    row_block = recs["block"][rec]
    flagged = np.flatnonzero(flag)
    k_block = np.bincount(row_block[flagged], minlength=len(per_block))
    if (length_at + k_block != bounds[1:]).any():
        raise _bad(path, "lengths and flags do not match")
    k_first = np.zeros(len(per_block), dtype=np.int64)
    np.cumsum(k_block[:-1], out=k_first[1:])
    rb = row_block[flagged]
    values = vals[length_at[rb] + np.arange(len(flagged)) - k_first[rb]]
    if (values >= np.uint64(2**63)).any():
        raise _bad(path, "a length beyond int64")
    out.fill(-1)
    out[flagged] = values.astype(np.int64)
    return out


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
