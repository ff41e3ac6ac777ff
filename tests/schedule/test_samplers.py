"""The torch-side samplers replayed without torch, against what the real libraries drew.

Every case of ``tests/data/samplers/*.json`` (recorded by ``make_samplers.py`` with torch
2.13, transformers 5.24, accelerate 1.15; see its README) is replayed exactly, and the
four real Trainer runs step by step from the seed and the Trainer's arguments alone.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.data import ScheduleParams
from dflash_diag.errors import InputError
from dflash_diag.schedule import STRATEGIES, epoch_batches, replay, verify_tokens
from dflash_diag.schedule.accelerate import even_batches, step_positions
from dflash_diag.schedule.base import Batches
from dflash_diag.schedule.config import resolve_schedule
from dflash_diag.schedule.distributed import distributed_indices
from dflash_diag.schedule.rng import make_shuffler

DATA = Path(__file__).resolve().parents[1] / "data" / "samplers"


@cache
def oracle(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def cases(name: str) -> list:
    doc = oracle(name)
    return [pytest.param(c, id=f"{name}-{i}") for i, c in enumerate(doc["cases"])]


def epochs_of(r) -> list[list[list[int]]]:
    """A one-rank replay's micro-batches grouped by epoch: ``[epoch][batch] -> ids``."""
    out: list[list[list[int]]] = []
    for i, e in enumerate(r.micro["epoch"].tolist()):
        while len(out) <= e:
            out.append([])
        out[e].append(r.batch(i).tolist())
    return out


def test_every_oracle_was_recorded_with_the_versions_the_help_names():
    for name in (
        "random_sampler",
        "length_grouped",
        "distributed",
        "seedable",
        "trainer",
        "accelerate_shard",
        "trainer_accum",
    ):
        v = oracle(name)["versions"]
        assert (v["torch"].split("+")[0], v["transformers"], v["accelerate"]) == (
            "2.13.0",
            "5.24.0",
            "1.15.0",
        )


@pytest.mark.parametrize("case", cases("random_sampler"))
def test_random_sampler_on_the_global_generator(case):
    # torch.manual_seed(seed); DataLoader(sampler=RandomSampler(ds)): per epoch the
    # base-seed draw, the sampler's own 64-bit seed, randperm on a fresh generator
    params = ScheduleParams(
        strategy="random",
        rng="torch",
        seeding="global",
        dropout=False,
        batch_size=case["batch_size"],
        seed=case["seed"],
    )
    r = replay(np.ones(case["n"], dtype=np.int64), params, epochs=3)
    assert r.determined_epochs is None
    assert epochs_of(r) == case["epochs"]


@pytest.mark.parametrize("case", cases("length_grouped"))
def test_length_grouped_sampler_on_the_global_generator(case):
    # LengthGroupedSampler without a generator (the Trainer's group_by_length):
    # per epoch the base-seed draw, then randperm on the global generator
    params = ScheduleParams(
        strategy="length-grouped",
        rng="torch",
        seeding="global",
        dropout=False,
        batch_size=case["batch_size"],
        seed=case["seed"],
    )
    r = replay(np.array(case["lengths"]), params, epochs=3)
    assert epochs_of(r) == case["epochs"]


