"""A recording read back is the schedule the run saw: the same Replay a replay builds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dflash_diag.data import ScheduleParams
from dflash_diag.errors import InputError
from dflash_diag.manifest import read_manifest
from dflash_diag.record import BatchRecorder, read_recording
from dflash_diag.record.recording import infer_epochs
from dflash_diag.schedule import replay
from dflash_diag.schedule.config import resolve_schedule

SAMPLES = Path(__file__).resolve().parents[2] / "sample_logs"


def record(rep, base, settings, world_size=None):
    """Log every micro-batch of a replay as its ranks would have: one recorder per rank."""
    world = rep.params.world_size if world_size is None else world_size
    recs = [BatchRecorder(base, rank=r, world_size=world, settings=settings) for r in range(world)]
    m = rep.micro
    for i, (step, rank, micro) in enumerate(zip(m["step"], m["rank"], m["micro"], strict=True)):
        ids = rep.batch(i)
        recs[rank % world].log(step, ids, rep.lengths[ids], rank=rank, micro=micro)
    for rec in recs:
        rec.close()
    return read_recording(base)


def same_tables(got, want):
    pd.testing.assert_frame_equal(got.micro, want.micro)
    pd.testing.assert_frame_equal(got.steps, want.steps)
    assert got.category_names == want.category_names
    for i in (0, len(want.micro) // 2, len(want.micro) - 1):
        assert sorted(got.batch(i).tolist()) == sorted(want.batch(i).tolist())


@pytest.mark.slow
def test_the_sample_run_recorded_reads_back_as_its_replay(tmp_path):
    # the strong test: what replay() produced for sample_logs/run.log, recorded through
    # BatchRecorder by its 8 ranks and read back, is the same schedule, table for table:
    # epochs found from recurrences, batch ids by composition, categories from the manifest
    sched = resolve_schedule({}, SAMPLES / "dflash-diag.toml")
    manifest = read_manifest(SAMPLES / "manifest.parquet", category_column=sched.category_column)
    want = replay(manifest, sched.params)
    settings = {"seed": sched.params.seed, "max_seq_len": sched.params.max_seq_len}
    got_rec = record(want, tmp_path / "run.batches", settings)
    assert len(got_rec.paths) == 8 and got_rec.torn == 0
    got = got_rec.to_replay(manifest)
    same_tables(got, want)
    assert got.micro["epoch"].max() == sched.params.epochs - 1
    assert (got.params.world_size, got.params.grad_accum, got.params.first_step) == (8, 1, 1)
    assert got.params.seed == sched.params.seed


LENGTHS = np.random.default_rng(7).integers(1, 3000, 203)

SCHEDULES = {
    "random, 2 ranks x grad accum 2": ScheduleParams(
        strategy="random", batch_size=4, world_size=2, grad_accum=2, epochs=4, seed=3
    ),
    "bucketed, numpy rng": ScheduleParams(
        strategy="bucketed", token_budget=6000, rng="numpy", epochs=3, seed=5
    ),
    "distributed sampler padding": ScheduleParams(
        strategy="distributed", batch_size=5, world_size=3, epochs=3, seeding="per-epoch"
    ),
    "accelerate shards, uneven last step": ScheduleParams(
        strategy="random",
        batch_size=3,
        world_size=2,
        grad_accum=3,
        shard="accelerate",
        epochs=3,
        rng="torch",
        seeding="per-epoch",
    ),
    "length-grouped, capped lengths": ScheduleParams(
        strategy="length-grouped", batch_size=4, max_seq_len=1500, epochs=2, seed=9
    ),
}


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_every_schedule_recorded_reads_back_as_its_replay(tmp_path, name):
    params = SCHEDULES[name]
    want = replay(LENGTHS, params)
    settings = {"max_seq_len": params.max_seq_len} if params.max_seq_len else {}
    got = record(want, tmp_path / "t.batches", settings).to_replay(LENGTHS)
    same_tables(got, want)


def test_without_a_manifest_the_recorded_lengths_are_used(tmp_path):
    params = SCHEDULES["random, 2 ranks x grad accum 2"]
    want = replay(LENGTHS, params)
    got = record(want, tmp_path / "t.batches", {}).to_replay()
    same_tables(got, want)
    assert got.lengths.tolist() == LENGTHS.tolist()


def test_the_cap_is_found_when_the_settings_do_not_say_it(tmp_path):
    # lengths recorded after truncation at 1500 fit the manifest's longer ones
    params = SCHEDULES["length-grouped, capped lengths"]
    want = replay(LENGTHS, params)
    got = record(want, tmp_path / "t.batches", {}).to_replay(LENGTHS)
    same_tables(got, want)
    assert got.params.max_seq_len == 1500


def test_a_recording_of_another_run_does_not_fit_the_manifest(tmp_path):
    path = tmp_path / "t.batches"
    with BatchRecorder(path, rank=0, world_size=1, settings={"max_seq_len": 100}) as rec:
        rec.log(0, [0, 1], [5, 100])
        rec.log(1, [2], [7])
    got = read_recording(path)
    assert got.to_replay(np.array([5, 400, 7])).micro["tokens"].tolist() == [105, 7]
    with pytest.raises(InputError) as err:
        got.to_replay(np.array([5, 400]))
    assert str(err.value) == (
        f"{path}: recorded file does not fit the manifest: sample id 2 beyond its 2 samples; "
        "give the manifest of the run that wrote it"
    )
    with pytest.raises(InputError) as err:
        got.to_replay(np.array([5, 400, 8]))
    assert str(err.value) == (
        f"{path}: recorded file does not fit the manifest: sample 2 has length 7 recorded, "
        "8 in the manifest; give the manifest of the run that wrote it"
    )


def test_steps_per_epoch_in_the_settings_decides_the_epochs(tmp_path):
    path = tmp_path / "t.batches"
    with BatchRecorder(path, rank=0, world_size=1, settings={"steps_per_epoch": 2}) as rec:
        for step in range(1, 6):
            rec.log(step, [step], [3])
    assert read_recording(path).to_replay().micro["epoch"].tolist() == [0, 0, 1, 1, 2]


def test_an_epoch_starts_where_most_of_a_step_was_seen_in_this_epoch():
    # steps of 2 samples; step 2 repeats one sample of step 0 (a padded end): half is not
    # more than half; step 3 repeats both samples of step 1: epoch 1 from step 3; step 5
    # repeats the two of step 4: epoch 2
    batches = [[0, 1], [2, 3], [4, 0], [3, 2], [1, 4], [4, 1]]
    ids = np.array(sum(batches, []))
    bounds = np.arange(0, len(ids) + 1, 2)
    got = infer_epochs(np.arange(6), ids, bounds)
    assert got.tolist() == [0, 0, 0, 1, 1, 2]


def test_an_empty_recording_has_no_replay(tmp_path):
    path = tmp_path / "t.batches"
    BatchRecorder(path, rank=0, world_size=1).close()
    got = read_recording(path)
    assert got.table.empty and list(got.table.columns) == [
        "step",
        "rank",
        "micro",
        "sample_id",
        "length",
        "loss",
    ]
    assert not got.has_losses
    with pytest.raises(InputError, match="holds no recorded micro-batches"):
        got.to_replay()


def test_schedule_settings_are_kept_when_valid(tmp_path):
    path = tmp_path / "t.batches"
    settings = {
        "seed": 11,
        "strategy": "random",
        "batch_size": "eight",
        "max_seq_len": 0,
        "note": "x",
    }
    with BatchRecorder(path, rank=0, world_size=1, settings=settings) as rec:
        rec.log(4, [0, 1], [3, 3])
    params = read_recording(path).to_replay().params
    assert dataclasses.asdict(params) | {} == dataclasses.asdict(
        ScheduleParams(seed=11, strategy="random", first_step=4)
    )


def test_sparse_sample_ids_need_a_manifest_but_epochs_are_still_found(tmp_path):
    path = tmp_path / "t.batches"
    big = 10**15
    with BatchRecorder(path, rank=0, world_size=1) as rec:
        for step, ids in enumerate([[big, big + 9], [big + 9, big]]):
            rec.log(step, ids, [4, 5])
    got = read_recording(path)
    with pytest.raises(InputError, match="sample ids up to 1000000000000009 for 4 recorded"):
        got.to_replay()
    ids = got.table["sample_id"].to_numpy()
    assert infer_epochs(np.array([0, 1]), ids, np.array([0, 2, 4])).tolist() == [0, 1]


def test_a_strategy_in_the_settings_that_names_code_is_never_taken(tmp_path):
    """A recording travels between machines: its settings are data, so a strategy there
    that names Python (FILE.py:FUNC) is left out; a registered name is kept."""
    from dflash_diag.record import BatchRecorder, read_recording

    for strategy, kept in (("evil.py:run", "sorted-greedy"), ("random", "random")):
        path = tmp_path / f"{kept}.batches"
        with BatchRecorder(path, rank=0, world_size=1, settings={"strategy": strategy}) as rec:
            rec.log(1, [0, 1], [5, 7])
            rec.log(2, [2, 3], [4, 6])
        assert read_recording(path).to_replay().params.strategy == kept
