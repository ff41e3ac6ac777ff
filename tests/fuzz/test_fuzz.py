"""Mutated logs, manifests and configs never crash the readers (the quick profile).

The same mutations as ``benchmarks/fuzz.py`` (``tests/fuzz/mutate.py``), drawn through
hypothesis' own random source so a failure shrinks and is replayed from the database;
each case must read to a result that keeps its promises or raise the one-line
InputError (``tests/fuzz/target.py`` says what is checked).  A few seconds each; the
long run, in subprocesses that count signals and hangs, is ``benchmarks/fuzz.py``.
Set ``DFLASH_FUZZ_EXAMPLES`` to run more examples here.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .mutate import Case, config_case, deep_json_lines, log_case, manifest_case, seed_logs
from .target import run

QUICK = settings(
    max_examples=int(os.environ.get("DFLASH_FUZZ_EXAMPLES", "40")),
    deadline=None,
    # (a case is a file of kilobytes: its draws are many, by design)
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.large_base_example,
        HealthCheck.data_too_large,
    ],
)
SEEDS = seed_logs()


def check(case: Case, folder: Path) -> str:
    # a fresh folder per example: the case's file name may repeat
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / case.name
    path.write_bytes(case.data)
    try:
        status = run(case.kind, path)
    finally:
        path.unlink()
    assert status in ("ok", "error")
    return status


def cases(maker) -> st.SearchStrategy[Case]:
    return st.randoms(use_true_random=False).map(maker)


@pytest.mark.slow
@QUICK
@given(case=cases(lambda rnd: log_case(rnd, SEEDS)))
def test_mutated_logs(tmp_path, case):
    check(case, tmp_path / "case")


@pytest.mark.slow
@QUICK
@given(case=cases(manifest_case))
def test_mutated_manifests(tmp_path, case):
    check(case, tmp_path / "case")


@pytest.mark.slow
@QUICK
@given(case=cases(config_case))
def test_mutated_configs(tmp_path, case):
    check(case, tmp_path / "case")


@settings(QUICK, max_examples=5)
@given(case=cases(lambda rnd: Case("log", "metrics.jsonl", deep_json_lines(rnd))))
def test_json_lines_with_one_deep_record(tmp_path, case):
    # (Arrow's reader is not given a line over 64 brackets deep: it overflowed the stack)
    assert check(case, tmp_path / "case") == "ok"


def test_the_mutations_are_the_same_for_a_seed():
    # benchmarks/fuzz.py --only KIND:I replays case I: the makers depend on the seed alone
    a = [log_case(random.Random(i), SEEDS).data for i in range(5)]
    b = [log_case(random.Random(i), SEEDS).data for i in range(5)]
    assert a == b and len(set(a)) == 5
