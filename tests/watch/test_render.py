"""What `watch` prints: spike lines, the status line, the summary, the JSON object."""

import json
import math

from dflash_diag.render.watch import spike_json, spike_lines, status_text, summary_lines
from dflash_diag.watch.session import Spike, Status, Summary
from dflash_diag.watch.verdict import LiveVerdict


def spike(**kw):
    base = dict(
        step=254,
        value=5.857,
        baseline=0.9649,
        z=68.94,
        critical=3.57,
        rule="calibrated",
        kind="spike",
        verdict=LiveVerdict("composition", ("reason one " * 12, "reason two"), "verified"),
        backlog=False,
        seen_at=0.0,
    )
    return Spike(**{**base, **kw})


def test_a_spike_is_a_head_line_and_its_evidence_wrapped_to_the_width():
    lines = spike_lines(spike(), "loss", width=60)
    assert lines[0] == "step 254  loss 5.857 over 0.9649  z 68.9  composition (verified)"
    assert all(len(x) <= 60 for x in lines[1:]) and lines[1].startswith("  reason one")
    assert lines[-1] == "  reason two"


def test_backlog_warming_up_and_non_finite_are_said():
    assert spike_lines(spike(backlog=True, rule="warming up"), "loss")[0] == (
        "backlog step 254  loss 5.857 over 0.9649  z 68.9 (warming up)  composition (verified)"
    )
    nf = spike(kind="non-finite", value=math.nan, baseline=math.nan, z=math.nan)
    nf = Spike(**{**vars(nf), "verdict": LiveVerdict("unexplained", ("numerical",))})
    assert spike_lines(nf, "loss")[0] == "step 254  loss nan  unexplained"


def test_the_json_object_has_the_issue_keys_and_null_for_nan():
    doc = spike_json(spike(baseline=math.nan))
    assert list(doc)[:6] == ["step", "value", "baseline", "z", "verdict", "evidence"]
    assert doc["baseline"] is None and doc["evidence"][1] == "reason two"
    json.dumps(doc, allow_nan=False)  # strict JSON


def test_the_status_line_and_the_summary():
    status = Status(1234, 0.873, 0.861, "calibrated", points=1234, spikes=3, lines=1300)
    assert status_text(status, "loss", "run.log") == (
        "step 1234  loss 0.873  baseline 0.861  3 spikes  1234 points"
    )
    # behind the log: how many lines were written and not read yet
    late = Status(98765, 0.873, 0.861, "calibrated", 98765, 12, 99000, 272_000, 3_400)
    assert status_text(late, "loss", "run.log") == (
        "step 98765  loss 0.873  baseline 0.861  12 spikes  98765 points  ~3,400 lines behind"
    )
    empty = Status(None, math.nan, math.nan, "warming up", points=0, spikes=0, lines=12)
    assert status_text(empty, "loss", "run.log") == "watching run.log: no loss yet (12 lines read)"
    s = Summary("run.log", "loss", lines=300, points=280, last_step=280, spikes=[spike()])
    s.restarts.append(101)
    assert summary_lines(s, "interrupted") == [
        "interrupted: 280 points of loss from 300 lines, the last at step 280",
        "1 spike: composition 1",
        "  254 composition",
        "the log went back (resumes) to step 101",
    ]


def test_the_summary_counts_spikes_trained_again_after_a_resume_once_a_step():
    spikes = [spike(step=120), spike(step=254), spike(step=120, again=True)]
    s = Summary("run.log", "loss", lines=300, points=280, last_step=280, spikes=spikes)
    s.restarts.append(101)
    assert summary_lines(s, "interrupted")[1] == (
        "3 spikes at 2 steps (1 again after a resume): composition 3"
    )


def test_the_summary_says_what_was_read_and_not_judged():
    s = Summary("run.log", "loss", lines=300, points=280, last_step=280, spikes=[spike()])
    s.unjudged_points, s.unjudged_spikes, s.unjudged_lines = 1532, [580, 612], 40
    assert summary_lines(s, "interrupted")[3:] == [
        "1,532 points read and not yet judged; 2 spikes found and not yet judged (steps",
        "580, 612); 40 lines read and not yet parsed (dflash-diag spikes run.log judges",
        "the whole log)",
    ]
    s.unread_bytes = 1200  # the hint is said once, after the unread bytes
    assert summary_lines(s, "interrupted")[3:5] == [
        "1,532 points read and not yet judged; 2 spikes found and not yet judged (steps",
        "580, 612); 40 lines read and not yet parsed",
    ]
    s.unread_bytes = 0
    s.unjudged_points, s.unjudged_spikes, s.unjudged_lines = 0, [], 0
    assert len(summary_lines(s, "interrupted")) == 3  # all judged: nothing more said
