"""Names, units, fields of one line, and the table rules (steps, restarts, ranks)."""

from __future__ import annotations

import math

import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.logs.fields import parse_dict_repr, parse_json_object, parse_text
from dflash_diag.logs.names import canonical_name, snake, unit_factor
from dflash_diag.logs.normalise import build_table


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("train_loss", "loss"),
        ("train/loss", "loss"),
        ("lm loss", "loss"),
        ("trl", "loss"),
        ("learning_rate", "lr"),
        ("learning rate", "lr"),
        ("lr-AdamW", "lr"),
        ("gnorm", "grad_norm"),
        ("grad norm", "grad_norm"),
        ("ntok", "tokens"),
        ("num_tokens", "tokens_seen"),  # a running total (TRL), not per step
        ("tok/s", "tok_per_s"),
        ("tokens_per_sec", "tok_per_s"),
        ("global_step", "step"),
        ("iteration", "step"),
        ("_step", "step"),
        ("Step", "step"),
        ("accuracy@3", "acc_3"),
        ("acc_7", "acc_7"),
        ("val loss", "val_loss"),
        ("eval/loss", "eval_loss"),
        ("consumed samples", "consumed_samples"),
        ("steps", "steps"),  # a count, not the step
    ],
)
def test_aliases(key, name):
    assert canonical_name(key) == name


def test_eval_prefix_never_on_step_epoch_lr():
    assert [canonical_name(k, is_eval=True) for k in ("step", "epoch", "lr", "loss", "acc")] == [
        "step",
        "epoch",
        "lr",
        "eval_loss",
        "eval_acc",
    ]
    assert canonical_name("train loss", is_eval=True) == "eval_train_loss"
    assert canonical_name("val_loss", is_eval=True) == "val_loss"


@pytest.mark.parametrize(
    ("unit", "factor"),
    [
        ("%", 0.01),
        ("K", 1e3),
        ("k", 1e3),
        ("M", 1e6),
        ("B", 1e9),
        ("ms", 1e-3),
        ("min", 60.0),
        ("h", 3600.0),
        ("Ktok/s", 1e3),
        ("tok/s", 1.0),
        ("BPC", 1.0),
        (None, 1.0),
    ],
)
def test_units(unit, factor):
    assert unit_factor(unit) == factor


@settings(max_examples=examples(60), deadline=None)
@given(st.text(alphabet="abcXYZ_/ .-@0123", min_size=1, max_size=20))
def test_snake_is_snake(key):
    s = snake(key)
    assert s == s.lower() and " " not in s and "/" not in s and "-" not in s
    assert snake(s) == s  # idempotent


@settings(max_examples=examples(60), deadline=None)
@given(
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12),
    st.sampled_from(["", "K", "M", "%"]),
)
def test_any_float_notation_round_trips(x, suffix):
    for text in (repr(x), f"{x:.6e}", f"{x:.4f}"):
        m = parse_text(f"step=3 loss={text}{suffix}")
        assert m.fields["step"] == 3
        assert m.fields["loss"] == pytest.approx(float(text) * unit_factor(suffix or None))


def test_nan_and_inf_values():
    m = parse_text("step 7 | loss nan | grad_norm inf | lr -inf")
    assert math.isnan(m.fields["loss"]) and m.fields["grad_norm"] == math.inf
    assert m.fields["lr"] == -math.inf


def test_dict_and_json_lines():
    d = parse_dict_repr("{'loss': nan, 'learning_rate': '8.8e-05', 'epoch': 0.05, 'x': 'a'}")
    assert math.isnan(d.fields["loss"]) and d.fields == {**d.fields, "lr": 8.8e-05, "epoch": 0.05}
    assert "x" not in d.fields
    j = parse_json_object('{"step": 3, "train": {"loss": 1.5, "acc": true}, "acc@0": 0.5}')
    assert j.fields == {"step": 3.0, "loss": 1.5, "acc_0": 0.5}
    assert parse_json_object("[1, 2]") is None


def _records(steps, ranks=None):
    return [
        {
            "line": i + 1,
            "rank": (ranks or [0] * len(steps))[i],
            "step": float(s),
            "step_source": "field",
            "is_eval": False,
            "loss": float(i),
        }
        for i, s in enumerate(steps)
    ]


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=60))
def test_later_values_supersede_and_restarts_are_the_backward_jumps(steps):
    run = build_table(_records(steps), path="x", fmt="text")
    t = run.table
    # one row per distinct step, sorted, holding the value of the last line with that step
    assert t["step"].tolist() == sorted(set(steps))
    last = {s: float(i) for i, s in enumerate(steps)}
    assert dict(zip(t["step"], t["loss"], strict=True)) == last
    # a restart is reported exactly where the counter went below everything before it...
    expected = set()
    for i in range(1, len(steps)):
        below = steps[i] < max(steps[:i])
        continuing = i > 1 and steps[i - 1] < max(steps[: i - 1]) and steps[i] > steps[i - 1]
        if below and not continuing:
            expected.add(steps[i])
    assert set(run.restarts) == expected


