"""What a fuzz case calls, and the contract it checks.

:func:`run` reads one file as its kind says (``read_log``; ``read_manifest`` then a
replay of its lengths; the config loader then a replay on a small manifest) and returns
``"ok"`` or ``"error"`` (an :class:`InputError`, one line).  Anything else it raises is a
broken contract: another exception, a RuntimeWarning (it would reach a user's stderr), a
table that breaks RunLog's promises, or an input file that changed.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

#: Lengths replayed under a fuzzed config (a few of each size, tokens).
CONFIG_LENGTHS = [120, 3000, 7, 120, 0, 900, 4000, 800, 8191, 50] * 4
#: At most this many manifest samples are replayed (the read is the target).
REPLAY_HEAD = 5000
#: An error line longer than this (past the file name) breaks the contract.
MAX_ERROR = 300


class ContractBreak(AssertionError):
    """A result that is not a crash but breaks a promise (a warning, a bad table)."""


def _log(path: Path) -> None:
    import numpy as np

    from dflash_diag.data import CANONICAL_COLUMNS
    from dflash_diag.logs import read_log

    t = read_log(path).table
    if list(t.columns[:8]) != list(CANONICAL_COLUMNS):
        raise ContractBreak(f"columns {list(t.columns[:8])}")
    if t["step"].dtype != np.int64 or len(t) == 0:
        raise ContractBreak(f"step column {t['step'].dtype}, {len(t)} rows")
    if "rank" not in t and not (t["step"].is_unique and t["step"].is_monotonic_increasing):
        raise ContractBreak("steps not unique and increasing")


def _manifest(path: Path) -> None:
    from dflash_diag.data import ScheduleParams
    from dflash_diag.manifest import read_manifest
    from dflash_diag.schedule.replay import replay

    m = read_manifest(path)
    if m.lengths.dtype.kind != "i" or (m.lengths < 0).any():
        raise ContractBreak(f"lengths {m.lengths.dtype}")
    replay(m.lengths[:REPLAY_HEAD], ScheduleParams(token_budget=16384))


def _config(path: Path) -> None:
    from dflash_diag.schedule.config import resolve_schedule
    from dflash_diag.schedule.replay import replay

    rs = resolve_schedule({}, config=path)
    params = rs.params
    if ":" in params.strategy:  # a user's function: not imported from a fuzzed name
        params = params.replace(strategy="sorted-greedy")
    replay(CONFIG_LENGTHS, params)


TARGETS = {"log": _log, "manifest": _manifest, "config": _config}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(kind: str, path: Path) -> str:
    """``"ok"`` or ``"error"``; raises on a broken contract (see the module docstring)."""
    from dflash_diag.errors import InputError

    before = digest(path)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            TARGETS[kind](path)
            status = "ok"
        except InputError as e:
            text = str(e)
            if "\n" in text or len(text) - len(str(path)) > MAX_ERROR:
                raise ContractBreak(f"error message not one short line: {text[:400]!r}") from e
            status = "error"
    shown = [w for w in seen if not issubclass(w.category, (DeprecationWarning,))]
    if shown:
        w = shown[0]
        raise ContractBreak(f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})")
    if digest(path) != before:
        raise ContractBreak("the input file changed")
    return status
