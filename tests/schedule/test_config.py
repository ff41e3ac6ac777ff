"""Schedule options from a TOML file and flags: flags win, the file is found beside the log."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflash_diag.data import DEFAULT_BUCKETS, ScheduleParams
from dflash_diag.errors import InputError
from dflash_diag.schedule.config import CONFIG_NAME, parse_buckets, resolve_schedule


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_flags_win_over_the_file(tmp_path):
    cfg = write(tmp_path / "s.toml", "[schedule]\nseed = 7\ntoken-budget = 4096\nworld_size = 8\n")
    r = resolve_schedule({"seed": 3, "token_budget": None}, config=cfg)
    assert r.params.seed == 3
    assert r.params.token_budget == 4096
    assert r.params.world_size == 8
    assert r.config_path == cfg
    assert r.given == frozenset({"seed", "token_budget", "world_size"})


def test_config_beside_the_log_is_found_and_manifest_is_relative_to_it(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write(run / CONFIG_NAME, '[schedule]\nmanifest = "m.parquet"\nstrategy = "bucketed"\n')
    log = write(run / "train.log", "step=1 loss=1.0\n")
    r = resolve_schedule({}, near=log)
    assert r.config_path == run / CONFIG_NAME
    assert r.manifest == run / "m.parquet"
    assert r.params.strategy == "bucketed"


def test_no_config_gives_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = resolve_schedule({}, near=tmp_path / "x.log")
    assert r.config_path is None
    assert r.params == ScheduleParams()
    assert r.params.buckets == DEFAULT_BUCKETS


def test_manifest_flag_wins_over_the_file(tmp_path):
    cfg = write(tmp_path / "s.toml", '[schedule]\nmanifest = "a.parquet"\n')
    r = resolve_schedule({}, config=cfg, manifest="b.csv")
    assert r.manifest == Path("b.csv")


@pytest.mark.parametrize(
    "text, what",
    [
        ("[schedule]\nsede = 1\n", "unknown keys in [schedule]: sede"),
        ("[other]\nseed = 1\n", "no [schedule] section"),
        ("[schedule\n", "not valid TOML"),
        ('[schedule]\nstrategy = "shuffled"\n', "unknown value 'shuffled'"),
        ("[schedule]\nworld_size = 0\n", "must be a positive whole number"),
        ('[schedule]\nbuckets = "0,10,5"\n', "bucket edges must be at least two increasing"),
    ],
)
def test_bad_config_is_a_clear_input_error(tmp_path, text, what):
    cfg = write(tmp_path / "bad.toml", text)
    with pytest.raises(InputError) as info:
        resolve_schedule({}, config=cfg)
    assert what in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_config_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="config file not found"):
        resolve_schedule({}, config=tmp_path / "nope.toml")


def test_parse_buckets_accepts_text_and_lists():
    assert parse_buckets("0, 770,1216") == (0, 770, 1216)
    assert parse_buckets([0, 10]) == (0, 10)
    with pytest.raises(InputError, match="not a list of numbers"):
        parse_buckets("0,a")


# ---- presets: a trainer's own words -----------------------------------------------------


HF_TOML = """[schedule]
manifest = "lengths.parquet"
preset = "hf-trainer"
per_device_train_batch_size = 8
gradient_accumulation_steps = 2
world_size = 4
seed = 42
train_sampling_strategy = "group_by_length"
dataloader_drop_last = true
dropout = false
"""


def test_hf_trainer_preset_from_toml_keys(tmp_path):
    r = resolve_schedule({}, config=write(tmp_path / "s.toml", HF_TOML))
    p = r.params
    decided = (p.strategy, p.rng, p.seeding, p.shard)
    assert decided == ("length-grouped", "torch", "global", "accelerate")
    assert (p.batch_size, p.grad_accum, p.world_size, p.seed) == (8, 2, 4, 42)
    assert (p.drop_last, p.dropout, p.first_step) == (True, False, 1)
    assert r.manifest == tmp_path / "lengths.parquet"
    # what the preset decided counts as named: spikes attributes on it
    assert {"strategy", "seed", "batch_size"} <= r.given


def test_hf_trainer_default_sampler_uses_data_seed_and_flags_win(tmp_path):
    cfg = write(tmp_path / "s.toml", '[schedule]\npreset = "hf-trainer"\nseed = 1\ndata_seed = 7\n')
    p = resolve_schedule({"batch_size": 16}, config=cfg).params
    # accelerate's SeedableRandomSampler: randperm seeded data_seed + epoch
    assert (p.strategy, p.rng, p.seeding, p.seed, p.batch_size) == (
        "random",
        "torch",
        "per-epoch",
        7,
        16,
    )
    p = resolve_schedule({"preset": "hf-trainer", "group_by_length": True, "seed": 3}).params
    assert (p.strategy, p.seed, p.dropout) == ("length-grouped", 3, None)


@pytest.mark.parametrize(
    ("flags", "what"),
    [
        ({"preset": "lightning"}, "unknown preset 'lightning'"),
        ({"preset": "hf-trainer", "strategy": "random"}, "preset 'hf-trainer' decides strategy"),
        ({"train_sampling_strategy": "random"}, "are the Hugging Face Trainer's words"),
        ({"preset": "hf-trainer", "train_sampling_strategy": "sequential"}, "is not replayed"),
        (
            {"preset": "hf-trainer", "per_device_train_batch_size": 8, "batch_size": 4},
            "per_device_train_batch_size = 8 and batch_size = 4 disagree",
        ),
        ({"preset": "hf-trainer", "dropout": "yes"}, "must be true or false"),
        ({"rng": "numpy", "seeding": "global"}, "'global' is torch's global generator"),
    ],
)
def test_bad_preset_settings_are_input_errors(flags, what):
    with pytest.raises(InputError) as info:
        resolve_schedule(flags)
    assert what in info.value.what
    assert len(str(info.value)) < 300


def test_preset_keys_in_the_file_are_known(tmp_path):
    cfg = write(tmp_path / "s.toml", "[schedule]\ngroup-by-length = true\n")
    with pytest.raises(InputError, match="Hugging Face Trainer's words"):
        resolve_schedule({}, config=cfg)


def test_a_manifest_uri_in_a_config_is_not_made_relative_to_it(tmp_path):
    from dflash_diag.schedule.config import resolve_schedule
    from dflash_diag.storage import display, is_uri

    cfg = tmp_path / "dflash-diag.toml"
    cfg.write_text('[schedule]\nmanifest = "s3://bkt/data/manifest.parquet"\n')
    resolved = resolve_schedule({}, cfg)
    assert is_uri(resolved.manifest)
    assert display(resolved.manifest) == "s3://bkt/data/manifest.parquet"
    cfg.write_text('[schedule]\nmanifest = "m.parquet"\n')
    assert resolve_schedule({}, cfg).manifest == tmp_path / "m.parquet"
