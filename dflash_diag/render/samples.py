"""What ``dflash-diag samples`` shows: the samples named, the ground, the method; the JSON
document (:func:`samples_json`) and the text (:func:`render_text`)."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from ..spikes.culprits import FDR

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console

    from ..reports.samples import SamplesReport
    from ..samples.kinds import HighKind

#: Rows of the ranking the text shows by default, and the JSON holds (the whole table:
#: ``--to``).
TOP = 20


def samples_json(report: SamplesReport, top: int = TOP) -> dict[str, Any]:
    """The ``--json`` document: where the batches came from and on what ground, the
    method, the named samples, and the first ``top`` rows of the ranking."""
    from .spikes import ground_json

    r = report
    ctx = r.context
    check = r.composition.ground
    ev = r.findings.evidence
    rows = r.table.head(top).to_dict(orient="records")
    return {
        "log": ctx.log,
        "manifest": ctx.manifest,
        "composition": ctx.composition,
        "schedule_check": ground_json(check) if check else None,
        "ground": ev.ground,
        "basis": r.findings.basis,
        "method": ev.method,
        "separable": r.findings.separable,
        "n_samples": int(len(r.table)),
        "n_tested": int(ev.n_tested),
        "n_named": int(r.table["named"].sum()),
        "high_categories": [asdict(k) for k in r.high_kinds],
        "fdr": FDR,
        "ranking": rows,
        "written": r.written,
    }


def render_text(report: SamplesReport, console: Console, top: int = TOP) -> None:
    """The header, the answer in a sentence or two, the ranking's first ``top`` rows."""
    from rich.table import Table

    r = report
    ctx = r.context
    check = r.composition.ground
    t = r.table
    console.print(f"{ctx.log}: {r.detection.n_points} points of {r.detection.metric}")
    if ctx.composition:
        console.print(f"composition: recorded in {ctx.composition}", markup=False)
    if check is not None:
        g = check
        console.print(f"schedule check: {g.status}: {g.detail}", markup=False)
    console.print()
    for sentence in answer(report):
        console.print(sentence, markup=False)
    console.print()
    table = Table(title=f"the {min(top, len(t))} most suspect of {len(t)} samples")
    measured = r.findings.evidence.ground == "measured"
    cols = ["sample", "length", "category", "seen", "high", "z tested", "q", "named"]
    if measured:
        cols.insert(5, "own loss")
    for col in cols:
        table.add_column(col, justify="left" if col in ("category", "named") else "right")
    for row in t.head(top).itertuples(index=False):
        cells = [
            str(row.sample_id),
            str(row.length),
            "" if row.category is None else str(row.category),
            str(row.appearances),
            str(row.high),
            _f(row.score),
            _f(row.q),
            ("yes" if row.named else "")
            + (f" (group of {row.group_size})" if row.group_size > 1 else ""),
        ]
        if measured:
            cells.insert(5, _nats(row.measured_excess))
        table.add_row(*cells)
    console.print(table)
    if measured:
        console.print(
            "own loss: its loss over its batch mates' median, nats a token (median over "
            "its batches, measured)",
            markup=False,
            style="dim",
        )
    console.print(f"method: {r.findings.evidence.method}", markup=False, style="dim")
    if r.written:
        console.print(f"every sample written to {r.written}", markup=False)


def high_kind_sentences(kinds: Sequence[HighKind]) -> list[str]:
    """A sentence a category whose samples are high as a whole."""
    return [
        f"Category {k.name} is high as a whole: its {k.n} samples' own loss is "
        f"{k.median_nats:+.2g} nats a token over their batch mates (median), the other "
        f"categories' {k.others_nats:+.2g}. Each sample is compared with its own "
        "category, so none is named from within it: the category itself is what stands out."
        for k in kinds
    ]


def answer(report: SamplesReport) -> list[str]:
    """One or two sentences: which samples are named, on what ground, or why none is."""
    r = report
    t = r.table
    named = t[t["named"]]
    note = r.findings.note()
    if note:
        why = (
            "each sample is in one logged batch only (the batches known cover one pass over "
            "the data)"
            if r.findings.once()
            else "every batch is a fixed group of samples that always travel together"
        )
        return [f"No sample can be named: {why}, so the batch is the unit (see spikes)."]
    if named.empty:
        tested = int(r.findings.evidence.n_tested)
        return [
            f"No sample is named: of {tested} tested, none makes its batches high wherever it "
            f"goes (false-discovery rate {FDR:.0%}; tested on {r.findings.basis}).",
            *high_kind_sentences(r.high_kinds),
        ]
    ids = ", ".join(str(x) for x in named["sample_id"].head(10))
    more = f" and {len(named) - 10} more" if len(named) > 10 else ""
    verb = (
        "samples make their batches high wherever they go"
        if len(named) > 1
        else ("sample makes its batches high wherever it goes")
    )
    out = [
        f"{len(named)} {verb}: {ids}{more} (false-discovery rate {FDR:.0%}; tested on "
        f"{r.findings.basis}).",
        "Each one's evidence is its row below; a group is named whole, never one member.",
    ]
    check = r.composition.ground
    if check is not None and not check.ids_confirmed:
        out.append(
            f"These ids are the manifest's rows as the {check.status} schedule assigns them: "
            "nothing confirmed that the run's batches held them."
        )
    return [*out, *high_kind_sentences(r.high_kinds)]


def _named(named: bool, size: int) -> str:
    return ("yes" if named else "") + (f" (group of {size})" if size > 1 else "")


def _nats(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:+.2g}"


def _f(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:.2g}"