def test_rank_selection():
    recs = _records([1, 1, 2, 2], ranks=[0, 1, 0, 1])
    assert build_table(recs, path="x", fmt="text", rank=1).table["loss"].tolist() == [1.0, 3.0]
    both = build_table(recs, path="x", fmt="text", rank="all").table
    assert both[["rank", "step"]].values.tolist() == [[0, 1], [0, 2], [1, 1], [1, 2]]


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 30), st.sampled_from([None, 1.5, 2.5])),
        min_size=1,
        max_size=60,
    )
)
def test_all_ranks_keep_the_last_value_per_rank_and_step(rows):
    """rank="all": one row per (rank, step), sorted so, each column its last logged
    value there, whether the keys repeat (grouped) or not (only sorted)."""
    recs = [
        {"line": i + 1, "rank": r, "step": float(s), "step_source": "field", "is_eval": False}
        | ({} if x is None else {"grad_norm": x})
        | {"loss": float(i)}
        for i, (r, s, x) in enumerate(rows)
    ]
    t = build_table(recs, path="x", fmt="text", rank="all").table
    keys = sorted({(r, s) for r, s, _ in rows})
    assert t[["rank", "step"]].values.tolist() == [list(k) for k in keys]
    for (r, s), loss, gn in zip(keys, t["loss"], t["grad_norm"], strict=True):
        mine = [(i, x) for i, (rr, ss, x) in enumerate(rows) if (rr, ss) == (r, s)]
        assert loss == float(mine[-1][0])
        logged = [x for _, x in mine if x is not None]
        assert (math.isnan(gn) and not logged) or gn == logged[-1]


def test_a_mode_word_before_the_step_key_still_gives_the_step(tmp_path):
    # `eval step=10 loss=2.5`: an evaluation line numbered by its step, not an `eval_step`.
    from dflash_diag.logs import read_log

    log = tmp_path / "e.log"
    log.write_text("step=9 loss=2.6\neval step=10 loss=2.5\nstep=10 loss=2.4\n")
    table = read_log(log).table.set_index("step")
    assert table.loc[10, "eval_loss"] == 2.5
    assert table.loc[10, "loss"] == 2.4
    assert "eval_step" not in table.columns


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),  # rank
            st.integers(0, 12),  # step: repeats (several lines per step) and restarts
            st.sampled_from([None, 1.5, float("nan"), float("inf")]),  # grad_norm
            st.booleans(),  # an eval line (its own columns)
        ),
        min_size=1,
        max_size=80,
    ),
    st.sampled_from([0, 1, "all"]),
)
def test_steps_logged_several_times_keep_each_columns_last_value(rows, rank):
    """Several lines per step (a metrics line and a timing line, train and eval lines, a
    resumed run): each column keeps its last logged value at that step (a NaN is no
    value), rows in step order (per rank with rank="all"), as a groupby's last() has it."""
    recs = [
        {"line": i + 1, "rank": r, "step": float(s), "step_source": "field", "is_eval": ev}
        | ({"eval_loss": float(i)} if ev else {"loss": float(i)})
        | ({} if x is None else {"grad_norm": x})
        for i, (r, s, x, ev) in enumerate(rows)
    ]
    if rank != "all" and rank not in {r for r, *_ in rows}:
        return  # (no such rank: an error, tested elsewhere)
    t = build_table(recs, path="x", fmt="text", rank=rank).table
    kept = [(i, row) for i, row in enumerate(rows) if rank == "all" or row[0] == rank]
    keys = sorted({(r, s) if rank == "all" else s for _, (r, s, _, _) in kept})
    got_keys = t[["rank", "step"]].values.tolist() if rank == "all" else t["step"].tolist()
    assert got_keys == [list(k) if rank == "all" else k for k in keys]

    def last(key, pick):
        vals = [
            pick(i, row)
            for i, row in kept
            if ((row[0], row[1]) if rank == "all" else row[1]) == key
        ]
        vals = [v for v in vals if v is not None and not math.isnan(v)]
        return vals[-1] if vals else None

    for j, key in enumerate(keys):
        for col, pick in [
            ("loss", lambda i, row: None if row[3] else float(i)),
            ("eval_loss", lambda i, row: float(i) if row[3] else None),
            ("grad_norm", lambda i, row: row[2]),
        ]:
            want = last(key, pick)
            got = t[col].iloc[j] if col in t else float("nan")
            assert (want is None and math.isnan(got)) or got == want, (key, col)


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["eval", "Val", "VALID", "test", "TESTING", "teſt", "valıd", "İ", "ſ", "e", "a"]
            + ["loss", "_", "/", " ", "=", "2.5", "x"]
        ),
        max_size=8,
    ).map("".join)
)
def test_the_eval_word_prefilter_never_hides_a_match(text):
    """Lines the cheap substring test rules out hold no evaluation word for the regex."""
    from dflash_diag.logs.fields import EVAL_WORDS, may_hold_eval_word

    if EVAL_WORDS.search(text):
        assert may_hold_eval_word(text)


def test_an_eval_word_spelt_with_a_long_s_still_counts():
    assert parse_text("teſt loss=2.5 step=3").is_eval


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        *[(x, "bad_step") for x in (math.inf, -math.inf, 1e30, -(2.0**63), 2.0**53)],
        (math.nan, "no_step"),  # (a step field that held no number)
    ],
)
def test_a_step_no_counter_reaches_is_skipped_not_cast(bad, reason):
    """``step=1e30`` would wrap round in an int64 (and make a restart of every later step)."""
    recs = _records([1, 2, 3])
    recs[1]["step"] = bad
    run = build_table(recs, path="x", fmt="text")
    assert run.table["step"].tolist() == [1, 3]
    assert run.skipped == {reason: 1} and run.restarts == ()
