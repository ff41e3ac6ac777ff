"""How many examples a Hypothesis test draws: the full number under CI (``CI`` set, as
``.ci/run`` sets it) or with ``DFLASH_DIAG_FULL_TESTS=1``, a fifth of it (at least 3) in
the local loop, so ``pytest -m "not slow"`` stays under a minute.  CI keeps the full
search (and Hypothesis's own ``ci`` profile: derandomized, no deadline)."""

from __future__ import annotations

import os

FULL = bool(os.environ.get("CI")) or os.environ.get("DFLASH_DIAG_FULL_TESTS") == "1"


def examples(n: int) -> int:
    """``n`` under CI, else ``max(3, n // 5)``.

    >>> examples(60) in (60, 12)
    True
    """
    return n if FULL else max(3, n // 5)