def test_length_grouped_oracles_cover_several_megabatches():
    # megabatch = min(n // (4 * B), 50) * B samples; the grid must hold cases with more
    # than one, and a partial last one, or the sort/swap across megabatches is untested
    from dflash_diag.schedule.length_grouped import LengthGrouped

    counts = []
    for c in oracle("length_grouped")["cases"]:
        params = ScheduleParams(strategy="length-grouped", batch_size=c["batch_size"])
        size = LengthGrouped().prepare(np.array(c["lengths"]), params)[2]
        counts.append((-(-c["n"] // size), c["n"] % size))
    assert max(k for k, _ in counts) >= 5
    assert any(k > 1 and tail for k, tail in counts)


@pytest.mark.parametrize("case", cases("distributed"))
def test_distributed_sampler(case):
    w, epoch = case["world_size"], case["epoch"]
    # the pure function: randperm seeded seed + epoch, padded or cut, [r::W]
    perm = make_shuffler("torch", case["seed"] + epoch).permutation(case["n"])
    assert distributed_indices(perm, w, case["drop_last"]).tolist() == case["ranks"]
    # through the replay: rank r's micro-batches of that epoch, in order, are its list
    params = ScheduleParams(
        strategy="distributed",
        rng="torch",
        seeding="per-epoch",
        batch_size=4,
        world_size=w,
        sampler_drop_last=case["drop_last"],
        seed=case["seed"],
    )
    r = replay(np.ones(case["n"], dtype=np.int64), params, epochs=epoch + 1)
    micro = r.micro
    for rank in range(w):
        rows = np.flatnonzero((micro["epoch"] == epoch).to_numpy() & (micro["rank"] == rank))
        assert [i for row in rows for i in r.batch(row).tolist()] == case["ranks"][rank]


@pytest.mark.parametrize("case", cases("seedable"))
@pytest.mark.parametrize("how", ["direct", "accelerate_prepare"])
def test_seedable_random_sampler(case, how):
    # accelerate's SeedableRandomSampler: randperm seeded seed + epoch, every epoch
    params = ScheduleParams(
        strategy="random",
        rng="torch",
        seeding="per-epoch",
        batch_size=case["batch_size"],
        seed=case["seed"],
    )
    r = replay(np.ones(case["n"], dtype=np.int64), params, epochs=3)
    assert epochs_of(r) == case[how]


# ---- the real Trainer runs, from the preset ----------------------------------------------


def trainer_case(strategy: str, dropout: float) -> dict:
    doc = oracle("trainer")
    (case,) = [
        c
        for c in doc["cases"]
        if c["train_sampling_strategy"] == strategy and c["dropout"] == dropout
    ]
    return case


def preset_replay(case: dict, dropout: bool | None, **extra):
    """The run replayed from the Trainer's own arguments, through the option resolver."""
    flags = {
        "preset": "hf-trainer",
        "per_device_train_batch_size": case["batch_size"],
        "seed": case["seed"],
        "train_sampling_strategy": case["train_sampling_strategy"],
        "num_train_epochs": case["epochs"],
        "dropout": dropout,
        **extra,
    }
    params = resolve_schedule(flags, config=None).params
    return replay(np.array(oracle("trainer")["lengths"]), params)


def matches_by_epoch(r, case: dict) -> list[int]:
    """Steps (numbered from 1) whose samples equal the run's, counted per epoch of 75."""
    per_epoch = case["n"] // case["batch_size"]
    hits = [0] * case["epochs"]
    steps = r.micro["step"].tolist()
    for i, step in enumerate(steps):
        if r.batch(i).tolist() == case["steps"][step - 1]:
            hits[(step - 1) // per_epoch] += 1
    return hits


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_trainer_default_sampler_replays_every_step(dropout):
    case = trainer_case("random", dropout)
    assert case["classes"]["sampler"] == "SeedableRandomSampler"
    # accelerate's seedable sampler: the seed decides every epoch, dropout or not
    r = preset_replay(case, dropout=None)
    assert r.determined_epochs is None
    assert r.micro["step"].tolist() == list(range(1, 226))
    assert matches_by_epoch(r, case) == [75, 75, 75]


def test_trainer_group_by_length_without_dropout_replays_every_step(tmp_path):
    case = trainer_case("group_by_length", 0.0)
    assert case["classes"]["sampler"] == "LengthGroupedSampler"
    r = preset_replay(case, dropout=False)
    assert r.determined_epochs is None
    assert matches_by_epoch(r, case) == [75, 75, 75]


def test_trainer_group_by_length_with_dropout_replays_epoch_0_and_says_so():
    case = trainer_case("group_by_length", 0.1)
    for said in (True, None):  # dropout said, or not known
        r = preset_replay(case, dropout=said)
        assert r.determined_epochs == 1
        assert r.micro["step"].tolist() == list(range(1, 76))
        assert matches_by_epoch(r, case) == [75, 0, 0]


def test_a_wrong_no_dropout_claim_is_caught_by_the_logged_tokens():
    # told "no dropout" about the run with dropout, the replay goes wrong in epoch 1 ...
    case = trainer_case("group_by_length", 0.1)
    r = preset_replay(case, dropout=False)
    hits = matches_by_epoch(r, case)
    assert hits[0] == 75 and hits[1] < 75 and hits[2] < 75
    # ... and the tokens the run would log refute it from the first step of epoch 1
    lengths = np.array(oracle("trainer")["lengths"])
    log = pd.DataFrame(
        {
            "step": np.arange(1, 226),
            "tokens": [float(lengths[s].sum()) for s in case["steps"]],
        }
    )
    v = verify_tokens(r, log)
    assert v.first_mismatch is not None and 76 <= v.first_mismatch <= 150
    assert v.tokens_match < 1.0
    # the honest replay (dropout not ruled out) matches every step it holds
    honest = verify_tokens(preset_replay(case, dropout=None), log)
    assert honest.tokens_match == 1.0 and honest.n_compared == 75


# ---- accelerate's sharding across processes ----------------------------------------------------


def test_even_batches_complete_the_short_batch_and_fill_the_round():
    # a transcription of BatchSamplerShard(even_batches=True) on 3 processes
    b = Batches.from_lists([[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11], [12]])
    assert even_batches(b, 3, 3, False).tolist() == [
        [0, 1, 2],
        [3, 4, 5],
        [6, 7, 8],
        [9, 10, 11],
        [12, 0, 1],
        [2, 3, 4],
    ]
    # fewer samples than processes x batch: the head is repeated as often as needed
    assert even_batches(Batches.from_lists([[0]]), 2, 2, False).tolist() == [[0, 0], [0, 0]]


def test_trainer_with_grad_accum_steps_on_what_an_epoch_leaves():
    # 5 batches per process, grad_accum 2: steps of 2, 2 and 1 micro-batches per epoch
    pos, step, rank, micro = step_positions(10, 2, 2, keep_partial=True)
    assert step.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    assert sorted(pos.tolist()) == list(range(10))
    lengths = np.arange(1, 81)  # 80 samples, batch 8 per process, 2 processes: 5 each
    params = ScheduleParams(
        strategy="random",
        rng="torch",
        seeding="per-epoch",
        batch_size=8,
        world_size=2,
        grad_accum=2,
        shard="accelerate",
        first_step=1,
        epochs=2,
    )
    r = replay(lengths, params)
    assert r.steps["step"].tolist() == [1, 2, 3, 4, 5, 6]
    assert r.steps["n_micro"].tolist() == [4, 4, 2, 4, 4, 2]
    assert (r.steps.groupby("epoch")["n_samples"].sum() == 80).all()


# ---- accelerate's BatchSamplerShard, recorded process by process ----------------------------


def by_rank(batches: Batches, world: int) -> list[list[list[int]]]:
    """Strided order -> each process's batches: position ``j * W + r`` is ``r``'s ``j``-th."""
    flat = batches.tolist()
    return [flat[r::world] for r in range(world)]


def replayed_ranks(r, epoch: int, world: int) -> list[list[list[int]]]:
    """Each rank's micro-batches of one epoch of a replay, in order."""
    micro = r.micro
    out = []
    for rank in range(world):
        rows = np.flatnonzero((micro["epoch"] == epoch).to_numpy() & (micro["rank"] == rank))
        out.append([r.batch(i).tolist() for i in rows])
    return out


def shard_params(case: dict) -> ScheduleParams:
    return ScheduleParams(
        strategy="random",
        rng="torch",
        seeding="per-epoch",
        batch_size=case["batch_size"],
        world_size=case["num_processes"],
        drop_last=case["drop_last"],
        shard="accelerate",
        seed=case["seed"],
    )


@pytest.mark.parametrize("case", cases("accelerate_shard"))
def test_batch_sampler_shard_per_process(case):
    # the pure function over the batch sampler's own batches: every process's list
    w, bs = case["num_processes"], case["batch_size"]
    batches = Batches.from_lists(case["batches"])
    shards = even_batches(batches, w, bs, case["drop_last"], even=case["even_batches"])
    assert by_rank(shards, w) == case["ranks"]
    if case["sampler"] != "seedable" or not case["even_batches"]:
        return
    # the Trainer's sampler, from the seed alone, through the replay (even_batches=True)
    r = replay(np.ones(case["n"], dtype=np.int64), shard_params(case), epochs=1)
    assert replayed_ranks(r, 0, w) == case["ranks"]


@pytest.mark.parametrize(
    "case", [p for p in cases("accelerate_shard") if p.values[0]["sampler"] == "seedable"]
)
def test_prepare_data_loader_per_process_two_epochs(case):
    # prepare_data_loader(num_processes, process_index, use_seedable_sampler=True):
    # what Accelerator.prepare, and so the Trainer, runs; epoch e draws seed + e
    w, bs = case["num_processes"], case["batch_size"]
    params = shard_params(case)
    for epoch in range(2):
        order = epoch_batches(np.ones(case["n"], dtype=np.int64), params, epoch)
        shards = even_batches(order, w, bs, case["drop_last"], even=case["even_batches"])
        assert by_rank(shards, w) == [ep[epoch] for ep in case["prepare_data_loader"]]
    if case["even_batches"]:
        r = replay(np.ones(case["n"], dtype=np.int64), params, epochs=2)
        for epoch in range(2):
            assert replayed_ranks(r, epoch, w) == [ep[epoch] for ep in case["prepare_data_loader"]]


def test_accelerate_shard_oracles_cover_the_padding_cases():
    # short last batches, rounds that do not fill, and fewer samples than W x batch
    doc = oracle("accelerate_shard")["cases"]
    assert any(c["n"] % c["batch_size"] and not c["drop_last"] for c in doc)
    assert any(len(c["batches"]) % c["num_processes"] for c in doc)
    assert any(c["n"] < c["num_processes"] * c["batch_size"] for c in doc)
    uneven = [c for c in doc if not c["even_batches"] and not c["drop_last"]]
    assert any(len({len(x) for x in c["ranks"]}) > 1 for c in uneven)


# ---- the real Trainer with gradient accumulation -------------------------------------------


def replayed_steps(r) -> list[list[list[int]]]:
    """``[step - first][micro] -> ids`` of a one-process replay."""
    out: list[list[list[int]]] = []
    first = int(r.micro["step"].iloc[0])
    for i, step in enumerate(r.micro["step"].tolist()):
        while len(out) <= step - first:
            out.append([])
        out[step - first].append(r.batch(i).tolist())
    return out


@pytest.mark.parametrize("case", cases("trainer_accum"))
def test_trainer_with_gradient_accumulation_replays_every_micro_batch(case):
    flags = {
        "preset": "hf-trainer",
        "per_device_train_batch_size": case["batch_size"],
        "gradient_accumulation_steps": case["gradient_accumulation_steps"],
        "seed": case["seed"],
        "train_sampling_strategy": case["train_sampling_strategy"],
        "num_train_epochs": case["epochs"],
        "dropout": case["dropout"] > 0,
    }
    params = resolve_schedule(flags, config=None).params
    r = replay(np.array(oracle("trainer_accum")["lengths"]), params)
    assert r.determined_epochs is None
    # steps from 1, as many as the Trainer took; the epoch's last step is short
    assert r.steps["step"].tolist() == list(range(1, case["global_step"] + 1))
    assert replayed_steps(r) == case["steps"]
    g = case["gradient_accumulation_steps"]
    per_epoch = -(-case["n"] // case["batch_size"])
    assert per_epoch % g  # the grid holds a partial accumulation at each epoch end
    assert r.steps["n_micro"].tolist() == ([g] * (per_epoch // g) + [per_epoch % g]) * 2


# ---- invariants ------------------------------------------------------------------------------


@settings(max_examples=examples(60), deadline=None)
@given(
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=12),
    world=st.integers(1, 4),
    drop_last=st.booleans(),
)
def test_even_batches_invariants(sizes, world, drop_last):
    batch_size = 5
    sizes = [batch_size] * (len(sizes) - 1) + [sizes[-1]]  # only the last may be short
    b = Batches.from_lists(
        [list(range(sum(sizes[:i]), sum(sizes[: i + 1]))) for i in range(len(sizes))]
    )
    out = even_batches(b, world, batch_size, drop_last).tolist()
    original = b.tolist()
    if world == 1:
        assert out == original  # one process: accelerate does not shard
        return
    # every process gets as many batches
    assert len(out) % world == 0
    if drop_last:
        assert out == original[: len(original) // world * world]
        return
    # the epoch's batches come first, unchanged but for the short last one, completed
    assert out[: len(original) - 1] == original[:-1]
    assert out[len(original) - 1][: sizes[-1]] == original[-1]
    assert all(len(x) == batch_size for x in out)
    # what was added comes from the first `world` batches
    head = {i for x in original[:world] for i in x}
    added = [i for x in out[len(original) - 1 :] for i in x][sizes[-1] :]
    assert set(added) <= head


@settings(max_examples=examples(60), deadline=None)
@given(n=st.integers(1, 60), world=st.integers(1, 5), drop=st.booleans(), seed=st.integers(0, 99))
def test_distributed_ranks_are_equal_and_cover_the_epoch(n, world, drop, seed):
    perm = make_shuffler("torch", seed).permutation(n)
    ranks = distributed_indices(perm, world, drop)
    assert ranks.shape[0] == world
    seen = set(ranks.ravel().tolist())
    if drop:
        assert ranks.size == n // world * world and len(seen) == ranks.size
    else:
        assert seen == set(range(n)) and ranks.size == -(-n // world) * world


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_declares_whether_it_is_sized(name):
    cls = STRATEGIES[name]
    assert isinstance(cls.sized, bool)
    lengths = np.random.default_rng(3).integers(1, 900, 300)
    params = ScheduleParams(strategy=name, batch_size=6, rng="torch", seed=5, epochs=2)
    a = replay(lengths, params.replace(token_budget=2000))
    b = replay(lengths, params.replace(token_budget=9000))
    # a sized strategy never reads the budget; a packer does
    assert np.array_equal(a.sample_ids, b.sample_ids) == cls.sized
    if cls.sized:
        with pytest.raises(InputError, match="needs a batch size"):
            replay(lengths, params.replace(batch_size=None))


@pytest.mark.parametrize("case", cases("random_sampler")[:3] + cases("length_grouped")[-2:])
def test_one_epoch_of_the_global_generator_is_what_the_run_drew(case):
    # epoch_batches(epoch=2) draws epochs 0 and 1 first: the generator carries
    name = "length-grouped" if "lengths" in case else "random"
    params = ScheduleParams(
        strategy=name,
        rng="torch",
        seeding="global",
        batch_size=case["batch_size"],
        seed=case["seed"],
    )
    lengths = np.array(case.get("lengths", [1] * case["n"]))
    # not ruled out that training drew from the generator: epoch 2 is refused ...
    with pytest.raises(InputError, match="epoch 2 is not determined by the seed"):
        epoch_batches(lengths, params, 2)
    # ... ruled out, it is the run's
    assert epoch_batches(lengths, params.replace(dropout=False), 2).tolist() == case["epochs"][2]


@settings(max_examples=examples(80), deadline=None)
@given(
    m=st.integers(0, 300),
    w=st.integers(1, 8),
    g=st.integers(1, 5),
    keep_partial=st.booleans(),
)
def test_step_positions_in_place_are_the_formula(m, w, g, keep_partial):
    """Ranks and micros by one divmod, the positions made in place: the plain formula's
    arrays, and the rows no step uses are the set difference, in order."""
    from dflash_diag.schedule.base import EpochPlan
    from dflash_diag.schedule.replay import _epoch_rows

    pos, step, rank, micro = step_positions(m, w, g, keep_partial)
    counts = np.bincount(step, minlength=int(step.max()) + 1 if step.size else 0) // w
    starts = np.concatenate([[0], np.cumsum(counts * w)])
    within = np.arange(step.size) - starts[step]
    assert rank.tolist() == (within // counts[step]).tolist()
    assert micro.tolist() == (within % counts[step]).tolist()
    assert pos.tolist() == ((step * g + micro) * w + rank).tolist()
    shard = "accelerate" if keep_partial else "strided"
    params = ScheduleParams(token_budget=10, world_size=w, grad_accum=g, shard=shard)
    order = np.random.default_rng(m).permutation(m)
    plan = EpochPlan(Batches(np.arange(m), np.arange(m + 1)), order)
    part, chosen, unused = _epoch_rows(plan, params, 2, 7)
    assert unused.tolist() == order[np.setdiff1d(np.arange(m), pos)].tolist()
    assert part["step"].tolist() == (step + 7).tolist()
    assert chosen.tolist() == order[pos].tolist()
