"""Render `dflash-diag spikes` results: JSON document, rich text, plot.

Nothing here computes a statistic: the numbers come from
:mod:`dflash_diag.spikes` and :mod:`dflash_diag.spikes.variance`; this module picks words and
lays them out.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..reports import Context
from ..spikes.detect import NearMiss
from ..spikes.neighbours import NEIGHBOURS

if TYPE_CHECKING:
    from rich.console import Console

    from ..reports import MicroBatch, SpikesReport
    from ..spikes.attribute import Attribution, SpikeEvidence
    from ..spikes.culprits import SampleFindings
    from ..spikes.detect import Detection
    from ..spikes.variance import VarianceReport

#: Spikes in the default text table (``--verbose`` shows every one); the summary sentences
#: (text, JSON and HTML alike) name these, the others counted.
DEFAULT_ROWS = 8
#: Spikes whose evidence the default text gives (the first of :func:`ranked_spikes`).
DEFAULT_EVIDENCE = 3
#: Below this many columns the spike table is compact (see :func:`render_text`).
COMPACT_WIDTH = 100
#: The columns a compact table leaves out.
NARROW_DROPS = ("phase", "baseline")
#: Fewer logged points than this: say "not enough data" rather than "no spikes".
FEW_POINTS = 20


def _num(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _spike_json(s: SpikeEvidence) -> dict[str, Any]:
    e = s.event
    return {
        "step": e.peak_step,
        "start_step": e.start_step,
        "end_step": e.end_step,
        "kind": e.kind,
        "n_points": e.n_points,
        "duration_steps": e.duration_steps,
        "value": e.value,
        "baseline": e.baseline,
        "z": e.z,
        "ratio": e.ratio,
        "rise": s.rise,
        "lr": e.lr,
        "phase": e.phase,
        "grad_norm": e.grad_norm,
        "grad_norm_ratio": e.grad_norm_ratio,
        "verdict": s.verdict,
        "evidence": list(s.reasons),
        "predicted": s.predicted,
        "similar": s.similar,
        "explained": s.explained,
        "batch": dict(s.batch),
        "percentiles": dict(s.percentiles),
        "ranks": list(s.ranks),
        "recurrences": [asdict(r) for r in s.recurrences],
        "culprits": [asdict(c) for c in s.culprits],
    }


#: Named samples listed in the JSON's ``attribution.samples.named`` (all: ``samples``).
NAMED_IN_JSON = 100


def findings_json(findings: SampleFindings | None) -> dict[str, Any] | None:
    """``attribution.samples``: how samples were tested and the ones named (the first
    :data:`NAMED_IN_JSON`; every sample's evidence: ``dflash-diag samples --to``)."""
    if findings is None:
        return None
    ev = findings.evidence
    named = findings.named.head(NAMED_IN_JSON)
    return {
        "ground": ev.ground,
        "basis": findings.basis,
        "method": ev.method,
        "separable": findings.separable,
        "n_tested": int(ev.n_tested),
        "n_named": int(len(findings.named)),
        "named": [
            {
                "unit": str(r.unit),
                "members": [findings.sample_id(int(x)) for x in r.members],
                "appearances": int(r.appearances),
                "high": int(r.high),
                "score": float(r.score),
                "excess": float(r.excess),
                "q": float(r.q),
            }
            for r in named.itertuples(index=False)
        ],
    }


def _batches_json(
    samples: dict[int, tuple[MicroBatch, ...]], s: SpikeEvidence
) -> list[dict[str, Any]]:
    return [asdict(b) for b in samples.get(s.event.peak_step, ())]


def to_json(report: SpikesReport) -> dict[str, Any]:
    """The ``--json`` document (snake_case keys; NaN becomes null in ``dumps``).  Each
    spike has ``batches``: its micro-batches (``step, rank, micro, sample_ids``) when a
    composition was lined up.  ``label`` is ``--label`` (or null); ``steps_shown`` is
    ``--steps`` as ``[first, last]`` (null: an open end; the whole key null: every step),
    and then ``spikes`` holds the spikes of that range only."""
    r = report
    ctx, detection, spikes = r.context, r.detection, r.spikes
    attribution, variance, samples = r.attribution, r.variance, r.samples or None
    d = detection
    att: dict[str, Any] | None = None
    check = None
    if attribution is not None:
        m = attribution.model
        att = {
            "r2": m.r2 if m else None,
            "r2_cv": m.r2_cv if m else None,
            "r2_quiet": m.r2_quiet if m else None,
            "r2_similar": attribution.r2_similar,
            "r2_cv_folds": list(m.r2_cv_folds) if m else [],
            "n": m.n if m else 0,
            "n_outliers": m.n_outliers if m else 0,
            "model": {"features": list(m.features), "coef": list(m.coef)} if m else None,
            "covers": attribution.covers,
            "metric_rank": "all" if attribution.metric_rank is None else attribution.metric_rank,
            "rank_scores": dict(attribution.rank_scores),
            "samples": findings_json(attribution.samples),
            "high_categories": [asdict(k) for k in attribution.high_kinds],
            "correlations": {
                c.feature: {
                    "spearman": c.spearman,
                    "p": c.spearman_p,
                    "spearman_ci": c.spearman_ci,
                    "pearson": c.pearson,
                    "pearson_p": c.pearson_p,
                    "pearson_ci": c.pearson_ci,
                    "n": c.n,
                }
                for c in attribution.correlations
            },
        }
        if attribution.schedule_check is not None:
            check = ground_json(attribution.schedule_check)
    return {
        "log": ctx.log,
        "format": ctx.log_format,
        "config": ctx.config,
        "manifest": ctx.manifest,
        "schedule": ctx.schedule,
        "composition": ctx.composition,
        "epochs_replayed": ctx.epochs,
        "metric": d.metric,
        "detector": d.detector,
        "window": d.window,
        "threshold": d.threshold,
        "min_rise": d.min_rise if d.detector == "robust" else None,
        "n_points": d.n_points,
        "expected_false_events": _num(d.expected_false_events),
        "false_events_basis": d.false_events_basis or None,
        "log_interval": d.log_interval,
        "covers": d.covers,
        "step_source": ctx.step_source,
        "label": ctx.label,
        "steps_shown": list(ctx.steps) if ctx.steps is not None else None,
        "schedule_check": check,
        "spikes": [
            _spike_json(s)
            | {"ground": ground_of(attribution)}
            | (
                {"batches": [asdict(b) for b in samples.get(s.event.peak_step, ())]}
                if samples is not None
                else {}
            )
            for s in spikes
        ],
        "below_cut": [asdict(m) for m in r.below_cut],
        "attribution": att,
        "variance": asdict(variance) if variance is not None else None,
        "summary": summary(d, spikes, attribution, variance, ctx.line_order),
        "notes": [*ctx.notes, *(attribution.notes if attribution is not None else ())],
    }


#: Sample ids shown per micro-batch in the text (all are in the JSON and the HTML).
FIRST_IDS = 5
#: Micro-batches listed per spike in the text.
FIRST_MICRO = 3


def samples_line(batches: tuple[MicroBatch, ...], confirmed: bool = True) -> str:
    """``  samples: rank 0 micro 0: 17, 4, 9 (+5 more); ...`` -- the first
    :data:`FIRST_IDS` ids of the first :data:`FIRST_MICRO` micro-batches; not
    ``confirmed``: the ids are the manifest's rows as the replay assigns them, which
    nothing confirmed, and the line says so."""
    parts = []
    for b in batches[:FIRST_MICRO]:
        ids = ", ".join(str(i) for i in b.sample_ids[:FIRST_IDS])
        more = len(b.sample_ids) - FIRST_IDS
        where = f"step {b.step} " if len({x.step for x in batches}) > 1 else ""
        parts.append(
            f"{where}rank {b.rank} micro {b.micro}: {ids}"
            + (f" (+{more} more)" if more > 0 else "")
        )
    rest = len(batches) - FIRST_MICRO
    tail = f"; {rest} more micro-batches (--json, --html)" if rest > 0 else ""
    head = "  sample ids: " if confirmed else "  unconfirmed ids: "
    return head + "; ".join(parts) + tail


#: The spike table's columns (the first is "event" for logs numbered by line).
SPIKE_COLUMNS = ("step", "value", "baseline", "z", "rise", "phase", "lr", "gn x", "verdict")


def spike_row(s: SpikeEvidence, marked: str = "") -> tuple[str, ...]:
    """One spike's cells of the table (:data:`SPIKE_COLUMNS`); ``marked`` follows the
    verdict (e.g. `` (given)``)."""
    e = s.event
    step = str(e.peak_step) if e.n_points == 1 else f"{e.peak_step} ({e.start_step}-{e.end_step})"
    return (
        step,
        _f(e.value, ".4g"),
        _f(e.baseline, ".4g"),
        _f(e.z, ".1f"),
        _f(e.ratio - 1, "+.0%") if math.isfinite(e.ratio) else "-",
        e.phase,
        _f(e.lr),
        _f(e.grad_norm_ratio, ".1f"),
        s.verdict + marked,
    )


def batch_line(s: SpikeEvidence, full: bool = True) -> str:
    """``  batch: 8 samples; mean length 8192 (percentile 100); ...``: the spike's batch,
    the composition model's prediction and where the batch came back ("" without one);
    without ``full``, the batch alone (its reasons already name the rest)."""
    if not s.batch:
        return ""
    p = s.percentiles
    parts = [
        f"{int(s.batch['n_samples'])} sample{'' if s.batch['n_samples'] == 1 else 's'}",
        f"mean length {s.batch['mean_len']:.0f} (percentile {p.get('mean_len', float('nan')):.0f})",
        f"longest {s.batch['max_len']:.0f}",
    ]
    cats = {k[4:]: v for k, v in s.batch.items() if k.startswith("cat_") and v > 0.05}
    if cats:
        parts.append(", ".join(f"{k} {v:.0%}" for k, v in sorted(cats.items())))
    line = "  batch: " + "; ".join(parts)
    if not full:
        return line
    if s.predicted is not None:
        line += f"; rise {_f(s.rise)}: the composition model predicts {_f(s.predicted, '+.3g')}"
    if s.similar is not None:
        line += f", the {NEIGHBOURS} batches closest in length sit at {_f(s.similar, '+.3g')}"
    if s.recurrences:
        back = ", ".join(
            f"{r.step} (epoch {r.epoch}, {_f(r.residual, '+.3g')})" for r in s.recurrences[:4]
        )
        line += f"; came back at step {back}"
    return line


def spikes_json(report: SpikesReport) -> dict[str, Any]:
    """:func:`to_json` of a :class:`~dflash_diag.reports.SpikesReport`."""
    return to_json(report)


def spikes_text(console: Console, report: SpikesReport, verbose: bool = False) -> None:
    """:func:`render_text` of a :class:`~dflash_diag.reports.SpikesReport`."""
    render_text(console, report, verbose)


#: Table order: verdicts ranked ahead of the rest (the optimizer suspected, then a
#: sample named); the others by their rise.
_FIRST = {"unexplained": 0, "data": 1}


def rise_shown(s: SpikeEvidence) -> float:
    """The rise as the table's column shows it: ``value / baseline - 1`` (a fraction;
    the column prints it as a percent); nan when the baseline gives no ratio."""
    return s.event.ratio - 1 if math.isfinite(s.event.ratio) else math.nan


def ranked_spikes(spikes: tuple[SpikeEvidence, ...]) -> list[SpikeEvidence]:
    """Unexplained first, then data, then every other spike by the largest rise as the
    table shows it (``|value / baseline - 1|``, so a +130% rise ranks above a +64%
    one whatever their values; no ratio ranks first), ties by z.  The text table shows
    the first rows of this order, in this order, and says so; the summary names spikes
    in the same order, so the two never disagree about which are shown."""

    def key(s: SpikeEvidence) -> tuple[int, float, float]:
        rise = rise_shown(s)
        return (
            _FIRST.get(s.verdict, 2),
            -(abs(rise) if math.isfinite(rise) else math.inf),
            -(s.event.z if math.isfinite(s.event.z) else math.inf),
        )

    return sorted(spikes, key=key)


def _chance_line(d: Detection, spikes: tuple[SpikeEvidence, ...], reach: float | None) -> str:
    """How many of the spikes this log's own noise could have made, and which
    (``reach``: the z this log's noise reaches, :func:`~dflash_diag.spikes.detect.
    noise_reach`)."""
    chance = d.expected_false_events
    head = f"chance flags expected from this log's noise: {chance:.2g}"
    if reach is None or not spikes:
        return head
    weak = sorted(s.event.peak_step for s in spikes if s.event.z < reach)
    if chance >= 1 and d.chance_reason:
        head += f", because {d.chance_reason}"
    if not weak:
        return head + f"; noise reaches z {reach:.1f} here, and every spike is above that"
    word = "step" if len(weak) == 1 else "steps"
    return head + (
        f"; noise reaches z {reach:.1f} here: {word} {_steps(weak)} (below that) could be "
        "noise, the rest are above it"
    )


def _chance_short(d: Detection, spikes: tuple[SpikeEvidence, ...], reach: float | None) -> str:
    """:func:`_chance_line` in a line or two: how many flags noise makes, and which
    spikes are no higher than it reaches."""
    head = f"chance: {d.expected_false_events:.2g} flags expected from this log's noise"
    if reach is None or not spikes:
        return head
    weak = sorted(s.event.peak_step for s in spikes if s.event.z < reach)
    if not weak:
        return head + f"; every spike is above the z it reaches ({reach:.1f})"
    word = "step" if len(weak) == 1 else "steps"
    return head + f"; {word} {_steps(weak)}, under the z it reaches ({reach:.1f}), could be noise"


def _near_miss_line(misses: tuple[NearMiss, ...], word: str) -> str:
    """One line on the rises under the calibrated cut (not called spikes)."""
    rises = [m.rise for m in misses]
    zs = [m.z for m in misses]
    where = ", ".join(str(m.step) for m in misses[:6]) + (
        f" and {len(misses) - 6} more" if len(misses) > 6 else ""
    )
    lo, hi = f"{min(rises):+.0%}", f"{max(rises):+.0%}"
    span = lo if lo == hi else f"{lo} to {hi}"
    zspan = f"{min(zs):.1f}" if len(misses) == 1 else f"{min(zs):.1f}-{max(zs):.1f}"
    crit = min(m.critical for m in misses)
    return (
        f"not called spikes: {len(misses)} rise{'s' if len(misses) > 1 else ''} of {span} "
        f"at {word}{'s' if len(misses) > 1 else ''} {where} (z {zspan}) "
        f"{'stay' if len(misses) > 1 else 'stays'} under this log's critical z "
        f"({crit:.2f}+), as high as its own noise reaches by chance; --threshold 3.5 would "
        f"call {'them spikes' if len(misses) > 1 else 'it a spike'}"
    )


def ground_json(g: Any) -> dict[str, Any]:
    """``schedule_check``: status, where the schedule came from, and the token check."""
    out = {
        "status": g.status,
        "named_by": g.named_by,
        "detail": g.detail,
        "ids_confirmed": g.ids_confirmed,
    }
    return out | (asdict(g.verification) if g.verification is not None else {})


def ids_confirmed(attribution: Attribution | None) -> bool:
    """Whether the ground confirmed the sample ids (not only the lengths)."""
    check = attribution.schedule_check if attribution is not None else None
    return bool(getattr(check, "ids_confirmed", True))


def ground_of(attribution: Attribution | None) -> str:
    """What the verdicts rest on: a :data:`~dflash_diag.composition.ground.GROUNDS` status,
    or ``none`` (no schedule: detection only)."""
    if attribution is None or attribution.schedule_check is None:
        return "none"
    return str(attribution.schedule_check.status)


def _pct(share: float | None) -> str:
    return "n/a" if share is None or not math.isfinite(share) else f"{share:.0%}"


def _explained(r2: float | None) -> str:
    """A share of variance explained (an R²): ``14%``, or ``none (R² -2.46)`` when the
    model predicts worse than the points' own mean (a negative R² is no share)."""
    if r2 is None or not math.isfinite(r2) or r2 >= 0:
        return _pct(r2)
    return f"none (R² {r2:.3g})"


def _steps(items: list[int], more: int = 0) -> str:
    """The first six of ``items`` in step order, then how many more (``more`` extra not
    listed): ``254, 258 and 38 more``, ``773 and 1291``."""
    listed = [str(s) for s in sorted(items)[:6]]
    rest = len(items) - len(listed) + more
    if rest:
        return ", ".join(listed) + f" and {rest} more"
    return listed[0] if len(listed) == 1 else ", ".join(listed[:-1]) + " and " + listed[-1]


def _named(group: list[SpikeEvidence], shown: list[SpikeEvidence], word: str) -> str:
    """``Step 254 is`` / ``Steps 254, 258 and 38 more are``: the group's spikes that the
    text table shows (highest z first), the rest counted."""
    listed = [s.event.peak_step for s in shown if s in group]
    if not listed:
        n = len(group)
        return f"{n} {word.lower()}{'' if n == 1 else 's'} (in --json) {'is' if n == 1 else 'are'}"
    if len(group) == 1:
        return f"{word} {listed[0]} is"
    return f"{word}s {_steps(listed, len(group) - len(listed))} are"


def summary(
    d: Detection,
    spikes: tuple[SpikeEvidence, ...],
    attribution: Attribution | None,
    variance: VarianceReport | None,
    line_order: bool = False,
    rows: int = DEFAULT_ROWS,
) -> list[str]:
    """Two or three plain sentences answering "is it my data or my optimizer?".

    They name only spikes the table shows (:func:`ranked_spikes`, the first ``rows``),
    the others counted, so summary and table agree."""
    out = []
    word = "Event" if line_order else "Step"
    if d.n_points < FEW_POINTS:
        out.append(
            f"Only {d.n_points} logged points of {d.metric}: not enough data to tell a spike "
            f"from noise (a baseline needs {FEW_POINTS} or more)."
        )
    elif not spikes:
        out.append(f"No {d.metric} spikes in {d.n_points} logged points ({d.detector} detector).")
    shown = ranked_spikes(spikes)[:rows]
    comp = [s for s in spikes if s.verdict == "composition"]
    unex = [s for s in ranked_spikes(spikes) if s.verdict == "unexplained"]
    inc = [s for s in spikes if s.verdict == "inconclusive"]
    if comp:
        out.append(_composition_sentence(comp, shown, word))
    data = [s for s in ranked_spikes(spikes) if s.verdict == "data"]
    if data:
        out.append(_data_sentence(data, shown, word))
    if attribution is not None and attribution.model is not None:
        m = attribution.model
        plural = "point" if m.n_outliers == 1 else "points"
        left = f"; {m.n_outliers} outlying {plural} left out" if m.n_outliers else ""
        out.append(
            f"Batch composition explains {_explained(m.r2_cv)} of step-to-step {d.metric} "
            f"variance held out ({_explained(m.r2)} in-sample{left})."
        )
    if unex:
        s = unex[0]
        extra = ""
        if math.isfinite(s.event.grad_norm_ratio):
            extra = f", grad_norm {s.event.grad_norm_ratio:.1f}x its baseline"
        eg = "" if len(unex) == 1 else f"e.g. {word.lower()} {s.event.peak_step}: "
        said = [x for x in (_phase_said(s.event.phase), _lr_said(s.event.lr)) if x]
        where = ", ".join(said) + extra if said else extra.lstrip(", ")
        out.append(
            f"{_named(unex, shown, word)} not explained by "
            f"{'its' if len(unex) == 1 else 'their'} batch, and the log points at the "
            f"optimizer{f' ({eg}{where})' if where else ''}: look at the optimizer."
        )
    elif comp or data:
        out.append("Nothing points at the optimizer.")
    if inc and attribution is None:
        out.append(
            f"{len(inc)} spike{'s' if len(inc) != 1 else ''} cannot be judged without the "
            "schedule: give --manifest or a dflash-diag.toml beside the log."
        )
    elif inc:
        out.append(
            f"{_named(inc, shown, word)} inconclusive: see each one's evidence "
            "(its batch explains part of the rise, holds a few of the longest samples, or "
            "neither its batch nor the optimizer explains it)."
        )
    if attribution is not None and attribution.high_kinds:
        from .samples import high_kind_sentences

        out += high_kind_sentences(attribution.high_kinds)
    return out + _ground_sentences(attribution)


def _phase_said(phase: str) -> str:
    return "" if phase in ("", "unknown") else phase


def _lr_said(lr: float) -> str:
    return f"lr {lr:.3g}" if math.isfinite(lr) else ""


def _data_sentence(data: list[SpikeEvidence], shown: list[SpikeEvidence], word: str) -> str:
    """``Steps 413 and 776 are made by samples in their batch that are high wherever
    they go: 1556 (4 spikes), 169 (2 spikes).``"""
    count: dict[str, int] = {}
    for s in data:
        for c in s.culprits:
            who = str(c.sample_id) if c.unit == "sample" else f"a group of {len(c.members)}"
            count[who] = count.get(who, 0) + 1
    top = sorted(count.items(), key=lambda kv: -kv[1])
    names = ", ".join(f"{k} ({v} spike{'s' if v > 1 else ''})" for k, v in top[:5])
    more = f" and {len(top) - 5} more" if len(top) > 5 else ""
    whose = "its batch" if len(data) == 1 else "their batches"
    return (
        f"{_named(data, shown, word)} made by samples in {whose} that are high wherever "
        f"they go: sample{'s' if len(top) > 1 else ''} {names}{more}."
    )


def _composition_sentence(comp: list[SpikeEvidence], shown: list[SpikeEvidence], word: str) -> str:
    where = [s.percentiles["mean_len"] for s in comp if "mean_len" in s.percentiles]
    side = ""
    # Name a side only when every such batch is on it: "the shortest X%" covers all.
    if where and max(where) <= 50:
        side = f" (batches among the shortest {max(max(where), 1):.0f}% by mean length)"
    elif where and min(where) > 50:
        side = f" (batches among the longest {max(100 - min(where), 1):.0f}% by mean length)"
    again = [s for s in comp if any(r.high for r in s.recurrences)]
    text = f"{_named(comp, shown, word)} explained by {'its' if len(comp) == 1 else 'their'} batch"
    text += side
    if again and len(comp) > 1:
        text += f"; {len(again)} of them were high again when their batch came back"
    elif again:
        text += "; the same batch was high again when it came back"
    return text + "."


def _ground_sentences(attribution: Attribution | None) -> list[str]:
    """What the verdicts rest on, when it is less than a verified schedule."""
    ground = ground_of(attribution)
    if ground == "given":
        assert attribution is not None
        out = [
            f"These verdicts rest on the schedule from "
            f"{attribution.schedule_check.named_by}, which the log cannot confirm (it logs "
            "no tokens): check it, or record the batches during training."
        ]
        m = attribution.model
        named = attribution.samples is not None and not attribution.samples.named.empty
        if m is not None and math.isfinite(m.r2_cv) and m.r2_cv <= 0 and not named:
            out.append(
                "The batches as replayed explain none of the loss and no sample stands out: "
                "that is what a schedule that is not the run's (another seed, batch size or "
                "sampler) gives, and a bad sample's grad_norm surge reads as the optimizer's "
                "then: the optimizer verdicts above are only as sure as the schedule."
            )
        return out
    if ground == "refuted":
        return [
            "These verdicts are forced onto a schedule the logged tokens refute: they are "
            "not evidence about this run."
        ]
    if ground == "recorded":
        assert attribution is not None
        where = attribution.schedule_check.named_by
        return [f"These verdicts rest on the batches recorded during training in {where}."]
    return []


def _p(p: float | None) -> str:
    """A p-value for a table: ``<1e-300`` where it underflows to 0, never a bare 0."""
    if p is None or not math.isfinite(p):
        return "-"
    return "<1e-300" if p < 1e-300 else f"{p:.1g}"


def _f(x: float | None, spec: str = ".3g") -> str:
    return "-" if x is None or not math.isfinite(x) else format(x, spec)


def render_text(console: Console, report: SpikesReport, verbose: bool = False) -> None:
    """Header, the answer (summary sentences), the spike table, the evidence of the
    spikes that matter (their batches and first sample ids), then what ``verbose`` adds.

    By default: :data:`DEFAULT_ROWS` rows, the evidence of the first
    :data:`DEFAULT_EVIDENCE` of :func:`ranked_spikes` (unexplained first), one line on the
    variance proxies and a last line saying what ``--verbose`` would add.  ``verbose``:
    every row and every spike's evidence in full, the rises under the cut, the
    correlations and the variance panel."""
    r = report
    ctx, detection, spikes = r.context, r.detection, r.spikes
    attribution, variance, samples = r.attribution, r.variance, r.samples
    d = detection
    ground = ground_of(attribution)
    _header(console, ctx, d, attribution)
    ranked = ranked_spikes(spikes)
    rows = len(ranked) if verbose else DEFAULT_ROWS
    console.print()
    for sentence in summary(d, spikes, attribution, variance, ctx.line_order):
        console.print(sentence, markup=False)
    console.print()
    # (the default rows in rank order, as their caption says; -v: every row, by step)
    shown = sorted(ranked, key=lambda s: s.event.peak_step) if verbose else ranked[:rows]
    _spike_table(console, r, shown, ground, verbose)
    told = ranked if verbose else ranked[:DEFAULT_EVIDENCE]
    confirmed = ids_confirmed(attribution)
    _spike_lines(console, ctx, told, ground, samples, full=verbose, confirmed=confirmed)
    if verbose:
        if attribution is not None and attribution.correlations:
            _correlation_table(console, d, attribution)
        if variance is not None:
            _variance_panel(console, variance)
        return
    line = _variance_line(variance)
    if line:
        console.print(line, markup=False)
    more = _verbose_adds(r.below_cut, ranked, told, shown, attribution, variance)
    if more:
        console.print(more, markup=False, style="dim")


def _variance_line(v: VarianceReport | None) -> str:
    """The variance panel in one line: the length ICC and what other schedules would
    remove ("" when neither is known)."""
    if v is None:
        return ""
    parts = []
    if v.length_icc is not None:
        parts.append(f"length ICC {v.length_icc:.3f}")
    cut = [c for c in v.counterfactual if c.share_removed is not None]
    if cut:
        first, *rest = cut
        parts.append(
            f"a {first.strategy} schedule would remove {_pct(first.share_removed)} of this "
            "variance" + "".join(f", {c.strategy} {_pct(c.share_removed)}" for c in rest)
        )
    return "batches: " + "; ".join(parts) if parts else ""


def _verbose_adds(
    below_cut: tuple[NearMiss, ...],
    ranked: list[SpikeEvidence],
    told: list[SpikeEvidence],
    shown: list[SpikeEvidence],
    attribution: Attribution | None,
    variance: VarianceReport | None,
) -> str:
    """The last line of the default output: what ``--verbose`` would add."""
    adds = []
    if len(ranked) > len(told):
        n = len(ranked) - len(told)
        adds.append(f"{n} more spike{'s' + chr(39) if n > 1 else chr(39) + 's'} evidence")
    if len(ranked) > len(shown):
        adds.append(f"{len(ranked) - len(shown)} more rows")
    if below_cut:
        adds.append("rises under the cut")
    if attribution is not None and attribution.correlations:
        adds.append("correlations")
    if variance is not None:
        adds.append("variance proxies")
    return f"--verbose adds {', '.join(adds)}" if adds else ""


def _header(console: Console, ctx: Context, d: Detection, attribution: Attribution | None) -> None:
    """What was read, what the steps are, and what the verdicts rest on."""
    from rich.text import Text

    name = ctx.label or ctx.log
    what = f" ({ctx.log_format}): {d.n_points} points of {d.metric}"
    if ctx.label:
        what = f" ({ctx.log}, {ctx.log_format}): {d.n_points} points of {d.metric}"
    console.print(Text.assemble((name, "bold"), what))
    if ctx.steps is not None:
        console.print(steps_line(ctx), markup=False)
    console.print(f"logging: {d.covers}", markup=False)
    if ctx.line_order:
        console.print(
            "steps: the log's records carry no step, so 'event N' is its N-th logged "
            "record, not optimizer step N (--step-every N: the trainer's logging_steps)",
            markup=False,
        )
    if ctx.composition:
        console.print(f"composition: recorded in {ctx.composition}", markup=False)
    if ctx.config:
        what = "config (manifest only)" if ctx.composition else "schedule config"
        how = f" (found {ctx.config_found})" if ctx.config_found else ""
        console.print(f"{what}: {ctx.config}{how}", markup=False)
    if attribution is not None and attribution.schedule_check is not None:
        g = attribution.schedule_check
        console.print(f"schedule check: {g.status}: {g.detail}", markup=False)
    elif ctx.manifest is None:
        console.print("no manifest: detection only (give --manifest to attribute spikes)")
    for note in [*ctx.notes, *(attribution.notes if attribution else ())]:
        console.print(f"note: {note}", markup=False)


def steps_line(ctx: Context) -> str:
    """``shown: steps 200-300 of 1-2961 (...)``: the ``--steps`` range and the log's."""
    lo, hi = ctx.steps or (None, None)
    first, last = ctx.span or (None, None)
    a = lo if lo is not None else first
    b = hi if hi is not None else last
    word = "events" if ctx.line_order else "steps"
    return (
        f"shown: spikes at {word} {a}-{b} of {first}-{last} (detection, the composition "
        "model and the variance figures use the whole log)"
    )


def _spike_table(
    console: Console,
    report: SpikesReport,
    shown: list[SpikeEvidence],
    ground: str,
    verbose: bool = False,
) -> None:
    """The table of the spikes shown, then the chance line (and, ``verbose``, the near
    misses)."""
    ctx, d, spikes = report.context, report.detection, report.spikes
    from rich.box import SIMPLE_HEAD
    from rich.table import Table

    rule = f"z >= {d.threshold:g}" + (
        f" and >= {d.min_rise:.0%} over baseline" if d.detector == "robust" else ""
    )
    # A narrow terminal drops the columns a reader needs least (phase, baseline: the
    # rise says how far over it) and the borders, and folds rather than cuts a cell.
    compact = console.width < COMPACT_WIDTH
    table = Table(
        title=f"{len(spikes)} spikes ({d.detector}: {rule}, window {d.window}; "
        "gn x: grad_norm over its baseline)"
    )
    if compact:
        table.box, table.pad_edge, table.show_edge = SIMPLE_HEAD, False, False
    keep = [i for i, c in enumerate(SPIKE_COLUMNS) if not (compact and c in NARROW_DROPS)]
    for i in keep:
        col = ("event" if ctx.line_order else "step") if i == 0 else SPIKE_COLUMNS[i]
        table.add_column(
            col,
            justify="left" if col in ("phase", "verdict") else "right",
            overflow="fold" if compact else "ellipsis",
        )
    marked = f" ({ground})" if ground in ("given", "refuted") else ""
    for s in shown:
        cells = spike_row(s, marked)
        table.add_row(*(cells[i] for i in keep))
    if spikes:
        console.print(table)
        if len(spikes) > len(shown):
            console.print(
                f"({len(shown)} of {len(spikes)}: unexplained first, then data, then the "
                "largest rises; all: -v)",
                markup=False,
            )
    if math.isfinite(d.expected_false_events):  # robust only: this log's own noise
        reach = report.noise_reach
        chance = _chance_line(d, spikes, reach) if verbose else _chance_short(d, spikes, reach)
        console.print(chance, markup=False)
    misses = report.below_cut
    if misses and verbose:
        word = "event" if ctx.line_order else "step"
        console.print(_near_miss_line(misses, word), markup=False)


def _spike_lines(
    console: Console,
    ctx: Context,
    told: list[SpikeEvidence],
    ground: str,
    samples: dict[int, tuple[MicroBatch, ...]] | None,
    full: bool = True,
    confirmed: bool = True,
) -> None:
    """Each told spike's verdict with its reasons, its batch, and its sample ids
    (``confirmed``: see :func:`samples_line`; ids not confirmed only when ``full``);
    lines wrap at the terminal's width, continuations indented."""
    from rich.padding import Padding
    from rich.text import Text

    on = {
        "given": ", on the given schedule",
        "refuted": ", forced onto a refuted schedule",
        "recorded": ", on the recorded batches",
    }
    word = "event" if ctx.line_order else "step"
    for s in told:
        console.print(
            f"{word} {s.event.peak_step} ({s.verdict}{on.get(ground, '')}): "
            + "; ".join(s.reasons),
            markup=False,
        )
        if not s.batch:
            continue
        lines = [batch_line(s, full).strip()]
        # ids nothing confirmed are not shown as a spike's samples in the short view
        if samples and samples.get(s.event.peak_step) and (full or confirmed):
            lines.append(samples_line(samples[s.event.peak_step], confirmed).strip())
        for line in lines:
            console.print(Padding(Text(line), (0, 0, 0, 2), expand=False))


def _correlation_table(console: Console, d: Detection, attribution: Attribution) -> None:
    from rich.table import Table

    ct = Table(title=f"detrended {d.metric} vs batch features")
    for col in ("feature", "spearman", "95% CI", "p", "pearson", "p "):
        ct.add_column(col, justify="left" if col == "feature" else "right")
    for c in attribution.correlations:
        if c.spearman is None:
            continue
        ct.add_row(
            c.feature,
            f"{c.spearman:+.2f}",
            f"{c.spearman_ci[0]:+.2f}..{c.spearman_ci[1]:+.2f}" if c.spearman_ci else "-",
            _p(c.spearman_p),
            f"{c.pearson:+.2f}" if c.pearson is not None else "-",
            _p(c.pearson_p),
        )
    console.print(ct)


def _variance_panel(console: Console, v: VarianceReport) -> None:
    from rich.table import Table

    t = Table(title="gradient-variance proxies", show_header=False)
    t.add_column("what")
    t.add_column("value")
    if v.length_icc is not None:
        ci = (
            f" (95% CI {v.length_icc_ci[0]:.3f}..{v.length_icc_ci[1]:.3f})"
            if v.length_icc_ci
            else ""
        )
        t.add_row(
            "length ICC (share of length variance between batches)", f"{v.length_icc:.3f}{ci}"
        )
    if v.adjacent_length_corr is not None:
        t.add_row("adjacent-step mean-length correlation", f"{v.adjacent_length_corr:+.2f}")
    if v.composition_r2 is not None:
        t.add_row(
            "variance explained by composition",
            f"{_explained(v.composition_r2_cv)} held out, {_explained(v.composition_r2)} in-sample",
        )
    if v.grad_norm_cv is not None:
        t.add_row("grad_norm local CV (std/mean per window)", f"{v.grad_norm_cv:.2f}")
    for f, corr in (v.grad_norm_corr or {}).items():
        t.add_row(f"grad_norm vs {f} (spearman)", f"{corr['spearman']:+.2f} (p {corr['p']:.1g})")
    ns = v.noise_scale
    if ns is not None:
        if ns.b_simple is not None:
            ci = f" (95% CI {ns.ci[0]:.3g}..{ns.ci[1]:.3g})" if ns.ci else ""
            t.add_row("gradient noise scale B_simple (tokens)", f"{ns.b_simple:.3g}{ci}")
        else:
            t.add_row("gradient noise scale B_simple", ns.reason)
        if ns.batch_tokens is not None:
            t.add_row("actual batch size (median tokens per step)", f"{ns.batch_tokens:.0f}")
    for c in v.counterfactual:
        value = (
            f"removes {_pct(c.share_removed)} of the step-to-step variance"
            if c.share_removed is not None
            else c.reason
        )
        t.add_row(f"counterfactual: {c.strategy} schedule", value)
    if t.row_count:
        console.print(t)
    if ns is not None and ns.b_simple is not None:
        console.print(
            "B_simple assumes: " + "; ".join(ns.assumptions) + ".", soft_wrap=True, markup=False
        )


def plot_spikes(
    path: str | Path, report: SpikesReport, smooth: float | None = None, log_y: bool = False
) -> Path:
    """Save :func:`spikes_figure` as PNG, SVG or PDF by ``path``'s extension."""
    from .plots import save_figure

    return save_figure(spikes_figure(report, smooth, log_y), path)


def spikes_figure(report: SpikesReport, smooth: float | None = None, log_y: bool = False) -> Any:
    """The ``spikes`` figure (:mod:`dflash_diag.render.spikes_plot`); ``smooth``: an EMA
    weight for the drawn metric, ``log_y``: a log y axis."""
    from .spikes_plot import spikes_figure as figure

    return figure(report, smooth=smooth, log_y=log_y)
