"""lr-schedule phases: constructed schedules whose warmup, peak and decay are known."""

from __future__ import annotations

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.errors import InputError
from dflash_diag.lr_phases import (
    CODE_NAMES,
    WARMUP,
    Phases,
    _clean,
    lr_phases,
    phase_codes,
    phase_labels,
    warmup_progress,
)

PEAK = 6e-4


def schedule(steps, warmup, total, warm="linear", decay="cosine", peak=PEAK):
    """The lr a trainer would set at ``steps``: a warmup of ``warmup`` steps, then decay."""
    s = np.asarray(steps, dtype=float)
    u = np.clip(s / warmup, 0, 1)
    ramp = {
        "linear": u,
        "cosine": (1 - np.cos(np.pi * u)) / 2,
        "exponential": np.exp((s - warmup) / (warmup / 8)),
        "constant": np.where(s < warmup, 0.1, 1.0),
    }[warm]
    t = np.clip((s - warmup) / (total - warmup), 0, 1)
    down = {
        "none": np.ones_like(s),
        "cosine": 0.1 + 0.9 * (1 + np.cos(np.pi * t)) / 2,
        "linear": 1 - 0.9 * t,
        "inverse_sqrt": np.sqrt(warmup / np.maximum(s, warmup)),
        "step": np.where(t < 0.3, 1.0, np.where(t < 0.7, 0.1, 0.01)),
    }[decay]
    return peak * np.where(s < warmup, np.minimum(ramp, 1), down)


@pytest.mark.parametrize("shape", ["linear", "cosine", "exponential", "constant"])
def test_warmup_shape_and_end_are_found(shape):
    steps = np.arange(0, 5000, 10)
    p = lr_phases(steps, schedule(steps, 1200, 5000, warm=shape, decay="none"))
    assert p.found and p.source == "lr"
    assert p.shape == shape
    assert p.peak_lr == pytest.approx(PEAK)
    # The truth lies between the last logged step below the peak and the first at it.
    assert abs(p.warmup_end_step - 1200) <= 10
    assert p.warmup_steps == p.warmup_end_step - 0
    assert p.decay_start_step is None and p.decay_shape == "none"


@pytest.mark.parametrize("decay", ["linear", "cosine", "inverse_sqrt", "step"])
def test_decay_shape_is_found(decay):
    steps = np.arange(1, 8000, 20)
    p = lr_phases(steps, schedule(steps, 1000, 8000, decay=decay))
    assert p.decay_shape == decay
    assert p.decay_start_step >= p.warmup_end_step
    if decay != "step":
        # These decays start at the warmup's end (logged every 20 steps from 1); a cosine's
        # flat top is seen to fall only ~100 steps later, and still placed at 1000.
        assert abs(p.decay_start_step - 1000) <= 20


def test_decay_after_a_plateau_starts_near_the_plateau_end():
    steps = np.arange(0, 10000, 10)
    lr = schedule(steps, 1000, 10000, decay="none")
    late = steps > 4000
    lr[late] = PEAK * (1 + np.cos(np.pi * (steps[late] - 4000) / 6000)) / 2
    p = lr_phases(steps, lr)
    assert p.decay_shape == "cosine"
    # Seen when lr is 0.1% below the peak: (2/pi) asin(sqrt(0.001)) = 2.0% of the
    # 6000-step period after it starts.
    assert 4000 <= p.decay_start_step <= 4000 + 0.0202 * 6000 + 10
    labels = phase_labels(p, steps)
    assert (labels[(steps >= 1000) & (steps <= 4000)] == "peak").all()


def test_story_point_is_fifteen_percent_of_a_finished_warmup():
    # "acc 0.046 at step 349, lr 8.8e-5 of a 6e-4 peak" with a linear warmup.
    warmup = round(349 * 6e-4 / 8.8e-5)
    steps = np.arange(1, 6000)
    p = lr_phases(steps, schedule(steps, warmup, 6000))
    assert p.warmup_end_step == warmup
    # lr = peak x step / warmup reaches 0 at step 0: warmup runs from 0, not from step 1.
    assert p.first_step == 0 and p.warmup_steps == warmup
    frac = warmup_progress(p, np.array([349]))[0]
    assert frac == pytest.approx(349 / warmup)
    assert round(100 * frac) == 15


