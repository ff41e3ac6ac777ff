"""The batch file: varints, framing, round trips, and what a crash or damage leaves."""

from __future__ import annotations

import os
import struct
from unittest import mock

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.errors import InputError
from dflash_diag.record import BatchRecorder, fileformat, read_recording
from dflash_diag.record.fileformat import (
    FRAME_HEAD,
    PREAMBLE,
    decode_varints,
    encode_varints,
    scan_frames,
    small_varints,
)

U64 = st.integers(min_value=0, max_value=2**64 - 1)


@given(st.lists(U64, max_size=300))
def test_varints_round_trip_and_both_encoders_agree(values):
    data = encode_varints(np.array(values, dtype=np.uint64))
    assert data == small_varints(values)
    back = decode_varints(np.frombuffer(data, dtype=np.uint8))
    assert back.tolist() == values


@settings(max_examples=examples(150), deadline=None)
@given(
    cuts=st.lists(st.integers(0, 400), max_size=40),
    size=st.integers(400, 2000),
    chunk=st.sampled_from([1, 5, 64, 1 << 20]),
)
def test_gathered_ranges_are_the_slices_joined(cuts, size, chunk):
    # sorted ranges, empty ones and ones that meet among them, holding a little of the
    # data (each byte looked up, in runs of ranges of about `chunk` bytes) or much of it
    # (the mask): the slices one after the other either way
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    bounds = np.sort(np.array(cuts, dtype=np.int64))
    starts, ends = bounds[0::2][: len(bounds) // 2], bounds[1::2]
    want = np.concatenate([data[:0]] + [data[a:b] for a, b in zip(starts, ends, strict=True)])
    with mock.patch("dflash_diag.arrays.CHUNK", chunk):
        got = fileformat.gather_ranges(data, starts, ends)
    assert got.tolist() == want.tolist()


def test_varints_cut_short_or_too_long_are_refused():
    with pytest.raises(ValueError, match="cut short"):
        decode_varints(np.frombuffer(b"\x80\x80", dtype=np.uint8))
    with pytest.raises(ValueError, match="longer than 10"):
        decode_varints(np.frombuffer(b"\xff" * 11 + b"\x01", dtype=np.uint8))


# one logged micro-batch: (step, rank, micro, [(sample_id, length), ...])
ids_lengths = st.lists(
    st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1))
    | st.tuples(st.integers(0, 40), st.integers(0, 5)),
    min_size=1,
    max_size=12,
)


@st.composite
def logs(draw):
    """Calls to BatchRecorder.log in an order it accepts: (step, micro) increasing per rank;
    each with losses (float32 values, NaN among them) or without."""
    per_rank = []
    for rank in range(draw(st.integers(1, 3))):
        step, micro, calls = draw(st.integers(0, 5)), 0, []
        for _ in range(draw(st.integers(0, 6))):
            if draw(st.booleans()):
                step += draw(st.integers(1, 2**40))
                micro = draw(st.integers(0, 3))
            else:
                micro += draw(st.integers(1, 3))
            pairs = draw(ids_lengths)
            losses = draw(st.none() | st.lists(LOSS, min_size=len(pairs), max_size=len(pairs)))
            calls.append((step, rank, micro, pairs, losses))
        per_rank.append(calls[::-1])
    # interleave the ranks' calls in any order that keeps each rank's own order
    turns = draw(st.permutations([r for r, calls in enumerate(per_rank) for _ in calls]))
    return [per_rank[r].pop() for r in turns]


LOSS = st.floats(width=32, allow_nan=True, allow_infinity=False)


def shown(x):
    """A loss as compared: NaN equal to NaN."""
    return "nan" if np.isnan(x) else float(x)


def expected_rows(calls):
    rows = []
    for step, rank, micro, pairs, losses in calls:
        ids = np.array([i for i, _ in pairs], dtype=np.int64)
        lens = np.array([n for _, n in pairs], dtype=np.int64)
        loss = np.full(len(ids), np.nan) if losses is None else np.array(losses, np.float32)
        order = np.argsort(ids, kind="stable")
        rows += [
            (step, rank, micro, int(i), int(n), shown(x))
            for i, n, x in zip(ids[order], lens[order], loss[order], strict=True)
        ]
    return sorted(rows, key=lambda r: r[:3])


@pytest.mark.slow
@settings(max_examples=examples(60), deadline=None)
@given(calls=logs(), chunk=st.sampled_from([1, 2, 5, fileformat.ROWS_CHUNK]))
def test_what_is_logged_reads_back_exactly(tmp_path_factory, calls, chunk):
    # the same sample ids recur with the same or other lengths: a length written only
    # the first time (or when it changes) still reads back on every row; a loss stays
    # with its sample when the ids are sorted inside their micro-batch; and the rows
    # read the same whatever the chunks they are decoded in
    path = tmp_path_factory.mktemp("rt") / "t.batches"
    with BatchRecorder(path, rank=0, world_size=1, settings={"k": [1, "x"]}) as rec:
        for step, rank, micro, pairs, losses in calls:
            ids, lens = [i for i, _ in pairs], [n for _, n in pairs]
            rec.log(step, ids, lens, rank=rank, micro=micro, losses=losses)
    if not calls:
        assert read_recording(path).table.empty
        return
    with mock.patch.object(fileformat, "ROWS_CHUNK", chunk):
        got = read_recording(path)
    table = [(*r[:5], shown(r[5])) for r in got.table.itertuples(index=False)]
    assert table == expected_rows(calls)
    assert got.has_losses == any(c[4] is not None for c in calls)
    assert got.header["settings"] == {"k": [1, "x"]}
    assert got.torn == 0
    assert list(got.table.columns) == ["step", "rank", "micro", "sample_id", "length", "loss"]
    assert all(got.table[c].dtype == np.int64 for c in got.table.columns[:5])
    assert got.table["loss"].dtype == np.float64


