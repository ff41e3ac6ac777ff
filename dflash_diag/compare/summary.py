"""What the comparison of one metric says: per-phase shares and the largest departure,
slopes after warmup with confidence intervals, milestones, and the verdict in words.

A phase (or a metric) is ``within`` when at least :data:`WITHIN_SHARE` of its compared
points are inside the band, or when no more of them are above (below) it than of the
baselines' own points of that phase, give or take :func:`share_slack` (a spiky
baseline's spikes lie outside its own robust band: a like run shows as many);
otherwise ``above``/``below`` by the larger share, ``mixed`` when both are over 10%, and
``not enough data`` under :data:`MIN_PHASE_POINTS` compared points.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from ..arrays import rows
from ..errors import InputError
from ..lr_phases import WARMUP, Phases, phase_codes
from .align import AlignedLog, Memo, column, short_name
from .band import MIN_BAND_POINTS, SIDE_CODES, BandAt, first_reaching, side_codes
from .results import Departure, Milestone, NonFinite, PhaseSummary, PointAnswer, Slope

MIN_PHASE_POINTS = 5
#: The baselines' own shares outside their band are said from this share on.
OWN_SHARE_SHOWN = 0.02
MIN_SLOPE_POINTS = 10
WITHIN_SHARE = 0.9
#: Default milestone levels for acc-like metrics (fractions of tokens right).
ACC_MILESTONES: tuple[float, ...] = (0.1, 0.3, 0.5)
#: Key of a milestones mapping that applies to every acc-like metric.
ACC_LIKE = "acc*"


# --- shares and departures --------------------------------------------------------------


_SIDES = ("within", "above", "below")


def _label(inside: float, above: float, below: float, expected: tuple[float, float], n: int) -> str:
    if inside >= WITHIN_SHARE:
        return "within"
    (ea, eb) = expected
    if above <= ea + share_slack(ea, n) and below <= eb + share_slack(eb, n):
        return "within"  # (no more outside than the baselines' own points)
    if above > 0.1 and below > 0.1:
        return "mixed"
    return "above" if above >= below else "below"


def share_slack(p: float, n: int) -> float:
    """How far a share of ``n`` points may exceed a rate ``p`` and still be that rate:
    one point in a hundred plus three binomial standard errors, ``0.01 + 3 sqrt(q (1 -
    q) / n)``, ``q = max(p, 0.01)``.

    >>> round(share_slack(0.12, 200), 3)
    0.079
    """
    q = max(p, 0.01)
    return 0.01 + 3 * math.sqrt(q * (1 - q) / max(n, 1))


def own_shares(side: np.ndarray) -> tuple[float, float] | None:
    """The shares above and below of points' side codes (None: none compared)."""
    counts = side_counts(side)
    n = int(counts[1:].sum())
    if n == 0:
        return None
    return float(counts[SIDE_CODES["above"]] / n), float(counts[SIDE_CODES["below"]] / n)


def summarise_phase(
    phase: str,
    steps: np.ndarray,
    v: np.ndarray,
    band: BandAt,
    side: np.ndarray | None = None,
    expected: tuple[float, float] | None = None,
) -> PhaseSummary:
    """Shares of the run's points ``(steps, v)`` inside, above and below ``band``, the
    verdict (module docstring) and the largest departure; ``side``: the points'
    :func:`~dflash_diag.compare.band.side_codes` when already found; ``expected``: the
    shares above and below of the baselines' own points of the phase."""
    if side is None:
        side = side_codes(v, band)
    has = np.isfinite(v)
    counts = side_counts(side)
    n_points, n_comp = int(has.sum()), int(counts[1:].sum())
    # (the first and last points with a value, without a copy of those points)
    first = int(steps[int(np.argmax(has))]) if n_points else None
    last = int(steps[has.size - 1 - int(np.argmax(has[::-1]))]) if n_points else None
    if n_comp < MIN_PHASE_POINTS:
        return PhaseSummary(
            phase, n_points, n_comp, first, last, None, None, None, "not enough data", None
        )
    inside, above, below = (float(counts[SIDE_CODES[s]] / n_comp) for s in _SIDES)
    return PhaseSummary(
        phase,
        n_points,
        n_comp,
        first,
        last,
        inside,
        above,
        below,
        _label(inside, above, below, expected or (0.0, 0.0), n_comp),
        _largest_departure(steps, v, band, side),
        None if expected is None else expected[0],
        None if expected is None else expected[1],
    )


