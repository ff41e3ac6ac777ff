"""`dflash-diag watch` end to end: text, JSON lines, the stops, the errors."""

import gzip
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app

# CLI runs on the sample logs, seconds each: CI runs them, the local loop does not
pytestmark = pytest.mark.slow

SAMPLE = Path(__file__).resolve().parents[2] / "sample_logs"
runner = CliRunner()
KEYS = {"step", "value", "baseline", "z", "verdict", "evidence"}


@pytest.fixture()
def run(tmp_path, monkeypatch) -> Path:
    """A copy of the sample run with its schedule beside it."""
    for name in ("run.log", "dflash-diag.toml", "manifest.parquet"):
        shutil.copy(SAMPLE / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "run.log"


def test_text_reports_each_spike_with_its_verdict_and_ends_with_the_summary(run):
    result = runner.invoke(app, ["watch", str(run), "--until", "300"])
    assert result.exit_code == 0, result.output
    out = result.stdout.splitlines()
    assert "backlog step 254  loss 5.857 over 0.9649  z 68.9  composition (verified)" in out
    assert out[-3:] == [
        "stopped: 300 points of loss from 326 lines, the last at step 300",
        # (step 52, the first batch of the longest samples, has nothing earlier to go by)
        "4 spikes: composition 3, inconclusive 1",
        "  52 inconclusive, 144 composition, 254 composition, 258 composition",
    ]


def test_json_is_one_object_per_line_per_spike_and_nothing_else(run):
    result = runner.invoke(app, ["watch", str(run), "--until", "300", "--json"])
    assert result.exit_code == 0
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    assert [d["step"] for d in docs] == [52, 144, 254, 258]
    assert all(KEYS <= set(d) and d["backlog"] for d in docs)
    assert docs[2]["verdict"] == "composition" and docs[2]["ground"] == "verified"
    assert docs[2]["evidence"][0].startswith("the earlier batch as long as it")
    assert "stopped: 300 points of loss from 326 lines" in result.stderr


def test_new_only_leaves_the_backlog_out_but_counts_it(run):
    result = runner.invoke(app, ["watch", str(run), "--until", "300", "--json", "--new-only"])
    assert result.exit_code == 0 and result.stdout == ""
    assert "\n4 spikes: composition 3, inconclusive 1\n" in result.stderr


def test_exit_on_spike_stops_at_the_first_with_status_4(run):
    result = runner.invoke(app, ["watch", str(run), "--exit-on-spike", "--json"])
    assert result.exit_code == 4
    assert [json.loads(x)["step"] for x in result.stdout.splitlines()] == [52]
    assert "stopped at the first spike (step 52): " in result.stderr


def test_without_a_schedule_the_verdict_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (no dflash-diag.toml here or beside the log)
    log = tmp_path / "run.log"
    shutil.copy(SAMPLE / "run.log", log)
    result = runner.invoke(app, ["watch", str(log), "--until", "300", "--json"])
    doc = json.loads(result.stdout.splitlines()[2])
    assert doc["step"] == 254 and doc["verdict"] == "inconclusive" and doc["ground"] is None
    assert doc["evidence"][0].startswith("no schedule")


def test_gzip_is_refused_with_one_line_and_status_2(tmp_path):
    log = tmp_path / "run.log.gz"
    log.write_bytes(gzip.compress((SAMPLE / "run.log").read_bytes()[:2000]))
    result = runner.invoke(app, ["watch", str(log)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {log}: is gzip-compressed, and a gzip stream can only be read once complete; "
        f"watch the uncompressed log, or run 'dflash-diag spikes {log}'\n"
    )


@pytest.mark.parametrize(
    "args,message",
    [
        (["--format", "csv"], "error: --format: a csv log cannot be followed line by line;"),
        (["--metric-rank", "x"], "error: --metric-rank: not a rank: 'x';"),
        (["--window", "1"], "error: --window: must be at least 2 logged points, got 1"),
    ],
)
def test_bad_options_are_one_line(tmp_path, args, message):
    result = runner.invoke(app, ["watch", str(tmp_path / "run.log"), *args])
    assert result.exit_code == 2 and result.stderr.startswith(message)


def record_run(path: Path, last_step: int, ranks: int = 8) -> None:
    """What the sample run's first ``ranks`` ranks consumed, steps 1..last_step, as
    BatchRecorder writes it during training (one file, every rank's micro-batches)."""
    from dflash_diag.manifest import read_manifest
    from dflash_diag.record import BatchRecorder
    from dflash_diag.schedule import replay
    from dflash_diag.schedule.config import resolve_schedule

    resolved = resolve_schedule({}, SAMPLE / "dflash-diag.toml")
    rep = replay(read_manifest(resolved.manifest), resolved.params, epochs=1)
    micro = rep.micro
    keep = (micro["rank"] < ranks) & (micro["step"] <= last_step)
    with BatchRecorder(path, rank=0, world_size=1) as rec:
        for i in micro.index[keep]:
            ids = rep.batch(i)
            rec.log(int(micro.at[i, "step"]), ids, rep.lengths[ids], rank=int(micro.at[i, "rank"]))


def test_a_recorded_composition_is_what_the_verdicts_rest_on(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (no schedule anywhere: only the recording)
    shutil.copy(SAMPLE / "run.log", tmp_path / "train.log")
    record_run(tmp_path / "run8.batches", 300)
    args = ["watch", "train.log", "--composition", "run8.batches", "--until", "300", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    docs = {d["step"]: d for d in map(json.loads, result.stdout.splitlines())}
    for step in (254, 258):
        assert docs[step]["verdict"] == "composition" and docs[step]["ground"] == "recorded"
        assert docs[step]["batch"]["mean_len"] == 8192.0


def test_a_recording_beside_the_log_is_found_and_said(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(SAMPLE / "run.log", tmp_path / "train.log")
    record_run(tmp_path / "train.batches", 300)
    result = runner.invoke(app, ["watch", "train.log", "--until", "260", "--json"])
    assert result.stderr.startswith("watch: composition: train.batches (found beside the log)\n")
    assert json.loads(result.stdout.splitlines()[-1])["ground"] == "recorded"


def test_a_corrupt_recording_is_refused_before_watching(tmp_path):
    bad = tmp_path / "x.batches"
    bad.write_bytes(b"not a recording at all")
    result = runner.invoke(app, ["watch", str(tmp_path / "run.log"), "--composition", str(bad)])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {bad}")
    assert len(result.stderr.splitlines()) == 1


def test_a_schedule_the_logged_tokens_refute_ends_the_watch_with_one_line(run):
    result = runner.invoke(app, ["watch", str(run), "--seed", "1"])
    assert result.exit_code == 2
    assert result.stderr.startswith(
        f"error: {run}: the schedule from {run.parent / 'dflash-diag.toml'} (found beside the "
        "log) matches "
        "the logged tokens at only 0% of 52 steps (first at step 1);"
    )


def test_a_spike_in_steps_trained_again_after_a_resume_is_marked_again(run):
    # run.log crashes after step 1637 and resumes from step 1501: its spikes at 1502, 1517
    # and 1580 are trained again and spike again
    result = runner.invoke(app, ["watch", str(run), "--until", "1700", "--json"])
    assert result.exit_code == 0
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    counts: dict[int, int] = {}
    for d in docs:
        counts[d["step"]] = counts.get(d["step"], 0) + 1
        # the first report of a step is not "again"; a second one, after the resume, is
        assert d["again"] == (counts[d["step"]] > 1), d["step"]
    assert any(d["again"] for d in docs)
    text = runner.invoke(app, ["watch", str(run), "--until", "1700"]).stdout
    assert "again, after the resume" in text


def test_a_recording_whose_tokens_are_not_the_logs_ends_the_watch_with_one_line(
    tmp_path, monkeypatch
):
    # rank 0's batches alone: the log's ntok counts all 8 ranks' tokens
    monkeypatch.chdir(tmp_path)
    shutil.copy(SAMPLE / "run.log", tmp_path / "train.log")
    record_run(tmp_path / "rank0.batches", 300, ranks=1)
    args = ["watch", "train.log", "--composition", "rank0.batches", "--until", "300", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("error: rank0.batches: the recorded tokens match the log's")
    assert len(result.stderr.splitlines()) == 1
    forced = runner.invoke(app, [*args, "--force"])
    assert forced.exit_code == 0
    assert {json.loads(x)["ground"] for x in forced.stdout.splitlines()} == {"refuted"}


def test_schedule_flags_beside_a_recording_are_refused_as_spikes_refuses_them(tmp_path):
    log = tmp_path / "train.log"
    shutil.copy(SAMPLE / "run.log", log)
    record_run(tmp_path / "run8.batches", 10)
    args = ["watch", str(log), "--composition", str(tmp_path / "run8.batches"), "--seed", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --composition: a recorded composition is not replayed")


def test_a_watch_begun_before_the_run_finds_the_recording_once_written(tmp_path, monkeypatch):
    # the README's live session starts the watch first: neither the log nor the
    # recording is there yet; the recording the run writes beside its log is found and
    # used from the first spike on, and said once
    from dflash_diag.watch.session import Notice, Spike, open_session

    monkeypatch.chdir(tmp_path)
    session = open_session("train.log", until=300)
    assert session.composition is None and session.later is not None
    record_run(tmp_path / "train.batches", 300)
    shutil.copy(SAMPLE / "run.log", tmp_path / "train.log")
    events = []
    while not session.done and len(events) < 10_000:
        events += list(session.poll())
    notes = [e.text for e in events if isinstance(e, Notice) and "written since" in e.text]
    assert notes == [
        "composition: train.batches (found beside the log), written since the watch began"
    ]
    spikes = {e.step: e for e in events if isinstance(e, Spike)}
    for step in (254, 258):
        assert spikes[step].verdict.ground == "recorded"
        assert spikes[step].verdict.verdict == "composition"
