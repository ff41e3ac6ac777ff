"""A ``.npy`` file of lengths (1-D) or of a structured array (its fields are columns)."""

from __future__ import annotations

import tokenize
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError

if TYPE_CHECKING:
    import numpy as np


def _npy_header(path: Path) -> tuple[tuple[int, ...], Any]:
    """Shape and dtype of a .npy file, from its header alone, checked against the file's
    size before any memory is asked for."""
    import numpy as np

    fmt = np.lib.format
    size = path.stat().st_size
    try:
        with open(path, "rb") as fh:
            version = fmt.read_magic(fh)
            read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, _, dtype = read(fh)
            offset = fh.tell()
    except (ValueError, SyntaxError, EOFError, OverflowError, TypeError, tokenize.TokenError):
        raise InputError(
            str(path), "not a readable .npy file (its header is damaged)", "save it again"
        ) from None
    count = 1
    for d in shape:
        count *= d
    if count * dtype.itemsize > size - offset:
        raise InputError(
            str(path),
            f"the .npy header says shape {_short(shape)} ({count} items) but the file holds "
            f"{size - offset} bytes of data",
            "the file is cut short or damaged; save it again",
        )
    return shape, dtype


def _short(shape: tuple[int, ...]) -> str:
    text = str(shape)
    return text if len(text) <= 40 else text[:37] + "..."


def read_npy(path: Path, length_column: str | None) -> tuple[Any, list[str]]:
    """A .npy file as a DataFrame: a 1-D array is the length column itself; a structured
    array's fields are columns."""
    import numpy as np
    import pandas as pd

    shape, dtype = _npy_header(path)
    if dtype.names is None and dtype.kind not in "iuf":
        raise InputError(
            str(path),
            f"holds {_kind_name(dtype)} (dtype {dtype.str}), not lengths",
            "save the lengths as an integer array",
        )
    if len(shape) != 1:
        raise InputError(str(path), f"expected a 1-D array of lengths, got shape {shape}", "")
    try:
        arr = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, OSError) as e:
        raise InputError(
            str(path), f"cannot read .npy ({e})", "save a plain numeric array"
        ) from None
    if arr.dtype.names:
        names = list(arr.dtype.names)
        return pd.DataFrame({name: _column(arr[name]) for name in names}), names
    name = length_column or "length"
    return pd.DataFrame({name: arr}), [name]


def _kind_name(dtype: Any) -> str:
    return {"U": "text", "S": "bytes", "O": "Python objects", "b": "true/false"}.get(
        dtype.kind, f"values of kind {dtype.kind!r}"
    )


def _column(values: np.ndarray) -> np.ndarray:
    """A structured array's field as a column.  A text field may hold 32-bit values that
    are no character (surrogates, or past U+10FFFF: a .npy does not check); Arrow-backed
    text would refuse them or keep bytes it cannot decode, so they become U+FFFD."""
    import numpy as np

    if values.dtype.kind != "U":
        return values
    points = np.ascontiguousarray(values).view(np.uint32).copy()
    bad = (points > 0x10FFFF) | ((points >= 0xD800) & (points < 0xE000))
    if bad.any():
        points[bad] = 0xFFFD
    return points.view(values.dtype)
