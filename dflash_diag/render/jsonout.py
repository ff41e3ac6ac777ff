"""One JSON document from plain results: dataclasses, numpy and pandas values, NaN -> null."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from typing import Any


def to_jsonable(obj: Any) -> Any:
    """Turn results into JSON-ready values.

    Dataclasses become objects, numpy scalars and arrays become numbers and lists,
    DataFrames become lists of row objects, tuples and sets become lists, paths become
    strings, and every non-finite float (NaN, +-inf) becomes ``None`` (JSON ``null``).

    >>> to_jsonable({"a": float("nan"), "b": (1, 2.5)})
    {'a': None, 'b': [1, 2.5]}
    """
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    module = type(obj).__module__
    if module.startswith("numpy"):
        if hasattr(obj, "tolist"):
            return to_jsonable(obj.tolist())
    if module.startswith("pandas"):
        if hasattr(obj, "to_dict") and hasattr(obj, "columns"):
            return to_jsonable(obj.to_dict(orient="records"))
        if hasattr(obj, "to_list"):
            return to_jsonable(obj.to_list())
        if hasattr(obj, "isoformat"):
            return obj.isoformat()
        try:
            import pandas as pd

            if pd.isna(obj):
                return None
        except (TypeError, ValueError):
            pass
    if hasattr(obj, "item"):
        return to_jsonable(obj.item())
    return str(obj)


def dumps(obj: Any) -> str:
    """The JSON text of ``obj`` (via :func:`to_jsonable`), strict: never ``NaN``."""
    return json.dumps(to_jsonable(obj), indent=2, allow_nan=False)
