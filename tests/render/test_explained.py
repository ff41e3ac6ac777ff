"""A share of variance explained is a share: a negative R² reads as none, with its value."""

from __future__ import annotations

import math

import pytest

from dflash_diag.render.spikes import _explained


@pytest.mark.parametrize(
    "r2, shown",
    [(0.14, "14%"), (0.0, "0%"), (-2.46, "none (R² -2.46)"), (-0.004, "none (R² -0.004)"),
     (None, "n/a"), (math.nan, "n/a")],
)  # fmt: skip
def test_a_negative_r2_is_no_share(r2, shown):
    assert _explained(r2) == shown
