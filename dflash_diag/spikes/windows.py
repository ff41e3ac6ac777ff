"""Rolling windows over a logged series: the baselines behind the spike detectors.

Every function takes the finite values of one metric in step order and, for each point
``i``, looks at a window of other points (``i`` itself is always left out), so a spike
never lifts its own baseline.  Full windows are vectorised with
``numpy.lib.stride_tricks.sliding_window_view`` in chunks (bounded memory); the cut
windows at the ends are done one by one.  Medians are :func:`median_rows`: the numbers
of ``np.median``, from one sort of each row.
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


def median_rows(w: np.ndarray) -> np.ndarray:
    """``np.median(w, axis=1)``, the same numbers, from one sort of each row
    (:func:`_sorted_median`).

    ``np.median`` partitions each row at three positions (the two middle ones and the
    last, for its NaN check), several times slower on short rows than numpy's
    vectorised sort.  ``w`` has at least one column.

    >>> import numpy as np
    >>> median_rows(np.array([[3.0, 1.0, 2.0, 10.0], [1.0, np.nan, 0.0, 2.0]])).tolist()
    [2.5, nan]
    """
    import numpy as np

    return _sorted_median(np.sort(w, axis=1))


def median_of(v: np.ndarray) -> float:
    """``np.median(v)`` of a 1-D array, the same number, from one partition at the
    lower middle (and the minimum above it for an even size): ``np.median``
    partitions at three positions, ten times slower on a long array.  NaN when ``v``
    holds one; ``v`` is not empty.

    >>> import numpy as np
    >>> median_of(np.array([4.0, 1.0, 3.0, 2.0])), median_of(np.array([1.0, np.nan, 0.0]))
    (2.5, nan)
    """
    import numpy as np

    n = v.shape[0]
    mid = (n - 1) // 2
    part = np.partition(v, mid)
    upper = part[mid + 1 :]
    if n % 2:
        above = upper.max() if upper.size else part[mid]
        return float(above) if np.isnan(above) else float(part[mid])
    return float((part[mid] + upper.min()) / 2)


def _sorted_median(s: np.ndarray) -> np.ndarray:
    """The median of each row of ``s``, its rows sorted (NaN last), as ``np.median``
    takes it: a selection, the middle value (odd width ``k``) or ``(s[k/2 - 1] +
    s[k/2]) / 2`` (even); the row's own NaN when it holds one."""
    import numpy as np

    k = s.shape[1]
    mid = k // 2
    med = s[:, mid] if k % 2 else (s[:, mid - 1] + s[:, mid]) / 2
    last = s[:, -1]
    return np.where(np.isnan(last), last, med)