def test_a_log_that_starts_late_still_sees_the_warmup_from_its_start():
    # HF Trainer logs every 25 steps from step 25; a resumed log may begin mid-warmup.
    for first in (25, 300):
        steps = np.arange(first, 3000, 25)
        p = lr_phases(steps, schedule(steps, 500, 3000, decay="linear"))
        assert (p.first_step, p.warmup_end_step, p.warmup_steps) == (0, 500, 500)


def test_unfinished_warmup_is_said_and_extended_to_a_given_peak():
    steps = np.arange(1, 350)
    lr = schedule(steps, 2380, 10000)
    p = lr_phases(steps, lr)
    assert p.found and not p.warmup_complete
    assert p.warmup_end_step is None and p.peak_lr is None
    assert p.max_lr == pytest.approx(lr[-1])
    assert "warmup not finished at step 349" in p.notes[0]
    assert set(phase_labels(p, steps)) == {"warmup"}
    q = lr_phases(steps, lr, peak_lr=PEAK)
    assert q.warmup_end_step == 2380 and q.peak_lr == PEAK and q.shape == "linear"


def test_restart_keeps_the_values_logged_last():
    # A resume at step 300 repeats steps 250..299 with the right lr; the first pass had
    # a wrong (doubled) lr there, which must not count.
    first = np.arange(0, 300)
    second = np.arange(250, 2000)
    lr_first = schedule(first, 1000, 2000, decay="none")
    lr_first[250:] *= 2
    steps = np.concatenate([first, second])
    lr = np.concatenate([lr_first, schedule(second, 1000, 2000, decay="none")])
    p = lr_phases(steps, lr)
    assert p.warmup_end_step == 1000 and p.shape == "linear"
    assert p.peak_lr == pytest.approx(PEAK)


def test_llm_c_zeros_and_nans_are_survived():
    # lr printed with 6 decimals: the first steps read 0.000000; some rows have no lr.
    steps = np.arange(0, 3000)
    lr = np.round(schedule(steps, 2000, 3000, peak=1e-4, decay="none"), 6)
    assert (lr[:10] == 0).all()
    lr[::7] = np.nan
    p = lr_phases(steps, lr)
    assert p.shape == "linear" and abs(p.warmup_end_step - 2000) <= 10
    assert p.first_step == 0


@pytest.mark.parametrize(
    "lr, reason",
    [
        (None, "lr is not logged; give --warmup-steps N"),
        (np.full(50, np.nan), "lr is not logged; give --warmup-steps N"),
        (np.zeros(50), "lr is 0 at every logged step"),
        (np.full(50, 3e-4), "lr is flat at 0.0003"),
    ],
)
def test_missing_zero_or_flat_lr_is_not_found_with_a_reason(lr, reason):
    steps = np.arange(50)
    p = lr_phases(steps, lr)
    assert not p.found
    assert p.reason.startswith(reason)
    labels = set(phase_labels(p, steps))
    # A flat lr is at its peak all along; a missing one tells nothing.
    assert labels == ({"peak"} if "flat" in reason else {"unknown"})


def test_warmup_steps_override_wins():
    steps = np.arange(10, 500, 10)
    p = lr_phases(steps, None, warmup_steps=100)
    assert p.found and p.source == "given"
    assert (p.first_step, p.warmup_end_step, p.warmup_steps) == (10, 110, 100)
    labels = phase_labels(p, steps)
    assert (labels[steps < 110] == "warmup").all() and (labels[steps >= 110] == "peak").all()
    with pytest.raises(InputError, match="--warmup-steps: must be 0 or more, got -1"):
        lr_phases(steps, None, warmup_steps=-1)


def test_too_few_rising_points_leave_the_shape_unknown():
    steps = np.array([0, 100, 200, 300, 400])
    p = lr_phases(steps, schedule(steps, 150, 400, decay="none"))
    assert p.shape == "unknown"
    assert p.warmup_end_range == (100, 200)
    assert 100 < p.warmup_end_step <= 200


def test_labels_follow_the_phases():
    p = Phases(True, first_step=0, warmup_end_step=100, warmup_steps=100, decay_start_step=500)
    labels = phase_labels(p, np.array([0, 99, 100, 500, 501, np.nan]))
    assert labels.tolist() == ["warmup", "warmup", "peak", "peak", "decay", "unknown"]