def side_counts(side: np.ndarray) -> np.ndarray:
    """How many points have each side code 0-3 (``np.bincount(side, minlength=4)`` of
    codes that are 0-3), counted on the int8 codes as they are: ``bincount`` would first
    copy them into a new array of 8-byte integers."""
    return np.array([np.count_nonzero(side == code) for code in range(4)], dtype=np.intp)


def _largest_departure(
    steps: np.ndarray, v: np.ndarray, band: BandAt, side: np.ndarray
) -> Departure | None:
    med, lo, hi = band
    up = side == SIDE_CODES["above"]
    out = up | (side == SIDE_CODES["below"])
    if not out.any():
        return None
    # Widths out of the band, of the points outside it only (inside ones never win:
    # an outside point's width is positive, or NaN, which argmax takes first as well).
    at = np.flatnonzero(out)
    vo, mo, lo_o, hi_o = v[at], med[at], lo[at], hi[at]
    tiny = 1e-12
    with np.errstate(all="ignore"):
        widths = np.where(
            up[at],
            (vo - hi_o) / np.maximum(hi_o - mo, tiny),
            (lo_o - vo) / np.maximum(mo - lo_o, tiny),
        )
    k = int(np.argmax(widths))
    i = int(at[k])
    excess = v[i] - hi[i] if up[i] else v[i] - lo[i]
    return Departure(
        step=int(steps[i]),
        value=float(v[i]),
        baseline_median=float(med[i]),
        band=(float(lo[i]), float(hi[i])),
        side="above" if up[i] else "below",
        excess=float(excess),
        widths=float(widths[k]),
    )


# --- slopes -----------------------------------------------------------------------------


def slope_with_ci(
    x: np.ndarray, v: np.ndarray, *, file: str = "", scale: float = 1000.0, per: str = "1k steps"
) -> Slope:
    """Least-squares slope of ``v`` on ``x`` per ``scale`` units of ``x``, 95% Newey-West CI.

    ``V = (X'X)^-1 S (X'X)^-1`` with ``S = sum_l w_l sum_t e_t e_{t-l} x_t x_{t-l}'``
    (both orders), ``w_l = 1 - l / (L + 1)``, ``L = floor(4 (n/100)^(2/9))`` (Newey and
    West, 1987); the interval is ``slope +- t_{0.975, n-2} x se``.  Fewer than
    :data:`MIN_SLOPE_POINTS` points: no slope, and the reason says so.

    >>> s = slope_with_ci(np.arange(100.0), 0.002 * np.arange(100.0))
    >>> round(s.value, 6), s.n
    (2.0, 100)
    """
    ok = np.isfinite(x) & np.isfinite(v)
    if ok.all():  # (the points after warmup come finite: no copies ...)
        x = x / scale
        # (... but of a strided column, whose sums einsum would add in another order)
        v = np.ascontiguousarray(v)
    else:
        x, v = x[ok] / scale, v[ok]
    n = int(x.size)
    if n < MIN_SLOPE_POINTS or np.ptp(x) == 0:
        return Slope(file, None, None, n, per, f"not enough data: {n} points after warmup")
    from ..stattests import t_quantile

    # (the long arrays written over where their values are no longer needed: fresh
    # memory costs a page fault a page; the same operations, so the same numbers)
    xc = np.subtract(x, x.mean(), out=x)  # (x: a new array either way)
    # The normal equations of [1, xc], summed with einsum (a threaded BLAS or LAPACK
    # call on two columns costs more than the sums here).
    sx, sxx = np.einsum("i->", xc), np.einsum("i,i->", xc, xc)
    xtx = np.array([[float(n), sx], [sx, sxx]])
    beta = np.linalg.solve(xtx, np.array([np.einsum("i->", v), np.einsum("i,i->", xc, v)]))
    fit = np.multiply(xc, beta[1])
    fit += beta[0]
    e = np.subtract(v, fit, out=fit)
    bread = np.linalg.inv(xtx)
    lag = int(math.floor(4 * (n / 100) ** (2 / 9)))
    se = math.sqrt(max(_slope_variance(e, xc, bread[1], lag), 0.0))
    half = t_quantile(0.975, n - 2) * se
    b = float(beta[1])
    return Slope(file, b, (b - half, b + half), n, per, se=se)


