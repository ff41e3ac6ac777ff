"""The causal detector: each point is decided from the points before it, once."""

import math

import numpy as np
import pytest
from budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_diag.spikes.detect import LEGACY_THRESHOLD, detect_spikes
from dflash_diag.spikes.windows import trend_baseline
from dflash_diag.watch.causal import CausalDetector


def noisy(n, seed=0, level=2.0, noise=0.01, spikes=()):
    rng = np.random.default_rng(seed)
    x = level * (1 + noise * rng.standard_normal(n)) - 0.0002 * np.arange(n)
    for i, height in spikes:
        x[i] *= height
    return x


def decide(values, window=50, threshold=None, sizes=None):
    d = CausalDetector(window=window, threshold=threshold)
    steps = list(range(1, len(values) + 1))
    out, at = [], 0
    for size in sizes or [len(values)]:
        out += d.extend(steps[at : at + size], values[at : at + size])
        at += size
    out += d.extend(steps[at:], values[at:])
    return d, out


def key(decision):
    # (NaN != NaN: compare the decisions' text)
    return tuple(repr(v) for v in vars(decision).values())


def test_the_baseline_is_spikes_trailing_baseline():
    # The same formula as `spikes`' trailing window, point for point.
    x = noisy(400, spikes=[(200, 1.5)])
    d, _ = decide(list(x), sizes=[7, 50, 1, 1, 100])
    expected, _ = trend_baseline(x, 50, centred=False)
    got = d.arrays()["baseline"]
    assert np.allclose(got[1:], expected[1:], rtol=0, atol=1e-12)


def test_a_spike_is_flagged_at_its_point_and_consecutive_points_are_one_event():
    x = noisy(300, spikes=[(150, 1.6), (151, 1.5), (240, 1.4)])
    _, out = decide(list(x))
    starts = [o.step for o in out if o.starts_event]
    assert starts == [151, 241]  # (steps are 1-based)
    assert out[151].flagged and not out[151].starts_event
    assert out[150].rule == "calibrated" and out[150].z >= out[150].critical


def test_warming_up_uses_the_fixed_z_until_a_window_of_points():
    x = noisy(80, spikes=[(30, 1.5)])
    _, out = decide(list(x))
    assert {o.rule for o in out[5:49]} == {"warming up"}
    assert out[30].flagged and out[30].critical == LEGACY_THRESHOLD
    assert not any(o.flagged for o in out[:5])  # (the first points are history)
    assert out[60].rule == "calibrated"


def test_a_fixed_threshold_is_used_throughout():
    _, out = decide(list(noisy(120, spikes=[(100, 1.3)])), threshold=5.0)
    assert out[100].flagged and out[100].critical == 5.0 and out[100].rule == "fixed"


def test_non_finite_values_are_events_of_their_own_and_stay_out_of_the_baselines():
    x = list(noisy(120))
    clean, _ = decide(list(x))
    x.insert(80, math.nan)
    d, out = decide(x)
    assert out[80].kind == "non-finite" and out[80].starts_event
    # the points after it have the baselines they had without it
    assert out[81].baseline == clean.decisions[80].baseline


def test_drops_are_spikes_for_accuracy():
    x = 0.4 + 0.004 * np.random.default_rng(3).standard_normal(200)
    x[150] = 0.25
    d = CausalDetector(direction="down")
    out = d.extend(range(200), x)
    assert [o.step for o in out if o.starts_event] == [150]
    assert out[150].baseline > out[150].value


def test_a_resume_forgets_the_points_from_its_step():
    x = list(noisy(200, spikes=[(120, 1.5)]))
    d, _ = decide(x[:150])
    assert d.truncate(101) == 50
    again = d.extend(range(101, 201), x[100:])
    fresh, out = decide(x)
    assert [key(o) for o in again] == [key(o) for o in out[100:]]


def test_causal_detection_differs_from_spikes_only_by_the_future():
    # On a clean rise both find it; `spikes` on the finished log agrees on the steps.
    x = noisy(600, spikes=[(200, 1.4), (420, 1.5)])
    _, out = decide(list(x))
    import pandas as pd

    finished = detect_spikes(pd.DataFrame({"step": range(1, 601), "loss": x}))
    assert [o.step for o in out if o.starts_event] == [e.start_step for e in finished.events]


series = st.lists(st.floats(min_value=0.5, max_value=5.0, allow_nan=False), min_size=8, max_size=90)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=series,
    later=st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=30),
    cut=st.integers(min_value=1, max_value=90),
    window=st.sampled_from([5, 12, 50]),
)
def test_points_appended_after_t_never_change_the_decision_at_t(values, later, cut, window):
    # Causality: what arrives after point t cannot change what was decided at t, and
    # how the points are split into batches does not matter either.
    cut = min(cut, len(values))
    _, before = decide(values, window=window)
    _, after = decide(values + later, window=window, sizes=[cut, 1, 3])
    assert [key(o) for o in after[: len(values)]] == [key(o) for o in before]


@pytest.mark.parametrize("window", [1, 0])
def test_a_window_below_two_is_refused(window):
    from dflash_diag.errors import InputError

    with pytest.raises(InputError, match="at least 2"):
        CausalDetector(window=window)


def from_decisions(d):
    """The per-point arrays rebuilt from the decisions (what ``arrays`` was before it
    kept them)."""
    ds = d.decisions
    return {
        "steps": np.array([p.step for p in ds], dtype=np.int64),
        "values": np.array([p.value for p in ds]),
        "baseline": np.array([p.baseline for p in ds]),
        "z": np.array([p.z for p in ds]),
        "critical": np.array([p.critical for p in ds]),
        "flagged": np.array([p.flagged for p in ds], dtype=bool),
    }


@settings(max_examples=examples(25), deadline=None)
@given(
    st.lists(st.integers(1, 400), min_size=1, max_size=4),
    st.integers(0, 2000),
    st.integers(0, 2000),
    st.integers(1, 3000),
)
def test_a_slice_of_the_kept_arrays_is_the_decisions_slice(sizes, lo, span, cut):
    # Invariant: the growing arrays hold exactly the decisions, in order, however the
    # points came (batches of any size, a resume), and a slice is the decisions' slice.
    x = list(noisy(sum(sizes) + 80, spikes=[(60, 1.5)]))
    x[30] = math.nan
    d, _ = decide(x, sizes=sizes)
    d.truncate(cut)
    d.extend(range(cut, cut + 5), [2.0] * 5)
    full = from_decisions(d)
    got = d.arrays(lo, lo + span)
    for k, want in full.items():
        np.testing.assert_array_equal(got[k], want[lo : lo + span])
    assert set(got) == {*full, "scale"}
