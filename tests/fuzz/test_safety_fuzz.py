"""The safety classes (``tests/fuzz/safety.py``) hold for any seed: found code never
runs, links to inputs are refused, escapes never reach the console or the HTML, bombs and
over-long lines are one line, a full disk keeps the old file, a run of tabs reads in
linear time."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .safety import CLASSES, run_case


@pytest.mark.parametrize("kind", CLASSES)
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_safety_class_keeps_its_promise(kind, seed):
    with tempfile.TemporaryDirectory() as folder:
        assert run_case(kind, seed, Path(folder)) in ("ok", "error")