def _half_medians(x: np.ndarray, half: int) -> np.ndarray:
    """``m[j] = median(x[j:j + half])`` for every ``j`` with a full run (``n - half + 1``
    values): the medians of the halves of every full window, each computed once
    (a window's earlier half is a later window's later half)."""
    import numpy as np

    n = x.shape[0]
    out = np.empty(max(0, n - half + 1))
    if out.size:
        view = np.lib.stride_tricks.sliding_window_view(x, half)
        chunk = max(1, LEVEL_BLOCK // half)
        for lo in range(0, view.shape[0], chunk):
            out[lo : lo + chunk] = median_rows(view[lo : lo + chunk])
    return out


def _level(
    w: np.ndarray, rel: np.ndarray, halves: tuple[np.ndarray, np.ndarray] | None = None
) -> np.ndarray:
    """Median and MAD of each window row after removing its robust linear trend.

    ``rel`` holds the columns' positions relative to the point judged.  The slope is
    ``(median of the later half - median of the earlier half) / (distance between the
    halves' median positions)``, robust to a few spikes; the values are projected to the
    point (``w - slope * rel``) and their median is the baseline there, their MAD the
    noise around the trend.  ``halves``: the rows' (earlier, later) half medians when
    already known (:func:`_half_medians`).  Returns an ``(m, 2)`` array: baseline, MAD.
    """
    import numpy as np

    k = w.shape[1]
    half = k // 2
    if half >= MIN_LINE_HALF:  # a line through a handful of points extrapolates noise
        gap = median_of(rel[k - half :]) - median_of(rel[:half])
        if halves is None:
            halves = median_rows(w[:, :half]), median_rows(w[:, k - half :])
        slope = (halves[1] - halves[0]) / gap
        proj = slope[:, None] * rel[None, :]
        np.subtract(w, proj, out=proj)  # w - slope * rel
    else:
        proj = np.array(w, copy=True)
    # One work array, sorted in place: the MAD's deviations are taken from the sorted
    # projections (the same values per row, in another order).
    proj.sort(axis=1)
    med = _sorted_median(proj)
    np.subtract(proj, med[:, None], out=proj)
    np.abs(proj, out=proj)
    proj.sort(axis=1)
    return np.column_stack([med, _sorted_median(proj)])


def trend_baseline(x: np.ndarray, window: int, centred: bool) -> tuple[np.ndarray, np.ndarray]:
    """Baseline and MAD at every point from :func:`_level` over its window (point left
    out): trailing ``x[i - window:i]`` (growing at the start) or centred (``window // 2``
    each side, cut at the ends).

    The medians of the full windows' halves come from one pass of
    :func:`_half_medians`: trailing, point ``i`` has ``m[i - window]`` and
    ``m[i - half]`` (``half = window // 2``); centred, ``m[i - h]`` and ``m[i + 1]``.
    """
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
            half = window // 2
            m = _half_medians(x, half) if half >= MIN_LINE_HALF else None
            for lo in range(0, view.shape[0], chunk):
                part = view[lo : lo + chunk]
                hv = None
                if m is not None:
                    j = lo + part.shape[0]
                    hv = m[lo:j], m[lo + window - half : j + window - half]
                out[window + lo : window + lo + chunk] = _level(part, rel, hv)
        return out[:, 0], out[:, 1]
    h = max(1, window // 2)
    for i in np.r_[0 : min(h, n), max(h, n - h) : n]:
        lo, hi = max(0, i - h), min(n, i + 1 + h)
        rel = np.concatenate([np.arange(lo - i, 0), np.arange(1, hi - i)]).astype(float)
        w = np.concatenate([x[lo:i], x[i + 1 : hi]])
        if w.size:
            out[i] = _level(w[None, :], rel)[0]
    if n > 2 * h:
        keep = np.r_[0:h, h + 1 : 2 * h + 1]
        rel = (keep - h).astype(float)
        view = np.lib.stride_tricks.sliding_window_view(x, 2 * h + 1)
        m = _half_medians(x, h) if h >= MIN_LINE_HALF else None
        for lo in range(0, view.shape[0], chunk):
            part = view[lo : lo + chunk][:, keep]
            hv = None
            if m is not None:
                j = lo + part.shape[0]
                hv = m[lo:j], m[lo + h + 1 : j + h + 1]
            out[h + lo : h + lo + part.shape[0]] = _level(part, rel, hv)
    return out[:, 0], out[:, 1]


def row_median(w: np.ndarray) -> np.ndarray:
    """Median of each row (a window per row)."""
    return median_rows(w)


def row_mad(w: np.ndarray) -> np.ndarray:
    """Median absolute deviation from the row's median, per row (not scaled by 1.4826)."""
    import numpy as np

    med = median_rows(w)[:, None]
    return median_rows(np.abs(w - med))


def print_resolution(x: np.ndarray) -> float:
    """The print resolution of the values: their smallest positive gap (``0.0001`` for
    a loss printed with 4 decimals), so a step of one printed digit is not a spike."""
    import numpy as np

    from ..arrays import unique_values

    gaps = np.diff(unique_values(x))
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
