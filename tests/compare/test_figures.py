"""compare's printed figures: decimals the uncertainty supports, shares that agree
between the sentence and the table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dflash_diag.compare import Slope, share_text, versus_figures

ROOT = Path(__file__).resolve().parents[2]


def slope(run: float, base: float, half: float, diff_half: float) -> Slope:
    return Slope(
        "v1",
        base,
        (base - half, base + half),
        122,
        "1k steps",
        run_value=run,
        run_ci=(run - half, run + half),
        run_minus=run - base,
        run_minus_ci=(run - base - diff_half, run - base + diff_half),
    )


def test_a_tiny_slope_with_a_wide_interval_prints_the_intervals_decimals():
    # (slopes of ~1e-6 used to print with six decimals: +0.000000 [-0.034611, +0.034611])
    f = versus_figures(slope(2.1e-6, 1.9e-6, 0.0246, 0.034611))
    assert f is not None
    assert (f.run, f.run_ci, f.diff, f.diff_ci) == (
        "+0.000",
        "[-0.025, +0.025]",
        "+0.000",
        "[-0.035, +0.035]",
    )


@given(
    st.floats(-10, 10),
    st.floats(-10, 10),
    st.floats(1e-6, 5),
    st.floats(1, 3),
)
def test_no_figure_has_more_decimals_than_the_narrowest_interval_supports(run, base, half, widen):
    f = versus_figures(slope(run, base, half, half * widen))
    assert f is not None
    decimals = {len(x.split(".")[1]) if "." in x else 0 for x in (f.run, f.base, f.diff)}
    assert len(decimals) == 1  # (one number of decimals: the difference adds up)
    (d,) = decimals
    # 2 significant digits of the half-width: 10**-d is at least ~1/100 of it
    assert 10.0**-d >= half / 100 * 0.999 and 10.0**-d <= half * 1.001


def test_a_share_is_never_rounded_onto_a_bound():
    assert [share_text(x) for x in (0.0, 0.004, 0.005, 0.0051, 0.994, 0.996, 1.0)] == [
        "0%",
        "<1%",
        "<1%",
        "1%",
        "99%",
        ">99%",
        "100%",
    ]


@pytest.mark.slow
def test_the_table_shows_the_shares_the_sentence_says():
    got = subprocess.run(
        [sys.executable, "-m", "dflash_diag", "compare", "sample_logs/v1.log"]
        + ["sample_logs/run.log", "--metric", "lr", "-v"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "120", "PYTHONPATH": str(ROOT)},
    )
    assert got.returncode == 0, got.stderr
    assert "lr is within v1's band: >99% of 2378 warmup points inside, <1% below;" in (got.stdout)
    row = next(x for x in got.stdout.splitlines() if x.lstrip().startswith("warmup "))
    assert row.split("│")[3:6] == ["   >99% ", "    0% ", "   <1% "]
    assert "(difference +0.000000 [-0.000077, +0.000077])" in got.stdout
