"""``check_fit`` a chunk of rows at a time says what the check over all rows at once says:
the same cap, or the same refusal naming the same first sample (Hypothesis)."""

from __future__ import annotations

import numpy as np
from budget import examples
from chunking import small_chunks
from hypothesis import given, settings
from hypothesis import strategies as st

import dflash_diag.record.recording as recording
from dflash_diag.errors import InputError


def whole(ids, recorded, man, cap):
    """The check over every row at once, as written before it was chunked."""
    outside = ids >= len(man)
    if outside.any():
        return f"sample id {int(ids[outside][0])} beyond its {len(man)} samples"
    expected = man[ids]
    bad = recorded != expected
    if cap is not None:
        bad &= recorded != np.minimum(expected, cap)
    elif bad.any():
        top = int(recorded.max())
        if ((recorded[bad] == top) & (expected[bad] > top)).all():
            return top
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        return (
            f"sample {int(ids[i])} has length {int(recorded[i])} recorded, "
            f"{int(expected[i])} in the manifest"
        )
    return cap


def chunked(ids, recorded, man, cap, chunk):
    try:
        with small_chunks(chunk):
            return recording.check_fit("rec", ids, recorded, man, cap)
    except InputError as err:
        return str(err).split("does not fit the manifest: ")[1].split(" (")[0].split("; ")[0]


@settings(max_examples=examples(150), deadline=None)
@given(
    man=st.lists(st.integers(1, 12), min_size=1, max_size=8),
    rows=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 3)), min_size=1, max_size=30),
    cap=st.one_of(st.none(), st.integers(1, 12)),
    chunk=st.integers(1, 7),
)
def test_a_chunk_at_a_time_says_what_all_rows_at_once_say(man, rows, cap, chunk):
    # rows: (id, how its recorded length is made: the manifest's, capped, cut, other)
    man = np.array(man, dtype=np.int64)
    ids = np.array([i for i, _ in rows], dtype=np.int64)
    known = np.minimum(ids, len(man) - 1)
    made = [
        (man[k], min(man[k], cap or 6), min(man[k], 6), man[k] + 1)[how]
        for k, (_, how) in zip(known, rows, strict=True)
    ]
    recorded = np.array(made, dtype=np.int64)
    want = whole(ids, recorded, man, cap)
    got = chunked(ids, recorded, man, cap, chunk)
    assert got == want
