"""Spike detection: the robust rule, the production rules, events, and real logs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.errors import InputError
from dflash_diag.spikes.detect import (
    DEFAULT_WINDOW,
    detect_spikes,
    log_interval,
)

REAL_LOGS = Path(__file__).resolve().parents[1] / "data" / "real_logs"


def noisy(
    n: int = 300, level: float = 2.0, sd: float = 0.02, seed: int = 0, clip: float | None = None
) -> pd.DataFrame:
    """A flat loss with Gaussian noise (``clip``: at most this many sd from the level)."""
    rng = np.random.default_rng(seed)
    noise = rng.normal(0, sd, n)
    if clip is not None:
        noise = np.clip(noise, -clip * sd, clip * sd)
    return pd.DataFrame({"step": np.arange(n), "loss": level + noise})


@settings(max_examples=examples(40), deadline=None)
@given(
    level=st.floats(1e-3, 1e3),
    n=st.integers(2, 400),
    detector=st.sampled_from(["robust", "olmo", "foundry", "megatron"]),
)
def test_a_flat_noiseless_curve_has_no_spikes(level: float, n: int, detector: str) -> None:
    t = pd.DataFrame({"step": np.arange(n), "loss": np.full(n, level)})
    d = detect_spikes(t, detector=detector)
    assert d.events == ()
    assert not d.flagged.any()


@pytest.mark.slow
@settings(max_examples=examples(40), deadline=None)
@given(
    at=st.integers(10, 290),
    rise=st.floats(0.10, 0.40),
    seed=st.integers(0, 10_000),
)
def test_a_modest_spike_on_noisy_loss_is_found_where_it_is(at: int, rise: float, seed: int) -> None:
    # A 10-40% spike over a per-step loss with 1% noise: found, and nothing else is.  The
    # noise stays within 3 sd (3%): a 5-sd draw is itself a 5% rise, which the detector
    # rightly flags (about one seed in 300 has one).
    t = noisy(sd=0.02, seed=seed, clip=3.0)
    t.loc[at, "loss"] *= 1 + rise
    d = detect_spikes(t)
    assert [e.peak_step for e in d.events] == [at]
    e = d.events[0]
    # the ratio is the point (with its own noise) over the level 2.0, up to the error of
    # the robust baseline (at most 0.03 in 20,000 random cases)
    assert e.ratio == pytest.approx(t.loc[at, "loss"] / 2.0, abs=0.04)
    assert e.z >= d.critical[at] >= d.threshold - 0.01


def test_noise_alone_is_not_flagged_and_wiggles_below_min_rise_are_not_spikes() -> None:
    t = noisy(n=2000, sd=0.02, seed=3)
    assert detect_spikes(t).events == ()
    # 4% bumps are many sigmas on a 0.2% noise, but below the 5% minimum rise.
    t = noisy(n=200, sd=0.004, seed=4)
    t.loc[[50, 120], "loss"] *= 1.04
    assert detect_spikes(t).events == ()
    assert [e.peak_step for e in detect_spikes(t, min_rise=0.02).events] == [50, 120]


def test_the_first_steps_are_covered() -> None:
    # An expanding window: a spike at the 8th logged point is found.
    t = noisy(n=100, seed=5)
    t.loc[7, "loss"] *= 1.3
    assert [e.peak_step for e in detect_spikes(t).events] == [7]


def test_a_spike_during_a_falling_warmup_is_found() -> None:
    # The trailing median lags high on a falling curve; the centred one does not.
    n = 200
    step = np.arange(n)
    loss = 2 + 4 * np.exp(-step / 30) + np.random.default_rng(6).normal(0, 0.02, n)
    loss[40] *= 1.25
    d = detect_spikes(pd.DataFrame({"step": step, "loss": loss}))
    assert [e.peak_step for e in d.events] == [40]


def test_consecutive_points_form_one_event_with_its_duration() -> None:
    t = noisy(seed=7)
    t.loc[100:104, "loss"] *= 1.3
    (e,) = detect_spikes(t).events
    assert (e.start_step, e.end_step, e.n_points, e.duration_steps) == (100, 104, 5, 5)


def test_non_finite_values_are_events_of_their_own_and_stay_out_of_baselines() -> None:
    t = noisy(seed=8)
    t.loc[60, "loss"] = np.nan
    t.loc[61, "loss"] = np.inf
    t.loc[150, "loss"] *= 1.3
    d = detect_spikes(t)
    kinds = [(e.kind, e.start_step) for e in d.events]
    assert kinds == [("non-finite", 60), ("non-finite", 61), ("spike", 150)]
    assert d.n_points == len(t) - 2
    assert np.isfinite(d.baseline[62])


def test_logging_interval_and_what_a_point_covers() -> None:
    assert log_interval(np.array([50, 100, 150, 200, 300])) == 50
    assert log_interval(np.array([7])) == 1
    t = noisy(n=100)
    t["step"] = (np.arange(100) + 1) * 50
    d = detect_spikes(t)
    assert d.log_interval == 50
    assert "every 50 steps" in d.covers


def test_the_logging_line_says_what_covers_the_report_uses(tmp_path) -> None:
    # ``--covers step`` is what the report reads a point as, and the line says so; an
    # evaluation metric's points are no training batch's
    from typer.testing import CliRunner

    from dflash_diag.cli import app

    log = tmp_path / "run.log"
    lines = [f"step={50 * (i + 1)} loss={2.0 + 0.01 * (i % 7)} val_loss=2.5" for i in range(60)]
    log.write_text("\n".join(lines) + "\n")
    said = {}
    for args in ([], ["--covers", "step"], ["--metric", "val_loss"]):
        out = CliRunner().invoke(app, ["spikes", str(log), *args]).stdout
        said[tuple(args)] = " ".join(out.split())
    assert "read as the mean over the 50 steps up to it" in said[()]
    assert "give --covers step" in said[()]
    assert "a point is read as that step alone (--covers step)" in said[("--covers", "step")]
    assert "val_loss is an evaluation on held-out data" in said[("--metric", "val_loss")]


def test_grad_norm_surge_lr_and_phase_are_reported() -> None:
    t = noisy(n=300, seed=9)
    t["grad_norm"] = 1.0
    t.loc[199:201, "grad_norm"] = 4.0
    t["lr"] = np.minimum(np.arange(300) / 100, 1.0) * 1e-3
    t.loc[200, "loss"] *= 1.3
    (e,) = detect_spikes(t).events
    assert e.grad_norm_ratio == pytest.approx(4.0)
    assert e.lr == pytest.approx(1e-3)
    assert e.phase == "peak"


def test_ranks_are_averaged_per_step() -> None:
    a, b = noisy(seed=10), noisy(seed=11)
    b.loc[80, "loss"] *= 1.8  # +80% on one rank is +40% on the mean
    t = pd.concat([a.assign(rank=0), b.assign(rank=1)], ignore_index=True)
    d = detect_spikes(t)
    assert d.n_points == 300
    assert [e.peak_step for e in d.events] == [80]


def test_direction_down_finds_accuracy_drops() -> None:
    t = pd.DataFrame({"step": np.arange(200), "acc": 0.6 + 0.003 * np.sin(np.arange(200))})
    t.loc[90, "acc"] = 0.45
    d = detect_spikes(t, metric="acc")  # accuracy: drops are the spikes
    assert d.direction == "down"
    assert [e.peak_step for e in d.events] == [90]
    assert detect_spikes(t, metric="acc", direction="up").events == ()


def test_olmo_rule_is_inactive_until_its_warmup() -> None:
    t = noisy(n=300, seed=12)
    t.loc[30, "loss"] *= 1.5  # before max(20, 128 // 2) = 64 points: OLMo cannot see it
    t.loc[200, "loss"] *= 1.5
    d = detect_spikes(t, detector="olmo")
    assert d.window == DEFAULT_WINDOW["olmo"]
    assert [e.peak_step for e in d.events] == [200]
    assert d.events[0].z > 6


def test_foundry_rule_needs_more_than_patience_outliers() -> None:
    t = noisy(n=300, seed=13)
    t.loc[150:153, "loss"] *= 3  # 4 outliers: within patience
    t.loc[250:254, "loss"] *= 3  # 5 outliers: a spike
    d = detect_spikes(t, detector="foundry")
    assert [(e.start_step, e.end_step) for e in d.events] == [(250, 254)]


def test_megatron_rule_is_ten_times_the_max_of_the_first_hundred() -> None:
    t = noisy(n=300, seed=14)
    first_max = t.loss[:100].abs().max()
    t.loc[150, "loss"] = 9.5 * first_max
    t.loc[250, "loss"] = 10.5 * first_max
    d = detect_spikes(t, detector="megatron")
    assert [e.peak_step for e in d.events] == [250]


def test_bad_input_names_the_bad_values() -> None:
    t = noisy()
    with pytest.raises(InputError) as err:
        detect_spikes(t, metric="ppl", path="run.log")
    assert str(err.value) == "run.log: the log has no 'ppl' column; choose --metric from loss"
    with pytest.raises(InputError, match="unknown detector 'zscore'"):
        detect_spikes(t, detector="zscore")
    with pytest.raises(InputError, match="must be at least 2"):
        detect_spikes(t, window=1)
    t["loss"] = np.nan
    with pytest.raises(InputError, match="no finite 'loss' value"):
        detect_spikes(t)


@pytest.fixture(scope="module")
def real_logs() -> dict[str, pd.DataFrame]:
    from dflash_diag.logs import read_log

    names = {
        "whisper": "whisper_large_v2_japanese_trainer_state.json",
        "gpt_lab": "gpt_lab_diffusion_modded_nanogpt_train.log",
        "llmc": "llmc_gpt2_124m_main.log",
        "baize": "baize_tcm_qwen_lora_trainer_state.json",
    }
    return {k: read_log(REAL_LOGS / v).table for k, v in names.items()}


def test_real_logs_negative_control_has_no_spikes(real_logs) -> None:
    # Whisper fine-tuning: smooth loss printed with 4 decimals down to 0.0001.
    assert detect_spikes(real_logs["whisper"]).events == ()


def test_real_logs_sharp_spikes_are_found_first(real_logs) -> None:
    # SOURCES.md: the largest jumps of this run are 20-60x single-step spikes at these steps.
    d = detect_spikes(real_logs["gpt_lab"])
    top = sorted(d.events, key=lambda e: -e.z)[:5]
    assert {2280, 986, 3394, 6878} <= {e.peak_step for e in top}


@pytest.mark.slow
def test_real_logs_per_step_noise_is_not_flagged_wholesale(real_logs) -> None:
    # Per-step loss of two real runs: spikes are rare, and each is a real departure.
    for name in ("llmc", "baize"):
        d = detect_spikes(real_logs[name])
        assert 0 < len(d.events) < 0.02 * d.n_points, name
        assert min(e.ratio for e in d.events if e.kind == "spike") >= 1.05


@pytest.mark.parametrize("name", ["acc", "val_acc", "eval_accuracy", "train_acc", "train/acc"])
def test_an_accuracy_is_checked_for_drops_whatever_it_is_called(name):
    """One rule (dflash_diag.data.metric_kind): a fall of an accuracy is its spike."""
    import numpy as np
    import pandas as pd

    from dflash_diag.spikes.detect import detect_spikes

    rng = np.random.default_rng(0)
    acc = 0.5 + rng.normal(0, 0.005, 300)
    acc[200] = 0.2
    d = detect_spikes(pd.DataFrame({"step": np.arange(1, 301), name: acc}), name)
    assert d.direction == "down"
    assert [e.peak_step for e in d.events] == [201]
