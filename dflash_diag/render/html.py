"""``--html FILE``: one self-contained HTML report per command.

The page needs nothing from a network: styles are inline, plots are inline SVG, and no
element has an ``http(s)://`` ``src`` or ``href``.  It holds the summary sentences, the
tables, every spike with its evidence and its micro-batches' sample ids, the plots, and
the full text output (as the terminal shows it) in a fold.  Nothing is computed here.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..printable import printable

if TYPE_CHECKING:
    from ..compare import Comparison
    from ..reports import BatchesReport, MicroBatch, SpikesReport


_STYLE = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;
max-width:72em;padding:0 1em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
h3{font-size:1em;margin-bottom:.3em}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.15em .6em;text-align:right;
border-bottom:1px solid #eee}th{background:#f4f4f4}td.l,th.l{text-align:left}
.composition{color:#1a7f37}.data{color:#8250df}.unexplained{color:#c0262d}.inconclusive{color:#6e6e6e}
.summary p{margin:.4em 0}.ids{font-family:ui-monospace,monospace;font-size:.9em}
.plot svg{max-width:100%;height:auto}pre{font-size:12px;overflow-x:auto}
section.spike{border-left:4px solid #ccc;padding-left:.8em;margin:1em 0}
section.spike.composition{border-color:#1a7f37}section.spike.data{border-color:#8250df}section.spike.unexplained{border-color:#c0262d}
"""


def _e(text: object) -> str:
    """``text`` for the page: every control character shown as its escape (the one
    printable filter, :func:`~dflash_diag.printable.printable`), then HTML-escaped."""
    return html.escape(printable(str(text)))


