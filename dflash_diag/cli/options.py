"""Options shared by several commands, and the schedule option group.

The schedule group (``--strategy --seed --token-budget ...``) is added to a command by
:func:`schedule_options`: the decorated function receives one ``schedule`` argument, a
dict of the ScheduleParams fields and preset keys the user gave (``None`` = not given),
plus ``config``;
:func:`dflash_diag.schedule.config.resolve_schedule` merges them with the TOML file
(flags win).
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from ..data import BUDGET_MODES, RNG_NAMES, SEEDINGS, SHARDS, Progress

SCHEDULE_PANEL = "Schedule (also from --config / dflash-diag.toml \\[schedule]; flags win)"

JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print one JSON document on stdout and nothing else.")
]
PlotOpt = Annotated[
    Path | None,
    typer.Option("--plot", help="Write a plot; PNG, SVG or PDF by the file's extension."),
]
FormatOpt = Annotated[
    str | None,
    typer.Option("--format", "-f", help="Log format (default: detected). See 'parse --help'."),
]
StepEveryOpt = Annotated[
    int | None,
    typer.Option(
        "--step-every",
        help="For a log whose records carry no step (HF dict lines without the progress "
        "bar): it logged every N optimizer steps (logging_steps), so record i is step i x N.",
    ),
]
RankOpt = Annotated[
    str, typer.Option("--rank", help="Which rank's lines to use: a number, or 'all'.")
]
MetricOpt = Annotated[
    str, typer.Option("--metric", help="Column to examine: loss, acc, grad_norm, ...")
]
ManifestOpt = Annotated[
    Path | None,
    typer.Option(
        "--manifest",
        help="Per-sample lengths (parquet/csv/jsonl/npy), or a dataset with token ids: "
        "input_ids in Parquet/JSONL/Arrow, a save_to_disk folder, Parquet shards.",
    ),
]
LengthColumnOpt = Annotated[
    str | None,
    typer.Option(
        "--length-column", help="The manifest's length column (default: the config's, else found)."
    ),
]
CategoryColumnOpt = Annotated[
    str | None,
    typer.Option(
        "--category-column",
        help="The manifest's category column (default: the config's, else source or category).",
    ),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="TOML file with a \\[schedule] section (default: dflash-diag.toml beside "
        "the log, else the manifest, else in the working directory; code it names runs "
        "only from a --config you name, or with --allow-code).",
        rich_help_panel=SCHEDULE_PANEL,
    ),
]
CompositionOpt = Annotated[
    Path | None,
    typer.Option(
        "--composition",
        help="The batches the run recorded (dflash_diag.record: BatchRecorder, "
        "record_trainer, LightningRecorder), e.g. train.batches: every step's samples as "
        "trained, instead of a replayed schedule.",
        metavar="FILE",
    ),
]


def _choices(values: tuple[str, ...]) -> str:
    return "|".join(values)


# name, type, flag (or flags), help
_SCHEDULE_FLAGS: list[tuple[str, Any, str | tuple[str, ...], str]] = [
    (
        "preset",
        str,
        "--preset",
        "hf-trainer: the Hugging Face Trainer's schedule from its own settings "
        "(--per-device-train-batch-size --gradient-accumulation-steps --world-size --seed "
        "--data-seed --train-sampling-strategy / --group-by-length --drop-last --dropout). "
        "Checked against transformers 5.24, accelerate 1.15, torch 2.13.",
    ),
    (
        "strategy",
        str,
        "--strategy",
        "sorted-greedy | bucketed | length-grouped | fairseq | random | distributed "
        "(DistributedSampler) | FILE.py:FUNC | module:FUNC (runs that code). "
        "Default sorted-greedy.",
    ),
    ("seed", int, "--seed", "Shuffle seed. Default 0."),
    (
        "token_budget",
        int,
        "--token-budget",
        "Tokens per micro-batch (fairseq max_tokens). Default 16384.",
    ),
    (
        "budget_mode",
        str,
        "--budget-mode",
        f"{_choices(BUDGET_MODES)}: samples x longest, or sum. Default padded.",
    ),
    ("max_seq_len", int, "--max-seq-len", "Cap lengths at this before batching."),
    ("max_batch_size", int, "--max-batch-size", "At most this many samples per micro-batch."),
    (
        "batch_size",
        int,
        ("--batch-size", "--per-device-train-batch-size"),
        "Samples per micro-batch per rank (length-grouped, random, distributed).",
    ),
    (
        "buckets",
        str,
        "--buckets",
        "Bucket edges for 'bucketed', e.g. 0,770,1216,1728,2432,3296,8192. Default: six "
        "equal-count buckets of the manifest's lengths (capped at --max-seq-len).",
    ),
    ("rng", str, "--rng", f"Shuffle convention: {_choices(RNG_NAMES)}. Default python."),
    (
        "seeding",
        str,
        "--seeding",
        f"{_choices(SEEDINGS)}: seed once, seed+epoch, torch's global generator "
        "(torch.manual_seed, a DataLoader base-seed draw each epoch), or a DataLoader's "
        "own generator (DataLoader(shuffle=True, generator=...)). Default once.",
    ),
    ("world_size", int, "--world-size", "Data-parallel ranks. Default 1."),
    (
        "grad_accum",
        int,
        ("--grad-accum", "--gradient-accumulation-steps"),
        "Micro-batches per rank per optimizer step. Default 1.",
    ),
    (
        "shard",
        str,
        "--shard",
        f"{_choices(SHARDS)}: how ranks split an epoch's batches (accelerate: strided, "
        "even batches, a short last step per epoch). Default strided.",
    ),
    ("first_step", int, "--first-step", "Number of the first optimizer step. Default 0."),
    ("epochs", int, "--epochs", "Epochs to replay. Default 1 (spikes: as many as the log needs)."),
    (
        "drop_last",
        bool,
        "--drop-last",
        "Drop each epoch's short last batch (DataLoader drop_last, dataloader_drop_last).",
    ),
    (
        "sampler_drop_last",
        bool,
        "--sampler-drop-last",
        "distributed: cut the epoch to a multiple of --world-size instead of padding it.",
    ),
    (
        "dropout",
        bool,
        "--dropout/--no-dropout",
        "Training draws from the global torch generator (dropout on CPU, a random "
        "collator). Not given: possibly; with --seeding global only epoch 0 is then "
        "determined.",
    ),
    ("data_seed", int, "--data-seed", "hf-trainer: the Trainer's data_seed (default: --seed)."),
    (
        "train_sampling_strategy",
        str,
        "--train-sampling-strategy",
        "hf-trainer: random (default) | group_by_length.",
    ),
    (
        "group_by_length",
        bool,
        "--group-by-length",
        "hf-trainer: the same as --train-sampling-strategy group_by_length.",
    ),
    (
        "allow_code",
        bool,
        "--allow-code",
        "Run the Python code a found dflash-diag.toml's strategy names (FILE.py:FUNC, "
        "module:FUNC); without it only a --strategy or a --config you name runs code.",
    ),
]


def schedule_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the schedule option group and ``--config`` to a command.

    The wrapped function gets ``schedule: dict[str, Any]`` (only ScheduleParams fields,
    ``None`` = not given) and ``config: Path | None`` in place of the flags.  Works
    with ``from __future__ import annotations`` in the command module.
    """
    sig = inspect.signature(func, eval_str=True)
    params = [p for p in sig.parameters.values() if p.name not in ("schedule",)]
    names = {p.name for p in params}
    extra: list[inspect.Parameter] = []
    if "config" not in names:
        extra.append(
            inspect.Parameter(
                "config",
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[
                    Path | None,
                    typer.Option(
                        "--config",
                        help="TOML file with a \\[schedule] section (default: dflash-diag.toml "
                        "beside the log, else the manifest, else in the working directory; "
                        "code it names runs only from a --config you name, or with "
                        "--allow-code).",
                        rich_help_panel=SCHEDULE_PANEL,
                    ),
                ],
            )
        )
    for name, typ, flag, help_text in _SCHEDULE_FLAGS:
        flags = (flag,) if isinstance(flag, str) else flag
        extra.append(
            inspect.Parameter(
                f"sched_{name}",
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[
                    typ | None,
                    typer.Option(*flags, help=help_text, rich_help_panel=SCHEDULE_PANEL),
                ],
            )
        )
    new_params = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        if p.kind is inspect.Parameter.VAR_KEYWORD
        else p
        for p in params
    ]
    new_sig = sig.replace(parameters=_ordered(new_params + extra))

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        schedule = {name: kwargs.pop(f"sched_{name}", None) for name, *_ in _SCHEDULE_FLAGS}
        return func(*args, schedule=schedule, **kwargs)

    wrapper.__signature__ = new_sig  # type: ignore[attr-defined]
    return wrapper


