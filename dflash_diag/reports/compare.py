"""``dflash-diag compare``: a run against its baselines."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..compare import Comparison

from .common import Stage, quiet


def compare_report(
    files: list[str],
    run: str | None = None,
    align: str = "step",
    metrics: list[str] | None = None,
    milestones: list[str] | None = None,
    at: tuple[int, ...] = (),
    warmup_steps: int | None = None,
    band_k: float = 3.0,
    window: int = 21,
    format: str | None = None,
    rank: int | str = 0,
    step_every: int | None = None,
    stage: Stage = quiet,
) -> Comparison:
    """Compare the last of ``files`` (or ``run``) with the others (``dflash-diag
    compare``): a :class:`~dflash_diag.compare.Comparison`.

    :param metrics: metric names (None: the defaults); ``milestones``: ``--milestones``
        texts (``0.1,0.3`` or ``loss=2,1.5``).
    """
    from ..compare import apply_step_every, compare_runs, parse_milestones
    from ..errors import InputError
    from ..logs import check_format, read_log

    paths = [str(f) for f in files] + ([str(run)] if run is not None else [])
    if len(paths) < 2:
        raise InputError(
            "compare",
            "needs at least one baseline and a run",
            "give BASELINE.log RUN.log (or FILES... --run RUN.log)",
        )
    fmt = check_format(format)
    levels = parse_milestones(milestones or [])
    logs = []
    with stage("reading logs") as bar:
        for i, path in enumerate(paths):
            logs.append(read_log(path, format=fmt, rank=rank))
            if bar is not None:
                bar(i + 1, len(paths))
    logs = apply_step_every(logs, step_every)
    with stage("comparing") as bar:
        return compare_runs(
            logs[:-1],
            logs[-1],
            align=align,
            metrics=metrics,
            milestones=levels,
            at=tuple(at),
            warmup_steps=warmup_steps,
            band_k=band_k,
            window=window,
            progress=bar,
        )
