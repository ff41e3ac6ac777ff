"""TensorBoard event files (scalars only); needs the optional ``tensorboard`` package.

``pip install 'dflash-diag[tensorboard]'``.  Without it, reading an event file raises
:class:`~dflash_diag.errors.MissingDependency` (exit status 2, one line saying what to
install).

What is read:

* an event file (``events.out.tfevents.*``, plain or gzip), or a run folder holding
  some (several files are one run written in pieces, e.g. a resume: read in the order
  of the timestamp in their names), or a folder with exactly one such run folder below
  it (``output_dir/runs/``);
* scalars, both TF1/PyTorch style (``simple_value``) and TF2 style (a one-element
  numeric ``tensor`` whose tag's summary metadata names the ``scalars`` plugin; TF2
  writes that metadata with a tag's first event only, so it is remembered per tag);
* tags as trainers write them, under the text reader's names
  (:func:`~dflash_diag.logs.names.canonical_name`): ``train/loss`` -> ``loss``,
  ``train/learning_rate`` and ``lr-AdamW`` -> ``lr``, ``eval/loss`` -> ``eval_loss``;
  the event's step is the step.

Everything else (histograms, images, audio, text, hparams, graphs, log messages) is
skipped and counted in ``RunLog.skipped`` by kind.  Records are framed TFRecords (length,
masked CRC-32C of the length, payload, masked CRC-32C of the payload): every header
checksum is checked, and so is the payload checksum of every record a number is taken
from.  A cut-off last record (a writer killed mid-write, or a zero-filled tail after a
crash) ends the file and is counted as ``truncated_record``; any other damage is an
:class:`~dflash_diag.errors.InputError` naming the byte offset.

Only the standard library is imported at module level.
"""

from __future__ import annotations

import dataclasses
import gzip
import math
import os
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..data import RunLog
from ..errors import InputError, MissingDependency
from .names import EVAL_PREFIXES, canonical_name, logged, snake
from .normalise import build_table

MARKER = "tfevents"
#: Folder levels searched below a folder given without event files of its own.
SEARCH_DEPTH = 3

_HEADER = struct.Struct("<QI")  # payload length, masked CRC-32C of those 8 bytes
_CRC = struct.Struct("<I")
_STAMP = re.compile(r"tfevents\.(\d+)")
_GRAPH_KINDS = frozenset({"graph_def", "meta_graph_def", "tagged_run_metadata"})
#: TensorBoard plugin name -> skip reason.
_PLUGIN_REASON = {"histograms": "histogram", "images": "image", "pr_curves": "pr_curve"}


# ----------------------------------------------------------------------------- files


def is_event_path(path: str | os.PathLike[str]) -> bool:
    """An event file (name containing ``tfevents``) or a folder with some in or below it.

    >>> is_event_path("runs/events.out.tfevents.1732870000.host.1.0")
    True
    """
    p = Path(path)
    if p.is_dir():
        return bool(_event_folders(p))
    return MARKER in p.name


def looks_like_events(data: bytes) -> bool:
    """True when ``data`` starts with a valid TFRecord holding an event's file version.

    Every event file starts with an event whose ``file_version`` is ``brain.Event:N``;
    this finds renamed event files.

    >>> looks_like_events(b"step=1 loss=2.5\\n")
    False
    """
    if len(data) < _HEADER.size:
        return False
    length, crc = _HEADER.unpack_from(data)
    if crc != masked_crc32c(data[:8]) or length > 4096:
        return False
    return b"brain.Event:" in data[_HEADER.size : _HEADER.size + length]


def _is_event_file(p: Path) -> bool:
    return MARKER in p.name and p.is_file()


def _event_folders(root: Path) -> list[Path]:
    """``root`` if it holds event files, else the folders below it that do (sorted)."""
    try:
        if any(_is_event_file(f) for f in root.iterdir()):
            return [root]
    except OSError:
        return []
    found: list[Path] = []
    base = len(root.parts)
    for here, dirs, files in os.walk(root):
        depth = len(Path(here).parts) - base
        if depth >= SEARCH_DEPTH:
            dirs[:] = []
        dirs.sort()
        if depth and any(MARKER in f for f in files):
            found.append(Path(here))
    return sorted(found)


def _file_order(p: Path) -> tuple[int, str]:
    """Writers put a Unix timestamp in the name (``events.out.tfevents.<time>.<host>...``)."""
    m = _STAMP.search(p.name)
    return (int(m.group(1)) if m else -1, p.name)


def event_files(path: str | os.PathLike[str]) -> list[Path]:
    """The event files of one run, oldest first.

    :raises InputError: the path does not exist, or a folder holds several runs.
    """
    p = Path(path)
    name = os.fspath(path)
    if not p.exists():
        raise InputError(name, "no such file", "check the path")
    if not p.is_dir():
        return [p]
    folders = _event_folders(p)
    if not folders:
        raise InputError(name, "no TensorBoard event files in this folder", "give a run folder")
    if len(folders) > 1:
        shown = ", ".join(os.fspath(f.relative_to(p)) for f in folders[:5])
        more = f" and {len(folders) - 5} more" if len(folders) > 5 else ""
        raise InputError(
            name,
            f"this folder holds {len(folders)} TensorBoard runs ({shown}{more})",
            "give one run's folder",
        )
    return sorted((f for f in folders[0].iterdir() if _is_event_file(f)), key=_file_order)


