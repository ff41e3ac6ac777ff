"""A watch session: new lines parsed once, points decided, spikes judged."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from dflash_diag.watch.session import Notice, Spike, WatchSession, open_session, watch

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_logs"


def lines(n, spike_at=(), fmt="kv", start=1):
    rng = np.random.default_rng(0)
    out = []
    for step in range(start, start + n):
        loss = 2.0 * (1 + 0.01 * rng.standard_normal()) * (1.6 if step in spike_at else 1.0)
        if fmt == "kv":
            out.append(f"step={step} loss={loss:.4f} lr=1e-4")
        elif fmt == "hf":
            out.append(str({"loss": round(loss, 4), "learning_rate": 1e-4, "step": step}))
        else:
            out.append(json.dumps({"step": step, "train/loss": round(loss, 4)}))
    return "\n".join(out) + "\n"


def spikes(events):
    return [e for e in events if isinstance(e, Spike)]


def poll(session):
    return list(session.poll())


@pytest.mark.parametrize("fmt", ["kv", "hf", "jsonl"])
def test_the_formats_spikes_reads_are_followed(tmp_path, fmt):
    log = tmp_path / "run.log"
    log.write_text(lines(120, spike_at={100}, fmt=fmt))
    s = WatchSession(str(log))
    got = spikes(poll(s))
    assert [x.step for x in got] == [100]
    assert got[0].backlog and got[0].verdict.verdict == "inconclusive"
    assert got[0].verdict.reasons[0].startswith("no schedule")
    assert s.summary.points == 120


def test_each_new_line_is_parsed_once_and_spikes_come_as_their_line_arrives(tmp_path):
    log = tmp_path / "run.log"
    text = lines(200, spike_at={150, 180}).splitlines(keepends=True)
    log.write_text("".join(text[:100]))
    s = WatchSession(str(log))
    assert spikes(poll(s)) == []
    seen = []
    for i in range(100, 200):
        with open(log, "a") as f:
            f.write(text[i])
        seen += [(i + 1, x.step) for x in spikes(poll(s))]
    assert seen == [(150, 150), (180, 180)]  # at the poll after its own line
    assert s.summary.lines == 200 and s.summary.points == 200


def test_a_resume_replaces_the_points_from_its_step(tmp_path):
    log = tmp_path / "run.log"
    log.write_text(lines(80) + lines(30, start=61))
    s = WatchSession(str(log))
    notices = [e.text for e in poll(s) if isinstance(e, Notice)]
    assert notices == [
        "the log went back from step 80 to step 61 (a resume): the 20 points from step 61 "
        "on are replaced by the new ones"
    ]
    assert s.detector.steps == list(range(1, 91)) and s.summary.restarts == [61]


def test_until_stops_after_that_step(tmp_path):
    log = tmp_path / "run.log"
    log.write_text(lines(100, spike_at={90}))
    s = WatchSession(str(log), until=60)
    events = list(watch(s, sleep=lambda t: None))
    assert spikes(events) == [] and s.summary.last_step == 60 and s.done


def test_evaluation_records_and_other_ranks_are_not_points(tmp_path):
    log = tmp_path / "run.log"
    log.write_text(
        "step=1 loss=2.0\n"
        "step=1 eval_loss=9.0\n"
        "[rank1]: step=2 loss=9.0\n"
        "step=2 loss=2.1\n"
        "epoch 0 done; reshuffling\n"
    )
    s = WatchSession(str(log))
    poll(s)
    assert s.detector.steps == [1, 2] and s.detector.values == [2.0, 2.1]


def test_records_without_steps_are_numbered_by_line_order(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("".join(f"{{'loss': {2.0 + 0.01 * (i % 3)}}}\n" for i in range(10)))
    s = WatchSession(str(log), step_every=50)
    poll(s)
    assert s.line_order and s.detector.steps == [50 * i for i in range(1, 11)]


def test_waiting_for_a_log_then_reading_it(tmp_path):
    log = tmp_path / "later.log"
    s = WatchSession(str(log))
    assert [e.text for e in poll(s)] == [f"waiting for {log} to appear"]
    log.write_text(lines(10))
    assert [e.text for e in poll(s) if isinstance(e, Notice)] == [f"{log} appeared"]
    assert s.summary.points == 10


@pytest.mark.slow
def test_the_sample_run_is_judged_on_its_points_so_far(tmp_path):
    # The story's spikes, with the schedule beside the log: composition, when they arrive.
    for name in ("run.log", "dflash-diag.toml", "manifest.parquet"):
        shutil.copy(SAMPLE / name, tmp_path / name)
    s = open_session(str(tmp_path / "run.log"), until=260)
    got = {x.step: x for x in spikes(watch(s, sleep=lambda t: None))}
    assert [254, 258] == [k for k in got if k in (254, 258)]
    for step in (254, 258):
        v = got[step].verdict
        assert v.verdict == "composition" and v.ground == "verified"
        assert v.evidence.batch["mean_len"] == 8192.0
    assert "step 52" in got[254].verdict.reasons[0]  # the earlier batch as long as it
    # judged on the points so far: the same verdict as on a log that ends at step 254
    text = (tmp_path / "run.log").read_text().splitlines(keepends=True)
    end = next(i for i, line in enumerate(text) if "step=254/" in line)
    (tmp_path / "cut.log").write_text("".join(text[: end + 1]))
    cut = open_session(str(tmp_path / "cut.log"), config=str(tmp_path / "dflash-diag.toml"))
    last = spikes(cut.poll())[-1]
    assert last.step == 254 and last.verdict.reasons == got[254].verdict.reasons


def test_a_metric_the_log_does_not_have_is_said_once(tmp_path):
    log = tmp_path / "run.log"
    log.write_text(lines(10))
    s = WatchSession(str(log), metric="acc")
    notices = [e.text for e in poll(s)]
    assert notices == [
        "no 'acc' in the 10 records read so far (they have loss, lr); check --metric"
    ]
    with open(log, "a") as f:
        f.write(lines(5, start=11))
    assert poll(s) == []


def test_a_banner_of_settings_is_not_a_missing_metric(tmp_path):
    """A trainer prints its settings as records with no step before training starts:
    nothing is missing from them, so nothing is said until a step's record lacks it."""
    log = tmp_path / "run.log"
    log.write_text("block_size=1024 n_layer=12 n_head=12\nbatch_size=8 lr=0.0006\n")
    s = WatchSession(str(log), metric="loss")
    assert [e.text for e in poll(s)] == []
    with open(log, "a") as f:
        f.write(lines(3))
    assert [e.text for e in poll(s) if "records read so far" in getattr(e, "text", "")] == []


