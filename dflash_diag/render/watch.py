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
    """The live status line: last step, the metric and its baseline, the counts, and how
    far behind the log the watch is when it is (``~3,400 lines behind``: written and not
    read yet, at the mean length of the lines read; every line read is judged)."""
    behind = f"  ~{status.unread_lines:,} lines behind" if status.unread_bytes else ""
    if status.step is None:
        return f"watching {path}: no {metric} yet ({status.lines} lines read){behind}"
    spikes = f"{status.spikes} spike{'s' if status.spikes != 1 else ''}"
    rule = " (warming up)" if status.rule == "warming up" else ""
    return (
        f"step {status.step}  {metric} {_num(status.value)}  baseline "
        f"{_num(status.baseline)}  {spikes}  {status.points} points{rule}{behind}"
    )


def unjudged_lines(summary: Summary, width: int = 80) -> list[str]:
    """What was read and not judged when the watch ended in the middle of a poll
    (nothing when every line read was judged): ``1,532 points read and not yet judged
    (...)``."""

    parts = []
    if summary.unjudged_points:
        parts.append(f"{summary.unjudged_points:,} points read and not yet judged")
    if summary.unjudged_spikes:
        steps = ", ".join(map(str, summary.unjudged_spikes[:10]))
        more = (
            f" and {len(summary.unjudged_spikes) - 10} more"
            if len(summary.unjudged_spikes) > 10
            else ""
        )
        n = len(summary.unjudged_spikes)
        s = "s" if n != 1 else ""
        parts.append(f"{n} spike{s} found and not yet judged (step{s} {steps}{more})")
    if summary.unjudged_lines:
        parts.append(f"{summary.unjudged_lines:,} lines read and not yet parsed")
    if not parts:
        return []
    text = "; ".join(parts)
    if not summary.unread_bytes:  # (else the unread bytes' line says it)
        text += f" (dflash-diag spikes {summary.path} judges the whole log)"
    return _wrapped(text, width)


def summary_lines(summary: Summary, why: str, width: int = 80) -> list[str]:
    """The last words: why the watch ended, what it read, the spikes by verdict and
    (the last 10) by step."""
    import textwrap

    n = len(summary.spikes)
    at = "" if summary.last_step is None else f", the last at step {summary.last_step}"
    lines = [f"{why}: {summary.points} points of {summary.metric} from {summary.lines} lines{at}"]
    verdicts = ", ".join(f"{k} {v}" for k, v in sorted(summary.verdicts.items()))
    again = sum(s.again for s in summary.spikes)
    head = f"{n} spike{'s' if n != 1 else ''}"
    if again:  # (a resume trained those steps again: they are counted each time)
        head += f" at {n - again} steps ({again} again after a resume)"
    lines.append(head + (f": {verdicts}" if verdicts else ""))
    if summary.spikes:
        steps = ", ".join(f"{s.step} {s.verdict.verdict}" for s in summary.spikes[-10:])
        more = "the last 10: " if n > 10 else ""
        lines += textwrap.wrap(more + steps, width, initial_indent="  ", subsequent_indent="  ")
    if summary.restarts:
        back = "the log went back (resumes) to step " + ", ".join(map(str, summary.restarts))
        lines += textwrap.wrap(back, width)
    lines += unjudged_lines(summary, width)
    if summary.unread_bytes:
        left = (
            f"{summary.unread_bytes:,} bytes of the log were written and not read before the "
            f"watch ended: their points were never judged (dflash-diag spikes "
            f"{summary.path} judges the whole log)"
        )
        lines += _wrapped(left, width)
    return lines


def _wrapped(text: str, width: int) -> list[str]:
    """``text`` in lines of ``width``, a path or a command in it never cut (not at its
    hyphens, nor inside a word longer than the width): a reader copies them whole."""
    import textwrap

    return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False)
