"""`dflash-diag batches` end to end: one JSON document, the options, exact error lines."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from dflash_diag.batches.stats import schedule_stats
from dflash_diag.cli import app
from dflash_diag.composition.ground import MIN_TOKENS_MATCH
from dflash_diag.data import ScheduleParams
from dflash_diag.manifest import read_manifest
from dflash_diag.render.jsonout import to_jsonable
from dflash_diag.schedule import replay

DATA = Path(__file__).parents[1] / "data"
BATCHES = DATA / "batches"
REAL = DATA / "real_run"
# the real run's schedule (tests/data/real_run/README.md)
REAL_FLAGS = ["--seed", "1234", "--token-budget", "16384", "--max-seq-len", "2048"]
REAL_FLAGS += ["--first-step", "1", "--epochs", "2"]
REAL_PARAMS = ScheduleParams(
    seed=1234, token_budget=16384, max_seq_len=2048, first_step=1, epochs=2
)

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


def test_log_verification_holds_no_replay(monkeypatch):
    # the per-step tokens (schedule.verify.verify_replayed), not a whole Replay: the
    # library's verification of the replay, and a 100M-sample schedule is checked in the
    # memory of its pool
    from dflash_diag import schedule
    from dflash_diag.logs import read_log
    from dflash_diag.schedule import verify_tokens

    manifest = read_manifest(REAL / "manifest.parquet")
    v = verify_tokens(replay(manifest, REAL_PARAMS), read_log(REAL / "run.log"))

    def no_replay(*a, **k):
        raise AssertionError("the whole schedule was replayed")

    monkeypatch.setattr(schedule, "replay", no_replay)
    args = [str(REAL / "manifest.parquet"), *REAL_FLAGS, "--log", str(REAL / "run.log")]
    got = run_json(args)["verification"]
    assert (got["tokens_match"], got["n_compared"], got["first_mismatch"]) == (
        v.tokens_match,
        v.n_compared,
        v.first_mismatch,
    )
    assert (got["n_replayed_steps"], got["basis"]) == (v.n_replayed_steps, v.basis)


def test_search_seed_finds_the_real_runs_seed():
    args = [str(REAL / "manifest.parquet"), *REAL_FLAGS, "--seed", "0"]
    doc = run_json([*args, "--log", str(REAL / "run.log"), "--search-seed", "1232..1235"])
    assert doc["verification"]["seed"] == 1234
    assert doc["verification"]["tokens_match"] == 1.0
    assert doc["verification"]["seed_found"] is True


def flat(text: str) -> str:
    """The output with the console's line wrapping undone."""
    return " ".join(text.split())


def test_a_failed_search_says_no_seed_reproduces_the_log():
    # a budget the run did not use: no seed can reproduce its tokens
    flags = ["--seed", "1234", "--token-budget", "16000", "--max-seq-len", "2048"]
    args = [str(REAL / "manifest.parquet"), *flags, "--first-step", "1", "--epochs", "2"]
    args += ["--log", str(REAL / "run.log"), "--search-seed", "0..20"]
    result = runner.invoke(app, ["batches", *args])
    assert result.exit_code == 0, result.stderr
    out = flat(result.stdout)
    said = re.search(
        r"no seed in 0\.\.20 reproduces the log \(best: seed (\d+), tokens match at "
        r"([\d.]+)% of steps\); found means tokens match at 90% or more of the 488 compared",
        out,
    )
    assert said, out
    assert "Batch schedule of seed 1234 (from --seed)" in out
    assert (
        "the schedule with seed 1234 (from --seed, first step 1): tokens match 0.0% of 488" in out
    )
    v = run_json(args)["verification"]
    assert v["seed_found"] is False
    assert v["seed"] == int(said.group(1))
    assert f"{100 * v['tokens_match']:.1f}" == said.group(2)
    assert v["tokens_match"] < MIN_TOKENS_MATCH == v["min_match"]
    assert v["seeds_searched"] == [0, 20] and v["seeds_tried"] == 21
    assert v["as_given"]["seed"] == 1234 and v["as_given"]["reproduces_log"] is False


def test_a_failed_search_names_a_given_seed_that_reproduces_the_log():
    # the run's own seed lies outside the range searched
    args = [str(REAL / "manifest.parquet"), *REAL_FLAGS, "--log", str(REAL / "run.log")]
    result = runner.invoke(app, ["batches", *args, "--search-seed", "0..3"])
    assert result.exit_code == 0, result.stderr
    out = flat(result.stdout)
    assert "no seed in 0..3 reproduces the log (best: seed" in out
    assert (
        "but seed 1234 (from --seed) does (first step 1): tokens match 100.0% of 488 steps" in out
    )
    doc = run_json([*args, "--search-seed", "0..3"])
    assert doc["verification"]["seed_found"] is False
    assert doc["verification"]["as_given"]["reproduces_log"] is True


