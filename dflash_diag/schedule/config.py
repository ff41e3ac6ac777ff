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

import difflib
import math
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..data import ScheduleParams, value_problem
from ..errors import InputError
from ..storage import is_uri
from .presets import PRESET_KEYS, apply_preset

CONFIG_NAME = "dflash-diag.toml"

#: Keys of ``[schedule]`` that are not ScheduleParams fields.
EXTRA_KEYS = ("manifest", "length_column", "category_column", "metric_rank", "allow_code")


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
    :param from_flags: the ScheduleParams fields set by a flag (they win over the file).
    :param found: how the config was found (``"named"`` with ``--config``, ``"beside
        the log"``, ``"beside the manifest"``, ``"in the working directory"``), or None.
    :param code: the Python file (or module) the strategy runs, or None.
    """

    params: ScheduleParams
    manifest: Path | None
    config_path: Path | None
    length_column: str | None = None
    category_column: str | None = None
    metric_rank: int | str | None = None
    given: frozenset[str] = frozenset()
    from_flags: frozenset[str] = frozenset()
    found: str | None = None
    code: str | None = None

    def origin(self, name: str) -> str:
        """Where field ``name`` came from: ``--flag``, the config's path, or ``default``.

        >>> ResolvedSchedule(ScheduleParams(), None, None).origin("seed")
        'default'
        """
        if name in self.from_flags:
            return "--" + name.replace("_", "-")
        if name in self.given and self.config_path is not None:
            return str(self.config_path)
        return "default"

    @property
    def notes(self) -> tuple[str, ...]:
        """Lines for the output: the values that came from flags, and the code the
        strategy runs (the config's own line is :attr:`described`)."""
        lines = []
        if self.config_path is not None and self.found != "named":
            lines.append(f"config: {self.described}; give --config FILE to use another")
        return (*lines, *self.value_notes)

    @property
    def value_notes(self) -> tuple[str, ...]:
        """:attr:`notes` but the config's line: for a header that names the config
        itself (with :attr:`found`)."""
        lines = []
        if self.from_flags:
            shown = ", ".join(self._flag(k) for k in sorted(self.from_flags))
            lines.append(f"from flags (they win over any config): {shown}")
        if self.code is not None:
            lines.append(f"runs Python code: {self.code} (strategy {self.params.strategy})")
        return tuple(lines)

    def _flag(self, name: str) -> str:
        """The flag that set field ``name``, as given: ``--seed``, ``--no-dropout``."""
        off = getattr(self.params, name, None) is False
        return ("--no-" if off else "--") + name.replace("_", "-")

    @property
    def described(self) -> str:
        """The config used and how it was found, in words.

        >>> ResolvedSchedule(ScheduleParams(), None, Path("a.toml"), found="named").described
        'a.toml (named with --config)'
        """
        if self.config_path is None:
            return "none (flags and defaults)"
        how = "named with --config" if self.found == "named" else f"found {self.found}"
        return f"{self.config_path} ({how})"


def locate_config(
    config: str | Path | None, near: str | Path | Sequence[str | Path | None] | None
) -> tuple[Path | None, str | None]:
    """The config file to use and how it was found, by the one rule: ``config`` if given
    (``"named"``); else ``dflash-diag.toml`` beside each of ``near`` in order (the log,
    then the manifest); else in the working directory; else ``(None, None)``."""
    if config is not None:
        p = Path(config)
        if not p.is_file():
            raise InputError(str(p), "config file not found", "check the --config path")
        return p, "named"
    places = [near] if near is None or isinstance(near, (str, Path)) else list(near)[:2]
    roles = ("beside the log", "beside the manifest")
    candidates: list[tuple[Path, str]] = []
    for k, place in enumerate(places):
        if place is not None and str(place) != "-":
            folder = Path(place) if Path(place).is_dir() else Path(place).parent
            role = roles[k] if len(places) > 1 else f"beside {Path(place).name}"
            candidates.append((folder / CONFIG_NAME, role))
    candidates.append((Path.cwd() / CONFIG_NAME, "in the working directory"))
    for c, role in candidates:
        if c.is_file():
            return c, role
    return None, None


def find_config(config: str | Path | None, near: str | Path | None) -> Path | None:
    """The config file to use (:func:`locate_config` without the how)."""
    return locate_config(config, near)[0]


def read_config(path: Path) -> dict[str, Any]:
    """The ``[schedule]`` table of ``path`` with keys in snake_case, every value checked
    (:func:`check_value`): a value of the wrong type or size is an InputError naming the
    file and the key, before anything is computed from it."""
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except RecursionError:
        raise InputError(
            str(path), "nested too deep to read", "a [schedule] table holds plain values"
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(str(path), f"not valid TOML ({e})", "fix the file") from None
    except UnicodeDecodeError as e:
        raise InputError(
            str(path), f"not UTF-8 text (byte {e.start})", "save the file as UTF-8"
        ) from None
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
        close = [c for k in unknown for c in difflib.get_close_matches(k, sorted(allowed), n=1)]
        hint = f"did you mean {close[0]}?" if close else "the keys are the schedule flags' names"
        names = ", ".join(unknown)
        names = names if len(names) <= 80 else names[:77] + "..."
        raise InputError(str(path), f"unknown keys in [schedule]: {names}", hint)
    return {key: check_value(path, key, value) for key, value in out.items()}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_value(path: Path, key: str, value: Any) -> Any:
    """``value`` of ``[schedule] key`` as ScheduleParams takes it, or an InputError
    naming ``path`` and ``key`` (``epochs = "8"``, ``grad_accum = 9223372036854775807``,
    ``seed = {a = 1}``).

    >>> try:
    ...     check_value(Path("c.toml"), "epochs", "8")
    ... except InputError as e:
    ...     print(e.what)
    [schedule] epochs must be a whole number, got '8'
    """
    if key == "buckets":
        value = parse_buckets(value, f"{path}: [schedule] buckets")
    if key == "metric_rank":
        problem = _rank_problem(value)
    elif key == "allow_code":
        problem = None if isinstance(value, bool) else f"must be true or false, got {_shown(value)}"
    elif key in EXTRA_KEYS:
        problem = None if isinstance(value, str) and value else f"must be text, got {_shown(value)}"
    else:
        problem = value_problem(key, value)
    if problem is not None:
        raise InputError(str(path), f"[schedule] {key} {problem}", "fix it in the file")
    return value


def _rank_problem(value: Any) -> str | None:
    if value in ("all", "auto"):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2**20:
        return None
    return f"must be a rank number, 'all' or 'auto', got {_shown(value)}"


def parse_buckets(text: Any, where: str = "--buckets") -> tuple[int, ...]:
    """``"0,770,1216"`` (or a list) -> ``(0, 770, 1216)``; ``1e3`` and ``1_000`` are
    1000.  An InputError (from ``where``) for anything but whole numbers."""
    items: list[Any]
    if isinstance(text, (list, tuple)):
        items = list(text)
    elif isinstance(text, str):
        items = [t for t in text.replace(" ", "").split(",") if t]
    else:
        items = [text]
    out = []
    for t in items:
        number = _whole(t)
        if number is None:
            raise InputError(
                where,
                f"not a list of numbers: {_shown(text)}",
                "give edges like 0,770,1216,8192",
            )
        out.append(number)
    return tuple(out)


def _whole(item: Any) -> int | None:
    """``item`` as an int if it is a whole number (``770``, ``"770"``, ``"1e3"``)."""
    if isinstance(item, bool):
        return None
    if isinstance(item, int):
        return item
    if not isinstance(item, (str, float)):
        return None
    try:
        number = float(str(item).replace("_", ""))
    except ValueError:
        return None
    if not math.isfinite(number) or number != int(number) or abs(number) > 2**53:
        return None
    return int(number)


def resolve_schedule(
    flags: dict[str, Any],
    config: str | Path | None = None,
    near: str | Path | Sequence[str | Path | None] | None = None,
    manifest: str | Path | None = None,
) -> ResolvedSchedule:
    """Merge a config file and flags (flags win) into a :class:`ResolvedSchedule`.

    :param flags: ScheduleParams fields (and preset keys, :data:`PRESET_KEYS`) given on
        the command line; ``None`` = not given.  ``allow_code: True`` is ``--allow-code``.
    :param config: ``--config`` path, or None to look for ``dflash-diag.toml``.
    :param near: where to look for ``dflash-diag.toml`` (:func:`locate_config`): the log,
        or ``(log, manifest)``.
    :param manifest: ``--manifest`` path given on the command line, if any.
    :raises InputError: a bad file or value; code named by a config that was found.
    """
    flags = dict(flags)
    allow_flag = bool(flags.pop("allow_code", None))
    path, found = locate_config(config, near)
    values: dict[str, Any] = read_config(path) if path is not None else {}
    file_manifest = values.pop("manifest", None)
    length_column = values.pop("length_column", None)
    category_column = values.pop("category_column", None)
    metric_rank = values.pop("metric_rank", None)
    allow_file = bool(values.pop("allow_code", False))
    in_file = "preset" in values
    from_flags = {k for k, v in flags.items() if v is not None}
    for k in from_flags:
        values[k] = flags[k]
    where = str(path) if in_file and flags.get("preset") is None else "--preset"
    values = apply_preset(values, where)
    if "buckets" in values:
        values["buckets"] = parse_buckets(values["buckets"])
    fields = set(ScheduleParams.field_names())
    kwargs = {k: v for k, v in values.items() if k in fields}
    code = None
    if ":" in str(kwargs.get("strategy", "")):
        named = "strategy" in from_flags
        kwargs["strategy"], code = check_code(
            str(kwargs["strategy"]), path, found, named, allow_flag, allow_file
        )
    try:
        params = ScheduleParams(**kwargs)
    except TypeError as e:
        raise InputError(
            str(path) if path else "", f"bad schedule option ({e})", "check the types"
        ) from None
    if manifest is not None:
        mpath: Path | None = Path(manifest)
    elif file_manifest is not None and path is not None:
        given = str(file_manifest)
        # (a URI is where it says; a path is relative to the config)
        mpath = Path(given) if is_uri(given) else path.parent / given
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
        from_flags=frozenset(from_flags & fields),
        found=found,
        code=code,
    )


def check_code(
    spec: str,
    path: Path | None,
    found: str | None,
    named: bool,
    allow_flag: bool = False,
    allow_file: bool = False,
) -> tuple[str, str]:
    """A strategy that runs Python code (``FILE.py:FUNC`` / ``module:FUNC``), allowed or
    refused: ``(spec, the file or module it runs)``.

    Allowed when ``named`` on the command line, when the config was named with
    ``--config`` (``found == "named"``), or with ``--allow-code`` (``allow_flag``);
    ``allow_code = true`` (``allow_file``) counts only in a named config.  A FILE.py
    from a config is taken relative to the config's folder.

    :raises InputError: code from a config that was found, not named (one line, saying
        how to opt in).
    """
    target, _, func = spec.rpartition(":")
    is_file = target.endswith(".py") or "/" in target or "\\" in target
    if not named and path is not None and is_file and not Path(target).is_absolute():
        target = str(path.parent / target)
        spec = f"{target}:{func}"
    runs = target if is_file else f"module {target}"
    if named or allow_flag or found == "named":
        return spec, runs
    # (allow_code = true in a found file does not count: the file is what is not trusted)
    also = " (its allow_code counts only in a config named with --config)" if allow_file else ""
    raise InputError(
        str(path),
        f"[schedule] strategy = {_shown(spec)} runs Python code ({runs}), and this config "
        f"was found {found}, not named{also}",
        f"to run it, name the config with --config {path} or add --allow-code",
    )
