"""``unique_values`` is ``np.unique`` of a 1-D array: the same values, dtype and order."""

from __future__ import annotations

import numpy as np
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dflash_diag.arrays import unique_values

DTYPES = st.sampled_from([np.int8, np.int32, np.int64, np.uint64, np.float32, np.float64, bool])


@settings(max_examples=examples(200), deadline=None)
@given(DTYPES.flatmap(lambda d: arrays(d, st.integers(0, 60))))
def test_unique_values_is_np_unique(x):
    got, want = unique_values(x), np.unique(x)
    assert got.dtype == want.dtype
    # (equal as numbers: of -0.0 and 0.0 either may be the one kept, as in np.unique)
    assert np.array_equal(got, want, equal_nan=got.dtype.kind == "f")


@given(
    st.lists(st.integers(0, 9), max_size=40),
    st.integers(1, 12),
)
def test_group_chunks_cover_every_group_once_in_whole_groups(sizes, chunk):
    from dflash_diag.arrays import group_chunks

    offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    got = group_chunks(offsets, chunk)
    # consecutive ranges of whole groups, from the first to the last, none empty
    if not sizes:
        assert got == []
        return
    assert [a for a, _ in got] == [0, *(b for _, b in got[:-1])]
    assert got[-1][1] == len(sizes)
    assert all(b > a for a, b in got)
    for a, b in got:  # about a chunk: more only when one group alone is more
        assert offsets[b] - offsets[a] <= chunk or b == a + 1
        # and as many groups as fit: the next one would pass the chunk
        assert b == len(sizes) or offsets[b + 1] - offsets[a] > chunk


@given(st.lists(st.integers(0, 3000), min_size=1, max_size=50))
def test_length_counts_is_bincount_of_whole_lengths(lengths):
    from dflash_diag.arrays import length_counts

    x = np.array(lengths, dtype=np.int64)
    assert np.array_equal(length_counts(x), np.bincount(x))
    assert length_counts(x.astype(np.float64)) is None
    assert length_counts(np.append(x, -1)) is None
    assert length_counts(np.zeros(0, dtype=np.int64)) is None