def test_a_found_seed_is_the_schedule_summarised():
    given = REAL_PARAMS.replace(seed=0, first_step=0)
    flags = ["--seed", "0", "--token-budget", "16384", "--max-seq-len", "2048"]
    args = [str(REAL / "manifest.parquet"), *flags, "--first-step", "0", "--epochs", "2"]
    args += ["--log", str(REAL / "run.log"), "--search-seed", "1232..1235"]
    doc = run_json(args)
    v = doc["verification"]
    assert (v["seed_found"], v["seed"], v["first_step"], v["tokens_match"]) == (True, 1234, 1, 1.0)
    assert doc["seed"] == 1234 and "as_given" not in v
    manifest = read_manifest(REAL / "manifest.parquet")
    found = to_jsonable(schedule_stats(replay(manifest, REAL_PARAMS)))
    wrong = to_jsonable(schedule_stats(replay(manifest, given)))
    assert found != wrong  # the seed changes the summary, so the two can be told apart
    assert {k: doc[k] for k in found} == found
    text = flat(runner.invoke(app, ["batches", *args]).stdout)
    assert "Batch schedule of seed 1234 (found by --search-seed)" in text
    assert "seed 1234 (first step 1) found in 1232..1235: tokens match 100.0% of 488" in text


def test_a_budget_smaller_than_samples_warns(work):
    lengths = pd.read_csv("manifest.csv")["length"]
    over = int((lengths > 100).sum())
    result = runner.invoke(app, ["batches", "manifest.csv", "--token-budget", "100"])
    assert result.exit_code == 0, result.stderr
    warned = [x for x in result.stdout.splitlines() if x.startswith("warning:")]
    assert 1990 < over < 2000  # all but a few: not rounded up to 100%
    assert warned == [
        f"warning: {over:,} of 2,000 samples (>99%) are longer than the token budget (100 "
        "tokens): each is a micro-batch of its own, over the budget"
    ]
    doc = run_json(["manifest.csv", "--token-budget", "100"])
    assert [(w["level"], w["kind"], w["samples"]) for w in doc["warnings"]] == [
        ("warning", "over_budget", over)
    ]
    assert doc["batches_per_epoch"] >= over  # each of them is a batch of its own


def test_truncation_by_max_seq_len_is_noted(work):
    lengths = pd.read_csv("manifest.csv")["length"]
    cut = int((lengths > 1000).sum())
    result = runner.invoke(app, ["batches", "manifest.csv", "--max-seq-len", "1000"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[1] == (
        f"note: {cut:,} of 2,000 samples ({100 * cut / 2000:.0f}%) are longer than "
        "max_seq_len 1,000: the schedule counts each as 1,000 tokens (truncated)"
    )
    doc = run_json(["manifest.csv", "--max-seq-len", "1000"])
    assert [(w["kind"], w["samples"]) for w in doc["warnings"]] == [("truncated", cut)]


def test_a_schedule_every_sample_fits_has_no_warning(work):
    # the fixture's longest sample is 8192, under the default budget; no max_seq_len
    result = runner.invoke(app, ["batches", "manifest.csv"])
    assert "warning:" not in result.stdout and "note:" not in result.stdout
    assert run_json(["manifest.csv"])["warnings"] == []


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


def test_export_is_written_without_holding_the_replay(work, monkeypatch):
    # epoch by epoch (schedule.export.replayed_tables): the same file as the held
    # replay's, with no Replay made (a 100M-sample schedule does not fit whole)
    from dflash_diag import schedule
    from dflash_diag.schedule.export import export_schedule

    manifest = read_manifest("manifest.csv")
    params = ScheduleParams(strategy="random", batch_size=4, epochs=3)
    held = export_schedule(replay(manifest, params), "held.parquet", manifest.ids)

    def no_replay(*args, **kwargs):
        raise AssertionError("the whole schedule was replayed")

    monkeypatch.setattr(schedule, "replay", no_replay)
    flags = ["--strategy", "random", "--batch-size", "4", "--epochs", "3"]
    result = runner.invoke(app, ["batches", "manifest.csv", *flags, "--export", "s.parquet"])
    assert result.exit_code == 0, result.stderr
    assert Path("s.parquet").read_bytes() == held.read_bytes()


@pytest.mark.slow
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
            "length-grouped, fairseq, random, distributed or FILE.py:FUNC",
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


@pytest.mark.parametrize("extra", [[], ["--compare", "sorted-greedy,bucketed,random"]])
def test_statistics_without_the_sample_ids_are_the_same(work, extra):
    # without --log/plots the schedule is measured from its per-batch sums only
    # (replay_rows), and --export replays it once more epoch by epoch; with --log it is
    # replayed whole: the same document
    args = ["manifest.csv", "--token-budget", "8192", "--epochs", "3", *extra]
    lean = run_json(args)
    whole = run_json([*args, "--export", "schedule.parquet"])
    assert Path("schedule.parquet").exists()
    whole.pop("export", None)
    lean.pop("export", None)
    assert lean == whole
