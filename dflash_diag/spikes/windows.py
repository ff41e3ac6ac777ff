"""Rolling windows over a logged series: the baselines behind the spike detectors.

Every function takes the finite values of one metric in step order and, for each point
``i``, looks at a window of other points (``i`` itself is always left out), so a spike
never lifts its own baseline.  Full windows are vectorised with
``numpy.lib.stride_tricks.sliding_window_view`` in chunks (bounded memory); the cut
windows at the ends are done one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

#: Points per half-window needed before a window's trend line is used (else its median).
MIN_LINE_HALF = 5
#: :func:`trend_baseline` works on blocks of about this many (point, window member)
#: pairs: a block's arrays stay in cache (16% faster than blocks of 2M on 300K points).
LEVEL_BLOCK = 1 << 17


def rolling(
    x: np.ndarray, window: int, fn: Callable[[np.ndarray], np.ndarray], centred: bool = False
) -> np.ndarray:
    """``fn`` (over axis 1) of the window of each point ``i``, ``x[i]`` itself left out.

    Trailing: ``x[max(0, i - window):i]`` (growing at the start; nothing for ``i = 0``).
    Centred: ``x[i - h:i] + x[i + 1:i + 1 + h]`` with ``h = window // 2``, cut at both
    ends.  Full windows are vectorised in chunks (memory ~ ``8 * window`` bytes x 500,000);
    the cut ones at the ends are done one by one.
    """
    import numpy as np

    n = x.shape[0]
    out = np.full(n, np.nan)
    chunk = max(1, 4_000_000 // window)
    if not centred:
        for i in range(1, min(window, n)):
            out[i] = fn(x[None, :i])[0]
        if n > window:
            view = np.lib.stride_tricks.sliding_window_view(x[:-1], window)  # i-window..i-1
            for lo in range(0, view.shape[0], chunk):
                out[window + lo : window + lo + chunk] = fn(view[lo : lo + chunk])
        return out
    h = max(1, window // 2)
    keep = np.r_[0:h, h + 1 : 2 * h + 1]
    edge = [i for i in range(n) if i < h or i >= n - h]
    for i in edge:
        w = np.concatenate([x[max(0, i - h) : i], x[i + 1 : i + 1 + h]])
        if w.size:
            out[i] = fn(w[None, :])[0]
    if n > 2 * h:
        view = np.lib.stride_tricks.sliding_window_view(x, 2 * h + 1)  # centred on i = j + h
        for lo in range(0, view.shape[0], chunk):
            out[h + lo : h + lo + min(chunk, view.shape[0] - lo)] = fn(
                view[lo : lo + chunk][:, keep]
            )
    return out


def _level(w: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """Median and MAD of each window row after removing its robust linear trend.

    ``rel`` holds the columns' positions relative to the point judged.  The slope is
    ``(median of the later half - median of the earlier half) / (distance between the
    halves' median positions)``, robust to a few spikes; the values are projected to the
    point (``w - slope * rel``) and their median is the baseline there, their MAD the
    noise around the trend.  Returns an ``(m, 2)`` array: baseline, MAD.
    """
    import numpy as np

    k = w.shape[1]
    half = k // 2
    if half >= MIN_LINE_HALF:  # a line through a handful of points extrapolates noise
        gap = float(np.median(rel[k - half :]) - np.median(rel[:half]))
        slope = (np.median(w[:, k - half :], axis=1) - np.median(w[:, :half], axis=1)) / gap
        proj = w - slope[:, None] * rel[None, :]
    else:
        proj = w
    med = np.median(proj, axis=1)
    mad = np.median(np.abs(proj - med[:, None]), axis=1)
    return np.column_stack([med, mad])


def trend_baseline(x: np.ndarray, window: int, centred: bool) -> tuple[np.ndarray, np.ndarray]:
    """Baseline and MAD at every point from :func:`_level` over its window (point left
    out): trailing ``x[i - window:i]`` (growing at the start) or centred (``window // 2``
    each side, cut at the ends)."""
    import numpy as np

    n = x.shape[0]
    out = np.full((n, 2), np.nan)
    chunk = max(1, LEVEL_BLOCK // window)
    if not centred:
        for i in range(1, min(window, n)):
            out[i] = _level(x[None, :i], np.arange(-i, 0, dtype=float))[0]
        if n > window:
            view = np.lib.stride_tricks.sliding_window_view(x[:-1], window)
            rel = np.arange(-window, 0, dtype=float)
            for lo in range(0, view.shape[0], chunk):
                out[window + lo : window + lo + chunk] = _level(view[lo : lo + chunk], rel)
        return out[:, 0], out[:, 1]
    h = max(1, window // 2)
    for i in [i for i in range(n) if i < h or i >= n - h]:
        lo, hi = max(0, i - h), min(n, i + 1 + h)
        rel = np.concatenate([np.arange(lo - i, 0), np.arange(1, hi - i)]).astype(float)
        w = np.concatenate([x[lo:i], x[i + 1 : hi]])
        if w.size:
            out[i] = _level(w[None, :], rel)[0]
    if n > 2 * h:
        keep = np.r_[0:h, h + 1 : 2 * h + 1]
        rel = (keep - h).astype(float)
        view = np.lib.stride_tricks.sliding_window_view(x, 2 * h + 1)
        for lo in range(0, view.shape[0], chunk):
            part = view[lo : lo + chunk][:, keep]
            out[h + lo : h + lo + part.shape[0]] = _level(part, rel)
    return out[:, 0], out[:, 1]


def row_median(w: np.ndarray) -> np.ndarray:
    """Median of each row (a window per row)."""
    import numpy as np

    return np.median(w, axis=1)


def row_mad(w: np.ndarray) -> np.ndarray:
    """Median absolute deviation from the row's median, per row (not scaled by 1.4826)."""
    import numpy as np

    med = np.median(w, axis=1, keepdims=True)
    return np.median(np.abs(w - med), axis=1)


def print_resolution(x: np.ndarray) -> float:
    """The print resolution of the values: their smallest positive gap (``0.0001`` for
    a loss printed with 4 decimals), so a step of one printed digit is not a spike."""
    import numpy as np

    gaps = np.diff(np.unique(x))
    return float(gaps.min()) if gaps.size else 0.0


def window_sizes(n: int, window: int, centred: bool) -> np.ndarray:
    """Points in the window of each of ``n`` points, as :func:`trend_baseline` cuts them:
    trailing ``min(i, window)``; centred ``min(i, h) + min(n - 1 - i, h)``, ``h = window // 2``.

    >>> window_sizes(6, 4, centred=False).tolist()
    [0, 1, 2, 3, 4, 4]
    >>> window_sizes(6, 4, centred=True).tolist()
    [2, 3, 4, 4, 3, 2]
    """
    import numpy as np

    i = np.arange(n)
    if not centred:
        return np.minimum(i, window)
    h = max(1, window // 2)
    return np.minimum(i, h) + np.minimum(n - 1 - i, h)
