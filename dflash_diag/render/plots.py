"""Shared plotting plumbing: a non-interactive backend and saving by file extension."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..outpath import atomic_output, check_output_path
from ..printable import printable

PLOT_FORMATS = (".png", ".svg", ".pdf")


def check_plot_path(path: str | Path, protect: Sequence[str | Path | None] = ()) -> Path:
    """Validate ``--plot FILE`` before any work is done: PNG, SVG or PDF, folder exists
    and can be written, not one of the ``protect`` inputs."""
    return check_output_path(path, PLOT_FORMATS, "plot", protect=protect)


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (never opens a window), with ``$...$`` in
    text drawn as it is, not parsed as math (a label is data)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    # (labels, file names and categories are data: a "$" in one is not TeX math)
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt


def printable_texts(fig: Any) -> Any:
    """``fig`` with the text of every label, title, legend and annotation made
    :func:`~dflash_diag.printable.printable` (a file name or a category is data: its
    control characters would be missing glyphs in a PNG and raw bytes in an SVG's
    comments).  Called before a figure is laid out or saved."""
    from matplotlib.text import Text

    for t in fig.findobj(Text):
        text = t.get_text()
        safe = printable(text)
        if safe != text:
            t.set_text(safe)
    return fig


def save_figure(fig: Any, path: str | Path) -> Path:
    """Save ``fig`` as PNG, SVG or PDF by ``path``'s extension and close it."""
    p = check_plot_path(path)
    printable_texts(fig)
    try:
        with atomic_output(p, "plot") as tmp:
            fig.savefig(tmp, format=p.suffix.lower().lstrip("."), dpi=120, bbox_inches="tight")
    finally:
        pyplot().close(fig)
    return p


def ema(values: Any, alpha: float) -> Any:
    """Exponential moving average as TensorBoard and W&B draw it, debiased.

    Over the finite values ``x_1, x_2, ...`` (nan/inf are skipped and stay nan):
    ``m_k = alpha * m_(k-1) + (1 - alpha) * x_k`` with ``m_0 = 0``, drawn as
    ``m_k / (1 - alpha**k)``, so the first point is ``x_1`` rather than pulled to 0.
    ``alpha = 0`` is the raw curve.

    >>> ema([1.0, 3.0, float("nan"), 3.0], 0.5).tolist()
    [1.0, 2.3333333333333335, nan, 2.7142857142857144]
    """
    import numpy as np
    from scipy.signal import lfilter

    x = np.asarray(values, dtype=float)
    out = np.full(x.shape, np.nan)
    ok = np.isfinite(x)
    if not ok.any():
        return out
    m = lfilter([1.0 - alpha], [1.0, -alpha], x[ok])
    k = np.arange(1, int(ok.sum()) + 1)
    out[ok] = m / (1.0 - alpha**k) if alpha > 0 else m
    return out


def step_limits(steps: Any, first: int | None, last: int | None) -> tuple[float, float] | None:
    """x-limits for ``--steps first:last`` (None: the log's own end), or None when the
    range leaves both ends open."""
    import numpy as np

    if first is None and last is None:
        return None
    s = np.asarray(steps, dtype=float)
    lo = float(first) if first is not None else float(np.nanmin(s))
    hi = float(last) if last is not None else float(np.nanmax(s))
    pad = 0.01 * (hi - lo) if hi > lo else 0.5
    return lo - pad, hi + pad


#: Offsets (points) a point's label may take, nearest first: right, left, then above
#: and below on either side, further each round.
POINT_OFFSETS: tuple[tuple[float, float, str, str], ...] = tuple(
    (dx, dy, "left" if dx > 0 else "right", "center")
    for dy in (0, 8, -8, 16, -16, 24, -24, 32, -32, 44, -44)
    for dx in (6, -6)
)


def place_labels(
    ax: Any,
    labels: Sequence[tuple[Any, Sequence[tuple[float, float, str, str]]]],
    obstacles: Sequence[tuple[float, float]] = (),
    radius: float = 3.0,
) -> None:
    """Move each label to the first of its offsets where its drawn text box overlaps
    no label placed before it, no marker in ``obstacles`` and nothing outside the axes
    (else to the offset where it overlaps least): ``1182`` beside ``735`` no longer
    covers its first digit.  Call after the figure's layout (the boxes are measured by
    its renderer, in pixels).

    :param labels: ``(annotation, offsets)`` in the order to place them (the most
        important first); an offset is ``(dx, dy, ha, va)`` in points.
    :param obstacles: data ``(x, y)`` of the markers labels must not cover.
    :param radius: a marker's radius, points.
    """
    from matplotlib.transforms import Bbox

    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    r = radius * fig.dpi / 72
    taken = [
        Bbox.from_extents(px - r, py - r, px + r, py + r)
        for px, py in (ax.transData.transform(obstacles) if len(obstacles) else [])
    ]
    frame = ax.get_window_extent(renderer)
    for ann, offsets in labels:
        best: tuple[float, tuple[float, float, str, str]] | None = None
        for off in offsets:
            _put(ann, off)
            cost = _overlap(ann.get_window_extent(renderer), taken, frame)
            if best is None or cost < best[0]:
                best = (cost, off)
            if cost == 0:
                break
        if best is not None:
            _put(ann, best[1])
            taken.append(ann.get_window_extent(renderer).padded(2.0))  # (a gap between)


def _put(ann: Any, offset: tuple[float, float, str, str]) -> None:
    dx, dy, ha, va = offset
    ann.xyann = (dx, dy)
    ann.set_horizontalalignment(ha)
    ann.set_verticalalignment(va)


def _overlap(box: Any, taken: Sequence[Any], frame: Any) -> float:
    """Pixels of ``box`` over the ``taken`` boxes, plus those outside ``frame``."""

    def area(b: Any) -> float:
        return 0.0 if b is None else max(b.width, 0.0) * max(b.height, 0.0)

    from matplotlib.transforms import Bbox

    inside = Bbox.intersection(box, frame)
    return sum(area(Bbox.intersection(box, t)) for t in taken) + area(box) - area(inside)
