"""The check every fast reader's tests make: it gives the line-by-line parser's RunLog."""

from __future__ import annotations

import pandas as pd

from dflash_diag.logs.io import RawLog
from dflash_diag.logs.text import read_lines


def same(raw: RawLog):
    """``read_lines`` with its fast paths and without give one RunLog (the fast one)."""
    fast = read_lines(raw, fast=True)
    slow = read_lines(raw, fast=False)
    pd.testing.assert_frame_equal(fast.table, slow.table)
    assert (fast.restarts, fast.ranks, fast.skipped, fast.n_lines, fast.format) == (
        slow.restarts,
        slow.ranks,
        slow.skipped,
        slow.n_lines,
        slow.format,
    )
    return fast
