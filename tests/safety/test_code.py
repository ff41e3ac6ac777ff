"""Nothing found on disk runs code: a ``[schedule] strategy = "FILE.py:FUNC"`` (or
``module:FUNC``) in a ``dflash-diag.toml`` that was found beside a log or in the working
directory is refused; code runs only when the user named it (``--strategy``, a config
named with ``--config``, ``--allow-code``), and the output says which file it runs."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.errors import InputError
from dflash_diag.schedule.config import CONFIG_NAME, locate_config, resolve_schedule

REAL = Path(__file__).parents[1] / "data" / "real_run"
runner = CliRunner()

#: A user's batching function that leaves a mark when its file is imported.
CODE = """
from pathlib import Path
Path(__file__).with_name("RAN").write_text("imported")

def build(lengths, epoch, seed):
    order = list(range(len(lengths)))
    return [order[i : i + 4] for i in range(0, len(order), 4)]
"""


@pytest.fixture()
def run(tmp_path, monkeypatch) -> Path:
    """A run folder (log, manifest, code, a config naming the code) and an empty working
    directory elsewhere."""
    folder = tmp_path / "run"
    folder.mkdir()
    for name in ("run.log", "manifest.parquet"):
        shutil.copy(REAL / name, folder / name)
    (folder / "evil.py").write_text(CODE)
    (folder / CONFIG_NAME).write_text(
        '[schedule]\nmanifest = "manifest.parquet"\nstrategy = "evil.py:build"\n'
    )
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return folder


def one_error(result) -> str:
    lines = result.stderr.strip().splitlines() if result.stderr else []
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


@pytest.mark.parametrize("command", ["spikes", "watch", "batches"])
def test_code_in_a_config_found_beside_an_input_never_runs(run, command):
    target = run / ("manifest.parquet" if command == "batches" else "run.log")
    line = one_error(runner.invoke(app, [command, str(target)]))
    assert "runs Python code" in line and "found beside the" in line
    assert "--allow-code" in line and f"--config {run / CONFIG_NAME}" in line
    assert not (run / "RAN").exists()


def test_code_in_a_config_found_in_the_working_directory_never_runs(run, monkeypatch):
    monkeypatch.chdir(run)
    shutil.move(run / "run.log", run.parent / "run.log")
    line = one_error(runner.invoke(app, ["spikes", str(run.parent / "run.log")]))
    assert "found in the working directory" in line
    assert not (run / "RAN").exists()


def test_allow_code_in_a_found_config_does_not_count(run):
    (run / CONFIG_NAME).write_text(
        '[schedule]\nmanifest = "manifest.parquet"\nstrategy = "evil.py:build"\nallow_code = true\n'
    )
    line = one_error(runner.invoke(app, ["spikes", str(run / "run.log")]))
    assert "allow_code counts only in a config named with --config" in line
    assert not (run / "RAN").exists()


def test_a_module_named_by_a_found_config_is_not_imported(run, tmp_path, monkeypatch):
    (tmp_path / "evilmod.py").write_text(CODE.replace('with_name("RAN")', 'with_name("RAN2")'))
    monkeypatch.syspath_prepend(str(tmp_path))
    (run / CONFIG_NAME).write_text('[schedule]\nstrategy = "evilmod:build"\n')
    with pytest.raises(InputError, match=r"runs Python code \(module evilmod\)"):
        resolve_schedule({}, near=(run / "run.log", None))
    assert "evilmod" not in sys.modules and not (tmp_path / "RAN2").exists()


def test_a_named_config_runs_its_code_relative_to_itself_and_says_so(run):
    result = runner.invoke(
        app, ["batches", str(run / "manifest.parquet"), "--config", str(run / CONFIG_NAME)]
    )
    assert result.exit_code == 0, result.output
    assert (run / "RAN").exists()  # (evil.py is beside the config, not in the cwd)
    assert f"runs Python code: {run / 'evil.py'}" in " ".join(result.stdout.split())


@pytest.mark.slow
def test_allow_code_flag_opts_in_to_a_found_config(run):
    result = runner.invoke(app, ["batches", str(run / "manifest.parquet"), "--allow-code"])
    assert result.exit_code == 0, result.output
    assert (run / "RAN").exists()


def test_a_strategy_on_the_command_line_runs_and_wins_over_the_file(run):
    r = resolve_schedule({"strategy": str(run / "evil.py") + ":build"}, near=(run / "run.log",))
    assert r.code == str(run / "evil.py") and "strategy" in r.from_flags


def test_one_rule_for_where_the_config_is_found(tmp_path, monkeypatch):
    """--config; else beside the log; else beside the manifest; else the working folder."""
    logs, data, cwd = (tmp_path / n for n in ("logs", "data", "cwd"))
    for d in (logs, data, cwd):
        d.mkdir()
        (d / CONFIG_NAME).write_text("[schedule]\nseed = 1\n")
    monkeypatch.chdir(cwd)
    log, man = logs / "run.log", data / "m.parquet"
    assert locate_config(None, (log, man)) == (logs / CONFIG_NAME, "beside the log")
    assert locate_config(None, (None, man)) == (data / CONFIG_NAME, "beside the manifest")
    (logs / CONFIG_NAME).unlink()
    assert locate_config(None, (log, man)) == (data / CONFIG_NAME, "beside the manifest")
    (data / CONFIG_NAME).unlink()
    assert locate_config(None, (log, man)) == (cwd / CONFIG_NAME, "in the working directory")
    named = tmp_path / "x.toml"
    named.write_text("[schedule]\n")
    assert locate_config(named, (log, man)) == (named, "named")


def test_the_output_names_the_config_and_the_values_from_flags(run):
    (run / CONFIG_NAME).write_text('[schedule]\nmanifest = "manifest.parquet"\nseed = 9\n')
    result = runner.invoke(
        app, ["batches", str(run / "manifest.parquet"), "--token-budget", "16384"]
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert f"config: {run / CONFIG_NAME} (found beside the manifest); give --config FILE" in text
    assert "from flags (they win over any config): --token-budget" in text


def test_a_search_never_calls_a_default_seed_as_given():
    from dflash_diag.schedule.config import ResolvedSchedule

    r = ResolvedSchedule(params=resolve_schedule({}).params, manifest=None, config_path=None)
    assert r.origin("seed") == "default"
    r2 = resolve_schedule({"seed": 5})
    assert r2.origin("seed") == "--seed"


def test_a_toml_nested_deep_is_one_error_line(tmp_path):
    cfg = tmp_path / "deep.toml"
    cfg.write_text("[schedule]\nseed = " + "[" * 200_000 + "]" * 200_000 + "\n")
    with pytest.raises(InputError, match="nested too deep"):
        resolve_schedule({}, config=cfg)


def test_a_recording_whose_settings_name_code_runs_none(tmp_path, monkeypatch):
    """A recording is a found file too: a ``strategy`` in its settings is never run."""
    import pandas as pd

    from dflash_diag.record import BatchRecorder

    monkeypatch.chdir(tmp_path)
    (tmp_path / "evil.py").write_text(CODE)
    n = 64
    pd.DataFrame({"sample_id": range(n), "length": [10 + i for i in range(n)]}).to_csv(
        "m.csv", index=False
    )
    settings = {"strategy": f"{tmp_path / 'evil.py'}:build", "seed": 1}
    with BatchRecorder(tmp_path / "run.batches", rank=0, world_size=1, settings=settings) as rec:
        for step in range(1, 17):
            ids = [(step * 4 + k) % n for k in range(4)]
            rec.log(step, ids, [10 + i for i in ids])
    (tmp_path / "run.log").write_text(
        "".join(f"step={s} loss={1 + s / 100}\n" for s in range(1, 17))
    )
    for args in (
        ["batches", "m.csv", "--composition", "run.batches", "--compare", "sorted-greedy,bucketed"],
        ["spikes", "run.log", "--manifest", "m.csv", "--force"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code in (0, 2), result.output
        assert not (tmp_path / "RAN").exists(), args


def test_a_negative_flag_is_echoed_as_given():
    """``--no-dropout`` is said as ``--no-dropout``, not as the flag it turns off."""
    from pathlib import Path

    from dflash_diag.data import ScheduleParams
    from dflash_diag.schedule.config import ResolvedSchedule

    params = ScheduleParams(dropout=False, seed=3)
    r = ResolvedSchedule(params, None, Path("x.toml"), from_flags=frozenset({"dropout", "seed"}))
    assert r.value_notes[0] == "from flags (they win over any config): --no-dropout, --seed"
