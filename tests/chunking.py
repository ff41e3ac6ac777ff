"""``small_chunks(k)``: the package's chunked passes (``dflash_diag.arrays.chunks``) take
``k`` elements at a time inside the block, so a test's few entries cross chunk edges."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dflash_diag.arrays as arrays


@contextmanager
def small_chunks(size: int) -> Iterator[None]:
    saved, arrays.CHUNK = arrays.CHUNK, size
    try:
        yield
    finally:
        arrays.CHUNK = saved
