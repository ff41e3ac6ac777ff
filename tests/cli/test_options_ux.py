"""The options a W&B / TensorBoard user expects: a short default with --verbose, --steps,
--label, --smooth, --log-y; and bucketed's default buckets, derived from the manifest."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.cli.options import parse_steps
from dflash_diag.errors import InputError
from dflash_diag.render.plots import ema
from dflash_diag.schedule.edges import default_edges

# CLI runs on the sample logs, seconds each: CI runs them, the local loop does not
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _run(args: list[str], columns: int = 80) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "dflash_diag", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )


# -- --steps --------------------------------------------------------------------------


@given(st.integers(-(10**9), 10**9), st.integers(0, 10**9))
def test_a_step_range_reads_back(lo, width):
    # every A:B with A <= B is (A, B); open ends are None
    hi = lo + width
    assert parse_steps(f"{lo}:{hi}") == (lo, hi)
    assert parse_steps(f"{lo}:") == (lo, None)
    assert parse_steps(f":{hi}") == (None, hi)


@pytest.mark.parametrize("text", ["", ":", "abc", "1-2", "3:2", "1:2:3", "1.5:3"])
def test_a_bad_step_range_is_a_usage_error(text):
    with pytest.raises(InputError):
        parse_steps(text)


@pytest.mark.parametrize(
    "steps,line",
    [
        (
            "300:200",
            "error: --steps: the range '300:200' ends before it starts; give A:B with A <= B",
        ),
        ("abc", "error: --steps: not a step range: 'abc'; give it as A:B, A: or :B, e.g. 200:300"),
        (
            "9000:",
            "error: --steps: no logged step in 9000: (the log has steps 1-2961); widen the range",
        ),
    ],
)
def test_bad_ranges_are_one_error_line_and_exit_2(steps, line):
    got = _run(["parse", "sample_logs/run.log", "--steps", steps])
    assert got.returncode == 2
    assert got.stderr == line + "\n"


def test_parse_steps_keeps_the_rows_of_the_range():
    doc = json.loads(_run(["parse", "sample_logs/run.log", "--steps", "200:300", "--json"]).stdout)
    whole = json.loads(_run(["parse", "sample_logs/run.log", "--json"]).stdout)
    assert (doc["first_step"], doc["last_step"]) == (200, 300)
    assert doc["rows"] == 101 < whole["rows"]
    assert doc["of_steps"] == [whole["first_step"], whole["last_step"]]


@pytest.fixture(scope="module")
def spikes_200_300():
    got = _run(["spikes", "sample_logs/run.log", "--steps", "200:300"])
    doc = json.loads(_run(["spikes", "sample_logs/run.log", "--steps", "200:300", "--json"]).stdout)
    return got, doc


def test_spikes_steps_reports_the_spikes_in_the_range(spikes_200_300):
    got, doc = spikes_200_300
    assert got.returncode == 0, got.stderr
    assert sorted(s["step"] for s in doc["spikes"]) == [254, 258]
    assert all(s["verdict"] == "composition" for s in doc["spikes"])
    assert "shown: spikes at steps 200-300 of 1-2961" in got.stdout
    # detection still ran over the whole log; the document says which steps it shows
    assert doc["n_points"] == 2961
    assert doc["steps_shown"] == [200, 300] and doc["label"] is None


@pytest.mark.parametrize("name", ["spikes", "compare", "parse"])
def test_steps_shows_as_STEPS_in_help(name):
    out = _run([name, "--help"], columns=100).stdout
    row = next(ln for ln in out.splitlines() if "--steps" in ln)
    assert re.search(r"--steps\s+STEPS", row), row


def test_compare_steps_needs_the_step_axis():
    got = _run(
        [
            "compare",
            "sample_logs/v1.log",
            "sample_logs/run.log",
            "--align",
            "tokens",
            "--steps",
            "1:9",
        ]
    )
    assert got.returncode == 2
    assert got.stderr == (
        "error: --steps: the axis is tokens, not steps; use --steps with --align step\n"
    )


# -- the short default and --verbose ---------------------------------------------------


@pytest.fixture(scope="module")
def spikes_outputs():
    args = ["spikes", "sample_logs/run.log"]
    short, full = _run(args), _run([*args, "--verbose"])
    doc, doc_v = (json.loads(_run([*args, *x, "--json"]).stdout) for x in ([], ["-v"]))
    return short.stdout, full.stdout, doc, doc_v


def test_the_default_answers_first_and_is_short(spikes_outputs):
    short, full, doc, _ = spikes_outputs
    lines = short.splitlines()
    # the answer comes before the table: its sentences are the JSON's summary
    first_table_row = next(i for i, ln in enumerate(lines) if re.match(r"^\W*1999\b", ln))
    head = " ".join(lines[:first_table_row])
    assert "Batch composition explains 66%" in head and "Step 1999 is not explained" in head
    assert "schedule check: verified" in head
    assert len(lines) <= 50 < len(full.splitlines())
    # the evidence of the spikes that matter: the unexplained one first, then the largest
    # rises by the percent the table shows (|value / baseline - 1|)
    told = re.findall(r"^step (\d+) \((\w+)\)", short, flags=re.M)
    by_rise = sorted(
        (s for s in doc["spikes"] if s["verdict"] not in ("unexplained", "data")),
        key=lambda s: -abs(s["value"] / s["baseline"] - 1),
    )
    want = [(str(s["step"]), s["verdict"]) for s in by_rise[:2]]
    assert told == [("1999", "unexplained"), *want]
    assert want == [("1182", "composition"), ("2765", "composition")]
    n = len(doc["spikes"])
    # the last line (wrapped at 80 columns) says what --verbose adds
    tail = " ".join(short[short.rindex("--verbose adds") :].split())
    assert tail.startswith(f"--verbose adds {n - 3} more spikes' evidence")
    assert tail.endswith("correlations, variance proxies")


def test_verbose_tells_every_spike(spikes_outputs):
    _, full, doc, _ = spikes_outputs
    told = re.findall(r"^step (\d+) \(", full, flags=re.M)
    assert sorted(int(s) for s in told) == sorted(s["step"] for s in doc["spikes"])
    assert "detrended loss vs batch features" in full and "gradient-variance proxies" in full
    assert "--verbose adds" not in full


def test_verbose_is_a_text_choice(spikes_outputs):
    *_, doc, doc_v = spikes_outputs
    assert doc == doc_v


# -- --label -------------------------------------------------------------------------


def test_compare_labels_name_the_runs_in_order():
    got = _run(
        ["compare", "sample_logs/v1.log", "sample_logs/run.log", "--metric", "acc"]
        + ["--label", "first", "--label", "second", "--at", "349"]
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines()[0].startswith("second against first")
    assert "against first's 0.0456" in got.stdout and "v1" not in got.stdout


def test_compare_wants_one_label_per_log():
    got = _run(["compare", "sample_logs/v1.log", "sample_logs/run.log", "--label", "x"])
    assert got.returncode == 2
    assert got.stderr == (
        "error: --label: 1 label for 2 logs; give one --label per log, in the order of the "
        "files (baselines, then the run)\n"
    )


def test_two_train_logs_are_told_apart_by_their_folders(tmp_path):
    for name, src in (("a", "v1.log"), ("b", "run.log")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.log").write_bytes((ROOT / "sample_logs" / src).read_bytes())
    got = _run(["compare", str(tmp_path / "a/train.log"), str(tmp_path / "b/train.log")])
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines()[0].startswith("b/train against a/train")


def test_spikes_label_heads_the_report_and_the_html(tmp_path):
    html = tmp_path / "r.html"
    got = _run(["spikes", "sample_logs/run.log", "--label", "v2 run", "--html", str(html)])
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith("v2 run (sample_logs/run.log, text): 2961 points of loss")
    assert "<title>dflash-diag spikes: v2 run</title>" in html.read_text()


# -- --smooth -------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", ["1", "-0.1", "nan"])
def test_smooth_wants_an_alpha_in_0_1(alpha):
    got = _run(["spikes", "sample_logs/run.log", "--smooth", alpha])
    assert got.returncode == 2 and got.stderr.startswith("error: --smooth: ALPHA must be in")


@settings(deadline=None)  # (the first call imports scipy)
@given(
    st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=50),
    st.floats(0, 0.99),
)
def test_ema_is_debiased_and_stays_between_the_values(xs, alpha):
    # the first point is the first value (debiased, not pulled to 0), and every smoothed
    # point is a weighted mean of the values so far
    out = ema(xs, alpha)
    assert out[0] == pytest.approx(xs[0])
    for k in range(len(xs)):
        lo, hi = min(xs[: k + 1]), max(xs[: k + 1])
        tol = 1e-9 * max(1.0, abs(lo), abs(hi))
        assert lo - tol <= out[k] <= hi + tol


def test_ema_skips_nan_and_alpha_0_is_the_raw_curve():
    xs = [1.0, math.nan, 3.0, math.inf, 5.0]
    assert np.isnan(ema(xs, 0.5)[[1, 3]]).all()
    assert ema(xs, 0.5)[2] == pytest.approx((0.25 * 1 + 0.5 * 3) / 0.75)
    assert ema([1.0, 2.0, 3.0], 0.0).tolist() == [1.0, 2.0, 3.0]


# -- bucketed's default buckets --------------------------------------------------------


@settings(deadline=None)  # (the first call imports scipy)
@given(st.lists(st.integers(1, 20000), min_size=6, max_size=300))
def test_default_buckets_are_increasing_edges_from_0_that_hold_every_length(lengths):
    x = np.array(lengths)
    edges = default_edges(x)
    assert edges[0] == 0 and all(a < b for a, b in zip(edges, edges[1:], strict=False))
    assert edges[-1] >= x.max() and 2 <= len(edges) <= 7


def test_default_buckets_hold_equal_counts():
    x = np.arange(1, 6001)
    edges = default_edges(x)
    counts = np.histogram(x, bins=list(edges[:-1]) + [edges[-1] + 1])[0]
    assert counts.tolist() == [1000] * 6


def test_bucketed_without_buckets_uses_the_manifests_and_says_so():
    from dflash_diag.data import ScheduleParams
    from dflash_diag.manifest import read_manifest
    from dflash_diag.schedule import replay

    m = read_manifest(ROOT / "sample_logs/manifest.parquet")
    params = ScheduleParams(strategy="bucketed", token_budget=65536, max_seq_len=8192, seed=3)
    edges = default_edges(np.minimum(m.lengths, 8192))
    a = replay(m, params).micro
    b = replay(m, params.replace(buckets=edges)).micro
    assert a[["step", "rank", "n_samples", "tokens"]].equals(
        b[["step", "rank", "n_samples", "tokens"]]
    )
    got = _run(
        ["batches", "sample_logs/manifest.parquet", "--strategy", "bucketed"]
        + ["--token-budget", "65536", "--max-seq-len", "8192"]
    )
    assert got.returncode == 0, got.stderr
    assert f"buckets: {','.join(map(str, edges))} (bucketed, no --buckets given" in got.stdout


def test_buckets_help_gives_no_dataset_specific_default():
    result = runner.invoke(app, ["batches", "--help"], env={"COLUMNS": "200"})
    assert "equal-count buckets" in result.stdout
    assert "Default 0,770" not in result.stdout


def test_compare_answers_first_and_keeps_the_details_for_verbose():
    args = ["compare", "sample_logs/v1.log", "sample_logs/run.log", "--at", "349"]
    short, full = _run(args).stdout, _run([*args, "-v"]).stdout
    lines = short.splitlines()
    # the metrics' sentences come straight after the header, before any table
    assert lines[3].startswith("loss is within v1's band")
    table = next(i for i, ln in enumerate(lines) if ln.strip() == "lr schedule")
    assert table > max(i for i, ln in enumerate(lines) if "v1's" in ln)
    assert "largest departure," not in short and "slope after warmup," not in short
    assert "largest departure," in full and "slope after warmup," in full
    assert lines[-1] == "--verbose adds each metric's largest departures and slopes after warmup"
    assert len(lines) < len(full.splitlines())
    # the --at table fits 80 columns without folding a band
    row = next(ln for ln in lines if re.match(r"^\s*349 .*\bacc\b", ln))
    assert "[0.034, 0.0573]" in row and "within" in row
    assert json.loads(_run([*args, "--json"]).stdout) == json.loads(
        _run([*args, "--json", "--verbose"]).stdout
    )


def test_batches_compare_shows_the_comparison_and_keeps_the_own_table_for_verbose():
    args = ["batches", "sample_logs/manifest.parquet", "--config", "sample_logs/dflash-diag.toml"]
    args += ["--compare", "sorted-greedy,random"]
    short, full = _run(args).stdout, _run([*args, "--verbose"]).stdout
    # the chosen strategy is a column of the comparison: its own table is --verbose's
    assert "Strategies compared" in short and "Batch schedule" not in short
    assert "Batch schedule" in full and "Strategies compared" in full
    assert "length ICC [95% CI] =" in " ".join(short.split())  # the metrics still explained
    assert " ".join(short.split()).endswith(
        "--verbose adds sorted-greedy's own table (tokens per step min/max, the ICC's 95% CI, "
        "p-values)"
    )
    # without --compare there is nothing to leave for --verbose
    alone = _run(args[:4]).stdout
    assert "Batch schedule" in alone and "--verbose" not in alone
