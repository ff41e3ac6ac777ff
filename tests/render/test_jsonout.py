"""--json output: one strict JSON document, NaN written as null."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.errors import InputError
from dflash_diag.render.jsonout import dumps


@dataclass(frozen=True)
class Point:
    step: int
    value: float


def test_numpy_pandas_and_dataclasses_become_plain_json():
    frame = pd.DataFrame({"step": [1, 2], "loss": [0.5, np.nan]})
    doc = json.loads(
        dumps({"p": Point(3, float("inf")), "a": np.arange(3), "f": frame, "x": np.float32(1.5)})
    )
    assert doc == {
        "p": {"step": 3, "value": None},
        "a": [0, 1, 2],
        "f": [{"step": 1, "loss": 0.5}, {"step": 2, "loss": None}],
        "x": 1.5,
    }


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=20))
def test_any_floats_give_strict_json(values):
    text = dumps({"values": values, "array": np.array(values, dtype=float)})
    doc = json.loads(text)  # strict: raises on NaN tokens only with parse_constant
    for got, want in zip(doc["values"], values, strict=True):
        assert got is None if not math.isfinite(want) else got == want
    assert "NaN" not in text and "Infinity" not in text


def test_input_error_is_one_line_with_file_line_what_and_hint():
    e = InputError("run.log", "bad\nvalue", "fix it", line=12)
    assert str(e) == "run.log:12: bad value; fix it"
    assert str(InputError(None, "no file given")) == "no file given"
