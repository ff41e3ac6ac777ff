"""A W&B run's own store: the transaction log ``run-<id>.wandb`` of a run folder
(``wandb/offline-run-<date>-<id>/`` in offline mode, ``wandb/run-<date>-<id>/`` once
synced), read record by record.

The ``wandb`` package (0.31) writes this file from its ``wandb-core`` binary and holds
no Python reader of it; its record schema is Python
(``wandb.proto.wandb_internal_pb2.Record``).  The framing is read here, and each
record decoded with that schema (the ``wandb`` extra):

* The file opens with a 7-byte header: ``:W&B``, the magic ``0xBEE1`` (uint16, little
  endian), the version ``0``.
* Then LevelDB-log-style blocks of :data:`BLOCK` bytes (the file header counts in the
  first).  Each chunk has a 7-byte header: CRC-32 (uint32 LE, zlib's, over the type
  byte then the payload), payload length (uint16 LE), type: ``1`` FULL (a whole
  record), ``2`` FIRST, ``3`` MIDDLE, ``4`` LAST (a record split over blocks); the
  tail of a block shorter than a header is zero padding.
* A chunk whose CRC fails, or a split record missing its parts, is skipped and counted
  (``bad_record``); a chunk cut off by the end of the file (a run still being written,
  or killed) is counted as ``truncated``.

Only ``history`` records make rows: one per ``run.log``, its step W&B's ``_step``, its
values the items' ``value_json`` (nested keys joined with ``/``: ``{"train": {"acc":
0.5}}`` is ``train/acc``, as the JSON lines reader flattens an export of it; ``NaN``
and ``Infinity`` as logged).  Media (a key holding ``_type``: histograms, images) and
strings make no column.  ``_runtime`` (seconds since the run started) and
``_timestamp`` (Unix seconds) are kept.  The summary, config and system records are
not read.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

from ..data import RunLog
from ..errors import InputError
from .fields import fields_from_mapping, load_json
from .normalise import build_table

#: The file header: ``:W&B``, magic 0xBEE1, version 0.
HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
#: Bytes per block; a chunk never crosses a block's end.
BLOCK = 32768
#: Bytes of a chunk's header: CRC-32, length, type.
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def is_wandb_path(name: str) -> bool:
    """A ``.wandb`` file (by name or by its header), a run folder holding one, or a
    ``wandb/`` folder holding run folders."""
    p = Path(name)
    if p.is_file():
        if p.suffix == ".wandb":
            return True
        try:
            with open(p, "rb") as f:
                return f.read(len(HEADER)) == HEADER
        except OSError:
            return False
    return p.is_dir() and bool(_files_in(p) or _run_folders(p))


def _files_in(folder: Path) -> list[Path]:
    return sorted(folder.glob("run-*.wandb"))


def _run_folders(folder: Path) -> list[Path]:
    return sorted(d for d in folder.glob("*run-*") if d.is_dir() and _files_in(d))


def wandb_file(name: str) -> Path:
    """The ``.wandb`` file of ``name`` (itself, its run folder's, or the one run of a
    ``wandb/`` folder).

    :raises InputError: no such file, or several runs to choose from."""
    p = Path(name)
    if p.is_file():
        return p
    files = _files_in(p)
    if len(files) == 1:
        return files[0]
    if files:
        raise InputError(name, f"{len(files)} .wandb files in this run folder", "give one")
    runs = _run_folders(p)
    if len(runs) == 1:
        return _files_in(runs[0])[0]
    if runs:
        raise InputError(
            name,
            f"{len(runs)} W&B runs in this folder ({runs[0].name}, ...)",
            "give one run's folder",
        )
    raise InputError(name, "no W&B run here (no run-*.wandb file)", "give a W&B run folder")


def read_frames(data: bytes, path: str = "") -> tuple[list[bytes], dict[str, int]]:
    """The records' payloads of a ``.wandb`` file's bytes, in order, and the chunks
    skipped by reason (``bad_record``, ``truncated``).

    >>> body = b"\\x0a\\x00"
    >>> crc = zlib.crc32(body, zlib.crc32(bytes([FULL])))
    >>> read_frames(HEADER + struct.pack("<IHB", crc, len(body), FULL) + body)
    ([b'\\n\\x00'], {})

    :raises InputError: no W&B header.
    """
    if not data.startswith(HEADER):
        raise InputError(
            path, "not a W&B transaction log (no ':W&B' header)", "give the run's .wandb file"
        )
    out: list[bytes] = []
    skipped: dict[str, int] = {}
    parts: list[bytes] | None = None  # the pieces of a record split over blocks
    pos = len(HEADER)
    while pos < len(data):
        room = BLOCK - pos % BLOCK
        if room < CHUNK_HEADER:
            pos += room  # the block's zero padding
            continue
        if pos + CHUNK_HEADER > len(data):
            _count(skipped, "truncated")
            break
        crc, n, kind = struct.unpack_from("<IHB", data, pos)
        body = data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + n]
        if kind == 0 and n == 0 and crc == 0:
            pos += room  # a zero-filled rest of a block (a damaged chunk head is not one)
            continue
        if len(body) < n and CHUNK_HEADER + n <= room:
            _count(skipped, "truncated")  # (the file ends inside this chunk)
            break
        bad = CHUNK_HEADER + n > room  # (no chunk crosses the end of its block)
        if bad or zlib.crc32(body, zlib.crc32(bytes([kind]))) != crc or not FULL <= kind <= LAST:
            # its length is not to be trusted: go on at the next block, and drop the
            # split record this chunk may have been a piece of
            _count(skipped, "bad_record")
            parts = None
            pos += room
            continue
        pos += CHUNK_HEADER + n
        parts = _join(kind, body, parts, out, skipped)
    if parts is not None:
        _count(skipped, "truncated")  # a split record the file ends inside
    return out, skipped


def _join(
    kind: int, body: bytes, parts: list[bytes] | None, out: list[bytes], skipped: dict[str, int]
) -> list[bytes] | None:
    """One chunk into the records: a FULL one is a record; FIRST .. MIDDLE .. LAST
    pieces make one.  A piece out of that order drops the record it breaks."""
    if kind in (FULL, FIRST) and parts is not None:
        _count(skipped, "bad_record")  # the split record before it never ended
        parts = None
    if kind == FULL:
        out.append(body)
        return None
    if kind == FIRST:
        return [body]
    if parts is None:
        _count(skipped, "bad_record")  # a MIDDLE or LAST with no FIRST
        return None
    parts.append(body)
    if kind == LAST:
        out.append(b"".join(parts))
        return None
    return parts


def _count(skipped: dict[str, int], reason: str) -> None:
    skipped[reason] = skipped.get(reason, 0) + 1


def read_wandb(name: str, rank: int | str = 0) -> RunLog:
    """Read a W&B run's ``.wandb`` file (or its run folder) into a RunLog: one row per
    logged step.

    :raises InputError: no run or several, not a ``.wandb`` file, no history at all,
        the ``wandb`` extra missing.
    """
    path = wandb_file(name)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(name, f"cannot read ({e.strerror})") from None
    payloads, skipped = read_frames(data, str(path))
    records = _history_records(payloads, skipped, name)
    if not records:
        raise InputError(
            name,
            f"the W&B run logged no history ({len(payloads)} records, none a run.log)",
            "give a run that called run.log",
        )
    return build_table(
        records, path=name, fmt="wandb", rank=rank, skipped=skipped, n_lines=len(records)
    )


def _schema(name: str) -> Any:
    """wandb's ``Record`` class and protobuf's DecodeError."""
    try:
        from google.protobuf.message import DecodeError
        from wandb.proto.wandb_internal_pb2 import Record  # type: ignore[attr-defined]
    except ImportError:
        raise InputError(
            name, "reading a W&B run needs the 'wandb' extra", "pip install 'dflash-diag[wandb]'"
        ) from None
    return Record, DecodeError


def _history_records(
    payloads: list[bytes], skipped: dict[str, int], name: str
) -> list[dict[str, Any]]:
    """One raw record per ``history`` record (per ``run.log``)."""
    record_class, decode_error = _schema(name)
    records: list[dict[str, Any]] = []
    for payload in payloads:
        rec = record_class()
        try:
            rec.ParseFromString(payload)
        except decode_error:
            _count(skipped, "bad_record")
            continue
        if rec.WhichOneof("record_type") != "history":
            continue
        items = _items(rec.history)
        msg = fields_from_mapping(items)
        if not msg.metrics:
            _count(skipped, "text")
            continue
        out: dict[str, Any] = {"line": len(records) + 1, "rank": 0, "is_eval": msg.is_eval}
        out.update(msg.fields)
        if "step" not in out and rec.history.HasField("step"):
            out["step"] = float(rec.history.step.num)
        out["step_source"] = "field" if "step" in out else "none"
        out["attach"] = True
        records.append(out)
    return records


def _items(history: Any) -> list[tuple[str, Any]]:
    """``(key, value)`` of a history record's items, media (any key under which a
    ``_type`` is logged) left out."""
    keyed = [(tuple(it.nested_key) or (it.key,), it) for it in history.item]
    media = {k[:-1] for k, _ in keyed if len(k) > 1 and k[-1] == "_type"}
    out = []
    for key, it in keyed:
        if any(key[: len(m)] == m for m in media):
            continue
        out.append(("/".join(key), _value(it)))
    return out


def _value(item: Any) -> Any:
    """An item's value: its typed field when set, else its ``value_json`` parsed
    (``NaN``, ``Infinity`` as JSON's extensions); None for no value or bad JSON."""
    typed = item.WhichOneof("value")
    if typed == "json":
        text = item.json
    elif typed is not None:
        return None if typed == "none" else getattr(item, typed)
    else:
        text = item.value_json
    try:
        return load_json(text)
    except (ValueError, RecursionError):
        return None
