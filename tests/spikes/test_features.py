"""Batch features of logged points: pooling over steps, ranks and logging windows."""

from __future__ import annotations

import numpy as np
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.data import ScheduleParams
from dflash_diag.errors import InputError
from dflash_diag.schedule import replay
from dflash_diag.spikes.features import point_features, point_index, rank_features

from .constructed import manifest

COLUMNS = ["n_samples", "tokens", "padded_tokens", "min_len", "mean_len", "max_len", "len_std"]


@pytest.fixture(scope="module")
def rep():
    params = ScheduleParams(token_budget=8192, world_size=2, grad_accum=2, first_step=1)
    return replay(manifest(3000), params, epochs=2)


def test_one_point_per_step_equals_the_replayed_step(rep) -> None:
    # Pooling a step's world_size x grad_accum micro-batches gives the replay's step row.
    steps = rep.steps
    f = point_features(rep, steps["step"].to_numpy())
    assert (f["n_micro"] == 4).all() and (f["n_steps"] == 1).all()
    for c in [*COLUMNS, "padding_eff", "cat_line", "cat_code"]:
        np.testing.assert_allclose(f[c], steps[c].to_numpy(dtype=float), rtol=1e-9, err_msg=c)


@settings(max_examples=examples(30), deadline=None)
@given(interval=st.integers(2, 25))
def test_a_window_point_pools_the_steps_up_to_it(rep, interval: int) -> None:
    steps = rep.steps
    logged = steps["step"].to_numpy()[interval - 1 :: interval]
    f = point_features(rep, logged, interval, covers="window")
    s = steps.set_index("step")
    for i, step in enumerate(logged[:5]):
        part = s.loc[step - interval + 1 : step]
        assert f["n_steps"].iloc[i] == interval
        assert f["tokens"].iloc[i] == part["tokens"].sum()
        assert f["max_len"].iloc[i] == part["max_len"].max()
        assert f["min_len"].iloc[i] == part["min_len"].min()
        assert f["mean_len"].iloc[i] == pytest.approx(
            part["tokens"].sum() / part["n_samples"].sum()
        )


def test_a_step_point_takes_only_its_own_step(rep) -> None:
    logged = np.array([10, 20, 30])
    f = point_features(rep, logged, 10, covers="step")
    s = rep.steps.set_index("step")
    assert f["tokens"].tolist() == s.loc[logged, "tokens"].astype(float).tolist()


def test_points_outside_the_replay_have_no_features(rep) -> None:
    last = int(rep.steps["step"].max())
    f = point_features(rep, np.array([last, last + 1]))
    assert f["n_micro"].tolist() == [4, 0]
    assert np.isnan(f["mean_len"].iloc[1])


def test_point_index_rules() -> None:
    assert point_index(np.array([1, 2, 3, 4, 5]), np.array([2, 4]), 2).tolist() == [0, 0, 1, 1, -1]
    assert point_index(np.array([1, 2, 3]), np.array([2, 3]), 1).tolist() == [-1, 0, 1]
    with pytest.raises(InputError, match="unknown value 'mean'"):
        point_index(np.array([1]), np.array([1]), 1, covers="mean")


def test_rank_features_add_up_to_the_step(rep) -> None:
    steps = rep.steps["step"].to_numpy()[:20]
    per_rank = rank_features(rep, steps)
    assert sorted(per_rank["rank"].unique().tolist()) == [0, 1]
    total = per_rank.groupby("step")["tokens"].sum()
    assert total.tolist() == rep.steps.set_index("step").loc[steps, "tokens"].astype(float).tolist()