# ----------------------------------------------------------------------------- records


def _crc_table() -> tuple[int, ...]:
    poly = 0x82F63B78  # CRC-32C (Castagnoli), reflected
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_TABLE = _crc_table()


def masked_crc32c(data: bytes) -> int:
    """The TFRecord checksum: CRC-32C, rotated right by 15 bits, plus ``0xA282EAD8``.

    >>> hex(masked_crc32c(b"123456789"))  # CRC-32C check value 0xe3069283, masked
    '0xc78ab0e5'
    """
    c = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _damaged(name: str, what: str) -> InputError:
    return InputError(
        name, f"damaged event file: {what}", "the records before it are intact; re-copy the file"
    )


def _records(data: bytes, name: str, skipped: dict[str, int]) -> Iterator[tuple[int, bytes, int]]:
    """``(offset, payload, payload checksum)`` of each TFRecord in ``data``.

    A record cut short at the end of the data, or a tail of zero bytes, ends the
    iteration (counted as ``truncated_record``); a header checksum mismatch elsewhere
    raises :class:`InputError`.
    """
    off = 0
    n = len(data)
    while off < n:
        if n - off < _HEADER.size:
            _count(skipped, "truncated_record")
            return
        length, crc = _HEADER.unpack_from(data, off)
        if crc != masked_crc32c(data[off : off + 8]):
            if not any(data[off:]):  # a zero-filled tail: the file was cut by a crash
                _count(skipped, "truncated_record")
                return
            if off == 0:
                raise InputError(
                    name,
                    "not a TensorBoard event file (no valid record at its start)",
                    "give an events.out.tfevents.* file, or --format for another kind of log",
                )
            raise _damaged(name, f"bad record header at byte {off}")
        end = off + _HEADER.size + length
        if end + _CRC.size > n:
            _count(skipped, "truncated_record")
            return
        (data_crc,) = _CRC.unpack_from(data, end)
        yield off, data[off + _HEADER.size : end], data_crc
        off = end + _CRC.size


def _loader() -> Any:
    """The ``Event`` protobuf module of the ``tensorboard`` package, or None if missing."""
    try:
        from tensorboard.compat.proto import event_pb2
    except ImportError:
        return None
    return event_pb2


# ----------------------------------------------------------------------------- values

# TensorFlow DataType codes (tensorflow/core/framework/types.proto) -> struct format of
# one element in ``tensor_content``, and the repeated field holding the values otherwise.
_DTYPES: dict[int, tuple[str, str]] = {
    1: ("<f", "float_val"),  # DT_FLOAT
    2: ("<d", "double_val"),  # DT_DOUBLE
    3: ("<i", "int_val"),  # DT_INT32
    4: ("<B", "int_val"),  # DT_UINT8
    5: ("<h", "int_val"),  # DT_INT16
    6: ("<b", "int_val"),  # DT_INT8
    9: ("<q", "int64_val"),  # DT_INT64
    14: ("<H", "half_val"),  # DT_BFLOAT16: the top 16 bits of a float32
    17: ("<H", "int_val"),  # DT_UINT16
    19: ("<e", "half_val"),  # DT_HALF: half_val holds the 16 bits
    22: ("<I", "uint32_val"),  # DT_UINT32
    23: ("<Q", "uint64_val"),  # DT_UINT64
}


def shortest(x: float, fmt: str = "<f") -> float:
    """The shortest decimal that a ``fmt`` (``<f`` float32, ``<e`` float16) value rounds from.

    Event files store ``simple_value`` as float32: a logged ``91.4`` comes back as
    ``91.40000152587891``.  The shortest decimal with the same float32 value is what was
    logged whenever that had at most 6 significant digits, and matches the text logs.

    >>> shortest(struct.unpack("<f", struct.pack("<f", 91.4))[0])
    91.4
    """
    if not math.isfinite(x):
        return x
    (want,) = struct.unpack(fmt, struct.pack(fmt, x))
    # For normal float32 values a 6-digit rounding keeps any shorter decimal intact
    # (float32 resolves ~7.2 digits), so the search can start there.
    start = 6 if fmt == "<f" and abs(x) >= 1.2e-38 else 1
    for digits in range(start, 18):
        y = float(f"{x:.{digits}g}")
        if struct.unpack(fmt, struct.pack(fmt, y))[0] == want:
            return y
    return x


