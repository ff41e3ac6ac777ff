"""`spikes --composition` and `batches --composition`: commands read recorded batches.

The recording is the sample run's own schedule (sample_logs/dflash-diag.toml replayed
from sample_logs/manifest.parquet), every micro-batch written through BatchRecorder as
a training loop would, so what the commands say on it must be what they say on the
replay, with the ground "recorded" instead of "verified".
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from budget import examples
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dflash_diag.cli import app

# CLI runs on the sample logs, seconds each: CI runs them, the local loop does not
pytestmark = pytest.mark.slow

SAMPLE = Path(__file__).resolve().parents[2] / "sample_logs"
LOG = str(SAMPLE / "run.log")
MANIFEST = str(SAMPLE / "manifest.parquet")

runner = CliRunner()


@pytest.fixture(scope="module")
def schedule() -> Any:
    """The sample run's replayed schedule (its config, all 9 epochs)."""
    from dflash_diag.manifest import read_manifest
    from dflash_diag.schedule import replay
    from dflash_diag.schedule.config import resolve_schedule

    resolved = resolve_schedule({}, SAMPLE / "dflash-diag.toml")
    m = read_manifest(resolved.manifest, resolved.length_column, resolved.category_column)
    return replay(m, resolved.params)


def record(
    rep: Any,
    path: Path,
    step_shift: int = 0,
    id_shift: int = 0,
    length_shift: int = 0,
    last_step: int | None = None,
    settings: dict[str, Any] | None = None,
    rank: int | None = None,
) -> Path:
    """Write ``rep``'s micro-batches through BatchRecorder: all ranks into one file, as
    a single process that sees every rank would, or with ``rank`` only that rank's, into
    its rank file as process ``rank`` of the run writes them.  The shifts make a
    foreign recording."""
    from dflash_diag.record import BatchRecorder

    micro = rep.micro
    steps, ranks, micros = (micro[c].to_numpy() for c in ("step", "rank", "micro"))
    if settings is None:
        settings = {"max_seq_len": 8192, "world_size": 8, "source": "tests"}
    world = 1 if rank is None else rep.params.world_size
    with BatchRecorder(path, rank=rank or 0, world_size=world, settings=settings) as rec:
        for i in range(len(micro)):
            if last_step is not None and steps[i] > last_step:
                break
            if rank is not None and ranks[i] != rank:
                continue
            ids = rep.batch(i)
            rec.log(
                int(steps[i]) + step_shift,
                ids + id_shift,
                rep.lengths[ids] + length_shift,
                rank=int(ranks[i]),
                micro=int(micros[i]),
            )
    return path


@pytest.fixture(scope="module")
def recorded(schedule, tmp_path_factory) -> Path:
    """The sample run's recording."""
    return record(schedule, tmp_path_factory.mktemp("rec") / "run.batches")


def invoke(args: list[str]) -> Any:
    return runner.invoke(app, args)


def run_json(args: list[str]) -> dict[str, Any]:
    result = invoke([*args, "--json"])
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    return json.loads(result.stdout)


