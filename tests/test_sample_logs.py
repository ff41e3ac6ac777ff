"""The sample case in sample_logs/: deterministic, and true to the story it tells.

The logs are read here with a small regex on purpose: these tests check the files, not
the log reader (which has its own tests).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest

SAMPLE = Path(__file__).resolve().parent.parent / "sample_logs"
FILES = (
    "manifest.parquet",
    "dflash-diag.toml",
    "bucketed.toml",
    "run.log",
    "v1.log",
    "run_bucketed.log",
)
TRAIN = re.compile(
    r"\| INFO \| dflash\.train \| epoch=(\d+) step=(\d+)/(\d+) loss=(\S+) acc=(\S+) "
    r"lr=(\S+) grad_norm=(\S+) ntok=(\d+) tok/s=(\S+)K$"
)


@cache
def generator():
    spec = importlib.util.spec_from_file_location("sample_generate", SAMPLE / "generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@cache
def train_rows(name: str) -> np.ndarray:
    """Every train line of a log, in file order: epoch, step, total, loss, acc, lr,
    grad_norm, ntok, tok/s (K)."""
    rows = []
    for line in (SAMPLE / name).read_text(encoding="utf-8").splitlines():
        m = TRAIN.search(line)
        if m:
            rows.append([float(v) for v in m.groups()])
    return np.array(rows)


def last_per_step(rows: np.ndarray) -> dict[int, np.ndarray]:
    """Step -> its row; after the resume the later line of a repeated step wins."""
    return {int(r[1]): r for r in rows}


@cache
def replayed(config: str):
    """The replay of a sample config, as dflash-diag would resolve it."""
    import pyarrow.parquet as pq

    from dflash_diag.schedule import replay
    from dflash_diag.schedule.config import resolve_schedule

    resolved = resolve_schedule({}, config=SAMPLE / config)
    table = pq.read_table(resolved.manifest, columns=["length", "source"])
    lengths = table.column("length").to_numpy().astype(np.int64)
    sources = np.asarray(table.column("source").to_pylist())
    return replay(lengths, resolved.params, categories=sources)


def seed_of(config: str) -> int:
    from dflash_diag.schedule.config import read_config

    return int(read_config(SAMPLE / config)["seed"])


@pytest.mark.slow
def test_generator_rewrites_every_file_identically(tmp_path: Path) -> None:
    # --seed skips the search (minutes) but must still qualify; everything else is rebuilt
    cmd = [sys.executable, str(SAMPLE / "generate.py"), "--out", str(tmp_path)]
    subprocess.run(
        [*cmd, "--seed", str(seed_of("dflash-diag.toml"))], check=True, capture_output=True
    )
    for name in FILES:
        if name.endswith(".parquet"):
            continue
        assert (tmp_path / name).read_bytes() == (SAMPLE / name).read_bytes(), name
    # the parquet's bytes also carry pyarrow's version string; its content must be equal
    import pyarrow.parquet as pq

    new, old = (pq.read_table(d / "manifest.parquet") for d in (tmp_path, SAMPLE))
    assert new.schema == old.schema and new.equals(old)


def test_a_seed_that_does_not_tell_the_story_is_refused(tmp_path: Path) -> None:
    g = generator()
    with pytest.raises(RuntimeError, match="no seed"):
        g.generate(tmp_path, seed=seed_of("dflash-diag.toml") - 1)


def test_files_are_small() -> None:
    assert (SAMPLE / "run.log").stat().st_size < 1_000_000
    assert (SAMPLE / "run_bucketed.log").stat().st_size < 1_000_000
    assert (SAMPLE / "manifest.parquet").stat().st_size < 2_000_000


def test_manifest_is_long_tailed_with_longer_code() -> None:
    import pyarrow.parquet as pq

    t = pq.read_table(SAMPLE / "manifest.parquet").to_pandas()
    assert list(t.columns) == ["sample_id", "length", "source"]
    assert len(t) == 100_000
    assert 1300 <= t["length"].median() <= 1700
    assert t["length"].max() > 8192  # a thin tail the schedule truncates
    assert (t["length"] > 8192).mean() < 0.002
    means = t.groupby("source", observed=True)["length"].mean()
    assert means["code"] > means["math"] > means["chat"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("log", "config"), [("run.log", "dflash-diag.toml"), ("run_bucketed.log", "bucketed.toml")]
)
def test_logged_ntok_is_the_replay_at_every_step(log: str, config: str) -> None:
    rep = replayed(config)
    steps = rep.steps.set_index("step")
    rows = train_rows(log)
    # every line, the repeated steps after the resume included
    for epoch, step, _total, *_, ntok, _ in rows:
        assert steps.at[int(step), "tokens"] == int(ntok), step
        assert steps.at[int(step), "epoch"] == int(epoch), step
    logged = sorted(last_per_step(rows))
    assert logged == steps.index.tolist()  # the whole run, nothing missing
    assert int(rows[0, 2]) == len(steps)


def test_run_resumes_from_a_checkpoint_and_repeats_steps() -> None:
    steps = train_rows("run.log")[:, 1].astype(int)
    back = np.flatnonzero(np.diff(steps) < 0)
    assert len(back) == 1
    resumed_at = steps[back[0] + 1]
    assert resumed_at == 1501 and steps[back[0]] > resumed_at
    text = (SAMPLE / "run.log").read_text()
    assert "Traceback (most recent call last)" in text and "[rank3]:" in text


def rank0(rep, step: int):
    m = rep.micro
    return m[(m["step"] == step) & (m["rank"] == 0)].iloc[0]


def test_steps_254_and_258_are_batches_of_the_longest_samples() -> None:
    rep = replayed("dflash-diag.toml")
    q98 = rep.micro["mean_len"].quantile(0.98)
    rows = last_per_step(train_rows("run.log"))
    baseline = np.median([rows[s][3] for s in range(204, 305) if s not in (254, 258)])
    assert 0.88 <= baseline <= 0.98
    for s in (254, 258):
        assert rank0(rep, s)["mean_len"] >= q98
        assert 4.0 <= rows[s][3] <= 6.0
        assert rank0(rep, s)["epoch"] == 0


def test_the_spike_batches_come_back_and_spike_less() -> None:
    rep = replayed("dflash-diag.toml")
    m = rep.micro
    rows = last_per_step(train_rows("run.log"))
    for s in (254, 258):
        bid = rank0(rep, s)["batch_id"]
        again = m[(m["batch_id"] == bid) & (m["rank"] == 0) & (m["step"] != s)]
        assert len(again) >= 1  # sorted-greedy: the same batch, on rank 0, in a later epoch
        for later in again["step"]:
            assert 1.5 <= rows[int(later)][3] < rows[s][3]


def test_every_big_spike_but_the_optimizer_event_is_a_batch_of_the_longest() -> None:
    # the README's truth: loss over 2x its rolling median is composition (rank 0 held one
    # of the longest 1% of micro-batches), except the optimizer event's ~20 steps
    rep = replayed("dflash-diag.toml")
    rows = last_per_step(train_rows("run.log"))
    steps = sorted(rows)
    loss = np.array([rows[s][3] for s in steps])
    grad = np.array([rows[s][6] for s in steps])
    event = steps[int(np.argmax(np.where(np.array(steps) > 1000, grad, 0)))]
    q99 = rep.micro["mean_len"].quantile(0.99)
    big = 0
    for i, s in enumerate(steps):
        window = loss[max(i - 25, 0) : i + 26]
        if loss[i] > 2 * np.median(window) and not event <= s < event + 20:
            assert rank0(rep, s)["mean_len"] >= q99, s
            big += 1
    assert big >= 10


def test_step_349_reads_like_the_story() -> None:
    row = last_per_step(train_rows("run.log"))[349]
    assert row[3] == pytest.approx(0.87, abs=0.0051)
    assert row[4] == pytest.approx(0.046, abs=0.0011)
    assert row[5] == pytest.approx(8.80e-05, rel=1e-3)


@pytest.mark.parametrize("log", ["run.log", "v1.log"])
def test_acc_is_near_zero_in_warmup_and_rises_after(log: str) -> None:
    rows = last_per_step(train_rows(log))
    acc = np.array([rows[s][4] for s in sorted(rows)])
    steps = np.array(sorted(rows))
    warm = np.median(acc[(steps > 300) & (steps <= 400)])
    end_of_warmup = np.median(acc[(steps > 2280) & (steps <= 2380)])
    after = np.median(acc[steps > steps[-1] - 100])
    assert warm < 0.06 and end_of_warmup < 0.1
    assert after > end_of_warmup + 0.08


def test_the_optimizer_event_is_on_an_ordinary_batch() -> None:
    g = generator()
    rep = replayed("dflash-diag.toml")
    rows = last_per_step(train_rows("run.log"))
    # find it from the log: the largest grad_norm after step 1000
    late = [s for s in rows if s > 1000]
    event = max(late, key=lambda s: rows[s][6])
    before = np.median([rows[s][6] for s in range(event - 30, event)])
    assert rows[event][6] > 5 * before
    loss_before = np.median([rows[s][3] for s in range(event - 30, event)])
    assert rows[event][3] > 2 * loss_before
    assert rows[event + 20][3] < 1.3 * loss_before  # decayed within ~20 steps
    m = rep.micro
    lo, hi = m["mean_len"].quantile([0.2, 0.8])
    assert lo <= rank0(rep, event)["mean_len"] <= hi
    assert event >= g.OPT_EVENT_FROM


@pytest.mark.slow
def test_the_bucketed_run_has_no_spike_of_4_to_6_and_no_recurring_batch() -> None:
    rep = replayed("bucketed.toml")
    rows = last_per_step(train_rows("run_bucketed.log"))
    assert max(r[3] for s, r in rows.items() if s > 100) < 3.5
    m = rep.micro
    epochs_per_batch = m.groupby("batch_id")["epoch"].nunique()
    assert (epochs_per_batch > 1).mean() < 0.01
    sorted_rows = last_per_step(train_rows("run.log"))
    assert sum(r[3] > 4 for r in sorted_rows.values()) >= 2


@pytest.mark.slow
def test_the_readme_recall_table_is_what_recall_py_prints() -> None:
    # sample_logs/README.md states the verdicts' recall against the truth; it must not drift
    out = subprocess.run(
        [sys.executable, str(SAMPLE / "recall.py")], capture_output=True, text=True, check=True
    )
    readme = (SAMPLE / "README.md").read_text()
    assert out.stdout.strip() in readme