def _ordered(params: list[inspect.Parameter]) -> list[inspect.Parameter]:
    order = {
        inspect.Parameter.POSITIONAL_ONLY: 0,
        inspect.Parameter.POSITIONAL_OR_KEYWORD: 1,
        inspect.Parameter.VAR_POSITIONAL: 2,
        inspect.Parameter.KEYWORD_ONLY: 3,
        inspect.Parameter.VAR_KEYWORD: 4,
    }
    return sorted(params, key=lambda p: order[p.kind])


def parse_rank(value: str) -> int | str:
    """``"0"`` -> 0, ``"all"`` -> ``"all"``; anything else is a usage error."""
    from ..errors import InputError

    if value == "all":
        return "all"
    try:
        r = int(value)
    except ValueError:
        raise InputError(
            "--rank", f"not a rank: {value!r}", "give a number like 0, or 'all'"
        ) from None
    if r < 0:
        raise InputError("--rank", f"not a rank: {value!r}", "give a number like 0, or 'all'")
    return r


@contextmanager
def progress(description: str, enabled: bool = True) -> Iterator[Progress | None]:
    """A ``(done, total)`` callback drawing a progress bar on stderr.

    Yields None (no bar) when ``enabled`` is false (``--json``) or stderr is not a
    terminal, so logs and pipes stay clean.
    """
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TimeRemainingColumn

    from .consoles import err_console

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        TaskProgressColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


