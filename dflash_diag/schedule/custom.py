"""A user's own batching function: ``--strategy path/to/train.py:build_batches`` or
``--strategy package.module:build_batches``.

THIS RUNS THAT CODE: the file is imported (its top-level statements execute) and the
function is called once per epoch as::

    build_batches(lengths: list[int], epoch: int, seed: int) -> list[list[int]]

with the capped lengths by dataset index, the epoch (from 0) and ``--seed``.  It returns
the epoch's micro-batches in schedule order, each a list of dataset indices.  Whatever
shuffling it does is its own: ``--rng`` and ``--seeding`` are not used.  The result is
checked: an iterable of non-empty iterables of whole numbers in ``0..n-1``; anything else
is an InputError naming the batch.  Exceptions the function raises become an InputError
naming the file and line where they were raised.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..data import ScheduleParams
from ..errors import InputError
from .base import Batches, EpochPlan
from .rng import Shuffler

BuildBatches = Callable[[list[int], int, int], Any]


def load_function(spec: str) -> tuple[BuildBatches, str]:
    """The function named by ``FILE.py:FUNC`` or ``module:FUNC``, and the file it is in."""
    target, _, func_name = spec.rpartition(":")
    if not target or not func_name:
        raise InputError("--strategy", f"{spec!r} is not FILE.py:FUNCTION or module:FUNCTION", "")
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target)
        if not path.is_file():
            raise InputError(target, "file not found", "check the --strategy path")
        name = f"_dflash_diag_user_{abs(hash(str(path.resolve())))}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise InputError(target, "cannot import this file", "give a .py file")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as e:  # the user's module failed at import: their bug
            raise _user_error(target, e, "importing it") from None
        where = str(path)
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as e:
            raise InputError(
                "--strategy", f"cannot import module {target!r} ({e})", "check PYTHONPATH"
            ) from None
        where = str(getattr(module, "__file__", target))
    func = getattr(module, func_name, None)
    if not callable(func):
        raise InputError(where, f"no function {func_name!r}", "name a function defined there")
    return func, where


def _user_error(where: str, exc: BaseException, doing: str) -> InputError:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith(where)]
    line = frames[-1].lineno if frames else None
    return InputError(
        where, f"{type(exc).__name__} while {doing}: {exc}", "fix the function", line=line
    )


def check_batches(result: Any, n: int, where: str, func_name: str) -> Batches:
    """The function's result as flat :class:`Batches`, or an InputError naming the first
    batch that is not a non-empty list of indices in ``0..n-1``."""
    if isinstance(result, (str, bytes)) or not hasattr(result, "__iter__"):
        raise InputError(
            where, f"{func_name} returned {type(result).__name__}, not a list of batches", ""
        )
    sizes: list[int] = []
    parts: list[np.ndarray] = []
    for k, batch in enumerate(result):
        try:
            arr = np.asarray(list(batch))
        except TypeError:
            raise InputError(
                where, f"{func_name}: batch {k} is {type(batch).__name__}, not a list", ""
            ) from None
        if arr.size == 0:
            raise InputError(where, f"{func_name}: batch {k} is empty", "leave empty batches out")
        if arr.dtype.kind not in "iu":
            raise InputError(
                where,
                f"{func_name}: batch {k} holds {arr.dtype} values, not sample indices",
                "return lists of integer dataset indices",
            )
        bad = arr[(arr < 0) | (arr >= n)]
        if bad.size:
            raise InputError(
                where,
                f"{func_name}: batch {k} has indices out of range 0..{n - 1}: "
                f"{', '.join(str(int(b)) for b in bad[:5])}",
                "return dataset indices (row numbers of the manifest)",
            )
        parts.append(arr.astype(np.int64))
        sizes.append(arr.size)
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    ids = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return Batches(ids, offsets)


@dataclass(frozen=True, eq=False)
class _Prepared:
    func: BuildBatches
    where: str
    lengths: list[int]
    seed: int


class Custom:
    """A user's ``build_batches(lengths, epoch, seed)`` called every epoch."""

    name = "custom"
    sized = False
    #: the function receives the seed itself
    prepare_uses_seed = True

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.func_name = spec.rpartition(":")[2]

    def prepare(self, lengths: np.ndarray, params: ScheduleParams) -> _Prepared:
        func, where = load_function(self.spec)
        return _Prepared(func, where, np.asarray(lengths).tolist(), params.seed)

    def epoch(self, prepared: _Prepared, epoch: int, shuffler: Shuffler) -> EpochPlan:
        try:
            result = prepared.func(list(prepared.lengths), epoch, prepared.seed)
        except Exception as e:  # an error in the user's code is bad input, not our bug
            raise _user_error(prepared.where, e, f"calling {self.func_name}") from None
        pool = check_batches(result, len(prepared.lengths), prepared.where, self.func_name)
        return EpochPlan(pool, np.arange(len(pool), dtype=np.int64))
