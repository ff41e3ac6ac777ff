"""The fast paths and step totals (issue 24): a step written against a total
(``step=17/2353``, Megatron's ``iteration 17/ 2353``, ``"global_step/max_steps":
"17/2353"``) is what tells runs appended to one file from a resume.  The fast paths do
not carry totals, so they leave such a log to the line parser: both give the same runs.
A log whose steps only go up keeps its fast path."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.logs.io import RawLog
from dflash_diag.logs.normalise import MultiRunLog
from dflash_diag.logs.text import read_lines, read_lines_fast

N = 2500  # lines per run: past the fast paths' thresholds (2,000 lines, 20 kB)


def _deepspec(s: int, total: int, loss: float) -> str:
    return f"epoch=0 step={s}/{total} loss={loss:.4f} | elapsed={s * 0.07:.1f}min"


def _megatron(s: int, total: int, loss: float) -> str:
    return (
        f" [2026-03-02 14:{s // 60 % 60:02d}:{s % 60:02d}] iteration {s:8d}/ {total:8d} |"
        f" consumed samples: {s * 256:12d} | learning rate: {1e-4 + s * 1e-9:.6E} |"
        f" lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: 1.250 |"
    )


def _jsonl(s: int, total: int, loss: float) -> str:
    return json.dumps({"global_step/max_steps": f"{s}/{total}", "loss": loss, "lr": 1e-4})


def _dict(s: int, total: int, loss: float) -> str:
    return str({"global_step/max_steps": f"{s}/{total}", "loss": loss, "epoch": 0.5})


SHAPES = {"deepspec": _deepspec, "megatron": _megatron, "jsonl": _jsonl, "hf dict": _dict}


def _log(shape, runs: list[tuple[int, int, int]]) -> RawLog:
    """Runs appended one after another: ``(first step, last step, total)`` each."""
    lines = [
        SHAPES[shape](s, total, 2.0 + k + s * 1e-4)
        for k, (first, last, total) in enumerate(runs)
        for s in range(first, last + 1)
    ]
    return RawLog(f"{shape}.log", ("\n".join(lines) + "\n").encode())


def _same_runs(raw: RawLog) -> list:
    fast, slow = read_lines(raw, fast=True), read_lines(raw, fast=False)
    fast_runs = fast.runs if isinstance(fast, MultiRunLog) else (fast,)
    slow_runs = slow.runs if isinstance(slow, MultiRunLog) else (slow,)
    assert len(fast_runs) == len(slow_runs)
    for a, b in zip(fast_runs, slow_runs, strict=True):
        pd.testing.assert_frame_equal(a.table, b.table)
        assert (a.restarts, a.skipped) == (b.restarts, b.skipped)
    return list(fast_runs)


@pytest.mark.parametrize("shape", SHAPES)
def test_runs_appended_with_other_totals_are_told_apart_as_the_line_parser_does(shape):
    runs = _same_runs(_log(shape, [(1, N, N), (1, N, 2 * N)]))
    assert len(runs) == 2
    assert [r.table["loss"].iloc[0] for r in runs] == pytest.approx([2.0001, 3.0001])


@pytest.mark.parametrize("shape", SHAPES)
def test_a_resume_against_the_same_total_stays_one_run(shape):
    (run,) = _same_runs(_log(shape, [(1, N, 2 * N), (N - 100, N + 200, 2 * N)]))
    assert run.restarts == (N - 100,)


@pytest.mark.parametrize("shape", ["deepspec", "megatron"])
@pytest.mark.parametrize("resume_at", [None, N - 100])
def test_a_text_log_that_never_goes_back_to_its_start_keeps_its_fast_path(shape, resume_at):
    # steps only going up, or back to the middle (a resume): totals decide nothing
    runs = [(1, N, N)] + ([(resume_at, N + 100, N)] if resume_at else [])
    raw = _log(shape, runs)
    assert read_lines_fast(raw.path, raw.data) is not None


@pytest.mark.parametrize("shape", ["jsonl", "hf dict"])
def test_json_counts_of_totals_are_left_to_the_line_parser(shape):
    # the JSON fast path would lose the step inside the string; the same log with the
    # step as a number is still its
    raw = _log(shape, [(1, N, N)])
    assert read_lines_fast(raw.path, raw.data) is None
    plain = re.sub(
        rb"""(["'])global_step/max_steps\1: (["'])(\d+)/(\d+)\2""", rb"\1step\1: \3", raw.data
    )
    assert plain.count(b"step") == N and b"/" not in plain
    assert read_lines_fast(raw.path, plain) is not None


@settings(max_examples=examples(12), deadline=None)
@given(
    shape=st.sampled_from(sorted(SHAPES)),
    cut=st.integers(50, N - 50),
    back=st.integers(1, 2 * N),
    same_total=st.booleans(),
)
def test_fast_and_line_parser_agree_on_any_step_back(shape, cut, back, same_total):
    # invariant: wherever the second part starts, and whatever its total, the fast
    # paths give the line parser's runs, tables and restarts
    first = max(1, cut - back)
    total = N if same_total else 3 * N
    _same_runs(_log(shape, [(1, cut, N), (first, first + N, total)]))