# -- the options a W&B / TensorBoard user expects: a step range, labels, smoothing, log y --

VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        help="Text: every spike's evidence, every row, the correlations and the variance "
        "proxies (the default shows the few that matter). --json and --html are always "
        "complete.",
    ),
]
StepsOpt = Annotated[
    str | None,
    typer.Option(
        "--steps",
        help="Only the rows of steps A to B, both included, as the log numbers them (A: or "
        ":B leave that end open), e.g. 200:300.",
        metavar="STEPS",
    ),
]
SmoothOpt = Annotated[
    float | None,
    typer.Option(
        "--smooth",
        help="Plots: draw the metric smoothed by an exponential moving average of weight "
        "ALPHA (0 <= ALPHA < 1, debiased as TensorBoard does; 0.6 is its default), the raw "
        "curve faint behind it. Only the picture: detection and every figure use the raw "
        "values.",
        metavar="ALPHA",
    ),
]
LogYOpt = Annotated[
    bool, typer.Option("--log-y", help="Plots: the metric on a logarithmic y axis.")
]


def parse_steps(text: str | None, flag: str = "--steps") -> tuple[int | None, int | None] | None:
    """``"200:300"`` -> ``(200, 300)``; ``"200:"`` -> ``(200, None)``; ``":300"`` -> ``(None,
    300)``; None -> None.  Both ends are included; a bad range is a usage error (exit 2).

    >>> parse_steps("200:300"), parse_steps(":5"), parse_steps(None)
    ((200, 300), (None, 5), None)
    """
    import re

    from ..errors import InputError

    if text is None:
        return None
    m = re.fullmatch(r"\s*(-?\d+)?\s*:\s*(-?\d+)?\s*", text)
    if m is None or (m.group(1) is None and m.group(2) is None):
        raise InputError(
            flag, f"not a step range: {text[:40]!r}", "give it as A:B, A: or :B, e.g. 200:300"
        )
    lo = int(m.group(1)) if m.group(1) is not None else None
    hi = int(m.group(2)) if m.group(2) is not None else None
    if lo is not None and hi is not None and hi < lo:
        raise InputError(
            flag, f"the range {text.strip()!r} ends before it starts", "give A:B with A <= B"
        )
    return lo, hi


def parse_smooth(alpha: float | None) -> float | None:
    """``--smooth ALPHA``: an EMA weight in ``[0, 1)`` (None: not given)."""
    import math

    from ..errors import InputError

    if alpha is not None and not (math.isfinite(alpha) and 0 <= alpha < 1):
        raise InputError(
            "--smooth", f"ALPHA must be in 0 <= ALPHA < 1, got {alpha:g}", "e.g. --smooth 0.6"
        )
    return alpha


class Covers(StrEnum):
    """``--covers``: what one logged point stands for (spikes, watch)."""

    window = "window"
    step = "step"


CoversOpt = Annotated[
    Covers,
    typer.Option(
        "--covers",
        help="With a point every N steps: 'window' (a mean over the N steps up to it) "
        "or 'step' (that step only).",
    ),
]


class Ground(StrEnum):
    """``--ground``: what the samples are tested on (spikes, samples)."""

    auto = "auto"
    inferred = "inferred"
    measured = "measured"


GroundOpt = Annotated[
    Ground,
    typer.Option(
        "--ground",
        help="What samples are tested on: 'auto' (their own losses where the recording "
        "measured them, else the logged points), 'inferred' (the logged points only: "
        "group testing) or 'measured' (their own losses; refused without them).",
    ),
]
MetricRankOpt = Annotated[
    str | None,
    typer.Option(
        "--metric-rank",
        help="Whose batches the logged metric describes: 'auto' (the pooled step or "
        "the rank that fits best; the default), 'all' (a mean over ranks, e.g. "
        "all-reduced) or a rank number (printed by that rank alone). Also "
        "metric_rank in \\[schedule].",
    ),
]
ForceOpt = Annotated[
    bool,
    typer.Option("--force", help="Attribute even when the replayed tokens mismatch."),
]


def parse_metric_rank(value: str) -> int | str:
    """``--metric-rank`` text -> ``"auto"``, ``"all"`` or a rank number."""
    from ..errors import InputError

    if value in ("auto", "all"):
        return value
    if value.isdigit():
        return int(value)
    raise InputError(
        "--metric-rank", f"not a rank: {value!r}", "give 'auto', 'all' or a rank number like 0"
    )
