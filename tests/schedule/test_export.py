"""`--export` written as the replay makes its epochs: the same pieces, the same file.

:func:`replayed_tables` never holds a whole Replay; what it gives must be what
:func:`schedule_tables` gives of the held Replay, piece for piece (the same rows cut at
the same places), so the written Parquet file is the same to the byte."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.batches.stats import params_for
from dflash_diag.data import STRATEGY_NAMES, ScheduleParams
from dflash_diag.schedule import replay
from dflash_diag.schedule.export import (
    FirstSeen,
    export_replayed,
    export_schedule,
    replayed_tables,
    schedule_tables,
)
from dflash_diag.schedule.replay import batch_ids


@settings(max_examples=examples(60), deadline=None)
@given(
    n=st.integers(1, 300),
    strategy=st.sampled_from(STRATEGY_NAMES),
    world=st.integers(1, 3),
    accum=st.integers(1, 2),
    epochs=st.integers(1, 4),
    chunk=st.integers(1, 400),
    seed=st.integers(0, 2**16),
)
def test_pieces_made_epoch_by_epoch_are_the_held_replays(
    n, strategy, world, accum, epochs, chunk, seed
):
    lengths = np.random.default_rng(seed).integers(1, 600, n)
    params = ScheduleParams(token_budget=1024, world_size=world, grad_accum=accum, seed=seed)
    params = params_for(strategy, params.replace(epochs=epochs), lengths)
    ids = np.arange(n) * 3 + 11
    held = list(schedule_tables(replay(lengths, params), ids, chunk))
    made = list(replayed_tables(lengths, params, ids=ids, chunk=chunk))
    assert len(made) == len(held)
    for a, b in zip(made, held, strict=True):
        pd.testing.assert_frame_equal(a, b)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.lists(st.integers(0, 12), max_size=30), max_size=6))
def test_first_seen_numbers_pieces_as_batch_ids_numbers_them_whole(pieces):
    keys = [np.array(p, dtype=np.uint64) for p in pieces]
    numbered = FirstSeen()
    got = [numbered.number(k) for k in keys]
    whole = np.concatenate([np.zeros(0, dtype=np.uint64), *keys])
    assert np.concatenate([np.zeros(0, dtype=np.int64), *got]).tolist() == batch_ids(whole).tolist()
    assert all(g.dtype == np.int64 and len(g) == len(k) for g, k in zip(got, keys, strict=True))


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
@pytest.mark.parametrize("strategy", ["sorted-greedy", "random"])
def test_the_file_written_epoch_by_epoch_is_the_same_file(tmp_path, suffix, strategy):
    lengths = np.random.default_rng(3).integers(1, 2000, 5000)
    params = params_for(strategy, ScheduleParams(token_budget=4096, epochs=3), lengths)
    held = export_schedule(replay(lengths, params), tmp_path / f"held{suffix}")
    made = export_replayed(lengths, params, tmp_path / f"made{suffix}")
    assert made.read_bytes() == held.read_bytes()
    back = pd.read_parquet(made) if suffix == ".parquet" else pd.read_csv(made)
    assert back["index"].tolist() == replay(lengths, params).sample_ids.tolist()


def test_an_export_holds_one_piece_of_sample_ids_at_a_time(monkeypatch):
    # the pools are gathered a piece at a time: no gather is larger than a piece
    import dflash_diag.schedule.base as base

    sizes = []
    gather = base.gather_segments

    def counted(ids, offsets, order):
        out = gather(ids, offsets, order)
        sizes.append(out.size)
        return out

    monkeypatch.setattr(base, "gather_segments", counted)
    lengths = np.random.default_rng(5).integers(100, 2000, 20_000)
    pieces = list(replayed_tables(lengths, ScheduleParams(epochs=2), chunk=1000))
    assert sum(len(p) for p in pieces) == 40_000
    assert len(sizes) >= 40  # (no gather of a whole epoch: 20,000 samples)
    assert max(sizes) <= 1000  # (a piece: whole micro-batches of at most 163 samples)
