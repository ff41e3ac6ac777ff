"""Whatever the bytes, ``read_log`` gives a RunLog that keeps the contract, or InputError."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_diag.data import CANONICAL_COLUMNS, RunLog
from dflash_diag.errors import InputError
from dflash_diag.logs import read_log

DATA = Path(__file__).resolve().parents[1] / "data"
FIXTURES = sorted(
    p
    for d in ("logs", "real_logs", "real_run")
    for p in (DATA / d).iterdir()
    if p.suffix in (".log", ".json", ".jsonl", ".csv", ".tsv")
)
HEAD = 3000  # bytes of each fixture to mutate (the big real logs: their first lines)


def check(data: bytes, name: str = "log.txt") -> None:
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / name
        p.write_bytes(data)
        try:
            run = read_log(p)
        except InputError as e:
            # the clean error: one line naming the file
            assert "\n" not in str(e) and str(e).startswith(str(p))
            return
        assert p.read_bytes() == data  # the input is never modified
    assert isinstance(run, RunLog)
    t = run.table
    assert list(t.columns[:8]) == list(CANONICAL_COLUMNS)
    assert t["step"].dtype == np.int64 and t["step"].is_unique
    assert t["step"].is_monotonic_increasing and len(t) > 0


@settings(max_examples=examples(60), deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes(data):
    check(data)


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "step=",
                "loss",
                "=",
                ":",
                " ",
                "\n",
                "\r",
                "1",
                "2.5",
                "{'",
                "'loss': ",
                "}",
                "nan",
                "K",
                "%",
                "|",
                "\x1b[0m",
                "\xff",
            ]
        ),
        max_size=60,
    )
)
def test_random_log_like_text(parts):
    check("".join(parts).encode("utf-8", "surrogateescape"))


def _mutate(data: bytes, draw) -> bytes:
    n = len(data)
    kind = draw(st.sampled_from(["cut", "delete", "insert", "flip", "duplicate", "swap_lines"]))
    i = draw(st.integers(0, max(0, n - 1)))
    j = draw(st.integers(i, min(n, i + 200)))
    if kind == "cut":
        return data[:i]
    if kind == "delete":
        return data[:i] + data[j:]
    if kind == "insert":
        return data[:i] + draw(st.binary(min_size=1, max_size=40)) + data[i:]
    if kind == "flip":
        return (
            data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1 :] if n else data
        )
    if kind == "duplicate":
        return data[:j] + data[i:j] + data[j:]
    lines = data.split(b"\n")
    draw(st.randoms()).shuffle(lines)
    return b"\n".join(lines)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
@settings(
    max_examples=examples(12),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_mutated_fixtures(path, data):
    raw = path.read_bytes()[:HEAD]
    for _ in range(data.draw(st.integers(1, 3))):
        raw = _mutate(raw, data.draw)
    check(raw, path.name)