def tensor_scalar(tensor: Any) -> float | None:
    """The value of a one-element numeric ``TensorProto``, or None.

    :param tensor: a ``tensorboard.compat.proto.tensor_pb2.TensorProto``.
    """
    size = 1
    for dim in tensor.tensor_shape.dim:
        size *= dim.size
    spec = _DTYPES.get(tensor.dtype)
    if size != 1 or spec is None:
        return None
    fmt, field = spec
    if tensor.tensor_content:
        if len(tensor.tensor_content) != struct.calcsize(fmt):
            return None
        (x,) = struct.unpack(fmt, tensor.tensor_content)
    else:
        values = getattr(tensor, field)
        if len(values) != 1:
            return None
        x = values[0]
        if tensor.dtype == 19:
            (x,) = struct.unpack("<e", struct.pack("<H", x & 0xFFFF))
    if tensor.dtype == 14:
        (x,) = struct.unpack("<f", struct.pack("<I", (x & 0xFFFF) << 16))
    if fmt in ("<f", "<e"):
        return shortest(float(x), fmt)
    return float(x)


def _value(value: Any, plugins: dict[str, str]) -> tuple[float | None, str]:
    """``(scalar, "")`` for a scalar summary value, else ``(None, skip reason)``."""
    if value.HasField("metadata") and value.metadata.plugin_data.plugin_name:
        plugins[value.tag] = value.metadata.plugin_data.plugin_name
    plugin = plugins.get(value.tag, "")
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return logged(shortest(value.simple_value)), ""
    if kind in ("histo", "obsolete_old_style_histogram"):
        return None, "histogram"
    if kind in ("image", "audio"):
        return None, kind
    if kind == "tensor" and plugin in ("", "scalars"):
        x = tensor_scalar(value.tensor)
        if x is not None:
            return logged(x), ""
        if plugin == "scalars":
            return None, "bad_scalar"
        return None, "tensor"
    if not plugin:
        return None, "empty_value"
    return None, _PLUGIN_REASON.get(plugin, snake(plugin))


def _count(skipped: dict[str, int], reason: str) -> None:
    skipped[reason] = skipped.get(reason, 0) + 1


# ----------------------------------------------------------------------------- reader


def read_tensorboard(path: str | os.PathLike[str], rank: int | str = 0) -> RunLog:
    """Scalars of one event file, or of the event files of one run folder, as a RunLog.

    One record per event that holds scalars (step = the event's step); events at one
    step are merged into one row.  With several files, the later file's values win for
    a step logged in both, and a file whose first training step is not past the steps
    already read is a restart (``RunLog.restarts``).  ``RunLog.n_lines`` counts events.

    :param path: an event file, a run folder, or a folder with one run folder below it.
    :param rank: as for :func:`~dflash_diag.logs.read_log` (event files have one rank, 0).
    :raises MissingDependency: the ``tensorboard`` package is not installed.
    :raises InputError: no such path, several runs in the folder, a damaged file, or no
        scalars at all.
    """
    name = os.fspath(path)
    event_pb2 = _loader()
    if event_pb2 is None:
        raise MissingDependency(name, "tensorboard", "tensorboard")
    from google.protobuf.message import DecodeError

    records: list[dict[str, Any]] = []
    skipped: dict[str, int] = {}
    plugins: dict[str, str] = {}  # tag -> plugin, from the tag's first metadata
    boundary_restarts: set[int] = set()
    top = -1  # highest training step read so far
    n = 0
    for f in event_files(path):
        data = _read(f)
        first = True
        for off, payload, data_crc in _records(data, str(f), skipped):
            n += 1
            try:
                event = event_pb2.Event.FromString(payload)
            except DecodeError:
                why = "fails its checksum" if data_crc != masked_crc32c(payload) else "is no event"
                raise _damaged(str(f), f"record at byte {off} {why}") from None
            what = event.WhichOneof("what")
            if what != "summary":
                if what in _GRAPH_KINDS:
                    _count(skipped, "graph")
                elif what not in ("file_version", None):
                    _count(skipped, what)
                continue
            fields: dict[str, float] = {}
            for value in event.summary.value:
                x, reason = _value(value, plugins)
                if x is None:
                    _count(skipped, reason)
                    continue
                column = canonical_name(value.tag)
                if column != "step":  # the event's own step is the step
                    fields[column] = x
            if not fields:
                continue
            if data_crc != masked_crc32c(payload):
                raise _damaged(str(f), f"record at byte {off} fails its checksum")
            is_eval = all(k.startswith(EVAL_PREFIXES) for k in fields)
            step = int(event.step)
            if not is_eval:
                if first and step <= top:
                    boundary_restarts.add(step)
                first = False
                top = max(top, step)
            rec: dict[str, Any] = {"line": n, "rank": 0, "is_eval": is_eval, "step_source": "field"}
            rec.update(fields)
            rec["step"] = float(step)
            records.append(rec)
    run = build_table(records, path=name, fmt="tensorboard", rank=rank, skipped=skipped, n_lines=n)
    if boundary_restarts - set(run.restarts):
        restarts = tuple(sorted(set(run.restarts) | boundary_restarts))
        run = dataclasses.replace(run, restarts=restarts)
    return run


def _read(f: Path) -> bytes:
    """The bytes of an event file, gunzipped if it is gzip."""
    try:
        data = f.read_bytes()
    except OSError as e:
        raise InputError(
            str(f), f"cannot read the file ({e.strerror})", "check its permissions"
        ) from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, ValueError) as e:
            raise InputError(str(f), f"broken gzip data ({e})", "re-copy the file") from None
    return data
