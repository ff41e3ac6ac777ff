"""Do the log's epochs fit the batches lined up with it?  A check for when the log has no
tokens: the epoch a trainer logs at each step follows from how many steps its epochs
hold, so a recording of another run, or a replay of another manifest or batch size,
puts the log's steps in other epochs.

A trainer logs the epochs done so far: the HF Trainer ``e + k / K`` at the ``k``-th of
an epoch's ``K`` steps (``e`` from 0; so 1.0 at the last step of the first epoch),
Lightning's ``CSVLogger`` the epoch ``e`` itself, a loop of one's own often ``e + 1``.
With ``r`` the epoch the batches give a step, ``k`` its place in that epoch and ``K``
the epoch's steps, the log fits one of the three:

- ``|E - (r + k / K)| <= 1 / K + 1e-3 max(|E|, 0.01)`` (gradient accumulation over a
  number of micro-batches it does not divide moves the Trainer's count by up to about
  ``1 / K``; a log prints about four significant digits);
- ``E = r``;
- ``E = r + 1``.

:func:`epoch_fit` says at what share of the steps both hold the best of them holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

#: Share of the compared steps at which the log's epochs must fit the batches'.
MIN_EPOCHS_FIT = 0.9
#: Fewer steps with an epoch in both than this: nothing is said.
MIN_EPOCH_STEPS = 10
#: The three ways a trainer logs its epoch (the module docstring).
MODELS = ("fraction", "from 0", "from 1")


@dataclass(frozen=True)
class EpochFit:
    """How the log's ``epoch`` fits the batches' epochs.

    :param share: the share of compared steps that fit, under the best model.
    :param compared: steps with an epoch in the log and in the batches.
    :param model: the best of :data:`MODELS`.
    :param first_misfit: the first compared step that does not fit it (None: none).
    :param logged: the log's epoch at ``first_misfit``; ``placed``: the batches' epoch
        and place there, ``(r, k, K)``.
    """

    share: float
    compared: int
    model: str
    first_misfit: int | None = None
    logged: float | None = None
    placed: tuple[int, int, int] | None = None

    @property
    def fits(self) -> bool:
        return self.share >= MIN_EPOCHS_FIT

    def misfit_words(self) -> str:
        """Where the first misfit is, in words (``""``: none)."""
        if self.first_misfit is None or self.placed is None:
            return ""
        r, k, size = self.placed
        return (
            f"the log puts step {self.first_misfit} at epoch {self.logged:g}, the batches "
            f"at step {k} of {size} of epoch {r} (from 0)"
        )


def epoch_fit(steps: pd.DataFrame, log_table: pd.DataFrame) -> EpochFit | None:
    """How the log's epochs fit those of ``steps`` (a Replay's ``steps``: ``step``,
    ``epoch``), or None when the log logs no epoch, the batches have none, or fewer than
    :data:`MIN_EPOCH_STEPS` steps have both."""
    import numpy as np

    if "epoch" not in log_table.columns or "epoch" not in steps.columns:
        return None
    logged = _logged_epochs(log_table)
    s = steps[["step", "epoch"]].drop_duplicates("step").sort_values("step")
    step, r = s["step"].to_numpy(np.int64), s["epoch"].to_numpy(np.int64)
    k, size = _places(step, r)
    where = np.searchsorted(step, logged[0])
    inside = where < step.size
    inside[inside] = step[where[inside]] == logged[0][inside]
    if int(inside.sum()) < MIN_EPOCH_STEPS:
        return None
    at, e = where[inside], logged[1][inside]
    rr, kk, nn = r[at], k[at], size[at]
    tol = 1.0 / nn + 1e-3 * np.maximum(np.abs(e), 0.01)
    fits = {
        "fraction": np.abs(e - (rr + kk / nn)) <= tol,
        "from 0": e == rr,
        "from 1": e == rr + 1,
    }
    model = max(MODELS, key=lambda m: int(fits[m].sum()))  # (the first on a tie)
    ok = fits[model]
    bad = np.flatnonzero(~ok)
    if not bad.size:
        return EpochFit(float(ok.mean()), int(ok.size), model)
    i = int(bad[0])
    placed = (int(rr[i]), int(kk[i]), int(nn[i]))
    step_i = int(logged[0][inside][i])
    return EpochFit(float(ok.mean()), int(ok.size), model, step_i, float(e[i]), placed)


def _logged_epochs(log_table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(step, epoch) of the log's rows with both; one rank's (the lowest's)."""
    import numpy as np

    t = log_table
    if "rank" in t.columns and t["rank"].nunique() > 1:
        t = t[t["rank"] == t["rank"].min()]
    t = t[["step", "epoch"]].dropna().drop_duplicates("step", keep="last").sort_values("step")
    return t["step"].to_numpy(np.int64), t["epoch"].to_numpy(np.float64)


def _places(step: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per step (increasing), its place ``k`` (from 1) in its epoch and the epoch's
    steps ``K``.  The first and the last epoch the batches hold may be cut short (a
    recording added on a resume, a run still going): each is given the usual size of
    the others when it is shorter, the first taken to end where it ends."""
    import numpy as np

    starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    sizes = np.diff(np.r_[starts, r.size])
    usual = int(np.median(sizes[1:-1])) if sizes.size > 2 else int(sizes.max())
    size = sizes.copy()
    size[0], size[-1] = max(size[0], usual), max(size[-1], usual)
    begin = step[starts].copy()
    begin[0] = step[starts[0] + sizes[0] - 1] - size[0] + 1  # (the first ends where it ends)
    which = np.repeat(np.arange(starts.size), sizes)
    return step - begin[which] + 1, size[which]
