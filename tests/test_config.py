"""Schedule options from a TOML file and flags: flags win, the file is found beside the log."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflash_diag.errors import InputError
from dflash_diag.records import DEFAULT_BUCKETS, ScheduleParams
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
