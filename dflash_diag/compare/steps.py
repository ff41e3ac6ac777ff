"""Whose step numbers are steps: logs whose records carry no step are numbered 1, 2, ...
by logging event (``RunLog.step_source == "line order"``, e.g. HF Trainer dict lines
printed without the progress bar).  With ``logging_steps`` N > 1, event ``i`` is
optimizer step ``i x N``, so lining such a log up with another log's real steps
compares different points of training.

- :func:`check_step_sources`: refuse to mix line-numbered logs with stepped ones.
- :func:`apply_step_every`: ``--step-every N`` for the line-numbered logs only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import InputError
from ..logs import with_interval
from .align import short_name

if TYPE_CHECKING:
    from ..data import RunLog

LINE_ORDER = "line order"
#: How the text and JSON say that steps are line numbers.
EVENTS_NOTE = (
    "steps are logging events numbered 1, 2, ... in line order (the records carry no "
    "step), not optimizer steps; give --step-every N (the trainer's logging_steps) for steps"
)


def check_step_sources(logs: Sequence[RunLog]) -> None:
    """Raise when some logs are numbered by line order and others by their steps.

    Every log line-numbered is allowed: they are compared event by event (the caller
    says so); a mix is not: event 60 is not step 60 unless ``logging_steps`` is 1.

    :raises InputError: naming the first line-numbered log and a stepped one.
    """
    numbered = [log for log in logs if log.step_source == LINE_ORDER]
    stepped = [log for log in logs if log.step_source != LINE_ORDER]
    if numbered and stepped:
        raise InputError(
            numbered[0].path,
            "its records carry no step (numbered 1, 2, ... by logging event), so they "
            f"cannot be lined up with {short_name(stepped[0].path)}'s optimizer steps",
            "pass --step-every N (the trainer's logging_steps)",
        )


def renumber_events(run: RunLog, step_every: int) -> RunLog:
    """A line-numbered log's event ``i`` as step ``i x step_every``
    (:func:`~dflash_diag.logs.with_interval`); other logs are returned as they are."""
    return with_interval(run, step_every) if run.step_source == LINE_ORDER else run


def apply_step_every(logs: Sequence[RunLog], step_every: int | None) -> list[RunLog]:
    """``--step-every N`` for compare: every line-numbered log is renumbered
    (:func:`renumber_events`); logs that number their own steps keep them.

    :raises InputError: N below 1, or no log to apply it to.
    """
    if step_every is None:
        return list(logs)
    if step_every < 1:
        raise InputError("--step-every", f"must be a positive whole number, got {step_every}")
    if not any(log.step_source == LINE_ORDER for log in logs):
        raise InputError(
            "--step-every",
            "every log numbers its own steps, so it applies to none",
            "leave --step-every out",
        )
    return [renumber_events(log, step_every) for log in logs]
