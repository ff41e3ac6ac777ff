"""Lines in, spike events out: :class:`WatchSession` and :func:`watch`.

A session owns a :class:`~.follow.Follower`, the project's line parser
(:func:`~dflash_diag.logs.lines.parse_line`, the same formats ``spikes`` reads: free
``key=value`` text, the HF Trainer's dict lines, JSON lines, progress-bar postfixes),
a :class:`~.causal.CausalDetector` and, when the batches are known, a
:class:`~dflash_diag.composition.source.Source`.  :meth:`WatchSession.poll` reads what was
written since the last poll, parses each new line once, turns the records of the watched metric into
points, decides each point, and returns the events: a :class:`Spike` for each new
event (judged at once, :func:`~.verdict.judge`) and a :class:`Notice` for what the
reader should know (the file is missing, was truncated; the log went back to an
earlier step).  :func:`watch` polls until stopped, sleeping between polls.

Points: a record is used when it is a training record (not evaluation) of the chosen
rank holding the metric; its step is its own (a ``step`` field or a progress bar's
count).  A dict the Hugging Face Trainer printed with ``tqdm.write`` takes the training
bar's count at its write (:class:`_WriteSteps`), as ``read_log`` dates it: its stdout is
buffered, so the bar drawn just before it may be far older.  A log whose records carry
no step numbers them 1, 2, ... (times ``step_every``).  A step at or below the last one
is a resume: the points from that step on are forgotten and the values logged again
replace them (as ``read_log`` keeps the later value of a repeated step); spikes already
reported stay reported, and a spike at a step reported before the resume is marked
``again``.

What was read and not judged yet is counted as it happens (:class:`Summary`'s
``unjudged_*``), so a watch stopped in the middle of a poll says so in its last words.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..data import spike_direction
from ..logs.bars import TQDM
from ..logs.grammar import LINE_FORMATS
from ..logs.lines import LineState, parse_line
from .causal import DEFAULT_WINDOW, CausalDetector
from .follow import POLL_SECONDS, Follower
from .verdict import HISTORY, LiveVerdict, judge

if TYPE_CHECKING:
    from ..composition.source import Source

#: Columns kept per point besides the metric, for the verdicts.
EXTRA_COLUMNS = ("lr", "grad_norm", "tokens")
#: Keys of a parsed record that are not metrics.
_BOOKKEEPING = frozenset({"line", "rank", "step", "step_source", "is_eval", "attach", "write"})


@dataclass(frozen=True)
class Spike:
    """One spike event, reported when its first point arrived.

    :param step: the event's first step; ``value``, ``baseline``, ``z``: at that point
        (``baseline`` NaN for a non-finite value).
    :param critical: the critical z it passed (NaN for a non-finite value).
    :param rule: ``warming up``, ``calibrated`` or ``fixed`` (:class:`~.causal.Decision`).
    :param kind: ``spike`` or ``non-finite``.
    :param verdict: the :class:`~.verdict.LiveVerdict`.
    :param backlog: the line was already in the file when the watch began.
    :param seen_at: ``time.time()`` when the session decided it.
    :param again: a spike at this step was already reported before the log went back to
        an earlier step (a resume): the step was trained again and spiked again.
    """

    step: int
    value: float
    baseline: float
    z: float
    critical: float
    rule: str
    kind: str
    verdict: LiveVerdict
    backlog: bool
    seen_at: float
    again: bool = False


@dataclass(frozen=True)
class Notice:
    """Something the reader should know, in words."""

    text: str


@dataclass(frozen=True)
class Status:
    """Where the watch is: the last point and the counts so far.

    :param step: the last point's step (None: no point yet).
    :param value: its value; ``baseline``: its baseline (NaN: none yet).
    :param rule: how its critical z would be set (``warming up``, ``calibrated``...).
    :param lines: lines read (and judged: a poll judges what it reads);
        ``unread_bytes``: bytes written to the log and not read yet; ``unread_lines``:
        about how many lines they are (at the mean length of the lines read): how far
        behind the watch is.
    """

    step: int | None
    value: float
    baseline: float
    rule: str
    points: int
    spikes: int
    lines: int
    unread_bytes: int = 0
    unread_lines: int = 0


@dataclass
class Summary:
    """What a watch saw, for its last words.

    :param verdicts: spikes per verdict.
    :param restarts: steps the log went back to (resumes).
    :param unread_bytes: bytes of the log not read when the watch ended (its spikes, if
        any, were never judged: said in the last words).
    :param unjudged_lines: lines read from the file and not parsed yet (a watch stopped
        in the middle of a poll); ``unjudged_points``: points parsed and not decided yet;
        ``unjudged_spikes``: the steps of the spikes decided and not judged yet.  All
        three are 0 once a poll ends.
    """

    path: str
    metric: str
    lines: int = 0
    points: int = 0
    last_step: int | None = None
    spikes: list[Spike] = field(default_factory=list)
    restarts: list[int] = field(default_factory=list)
    unread_bytes: int = 0
    unjudged_lines: int = 0
    unjudged_points: int = 0
    unjudged_spikes: list[int] = field(default_factory=list)

    @property
    def verdicts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.spikes:
            out[s.verdict.verdict] = out.get(s.verdict.verdict, 0) + 1
        return out


Event = Spike | Notice


class WatchSession:
    """Follow ``path`` and judge each spike of ``metric`` as it arrives (module
    docstring).

    :param composition: the batches (None: verdicts from the log alone).
    :param fmt: ``text`` (any line shape), ``hf-dict``, ``jsonl`` or None (any).
    :param rank: whose lines to read (records of other ranks are skipped).
    :param metric_rank: whose micro-batches the metric follows (``auto``/None: chosen
        by the attribution; ``all``; a rank).
    :param until: stop after the point of this step (the lines after it are not read).
    """

    def __init__(
        self,
        path: str,
        metric: str = "loss",
        window: int = DEFAULT_WINDOW,
        threshold: float | None = None,
        direction: str | None = None,
        composition: Source | None = None,
        covers: str = "window",
        metric_rank: int | str | None = None,
        fmt: str | None = None,
        rank: int = 0,
        step_every: int | None = None,
        from_start: bool = True,
        until: int | None = None,
    ) -> None:
        if direction is None:
            direction = spike_direction(metric)
        self.follower = Follower(path, from_start=from_start)
        self.detector = CausalDetector(window, threshold, direction=direction)
        self.metric = metric
        self.composition = composition
        self.covers = covers
        self.metric_rank = metric_rank
        self.rank = rank
        self.step_every = step_every or 1
        self._shapes = LINE_FORMATS[fmt or "text"]
        self._state = LineState()
        self._bars = _WriteSteps()
        self._undated: deque[dict[str, Any]] = deque()  # dicts waiting for their write
        self._skipped: dict[str, int] = {}
        self._shapes_seen: dict[str, int] = {}
        self._extra: dict[str, list[float]] = {c: [] for c in EXTRA_COLUMNS}
        self._stepped = False  # a record with its own step has been seen
        self._order = 0  # records numbered by line order (no step of their own)
        self._records = 0  # records parsed
        self._stepped_records = 0  # ... of them with a step (a banner's settings have none)
        self._keys: set[str] = set()  # their metrics (for the "no such metric" notice)
        self._said_missing = False
        self._spiked: set[int] = set()  # steps of the spikes reported
        self.summary = Summary(path=path, metric=metric)
        self.until = until
        #: Looks for the run's recording beside the log until it is there (a watch
        #: started before the run); None: not looked for.
        self.later: Callable[[], tuple[Source | None, str] | None] | None = None
        #: What the reader should know before the first line (yielded by the first poll).
        self.notes: list[str] = []
        #: ``until`` was reached: nothing after it is read.
        self.done = False

    @property
    def line_order(self) -> bool:
        """The points are numbered by line order (the records carry no step)."""
        return self._order > 0 and not self._stepped

    def status(self) -> Status:
        d = self.detector.decisions
        last = d[-1] if d else None
        unread = self.follower.unread()
        per_line = self.follower.bytes_read / max(1, self.summary.lines)
        return Status(
            step=last.step if last else None,
            value=last.value if last else math.nan,
            baseline=last.baseline if last else math.nan,
            rule=self.detector.rule,
            points=len(d),
            spikes=len(self.summary.spikes),
            lines=self.summary.lines,
            unread_bytes=unread,
            unread_lines=round(unread / per_line) if per_line > 0 else 0,
        )

    def poll(self) -> Iterator[Event]:
        """Read and judge what was written since the last poll; each event is yielded
        as soon as it is judged."""
        notes, self.notes = self.notes, []
        yield from (Notice(t) for t in notes)
        chunk = self.follower.poll()
        yield from (Notice(t) for t in chunk.notices)
        if chunk.reset:
            self._state = LineState()
            self._bars = _WriteSteps()
            self._undated.clear()
        steps: list[int] = []
        values: list[float] = []
        behind = self.summary
        behind.unjudged_lines = len(chunk.lines)
        for i, line in enumerate(chunk.lines):
            self.summary.lines += 1
            behind.unjudged_lines -= 1
            if chunk.raw is not None:
                self._bars.feed(chunk.raw[i], self._state.writes)
            recs = parse_line(
                self.summary.lines,
                line,
                self._state,
                self._shapes,
                self._skipped,
                self._shapes_seen,
            )
            for rec in self._dated(recs):
                point = self._point(rec)
                if point is None:
                    continue
                step, value = point
                last = steps[-1] if steps else self.summary.last_step
                if last is not None and step <= last:
                    yield from self._decide(steps, values, chunk.backlog)
                    steps, values = [], []
                    yield self._restart(step)
                steps.append(step)
                values.append(value)
                behind.unjudged_points += 1
                for c in EXTRA_COLUMNS:
                    self._extra[c].append(_number(rec.get(c)))
                if self.until is not None and step >= self.until:
                    self.done = True
                    break
            if self.done:
                behind.unjudged_lines = 0  # (the lines after --until are not read, on purpose)
                break
        yield from self._decide(steps, values, chunk.backlog)
        # (only once a record with a step was read: a trainer's banner prints its settings
        # as records with no step, and no metric is missing from them)
        if self._stepped_records and not self.detector.n_points and not self._said_missing:
            self._said_missing = True
            others = ", ".join(sorted(self._keys)[:8]) or "no metrics"
            yield Notice(
                f"no {self.metric!r} in the {self._stepped_records} records read so far (they have "
                f"{others}); check --metric"
            )

    def _dated(self, recs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """``recs`` in order, a dict printed by ``tqdm.write`` held back until its write's
        redraw is read (stdout's buffer may flush between a write's clear and its redraw:
        the dict then arrives first), with the ones held before it."""
        writes = self._state.writes

        def dated(k: int) -> bool:
            return k < len(writes) and writes[k] != _WriteSteps.OPEN

        while self._undated and dated(self._undated[0]["write"][1]):
            yield self._undated.popleft()
        for rec in recs:
            write = rec.get("write")
            if write is not None and (self._undated or not dated(write[1])):
                self._undated.append(rec)
                continue
            yield rec

    def _point(self, rec: dict[str, Any]) -> tuple[int, float] | None:
        """``(step, value)`` of a record of the watched metric, or None."""
        self._records += 1
        if rec.get("step") is not None:
            self._stepped_records += 1
        if len(self._keys) < 100:
            self._keys.update(k for k in rec if k not in _BOOKKEEPING)
        if rec.get("is_eval") or self.metric not in rec or rec.get("rank", 0) != self.rank:
            return None
        value = _number(rec.get(self.metric))
        step = rec.get("step")
        if rec.get("write") is not None:
            # a dict printed by tqdm.write: its step is the bar's count at that write,
            # however far stdout's buffering moved it (as read_log dates it)
            step = float(self._state.writes[rec["write"][1]])
        if step is not None and math.isfinite(step):
            self._stepped = True
            return int(step), value
        if self._stepped:
            return None  # (a stray record without a step in a log that numbers them)
        self._order += 1
        return self._order * self.step_every, value

    def _restart(self, step: int) -> Notice:
        """The log went back to ``step`` (a resume): forget the points from there."""
        last = self.detector.steps[-1]
        dropped = self.detector.truncate(step)
        for c in EXTRA_COLUMNS:
            del self._extra[c][len(self.detector.steps) :]
        self._count()
        self.summary.restarts.append(step)
        return Notice(
            f"the log went back from step {last} to step {step} (a resume): the "
            f"{dropped} points from step {step} on are replaced by the new ones"
        )

    def _decide(
        self, steps: list[int], values: list[float], backlog: bool
    ) -> Iterator[Spike | Notice]:
        """Decide new points; judge each event at its first point, on the points up to
        it (the points after it in the same batch are not looked at)."""
        if not steps:
            return
        n0 = self.detector.n_points
        decisions = self.detector.extend(steps, values)
        self._count()
        events = [(d, n0 + k) for k, d in enumerate(decisions) if d.starts_event]
        self.summary.unjudged_points -= len(steps)
        self.summary.unjudged_spikes += [d.step for d, _ in events]
        for d, at in events:
            yield from self._look_again()
            spike = self._judged(d, at, backlog)
            self.summary.unjudged_spikes.pop(0)
            yield spike

    def _look_again(self) -> Iterator[Notice]:
        """Before a spike is judged: the recording beside the log, when the run has
        written it since the watch began (:attr:`later`), and a notice that says so."""
        found = self.later() if self.later is not None else None
        if found is not None:  # (the recording is there: looked for no more)
            source, note = found
            self.composition = source or self.composition
            self.later = None
            if note:
                yield Notice(note)

    def _judged(self, d: Any, upto: int, backlog: bool) -> Spike:
        """The spike of decision ``d`` judged on the points up to it."""
        det = self.detector
        lo = max(0, upto + 1 - HISTORY)
        view = _Window(det, lo, upto + 1)
        extra = {c: v[lo : upto + 1] for c, v in self._extra.items()}
        verdict = judge(
            view,  # type: ignore[arg-type]
            extra,
            self.metric,
            self.composition,
            self.covers,
            self.metric_rank,
            self.line_order,
        )
        if self.metric_rank in (None, "auto") and verdict.ground is not None:
            if upto + 1 >= FIX_RANK_POINTS:
                # Chosen on enough points: kept, so the next verdicts skip the choice
                # (it scores every rank's batches: most of a verdict's time).
                self.metric_rank = "all" if verdict.metric_rank is None else verdict.metric_rank
        spike = Spike(
            step=d.step,
            value=d.value,
            baseline=d.baseline,
            z=d.z,
            critical=d.critical,
            rule=d.rule,
            kind=d.kind,
            verdict=verdict,
            backlog=backlog,
            seen_at=time.time(),
            again=d.step in self._spiked,
        )
        self._spiked.add(d.step)
        self.summary.spikes.append(spike)
        return spike

    def _count(self) -> None:
        det = self.detector
        self.summary.points = det.n_points
        self.summary.last_step = det.steps[-1] if det.steps else None


#: An ``auto`` metric rank chosen at a spike on at least this many points is kept.
FIX_RANK_POINTS = 100


class _Window:
    """The detector's points ``lo`` to ``hi`` (the last :data:`~.verdict.HISTORY` up to
    a spike), as :func:`~.verdict.judge` reads them: a slice, so it costs the same at
    any length of run."""

    def __init__(self, det: CausalDetector, lo: int, hi: int) -> None:
        self._det, self._lo, self._hi = det, lo, hi
        self.start = lo  # (0: the window holds every point so far)
        self.window, self.min_rise, self.direction = det.window, det.min_rise, det.direction
        self.calibration = det.calibration
        self.decisions = det.decisions[hi - 1 : hi]  # (judge reads the last one only)

    def arrays(self) -> dict[str, Any]:
        return self._det.arrays(self._lo, self._hi)


class _WriteSteps:
    """The training bar's count at each ``tqdm.write``, found as the lines arrive (what
    :func:`~dflash_diag.logs.bars.write_steps` finds in a whole log): a group of clears
    (``\\r`` + spaces + ``\\r``) opens a write, whose step is the count of the next
    redraw of the training bar (the bar, by its total, most often redrawn after a clear
    so far).  An open write is :data:`OPEN` in the list until its redraw is read: the
    dicts it dates wait for it (:meth:`WatchSession._dated`)."""

    #: A write whose redraw has not been read yet.
    OPEN = -1
    # (a clear at a line's end lost its last \r with the line end: the follower drops a
    # CRLF's \r)
    _CLEAR_OR_BAR = re.compile(r"\r +(?=\r|$)|" + TQDM.pattern)

    def __init__(self) -> None:
        self.after_clear: Counter[int] = Counter()
        self.after_clear_prev = False

    def feed(self, line: str, writes: list[int]) -> None:
        """Open and date in ``writes`` the writes ``line`` shows."""
        if "\r" not in line:
            return
        for m in self._CLEAR_OR_BAR.finditer(line):
            if m.group("n") is None:
                if not (writes and writes[-1] == self.OPEN):
                    writes.append(self.OPEN)
                self.after_clear_prev = True
                continue
            total = int(m.group("total"))
            if self.after_clear_prev:
                self.after_clear[total] += 1
            self.after_clear_prev = False
            is_open = bool(writes) and writes[-1] == self.OPEN
            if is_open and total == self.after_clear.most_common(1)[0][0]:
                writes[-1] = int(m.group("n"))


def _number(v: Any) -> float:
    """A record's value as a float (NaN when absent or not a number)."""
    if v is None:
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def watch(
    session: WatchSession,
    poll_seconds: float = POLL_SECONDS,
    idle: Callable[[WatchSession], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[Event]:
    """Poll ``session`` until its ``until`` step is reached (forever when None: the
    caller stops it, e.g. on Ctrl-C), yielding its events.  Between polls that found nothing
    it sleeps ``poll_seconds``; ``idle(session)`` is called after every poll (a status
    line).  A poll that found lines polls again at once (a backlog is read without
    sleeping)."""
    while True:
        before = session.summary.lines
        yield from session.poll()
        if idle is not None:
            idle(session)
        if session.done:
            return
        if session.summary.lines == before:
            sleep(poll_seconds)


def open_session(
    log: str,
    metric: str = "loss",
    window: int | None = None,
    threshold: float | None = None,
    manifest: str | None = None,
    covers: str = "window",
    metric_rank: int | str | None = None,
    force: bool = False,
    fmt: str | None = None,
    rank: int = 0,
    step_every: int | None = None,
    config: str | None = None,
    schedule: dict[str, Any] | None = None,
    until: int | None = None,
    composition: str | None = None,
    columns: tuple[str | None, str | None] = (None, None),
) -> WatchSession:
    """A :class:`WatchSession` from the command's options (``dflash-diag watch``).

    The schedule is resolved as ``spikes`` resolves it (flags, ``--config``, or
    ``dflash-diag.toml`` beside the log; flags win); with a manifest, it is read now
    (a bad one is refused before the log is followed) and replayed when the first
    spike needs it.  A composition recorded during training (:mod:`dflash_diag.record`),
    ``composition`` or the recording found beside the log (``run.log`` ->
    ``run.batches``), replaces the replay; the manifest, if any, checks its lengths.

    :raises InputError: a format that cannot be followed, a bad schedule or manifest.
    """

    from ..composition import Request, resolve
    from ..errors import InputError
    from ..logs import check_format

    fmt = check_format(fmt)
    if fmt is not None and fmt not in LINE_FORMATS:
        raise InputError(
            "--format",
            f"a {fmt} log cannot be followed line by line",
            f"choose from {', '.join(LINE_FORMATS)}, or run dflash-diag spikes on it",
        )
    if log == "-":
        raise InputError("-", "standard input cannot be watched", "give the log file's path")
    req = Request(
        log=log,
        flags=schedule or {},
        config=config,
        manifest=manifest,
        composition=composition,
        force=force,
        live=True,
        columns=columns,
    )
    res = resolve(req)
    later = None
    if composition is None and not res.recorded:
        # (a watch started before the run: the recording beside the log is looked for
        # again until it is there, as spikes would find it once the run wrote it)
        later = _recording_later(req)
    if metric_rank is None:
        metric_rank = res.schedule.metric_rank
    notes = list(res.notes)
    if res.found and res.source is not None:
        notes.append(f"composition: {res.source.named_by}")
    if res.source is not None:
        # read now: a bad manifest or a foreign recording is refused before the log is
        # followed (one line, exit status 2)
        res.source.load()
    session = WatchSession(
        log,
        metric=metric,
        window=window or DEFAULT_WINDOW,
        threshold=threshold,
        composition=res.source,
        covers=covers,
        metric_rank=metric_rank,
        fmt=fmt,
        rank=rank,
        step_every=step_every,
        until=until,
    )
    session.later = later
    session.notes.extend(notes)
    return session


def _recording_later(req: Any) -> Callable[[], tuple[Source | None, str] | None]:
    """What looks for the recording beside the log until the run has written it: None
    while there is none; then the source resolved (None: schedule flags name what to
    replay, and the recording stays unused, as ``spikes`` would leave it) and its note."""

    def find() -> tuple[Source | None, str] | None:
        from ..composition import resolve
        from ..record.recording import find_recording

        if find_recording(req.log) is None:
            return None
        res = resolve(req)
        if not res.recorded or res.source is None:
            return None, "; ".join(res.notes)
        res.source.load()
        return res.source, f"composition: {res.source.named_by}, written since the watch began"

    return find