@settings(max_examples=examples(60), deadline=None)
@given(
    warmup=st.integers(20, 3000),
    every=st.integers(1, 50),
    start=st.integers(0, 1),
    decay=st.sampled_from(["none", "cosine", "linear", "step"]),
)
def test_warmup_end_is_within_one_logging_interval(warmup, every, start, decay):
    total = warmup * 4 + 200
    steps = np.arange(start, total, every)
    p = lr_phases(steps, schedule(steps, warmup, total, decay=decay))
    assert p.found
    assert abs(p.warmup_end_step - warmup) <= every
    labels = phase_labels(p, steps)
    # Invariant: the phases come in order warmup -> peak -> decay, never back.
    rank = np.array([{"warmup": 0, "peak": 1, "decay": 2}[x] for x in labels])
    assert (np.diff(rank) >= 0).all()
    assert labels[-1] == ("peak" if decay == "none" else "decay")


def labels_one_by_one(phases: Phases, steps: np.ndarray) -> np.ndarray:
    """The labels as first written: an object array of strings, made ``str`` at the end."""
    st_ = np.asarray(steps, dtype=float).ravel()
    out = np.full(st_.shape, "unknown", dtype=object)
    if not phases.found and phases.source == "lr" and phases.peak_lr is not None:
        out[:] = "peak"
    elif phases.found and phases.warmup_end_step is None:
        out[:] = "warmup"
    elif phases.found:
        out[:] = "peak"
        out[st_ < phases.warmup_end_step] = "warmup"
        if phases.decay_start_step is not None:
            out[st_ > phases.decay_start_step] = "decay"
        out[~np.isfinite(st_)] = "unknown"
    return out.astype(str)


@settings(max_examples=examples(100), deadline=None)
@given(
    found=st.booleans(),
    source=st.sampled_from(["lr", "loss"]),
    peak=st.one_of(st.none(), st.floats(1e-5, 1.0)),
    warm=st.one_of(st.none(), st.integers(0, 30)),
    decay=st.one_of(st.none(), st.integers(0, 40)),
    steps=st.lists(st.one_of(st.integers(-5, 50), st.just(float("nan"))), max_size=30),
)
def test_labels_from_codes_are_the_strings_one_by_one(found, source, peak, warm, decay, steps):
    p = Phases(found, warmup_end_step=warm, decay_start_step=decay, peak_lr=peak, source=source)
    got, want = phase_labels(p, np.array(steps, dtype=float)), labels_one_by_one(p, steps)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()


@settings(max_examples=examples(100), deadline=None)
@given(
    found=st.booleans(),
    warm=st.one_of(st.none(), st.integers(0, 30)),
    decay=st.one_of(st.none(), st.integers(0, 40)),
    steps=st.lists(st.one_of(st.integers(-5, 50), st.just(float("nan"))), max_size=30),
)
def test_codes_name_the_labels(found, warm, decay, steps):
    p = Phases(found, warmup_end_step=warm, decay_start_step=decay, source="lr")
    codes = phase_codes(p, np.array(steps, dtype=float))
    labels = labels_one_by_one(p, steps)
    assert [CODE_NAMES[c] for c in codes] == labels.tolist()
    assert ((codes == WARMUP) == (labels == "warmup")).all()


def clean_plain(steps: np.ndarray, lr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``_clean`` without its step-order fast path: last value of a step, sorted."""
    s, y = np.asarray(steps, dtype=float), np.asarray(lr, dtype=float)
    ok = np.isfinite(s) & np.isfinite(y) & (y >= 0)
    s, y = s[ok], y[ok]
    _, first_in_reversed = np.unique(s[::-1], return_index=True)
    keep = np.sort(s.shape[0] - 1 - first_in_reversed)
    order = np.argsort(s[keep], kind="stable")
    return s[keep][order], y[keep][order]


step_cell = st.one_of(st.integers(-3, 40).map(float), st.sampled_from([-0.0, float("nan")]))
lr_cell = st.sampled_from([0.0, 1e-4, 3e-4, 6e-4, -1e-4, float("nan"), float("inf")])


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(step_cell, lr_cell), max_size=30), st.booleans())
def test_clean_in_step_order_is_the_plain_clean(pairs, ordered):
    """Logs in step order (the fast path) and any others (the sort) come out as the
    plain version makes them, bit for bit."""
    if ordered:  # (strictly increasing steps, most often in real logs)
        pairs = [(float(i), y) for i, (_, y) in enumerate(pairs)]
    s = np.array([p[0] for p in pairs], dtype=float)
    y = np.array([p[1] for p in pairs], dtype=float)
    for got, want in zip(_clean(s, y), clean_plain(s, y), strict=True):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
