"""``dflash-diag watch LOG``: follow a growing log and judge each spike as it arrives."""

# No `from __future__ import annotations`: schedule_options reads this signature with
# inspect.signature, and typer needs the Annotated objects, not their strings.
import math
from typing import Annotated, Any

import typer

from .listing import command_help
from .options import (
    CategoryColumnOpt,
    CompositionOpt,
    ConfigOpt,
    Covers,
    CoversOpt,
    ForceOpt,
    FormatOpt,
    LengthColumnOpt,
    ManifestOpt,
    MetricOpt,
    MetricRankOpt,
    StepEveryOpt,
    parse_metric_rank,
    schedule_options,
)

#: Exit status of ``--exit-on-spike`` when a spike was reported (0 done, 1 a bug, 2 bad
#: input, 3 ``compare --fail-on``).
SPIKE_EXIT = 4

_HELP = command_help(
    "watch",
    "The log may not exist yet (watch waits for it), may end in a half-written line "
    "(held until its newline), and may be truncated or replaced (rotated): it is then "
    "read again from its start.  A gzip log is refused.  What the log already holds is "
    "read first: its spikes are reported as they are read, marked backlog.\n\n"
    "Detection is causal: a point is judged from the points before it (the median and "
    "MAD of the --window points before it, straightened by a robust line) and never "
    "changed.  The critical z is 3.5 while fewer than --window points have arrived "
    "(warming up), then calibrated on the points so far as in 'spikes'.  'spikes' on the "
    "finished log also uses the points after each one, so the two can differ: "
    "docs/watch.md says how.\n\n"
    "With a manifest (--manifest, or 'manifest' in --config / a dflash-diag.toml beside "
    "the log) the schedule is replayed, or with --composition (or LOG's .batches beside "
    "it) the batches recorded during training are read, and each spike gets the verdict "
    "of 'spikes' computed on the points so far: composition, unexplained or "
    "inconclusive, with its evidence.  Its later recurrences cannot be evidence yet, so "
    "an inconclusive spike is composition when the earlier batches within 5% of its mean "
    "length rose by at least half as much (docs/watch.md).\n\n"
    "On a terminal a status line shows the last step, the metric, its baseline and the "
    "spikes so far.  --json prints one JSON object per line per spike (step, value, "
    "baseline, z, verdict, evidence, ...) and nothing else on stdout.  Ctrl-C ends with a "
    f"summary and exit status 0; --until STEP ends after that step; --exit-on-spike ends at "
    f"the first spike reported with exit status {SPIKE_EXIT}.",
)


@schedule_options
def watch(
    log: Annotated[str, typer.Argument(help="The training log being written.")],
    metric: MetricOpt = "loss",
    window: Annotated[
        int | None, typer.Option("--window", help="Baseline window in logged points (50).")
    ] = None,
    threshold: Annotated[
        float | None,
        typer.Option("--threshold", help="A fixed critical z instead of the calibrated one."),
    ] = None,
    manifest: ManifestOpt = None,
    length_column: LengthColumnOpt = None,
    category_column: CategoryColumnOpt = None,
    composition: CompositionOpt = None,
    covers: CoversOpt = Covers.window,
    metric_rank: MetricRankOpt = None,
    force: ForceOpt = False,
    until: Annotated[
        int | None, typer.Option("--until", help="Stop after the point of this step.")
    ] = None,
    exit_on_spike: Annotated[
        bool,
        typer.Option(
            "--exit-on-spike",
            help=f"Stop at the first spike reported, with exit status {SPIKE_EXIT}.",
        ),
    ] = False,
    new_only: Annotated[
        bool,
        typer.Option(
            "--new-only",
            help="Report only spikes written after the watch began (the log's earlier "
            "points are still read, for the baselines, and counted in the summary).",
        ),
    ] = False,
    json: Annotated[
        bool,
        typer.Option("--json", help="One JSON object per line per spike on stdout."),
    ] = False,
    format: FormatOpt = None,
    rank: Annotated[int, typer.Option("--rank", help="Which rank's lines to read.")] = 0,
    step_every: StepEveryOpt = None,
    config: ConfigOpt = None,
    *,
    schedule: dict[str, Any],
) -> None:
    from ..watch.session import open_session

    session = open_session(
        log,
        metric=metric,
        window=window,
        threshold=threshold,
        manifest=str(manifest) if manifest is not None else None,
        covers=covers.value,
        metric_rank=parse_metric_rank(metric_rank) if metric_rank is not None else None,
        force=force,
        fmt=format,
        rank=rank,
        step_every=step_every,
        config=str(config) if config is not None else None,
        schedule=schedule,
        until=until,
        composition=str(composition) if composition is not None else None,
        columns=(length_column, category_column),
    )
    code = _follow(session, json, exit_on_spike, new_only)
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add ``watch`` to ``app``."""
    from typer.core import TyperCommand

    from .outputs import plain_help_types

    PLAIN = plain_help_types(TyperCommand)
    app.command("watch", help=_HELP, cls=PLAIN)(watch)


def _follow(session: Any, as_json: bool, exit_on_spike: bool, new_only: bool) -> int:
    """Run the watch, rendering its events; the exit status."""
    import signal
    import sys
    from contextlib import nullcontext

    from ..watch.session import Notice, watch
    from .consoles import err_console, out_console

    live = _live(session, as_json)
    why, code = "ended", 0

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)  # a supervisor's stop: the same as Ctrl-C
    show = live.console if live is not None else out_console
    try:
        with live if live is not None else nullcontext():
            for ev in watch(session, idle=_refresh(live)):
                if isinstance(ev, Notice):
                    (show if live is not None else err_console).print(
                        f"watch: {ev.text}", markup=False, highlight=False, soft_wrap=True
                    )
                    continue
                if new_only and ev.backlog:
                    continue
                _print_spike(ev, session.metric, as_json, show)
                if exit_on_spike:
                    why, code = f"stopped at the first spike (step {ev.step})", SPIKE_EXIT
                    break
            else:
                why = "stopped"
    except KeyboardInterrupt:
        why = "interrupted"
    finally:
        signal.signal(signal.SIGTERM, previous)
        if why != "stopped":  # (--until and the first spike stop on purpose, before the end)
            session.summary.unread_bytes = session.follower.unread()
        session.follower.close()
    from ..render.watch import summary_lines

    console = err_console if as_json else out_console
    for line in summary_lines(session.summary, why, console.width):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    sys.stdout.flush()
    return code


def _print_spike(ev: Any, metric: str, as_json: bool, console: Any) -> None:
    import sys

    from ..render.watch import spike_json, spike_lines

    if as_json:
        import json

        sys.stdout.write(json.dumps(spike_json(ev), allow_nan=False) + "\n")
        sys.stdout.flush()
        return
    for line in spike_lines(ev, metric, console.width):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.file.flush()


def _live(session: Any, as_json: bool) -> Any:
    """A rich Live status line on stdout when it is a terminal (None otherwise)."""
    from .consoles import out_console

    if as_json or not out_console.is_terminal:
        return None
    from rich.live import Live
    from rich.text import Text

    return Live(Text(""), console=out_console, auto_refresh=False, transient=True)


def _refresh(live: Any) -> Any:
    """The ``idle`` callback: redraw the status line, at most 4 times a second."""
    if live is None:
        return None
    import time

    from rich.text import Text

    from ..render.watch import status_text

    last = [-math.inf]

    def idle(session: Any) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.25:
            last[0] = now
            text = status_text(session.status(), session.metric, session.follower.path)
            live.update(Text(text, style="dim"), refresh=True)

    return idle
