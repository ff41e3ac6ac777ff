"""``dflash-diag watch`` output: one line (and its evidence) per spike, a status line,
the summary, and the JSON object of a spike.  Nothing here computes."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..watch.session import Spike, Status, Summary

#: Evidence shown per spike in text at most (the JSON has all of it).
TEXT_REASONS = 2


def _num(x: float) -> str:
    return f"{x:.4g}" if math.isfinite(x) else str(x).lower()


def spike_lines(spike: Spike, metric: str, width: int = 80) -> list[str]:
    """The text of a spike: a head line (step, value over baseline, z, verdict and its
    ground) and its evidence, indented.

    The head reads ``step 254  loss 5.857 over 0.9649  z 68.9  composition (verified)``;
    a spike that was already in the log when the watch began starts with ``backlog``; one
    at a step that spiked before a resume ends with ``again, after the resume``.
    Evidence lines are wrapped to ``width`` columns."""
    import textwrap

    v = spike.verdict
    ground = f" ({v.ground})" if v.ground else ""
    if spike.kind == "non-finite":
        head = f"step {spike.step}  {metric} {_num(spike.value)}  {v.verdict}{ground}"
    else:
        warm = " (warming up)" if spike.rule == "warming up" else ""
        head = (
            f"step {spike.step}  {metric} {_num(spike.value)} over {_num(spike.baseline)}  "
            f"z {spike.z:.3g}{warm}  {v.verdict}{ground}"
        )
    if spike.again:
        head = f"{head}  again, after the resume"
    if spike.backlog:
        head = f"backlog {head}"
    lines = [head]
    for r in v.reasons[:TEXT_REASONS]:
        lines += textwrap.wrap(r, width, initial_indent="  ", subsequent_indent="    ")
    return lines


def spike_json(spike: Spike) -> dict[str, Any]:
    """One JSON object per spike: ``step``, ``value``, ``baseline``, ``z``, ``verdict``,
    ``evidence`` (the reasons), then ``kind``, ``critical``, ``rule``, ``ground``,
    ``backlog``, ``again`` (the step spiked before a resume too), ``metric_rank`` and,
    with a composition, ``batch`` (the point's batch features) and ``explained`` (the
    share of the rise its batch predicts)."""
    from .jsonout import to_jsonable

    v = spike.verdict
    out: dict[str, Any] = {
        "step": spike.step,
        "value": spike.value,
        "baseline": spike.baseline,
        "z": spike.z,
        "verdict": v.verdict,
        "evidence": list(v.reasons),
        "kind": spike.kind,
        "critical": spike.critical,
        "rule": spike.rule,
        "ground": v.ground,
        "backlog": spike.backlog,
        "again": spike.again,
    }
    if v.evidence is not None and v.ground is not None:
        out["metric_rank"] = "all" if v.metric_rank is None else v.metric_rank
        out["batch"] = v.evidence.batch
        out["explained"] = v.evidence.explained
    return to_jsonable(out)  # type: ignore[no-any-return]


def status_text(status: Status, metric: str, path: str) -> str:
    """The live status line: last step, the metric and its baseline, the counts."""
    if status.step is None:
        return f"watching {path}: no {metric} yet ({status.lines} lines read)"
    spikes = f"{status.spikes} spike{'s' if status.spikes != 1 else ''}"
    rule = " (warming up)" if status.rule == "warming up" else ""
    return (
        f"step {status.step}  {metric} {_num(status.value)}  baseline "
        f"{_num(status.baseline)}  {spikes}  {status.points} points{rule}"
    )


def summary_lines(summary: Summary, why: str, width: int = 80) -> list[str]:
    """The last words: why the watch ended, what it read, the spikes by verdict and
    (the last 10) by step."""
    import textwrap

    n = len(summary.spikes)
    at = "" if summary.last_step is None else f", the last at step {summary.last_step}"
    lines = [f"{why}: {summary.points} points of {summary.metric} from {summary.lines} lines{at}"]
    verdicts = ", ".join(f"{k} {v}" for k, v in sorted(summary.verdicts.items()))
    lines.append(f"{n} spike{'s' if n != 1 else ''}" + (f": {verdicts}" if verdicts else ""))
    if summary.spikes:
        steps = ", ".join(f"{s.step} {s.verdict.verdict}" for s in summary.spikes[-10:])
        more = "the last 10: " if n > 10 else ""
        lines += textwrap.wrap(more + steps, width, initial_indent="  ", subsequent_indent="  ")
    if summary.restarts:
        back = "the log went back (resumes) to step " + ", ".join(map(str, summary.restarts))
        lines += textwrap.wrap(back, width)
    if summary.unread_bytes:
        left = (
            f"{summary.unread_bytes:,} bytes of the log were written and not read before the "
            f"watch ended: their points were never judged (dflash-diag spikes "
            f"{summary.path} judges the whole log)"
        )
        lines += textwrap.wrap(left, width)
    return lines
