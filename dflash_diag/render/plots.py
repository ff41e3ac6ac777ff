"""Shared plotting plumbing: a non-interactive backend and saving by file extension."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..outpath import check_output_path

PLOT_FORMATS = (".png", ".svg", ".pdf")


def check_plot_path(path: str | Path) -> Path:
    """Validate ``--plot FILE`` before any work is done: PNG, SVG or PDF, folder exists."""
    return check_output_path(path, PLOT_FORMATS, "plot")


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (never opens a window)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | Path) -> Path:
    """Save ``fig`` as PNG, SVG or PDF by ``path``'s extension and close it."""
    p = check_plot_path(path)
    fig.savefig(p, format=p.suffix.lower().lstrip("."), dpi=120, bbox_inches="tight")
    pyplot().close(fig)
    return p
