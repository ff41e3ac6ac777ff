"""`dflash-diag batches` end to end: one JSON document, the options, exact error lines."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from dflash_diag.batchstats import schedule_stats
from dflash_diag.cli import app
from dflash_diag.manifest import read_manifest
from dflash_diag.records import ScheduleParams
from dflash_diag.schedule import replay

DATA = Path(__file__).parent / "data"
BATCHES = DATA / "batches"
REAL = DATA / "real_run"
# the real run's schedule (tests/data/real_run/README.md)
REAL_FLAGS = ["--seed", "1234", "--token-budget", "16384", "--max-seq-len", "2048"]
REAL_FLAGS += ["--first-step", "1", "--epochs", "2"]

runner = CliRunner()


@pytest.fixture()
def work(tmp_path, monkeypatch) -> Path:
    """A working directory with a copy of the fixtures and no stray dflash-diag.toml."""
    shutil.copy(BATCHES / "manifest.csv", tmp_path / "manifest.csv")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_json(args: list[str]) -> dict:
    result = runner.invoke(app, ["batches", *args, "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)  # exactly one document: json.loads refuses more


def test_json_summary_is_the_library_result(work):
    doc = run_json(["manifest.csv", "--token-budget", "8192", "--epochs", "2"])
    params = ScheduleParams(token_budget=8192, epochs=2)
    expected = schedule_stats(replay(read_manifest("manifest.csv"), params))
    for key in (
        "strategy",
        "n_samples",
        "batches_per_epoch",
        "steps_per_epoch",
        "padding_efficiency",
        "length_icc",
        "adjacent_length_corr",
        "recurrence",
    ):
        assert doc[key] == getattr(expected, key), key
    assert doc["config"] is None
    assert doc["n_samples"] == 2000
    assert set(doc["category_share_std"]) == {"chat", "math", "code"}


def test_config_beside_the_manifest_is_used_and_named(work):
    shutil.copy(BATCHES / "dflash-diag.toml", work / "dflash-diag.toml")
    doc = run_json([])  # the manifest comes from the config too
    assert doc["config"] == "dflash-diag.toml"
    assert doc["manifest"] == "manifest.csv"
    assert doc["micro_per_step"] == 4 and doc["epochs"] == 2  # world 2 x accum 2
    text = runner.invoke(app, ["batches", "--seed", "8"])
    assert text.exit_code == 0
    assert text.stdout.startswith(
        "manifest: manifest.csv  strategy: sorted-greedy  config: dflash-diag.toml"
    )


def test_compare_lists_the_strategies_in_order(work):
    doc = run_json(["manifest.csv", "--epochs", "2", "--compare", "random,sorted-greedy"])
    names = [s["strategy"] for s in doc["strategies"]]
    assert names == ["random", "sorted-greedy"]
    rand, fixed = doc["strategies"]
    assert fixed["recurrence"] == 1.0 and rand["recurrence"] < 0.05
    assert fixed["length_icc"] > rand["length_icc"]


def test_optimize_buckets_with_throughput(work):
    doc = run_json(
        ["manifest.csv", "--optimize-buckets", "3", "--throughput", "25.1k", "--epochs", "3"]
    )
    assert [b["k"] for b in doc["buckets"]] == [1, 2, 3]
    tokens = int(pd.read_csv("manifest.csv")["length"].sum())
    for b in doc["buckets"]:
        edges = b["boundaries"]
        assert edges == sorted(set(edges)) and edges[0] == 0
        # time = real tokens x epochs / (throughput x efficiency)
        assert b["training_seconds"] == pytest.approx(
            tokens * 3 / (25_100 * b["padding_efficiency"])
        )
    assert len(doc["bucket_options"]) == 4 * 3
    assert doc["throughput"] == 25_100.0


def test_text_output_names_the_numbers(work):
    result = runner.invoke(
        app, ["batches", "manifest.csv", "--optimize-buckets", "2", "--compare", "bucketed,random"]
    )
    assert result.exit_code == 0, result.stderr
    for words in ("padding efficiency", "length ICC", "recurrence next epoch", "Strategies"):
        assert words in result.stdout
    assert "Bucket edges for 'bucketed', best per k" in result.stdout
    assert result.stderr == ""


def test_log_verification_on_the_real_run():
    doc = run_json([str(REAL / "manifest.parquet"), *REAL_FLAGS, "--log", str(REAL / "run.log")])
    v = doc["verification"]
    assert (v["tokens_match"], v["seed"], v["first_step"]) == (1.0, 1234, 1)
    assert v["n_compared"] == 488


def test_search_seed_finds_the_real_runs_seed():
    args = [str(REAL / "manifest.parquet"), *REAL_FLAGS, "--seed", "0"]
    doc = run_json([*args, "--log", str(REAL / "run.log"), "--search-seed", "1232..1235"])
    assert doc["verification"]["seed"] == 1234
    assert doc["verification"]["tokens_match"] == 1.0


@pytest.mark.parametrize("name", ["schedule.parquet", "schedule.csv"])
def test_export_equals_the_replay_row_for_row(work, name):
    flags = ["--world-size", "2", "--grad-accum", "2", "--epochs", "2", "--strategy", "bucketed"]
    result = runner.invoke(app, ["batches", "manifest.csv", *flags, "--export", name])
    assert result.exit_code == 0, result.stderr
    table = pd.read_parquet(name) if name.endswith(".parquet") else pd.read_csv(name)
    manifest = read_manifest("manifest.csv")
    params = ScheduleParams(strategy="bucketed", world_size=2, grad_accum=2, epochs=2)
    r = replay(manifest, params)
    rows = []
    for i, m in enumerate(r.micro.itertuples()):
        for index in r.batch(i):
            rows.append((m.epoch, m.step, m.rank, m.micro, 1000 + int(index), m.batch_id))
    cols = ["epoch", "step", "rank", "micro", "sample_id", "batch_id"]
    assert list(table[cols].itertuples(index=False, name=None)) == rows
    assert f"schedule written to {name}" in result.stdout


def test_plot_writes_a_png(work):
    result = runner.invoke(
        app, ["batches", "manifest.csv", "--compare", "sorted-greedy,random", "--plot", "b.png"]
    )
    assert result.exit_code == 0, result.stderr
    assert Path("b.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["missing.parquet"],
            "error: missing.parquet: manifest not found; check the path",
        ),
        (
            ["manifest.csv", "--compare", "sorted-greedy,nope"],
            "error: --compare: unknown strategy 'nope'; choose from sorted-greedy, bucketed, "
            "length-grouped, fairseq, random or FILE.py:FUNC",
        ),
        (
            ["manifest.csv", "--optimize-buckets", "0"],
            "error: --optimize-buckets: must be 1 or more, got 0; give the most buckets, e.g. 6",
        ),
        (
            ["manifest.csv", "--export", "manifest.csv"],
            "error: manifest.csv: refusing to overwrite an input file; choose another --export "
            "file",
        ),
        (
            ["manifest.csv", "--export", "out.xlsx"],
            "error: out.xlsx: cannot tell the export format from '.xlsx'; name the file "
            ".parquet or .csv",
        ),
        (
            ["manifest.csv", "--plot", "out.gif"],
            "error: out.gif: cannot tell the plot format from '.gif'; name the file .png, "
            ".svg or .pdf",
        ),
        (
            ["manifest.csv", "--throughput", "fast"],
            "error: --throughput: not a throughput: 'fast'; give tokens per second like 25.1k",
        ),
        (
            ["manifest.csv", "--search-seed", "9..3", "--log", "x.log"],
            "error: --search-seed: not a seed range: '9..3'; give it as A..B, e.g. 0..1000",
        ),
        (
            ["manifest.csv", "--search-seed", "0..9"],
            "error: --search-seed: needs a log to match; add --log RUN.log",
        ),
        (
            ["manifest.csv", "--log", "nope.log"],
            "error: nope.log: log not found; check the --log path",
        ),
        (
            [],
            'error: MANIFEST: no manifest given; name one, or set manifest = "..." under '
            "[schedule] in dflash-diag.toml",
        ),
        (
            ["manifest.csv", "--strategy", "random"],
            "error: --batch-size: strategy 'random' needs a batch size in samples; "
            "give --batch-size N",
        ),
    ],
)
def test_bad_input_is_one_error_line(work, args, line):
    result = runner.invoke(app, ["batches", *args, "--json"])
    assert result.exit_code == 2
    assert result.stderr == line + "\n"
    assert result.stdout == ""
    assert not Path("out.gif").exists()


def test_export_refusal_leaves_the_manifest_untouched(work):
    before = Path("manifest.csv").read_bytes()
    runner.invoke(app, ["batches", "manifest.csv", "--export", "./manifest.csv"])
    assert Path("manifest.csv").read_bytes() == before
