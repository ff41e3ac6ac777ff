"""What ``dflash-diag parse`` shows: a RunLog summarised as text or as one JSON object.

:func:`~dflash_diag.reports.parse.summarise` computes the figures (plain data);
:func:`render_text` only lays them out with rich.
"""

from __future__ import annotations

import math
from typing import Any


def restarts_text(restarts: list[int], most: int = 8) -> str:
    """``restarts: ...`` without reading as a count of steps.

    >>> restarts_text([]), restarts_text([1501])
    ('none', '1 (the step counter went back to step 1501)')
    >>> restarts_text([9, 250, 400])
    '3 (the step counter went back to steps 9, 250 and 400)'
    """
    if not restarts:
        return "none"
    shown = [str(r) for r in restarts[:most]]
    if len(restarts) > most:
        where = f"{', '.join(shown)} and {len(restarts) - most} more"
    elif len(shown) > 1:
        where = f"{', '.join(shown[:-1])} and {shown[-1]}"
    else:
        where = shown[0]
    steps = "steps" if len(restarts) > 1 else "step"
    return f"{len(restarts)} (the step counter went back to {steps} {where})"


def ranks_text(ranks: list[int], rows_rank: int | str | None) -> str:
    """``ranks: ...`` as which ranks, how many, and whose rows the table holds.

    >>> ranks_text([0], 0)
    'rank 0 only'
    >>> ranks_text(list(range(8)), 0)
    "0-7 (8); the rows are rank 0's (--rank all keeps every rank)"
    >>> ranks_text([0, 2, 5], "all")
    '0, 2, 5 (3); the rows hold every rank (a rank column)'
    """
    if len(ranks) == 1:
        return f"rank {ranks[0]} only"
    if not ranks:
        return "none"
    if ranks == list(range(ranks[0], ranks[-1] + 1)):
        which = f"{ranks[0]}-{ranks[-1]}"
    else:
        which = ", ".join(str(r) for r in ranks)
    if rows_rank == "all":
        rows = "the rows hold every rank (a rank column)"
    else:
        rows = f"the rows are rank {rows_rank}'s (--rank all keeps every rank)"
    return f"{which} ({len(ranks)}); {rows}"


def min_max(lo: float | None, hi: float | None) -> tuple[str, str]:
    """A column's min and max in one format, so the two read alike: whole numbers as
    integers; two numbers of 10,000 or more (timestamps, token counts) in fixed point
    with one decimal; anything else with 4 significant digits.  ``-`` for none.

    >>> min_max(1764600000.5, 1764600500.0)
    ('1764600000.5', '1764600500.0')
    >>> min_max(12, 5000), min_max(0.3698, 5.971), min_max(None, None)
    (('12', '5000'), ('0.3698', '5.971'), ('-', '-'))
    """
    pair = [x for x in (lo, hi) if x is not None and not math.isnan(x)]
    if len(pair) < 2:
        return "-", "-"
    a, b = float(pair[0]), float(pair[1])
    finite = math.isfinite(a) and math.isfinite(b)
    if finite and all(x.is_integer() and abs(x) < 1e15 for x in (a, b)):
        return f"{int(a):d}", f"{int(b):d}"
    if finite and all(1e4 <= abs(x) < 1e15 for x in (a, b)):
        return f"{a:.1f}", f"{b:.1f}"
    return f"{a:.4g}", f"{b:.4g}"


#: What RunLog.n_lines counts, by format (a line for the line formats).
_UNITS = {"tensorboard": "events", "hf-state": "log_history entries"}


def render_text(summary: dict[str, Any], console: Any, written: str | None = None) -> None:
    """Print a :func:`summarise` result on a rich console."""
    from rich.table import Table

    s = summary
    console.print(
        f"{s['path']}: {s['format']}, {s['rows']} rows, steps {s['first_step']}..{s['last_step']}"
        f" ({s['n_lines']} {_UNITS.get(s['format'], 'lines')} read)",
        soft_wrap=True,
    )
    if s.get("steps_shown") is not None:
        lo, hi = s["steps_shown"]
        whole = s["of_steps"]
        a, b = whole[0] if lo is None else lo, whole[1] if hi is None else hi
        console.print(f"shown: steps {a}-{b} of {whole[0]}-{whole[1]} (--steps)", soft_wrap=True)
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("column")
    table.add_column("non-null", justify="right")
    table.add_column("min", justify="right")
    table.add_column("max", justify="right")
    for c in s["columns_detail"]:
        style = "dim" if c["non_null"] == 0 else None
        table.add_row(c["name"], str(c["non_null"]), *min_max(c["min"], c["max"]), style=style)
    console.print(table)
    if s.get("step_source") == "line order":
        console.print(
            "steps: the records carry no step, so they are numbered 1, 2, ... in line order "
            "(logging events, not optimizer steps when the trainer logs every N steps)",
            soft_wrap=True,
        )
    if s.get("step_source") == "given interval":
        console.print(
            "steps: the records carry no step; numbered as every --step-every-th optimizer step",
            soft_wrap=True,
        )
    console.print(f"restarts: {restarts_text(s['restarts'])}", soft_wrap=True)
    console.print(f"ranks: {ranks_text(s['ranks'], s.get('rows_rank'))}", soft_wrap=True)
    skipped = ", ".join(f"{k} {v}" for k, v in s["skipped"].items()) or "none"
    console.print(f"skipped: {skipped}", soft_wrap=True)
    if written:
        console.print(f"wrote {s['rows']} rows to {written}", soft_wrap=True)
