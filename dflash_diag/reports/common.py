"""What every command's report shares: progress stages, the context of a report, a
micro-batch's sample ids, paths as shown, and ``--steps`` ranges."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass


from ..data import Progress as ProgressFn

#: ``stage("replaying") -> context manager yielding a progress callback (or None)``.
Stage = Callable[[str], AbstractContextManager[ProgressFn | None]]


@contextmanager
def quiet(description: str) -> Iterator[ProgressFn | None]:
    """The default :data:`Stage`: no progress shown."""
    yield None


@dataclass(frozen=True)
class Context:
    """Where the inputs came from, for the header and the JSON.

    :param schedule: the replayed schedule's parameters (None: no manifest).
    :param epochs: epochs replayed.
    :param step_source: ``RunLog.step_source``: with ``line order`` the "steps" are the
        log's records numbered 1, 2, ..., not optimizer steps, and are labelled so.
    :param composition: where the batches recorded during training came from, in words
        (``run.batches (found beside the log)``); None: no recording was used.
    :param label: the run's name in the header, the plot's title and the HTML's title
        (``--label``; None: the file's name).
    :param steps: ``--steps``: the range of steps shown ``(first, last)``, both included,
        None for an open end; None: every step.
    :param span: the first and last step of the log (for "steps 200-300 of 1-2961").
    :param config_found: how ``config`` was found (``beside the log``, ...; None: named
        with ``--config``, or no config).
    """

    log: str
    log_format: str
    config: str | None = None
    manifest: str | None = None
    schedule: dict[str, Any] | None = None
    epochs: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    step_source: str = "field"
    composition: str | None = None
    label: str | None = None
    steps: tuple[int | None, int | None] | None = None
    span: tuple[int, int] | None = None
    config_found: str | None = None

    @property
    def line_order(self) -> bool:
        """The log's records carry no step: its "steps" are logging events, numbered."""
        return self.step_source == "line order"


@dataclass(frozen=True)
class MicroBatch:
    """One replayed micro-batch behind a spiking point: where it ran and what it held.

    :param step: optimizer step; ``rank``, ``micro``: data-parallel rank and grad-accum
        index.
    :param sample_ids: the manifest's sample ids (its ``sample_id`` column, else row
        numbers), in batch order.
    """

    step: int
    rank: int
    micro: int
    sample_ids: tuple[int, ...]


def check_steps_in(logged: Any, steps: tuple[int | None, int | None] | None) -> None:
    """``--steps`` must hold at least one logged step: else a usage error naming the log's
    range."""
    from ..errors import InputError

    if steps is None or any(in_steps(int(x), steps) for x in logged):
        return
    shown = f"{'' if steps[0] is None else steps[0]}:{'' if steps[1] is None else steps[1]}"
    span = f"{int(logged[0])}-{int(logged[-1])}" if len(logged) else "none"
    raise InputError(
        "--steps", f"no logged step in {shown} (the log has steps {span})", "widen the range"
    )


def in_steps(step: int, steps: tuple[int | None, int | None] | None) -> bool:
    """Whether ``step`` is in ``steps`` = (first, last), both included, None = open.

    >>> in_steps(5, (None, 5)), in_steps(4, (5, None)), in_steps(4, None)
    (True, False, True)
    """
    if steps is None:
        return True
    lo, hi = steps
    return (lo is None or step >= lo) and (hi is None or step <= hi)
