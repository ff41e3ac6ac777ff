"""A JSON document of metric rows: how a W&B run's history is exported from its API.

* A list of row objects: ``json.dump(list(run.scan_history()), f)``, or
  ``run.history().to_json(f, orient="records")``.  (Written one row per line, the
  export is JSON lines, which the line reader reads.)
* pandas' default ``DataFrame.to_json`` (orient ``columns``): ``{column: {row index:
  value}}``, as ``run.history().to_json(f)`` writes it; rows in index order.

Read by the ``jsonl`` reader (format ``jsonl``).  Each row is read as a JSON line is
(:func:`~dflash_diag.logs.fields.fields_from_mapping`): W&B's ``_step`` is the step,
nested objects are flattened with ``/``, and a value that is a W&B media object (an
object with ``_type``: histogram, image) makes no column.
pandas writes NaN as ``null``: a ``null`` is a value not logged there (so a NaN logged
to W&B and exported through pandas is absent, not a logged NaN).
"""

from __future__ import annotations

from typing import Any

from ..data import RunLog
from ..errors import InputError
from .documents import load_document, mapping_records
from .fields import load_json
from .io import RawLog
from .normalise import build_table


def rows_of(obj: Any) -> list[Any] | None:
    """The rows of a JSON document of rows (see the module docstring), or None for any
    other document.  A row that is not an object stays in the list (counted as a bad
    record when read)."""
    if isinstance(obj, list):
        return obj if obj and any(isinstance(r, dict) for r in obj) else None
    if not isinstance(obj, dict) or not obj:
        return None
    columns = list(obj.values())
    if not all(isinstance(c, dict) for c in columns):
        return None
    index = sorted({i for c in columns for i in c}, key=_index_key)
    if not index or not all(isinstance(i, str) and i.lstrip("-").isdigit() for i in index):
        return None  # (not pandas' row labels: some other JSON object)
    return [{k: c[i] for k, c in obj.items() if c.get(i) is not None} for i in index]


def is_rows_document(data: bytes) -> bool:
    """Whether ``data`` is one JSON document of rows (:func:`rows_of`), not JSON lines
    nor a single record.  A log of JSON lines is told by its first line alone (a whole
    object with more lines after it), so its bytes are not decoded here."""
    head = bytes(data[:64]).lstrip(b"\xef\xbb\xbf \t\r\n")
    # (a list of rows opens `[` then `{`; a log line `[2024-...] INFO ...` does not)
    if not (head.startswith(b"{") or head.startswith(b"[") and head[1:].lstrip()[:1] == b"{"):
        return False
    end = data.find(b"\n")
    if head.startswith(b"{") and 0 <= end < len(data.rstrip()) - 1:
        try:
            load_json(bytes(data[:end]).decode("utf-8", "replace"))
            return False  # a whole object on the first line, more after it: JSON lines
        except (ValueError, RecursionError):
            pass  # (an object over several lines: maybe a document of rows)
    try:
        return rows_of(load_json(data.decode("utf-8", "replace"))) is not None
    except (ValueError, RecursionError):
        return False


def _index_key(label: str) -> int:
    return int(label) if label.lstrip("-").isdigit() else 0


def _flat(row: dict[str, Any], head: str = "") -> list[tuple[str, Any]]:
    """``(key, value)`` of a row, nested objects flattened with ``/``, W&B media objects
    (holding ``_type``) and nulls left out."""
    out: list[tuple[str, Any]] = []
    for key, value in row.items():
        name = f"{head}/{key}" if head else str(key)
        if isinstance(value, dict):
            if "_type" not in value:
                out += _flat(value, name)
        elif value is not None:
            out.append((name, value))
    return out


def read_json_rows(raw: RawLog, rank: int | str = 0) -> RunLog:
    """Read a JSON document of metric rows into a RunLog.

    :raises InputError: not JSON, or not a document of rows.
    """
    rows = rows_of(load_document(raw))
    if rows is None:
        raise InputError(
            raw.path,
            "this JSON document is not a list of rows nor pandas' {column: {row: value}}",
            "give a history export, or JSON lines",
        )
    records, skipped = mapping_records(rows, _flat)
    return build_table(
        records, path=raw.path, fmt="jsonl", rank=rank, skipped=skipped, n_lines=len(rows)
    )
