"""Which composition a command's options name: :func:`resolve`, the one rule.

- ``--composition FILE``: that recording (schedule flags beside it are refused:
  nothing is replayed);
- else the recording beside the log (``run.log`` -> ``run.batches``, or rank files
  ``run.rank*.batches``), unless schedule flags name a schedule to replay;
- else, with a manifest (flag or config), the schedule of the flags and the config
  replayed from it;
- else none: the command works from the log alone.

The schedule itself is merged by :func:`~dflash_diag.schedule.config.resolve_schedule`
(flags win over the config's ``[schedule]``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..data import display_path
from ..errors import InputError

if TYPE_CHECKING:
    from ..schedule.config import ResolvedSchedule
    from .source import Source


@dataclass(frozen=True)
class Request:
    """What a command was told about the batches.

    :param log: the log the composition is lined up with (``-``: standard input;
        None: no log, as ``batches``).
    :param flags: schedule flags (ScheduleParams fields; None = not given).
    :param config: ``--config`` (None: ``dflash-diag.toml`` looked up beside ``near``).
    :param manifest: ``--manifest`` / the ``batches`` argument.
    :param composition: ``--composition`` (a recording).
    :param force: attribute on a composition whose tokens disagree (``refuted``).
    :param columns: the manifest's length and category columns from flags (None: the
        config's, else found).
    :param near: ``(log, manifest)`` beside which a ``dflash-diag.toml`` is looked for
        (:func:`~dflash_diag.schedule.config.find_config`; default: this request's).
    :param live: the recording is read again as the run writes it (``watch``).
    :param flags_name_schedule: schedule flags name the schedule to replay, so they
        are refused beside ``--composition`` and make a recording found beside the log
        unused (``spikes``, ``watch``); False: they only set the parameters of what is
        replayed beside a recording (``batches --compare``).
    """

    log: str | None = None
    flags: dict[str, Any] = field(default_factory=dict)
    config: str | Path | None = None
    manifest: str | Path | None = None
    composition: str | Path | None = None
    force: bool = False
    columns: tuple[str | None, str | None] = (None, None)
    near: tuple[str | Path | None, str | Path | None] | None = None
    live: bool = False
    flags_name_schedule: bool = True


@dataclass(frozen=True)
class Resolution:
    """:func:`resolve`'s answer.

    :param schedule: the merged schedule (flags, config).
    :param source: where the composition comes from (None: none named).
    :param notes: what the reader should know (a recording found and not used ...).
    :param found: the recording was found beside the log (not named).

    The schedule's own provenance (the values from flags, the code it runs) is
    ``schedule.value_notes``; a report says it with its header.
    """

    schedule: ResolvedSchedule
    source: Source | None
    notes: tuple[str, ...] = ()
    found: bool = False

    @property
    def recorded(self) -> bool:
        """The composition is a recording."""
        return self.source is not None and self.source.kind == "recorded"

    @property
    def inputs(self) -> tuple[Path, ...]:
        """Every file the composition is read from, named or found: the config, the
        manifest, the recording (a run's rank files each); an output must be none of
        them (:func:`~dflash_diag.outpath.check_output_path`'s ``protect``)."""
        from ..record.recording import recording_files

        found = [self.schedule.config_path, self.schedule.manifest]
        path = getattr(self.source, "path", None) if self.recorded else None
        if path is not None:
            found += recording_files(Path(path))
        return tuple(Path(f) for f in found if f is not None)


def resolve(req: Request) -> Resolution:
    """The composition ``req`` names (module docstring); nothing is read yet but the
    config (a source reads its inputs on :meth:`~.source.Source.load`)."""
    from ..schedule.config import resolve_schedule
    from .ground import schedule_source
    from .recorded import RecordedSource
    from .replayed import ReplayedSource

    near = req.near if req.near is not None else (req.log, req.manifest)
    resolved = resolve_schedule(req.flags, req.config, near=near, manifest=req.manifest)
    columns = (
        req.columns[0] or resolved.length_column,
        req.columns[1] or resolved.category_column,
    )
    flags = req.flags if req.flags_name_schedule else {}
    recording, notes = recording_to_use(req.composition, req.log, flags)
    source: Source | None = None
    if recording is not None:
        path, named_by = recording
        source = RecordedSource(
            path, named_by, resolved.manifest, columns, req.force, live=req.live
        )
    elif resolved.manifest is not None:
        named_by = schedule_source(
            resolved.config_path, req.config, bool(resolved.given), req.log or ""
        )
        source = ReplayedSource(
            resolved.params,
            resolved.manifest,
            columns,
            named_by=named_by,
            named="strategy" in resolved.given,
            force=req.force,
            path=req.log or "",
            epochs_given="epochs" in resolved.given,
        )
    found = recording is not None and req.composition is None
    return Resolution(resolved, source, notes, found)


def recording_to_use(
    composition: str | Path | None, log: str | None, flags: dict[str, Any]
) -> tuple[tuple[Path, str] | None, tuple[str, ...]]:
    """The recording to line the log up with, as ``(path, where it came from in
    words)``, and notes: ``--composition`` (refused beside schedule flags: nothing is
    replayed), else the one beside the log unless schedule flags name a schedule to
    replay."""
    from ..record import find_recording

    named = sorted(k for k, v in flags.items() if v is not None)
    if composition is not None:
        if named:
            shown = ", ".join("--" + k.replace("_", "-") for k in named)
            raise InputError(
                "--composition",
                f"a recorded composition is not replayed, so {shown} cannot apply",
                "drop the schedule flags, or drop --composition to replay the schedule",
            )
        return (Path(composition), display_path(composition)), ()
    found = find_recording(log) if log not in (None, "-") else None
    if found is None:
        return None, ()
    if named:
        note = (
            f"the batches recorded in {display_path(found)} are not used: schedule flags "
            "name a schedule to replay (drop them to use the recording)"
        )
        return None, (note,)
    return (Path(found), f"{display_path(found)} (found beside the log)"), ()
