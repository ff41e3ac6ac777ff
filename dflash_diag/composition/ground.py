"""Does the replay cover the log and match it?  Checked before any attribution.

- :func:`epochs_to_cover`: how many epochs the replay needs to reach the log's last step
  (so the schedule is replayed once, for every spike);
- :func:`check_schedule`: the share of logged steps whose real tokens equal the replay's
  (:func:`dflash_diag.schedule.verify_tokens`); below :data:`MIN_TOKENS_MATCH` attribution
  is refused, since lining spikes up with the wrong batches would be a silently wrong join.
  Its :class:`ScheduleGround` says what every verdict rests on: ``verified``, ``given``
  (named, not checkable: no tokens logged) or ``refuted`` (forced);
- :func:`check_recording`: the same for batches recorded during training
  (:mod:`dflash_diag.record`): the recording must hold the log's steps and, where the log
  has tokens, match them; its ground is ``recorded`` (a recording's sample ids and
  lengths are checked against a manifest by ``Recording.to_replay``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..data import strategy_info
from ..errors import InputError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from ..data import Manifest, Replay, ScheduleParams
    from ..schedule.verify import Verification
    from .epochs import EpochFit

#: More epochs than this to reach the log's last step means the manifest is not the run's.
MAX_EPOCHS = 1000
#: Share of logged steps whose tokens must match the replay before attribution runs.
MIN_TOKENS_MATCH = 0.9
#: Share of the log's steps a recording must hold before it is lined up with them.
MIN_RECORDED_STEPS = 0.9


#: Said of batches that fail a check and are used anyway.
FORCED = ", and every verdict below is forced onto it (--force)"

#: What a verdict's batches can rest on (``ScheduleGround.status``).
GROUNDS = ("verified", "recorded", "given", "refuted")


@dataclass(frozen=True)
class ScheduleGround:
    """What the batches lined up with the log rest on, said beside every verdict.

    :param status: ``verified`` (the replayed tokens equal the logged ones at
        :data:`MIN_TOKENS_MATCH` of the steps or more), ``recorded`` (the composition was
        recorded during training), ``given`` (named by the user; the log has no tokens to
        confirm it) or ``refuted`` (the tokens disagree; only with ``--force``).
    :param named_by: where the schedule came from, in words (``--config FILE``, ``FILE
        (found beside the log)``, ``flags``, ``the default schedule``).
    :param detail: one sentence a reader can check.
    :param verification: the token comparison (None: no tokens to compare).
    :param ids_confirmed: something confirmed which samples (not only which lengths)
        each batch held: a recording, or matching tokens under a strategy whose
        batches are drawn by index (:attr:`~dflash_diag.data.StrategyInfo.ids_observable`).
        False: the sample ids shown are the manifest's rows as the replay assigns them,
        right only if the manifest's rows are in the run's order.
    """

    status: str
    named_by: str
    detail: str
    verification: Verification | None = None
    ids_confirmed: bool = True


def check_schedule(
    replay: Replay,
    log_table: pd.DataFrame,
    force: bool = False,
    path: str = "",
    named_by: str = "flags",
    named: bool = True,
) -> ScheduleGround:
    """Compare logged and replayed tokens and say what attribution may rest on.

    - tokens logged, match >= :data:`MIN_TOKENS_MATCH`: ``verified``;
    - tokens logged, below: InputError naming the schedule's source and how to find the
      run's (``batches --log --search-seed``), or ``refuted`` with ``force``;
    - no tokens: ``given`` when the user ``named`` the schedule, else InputError: a
      default nobody named is never attributed on.

    :param named_by: where the schedule came from, for the output and the errors.
    :param named: the user named the strategy (flags or config): without tokens to
        check it, a schedule is attributed on only when its strategy was named.
    """
    import numpy as np

    from ..schedule import verify_tokens

    if "tokens" not in log_table.columns or not np.isfinite(log_table["tokens"]).any():
        if not named:
            raise InputError(
                path,
                "no schedule named and the log has no tokens to check one against",
                "name the run's batching (--strategy, --seed, --token-budget ..., or a "
                "[schedule] section in --config); see dflash-diag batches --help",
            )
        fit = _epochs_fit(replay, log_table, force, path, _subject(named_by))
        if fit is not None and not fit.fits:  # (forced)
            detail = f"{_misfit(fit)}: the schedule is not the run's{FORCED}"
            return ScheduleGround("refuted", named_by, detail, ids_confirmed=False)
        detail = (
            f"the log has no tokens column, so {_subject(named_by)} cannot be "
            "checked: every verdict rests on it being the run's" + _fit_words(fit)
        )
        return ScheduleGround("given", named_by, detail, ids_confirmed=False)
    check = verify_tokens(replay, log_table)
    if check.n_compared == 0:
        raise InputError(
            path,
            f"the replay covers none of the logged steps (it has steps "
            f"{replay.params.first_step}..{replay.params.first_step + check.n_replayed_steps - 1})",
            "check --first-step and the manifest",
        )
    match = f"{check.tokens_match:.1%} of {check.n_compared} steps{_padding(check)}"
    if check.tokens_match >= MIN_TOKENS_MATCH:
        detail = f"replayed tokens match the log at {match}"
        if not named:
            detail += f" ({named_by})"
        info = strategy_info(replay.params.strategy)
        seen = info is not None and info.ids_observable
        if not seen:
            detail += (
                f" (lengths only: {replay.params.strategy} batches by length; ids unconfirmed)"
            )
        return ScheduleGround("verified", named_by, detail, check, ids_confirmed=seen)
    if not force:
        scale, hint = mismatch_hint(replay, log_table)
        raise InputError(
            path,
            f"{_subject(named_by)} matches the logged tokens at only "
            f"{check.tokens_match:.0%} of {check.n_compared} steps (first at step "
            f"{check.first_mismatch}){scale}",
            f"{hint}; or --force",
        )
    detail = (
        f"replayed tokens match the log at only {match}: the schedule is not the run's, "
        "and every verdict below is forced onto it (--force)"
    )
    return ScheduleGround("refuted", named_by, detail, check, ids_confirmed=False)


#: Median logged tokens a step within this factor of the replay's: the sizes agree, so
#: the order (a seed, a first step) is what differs; outside it no seed can help.
SAME_SCALE = 1.25


def mismatch_hint(replay: Replay, log_table: pd.DataFrame) -> tuple[str, str]:
    """What a token mismatch points to, as ``(said after the mismatch, what to do)``.

    ``r = median(logged tokens a step) / median(replayed tokens a step)``, on the
    replay's real and its padded counts: within ``1/SAME_SCALE..SAME_SCALE`` on both the
    steps hold as much as the replay's, so the samples' order differs: search the seed.
    Outside it on both, no seed can change a step's size: the budget, the batch size,
    the world size or the gradient accumulation is not the run's (a factor near
    ``world_size`` is one rank's tokens against all ranks'), which the message says
    with the ratio.  Within on one only, it turns on whether the log counts padding:
    the message gives both ratios and both ways.
    """
    import numpy as np

    logged = log_table["tokens"].to_numpy(dtype=np.float64)
    logged = logged[np.isfinite(logged) & (logged > 0)]
    seed_hint = (
        "search the run's seed: dflash-diag batches MANIFEST --log LOG --search-seed 0..1000"
    )
    ratios = _scales(float(np.median(logged)) if logged.size else 0.0, replay)
    same = [1 / SAME_SCALE <= r <= SAME_SCALE for r in ratios.values()]
    if not ratios or all(same):
        return "", seed_hint
    params = replay.params
    size_flag = "--batch-size" if params.batch_size is not None else "--token-budget"
    fix = f"check {size_flag}, --grad-accum, --world-size"
    if any(same):  # (one count agrees, the other not: it turns on what the log counts)
        real, padded = ratios["tokens"], ratios["padded_tokens"]
        size = f"; its steps hold {real:.3g}x the replay's real tokens, {padded:.3g}x its padded"
        counts = "real tokens" if 1 / SAME_SCALE <= padded <= SAME_SCALE else "padding"
        return size, f"if the log counts {counts}, no seed can change that: {fix}; else {seed_hint}"
    r = min(ratios.values(), key=lambda x: abs(math.log(x)))
    size = f"; its steps hold {r:.3g}x the replay's tokens"
    world = params.world_size
    if world > 1 and abs(r * world - 1) < 0.2:
        return size, "the log counts one rank's tokens: check --world-size"
    return size, f"a seed cannot change that: {fix}"


def _scales(level: float, replay: Replay) -> dict[str, float]:
    """The logged tokens' median a step over the replay's, on its real counts
    (``tokens``) and on its padded ones (``padded_tokens``, where the replay has them):
    a log may count padding (the HF Trainer's ``num_input_tokens_seen`` does)."""
    import numpy as np

    out = {}
    for column in ("tokens", "padded_tokens"):
        if level > 0 and column in replay.steps:
            values = replay.steps[column].to_numpy(dtype=np.float64)
            values = values[np.isfinite(values) & (values > 0)]
            if values.size:
                out[column] = level / float(np.median(values))
    return out


def _subject(named_by: str) -> str:
    return named_by if named_by.startswith("the default") else f"the schedule from {named_by}"


def schedule_source(config_path: Any, config_flag: Any, named: bool, log: str = "") -> str:
    """Where the schedule came from, in words, for :class:`ScheduleGround`: a config
    file looked up rather than given is named with where it was found."""
    from pathlib import Path

    if config_path is not None:
        if config_flag is not None:  # (the user typed the path: its name is enough)
            return f"--config {Path(config_path).name}"
        beside = log not in ("", "-") and Path(config_path).parent == Path(log).parent
        return f"{config_path} (found {'beside the log' if beside else 'in this folder'})"
    return "flags" if named else "the default schedule (no flag or config named one)"


def epochs_to_cover(
    source: Manifest | np.ndarray, params: ScheduleParams, last_step: int, path: str = ""
) -> int:
    """Epochs the replay needs so its steps reach ``last_step`` (from epoch 0's batches;
    one epoch of margin when the epoch length can vary)."""
    from ..schedule.replay import micro_batches_per_epoch

    per_step = params.world_size * params.grad_accum
    steps_per_epoch = micro_batches_per_epoch(source, params) // per_step
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
    info = strategy_info(params.strategy)
    fixed = info is not None and info.fixed_batches
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


def check_recording(
    recorded: Replay,
    log_table: pd.DataFrame,
    logged_steps: np.ndarray,
    force: bool = False,
    path: str = "",
    named_by: str = "",
) -> ScheduleGround:
    """Check batches recorded during training against the log they are lined up with,
    where the two overlap.

    - the recording must hold some of ``logged_steps``, else InputError (a recording of
      another run, or of another part of it);
    - tokens logged: the recorded per-step tokens are compared, on the steps both hold,
      as a replay's are (:func:`dflash_diag.schedule.verify_tokens`); a match below
      :data:`MIN_TOKENS_MATCH` is an InputError, or ``refuted`` with ``force``;
    - without tokens, a recording holding under :data:`MIN_RECORDED_STEPS` of the
      logged steps cannot be told from another run's: InputError unless ``force``;
    - otherwise ``recorded``: every verdict rests on the recorded composition.  A
      recording that starts or stops inside the log (the recorder added on a resume, a
      run still being written) is used for the steps it holds, and the detail says which
      logged steps it does not cover (their spikes get no batch).

    :param recorded: ``Recording.to_replay()``.
    :param logged_steps: the steps of the logged points to be lined up.
    :param named_by: where the recording came from, in words.
    """
    import numpy as np

    from ..arrays import unique_values
    from ..schedule import verify_tokens

    have = unique_values(recorded.steps["step"].to_numpy(dtype=np.int64))
    want = unique_values(np.asarray(logged_steps, dtype=np.int64))
    held = np.isin(want, have)
    share = float(held.mean()) if want.size else 0.0
    span = f"{have[0]}..{have[-1]}" if have.size else "none"
    logs_tokens = "tokens" in log_table.columns and bool(np.isfinite(log_table["tokens"]).any())
    if not held.any() or (share < MIN_RECORDED_STEPS and not logs_tokens and not force):
        what = (
            f"the recording holds {int(held.sum())} of the log's {want.size} logged steps "
            f"({share:.0%}; it has steps {span}, the log {want[0]}..{want[-1]})"
        )
        if not held.any():
            raise InputError(
                path, f"{what}: it is not this run's", "give the recording of this run"
            )
        raise InputError(
            path,
            f"{what}, and the log has no tokens to tell whether it is this run's",
            "give the recording of this run, or --force to use it where it overlaps",
        )
    uncovered = _uncovered(want, held, span)
    check = verify_tokens(recorded, log_table) if logs_tokens else None
    if check is None or check.n_compared == 0:
        fit = _epochs_fit(recorded, log_table, force, path, "the recording")
        if fit is not None and not fit.fits:  # (forced)
            detail = f"{_misfit(fit)}: the recording is not this run's{FORCED}{uncovered}"
            return ScheduleGround("refuted", named_by, detail, ids_confirmed=False)
        detail = (
            f"the recording holds {share:.1%} of the logged steps; the log has no tokens "
            "to cross-check it" + _fit_words(fit) + uncovered
        )
        return ScheduleGround("recorded", named_by, detail)
    match = f"{check.tokens_match:.1%} of {check.n_compared} steps{_padding(check)}"
    if check.tokens_match >= MIN_TOKENS_MATCH:
        detail = f"recorded tokens match the log at {match}" + uncovered
        return ScheduleGround("recorded", named_by, detail, check)
    if not force:
        raise InputError(
            path,
            f"the recorded tokens match the log's at only {check.tokens_match:.0%} of "
            f"{check.n_compared} steps (first mismatch: step {check.first_mismatch}): the "
            "recording is not this run's",
            "give the recording of this run; or --force",
        )
    detail = (
        f"the tokens recorded in {named_by} match the log at only {match}: the recording "
        "is not this run's, and every verdict below is forced onto it (--force)" + uncovered
    )
    return ScheduleGround("refuted", named_by, detail, check, ids_confirmed=False)


def _epochs_fit(
    batches: Replay, log_table: pd.DataFrame, force: bool, path: str, subject: str
) -> EpochFit | None:
    """How the log's epochs fit the batches' (:mod:`.epochs`); when they do not, an
    InputError unless ``force``.  None: nothing to compare."""
    from .epochs import epoch_fit

    fit = epoch_fit(batches.steps, log_table)
    if fit is not None and not fit.fits and not force:
        raise InputError(
            path,
            f"{_misfit(fit)}: {subject} is not this run's (the log has no tokens; "
            "its epochs are the check)",
            "give this run's batches (its recording, or its manifest and schedule); or --force",
        )
    return fit


def _misfit(fit: EpochFit) -> str:
    return (
        f"the log's epochs fit the batches' at only {fit.share:.0%} of {fit.compared} "
        f"steps ({fit.misfit_words()})"
    )


def _fit_words(fit: EpochFit | None) -> str:
    """``; the log's epochs fit it at 100% of N steps`` (``""``: not compared)."""
    if fit is None:
        return ""
    return f"; the log's epochs fit it at {fit.share:.0%} of {fit.compared} steps"


def _padding(check: Verification) -> str:
    """`` (counting padding, as the log does)`` when the log's tokens were matched with
    padding counted (the HF Trainer's ``include_num_input_tokens_seen=True``), else ``""``:
    a padded count rests on each micro-batch's size and longest sample, not every
    length."""
    return " (counting padding, as the log does)" if check.padded else ""


def _uncovered(want: np.ndarray, held: np.ndarray, span: str) -> str:
    """``; the recording holds steps A..B: the N logged steps outside it (...) have no
    batch`` when it does not hold every logged step, else ``""``."""
    missing = want[~held]
    if not missing.size:
        return ""
    ranges = _ranges(missing)
    shown = ", ".join(ranges[:3]) + (
        f" and {len(ranges) - 3} more ranges" if len(ranges) > 3 else ""
    )
    return (
        f"; it holds steps {span}: the {missing.size} logged steps it does not cover "
        f"({shown}) have no batch"
    )


def _ranges(steps: np.ndarray) -> list[str]:
    """Sorted steps as runs: ``[1, 2, 3, 7]`` -> ``["1-3", "7"]``."""
    import numpy as np

    cut = np.flatnonzero(np.diff(steps) != 1) + 1
    out = []
    for run in np.split(steps, cut):
        out.append(f"{run[0]}" if run.size == 1 else f"{run[0]}-{run[-1]}")
    return out