def _slope_variance(e: np.ndarray, xc: np.ndarray, b: np.ndarray, lag: int) -> float:
    """``b' S b``, the slope's Newey-West variance, for ``b`` the slope's row of
    ``(X'X)^-1`` (``X = [1, xc]``, residuals ``e``; both are written over).

    ``S``'s bilinear form is a sum over lags of one series' autocovariance: with
    ``u_t = b_0 e_t + b_1 xc_t e_t``, ``b' S b = sum_t u_t^2 + 2 sum_{l=1..L} w_l
    sum_t u_t u_{t-l}``: one dot product a lag instead of the four of ``S``'s entries
    (the same sum in other roundings: within a few units of the last digit, and no
    further from an exact sum; tests/compare/test_fast_paths_4.py measures both).
    """
    u = np.multiply(xc, e, out=xc)
    u *= b[1]
    u += np.multiply(e, b[0], out=e)  # (``e`` no longer needed)
    var = _lag_product(u, 0)
    for lag_i in range(1, min(lag, u.size - 1) + 1):
        var += 2 * (1 - lag_i / (lag + 1)) * _lag_product(u, lag_i)
    return var


#: :func:`_lag_product` sums pieces of this many products, each one BLAS ``dot``.
LAG_PIECE = 8192


def _lag_product(u: np.ndarray, lag: int) -> float:
    """``sum_t u_t u_{t-lag}``, the sum of pieces' ``np.dot`` (BLAS's ``dot`` on at most
    :data:`LAG_PIECE` values, which OpenBLAS runs on one thread: over 10,000 it splits
    the sum across threads, which on a busy machine costs more than the sum).  BLAS's
    fused multiply-adds and the short pieces keep it at least as near the exact sum as
    one long ``einsum``, and twice as fast."""
    a, b = u[lag:], u[: u.size - lag]
    return math.fsum(
        float(np.dot(a[lo : lo + LAG_PIECE], b[lo : lo + LAG_PIECE]))
        for lo in range(0, a.size, LAG_PIECE)
    )


def slopes_after_warmup(
    name: str,
    run: AlignedLog,
    used: Sequence[AlignedLog],
    warmup: np.ndarray,
    v: np.ndarray,
    scale: float,
    per: str,
    warm: Mapping[str, np.ndarray] | None = None,
) -> tuple[Slope, ...]:
    """The run's slope after its warmup; each baseline's over the aligned range both cover
    after warmup, with the run's slope over that same range subtracted (a curve that
    flattens would otherwise look slower over a longer range).  ``warmup``: which of the
    run's points are in warmup (:func:`~dflash_diag.lr_phases.phase_codes`);
    ``warm``: the same per baseline path, when already made."""
    # (the points after warmup are most often one stretch: views of it, not copies)
    post = rows(~warmup & np.isfinite(v) & np.isfinite(run.x))
    rx, rv = run.x[post], v[post]
    own = slope_with_ci(rx, rv, file=run.path, scale=scale, per=per)
    out = [replace(own, span=(float(rx.min()), float(rx.max()))) if rx.size else own]
    for b in used:
        bv = column(b.table, name)
        if warm and b.path in warm:
            bwarm = warm[b.path]
        else:
            bwarm = phase_codes(b.phases, b.steps) == WARMUP
        bpost = ~bwarm & np.isfinite(bv) & np.isfinite(b.x)
        lo, hi = math.inf, -math.inf
        if rx.size and bpost.any():
            bx = b.x[rows(bpost)]
            lo, hi = max(rx.min(), bx.min()), min(rx.max(), bx.max())
        if not lo < hi:
            reason = "not enough data: no range after warmup shared with the run"
            out.append(Slope(b.path, None, None, 0, per, reason))
            continue
        m = rows(bpost & (b.x >= lo) & (b.x <= hi))
        base = slope_with_ci(b.x[m], bv[m], file=b.path, scale=scale, per=per)
        r = (rx >= lo) & (rx <= hi)
        if r.all():  # (the run's own points: its slope, found once)
            same = replace(own, file="")
        else:
            same = slope_with_ci(rx[r], rv[r], scale=scale, per=per)
        out.append(_versus(same, base, (float(lo), float(hi))))
    return tuple(out)


def _versus(run: Slope, base: Slope, span: tuple[float, float]) -> Slope:
    """``base`` with the run's slope over the same ``span``, the run's minus its own, and
    a 95% interval for that."""
    base = replace(base, span=span, run_value=run.value, run_ci=run.ci, run_n=run.n)
    if run.value is None or base.value is None or run.se is None or base.se is None:
        return base
    d = run.value - base.value
    half = 1.96 * math.sqrt(run.se**2 + base.se**2)
    return replace(base, run_minus=d, run_minus_ci=(d - half, d + half))