def test_a_replay_of_a_recording_builds_no_table(tmp_path):
    # the analyses read the arrays: the table (48 bytes a row) is built only when asked
    path = small_file(tmp_path)
    got = read_recording(path)
    rep = got.to_replay()
    assert "table" not in vars(got)
    assert rep.sample_ids.tolist() == got.table["sample_id"].tolist()
    assert "table" in vars(got)


def small_file(tmp_path, steps=6):
    path = tmp_path / "s.batches"
    with BatchRecorder(path, rank=0, world_size=1, settings={"seed": 3}) as rec:
        for s in range(steps):
            rec.log(s, [s, s + 7, 3 * s + 1], [10 + s, 20, 30 + (s % 2)])
            rec.log(s, [100 + s], [5], micro=1)
    return path


@pytest.mark.slow
def test_a_file_cut_at_any_byte_reads_what_was_complete(tmp_path):
    # a run killed in the middle of a write: whatever the cut, the reader keeps the
    # complete records, counts the partial one, and never fails but with InputError
    path = small_file(tmp_path)
    data = path.read_bytes()
    full = read_recording(path).table
    starts = frame_starts(data)
    cut_path = tmp_path / "cut.batches"
    for cut in range(len(data) + 1):
        cut_path.write_bytes(data[:cut])
        try:
            got = read_recording(cut_path)
        except InputError as err:
            # only a file cut inside its preamble or its first (header) record
            assert cut < starts[1], (cut, str(err))
            assert "no complete header" in str(err) or "not a dflash-diag" in str(err)
            continue
        complete = sum(1 for s in starts[1:] if s <= cut) - 1  # whole step records kept
        assert got.torn == (0 if cut in starts or cut == len(data) else 1)
        assert got.table["step"].nunique() == max(complete, 0) if cut < len(data) else 6
        assert got.table.equals(full.iloc[: len(got.table)].reset_index(drop=True))


def frame_starts(data):
    """Byte offsets of every record of a file, and its length."""
    starts, pos = [], len(PREAMBLE)
    while pos < len(data):
        starts.append(pos)
        pos += FRAME_HEAD.size + FRAME_HEAD.unpack_from(data, pos)[0]
    return [*starts, len(data)]


def test_a_flipped_byte_inside_the_file_is_refused_with_its_offset(tmp_path):
    path = small_file(tmp_path)
    data = bytearray(path.read_bytes())
    starts = frame_starts(bytes(data))
    for where in range(starts[0], starts[-2]):  # every byte of every record but the last
        damaged = bytearray(data)
        damaged[where] ^= 0x41
        path.write_bytes(bytes(damaged))
        with pytest.raises(InputError) as err:
            read_recording(path)
        frame = max(s for s in starts if s <= where)
        assert str(err.value) == f"{path}: corrupt record at byte {frame}; the file is damaged"


def test_a_damaged_size_is_not_taken_for_a_cut(tmp_path):
    # the size of the first step record made huge: not a torn end, a damaged file
    path = small_file(tmp_path)
    data = bytearray(path.read_bytes())
    first_block = frame_starts(bytes(data))[1]
    data[first_block : first_block + 4] = struct.pack("<I", 10**6)
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match=f"corrupt record at byte {first_block}"):
        read_recording(path)


def test_a_zeroed_tail_counts_as_torn(tmp_path):
    # a machine that lost power can leave the file longer, its end zeros
    path = small_file(tmp_path)
    full = read_recording(path).table
    with open(path, "ab") as f:
        f.write(bytes(37))
    got = read_recording(path)
    assert got.torn == 1 and got.table.equals(full)


def test_foreign_and_newer_files_are_refused_in_one_line(tmp_path):
    other = tmp_path / "x.batches"
    other.write_bytes(b"step,loss\n1,2.0\n")
    with pytest.raises(InputError, match="not a dflash-diag batch recording"):
        read_recording(other)
    newer = tmp_path / "n.batches"
    newer.write_bytes(b"DFDBATCH" + struct.pack("<I", 99) + bytes(20))
    with pytest.raises(
        InputError, match="format version 99; this dflash-diag reads versions 1 to 2; upgrade"
    ):
        read_recording(newer)
    with pytest.raises(InputError, match="no such file"):
        read_recording(tmp_path / "missing.batches")


def test_the_header_holds_versions_rank_and_settings(tmp_path):
    import dflash_diag

    path = small_file(tmp_path)
    scan = scan_frames(path.read_bytes(), str(path))
    head = scan.headers[0]
    assert head["dflash_diag"] == dflash_diag.__version__
    assert (head["format_version"], head["rank"], head["world_size"]) == (2, 0, 1)
    assert head["pid"] == os.getpid()
    assert head["settings"] == {"seed": 3}
    assert os.path.getsize(path) == scan.end


def test_lengths_given_for_some_ids_of_a_micro_batch_only(tmp_path):
    # step 1: id 1 known, id 3 new; step 2: id 2's length changed, id 3 known
    path = tmp_path / "m.batches"
    with BatchRecorder(path, rank=0, world_size=1) as rec:
        rec.log(0, [1, 2], [5, 6])
        rec.log(1, [3, 1], [7, 5])
        rec.log(2, [3, 2], [7, 9])
    scan = scan_frames(path.read_bytes(), str(path))
    assert len(scan.starts) == 3
    assert read_recording(path).table[["step", "sample_id", "length"]].values.tolist() == [
        [0, 1, 5],
        [0, 2, 6],
        [1, 1, 5],
        [1, 3, 7],
        [2, 2, 9],
        [2, 3, 7],
    ]
