"""JSON lines read by pyarrow's JSON reader give the line-by-line parser's table."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.errors import InputError
from dflash_diag.logs.fast import jsonlines
from dflash_diag.logs.fields import is_count_of_total
from dflash_diag.logs.io import RawLog
from dflash_diag.logs.text import read_lines

from .equivalence import same


@pytest.fixture(autouse=True)
def small_logs_too(monkeypatch):
    monkeypatch.setattr(jsonlines, "MIN_BYTES", 0)


def _raw(lines: list[str]) -> RawLog:
    return RawLog("metrics.jsonl", ("\n".join(lines) + "\n").encode())


def same_or_both_refuse(raw: RawLog):
    """:func:`same`, or both paths refuse the log with the same clean error."""
    try:
        slow = read_lines(raw, fast=False)
    except InputError as e:
        with pytest.raises(InputError, match=re.escape(str(e))):
            read_lines(raw, fast=True)
        return None
    return same(raw) and slow


def test_a_metrics_file_is_read_by_arrow():
    lines = [
        json.dumps(
            {
                "_step": i,
                "train": {"loss": 4 - i / 100, "lr": 1e-4},
                "tok/s": f"{20 + i % 7}.5K",
                "done": False,
            }
        )
        for i in range(300)
    ]
    # (`step` here, `_step` above: two keys for one column, never in one line)
    lines[100:100] = [json.dumps({"step": 99, "eval/loss": 3.5, "eval/acc": 0.4})]
    lines.append(json.dumps({"train_runtime": 123.4, "train_samples_per_second": 9.1}))
    raw = _raw(lines)
    assert jsonlines.read_json_lines(raw.path, raw.data, None, 0) is not None
    run = same(raw)
    t = run.table.set_index("step")
    assert run.format == "jsonl" and run.skipped == {"summary": 1}
    assert t.loc[5, "loss"] == 3.95 and t.loc[5, "tok_per_s"] == 25_500
    assert t.loc[99, "eval_loss"] == 3.5 and t.loc[99, "loss"] == 4 - 99 / 100


@pytest.mark.parametrize(
    "odd",
    [
        '{"step": 7, "loss": null}',  # null: a key present without a value
        '{"step": 7, "loss": 1.0, "train/loss": 2.0}',  # two keys, one column
        "",  # a blank line
        "==== banner ====",
        '{"step": 7, "loss": NaN}',  # Python's json reads it, Arrow does not
        '{"step": 7, "msg": "UserWarning: slow"}',
        '{"step": 7, "loss": "high"}',  # a type that changes: fine, read once per string
    ],
)
def test_what_arrow_cannot_say_leaves_the_log_to_the_line_parser(odd):
    lines = [json.dumps({"step": i, "loss": i / 8}) for i in range(1, 200)]
    lines[50] = odd
    same(_raw(lines))


def test_carriage_returns_and_a_cut_last_line():
    lines = [json.dumps({"step": i, "loss": i / 8}) for i in range(1, 200)]
    same(RawLog("crlf.jsonl", ("\r\n".join(lines) + "\r\n").encode()))
    same(RawLog("cut.jsonl", ("\n".join(lines) + '\n{"step": 200, "lo').encode()))


def test_ranks_in_a_field():
    lines = [json.dumps({"step": i // 2, "rank": i % 2, "loss": i / 8}) for i in range(400)]
    raw = _raw(lines)
    for rank in (0, 1, "all"):
        fast = read_lines(raw, rank=rank, fast=True)
        pd.testing.assert_frame_equal(fast.table, read_lines(raw, rank=rank, fast=False).table)


_KEYS = [
    "step",
    "_step",
    "loss",
    "train/loss",
    "eval_loss",
    "val_acc",
    "epoch",
    "learning_rate",
    "grad_norm",
    "rank",
    "tok/s",
    "train_runtime",
    "flag",
    "tags",
]
_VALUES = st.one_of(
    st.integers(-5, 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from(["25.1K", "0.5", "nan", "inf", "abc", "87%", " 3 ", "1e-3"]),
    st.booleans(),
    st.lists(st.integers(0, 3), max_size=2),
)


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None)
@given(
    st.lists(
        st.dictionaries(st.sampled_from(_KEYS), _VALUES, min_size=1, max_size=6),
        min_size=1,
        max_size=40,
    ),
    st.booleans(),
)
def test_random_json_lines_read_as_the_line_parser_reads_them(records, nest):
    lines = []
    for rec in records:
        if nest and "loss" in rec:
            rec = {**rec, "train": {"loss": rec.pop("loss")}}
        lines.append(json.dumps(rec))
    same_or_both_refuse(_raw(lines))


_NUMBER = st.one_of(st.integers(-5, 10**6), st.floats(-1e6, 1e6, allow_nan=False, width=32))
#: One key per column, each with values of one JSON type: what Arrow reads whole.
_STABLE = {
    "step": st.integers(0, 50),
    "loss": _NUMBER,
    "eval_loss": _NUMBER,
    "val_acc": _NUMBER,
    "epoch": _NUMBER,
    "learning_rate": _NUMBER,
    "rank": st.integers(0, 3),
    "tok/s": st.sampled_from(["25.1K", "0.5", "nan", "abc", "87%", " 3 ", "1e-3"]),
    "train_runtime": _NUMBER,
    "flag": st.booleans(),
    "tags": st.lists(st.integers(0, 3), max_size=2),
}


def _records_of(types: dict, max_keys: int, max_lines: int):
    """Lists of records, each with some of ``types``'s keys and a value of that key's type."""
    record = st.lists(st.sampled_from(sorted(types)), min_size=1, max_size=max_keys, unique=True)
    return st.lists(
        record.flatmap(lambda keys: st.fixed_dictionaries({k: types[k] for k in keys})),
        min_size=1,
        max_size=max_lines,
    )


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None)
@given(_records_of(_STABLE, 6, 40))
def test_json_lines_of_one_type_per_key_are_read_by_arrow(records):
    raw = _raw([json.dumps(r) for r in records])
    slow = same_or_both_refuse(raw)
    if slow is not None:  # nothing here is what Arrow cannot tell apart
        assert jsonlines.read_json_lines(raw.path, raw.data, None, 0) is not None


@pytest.mark.parametrize("rank", ['"nan"', '"inf"', "1e30", '"x"'])
def test_a_rank_field_that_is_no_rank_is_rank_0(rank):
    lines = [f'{{"step": {i}, "rank": {rank}, "loss": {i / 8}}}' for i in range(1, 100)]
    run = same(_raw(lines))  # (the line parser raised on int(nan) before)
    assert run.ranks == (0,) and len(run.table) == 99


def _edits(texts: list[str]):
    """Up to 8 edits of 60 lines: (line, column, the text that replaces that character)."""
    edit = st.tuples(st.integers(0, 59), st.integers(0, 80), st.sampled_from(texts))
    return st.lists(edit, max_size=8)


def _same_once_edited(lines: list[str], edits) -> None:
    for row, col, text in edits:
        lines[row] = lines[row][:col] + text + lines[row][col + 1 :]
    same_or_both_refuse(_raw(lines))


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None)
@given(_edits(['"', "{", "}", ",", ":", "1", "e", "-", " ", "x", "é", "[", "\\"]))
def test_mutated_json_lines_read_as_the_line_parser_reads_them(edits):
    lines = [
        json.dumps({"step": i, "train": {"loss": i / 7, "tok/s": f"{i}.5K"}, "ok": True})
        for i in range(60)
    ]
    _same_once_edited(lines, edits)


def test_more_keys_than_one_word_of_bits():
    """Key sets are told apart by 63 keys to a word: a log of 70 metrics needs two."""
    lines = [
        json.dumps(
            {
                "step": i,
                **{f"m{k}": i + k for k in range(70)},
                **({"train_runtime": 60.0} if i % 5 == 0 else {}),  # the 72nd key
            }
        )
        for i in range(1, 120)
    ]
    raw = _raw(lines)
    assert jsonlines.read_json_lines(raw.path, raw.data, None, 0) is not None
    run = same(raw)  # lines with train_runtime are end-of-training summaries
    assert run.skipped == {"summary": 23} and len(run.table) == 119 - 23


def test_hf_trainer_dict_lines_are_read_by_arrow():
    lines = [
        repr({"loss": 4 - i / 100, "grad_norm": 1 + i / 50, "learning_rate": 5e-5, "epoch": i / 9})
        for i in range(300)
    ]
    lines[150:150] = [repr({"eval_loss": 3.2, "eval_runtime": 12.5, "epoch": 16.5})]
    lines.append(repr({"train_runtime": 600.1, "train_loss": 2.5, "epoch": 33.3}))
    raw = _raw(lines)
    assert jsonlines.dict_line_records(raw.data) is not None
    run = same(raw)
    assert run.format == "hf-dict" and run.skipped == {"summary": 1}
    assert run.table["step"].tolist() == list(range(1, 301))  # by line order
    assert run.table.set_index("step").loc[150, "eval_loss"] == 3.2  # attached to step 150


_DICT_VALUES = st.one_of(
    _NUMBER,
    st.sampled_from([math.nan, math.inf, True, None, "0.5", "25.1K", "it's", 'a"b', "x,y"]),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 3), max_size=2),
)


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["loss", "eval_loss", "epoch", "learning_rate", "k" * 81, "", "a b"]),
            _DICT_VALUES,
            min_size=1,
            max_size=5,
        ),
        min_size=1,
        max_size=30,
    )
)
def test_random_dict_lines_read_as_the_line_parser_reads_them(records):
    same_or_both_refuse(_raw([repr(r) for r in records]))


_HF_KEYS = {
    "loss": _NUMBER,
    "eval_loss": _NUMBER,
    "epoch": _NUMBER,
    "learning_rate": _NUMBER,
    "train_runtime": _NUMBER,
    "tok/s": st.sampled_from(["0.5", "25.1K", "abc"]),  # (the Trainer quotes some values)
}


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None)
@given(_records_of(_HF_KEYS, 5, 30))
def test_dict_lines_of_one_type_per_key_are_read_by_arrow(records):
    raw = _raw([repr(r) for r in records])
    if same_or_both_refuse(raw) is not None:
        assert jsonlines.dict_line_records(raw.data) is not None


_OTHER_LINES = [
    "***** Running training *****",
    "  Num examples = 1,000",
    "  Total optimization steps = 30",
    "WARNING: the tokenizer is slow",
    "    continued warning text 12",
    "Traceback (most recent call last):",
    '  File "train.py", line 3, in <module>',
    "ValueError: bad",
    "",
    "step=7 loss=2.5",
    "{'loss': nan, 'epoch': 1.0}",
    "{'eval_loss': 2.9, 'epoch': 1.0}",
]


def test_dict_lines_among_the_trainers_other_lines_are_read_by_arrow():
    lines = [
        "***** Running training *****",
        "  Num examples = 1,000",
        "  Total optimization steps = 300",
    ]
    lines += [repr({"loss": 4 - i / 100, "lr": 5e-5, "epoch": i / 9}) for i in range(300)]
    lines[100:100] = ["WARNING: a warning", "Traceback (most recent call last):", "ValueError: x"]
    raw = _raw(lines)
    assert jsonlines.dict_line_records(raw.data) is not None
    run = same(raw)
    assert run.format == "hf-dict" and len(run.table) == 300


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 60), st.sampled_from(_OTHER_LINES)), max_size=8),
    st.booleans(),
)
def test_dict_lines_among_other_lines_read_as_the_line_parser_reads_them(inserts, cut):
    lines = [repr({"loss": i / 7, "grad_norm": 1 + i / 50, "epoch": i / 60}) for i in range(60)]
    for row, text in sorted(inserts, reverse=True):
        lines.insert(row, text)
    data = "\n".join(lines) + ("" if cut else "\n")
    same_or_both_refuse(RawLog("dicts.log", data.encode()))


def test_dict_lines_after_a_long_head_are_read_after_the_line_shape_path(monkeypatch):
    from dflash_diag.logs import text

    monkeypatch.setattr(text, "DICT_HEAD_BYTES", 100)
    got = []
    records = jsonlines.dict_line_records

    def spy(data):
        got.append(records(data))
        return got[-1]

    monkeypatch.setattr(jsonlines, "dict_line_records", spy)
    lines = [f"  config line {i} = {i * 3}" for i in range(20)]
    lines += [repr({"loss": i / 7, "epoch": i / 60}) for i in range(300)]
    run = same(_raw(lines))
    assert got and got[0] is not None  # Arrow read them
    assert run.format == "hf-dict" and len(run.table) == 300


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None)
@given(_edits(["'", '"', "{", "}", ",", ":", "1", "-", " ", "\n", "%|", "\r", "\x1b["]))
def test_mutated_dict_lines_read_as_the_line_parser_reads_them(edits):
    lines = [repr({"loss": i / 7, "grad_norm": 1 + i / 50, "epoch": i / 60}) for i in range(60)]
    _same_once_edited(lines, edits)


def _word_value(word: str) -> float | None:
    """A distinct string read as the line parser reads a value, one at a time."""
    from dflash_diag.logs.fields import number_with_unit
    from dflash_diag.logs.names import to_float

    x = to_float(word)
    return x if x is not None else number_with_unit(word)


_WORDS = st.one_of(
    st.text("0123456789.eE+-", max_size=30),
    st.text("0123456789.eE+-_ xnaif%kK:/", max_size=12),
    st.floats(allow_nan=False).map(repr),
    st.floats(allow_nan=False).map(lambda x: f"{x:.4g}"),
    st.builds(lambda m, e: f"{m}e{e}", st.integers(-(10**25), 10**25), st.integers(-400, 400)),
    st.builds(
        lambda head, x, tail: f"{head}{x}{tail}",
        st.sampled_from(["", " ", "+", "-", "\t", "0"]),
        st.floats(0, 1e6).map(lambda x: f"{x:.5g}"),
        st.sampled_from(["", " ", "%", "k", "e", "."]),
    ),
)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(_WORDS, unique=True, max_size=40))
def test_distinct_strings_cast_at_once_are_what_the_line_parser_reads(words):
    try:
        table, readable = jsonlines.word_values(pa.array(words, pa.string()))
    except jsonlines.CountOfTotal:
        assert any(_word_value(w) is None and is_count_of_total(w) for w in words)
        return
    want = [_word_value(w) for w in words]
    assert readable.tolist() == [x is not None for x in want] + [False]
    bits = np.array([math.nan if x is None else x for x in want] + [math.nan])
    assert table.view(np.uint64).tolist() == bits.view(np.uint64).tolist()


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(1, 8), st.integers(1, 60), st.integers(0, 2**32 - 1))
def test_key_sets_of_a_byte_a_line_are_coded_as_the_wide_words_code_them(
    n_keys: int, n_lines: int, seed: int
) -> None:
    # (a Trainer's few keys: one byte a line; the codes number the sets by first line)
    rng = np.random.default_rng(seed)
    sets = rng.random((n_lines, n_keys)) < rng.random(n_keys)
    presents = [np.ascontiguousarray(sets[:, j]) for j in range(n_keys)]
    got, want = jsonlines.key_set_codes(presents), jsonlines.key_set_codes_wide(presents)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()