class VersusFigures(NamedTuple):
    """A baseline's slope against the run's over their shared span, as printed."""

    run: str
    run_ci: str
    base: str
    base_ci: str
    diff: str
    diff_ci: str


def _decimals(v: float, digits: int) -> int:
    """Decimals that show ``digits`` significant digits of ``v`` (0 to 12)."""
    if not (math.isfinite(v) and v != 0):
        return 0
    return min(max(digits - 1 - math.floor(math.log10(abs(v))), 0), 12)


def _supported_decimals(intervals: Sequence[tuple[float, float]]) -> int | None:
    """Decimals the uncertainty supports: 2 significant digits of the narrowest
    interval's half-width (``[-0.034611, +0.034611]``: 3 decimals, ``+0.000 [-0.035,
    +0.035]``); None when no interval has a finite, positive width."""
    widths = [(hi - lo) / 2 for lo, hi in intervals if math.isfinite(hi - lo) and hi > lo]
    return _decimals(min(widths), 2) if widths else None


def versus_figures(s: Slope) -> VersusFigures | None:
    """The run's slope over ``s.span``, the baseline's, the difference and its interval
    as printed, so that what is printed adds up: one number of decimals for all (3
    significant digits of the larger slope, 2 of the difference), and the difference is
    the difference of the two printed slopes (the interval is around the exact one).

    >>> from dflash_diag.compare import Slope
    >>> f = versus_figures(Slope("v1", 1.1204, (1.05, 1.18), 122, "1k steps",
    ...     run_value=1.0312, run_ci=(0.98, 1.08), run_minus=-0.0892,
    ...     run_minus_ci=(-0.174, -0.0039)))
    >>> f.run, f.base, f.diff, f.diff_ci
    ('+1.031', '+1.120', '-0.089', '[-0.174, -0.004]')
    """
    if None in (s.value, s.run_value, s.ci, s.run_ci, s.run_minus, s.run_minus_ci):
        return None
    from decimal import Decimal

    run, base, diff = float(s.run_value), float(s.value), float(s.run_minus)  # type: ignore[arg-type]
    d = _supported_decimals((s.run_ci, s.ci, s.run_minus_ci))  # type: ignore[arg-type]
    if d is None:  # (no interval has a width: the figures' own digits)
        d = max(_decimals(max(abs(run), abs(base)), 3), _decimals(diff, 2))

    def fix(v: float) -> str:
        text = f"{v:+.{d}f}"
        return "+" + text[1:] if text.startswith("-") and float(text) == 0 else text

    def ci(pair: tuple[float, float] | None) -> str:
        lo, hi = pair  # type: ignore[misc]
        return f"[{fix(lo)}, {fix(hi)}]"

    printed = Decimal(fix(run)) - Decimal(fix(base))
    return VersusFigures(
        fix(run), ci(s.run_ci), fix(base), ci(s.ci), fix(float(printed)), ci(s.run_minus_ci)
    )


# --- milestones -------------------------------------------------------------------------


def parse_milestones(texts: Sequence[str]) -> dict[str, tuple[float, ...]]:
    """Parse ``--milestones`` values: ``0.1,0.3,0.5`` (acc-like metrics) or ``loss=2,1.5``.

    >>> parse_milestones(["0.2,0.4", "loss=2.0,1.5"])
    {'acc*': (0.2, 0.4), 'loss': (2.0, 1.5)}
    """
    out: dict[str, tuple[float, ...]] = {}
    hint = "give levels like 0.1,0.3,0.5 or loss=2.0,1.5"
    for text in texts:
        key, sep, levels = text.partition("=")
        if not sep:
            key, levels = ACC_LIKE, text
        try:
            values = tuple(float(v) for v in levels.split(",") if v.strip())
        except ValueError:
            raise InputError("--milestones", f"not a list of numbers: {text!r}", hint) from None
        if not values or not all(math.isfinite(v) for v in values):
            raise InputError("--milestones", f"no usable levels in {text!r}", hint)
        out[key.strip()] = values
    return out


