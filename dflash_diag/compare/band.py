"""What the baselines did at each point: a robust band from one baseline, and how the
bands of several baselines make one.

The band at an aligned point ``x``:

- one baseline: its local median curve ``m`` and ``m +- k x s x sqrt(1 + c)``.  ``m`` is
  a robust local quadratic over the ``window`` nearest logged points (default
  :data:`DEFAULT_WINDOW`; bisquare-reweighted, as LOESS, so the baseline's own spikes do
  not bend it), ``s = 1.4826 x MAD`` of its residuals (the standard deviation for normal
  noise), smoothed by a rolling median over 3 windows (on a long log's grid, of the
  scales fitted there: :func:`local_fit`), and ``s^2 c`` the variance of ``m`` itself.
  ``k`` defaults to :data:`DEFAULT_BAND_K`.  A plain rolling median is not used because
  on a steep curve (acc in warmup) it is the point itself and its MAD ~0.  On
  constructed runs about 99% of a like run's points fall inside with ``k = 3`` (98% with
  AR(1) noise, rho = 0.5).  ``s`` is floored at the metric's print step
  (``0.001`` for ``acc=0.046``) so a flat stretch does not make a zero-width band.
- 2 to 4 baselines: the envelope of their robust bands (lowest ``lo``, highest ``hi``);
  the median is the median of their centres.
- 5 or more: the 10th percentile of their ``lo`` and the 90th of their ``hi``
  (:data:`BAND_QUANTILES`, order statistics taken inwards), so the most extreme
  baseline on each side does not stretch the band.

A point is ``within`` when ``lo <= value <= hi``, else ``above`` or ``below``
(:func:`side_of`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np

from ..arrays import unique_values
from .align import Memo, gap_limit, interp_many, kept

DEFAULT_BAND_K = 3.0
DEFAULT_WINDOW = 21
#: :func:`local_fit` works on blocks of about this many (point, window member) pairs.
FIT_BLOCK = 1 << 17
#: :func:`local_fit` fits every point of a log of up to this many points, and a longer
#: log's on a grid of about this many.
GRID_FROM = 20_000
MAD_SCALE = 1.4826
#: A baseline logging a metric at fewer points gives no band for it.
MIN_BAND_POINTS = 5
#: From this many baselines on, the band is made of quantiles instead of the envelope.
QUANTILE_BASELINES = 5
BAND_QUANTILES = (0.1, 0.9)

#: One baseline's band on its own points: ``(x, median, lo, hi)``.
Band = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class BandAt(NamedTuple):
    """The baselines' band at some points: median, lo, hi (NaN where none covers)."""

    med: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    def select(self, mask: np.ndarray | slice) -> BandAt:
        """The band at the points ``mask`` (a boolean mask or a slice) selects."""
        return BandAt(self.med[mask], self.lo[mask], self.hi[mask])


def print_step(values: np.ndarray) -> float:
    """The print resolution of logged values: largest ``10**-k`` (k <= 8) they are multiples of.

    >>> print_step(np.array([0.046, 0.1, 0.25]))
    0.001
    """
    v = values[np.isfinite(values) & (values != 0)]
    np.abs(v, out=v)  # (a copy already: made absolute where it is)
    if v.size == 0:
        return 0.0
    head = v[:_STEP_SAMPLE]
    for k in range(0, 9):
        # (a step the first values are not multiples of is not the step of all: the
        # long test only for a step they pass)
        if _multiples(head, k) and (head.size == v.size or _multiples(v, k)):
            return 10.0**-k
    return 0.0


#: :func:`print_step` tries each step on this many values before all of them.
_STEP_SAMPLE = 256


def _multiples(v: np.ndarray, k: int) -> bool:
    """Every value of ``v`` is a multiple of ``10**-k`` (to ``1e-6`` of the scaled value,
    plus ``1e-9`` relative); in pieces of :data:`_STEP_PIECE` values, whose temporaries
    stay in cache (and the first piece that fails ends the test)."""
    step = 10.0**k
    for lo in range(0, v.size, _STEP_PIECE):
        scaled = v[lo : lo + _STEP_PIECE] * step
        off = np.round(scaled)
        np.subtract(scaled, off, out=off)
        np.abs(off, out=off)
        np.multiply(scaled, 1e-9, out=scaled)
        scaled += 1e-6
        if not bool(np.all(off <= scaled)):
            return False
    return True


#: :func:`_multiples` tests this many values at a time.
_STEP_PIECE = 1 << 14


