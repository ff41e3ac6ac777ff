"""Does the replay cover the log and match it?  Checked before any attribution.

- :func:`epochs_to_cover`: how many epochs the replay needs to reach the log's last step
  (so the schedule is replayed once, for every spike);
- :func:`check_schedule`: the share of logged steps whose real tokens equal the replay's
  (:func:`dflash_diag.schedule.verify_tokens`); below :data:`MIN_TOKENS_MATCH` attribution
  is refused, since lining spikes up with the wrong batches would be a silently wrong join.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..errors import InputError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from ..records import Manifest, Replay, ScheduleParams

#: More epochs than this to reach the log's last step means the manifest is not the run's.
MAX_EPOCHS = 1000
#: Share of logged steps whose tokens must match the replay before attribution runs.
MIN_TOKENS_MATCH = 0.9


def check_schedule(
    replay: Replay, log_table: pd.DataFrame, force: bool = False, path: str = ""
) -> Any:
    """Compare logged and replayed tokens; refuse (InputError) below MIN_TOKENS_MATCH.

    :returns: the :class:`~dflash_diag.schedule.verify.Verification`, or None when the
        log has no tokens (nothing to check).
    """
    import numpy as np

    from ..schedule import verify_tokens

    if "tokens" not in log_table.columns or not np.isfinite(log_table["tokens"]).any():
        return None
    check = verify_tokens(replay, log_table)
    if check.n_compared == 0:
        raise InputError(
            path,
            f"the replay covers none of the logged steps (it has steps "
            f"{replay.params.first_step}..{replay.params.first_step + check.n_replayed_steps - 1})",
            "check --first-step and the manifest",
        )
    if check.tokens_match < MIN_TOKENS_MATCH and not force:
        raise InputError(
            path,
            f"the replayed schedule matches the logged tokens at only {check.tokens_match:.0%} "
            f"of {check.n_compared} steps (first mismatch at step {check.first_mismatch})",
            "check the manifest and --strategy/--seed/--token-budget/--first-step, "
            "or pass --force to attribute anyway",
        )
    return check


def epochs_to_cover(
    source: Manifest | np.ndarray, params: ScheduleParams, last_step: int, path: str = ""
) -> int:
    """Epochs the replay needs so its steps reach ``last_step`` (from epoch 0's batches;
    one epoch of margin when the epoch length can vary)."""
    from ..schedule import epoch_batches

    per_step = params.world_size * params.grad_accum
    steps_per_epoch = len(epoch_batches(source, params, 0)) // per_step
    if steps_per_epoch < 1:
        raise InputError(
            path,
            f"the manifest makes fewer micro-batches than one step needs ({per_step})",
            "check the manifest, --token-budget, --world-size and --grad-accum",
        )
    need = math.ceil((last_step - params.first_step + 1) / steps_per_epoch)
    if need > MAX_EPOCHS:
        raise InputError(
            path,
            f"the manifest's {len(source)} "
            f"samples make {steps_per_epoch} steps per epoch; the log's last step {last_step} "
            f"would need {need} epochs",
            "check that the manifest is the run's, and --token-budget/--world-size/--grad-accum",
        )
    fixed = params.strategy == "sorted-greedy"
    return max(1, need + (0 if fixed else 1))


def check_steps(step_source: str, path: str, force: bool = False) -> None:
    """Refuse to line a log up with a schedule when its steps are only line numbers.

    A log whose records carry no step (``RunLog.step_source == "line order"``, e.g. HF
    Trainer dict lines printed without the progress bar) is numbered 1, 2, ... by
    logging event.  With ``logging_steps`` > 1 those are not optimizer steps, and every
    batch would be joined to the wrong step: an InputError unless ``force``.
    """
    if step_source == "line order" and not force:
        raise InputError(
            path,
            "the log's records carry no step (they are numbered by line order), so they "
            "cannot be lined up with the replayed schedule",
            "give --step-every N (the trainer's logging_steps), use a log that prints the "
            "step (for the HF Trainer: trainer_state.json), or pass --force",
        )
