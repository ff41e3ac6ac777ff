"""What ``dflash-diag parse`` shows: a RunLog summarised as text or as one JSON object.

:func:`summarise` computes the figures (plain data); :func:`render_text` only lays them
out with rich.
"""

from __future__ import annotations

import math
from typing import Any

from ..records import RunLog


def summarise(run: RunLog) -> dict[str, Any]:
    """The facts ``parse`` reports, as plain data (the ``--json`` document).

    Per column: non-null count, min and max (NaN-skipping); steps as int.

    >>> import pandas as pd
    >>> t = pd.DataFrame({"step": [1, 2], "loss": [2.5, float("nan")]})
    >>> summarise(RunLog(t, "x.log", "text"))["columns_detail"][1]
    {'name': 'loss', 'non_null': 1, 'min': 2.5, 'max': 2.5}
    """
    t = run.table
    detail = []
    for c in t.columns:
        s = t[c]
        n = int(s.notna().sum())
        lo = float(s.min()) if n else math.nan
        hi = float(s.max()) if n else math.nan
        detail.append({"name": str(c), "non_null": n, "min": lo, "max": hi})
    steps = t["step"] if "step" in t else None
    return {
        "path": run.path,
        "format": run.format,
        "rows": int(len(t)),
        "first_step": int(steps.min()) if steps is not None and len(t) else None,
        "last_step": int(steps.max()) if steps is not None and len(t) else None,
        "columns": [str(c) for c in t.columns],
        "columns_detail": detail,
        "restarts": [int(s) for s in run.restarts],
        "ranks": [int(r) for r in run.ranks],
        "skipped": {k: int(v) for k, v in run.skipped.items()},
        "n_lines": int(run.n_lines),
        "step_source": run.step_source,
    }


def _num(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):d}"
    return f"{x:.4g}"


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
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("column")
    table.add_column("non-null", justify="right")
    table.add_column("min", justify="right")
    table.add_column("max", justify="right")
    for c in s["columns_detail"]:
        style = "dim" if c["non_null"] == 0 else None
        table.add_row(c["name"], str(c["non_null"]), _num(c["min"]), _num(c["max"]), style=style)
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
    restarts = ", ".join(str(r) for r in s["restarts"]) or "none"
    console.print(f"restarts: {restarts}", soft_wrap=True)
    console.print(f"ranks: {', '.join(str(r) for r in s['ranks'])}", soft_wrap=True)
    skipped = ", ".join(f"{k} {v}" for k, v in s["skipped"].items()) or "none"
    console.print(f"skipped: {skipped}", soft_wrap=True)
    if written:
        console.print(f"wrote {s['rows']} rows to {written}", soft_wrap=True)