def page(title: str, body: list[str]) -> str:
    """A whole HTML document: ``title`` and the ``body`` fragments, styles inline."""
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head>\n<body>\n"
        f"<h1>{_e(title)}</h1>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def figure_svg(fig: Any) -> str:
    """``fig`` as an inline ``<svg>`` element (text as paths: no fonts to fetch); closes it."""
    import io

    from .plots import printable_texts, pyplot

    printable_texts(fig)
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    pyplot().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def table(
    header: tuple[str, ...], rows: Sequence[Sequence[str]], left: tuple[str, ...] = ()
) -> str:
    """An HTML table; columns named in ``left`` are left-aligned."""
    cls = [" class='l'" if h in left else "" for h in header]
    head = "".join(f"<th{c}>{_e(h)}</th>" for h, c in zip(header, cls, strict=True))
    body = "".join(
        "<tr>" + "".join(_cell(v, c) for v, c in zip(row, cls, strict=True)) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(value: str, cls: str) -> str:
    """A ``<td>``; a verdict word also gets its colour (class ``composition`` etc.)."""
    word = str(value).split(" ")[0]
    if word in ("composition", "data", "unexplained", "inconclusive"):
        return f"<td class='l {word}'>{_e(value)}</td>"
    return f"<td{cls}>{_e(value)}</td>"


def text_output(render: Any, folded: bool = True) -> str:
    """What a text renderer prints, captured at 120 columns, as a ``<pre>`` (folded:
    behind a click)."""
    import io

    from rich.console import Console

    console = Console(record=True, width=120, color_system=None, file=io.StringIO())
    render(console)
    return (
        "<h2>Text output</h2><details"
        + ("" if folded else " open")
        + "><summary>as the terminal shows it</summary><pre>"
        + _e(console.export_text())
        + "</pre></details>"
    )


def write(path: str | Path, document: str) -> Path:
    """Write ``document`` as UTF-8 to ``path``, atomically (:mod:`dflash_diag.outpath`)."""
    from ..outpath import write_atomically

    return write_atomically(path, lambda tmp: tmp.write_text(document, encoding="utf-8"), "report")


def _micro_rows(batches: tuple[MicroBatch, ...]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for b in batches:
        # (every id: the page holds everything the JSON holds)
        ids = ", ".join(str(i) for i in b.sample_ids)
        rows.append((str(b.step), str(b.rank), str(b.micro), str(len(b.sample_ids)), ids))
    return rows


def spikes_html(
    report: SpikesReport, path: str | Path, smooth: float | None = None, log_y: bool = False
) -> Path:
    """The ``spikes`` report: header, summary, plot, spike table, every spike with its
    evidence and micro-batches (sample ids), the text output (``--verbose``'s: complete).
    ``smooth`` and ``log_y`` as for the plot."""
    from .spikes import (
        SPIKE_COLUMNS,
        batch_line,
        ground_of,
        ids_confirmed,
        ranked_spikes,
        render_text,
        spike_row,
        spikes_figure,
        steps_line,
        summary,
    )

    r = report
    d, ctx = r.detection, r.context
    step_word = "event" if ctx.line_order else "step"
    facts = [f"{ctx.log} ({ctx.log_format}): {d.n_points} points of {d.metric}"]
    if ctx.steps is not None:
        facts.append(steps_line(ctx))
    if r.attribution is not None and r.attribution.schedule_check is not None:
        g = r.attribution.schedule_check
        facts.append(f"schedule check: {g.status}: {g.detail}")
    elif ctx.manifest is None:
        facts.append("no manifest: detection only (give --manifest to attribute spikes)")
    body = [f"<p>{_e(f)}</p>" for f in facts]
    sentences = summary(d, r.spikes, r.attribution, r.variance, ctx.line_order)
    body.append("<div class='summary'><h2>Summary</h2>")
    body += [f"<p>{_e(s)}</p>" for s in sentences]
    plot = figure_svg(spikes_figure(r, smooth, log_y))
    body.append("</div><h2>Plot</h2><div class='plot'>" + plot + "</div>")
    ground = ground_of(r.attribution)
    marked = f" ({ground})" if ground in ("given", "refuted") else ""
    in_order = sorted(r.spikes, key=lambda s: s.event.peak_step)
    header = (step_word, *SPIKE_COLUMNS[1:])
    body.append(f"<h2>{len(r.spikes)} spikes</h2>")
    body.append(table(header, [spike_row(s, marked) for s in in_order], ("phase", "verdict")))
    body.append("<h2>Every spike, most urgent first</h2>")
    for s in ranked_spikes(r.spikes):
        step = s.event.peak_step
        body.append(
            f"<section class='spike {_e(s.verdict)}' id='{step_word}-{step}'>"
            f"<h3>{step_word} {step}: <span class='{_e(s.verdict)}'>{_e(s.verdict)}</span></h3>"
            "<ul>" + "".join(f"<li>{_e(x)}</li>" for x in s.reasons) + "</ul>"
        )
        line = batch_line(s)
        if line:
            body.append(f"<p>{_e(line.strip())}</p>")
        batches = r.samples.get(step, ())
        if batches:
            ids = "sample ids" if ids_confirmed(r.attribution) else "unconfirmed ids"
            cols = ("step", "rank", "micro", "samples", ids)
            body.append("<div class='ids'>" + table(cols, _micro_rows(batches), cols[-1:]))
            body.append("</div>")
        body.append("</section>")
    body.append(text_output(lambda c: render_text(c, r, verbose=True)))
    return write(path, page(f"dflash-diag spikes: {ctx.label or ctx.log}", body))


def batches_html(report: BatchesReport, path: str | Path) -> Path:
    """The ``batches`` report: the strategies' key figures, the plot, the text output."""
    from .batches import batches_figure, render_text

    r = report
    shown = r.strategies or (r.stats,)
    rows = [
        (
            st.strategy,
            f"{st.padding_efficiency:.1%}",
            f"{st.length_icc:.3f}" if st.length_icc is not None else "-",
            str(st.steps_per_epoch),
        )
        for st in shown
    ]
    body = [
        f"<p>{_e(r.manifest)}" + (f" (config {_e(r.config)})" if r.config else "") + "</p>",
        "<h2>Strategies</h2>",
        table(("strategy", "padding efficiency", "length ICC", "steps/epoch"), rows, ("strategy",)),
        "<h2>Plot</h2><div class='plot'>" + figure_svg(batches_figure(r)) + "</div>",
        text_output(lambda c: render_text(r, c, verbose=True), folded=False),
    ]
    return write(path, page(f"dflash-diag batches: {r.label or r.manifest}", body))


def compare_html(c: Comparison, path: str | Path, **style: Any) -> Path:
    """The ``compare`` report: one sentence per metric, the ``--at`` answers, the plot,
    the text output.  ``style``: :func:`~dflash_diag.render.compare.comparison_figure`'s
    options (``names``: a label per file)."""
    from .compare import comparison_figure, display_names, relabel, render_text

    names = style.get("names") or display_names(c)
    body = [f"<p>run {_e(c.run)} against {_e(', '.join(c.baselines))} (by {_e(c.axis)})</p>"]
    body.append("<div class='summary'><h2>Summary</h2>")
    said = [relabel(m.sentence, c, names) for m in c.metrics.values()]
    # (an --at answer the metric's sentence already holds is not said twice)
    said += [a.sentence for a in c.at if not any(a.sentence in s for s in said)]
    body += [f"<p>{_e(s)}</p>" for s in said]
    body.append("</div>")
    if c.at:
        rows = [
            (
                str(a.step),
                a.metric,
                f"{a.value:.4g}" if a.value is not None else "-",
                f"{a.band[0]:.4g}..{a.band[1]:.4g}" if a.band else "-",
                a.verdict,
            )
            for a in c.at
        ]
        body.append(
            table(("step", "metric", "value", "band", "verdict"), rows, ("metric", "verdict"))
        )
    plot = figure_svg(comparison_figure(c, **style))
    body.append("<h2>Plot</h2><div class='plot'>" + plot + "</div>")
    steps = style.get("steps")
    body.append(
        text_output(lambda con: render_text(c, con, names, steps, verbose=True), folded=False)
    )
    against = ", ".join(names.get(b, b) for b in c.baselines)
    title = f"dflash-diag compare: {names.get(c.run, c.run)} against {against}"
    return write(path, page(title, body))
