"""``unique_values`` is ``np.unique`` of a 1-D array: the same values, dtype and order."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dflash_diag.arrays import unique_values

DTYPES = st.sampled_from([np.int8, np.int32, np.int64, np.uint64, np.float32, np.float64, bool])


@settings(max_examples=200, deadline=None)
@given(DTYPES.flatmap(lambda d: arrays(d, st.integers(0, 60))))
def test_unique_values_is_np_unique(x):
    got, want = unique_values(x), np.unique(x)
    assert got.dtype == want.dtype
    # (equal as numbers: of -0.0 and 0.0 either may be the one kept, as in np.unique)
    assert np.array_equal(got, want, equal_nan=got.dtype.kind == "f")
