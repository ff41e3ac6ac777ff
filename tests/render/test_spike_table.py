"""The spike table's order is what its caption says: unexplained first, then data, then
the largest rises as the rise column shows them (percent over the baseline)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dflash_diag.render.spikes import ranked_spikes, rise_shown

ROOT = Path(__file__).resolve().parents[2]
VERDICTS = ("unexplained", "data", "inconclusive", "composition")


def spike(verdict: str, ratio: float, z: float = 5.0) -> SimpleNamespace:
    return SimpleNamespace(verdict=verdict, event=SimpleNamespace(ratio=ratio, z=z))


def test_a_larger_percent_ranks_first_whatever_the_values():
    # (+130% of a 0.4 baseline is a rise of 0.52 in value; +64% of 1.1 is 0.70)
    small_base = spike("composition", 2.30)
    large_base = spike("inconclusive", 1.64)
    ranked = ranked_spikes((large_base, small_base, spike("data", 1.10)))
    assert [s.event.ratio for s in ranked] == [1.10, 2.30, 1.64]


@given(
    st.lists(
        st.tuples(st.sampled_from(VERDICTS), st.floats(0.0, 50.0), st.floats(-5, 200)),
        max_size=30,
    )
)
def test_the_order_is_unexplained_then_data_then_largest_rise(cells):
    ranked = ranked_spikes(tuple(spike(v, r, z) for v, r, z in cells))
    group = [{"unexplained": 0, "data": 1}.get(s.verdict, 2) for s in ranked]
    assert group == sorted(group)
    for g in (0, 1, 2):
        rises = [abs(rise_shown(s)) for s, k in zip(ranked, group, strict=True) if k == g]
        assert rises == sorted(rises, reverse=True)
    assert all(math.isfinite(rise_shown(s)) for s in ranked)


@pytest.mark.slow
def test_bucketed_rows_are_the_largest_percent_rises_in_rank_order():
    got = subprocess.run(
        [sys.executable, "-m", "dflash_diag", "spikes", "sample_logs/run_bucketed.log"]
        + ["--config", "sample_logs/bucketed.toml"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "100", "PYTHONPATH": str(ROOT)},
    )
    assert got.returncode == 0, got.stderr
    rows = re.findall(r"^│ +(\d+)[^│]*│.*│ +([+-]\d+)% │.*│ (\w+) +│$", got.stdout, re.M)
    assert "(8 of 128: unexplained first, then data, then the largest rises; all: -v)" in (
        got.stdout
    )
    assert [v for _, _, v in rows[:2]] == ["data", "data"]
    rises = [int(r) for _, r, _ in rows[2:]]
    assert rises == sorted(rises, reverse=True)
    assert {147, 135, 123} <= set(rises) and 64 not in rises