@pytest.mark.parametrize(
    "name", ["lightning_rich.log", "lightning_rich_tty.log", "lightning_tqdm.log"]
)
def test_a_real_trainers_banner_says_nothing_is_missing(name, tmp_path):
    """Lightning's own start-up lines (tests/data/trainers, written by lightning: its
    README names the version) parse as records with no step: a watch started on them
    says nothing about a missing metric."""
    real = Path(__file__).resolve().parents[1] / "data" / "trainers" / name
    head = real.read_text(errors="replace").splitlines(keepends=True)[:8]
    (tmp_path / "run.log").write_text("".join(head))
    s = WatchSession(str(tmp_path / "run.log"), metric="loss")
    assert [e for e in poll(s) if "records read so far" in getattr(e, "text", "")] == []


def test_a_watch_stopped_between_two_verdicts_says_the_spike_it_did_not_judge(tmp_path):
    # Two spikes in one poll; the reader stops after the first (Ctrl-C while the second
    # is judged): the second is said as found and not judged, and nothing else is.
    log = tmp_path / "run.log"
    log.write_text(lines(300, spike_at=(150, 240)))
    s = WatchSession(str(log))
    events = s.poll()
    first = next(e for e in events if isinstance(e, Spike))
    events.close()
    assert first.step == 150
    assert s.summary.unjudged_spikes == [240] and s.summary.unjudged_points == 0


def test_a_watch_stopped_while_deciding_says_the_points_it_read(tmp_path, monkeypatch):
    log = tmp_path / "run.log"
    log.write_text(lines(120))
    s = WatchSession(str(log))

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(s.detector, "extend", interrupted)
    with pytest.raises(KeyboardInterrupt):
        poll(s)
    assert s.summary.unjudged_points == 120 and s.summary.lines == 120


@pytest.mark.slow
def test_a_verdict_reads_a_bounded_window_of_the_run(tmp_path, monkeypatch):
    # With the history bounded at 300 points, the verdict of a spike at step 396 of the
    # sample run is fitted on its last 300 points and the replay's steps from there to
    # 300 steps ahead: what it reads does not grow with the run.
    from dflash_diag.spikes import attribute
    from dflash_diag.watch import session as ws
    from dflash_diag.watch import verdict as wv

    for name in ("run.log", "dflash-diag.toml", "manifest.parquet"):
        shutil.copy(SAMPLE / name, tmp_path / name)
    monkeypatch.setattr(ws, "HISTORY", 300)
    monkeypatch.setattr(wv, "HISTORY", 300)
    seen = []
    real = attribute.attribute_spikes

    def spy(detection, rep, *args, **kw):
        seen.append(
            (detection.steps[0], detection.steps[-1], rep.micro["step"].agg(["min", "max"]))
        )
        return real(detection, rep, *args, **kw)

    monkeypatch.setattr(attribute, "attribute_spikes", spy)
    s = open_session(str(tmp_path / "run.log"), until=400)
    got = {x.step: x for x in spikes(watch(s, sleep=lambda t: None))}
    assert 396 in got and got[396].verdict.ground == "verified"
    first, last, span = seen[-1]
    assert (first, last) == (97, 396)  # the last 300 points
    assert span["min"] == 96 and span["max"] == 696  # covered from step 96, 300 ahead
    assert seen[0][0] == 1  # (an early spike: every point so far)


DATA = ROOT / "tests" / "data"


@pytest.mark.parametrize(
    "path",
    [
        "trainer_runs/grouped/train.log",
        "trainers/hf_trainer_steps1.log",
        "trainers/hf_trainer_steps1_unbuffered.log",
        "trainers/hf_trainer_steps5_eval.log",
        "trainers/trl_sft.log",
    ],
)
def test_the_hf_trainers_stdout_is_read_point_for_point_as_read_log_reads_it(path):
    # The Trainer's dicts go to a buffered stdout, its bars to stderr: a dict is dated
    # by its tqdm.write, not by the bar count drawn before it (which read resumes).
    from dflash_diag.logs import read_log

    s = WatchSession(str(DATA / path))
    read = -1
    while s.summary.lines != read:  # (until a poll reads nothing new)
        read = s.summary.lines
        poll(s)
    table = read_log(str(DATA / path)).table
    assert s.detector.steps == table["step"].tolist() and not s.summary.restarts
    np.testing.assert_allclose(s.detector.values, table["loss"].to_numpy())