def find_milestones(
    levels: Sequence[float],
    kind: str,
    logs: Sequence[AlignedLog],
    name: str,
    window: int,
    memo: Memo | None = None,
) -> tuple[Milestone, ...]:
    """For each level, the first step at which each log's smoothed ``name`` reaches it
    (falls to it for ``kind == "loss"``); see :class:`Milestone`.  ``memo``: the fits
    already made (a baseline's band)."""
    if not levels:
        return ()  # (no smoothing either: a long log's fit takes seconds)
    direction = "down" if kind == "loss" else "up"
    hits: dict[str, tuple[np.ndarray, np.ndarray, list[int | None]]] = {}
    for log in logs:
        v = column(log.table, name)
        ok = np.isfinite(v)
        if ok.sum() >= MIN_BAND_POINTS:
            # (every point a value: the log's own arrays, which the band's fit was keyed by)
            st, x = (log.steps, log.x) if ok.all() else (log.steps[ok], log.x[ok])
            first = first_reaching(
                x, v if ok.all() else v[ok], window, levels, direction == "up", memo=memo
            )
            hits[log.path] = (st, x, first)
    out = []
    for j, level in enumerate(levels):
        steps: dict[str, int | None] = {}
        aligned: dict[str, float | None] = {}
        for log in logs:
            if log.path not in hits:
                continue
            st, x, first = hits[log.path]
            i = first[j]
            steps[log.path] = None if i is None else int(st[i])
            aligned[log.path] = None if i is None else float(x[i])
        out.append(Milestone(float(level), direction, steps, aligned))
    return tuple(out)


# --- sentences --------------------------------------------------------------------------