def local_fit(
    x: np.ndarray,
    v: np.ndarray,
    window: int,
    grid_from: int | None = None,
    memo: Memo | None = None,
    smooth: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Robust local centre, noise scale and centre variance factor at each point.

    For point ``i`` the ``window`` nearest logged points (a centred window, shifted
    inwards at the ends) are fitted with a quadratic in the step by least squares with
    two rounds of bisquare robustness weights (``(1 - (r / 6s)^2)^2``, as LOESS; Cleveland,
    1979), so one spike in the baseline does not bend it.  The centre is the fit at
    ``x_i``; the scale ``s = 1.4826 x median|r| x sqrt(w / (w - 3))`` from the residuals
    ``r``; the factor ``c = [(D'D)^-1]_00`` makes ``s^2 c`` the centre's variance.  A
    plain rolling median would follow a steep curve point by point (the median of a
    rising window is its middle point) and give a MAD of ~0; a local quadratic keeps
    the trend, and its bend, out of the noise.

    Up to ``grid_from`` points (default :data:`GRID_FROM`) every point is fitted.  A
    longer log is fitted at every ``k``-th point, ``k = ceil(n / grid_from)`` (and at
    its last), as LOESS does on a grid (Cleveland and Grosse, 1991): between two fitted
    points the centre is the cubic Hermite curve through their fits' values and slopes,
    the scale and the factor are linear in ``x``.  (docs/performance.md states how far
    that lies from fitting every point.)

    ``smooth``: the scale is smoothed by a centred rolling median over ``smooth`` points
    (:func:`rolling_median`); on a grid, of the scales fitted at the grid points inside
    each grid point's ``smooth`` points (:func:`grid_medians`), then linear between them.

    What depends on ``x`` alone (the windows, their design, the factor, the curve between
    grid points) is kept in ``memo`` for the next metric logged at the same points.
    """
    geo = kept(memo, ("fit", x, window, grid_from), lambda: _Geometry.of(x, window, grid_from))
    parts = [_fit_windows(v, block) for block in geo.blocks]
    centre, slope, scale, _ = (np.concatenate(p) for p in zip(*parts, strict=True))
    if geo.curve is None:
        if smooth:
            scale = rolling_median(scale, smooth)
        fit = centre, scale, geo.c00.copy()
    else:
        if smooth:
            scale = grid_medians(geo.at, scale, smooth)
        fit = geo.curve.at(centre, slope), np.interp(x, geo.xa, scale), geo.c00.copy()
    if memo is not None:  # (for :func:`first_reaching` on the same points)
        memo.put(("centre", x, v, window, grid_from), fit[0])
    return fit


class _Windows(NamedTuple):
    """What :func:`_fit_windows` needs of ``x`` for a block of points: the window members'
    indices ``idx``, their offsets ``u = (x_j - x_i) / span`` and ``u2 = u^2``, the
    span, the plain fit's normal matrices and factor ``c00``."""

    idx: np.ndarray
    u: np.ndarray
    u2: np.ndarray
    span: np.ndarray
    plain: np.ndarray
    c00: np.ndarray
    ldl: _LDL | None = None

    @staticmethod
    def of(x: np.ndarray, start: np.ndarray, at: np.ndarray, w: int) -> _Windows:
        """The windows of the points ``at`` (window ``i`` starts at ``start[i]``)."""
        idx = start[at, None] + np.arange(w)[None, :]
        wx = x[idx]
        xi = x[at]
        span = np.ptp(wx, axis=1)
        span[span == 0] = 1.0
        u = (wx - xi[:, None]) / span[:, None]
        u2 = u * u
        plain, c00 = _plain_fits(u, u2)
        # (the plain fit's factors, for every metric fitted at these points)
        ldl = factor_3x3(plain) if w >= CLOSED_FORM_FROM else None
        return _Windows(idx, u, u2, span, plain, c00, ldl)


def _plain_fits(u: np.ndarray, u2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per window (a row of offsets ``u``, ``u2 = u^2``), the plain fit's normal matrix
    (the moments of weights all 1) and its factor ``c00 = [(D'D)^-1]_00``.

    Both depend on the window's offsets alone, and consecutive windows of evenly logged
    steps have the same offsets bit for bit (all but the two ends' windows): each run of
    such windows is worked out once and its numbers repeated (a row's sums and inverse
    are its own, whatever rows are beside it)."""
    n = u.shape[0]
    new = np.ones(n, dtype=bool)
    bits = u.view(np.int64)
    np.any(bits[1:] != bits[:-1], axis=1, out=new[1:])
    first = np.flatnonzero(new)
    if first.size > n // 2:  # (uneven steps: most windows their own)
        plain = _normal_matrix(np.ones_like(u), u, u2)
        return plain, np.linalg.inv(plain)[:, 0, 0]
    ua, u2a = u[first], u2[first]
    plain = _normal_matrix(np.ones_like(ua), ua, u2a)
    run = np.cumsum(new) - 1  # (the run of each window)
    return plain[run], np.linalg.inv(plain)[:, 0, 0][run]


class _Geometry(NamedTuple):
    """What :func:`local_fit` needs of ``x`` alone: the grid points' windows in blocks,
    the factor at every point, and (on a grid) the grid's ``x`` and the cubic between
    grid points."""

    blocks: list[_Windows]
    c00: np.ndarray
    xa: np.ndarray
    at: np.ndarray
    curve: _Hermite | None

    @staticmethod
    def of(x: np.ndarray, window: int, grid_from: int | None) -> _Geometry:
        """The geometry of fits of ``window`` points at ``x`` (see :func:`local_fit`)."""
        n = x.size
        w = min(window, n)
        start = np.clip(np.arange(n) - w // 2, 0, n - w)
        at = _grid(n, w, grid_from)
        block = max(1, FIT_BLOCK // w)
        blocks = [_Windows.of(x, start, at[lo : lo + block], w) for lo in range(0, at.size, block)]
        c00 = np.concatenate([b.c00 for b in blocks])
        if at.size == n:
            return _Geometry(blocks, c00, x, at, None)
        xa = x[at]
        return _Geometry(blocks, np.interp(x, xa, c00), xa, at, _Hermite.of(xa, x, at))


def _grid(n: int, w: int, grid_from: int | None) -> np.ndarray:
    """The points :func:`local_fit` fits: all of them, or every ``k``-th, the last and
    the two ends' ``w // 2 + 1`` (there the window stays put while ``x_i`` moves to its
    edge, and the factor grows fast)."""
    k = math.ceil(n / (GRID_FROM if grid_from is None else max(grid_from, 1)))
    if k <= 1:
        return np.arange(n)
    h = min(w // 2 + 1, n)
    return unique_values(np.concatenate([np.arange(0, n, k), np.arange(h), np.arange(n - h, n)]))


#: :func:`first_reaching` fits at most this many grid points at a time ...
SCAN_CHUNK = 4096
#: ... and this many first, twice as many each time after (a level reached early, as
#: acc's first ones are, costs a small piece; a late one a few large ones).
SCAN_FIRST = 256


def first_reaching(
    x: np.ndarray,
    v: np.ndarray,
    window: int,
    levels: Sequence[float],
    up: bool,
    grid_from: int | None = None,
    memo: Memo | None = None,
) -> list[int | None]:
    """Per level, the first index whose :func:`local_fit` centre reaches it (``>=``
    when ``up``, else ``<=``), or None; fitting from the start only as far as the last
    level needs (``SCAN_FIRST`` grid points, then twice as many each time up to
    ``SCAN_CHUNK``), with the same numbers, or reading the centre :func:`local_fit`
    left in ``memo`` for the same points."""
    kept = None if memo is None else memo.find(("centre", x, v, window, grid_from))
    if isinstance(kept, np.ndarray):
        return [_first(kept >= level if up else kept <= level) for level in levels]
    n = x.size
    w = min(window, n)
    start = np.clip(np.arange(n) - w // 2, 0, n - w)
    at = _grid(n, w, grid_from)
    found: dict[int, int | None] = {}
    first = 0  # the first point not yet looked at
    lo, size = 0, min(SCAN_FIRST, SCAN_CHUNK)
    while lo < at.size:
        seg = at[lo : lo + size + 1]  # (one point of overlap: the next piece's start)
        lo, size = lo + size, min(2 * size, SCAN_CHUNK)
        centre, slope, _, _ = _fit_blocks(x, v, start, seg, w)
        pts = np.arange(first, seg[-1] + 1)
        if pts.size == 0:
            break
        if at.size != n:
            centre = _hermite(x[seg], centre, slope, x[pts])
        else:
            centre = centre[first - seg[0] :]
        for i, level in enumerate(levels):
            if i not in found:
                hit = np.flatnonzero(centre >= level if up else centre <= level)
                if hit.size:
                    found[i] = int(pts[hit[0]])
        first = int(seg[-1]) + 1
        if len(found) == len(levels) or first >= n:
            break
    return [found.get(i) for i in range(len(levels))]


def _first(hit: np.ndarray) -> int | None:
    """The first index where ``hit`` is true, or None."""
    i = int(np.argmax(hit)) if hit.size else 0
    return i if hit.size and hit[i] else None


def _fit_blocks(
    x: np.ndarray, v: np.ndarray, start: np.ndarray, at: np.ndarray, w: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_fit_windows` at the points ``at``, in blocks whose ``(points, window)``
    arrays stay in cache: centre, slope (per unit of ``x``), scale, factor."""
    block = max(1, FIT_BLOCK // w)
    parts = [
        _fit_windows(v, _Windows.of(x, start, at[lo : lo + block], w))
        for lo in range(0, at.size, block)
    ]
    return tuple(np.concatenate(p) for p in zip(*parts, strict=True))  # type: ignore[return-value]


class _Hermite(NamedTuple):
    """The piecewise cubic through points ``xa`` with given values and slopes there, at
    points ``x`` (``xa`` increasing, ``x`` inside ``[xa[0], xa[-1]]``): per point, its
    interval ``j`` and the weights of the values and slopes at ``xa[j]``, ``xa[j + 1]``
    (the Hermite basis, the slopes' times the interval's length)."""

    j: np.ndarray
    y0: np.ndarray
    d0: np.ndarray
    y1: np.ndarray
    d1: np.ndarray

    @staticmethod
    def of(xa: np.ndarray, x: np.ndarray, at: np.ndarray | None = None) -> _Hermite:
        """The basis at ``x`` of the cubic on the points ``xa``; ``at``: the indices of
        ``xa`` in ``x`` when ``xa = x[at]``."""
        # ``h = xa[j + 1] - xa[j]`` (1 where not positive), ``t = (x - xa[j]) / h``, and
        # the basis ``2t^3 - 3t^2 + 1``, ``(t^3 - 2t^2 + t) h``, ``3t^2 - 2t^3``,
        # ``(t^3 - t^2) h``: the same operations in that order, written over arrays no
        # longer needed (a new one costs a page fault a page).
        j = _intervals(xa, x, at)
        j -= 1
        np.clip(j, 0, xa.size - 2, out=j)
        h, t = np.take(xa[1:], j), np.take(xa, j)
        h -= t
        np.copyto(h, 1.0, where=~(h > 0))
        np.subtract(x, t, out=t)
        t /= h
        t2 = t * t
        t3 = t2 * t
        tmp = np.multiply(t2, 3.0)
        y0 = np.multiply(t3, 2.0)
        y0 -= tmp
        y0 += 1.0
        y1 = np.multiply(t3, 2.0)
        np.subtract(tmp, y1, out=y1)
        np.multiply(t2, 2.0, out=tmp)
        d0 = np.subtract(t3, tmp, out=tmp)
        d0 += t
        d0 *= h
        np.subtract(t3, t2, out=t3)
        t3 *= h
        return _Hermite(j, y0, d0, y1, t3)

    def at(self, ya: np.ndarray, da: np.ndarray) -> np.ndarray:
        """The cubic with values ``ya`` and slopes ``da`` at the points ``xa``: ``y0 ya[j]
        + d0 da[j] + y1 ya[j + 1] + d1 da[j + 1]``, summed in that order in two arrays
        (not a new one for each product)."""
        j = self.j
        out = np.take(ya, j)
        out *= self.y0
        term = np.take(da, j)
        term *= self.d0
        out += term
        for a, weight in ((ya, self.y1), (da, self.d1)):
            np.take(a[1:], j, out=term)  # (a[j + 1])
            term *= weight
            out += term
        return out


def _intervals(xa: np.ndarray, x: np.ndarray, at: np.ndarray | None) -> np.ndarray:
    """Per point of ``x``, how many of ``xa`` are at most it (``np.searchsorted(xa, x,
    side="right")``).  When ``xa = x[at]`` (``at`` increasing) and ``x`` is strictly
    increasing, that is how many of ``at`` are at most the point's index: a running
    count, without a search a point."""
    if at is None or not bool((x[1:] > x[:-1]).all()):
        return np.searchsorted(xa, x, side="right")
    marks = np.zeros(x.size, dtype=np.intp)
    marks[at] = 1
    return np.cumsum(marks, out=marks)


def _hermite(xa: np.ndarray, ya: np.ndarray, da: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The piecewise cubic through ``(xa, ya)`` with slopes ``da`` there, at ``x``
    (``xa`` increasing, ``x`` inside ``[xa[0], xa[-1]]``)."""
    return _Hermite.of(xa, x).at(ya, da)


def _fit_windows(
    v: np.ndarray, win: _Windows
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`local_fit` at the points of the windows ``win``: centre, slope, scale,
    factor."""
    u, u2 = win.u, win.u2
    wv = v[win.idx]
    w = u.shape[1]
    mid = [w // 2] if w % 2 else [w // 2 - 1, w // 2]
    # (the first round's weights are all 1: ``1 x v`` is ``v``, so ``v`` itself)
    beta = _solve(win.plain, None, wv, u, u2, win.ldl)
    for it in range(3):
        r = _residuals(wv, beta, u, u2)
        s = _mad(r, mid)
        if it == 2:
            break  # (the last round's residuals give the scale; no further weights)
        weights = _bisquare(r, s)
        beta = _solve(_normal_matrix(weights, u, u2), weights, wv, u, u2)
    dof = math.sqrt(w / (w - 3)) if w > 3 else 1.0
    return beta[:, 0], beta[:, 1] / win.span, MAD_SCALE * s[:, 0] * dof, win.c00


# The three steps of a round below are ``r = v - (b0 + b1 u + b2 u^2)``, ``median|r|``
# and ``(1 - z^2)^2``, each the same operations in the same order as written plainly,
# worked out over arrays already made (a fresh ``(points, window)`` array costs a page
# fault a page and a pass over memory).


def _residuals(wv: np.ndarray, beta: np.ndarray, u: np.ndarray, u2: np.ndarray) -> np.ndarray:
    """Per window, ``wv - (b0 + b1 u + b2 u^2)`` (``+`` commutes exactly: ``b1 u + b0``
    is ``b0 + b1 u``, bit for bit)."""
    fit = np.multiply(beta[:, 1:2], u)
    fit += beta[:, :1]
    term = np.multiply(beta[:, 2:3], u2)
    fit += term
    return np.subtract(wv, fit, out=fit)


def _mad(r: np.ndarray, mid: list[int]) -> np.ndarray:
    """Per window, the median of ``|r|`` (the mean of the ``mid`` order statistics), as a
    column.  The rows are sorted, not partitioned: the order statistics are the same
    values (a selection, no arithmetic), and numpy sorts short rows faster than it
    partitions them."""
    a = np.abs(r)
    a.sort(axis=1)
    return a[:, mid].mean(axis=1, keepdims=True)


def _bisquare(r: np.ndarray, s: np.ndarray) -> np.ndarray:
    """The bisquare weights ``(1 - z^2)^2`` where ``|z| < 1``, else 0, of ``z = r / (6 x
    1.4826 s)`` (``z = 0`` in a window whose ``s`` is not positive)."""
    with np.errstate(all="ignore"):
        z = np.divide(r, 6 * MAD_SCALE * s)
    np.copyto(z, 0.0, where=~(s > 0))
    inside = np.abs(z) < 1
    np.multiply(z, z, out=z)
    np.subtract(1, z, out=z)
    np.square(z, out=z)  # (``x ** 2`` is numpy's ``square``)
    np.copyto(z, 0.0, where=~inside)
    return z


_RIDGE = 1e-12 * np.eye(3)


def _normal_matrix(weights: np.ndarray, u: np.ndarray, u2: np.ndarray) -> np.ndarray:
    """Per window, ``D'WD`` of the quadratic in ``u`` (plus a tiny ridge), from the
    weighted moments ``sum w u^p``, p = 0..4 (no ``(points, window, 3)`` arrays)."""
    wu, wu2 = weights * u, weights * u2
    m = [
        weights.sum(axis=1),
        wu.sum(axis=1),
        wu2.sum(axis=1),
        np.einsum("ij,ij->i", wu, u2),
        np.einsum("ij,ij->i", wu2, u2),
    ]
    # (entry ``(i, j)`` is ``m[i + j] + ridge[i, j]``, written in place: the sum a stack
    # of the moments plus the ridge makes, without the stacks)
    out = np.empty((weights.shape[0], 3, 3))
    for i in range(3):
        for j in range(3):
            np.add(m[i + j], _RIDGE[i, j], out=out[:, i, j])
    return out


def _solve(
    a: np.ndarray,
    weights: np.ndarray | None,
    wv: np.ndarray,
    u: np.ndarray,
    u2: np.ndarray,
    ldl: _LDL | None = None,
) -> np.ndarray:
    """Per window, the weighted quadratic's coefficients ``a^-1 D'W v`` (``weights``
    None: all 1; ``ldl``: :func:`factor_3x3` of ``a``, when made already)."""
    wwv = wv if weights is None else weights * wv
    rhs = np.stack(
        [wwv.sum(axis=1), np.einsum("ij,ij->i", wwv, u), np.einsum("ij,ij->i", wwv, u2)],
        axis=1,
    )
    if u.shape[1] < CLOSED_FORM_FROM:
        return np.linalg.solve(a, rhs[:, :, None])[:, :, 0]
    return solve_3x3(a, rhs, ldl)


#: Windows of fewer points are solved by LAPACK, as they always were: under 7 points
#: the bisquare may leave 3 or fewer points weighed, a quadratic through them has
#: residuals of rounding alone, and the next round's weights (and so the fit) follow
#: those last bits; from 7 on at least 4 points keep a weight (``|r| <= median |r|``).
CLOSED_FORM_FROM = 7

#: :func:`solve_3x3` solves a system in closed form when both later pivots of ``L D L'``
#: are at least this share of the first (``sum w``, the largest diagonal entry: the
#: offsets lie in ``[-1, 1]``); a nearly singular one (a window with most of its points
#: weighed 0) goes to LAPACK, whose answer there is its own.
PIVOT_SHARE = 1e-3


class _LDL(NamedTuple):
    """:func:`factor_3x3` of a stack of 3x3 matrices, in ``np.longdouble``: ``a00``,
    ``L``'s ``l10``, ``l20``, ``l21``, the pivots ``d1``, ``d2``, and which rows are
    ``weak`` (pivots under :data:`PIVOT_SHARE` of ``a00``, or not finite)."""

    a00: np.ndarray
    l10: np.ndarray
    l20: np.ndarray
    d1: np.ndarray
    l21: np.ndarray
    d2: np.ndarray
    weak: np.ndarray


def factor_3x3(a: np.ndarray) -> _LDL:
    """The ``L D L'`` factors :func:`solve_3x3` solves with (its docstring gives them)."""
    ld = np.longdouble
    m = a.reshape(-1, 9)
    # (the six entries of the upper triangle only, each widened as the whole was)
    a00, a01, a02, a11, a12, a22 = (m[:, i].astype(ld) for i in (0, 1, 2, 4, 5, 8))
    l10, l20 = a01 / a00, a02 / a00
    t = a12 - l20 * a01
    d1 = a11 - l10 * a01
    l21 = t / d1
    d2 = a22 - l20 * a02 - l21 * t
    with np.errstate(invalid="ignore"):
        weak = ~((d1 >= PIVOT_SHARE * a00) & (d2 >= PIVOT_SHARE * a00))
    return _LDL(a00, l10, l20, d1, l21, d2, weak)


def solve_3x3(a: np.ndarray, rhs: np.ndarray, ldl: _LDL | None = None) -> np.ndarray:
    """Per row, ``a^-1 rhs`` of a symmetric positive definite 3x3 ``a`` (``(n, 3, 3)``,
    ``rhs`` ``(n, 3)``), by ``a = L D L'`` in closed form, worked out in ``np.longdouble``
    (x87's 64-bit mantissa where numpy has it) and rounded to float64 once at the end.

    With ``l10 = a01 / a00``, ``l20 = a02 / a00``, ``d1 = a11 - l10 a01``,
    ``t = a12 - l20 a01``, ``l21 = t / d1``, ``d2 = a22 - l20 a02 - l21 t``: forward
    ``y = L^-1 rhs``, then ``x2 = y2 / d2``, ``x1 = y1 / d1 - l21 x2``,
    ``x0 = y0 / a00 - l10 x1 - l20 x2``.  A dozen array operations where LAPACK's solve
    costs a call a matrix; the answers lie within a relative 1e-12 of LAPACK's and
    nearer the exact solution of the float64 system (tests/compare/test_fast_paths_4.py).
    Rows whose pivots ``d1``, ``d2`` are under :data:`PIVOT_SHARE` of ``a00`` (or not
    finite) are LAPACK's.  ``ldl``: :func:`factor_3x3` of ``a``, when made already
    (the plain fits' matrices are the same for every metric fitted at the same points).
    """
    f = factor_3x3(a) if ldl is None else ldl
    y = rhs.astype(np.longdouble)
    y0 = y[:, 0]
    y1 = y[:, 1] - f.l10 * y0
    x2 = (y[:, 2] - f.l20 * y0 - f.l21 * y1) / f.d2
    x1 = y1 / f.d1 - f.l21 * x2
    x0 = y0 / f.a00 - f.l10 * x1 - f.l20 * x2
    out = np.empty(rhs.shape)  # (each column rounded to float64 once, as astype rounds)
    out[:, 0], out[:, 1], out[:, 2] = x0, x1, x2
    if f.weak.any():
        weak = f.weak
        out[weak] = np.linalg.solve(a[weak], rhs[weak][:, :, None])[:, :, 0]
    return out


def rolling_median(a: np.ndarray, size: int) -> np.ndarray:
    """Centred rolling median of ``a`` over ``size`` points, over the points there are
    near the ends (``pandas``' ``rolling(size, center=True, min_periods=1).median()``).

    >>> rolling_median(np.array([1.0, 5.0, 2.0, 8.0, 3.0]), 3).tolist()
    [3.0, 2.0, 5.0, 3.0, 5.5]
    """
    from scipy.ndimage import rank_filter

    n = a.size
    before = size // 2  # pandas' centred window: ``size // 2`` points before i
    after = size - 1 - before
    mid = [size // 2] if size % 2 else [size // 2 - 1, size // 2]
    ranks = [rank_filter(a, r, size=size, mode="nearest") for r in mid]
    out = ranks[0] if len(ranks) == 1 else 0.5 * (ranks[0] + ranks[1])
    # (a short series' points in both ends come twice, as they always have)
    ends = np.r_[np.arange(min(before, n)), np.arange(max(n - after, 0), n)]
    if ends.size:
        out[ends] = _truncated_medians(a, ends, before, after)
    return out


_HALF_MAX = float(np.finfo(float).max) / 2


def grid_medians(at: np.ndarray, a: np.ndarray, size: int) -> np.ndarray:
    """Per grid point ``at[j]`` (indices of a log's points, increasing), the median of
    the values ``a`` of the grid points inside its centred window of ``size`` points
    (``at[j] - size // 2`` to ``at[j] + size - 1 - size // 2``, as
    :func:`rolling_median`'s).  With every point on the grid it is
    :func:`rolling_median` of ``a``.

    >>> grid_medians(np.array([0, 3, 6, 9]), np.array([1.0, 5.0, 2.0, 8.0]), 7).tolist()
    [3.0, 2.0, 5.0, 5.0]
    """
    before = size // 2
    first = np.searchsorted(at, at - before, side="left")
    m = np.searchsorted(at, at + (size - 1 - before), side="right") - first
    # Evenly spaced grid points hold a centred run of the grid of one odd length: their
    # medians are a rank filter's (the middle value, picked, not computed); the ends'
    # and the rest are each range's own.
    centred = (m % 2 == 1) & (first == np.arange(m.size) - m // 2)
    sizes = unique_values(m[centred]) if centred.any() and _plain_values(a) else m[:0]
    out = np.empty(m.size)
    done = np.zeros(m.size, dtype=bool)
    for s in sizes:
        rows = centred & (m == s)
        if 2 * int(np.count_nonzero(rows)) > m.size:  # (the interior's length)
            from scipy.ndimage import rank_filter

            out[rows] = rank_filter(a, int(s) // 2, size=int(s), mode="nearest")[rows]
            done |= rows
    rest = ~done
    if rest.any():
        out[rest] = _range_medians(a, first[rest], m[rest])
    return out


def _plain_values(a: np.ndarray) -> bool:
    """Every value finite, none ``-0.0`` (a rank filter's middle value is then
    ``np.median``'s, bit for bit)."""
    return bool(np.isfinite(a).all()) and not bool(((a == 0) & np.signbit(a)).any())


def _truncated_medians(a: np.ndarray, at: np.ndarray, before: int, after: int) -> np.ndarray:
    """Per point ``i`` of ``at``, ``np.median(a[max(i - before, 0) : i + after + 1])``
    (the windows cut short at the ends of ``a``): :func:`_range_medians`."""
    first = np.maximum(at - before, 0)
    return _range_medians(a, first, np.minimum(at + after + 1, a.size) - first)


def _range_medians(a: np.ndarray, first: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Per row ``i``, ``np.median(a[first[i] : first[i] + m[i]])`` (``m >= 1``), in one
    sort: the middle value of the ``m`` in a range, or the mean of the two middle ones,
    ``(0 + lo + hi) / 2`` as ``np.median`` takes it.  A range holding NaN, +-inf or a
    value over half the largest float (its NaN, its warnings), or both ``-0.0`` and
    ``0.0`` (which of the equal two is the middle is the sort's), is ``np.median``'s own."""
    n = a.size
    idx = first[:, None] + np.arange(int(m.max()))[None, :]
    inside = idx < (first + m)[:, None]
    win = np.where(inside, a[np.minimum(idx, n - 1)], np.inf)  # (inf pads sort last)
    zero = inside & (win == 0)
    negative = zero & np.signbit(win)
    # (NaN, +-inf, or so large that two of them overflow as np.median's sum does)
    odd = (inside & ~(np.abs(win) <= _HALF_MAX)).any(axis=1)
    plain = odd | (negative.any(axis=1) & (zero & ~negative).any(axis=1))
    ranked = np.sort(win, axis=1)
    rows = np.arange(first.size)
    # (np.median's mean is a sum from 0.0: -0.0 comes out 0.0)
    out, hi = ranked[rows, (m - 1) // 2] + 0.0, ranked[rows, m // 2]
    even = (m % 2 == 0) & ~plain
    out[even] = (out[even] + hi[even]) / 2.0
    for r in np.flatnonzero(plain):
        out[r] = np.median(a[first[r] : first[r] + m[r]])
    return out


def robust_band(
    x: np.ndarray, v: np.ndarray, k: float, window: int, memo: Memo | None = None
) -> Band | None:
    """One baseline's ``(x, median, lo, hi)`` on its own finite points, or None (fewer
    than :data:`MIN_BAND_POINTS`); ``memo`` keeps what depends on ``x`` alone for the
    next metric (:func:`local_fit`)."""
    ok = np.isfinite(x) & np.isfinite(v)
    if not ok.all():  # (else ``x`` as it is: the same array for the next metric's memo)
        x, v = x[ok], v[ok]
    if x.size < MIN_BAND_POINTS:
        return None
    if not (x[1:] >= x[:-1]).all():  # (logs come sorted: skip the sort)
        order = np.argsort(x, kind="stable")
        x, v = x[order], v[order]
    # One window's scale is itself noisy (a few lucky points make a narrow band); the
    # noise level changes slowly, so it is the rolling median over 3 windows.
    centre, scale, c00 = local_fit(x, v, window, memo=memo, smooth=3 * window)
    np.maximum(scale, print_step(v), out=scale)
    # A like run's point differs from the centre by its own noise and the centre's error:
    # ``half = k x scale x sqrt(1 + c00)``, worked out in the arrays already made.
    np.add(c00, 1.0, out=c00)
    np.sqrt(c00, out=c00)
    scale *= k
    scale *= c00
    half = scale
    lo = centre - half
    if (v >= 0).all():
        np.maximum(lo, 0.0, out=lo)  # acc, loss, grad norms: a band below 0 says nothing
    return x, centre, lo, centre + half


def band_at(bands: Sequence[Band], x: np.ndarray, memo: Memo | None = None) -> BandAt:
    """Median, lo, hi of the baselines' band at ``x`` (NaN where none covers it): the
    envelope of up to 4 baselines' bands, :data:`BAND_QUANTILES` of 5 or more.  ``memo``
    keeps where ``x`` falls among a band's points for the next call on the same ones."""
    rows = []
    for bx, *curves in bands:
        gap = kept(memo, ("gap", bx), lambda: gap_limit(bx))  # noqa: B023 (called at once)
        rows.append(interp_many(bx, curves, x, gap, memo))
    if len(rows) == 1:  # one baseline: its band, where it covers
        m1, lo1, hi1 = rows[0]
        some = np.isfinite(m1)
        if some.all():
            return BandAt(m1, lo1, hi1)
        return BandAt(m1, np.where(some, lo1, np.nan), np.where(some, hi1, np.nan))
    m, lo_, hi_ = (np.vstack(curve) for curve in zip(*rows, strict=True))
    n = np.isfinite(m).sum(axis=0)
    med = np.full(x.shape, np.nan)
    lo_out, hi_out = med.copy(), med.copy()
    some = n > 0
    if some.any():
        with np.errstate(all="ignore"):
            med[some] = np.nanmedian(m[:, some], axis=0)
            many = n >= QUANTILE_BASELINES
            few = some & ~many
            lo_out[few] = np.nanmin(lo_[:, few], axis=0)
            hi_out[few] = np.nanmax(hi_[:, few], axis=0)
            if many.any():
                # Order statistics taken inwards: with 5-10 baselines the most extreme
                # one on each side is left out.
                q0, q1 = BAND_QUANTILES
                lo_out[many] = nan_order_statistic(lo_[:, many], q0, "higher")
                hi_out[many] = nan_order_statistic(hi_[:, many], q1, "lower")
    return BandAt(med, lo_out, hi_out)


def nan_order_statistic(
    a: np.ndarray, q: float, method: Literal["lower", "higher", "nearest"]
) -> np.ndarray:
    """``np.nanquantile(a, q, axis=0, method=method)`` for a ``method`` that picks one of
    a column's values (``lower``, ``higher``, ``nearest``): the same values, without a
    Python call per column.

    A column with ``c`` values that are not NaN gets its ``k``-th smallest, ``k`` the
    value of ``np.quantile(np.arange(c), q, method=method)`` (the index numpy picks among
    ``c`` sorted values).  Columns numpy may answer otherwise go to ``np.nanquantile``
    itself: all NaN (its warning), or holding both ``-0.0`` and ``0.0`` (equal, so which
    of the two a sort puts first is the algorithm's).

    >>> a = np.array([[1.0, 5.0], [3.0, np.nan], [2.0, 4.0]])
    >>> nan_order_statistic(a, 0.9, "lower").tolist()
    [2.0, 4.0]
    """
    out = np.empty(a.shape[1:])
    count = (~np.isnan(a)).sum(axis=0)
    zero = a == 0
    negative = zero & np.signbit(a)
    slow = (count == 0) | (negative.any(axis=0) & (zero & ~negative).any(axis=0))
    fast = ~slow
    if fast.any():
        ranked = np.sort(a[:, fast], axis=0)  # (NaN sorts last)
        left, where = count[fast], np.flatnonzero(fast)
        for c in unique_values(left):
            k = int(np.quantile(np.arange(c, dtype=float), q, method=method))
            cols = left == c
            out[where[cols]] = ranked[k, cols]
    if slow.any():
        out[slow] = np.nanquantile(a[:, slow], q, axis=0, method=method)
    return out


#: :func:`side_codes` values, by side; code 0 is no value or no band.
SIDE_CODES = {"within": 1, "above": 2, "below": 3}
_SIDE_NAMES = np.array(["", "within", "above", "below"], dtype=object)


def side_codes(v: np.ndarray, band: BandAt) -> np.ndarray:
    """Per point: the :data:`SIDE_CODES` code of its side (int8; 0: no value or no band)."""
    lo, hi = band.lo, band.hi
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(v) & np.isfinite(lo) & np.isfinite(hi)
        # (below before above: where an envelope's lo passes its hi, below wins)
        codes = np.where(v < lo, np.int8(3), np.where(v > hi, np.int8(2), np.int8(1)))
    return np.where(ok, codes, np.int8(0)).astype(np.int8)


def side_of(v: np.ndarray, band: BandAt) -> np.ndarray:
    """Per point: ``within``, ``above``, ``below`` or ``""`` (no value or no band)."""
    return _SIDE_NAMES[side_codes(v, band)]


def band_words(n: int, k: float, window: int) -> str:
    """How the band of ``n`` baselines is made, in words (``Comparison.band_method``)."""
    one = f"robust local quadratic over {window} logged points +- {k:g} x 1.4826 x MAD"
    if n == 1:
        return one
    if n < QUANTILE_BASELINES:
        return f"envelope of {n} baselines' bands ({one})"
    q0, q1 = BAND_QUANTILES
    return f"{q0:.0%}-{q1:.0%} quantiles of {n} baselines' bands ({one})"
