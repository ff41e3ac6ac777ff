"""Schedule options from flags and a TOML file; flags win.

The file has a ``[schedule]`` section whose keys are the :class:`ScheduleParams` field
names (``token_budget`` or ``token-budget`` both work) plus ``manifest = "..."``,
resolved relative to the file.  Without ``--config``, ``dflash-diag.toml`` is looked for
beside the log, then in the working directory.

Example ``dflash-diag.toml``::

    [schedule]
    manifest = "manifest.parquet"
    strategy = "sorted-greedy"
    seed = 1234
    token_budget = 65536
    max_seq_len = 8192
    world_size = 8
    first_step = 1
    epochs = 6

A preset names a trainer and takes its own settings (:mod:`dflash_diag.schedule.presets`)::

    [schedule]
    manifest = "lengths.parquet"
    preset = "hf-trainer"
    per_device_train_batch_size = 8
    gradient_accumulation_steps = 1
    seed = 42
    train_sampling_strategy = "group_by_length"
    dropout = false
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..records import ScheduleParams
from .presets import PRESET_KEYS, apply_preset

CONFIG_NAME = "dflash-diag.toml"

#: Keys of ``[schedule]`` that are not ScheduleParams fields.
EXTRA_KEYS = ("manifest", "length_column", "category_column", "metric_rank")


@dataclass(frozen=True)
class ResolvedSchedule:
    """What the flags and the config file said together.

    :param params: the schedule to replay.
    :param manifest: the manifest path, from the flag or the file (None: not given).
    :param config_path: the TOML file used, or None.
    :param length_column: the manifest's length column, if named.
    :param category_column: the manifest's category column, if named.
    :param metric_rank: whose batches the logged loss/acc describe: ``"all"`` (averaged
        over ranks, e.g. all-reduced), a rank number (printed by that rank alone, e.g.
        rank 0 without an all-reduce), ``"auto"`` (let the analysis find out) or None
        (not said).
    :param given: the ScheduleParams fields that were set by a flag or the file (the
        rest are defaults), so a caller can tell "seed 0" from "no seed given".
    """

    params: ScheduleParams
    manifest: Path | None
    config_path: Path | None
    length_column: str | None = None
    category_column: str | None = None
    metric_rank: int | str | None = None
    given: frozenset[str] = frozenset()


def find_config(config: str | Path | None, near: str | Path | None) -> Path | None:
    """The config file to use: ``config`` if given, else ``dflash-diag.toml`` beside
    ``near`` (a log file), else in the working directory, else None."""
    if config is not None:
        p = Path(config)
        if not p.is_file():
            raise InputError(str(p), "config file not found", "check the --config path")
        return p
    candidates = []
    if near is not None and str(near) != "-":
        candidates.append(Path(near).parent / CONFIG_NAME)
    candidates.append(Path.cwd() / CONFIG_NAME)
    for c in candidates:
        if c.is_file():
            return c
    return None


def read_config(path: Path) -> dict[str, Any]:
    """The ``[schedule]`` table of ``path`` with keys in snake_case."""
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except tomllib.TOMLDecodeError as e:
        raise InputError(str(path), f"not valid TOML ({e})", "fix the file") from None
    except OSError as e:
        raise InputError(str(path), f"cannot read ({e.strerror})", "check the path") from None
    section = doc.get("schedule")
    if section is None:
        raise InputError(
            str(path), "no [schedule] section", "put the schedule options under [schedule]"
        )
    if not isinstance(section, dict):
        raise InputError(str(path), "[schedule] is not a table", "write it as a TOML table")
    out = {str(k).replace("-", "_"): v for k, v in section.items()}
    allowed = set(ScheduleParams.field_names()) | set(EXTRA_KEYS) | set(PRESET_KEYS)
    unknown = sorted(set(out) - allowed)
    if unknown:
        raise InputError(
            str(path),
            f"unknown keys in [schedule]: {', '.join(unknown)}",
            f"choose from {', '.join(sorted(allowed))}",
        )
    return out


def parse_buckets(text: str | list[int] | tuple[int, ...]) -> tuple[int, ...]:
    """``"0,770,1216"`` (or a list) -> ``(0, 770, 1216)``."""
    items: list[int | str]
    if isinstance(text, (list, tuple)):
        items = list(text)
    else:
        items = [t for t in str(text).replace(" ", "").split(",") if t]
    try:
        return tuple(int(float(str(t).replace("_", ""))) for t in items)
    except ValueError:
        raise InputError(
            "--buckets", f"not a list of numbers: {text!r}", "give edges like 0,770,1216,8192"
        ) from None


def resolve_schedule(
    flags: dict[str, Any],
    config: str | Path | None = None,
    near: str | Path | None = None,
    manifest: str | Path | None = None,
) -> ResolvedSchedule:
    """Merge a config file and flags (flags win) into a :class:`ResolvedSchedule`.

    :param flags: ScheduleParams fields (and preset keys, :data:`PRESET_KEYS`) given on
        the command line; ``None`` = not given.
    :param config: ``--config`` path, or None to look for ``dflash-diag.toml``.
    :param near: the log file whose folder may hold ``dflash-diag.toml``.
    :param manifest: ``--manifest`` path given on the command line, if any.
    """
    path = find_config(config, near)
    values: dict[str, Any] = read_config(path) if path is not None else {}
    file_manifest = values.pop("manifest", None)
    length_column = values.pop("length_column", None)
    category_column = values.pop("category_column", None)
    metric_rank = values.pop("metric_rank", None)
    if metric_rank is not None and not (
        metric_rank in ("all", "auto") or (isinstance(metric_rank, int) and metric_rank >= 0)
    ):
        raise InputError(
            str(path),
            f"metric_rank must be a rank number, 'all' or 'auto', got {metric_rank!r}",
            "fix [schedule] metric_rank",
        )
    in_file = "preset" in values
    for k, v in flags.items():
        if v is not None:
            values[k] = v
    where = str(path) if in_file and flags.get("preset") is None else "--preset"
    values = apply_preset(values, where)
    if "buckets" in values:
        values["buckets"] = parse_buckets(values["buckets"])
    fields = set(ScheduleParams.field_names())
    kwargs = {k: v for k, v in values.items() if k in fields}
    try:
        params = ScheduleParams(**kwargs)
    except TypeError as e:
        raise InputError(
            str(path) if path else "", f"bad schedule option ({e})", "check the types"
        ) from None
    if manifest is not None:
        mpath: Path | None = Path(manifest)
    elif file_manifest is not None and path is not None:
        mpath = path.parent / str(file_manifest)
    else:
        mpath = None
    return ResolvedSchedule(
        params=params,
        manifest=mpath,
        config_path=path,
        length_column=length_column,
        category_column=category_column,
        metric_rank=metric_rank,
        given=frozenset(kwargs),
    )