def _fmt(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "n/a"
    return f"{v:.3g}"


def _sign(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.3g}"


def share_text(share: float) -> str:
    """A share of points as a whole percent, never rounded to a bound it is not on:
    ``0%`` and ``100%`` only when exact, ``<1%`` and ``>99%`` just inside them.

    >>> share_text(0.0004), share_text(0.0), share_text(0.996), share_text(0.5)
    ('<1%', '0%', '>99%', '50%')
    """
    shown = round(100 * share)
    if share > 0 and shown == 0:
        return "<1%"
    if share < 1 and shown == 100:
        return ">99%"
    return f"{shown}%"


def _whose(names: Sequence[str]) -> str:
    if len(names) == 1:
        return f"{names[0]}'s"
    return f"the baselines' ({', '.join(names)})"


def _where(step: int, progress: float | None, phases: Phases, unit: str = "step") -> str:
    """Where a step lies: ``15% of warmup``, ``121 steps past the end of warmup (step
    2379)``: a position, never a duration.  ``unit``: ``logging event`` when the steps
    are line numbers."""
    if progress is not None and math.isfinite(progress) and progress < 1.0:
        return f"{share_text(max(progress, 0.0))} of warmup"
    end = phases.warmup_end_step
    if end is not None and step > end:
        return f"{step - end} {unit}s past the end of warmup ({unit} {end})"
    if end is not None and step == end:
        return f"the end of warmup ({unit} {end})"
    return f"{unit} {step}"


#: Per metric kind, the side of the band that is ahead and the side that is behind.
_AHEAD_BEHIND = {"acc": ("above", "below"), "loss": ("below", "above")}


def point_phrase(
    p: PointAnswer,
    kind: str,
    names: Sequence[str],
    phases: Phases,
    failed: int | None = None,
    unit: str = "step",
) -> str:
    """The sentence of a point answer, e.g. ``At step 349 it is 0.05 against v1's ...:
    normal at 15% of warmup.``; ``failed``: the logged step whose nan/inf stands there;
    ``unit``: ``logging event`` when the steps are line numbers."""
    at = f"At {unit} {p.step}"
    if p.verdict == "non-finite":
        near = "" if failed == p.step else f" (its logged neighbour {unit} {failed})"
        return f"{at}{near} the run logged {p.metric} as nan/inf: a numerical failure."
    if p.verdict == "not logged":
        return f"{at} the run has no {p.metric} value."
    if p.verdict == "not enough data" or p.band is None:
        return f"{at} it is {_fmt(p.value)}; the baselines do not cover that point."
    where = _where(p.step, p.warmup_progress, phases, unit)
    if p.verdict == "within":
        tail = f"normal at {where}"
    else:
        ahead, behind = _AHEAD_BEHIND.get(kind, (None, None))
        lead = ": behind" if p.verdict == behind else ": ahead" if p.verdict == ahead else ""
        tail = f"{p.verdict} the band at {where}{lead}"
    return (
        f"{at} it is {_fmt(p.value)} against {_whose(names)} "
        f"{_fmt(p.baseline_median)} [{_fmt(p.band[0])}, {_fmt(p.band[1])}]: {tail}."
    )


_HEAD = {
    "within": "is within",
    "above": "runs above",
    "below": "runs below",
    "mixed": "strays on both sides of",
    "not enough data": "cannot yet be judged against",
}
_PHASE_WORDS = {"warmup": "warmup", "post_warmup": "post-warmup", "all": "all"}


def metric_sentence(
    name: str,
    verdict: str,
    phases: Sequence[PhaseSummary],
    names: Sequence[str],
    point: str,
) -> str:
    """The metric's plain answer: verdict and shares per phase, then ``point``."""
    parts = [] if phases else ["no finite value to compare"]
    for ph in phases:
        words = _PHASE_WORDS[ph.phase]
        if ph.inside is None:
            parts.append(f"only {ph.n_compared} {words} points overlap (not enough data)")
            continue
        bits = [f"{share_text(ph.inside)} of {ph.n_compared} {words} points inside"]
        if ph.above:
            bits.append(f"{share_text(ph.above)} above")
        if ph.below:
            bits.append(f"{share_text(ph.below)} below")
        own = [
            f"{share_text(x)} {side}"
            for x, side in ((ph.baseline_above, "above"), (ph.baseline_below, "below"))
            if x is not None and x >= OWN_SHARE_SHOWN
        ]
        if own:
            whose = f"{names[0]}'s" if len(names) == 1 else "the baselines'"
            bits[-1] += f" ({whose} own points: {', '.join(own)})"
        parts.append(", ".join(bits))
    text = f"{name} {_HEAD[verdict]} {_whose(names)} band: {'; '.join(parts)}."
    point = point.strip()
    return f"{text} {point}" if point else text


def failure_phrase(name: str, bad: NonFinite) -> str:
    """The run's logged nan/inf values of ``name``, in words ("" when none)."""
    if not bad.count:
        return ""
    steps = "step" if bad.count == 1 else "steps"
    return (
        f"The run logged {name} as nan/inf at {bad.count} {steps} (first at step "
        f"{bad.first_step}): a numerical failure, left out of the shares above."
    )


def span_text(span: tuple[float, float] | None) -> str:
    """``2379-2500``: an aligned range as printed ("" when unknown)."""
    return "" if span is None else f"{span[0]:.6g}-{span[1]:.6g}"


def pace_words(base: Slope, name: str) -> str:
    """How the run's slope differs from the baseline ``name``'s over the span they share
    (``base.run_value`` against ``base.value``), in the direction the baseline moves:
    a loss that falls faster than the baseline's "falls faster" (a lower slope), an acc
    that climbs less "rises more slowly".  "no clear difference" when the difference's
    95% interval holds 0.

    >>> b = Slope("v1.log", -7.5, None, 100, "1k steps", run_minus_ci=(-3.0, -1.5),
    ...           run_value=-9.8)
    >>> pace_words(b, "v1")
    'falls faster'
    """
    run = base.run_value
    if base.value is None or base.run_minus_ci is None or run is None:
        return ""
    lo, hi = base.run_minus_ci
    if lo <= 0 <= hi:
        return "no clear difference"
    higher = lo > 0
    if base.value >= 0:  # (the baseline rises, or holds)
        if higher:
            return "rises faster"
        return "rises more slowly" if run > 0 else f"falls where {name} rises"
    if not higher:
        return "falls faster"
    return "falls more slowly" if run < 0 else f"rises where {name} falls"


def slope_phrase(slopes: Sequence[Slope]) -> str:
    """How the run's slope after warmup compares with each baseline's ("" if unknown).
    Each comparison names its span and prints both slopes over it and their difference
    (:func:`versus_figures`): what is printed adds up."""
    run, *bases = slopes
    if run.value is None:
        return ""
    parts = []
    for b in bases:
        f = versus_figures(b)
        if f is None or b.run_minus_ci is None:
            continue
        pace = pace_words(b, short_name(b.file))
        parts.append(
            f"over {span_text(b.span)}, after warmup in both, it moves {f.run} against "
            f"{short_name(b.file)}'s {f.base}: {pace} (difference {f.diff} {f.diff_ci})"
        )
    if not parts:
        return ""
    over = f" over {span_text(run.span)}" if run.span else ""
    return f"After warmup it moves {_sign(run.value)} per {run.per}{over}; {'; '.join(parts)}."
