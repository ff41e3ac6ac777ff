"""``compare --fail-on``: did the run leave the band, for a CI job to stop on?

:func:`band_failures` reads a :class:`~dflash_diag.compare.results.Comparison`:

- with ``--at`` steps, only the answers there count (a job asks about *now*): a point
  ``above`` or ``below`` the band fails on that side;
- without, every metric's phases count (warmup, after warmup): a phase ``above`` or
  ``below`` fails on that side, one ``mixed`` (strays on both sides) on either.

``mode`` is ``above`` (only rises fail: a loss over the prior runs), ``below`` (only
drops: an accuracy under them) or ``outside`` (either).  ``not enough data``,
``not logged`` and ``non-finite`` answers never fail the gate: it says so, and the
comparison's own text says why.
"""

from __future__ import annotations

from .results import Comparison

#: The sides each ``--fail-on`` mode fails on.
FAIL_MODES: dict[str, frozenset[str]] = {
    "above": frozenset({"above", "mixed"}),
    "below": frozenset({"below", "mixed"}),
    "outside": frozenset({"above", "below", "mixed"}),
}


def band_failures(c: Comparison, mode: str) -> tuple[str, ...]:
    """Why the run fails the gate in ``mode``, one phrase each (empty: it passes).

    >>> from dflash_diag.compare.results import PointAnswer
    >>> p = PointAnswer(349, "acc", 0.01, None, None, 349.0, 0.05, (0.03, 0.06), "below", "")
    >>> c = Comparison((), "run.log", "step", "step", "", 3.0, 21, {}, {}, (p,))
    >>> band_failures(c, "below"), band_failures(c, "above")
    (('acc below the band at step 349',), ())
    """
    sides = FAIL_MODES[mode]
    if c.at:
        return tuple(
            f"{p.metric} {p.verdict} the band at step {p.step}" for p in c.at if p.verdict in sides
        )
    out = []
    for name, m in c.metrics.items():
        for ph in m.phases:
            if ph.verdict in sides:
                where = "after warmup" if ph.phase == "post_warmup" else f"in {ph.phase}"
                if ph.phase == "all":
                    where = "over the run"
                out.append(f"{name} {_side(ph.verdict)} the band {where}")
    return tuple(out)


def _side(verdict: str) -> str:
    return "on both sides of" if verdict == "mixed" else verdict
