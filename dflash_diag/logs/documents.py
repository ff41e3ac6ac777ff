"""A JSON document read whole (``trainer_state.json``, a W&B history export): its
loading, with the errors said in one line, and its entries as the records every reader
hands to :func:`~dflash_diag.logs.normalise.build_table`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..errors import InputError
from .fields import fields_from_mapping, load_json
from .io import RawLog, decode


def load_document(raw: RawLog, nested_hint: str = "") -> Any:
    """The decoded JSON document of ``raw``.

    :raises InputError: not valid JSON (with the line), or nested too deep to read.
    """
    text, _ = decode(raw.data)
    try:
        return load_json(text)
    except RecursionError:
        raise InputError(
            raw.path, "JSON nested too deep to read (over about 1000 levels)", nested_hint
        ) from None
    except ValueError as e:
        line = getattr(e, "lineno", None)
        raise InputError(
            raw.path, f"not valid JSON ({getattr(e, 'msg', e)})", "is the file complete?", line
        ) from None


def mapping_records(
    entries: Iterable[Any], items: Callable[[dict[str, Any]], list[tuple[str, Any]]]
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """One record per entry that is an object with metrics (``line`` its 1-based index,
    the step from its own ``step`` field), and the count of the others by reason
    (``bad_record``: not an object; ``summary``: a run's summary; ``text``: no metric).

    :param items: an entry's ``(key, value)`` pairs as the reader reads them (nested
        objects flattened, or as they are).
    """
    records: list[dict[str, Any]] = []
    skipped: dict[str, int] = {}
    for i, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            skipped["bad_record"] = skipped.get("bad_record", 0) + 1
            continue
        msg = fields_from_mapping(items(entry))
        if msg.summary or not msg.metrics:
            reason = "summary" if msg.summary else "text"
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        rec: dict[str, Any] = {"line": i, "rank": 0, "is_eval": msg.is_eval, **msg.fields}
        rec["step_source"] = "field" if "step" in msg.fields else "none"
        rec["attach"] = True
        records.append(rec)
    return records, skipped