def refused(args: list[str]) -> str:
    """The one error line of a refused command (exit 2, nothing on stdout)."""
    result = invoke(args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return " ".join(lines[0].split())


@pytest.fixture(scope="module")
def replayed_doc() -> dict[str, Any]:
    """``spikes`` on the sample run, replaying its schedule (config beside the log)."""
    return run_json(["spikes", LOG])


def verdicts(doc: dict[str, Any]) -> dict[int, str]:
    return {s["step"]: s["verdict"] for s in doc["spikes"]}


def test_spikes_on_the_recording_say_what_the_replay_says(recorded, replayed_doc):
    doc = run_json(["spikes", LOG, "--composition", str(recorded)])
    assert replayed_doc["schedule_check"]["status"] == "verified"
    check = doc["schedule_check"]
    assert check["status"] == "recorded"
    assert check["tokens_match"] == 1.0 and check["n_compared"] == 2961
    assert doc["composition"].endswith("run.batches")
    assert doc["schedule"] is None and doc["epochs_replayed"] is None
    got, want = verdicts(doc), verdicts(replayed_doc)
    assert got[254] == got[258] == "composition"
    assert got == want
    assert {s["ground"] for s in doc["spikes"]} == {"recorded"}
    by_step = {s["step"]: s for s in doc["spikes"]}
    for step in (254, 258):
        mine = by_step[step]
        theirs = next(s for s in replayed_doc["spikes"] if s["step"] == step)
        assert mine["batches"] == theirs["batches"]
        assert [r["step"] for r in mine["recurrences"]] == [
            r["step"] for r in theirs["recurrences"]
        ]
    assert doc["attribution"]["r2"] == pytest.approx(replayed_doc["attribution"]["r2"])


def test_spikes_text_says_every_verdict_rests_on_the_recording(recorded):
    result = invoke(["spikes", LOG, "--composition", str(recorded)])
    assert result.exit_code == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert f"composition: recorded in {recorded}" in out
    assert "schedule check: recorded: recorded tokens match the log at 100.0% of 2961 steps" in out
    # the evidence shown: the unexplained spike, then the largest rises in percent
    assert "step 1999 (unexplained, on the recorded batches):" in out
    assert "step 1182 (composition, on the recorded batches):" in out
    assert "These verdicts rest on the batches recorded during training in" in out
    assert "schedule config:" not in out  # the config gave the manifest, not the batches


def test_a_recording_beside_the_log_is_found_and_said(schedule, tmp_path, monkeypatch):
    shutil.copy(LOG, tmp_path / "run.log")
    record(schedule, tmp_path / "run.batches")
    monkeypatch.chdir(tmp_path)
    result = invoke(["spikes", "run.log"])
    assert result.exit_code == 0, result.stderr
    out = " ".join(result.stdout.split())
    # no config and no manifest here: the recording alone attributes
    assert "composition: recorded in run.batches (found beside the log)" in out
    assert "no manifest" not in out
    doc = run_json(["spikes", "run.log"])
    assert doc["schedule_check"]["status"] == "recorded"
    assert doc["manifest"] is None
    assert verdicts(doc)[254] == verdicts(doc)[258] == "composition"
    # schedule flags name a schedule to replay: the recording is left, and said so
    flagged = invoke(["spikes", "run.log", "--seed", "1"])
    assert flagged.exit_code == 0, flagged.stderr
    assert "run.batches are not used: schedule flags" in " ".join(flagged.stdout.split())


def test_rank_files_beside_the_log_are_read_together(schedule, tmp_path, monkeypatch):
    shutil.copy(LOG, tmp_path / "run.log")
    for r in range(schedule.params.world_size):
        record(schedule, tmp_path / "run.batches", rank=r)
    assert not (tmp_path / "run.batches").exists()
    assert (tmp_path / "run.rank7.batches").is_file()
    monkeypatch.chdir(tmp_path)
    doc = run_json(["spikes", "run.log"])
    check = doc["schedule_check"]
    assert (check["status"], check["tokens_match"], check["basis"]) == ("recorded", 1.0, "step")
    assert doc["composition"] == "run.batches (found beside the log)"
    assert verdicts(doc)[254] == verdicts(doc)[258] == "composition"


def test_schedule_flags_beside_composition_are_refused(recorded):
    line = refused(["spikes", LOG, "--composition", str(recorded), "--seed", "3"])
    assert line.startswith("error: --composition: a recorded composition is not replayed")
    assert "--seed" in line


def test_a_recording_of_other_steps_is_refused(schedule, tmp_path):
    far = record(schedule, tmp_path / "far.batches", step_shift=100_000, last_step=50)
    line = refused(["spikes", LOG, "--composition", str(far)])
    assert "the recording holds 0 of the log's 2961 logged steps" in line
    assert "it is not this run's" in line


def test_a_partial_recording_is_used_where_it_overlaps(schedule, tmp_path):
    """The recorder added late (or a run still being written): steps 1..329 of 2961.
    Where it overlaps, its tokens match the log's, so it is the run's: used for those
    steps, and the check says which logged steps it does not cover."""
    head = record(schedule, tmp_path / "head.batches", last_step=329)
    doc = run_json(["spikes", LOG, "--composition", str(head)])
    check = doc["schedule_check"]
    assert check["status"] == "recorded"
    assert check["detail"] == (
        "recorded tokens match the log at 100.0% of 329 steps; it holds steps 1..329: the "
        "2632 logged steps it does not cover (330-2961) have no batch"
    )
    spikes = {s["step"]: s for s in doc["spikes"]}
    # 254 and 258 are judged on their recorded batches (of the longest samples) ...
    for step in (254, 258):
        assert spikes[step]["batch"]["mean_len"] == 8192
    # ... and a spike past the recording has no batch to judge
    later = [s for s in doc["spikes"] if s["step"] > 329 and s["kind"] != "non-finite"]
    assert later
    for s in later:
        assert s["batch"] == {} and s["evidence"] == ["the replay has no batch for this step"]
    shown = run_json(["spikes", LOG, "--composition", str(head), "--steps", "1:329"])
    assert {s["step"] for s in shown["spikes"]} <= set(range(1, 330))


def test_a_recording_one_step_off_is_refused_by_the_tokens(schedule, tmp_path):
    off = record(schedule, tmp_path / "off.batches", step_shift=1)
    line = refused(["spikes", LOG, "--composition", str(off)])
    assert "the recorded tokens match the log's at only" in line
    assert "the recording is not this run's" in line
    # --force lines it up anyway, and says it is refuted
    doc = run_json(["spikes", LOG, "--composition", str(off), "--force"])
    assert doc["schedule_check"]["status"] == "refuted"


def test_a_recording_of_another_dataset_is_refused(schedule, tmp_path):
    beyond = record(schedule, tmp_path / "ids.batches", id_shift=100_000, last_step=20)
    line = refused(["spikes", LOG, "--composition", str(beyond)])
    assert "does not fit the manifest: sample id 1" in line
    assert "beyond its 100000 samples" in line
    longer = record(schedule, tmp_path / "len.batches", length_shift=1, last_step=20)
    line = refused(["spikes", LOG, "--composition", str(longer)])
    assert "does not fit the manifest: sample" in line and "recorded" in line
    assert refused(["batches", MANIFEST, "--composition", str(longer)]) == line


def test_a_corrupt_recording_is_refused(recorded, tmp_path):
    garbage = tmp_path / "garbage.batches"
    garbage.write_bytes(b"step,rank,sample_id\n1,0,17\n")
    refused(["spikes", LOG, "--composition", str(garbage)])
    damaged = tmp_path / "damaged.batches"
    data = bytearray(recorded.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 8] = bytes(255 - b for b in data[middle : middle + 8])
    damaged.write_bytes(bytes(data))
    line = refused(["spikes", LOG, "--composition", str(damaged)])
    assert "damaged.batches" in line
    refused(["batches", "--composition", str(damaged)])
    refused(["spikes", LOG, "--composition", str(tmp_path / "missing.batches")])


@pytest.fixture(scope="module")
def replayed_batches() -> dict[str, Any]:
    return run_json(["batches", MANIFEST])


def test_batches_measures_the_recording_as_the_replay(recorded, replayed_batches):
    doc = run_json(["batches", "--composition", str(recorded)])
    assert doc["strategy"] == "recorded"
    assert doc["composition"].endswith("run.batches")
    assert doc["manifest"] == "none"
    for key in (
        "padding_efficiency",
        "length_icc",
        "adjacent_length_corr",
        "recurrence",
        "epochs",
        "steps_per_epoch",
        "micro_per_step",
        "tokens_per_epoch",
    ):
        assert doc[key] == pytest.approx(replayed_batches[key]), key
    assert replayed_batches["recurrence"] > 0.9  # sorted-greedy: every batch comes back


def test_batches_exports_the_recording(recorded, schedule, tmp_path):
    import pandas as pd

    out = tmp_path / "schedule.parquet"
    result = invoke(["batches", "--composition", str(recorded), "--export", str(out)])
    assert result.exit_code == 0, result.stderr
    table = pd.read_parquet(out)
    assert len(table) == len(schedule.sample_ids)
    first = table[(table["step"] == 254) & (table["rank"] == 0)]
    micro = schedule.micro
    row = int(np.flatnonzero((micro["step"] == 254) & (micro["rank"] == 0))[0])
    assert sorted(first["sample_id"]) == sorted(schedule.batch(row).tolist())


def test_batches_compares_the_recording_with_replayed_strategies(recorded, replayed_batches):
    doc = run_json(
        ["batches", MANIFEST, "--composition", str(recorded), "--compare", "sorted-greedy,random"]
    )
    names = [s["strategy"] for s in doc["strategies"]]
    assert names == ["recorded", "sorted-greedy", "random"]
    rec, same, rnd = doc["strategies"]
    # the run's own strategy, replayed over the recorded epochs, is the recording
    assert same["padding_efficiency"] == pytest.approx(rec["padding_efficiency"])
    assert same["length_icc"] == pytest.approx(rec["length_icc"])
    assert same["epochs"] == rec["epochs"] == replayed_batches["epochs"]
    assert rnd["length_icc"] < 0.1 < rec["length_icc"]
    assert rec["category_dispersion"] == pytest.approx(replayed_batches["category_dispersion"])
    result = invoke(["batches", MANIFEST, "--composition", str(recorded), "--log", LOG])
    assert result.exit_code == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert f"composition: recorded in {recorded}" in out
    assert "Batch schedule (recorded)" in out
    assert "verification against the log: recorded tokens match 100.0% of 2961 steps" in out
    # a log with no tokens a step: nothing to match, said as such
    bare = recorded.parent / "no_tokens.log"
    bare.write_text("".join(f"step={s} loss=1.0\n" for s in range(1, 400)))
    result = invoke(["batches", MANIFEST, "--composition", str(recorded), "--log", str(bare)])
    assert result.exit_code == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert (
        "verification against the log: not enough data: no step of the log has a token "
        "count to compare with (it logs no tokens per step)"
    ) in out


def test_batches_composition_refuses_what_needs_a_replay(recorded):
    line = refused(["batches", "--composition", str(recorded), "--compare", "random"])
    assert line.startswith("error: --compare: replays the manifest, and none was given")
    line = refused(
        ["batches", MANIFEST, "--composition", str(recorded), "--log", LOG, "--search-seed", "0..3"]
    )
    assert "no seed to search" in line


def test_recorded_ids_of_a_manifest_with_sample_ids(schedule, tmp_path):
    """The sample ids shown are the manifest's, not the recorded dataset indices."""
    import pandas as pd

    from dflash_diag.manifest import read_manifest

    m = read_manifest(MANIFEST, "length", "source")
    frame = pd.DataFrame({"sample_id": np.arange(len(m)) + 5_000_000, "length": m.lengths})
    frame["source"] = np.asarray(m.category_names, dtype=object)[m.categories]
    frame.to_parquet(tmp_path / "manifest.parquet")
    rec = record(schedule, tmp_path / "run.batches")
    doc = run_json(
        ["spikes", LOG, "--composition", str(rec), "--manifest", str(tmp_path / "manifest.parquet")]
    )
    spike = next(s for s in doc["spikes"] if s["step"] == 254)
    ids = [i for b in spike["batches"] for i in b["sample_ids"]]
    assert ids and min(ids) >= 5_000_000
    assert doc["manifest"].endswith("manifest.parquet")


def test_without_logged_tokens_the_recording_is_taken_as_recorded(schedule, recorded, tmp_path):
    import re

    text = Path(LOG).read_text(encoding="utf-8")
    (tmp_path / "run.log").write_text(re.sub(r" ntok=\d+", "", text), encoding="utf-8")
    log = str(tmp_path / "run.log")
    doc = run_json(["spikes", log, "--composition", str(recorded), "--manifest", MANIFEST])
    check = doc["schedule_check"]
    assert check["status"] == "recorded"
    assert check["detail"] == (
        "the recording holds 100.0% of the logged steps; the log has no tokens to cross-check "
        "it; the log's epochs fit it at 100% of 2961 steps"
    )
    assert verdicts(doc)[254] == verdicts(doc)[258] == "composition"
    # with no tokens, a recording one step off cannot be told from the run's own
    off = record(schedule, tmp_path / "off.batches", step_shift=1)
    doc = run_json(["spikes", log, "--composition", str(off)])
    assert doc["schedule_check"]["status"] == "recorded"


def test_the_html_report_says_recorded(recorded, tmp_path):
    out = tmp_path / "report.html"
    result = invoke(["spikes", LOG, "--composition", str(recorded), "--html", str(out)])
    assert result.exit_code == 0, result.stderr
    page = " ".join(out.read_text(encoding="utf-8").split())
    assert "schedule check: recorded: recorded tokens match the log at 100.0%" in page
    assert "These verdicts rest on the batches recorded during training in" in page


@settings(max_examples=examples(25), deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=8, max_size=120),
    budget=st.integers(300, 1200),
    world=st.integers(1, 3),
    accum=st.integers(1, 2),
    strategy=st.sampled_from(["sorted-greedy", "bucketed", "random"]),
)
def test_a_recorded_schedule_is_its_replay(lengths, budget, world, accum, strategy):
    """Invariants over schedules: a schedule written through BatchRecorder and read back
    measures as the replay does, passes the check against a log of its own tokens with
    every step matched, and is refused by a log whose steps it does not hold."""
    import tempfile

    import pandas as pd

    from dflash_diag.batches.stats import schedule_stats
    from dflash_diag.composition.ground import check_recording
    from dflash_diag.data import ScheduleParams
    from dflash_diag.errors import InputError
    from dflash_diag.record import read_recording
    from dflash_diag.schedule import replay

    params = ScheduleParams(
        strategy=strategy,
        token_budget=budget,
        batch_size=4,
        world_size=world,
        grad_accum=accum,
        first_step=1,
        epochs=2,
        buckets=(0, 100, 200, 301),
    )
    rep = replay(np.array(lengths), params)
    assume(len(rep.steps) > 0)
    with tempfile.TemporaryDirectory() as tmp:
        path = record(rep, Path(tmp) / "run.batches", settings={"strategy": strategy})
        got = read_recording(path).to_replay()
    mine, theirs = schedule_stats(got), schedule_stats(rep)
    assert mine.padding_efficiency == pytest.approx(theirs.padding_efficiency)
    assert got.steps["tokens"].sum() == rep.steps["tokens"].sum()
    if theirs.length_icc is not None:
        assert mine.length_icc == pytest.approx(theirs.length_icc)
    log = pd.DataFrame({"step": rep.steps["step"], "tokens": rep.steps["tokens"].astype(float)})
    steps = log["step"].to_numpy()
    ground = check_recording(got, log, steps, path=str(path), named_by="run.batches")
    assert ground.status == "recorded"
    assert ground.verification is not None and ground.verification.tokens_match == 1.0
    far = log.assign(step=log["step"] + int(steps.max()) + 1)
    with pytest.raises(InputError, match="the recording holds 0 of the log's"):
        check_recording(got, far, far["step"].to_numpy(), path=str(path))


def test_a_recording_cut_mid_write_is_read_and_said(recorded, tmp_path):
    cut = tmp_path / "cut.batches"
    cut.write_bytes(recorded.read_bytes()[:-5])  # a run killed while writing its last step
    doc = run_json(["spikes", LOG, "--composition", str(cut)])
    check = doc["schedule_check"]
    assert (check["status"], check["n_compared"], check["tokens_match"]) == ("recorded", 2960, 1.0)
    assert (
        f"1 partial record in {cut} cut short and skipped (a run stopped mid-write, or a "
        "write that failed)"
    ) in doc["notes"]
