"""`dflash-diag compare` end to end on the small logs in tests/data/compare."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app

runner = CliRunner()
DATA = Path(__file__).parents[1] / "data" / "compare"
SAMPLE = Path(__file__).parents[2] / "sample_logs"


def log(name: str) -> str:
    return str(DATA / name)


def invoke(*args: str):
    return runner.invoke(app, ["compare", *args])


def test_text_answers_the_story_question():
    result = invoke(log("v1.log"), log("run.log"), "--at", "349")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "run against v1  (align: step)" in out
    assert "acc is within v1's band: " in " ".join(out.split())
    assert "normal at 58% of warmup." in " ".join(out.split())
    assert result.stderr == ""


def test_json_is_one_document_with_the_contract_keys():
    result = invoke(log("v1.log"), log("v2.log"), log("run.log"), "--at", "349", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)  # strict: NaN would not parse as null here
    assert doc["baselines"] == [log("v1.log"), log("v2.log")]
    assert doc["run"] == log("run.log")
    assert doc["align"] == "step"
    assert set(doc["warmup"]) == {log("v1.log"), log("v2.log"), log("run.log")}
    v1 = doc["warmup"][log("v1.log")]
    assert (v1["steps"], v1["peak_lr"], v1["shape"]) == (600, 6e-4, "linear")
    acc = doc["metrics"]["acc"]
    assert acc["verdict"] == "within"
    assert [p["phase"] for p in acc["phases"]] == ["warmup"]
    assert acc["baselines_used"] == [log("v1.log")]
    assert "acc: not logged in v2; compared with v1 only" in doc["notes"]
    at = [a for a in doc["at"] if a["metric"] == "acc"][0]
    assert at["step"] == 349 and at["verdict"] == "within"
    lo, hi = at["band"]
    assert lo <= at["baseline_median"] <= hi and lo <= at["value"] <= hi
    # The run has no points after warmup: its slope is null with a reason, not NaN.
    slope = acc["slope_after_warmup"][0]
    assert slope["value"] is None and slope["reason"].startswith("not enough data")


def test_run_option_takes_the_run_and_every_file_is_a_baseline():
    result = invoke(log("v1.log"), "--run", log("low.log"), "--metric", "acc", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["baselines"] == [log("v1.log")] and doc["run"] == log("low.log")
    assert list(doc["metrics"]) == ["acc"]
    assert doc["metrics"]["acc"]["verdict"] == "below"


def test_warmup_alignment_lines_up_a_slower_warmup():
    step = json.loads(invoke(log("v1.log"), log("slow.log"), "--metric", "acc", "--json").stdout)
    warm = invoke(log("v1.log"), log("slow.log"), "--metric", "acc", "--align", "warmup", "--json")
    assert warm.exit_code == 0, warm.stderr
    doc = json.loads(warm.stdout)
    assert step["metrics"]["acc"]["verdict"] != "within"
    assert doc["metrics"]["acc"]["verdict"] == "within"
    assert doc["warmup"][log("slow.log")]["steps"] == 1200


def test_milestones_option_reaches_the_json():
    result = invoke(log("v1.log"), log("slow.log"), "--milestones", "0.2", "--json")
    doc = json.loads(result.stdout)
    (m,) = doc["metrics"]["acc"]["milestones"]
    assert m["level"] == 0.2 and m["direction"] == "up"
    assert m["steps"][log("slow.log")] > m["steps"][log("v1.log")]


@pytest.mark.slow
def test_plot_is_written(tmp_path):
    out = tmp_path / "cmp.png"
    result = invoke(log("v1.log"), log("run.log"), "--plot", str(out))
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "args, line",
    [
        (
            [log("run.log")],
            "error: compare: needs at least one baseline and a run; "
            "give BASELINE.log RUN.log (or FILES... --run RUN.log)",
        ),
        (
            [log("v1.log"), log("late.log")],
            f"error: {log('late.log')}: shares no steps range with the baselines: it covers "
            "2000-2500, v1 1-1496; compare runs that overlap, or try --align warmup",
        ),
        (
            [log("v1.log"), log("run.log"), "--align", "epoch"],
            "error: --align: unknown value 'epoch'; choose from step, tokens, warmup",
        ),
        (
            [log("v1.log"), log("run.log"), "--align", "tokens"],
            f"error: {log('v1.log')}: no tokens logged; --align tokens needs a tokens column; "
            "use --align step or --align warmup",
        ),
        (
            [log("v1.log"), log("run.log"), "--metric", "eval_loss"],
            f"error: {log('run.log')}: no metric is logged by both the run and a baseline "
            "(asked for eval_loss); choose with --metric from: acc, loss",
        ),
        (
            [log("v1.log"), log("run.log"), "--milestones", "acc=x"],
            "error: --milestones: not a list of numbers: 'acc=x'; "
            "give levels like 0.1,0.3,0.5 or loss=2.0,1.5",
        ),
        (
            [log("v1.log"), log("run.log"), "--band-k", "-1"],
            "error: --band-k: must be a positive number, got -1.0",
        ),
        (
            [log("v1.log"), log("run.log"), "--plot", "out.gif"],
            "error: out.gif: cannot tell the plot format from '.gif'; "
            "name the file .png, .svg or .pdf",
        ),
    ],
)
def test_bad_input_is_one_error_line_and_exit_2(args, line):
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stderr == line + "\n"
    assert result.stdout == ""


def test_missing_file_is_an_error_line(tmp_path):
    result = invoke(log("v1.log"), str(tmp_path / "nope.log"))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {tmp_path / 'nope.log'}")
    assert result.stderr.count("\n") == 1


def test_single_baseline_point_says_not_enough_data(tmp_path):
    one = tmp_path / "one.log"
    one.write_text("step=100 loss=2.5 acc=0.01 lr=1.0e-04\n", encoding="utf-8")
    result = invoke(str(one), log("run.log"), "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["metrics"]["acc"]["verdict"] == "not enough data"
    assert (
        "one logs acc at fewer than 5 points: no band from it" in (doc["metrics"]["acc"]["notes"])
    )


def test_logged_nan_is_a_reported_failure_never_a_json_nan(tmp_path):
    lines = (DATA / "run.log").read_text(encoding="utf-8").splitlines()
    assert lines[10].startswith("step=51 ")
    lines[10] = "step=51 loss=nan acc=nan lr=5.100e-05"
    holed = tmp_path / "holed.log"
    holed.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = invoke(log("v1.log"), str(holed), "--json", "--at", "51", "--at", "53", "--at", "9000")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)  # json.loads would fail on a bare NaN token
    assert "NaN" not in result.stdout
    acc = doc["metrics"]["acc"]
    (warm,) = acc["phases"]
    assert warm["n_points"] == len(lines) - 1  # left out of the shares...
    # ...and reported: the row has lr, so acc=nan was logged there: a numerical failure.
    assert acc["nonfinite"][str(holed)] == {"count": 1, "first_step": 51}
    assert acc["nonfinite"][log("v1.log")] == {"count": 0, "first_step": None}
    assert "logged acc as nan/inf at 1 step (first at step 51)" in acc["sentence"]
    at = {(a["step"], a["metric"]): a for a in doc["at"]}
    # No value is made up at the failed step, nor interpolated across it (53: 51..56).
    for step in (51, 53):
        assert at[step, "acc"]["value"] is None and at[step, "acc"]["verdict"] == "non-finite"
    assert at[9000, "acc"]["value"] is None and at[9000, "acc"]["verdict"] == "not logged"


def test_logged_inf_and_nan_are_said_in_the_text(tmp_path):
    lines = (DATA / "run.log").read_text(encoding="utf-8").splitlines()
    lines[10] = "step=51 loss=nan acc=0.0100 lr=5.100e-05"
    lines[20] = "step=101 loss=inf acc=0.0100 lr=1.010e-04"
    holed = tmp_path / "holed.log"
    holed.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = invoke(log("v1.log"), str(holed), "--metric", "loss", "--at", "101", "--verbose")
    assert result.exit_code == 0, result.stderr
    out = " ".join(result.stdout.split())
    # The verdict is on the finite values, and its line says what else there was
    # (the per-log nan/inf line is --verbose's).
    assert "loss: within on its finite values; logged as nan/inf at 2 steps from step 51" in out
    assert (
        "logged as nan/inf: holed, 2 steps, first at step 51 (numerical failure; left out of "
        "the band and shares)" in out
    )
    assert "At step 101 the run logged loss as nan/inf: a numerical failure." in out


def test_absent_eval_steps_are_neither_values_nor_failures():
    # eval_loss is logged every 100 steps (NaN on the other rows): absent, not failed.
    args = [log("hf_run_steps.log"), log("hf_run.log"), "--step-every", "10"]
    result = invoke(*args, "--metric", "eval_loss,loss", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    ev = doc["metrics"]["eval_loss"]
    assert sum(p["n_points"] for p in ev["phases"]) == 15  # 1500 / 100 evaluations
    assert all(v["count"] == 0 for v in ev["nonfinite"].values())
    assert ev["verdict"] == "within"
    assert "nan/inf" not in ev["sentence"]


@pytest.mark.slow
def test_sample_case_v1_looked_the_same():
    # The story: "acc 0.046 at step 349, lr 8.8e-5 of a 6e-4 peak: v1 looked the same".
    result = invoke(str(SAMPLE / "v1.log"), str(SAMPLE / "run.log"), "--at", "349", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    run = doc["warmup"][str(SAMPLE / "run.log")]
    assert run["peak_lr"] == pytest.approx(6e-4, rel=0.01)
    assert abs(run["steps"] - 2380) <= 30
    at = {a["metric"]: a for a in doc["at"]}
    assert at["acc"]["verdict"] == "within"
    assert at["acc"]["value"] == pytest.approx(0.046, abs=0.01)
    assert round(100 * at["acc"]["warmup_progress"]) == 15
    assert at["acc"]["lr"] == pytest.approx(8.8e-5, rel=0.02)
    assert at["acc"]["sentence"].endswith(": normal at 15% of warmup.")
    assert doc["metrics"]["acc"]["phases"][0]["verdict"] == "within"


# --- steps that are line numbers ---------------------------------------------------------

HF_MIX = (
    "its records carry no step (numbered 1, 2, ... by logging event), so they cannot be "
    "lined up with {other}'s optimizer steps; pass --step-every N (the trainer's logging_steps)"
)


@pytest.mark.parametrize(
    "args, line",
    [
        (
            [log("hf_run_steps.log"), log("hf_run.log")],
            f"error: {log('hf_run.log')}: " + HF_MIX.format(other="hf_run_steps"),
        ),
        (
            [log("hf_run.log"), log("v1.log"), log("hf_run_steps.log")],
            f"error: {log('hf_run.log')}: " + HF_MIX.format(other="v1"),
        ),
        (
            [log("v1.log"), log("run.log"), "--step-every", "10"],
            "error: --step-every: every log numbers its own steps, so it applies to none; "
            "leave --step-every out",
        ),
    ],
)
def test_line_numbers_beside_steps_are_refused_with_one_line(args, line):
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stderr == line + "\n"
    assert result.stdout == ""


@pytest.mark.slow
def test_line_numbered_logs_alone_are_compared_by_logging_event_and_said_so():
    result = invoke(log("hf_run.log"), log("hf_run.log"))
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "hf_run against hf_run  (align: logging event)"
    assert lines[1] == (
        "steps: logging events numbered in line order (the records carry no step), "
        "not optimizer steps"
    )
    assert "per 1k logging events" in result.stdout
    doc = json.loads(invoke(log("hf_run.log"), log("hf_run.log"), "--json").stdout)
    assert doc["step_source"] == {log("hf_run.log"): "line order"}
    assert doc["axis"] == "logging event"
    # --step-every makes them steps again: the JSON says where the steps came from.
    given = invoke(log("hf_run_steps.log"), log("hf_run.log"), "--step-every", "10", "--json")
    doc = json.loads(given.stdout)
    assert doc["step_source"] == {
        log("hf_run_steps.log"): "field",
        log("hf_run.log"): "given interval",
    }
    assert doc["axis"] == "step"


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        [str(SAMPLE / "run.log"), str(SAMPLE / "run.log")],
        [log("v1.log"), log("v1.log")],
        [log("hf_run.log"), log("hf_run.log")],
        [log("hf_run.log"), log("hf_run.log"), "--step-every", "10"],
        # The same numbers, once with steps and once numbered by line (logging_steps 10).
        [log("hf_run_steps.log"), log("hf_run.log"), "--step-every", "10"],
    ],
    ids=["sample-twice", "v1-twice", "hf-lines-twice", "hf-lines-twice-step-every", "hf-both"],
)
def test_identical_runs_are_within_the_band_everywhere(args):
    doc = json.loads(invoke(*args, "--json").stdout)
    for name, m in doc["metrics"].items():
        assert m["verdict"] == "within", name
        assert {p["verdict"] for p in m["phases"]} == {"within"}, name
        assert m["sentence"].startswith(f"{name} is within "), name
        assert " normal at " in m["sentence"]
        for s in m["slope_after_warmup"][1:]:
            lo, hi = s["run_minus_ci"]
            assert s["run_minus"] == 0 and lo < 0 < hi
    text = " ".join(invoke(*args).stdout.split())
    for word in ("ahead", "behind", "faster", "slowly", " where ", "runs above", "runs below"):
        assert word not in text, word


# --- what is printed adds up --------------------------------------------------------------

CASES = [
    [str(SAMPLE / "v1.log"), str(SAMPLE / "run.log")],
    [log("v1.log"), log("slow.log")],
    [log("v1.log"), log("v2.log"), log("slow.log")],
    [log("v1.log"), log("slow.log"), "--align", "warmup"],
    [
        log("hf_run_steps.log"),
        log("hf_run.log"),
        "--step-every",
        "10",
        "--metric",
        "loss,eval_loss",
    ],
]
NUM = r"[+-]\d+(?:\.\d+)?"
ROW = re.compile(
    rf"slope over (\S+) \(after warmup in (\S+) and (\S+)\), per [^,]+, 95%: "
    rf"\2 ({NUM}) \[{NUM}, {NUM}\] \(n=\d+\) \3 ({NUM}) \[{NUM}, {NUM}\] \(n=\d+\) "
    rf"difference, \2 - \3 ({NUM}) \[{NUM}, {NUM}\]"
)
SENTENCE = re.compile(
    rf"over (\S+), after warmup in both, it moves ({NUM}) against (\S+)'s ({NUM}): "
    rf"[a-z ]+ \(difference ({NUM}) \[{NUM}, {NUM}\]\)"
)


@pytest.mark.slow
@pytest.mark.parametrize("args", CASES, ids=["sample", "slow", "two-baselines", "warmup", "hf"])
def test_every_printed_difference_is_of_two_printed_slopes_over_a_printed_span(args):
    from decimal import Decimal

    doc = json.loads(invoke(*args, "--json").stdout)
    pairs = [
        s
        for m in doc["metrics"].values()
        for s in m["slope_after_warmup"][1:]
        if s["run_minus"] is not None
    ]
    assert pairs  # the case has differences to check
    for s in pairs:  # JSON: the difference is of the two slopes it gives, over its span
        assert s["run_minus"] == pytest.approx(s["run_value"] - s["value"], abs=1e-12)
        assert s["span"] is not None and s["run_n"] >= 10
    text = " ".join(invoke(*args, "--verbose").stdout.split())
    rows, sentences = ROW.findall(text), SENTENCE.findall(text)
    assert len(rows) == len(sentences) == len(pairs)
    for (span, _, _, run, base, diff), s in zip(rows, pairs, strict=True):
        assert Decimal(run) - Decimal(base) == Decimal(diff)
        assert span == f"{s['span'][0]:.6g}-{s['span'][1]:.6g}"
        places = 10.0 ** -len(run.partition(".")[2])
        assert abs(float(run) - s["run_value"]) <= places / 2 + 1e-12
        assert abs(float(base) - s["value"]) <= places / 2 + 1e-12
    for (span, run, _, base, diff), (row_span, *_, row_run, row_base, row_diff) in zip(
        sentences, rows, strict=True
    ):
        assert (span, run, base, diff) == (row_span, row_run, row_base, row_diff)
        assert Decimal(run) - Decimal(base) == Decimal(diff)


# --- what the alignment did ----------------------------------------------------------------


def test_warmup_alignment_says_which_steps_it_lined_up():
    result = invoke(log("v1.log"), log("v2.log"), log("slow.log"), "--align", "warmup")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0] == (
        "slow against v1, v2  (align: warmup end, slow step 1200 <-> v1 step 600, v2 step 600)"
    )
    doc = json.loads(invoke(log("v1.log"), log("slow.log"), "--align", "warmup", "--json").stdout)
    assert doc["align_anchors"] == {log("v1.log"): 600, log("slow.log"): 1200}


@pytest.mark.slow
def test_a_point_after_warmup_is_said_as_a_position_not_a_duration():
    result = invoke(str(SAMPLE / "v1.log"), str(SAMPLE / "run.log"), "--at", "2500")
    out = " ".join(result.stdout.split())
    assert "normal at 121 steps past the end of warmup (step 2379)." in out
    assert not re.search(r"for \d+ steps after warmup", out)


@pytest.mark.parametrize(
    "run,mode,code",
    [
        ("low.log", "below", 3),  # acc under v1's band in warmup
        ("low.log", "outside", 3),
        ("low.log", "above", 0),  # nothing above: passes
        ("v1.log", "outside", 0),  # the same run: within everywhere
    ],
)
def test_fail_on_exits_3_when_the_run_leaves_the_band_on_that_side(run, mode, code):
    args = ["compare", str(DATA / "v1.log"), str(DATA / run), "--fail-on", mode]
    text = runner.invoke(app, args)
    assert text.exit_code == code, text.stderr
    line = text.stdout.rstrip().splitlines()[-1]
    if code == 3:
        assert line.startswith(f"fail-on {mode}: FAILED (exit 3): acc below the band in warmup")
    else:
        assert line == f"fail-on {mode}: passed: the run stays in the band"
    doc = runner.invoke(app, [*args, "--json"])
    assert doc.exit_code == code
    gate = json.loads(doc.stdout)["fail_on"]
    assert gate["mode"] == mode and gate["failed"] == (code == 3)
    assert bool(gate["why"]) == (code == 3)


@pytest.mark.slow
def test_fail_on_judges_only_the_at_steps_when_given():
    # low.log's acc is below v1's band in warmup (the phase rule fails), but within at
    # step 100 and below at step 300: with --at, only those answers count
    base = ["compare", str(DATA / "v1.log"), str(DATA / "low.log"), "--fail-on", "below"]
    assert runner.invoke(app, base).exit_code == 3
    assert runner.invoke(app, [*base, "--at", "100"]).exit_code == 0
    at_300 = runner.invoke(app, [*base, "--at", "300"])
    assert at_300.exit_code == 3
    assert at_300.stdout.rstrip().endswith("acc below the band at step 300")


@pytest.mark.slow
def test_fail_on_refuses_an_unknown_side():
    args = ["compare", str(DATA / "v1.log"), str(DATA / "low.log"), "--fail-on", "sideways"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --fail-on: unknown side 'sideways'; choose above, below or outside\n"
    )
