"""The HF Trainer's console output read vectorised (:mod:`dflash_diag.logs.fast.console`)
gives the line parser's RunLog: on the real fixtures, on logs built here from the
pieces a Trainer writes (bars, ``tqdm.write`` clears, dicts in stdout lumps, banners,
warnings, tracebacks, evaluation bars), and its write steps are
:func:`~dflash_diag.logs.bars.write_steps`'s."""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from budget import examples
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from dflash_diag.errors import InputError
from dflash_diag.logs.bars import CLEAR_OR_BAR, write_steps
from dflash_diag.logs.fast import console, jsonlines
from dflash_diag.logs.io import RawLog
from dflash_diag.logs.text import read_lines

DATA = Path(__file__).resolve().parents[1] / "data"


def same(raw: RawLog):
    """Fast and line-by-line reads give one RunLog, ``step_source`` included (or the
    same error)."""
    try:
        slow = read_lines(raw, fast=False)
    except InputError as e:
        with pytest.raises(InputError) as fast_error:
            read_lines(raw, fast=True)
        assert str(fast_error.value) == str(e)
        return None
    fast = read_lines(raw, fast=True)
    pd.testing.assert_frame_equal(fast.table, slow.table)
    keys = ("restarts", "ranks", "skipped", "n_lines", "format", "step_source")
    assert {k: getattr(fast, k) for k in keys} == {k: getattr(slow, k) for k in keys}
    return fast


@pytest.fixture
def small_logs_too(monkeypatch):
    monkeypatch.setattr(jsonlines, "MIN_BYTES", 0)


REAL = sorted(glob.glob(str(DATA / "trainers" / "*.log"))) + sorted(
    glob.glob(str(DATA / "trainer_runs" / "*" / "train.log"))
)


@pytest.mark.parametrize("path", REAL, ids=lambda p: Path(p).parent.name + "/" + Path(p).name)
def test_real_logs_read_as_the_line_parser_reads_them(path, small_logs_too):
    same(RawLog(path, Path(path).read_bytes()))


def test_the_real_runs_are_read_by_the_console_path():
    # (each is 1,000 steps of `logging_steps=1` with the bars on stderr)
    for path in glob.glob(str(DATA / "trainer_runs" / "*" / "train.log")):
        got = console.console_records(Path(path).read_bytes())
        assert got is not None and len(got.frame) == 1000, path


@pytest.mark.parametrize("run", ["clean", "lr_surge"])
def test_read_log_maps_a_trainer_console_without_copying_it(run, monkeypatch):
    # a Trainer's stdout and stderr (dicts among tqdm bars) is read through a memory
    # map, as a plain text log is, and gives what the line parser gives from the bytes
    from dflash_diag.logs import io, read_log

    path = DATA / "trainer_runs" / run / "train.log"
    want = read_lines(RawLog(str(path), path.read_bytes()), fast=False)

    def no_copy(name):
        raise AssertionError("the mapped fast path should have read this log")

    monkeypatch.setattr(io, "read_bytes", no_copy)
    for fmt in (None, "hf-dict"):
        got = read_log(path, format=fmt)
        pd.testing.assert_frame_equal(got.table, want.table)
        keys = ("restarts", "skipped", "n_lines", "format", "step_source")
        assert {k: getattr(got, k) for k in keys} == {k: getattr(want, k) for k in keys}


@pytest.mark.parametrize(
    "name",
    [
        "hf_trainer_steps1.log",
        "hf_trainer_steps1_unbuffered.log",
        "hf_trainer_steps5_eval.log",  # (nested eval bars, dicts glued to a bar)
        "hf_trainer_tokens_seen.log",
    ],
)
def test_the_trainer_fixtures_are_read_by_the_console_path(name, small_logs_too):
    got = console.console_records((DATA / "trainers" / name).read_bytes())
    assert got is not None and len(got.frame) > 0


def bar(n: int, total: int) -> str:
    pct = n * 100 // total
    return f"\r{pct:3d}%|{'#' * (pct // 10):<10}| {n}/{total} [00:01<00:02, {n % 9}.5it/s]"


def clear(width: int = 44) -> str:
    return "\r" + " " * width + "\r"


def record(rng: np.random.Generator, step: int, kind: str) -> str:
    if kind == "eval":
        return f"{{'eval_loss': '{2 + rng.random():.4g}', 'eval_runtime': '0.5', 'epoch': '1'}}\n"
    if kind == "summary":
        return "{'train_runtime': '1.5', 'train_loss': '2.5', 'epoch': '2'}\n"
    if kind == "stepped":
        return f"{{'step': {step}, 'loss': '{2 + rng.random():.4g}'}}\n"
    if kind in TRAPS:
        return TRAPS[kind].format(loss=f"{2 + rng.random():.4g}", step=step)
    return (
        f"{{'loss': '{2 + rng.random():.4g}', 'grad_norm': '{rng.random():.4g}', "
        f"'learning_rate': '{1e-3 / step:.4g}', 'epoch': '{step / 100:.4g}'}}\n"
    )


#: Dict lines the fast path must read as the line parser does, or leave to it: a
#: bare number (``num_input_tokens_seen``), what JSON reads otherwise than a cut at the
#: quotes (an escape, a tab), what the line parser takes for other lines (a warning, a
#: ``%`` or ``%|``, a bullet), another spacing, a key twice, keys in another order or
#: another set of as many keys, an empty value, a long key.
TRAPS = {
    "tokens": "{{'loss': '{loss}', 'epoch': '0.5', 'num_input_tokens_seen': {step}0}}\n",
    "escape": "{{'loss': '{loss}', 'note': 'a\\\\nb'}}\n",
    "tab": "{{'loss': '{loss}',\t'epoch': '1'}}\n",
    "warning": "{{'loss': '{loss}', 'note': 'Warning: slow'}}\n",
    "percent": "{{'loss': '{loss}', 'acc': '45%'}}\n",
    "percent_bar": "{{'loss': '{loss}', 'note': '5%|x'}}\n",
    "percent_end": "{{'loss': '{loss}', 'acc': 45%}}\n",
    "bullet": "{{'loss': '{loss}', 'note': 'a \u2022 b'}}\n",
    "tight": "{{'loss':'{loss}', 'epoch':'1'}}\n",
    "twice": "{{'loss': '{loss}', 'loss': '9'}}\n",
    "reordered": "{{'grad_norm': '0.5', 'loss': '{loss}', 'epoch': '1', 'learning_rate': '1'}}\n",
    "same_count": "{{'eval_loss': '{loss}', 'eval_runtime': '0.5', 'eval_x': '3', 'epoch': '1'}}\n",
    "empty": "{{'loss': '{loss}', 'note': ''}}\n",
    "long_key": "{{'loss': '{loss}', '" + "k" * 81 + "': '1'}}\n",
    "unicode": "{{'loss': '{loss}', 'd\u00e9bit': '3'}}\n",
    "quote": "{{'loss': '{loss}', 'note': '\"2.5\"'}}\n",
    "quote_key": "{{'loss': '{loss}', 'it\"s': '3'}}\n",
}

#: Lines a Trainer's console shows among its bars, and the traps of the line parser.
OTHER = [
    "***** Running training *****\n",
    "  Num examples = 1,000\n",
    "/venv/lib/python3.11/site-packages/x.py:10: UserWarning: deprecated\n",
    "  warnings.warn(\n",
    "Traceback (most recent call last):\n",
    '  File "train.py", line 3, in <module>\n',
    "ValueError: boom\n",
    "\n",
    "step=3 loss=2.5\n",
    "    loss=2.25\n",
    "\r  0%|          | 0/4 [00:00<?, ?it/s]\x1b[A\r" + " " * 30 + "\r\x1b[A\n",
    "\r100%|##########| 4/4 [00:00<00:00, 9.1it/s]\x1b[A\n",
    "{'eval_loss': '2.5', 'epoch': '1'} glued\n",
    "\r 50%|#####     | 5/10 [00:01<00:01, 5.0it/s, loss=2.1]\n",
    "    \n",
    "  \t(trailing\r\n",
]


@st.composite
def consoles(draw) -> str:
    """A Trainer's console log: per step a clear, a dict (to stdout: at once, or in a
    lump flushed at a random write), a redraw; other lines between at random."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    steps = draw(st.integers(1, 60))
    total = steps + draw(st.integers(0, 3))
    buffered = draw(st.booleans())
    trap = draw(st.sampled_from([None, None, *TRAPS]))  # (one kind of trap a log)
    out = [bar(0, total)]
    lump: list[str] = []
    for s in range(1, steps + 1):
        if draw(st.integers(0, 9)) == 0:
            out.append(draw(st.sampled_from(OTHER)))
        if draw(st.integers(0, 3)) == 0:
            out.append(bar(s, total))  # (a redraw between writes)
        out.append(clear(draw(st.sampled_from([0, 44, 60]))))
        kind = draw(st.sampled_from(["train"] * 6 + ["eval", "summary", "stepped"]))
        if trap is not None and draw(st.integers(0, 4)) == 0:
            kind = trap
        lump.append(record(rng, s, kind))
        flush = not buffered or draw(st.integers(0, 4)) == 0
        glued = buffered and draw(st.booleans())  # (the lump right after the redraw)
        if flush and not glued:
            out.extend(lump)
            lump = []
        if draw(st.integers(0, 5)) == 0:
            out.append("\r" + " " * 20 + "\x1b[A")  # (a nested bar's clear, cursor up)
        out.append(bar(s, total))
        if flush and glued:
            out.extend(lump)
            lump = []
        if draw(st.integers(0, 15)) == 0:
            out.append("\n")
    out.append("\n" + "".join(lump))
    text = "".join(out)
    if draw(st.integers(0, 9)) == 0:
        text = text.rstrip("\n")  # (a run cut short)
    return text


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(consoles())
def test_built_consoles_read_as_the_line_parser_reads_them(text):
    jsonlines.MIN_BYTES, keep = 0, jsonlines.MIN_BYTES
    try:
        same(RawLog("hf.log", text.encode()))
    finally:
        jsonlines.MIN_BYTES = keep


def test_a_plain_console_is_read_by_the_console_path(small_logs_too):
    rng = np.random.default_rng(1)
    text = bar(0, 50) + "".join(
        clear() + record(rng, s, "train") + bar(s, 50) for s in range(1, 51)
    )
    got = console.console_records((text + "\n").encode())
    assert got is not None and len(got.frame) == 50 and got.others == []
    run = same(RawLog("hf.log", (text + "\n").encode()))
    assert run.step_source == "progress" and run.table["step"].tolist() == list(range(1, 51))


@pytest.mark.parametrize(
    "line",
    [
        "Config {'a': 1}\n",
        "\r 5%|#| 5/100 [00:01<00:02, 1it/s, loss=2]\n",
        "see \x1b]8;;https://hf.co\x1b\\the docs\x1b]8;;\x1b\\\n",  # (an OSC hyperlink)
    ],
)
def test_what_the_line_parser_must_read_is_declined(line, small_logs_too):
    # a dict on another line would interleave with the write order; a postfix is a
    # record; an OSC escape is read by the line parser's rules only
    rng = np.random.default_rng(2)
    text = "".join(clear() + record(rng, s, "train") + bar(s, 50) for s in range(1, 51))
    data = (line + text + "\n").encode()
    assert console.console_records(data) is None
    same(RawLog("hf.log", data))


@st.composite
def token_texts(draw) -> str:
    pieces = st.sampled_from(
        [clear(3), clear(10), bar(1, 10), bar(2, 10), bar(3, 10), bar(1, 4), bar(2, 4), "x"]
    )
    return "".join(draw(st.lists(pieces, max_size=40)))


@given(token_texts())
def test_write_steps_of_tokens_is_write_steps(text):
    pos, count, total = [], [], []
    for m in CLEAR_OR_BAR.finditer(text):
        pos.append(m.start())
        count.append(-1 if m.group("n") is None else int(m.group("n")))
        total.append(-1 if m.group("n") is None else int(m.group("total")))
    got = console.write_steps_of(np.array(pos), np.array(count), np.array(total))
    want = write_steps(text + "%|") if "\r" in text else []
    assert (got.tolist() if got is not None else []) == want


def test_quoted_dicts_are_not_read_as_json(small_logs_too, monkeypatch):
    # (the Trainer's dicts of strings are cut at their quotes: JSON is the slow way)
    def refuse(*args, **kwargs):
        raise AssertionError("read as JSON")

    monkeypatch.setattr(jsonlines, "json_records", refuse)
    rng = np.random.default_rng(3)
    kinds = ["train"] * 40 + ["eval", "summary"]
    text = "".join(
        clear() + record(rng, s, kinds[s % len(kinds)]) + bar(s, 60) for s in range(1, 61)
    )
    got = console.console_records((text + "\n").encode())
    assert got is not None and len(got.frame) > 0


class _Stream:
    """Bytes as a file, read in small pieces of whole lines (as the console path
    hands the dict lines to the CSV reader)."""

    closed = False

    def __init__(self, data: bytes) -> None:
        self.lines, self.at = data.splitlines(keepends=True), 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        out = b"".join(self.lines[self.at : self.at + 3])
        self.at += 3
        return out


_KEYS = ["loss", "epoch", "grad_norm", "eval_loss", "d\u00e9bit", "a b", "x:y", "{", "}"]
_VALUES = st.text(
    alphabet=st.characters(blacklist_characters="'\"\\", blacklist_categories=["Cc", "Cs"]),
    max_size=8,
)


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(
        st.dictionaries(st.sampled_from(_KEYS), _VALUES, min_size=1, max_size=5),
        min_size=1,
        max_size=60,
    )
)
@example([{"loss": "1"}, {"epoch": "2"}, {"loss": "3"}])  # (a column of two keys)
def test_quoted_columns_are_what_json_reads(rows):
    # an invariant: the cut at the quotes holds the JSON reader's keys (in order),
    # presence and strings, line by line (read in blocks of 1 KB: their dictionaries
    # merged)
    from dflash_diag.logs.fast import quoted

    lines = [repr(r).encode() + b"\n" for r in rows]
    data = b"".join(lines)
    if any(b'"' in line or b"\\" in line for line in lines):
        return  # (repr chose double quotes, or escaped: the callers send those to JSON)
    quoted.BLOCK, keep_block = 1024, quoted.BLOCK
    try:
        cut = quoted.quoted_columns(_Stream(data), lines[0].decode().removesuffix("\n"))
    finally:
        quoted.BLOCK = keep_block
    jsonlines.MIN_BYTES, keep = 0, jsonlines.MIN_BYTES
    try:
        table = jsonlines._arrow_table(data.replace(b"'", b'"'))
    finally:
        jsonlines.MIN_BYTES = keep
    assume(table is not None)  # (a guard of the JSON path: "null", "Warning:" in a value)
    assert cut is not None
    want = jsonlines._columns(table)
    assert [k for k, _, _ in cut.columns] == [k for k, _, _ in want]
    for (_, got, present), (_, arr, here) in zip(cut.columns, want, strict=True):
        assert present.tolist() == here.tolist()
        assert got.to_pylist() == arr.to_pylist()


@pytest.mark.parametrize(
    "value",
    ["null", "None", "nan", "-inf", "Infinity", "true", "1_000", " 2", "1e400", "0x10"]
    + ["17/2353", "25.1K", "45%", "1h02m", "", "+3", ".5", "5.", '"2.5"', 'say "hi"'],
)
def test_a_quoted_value_reads_as_the_line_parser_reads_it(value, small_logs_too):
    # (the JSON path left "null" to the line parser; a value cut at its quotes is read)
    text = bar(0, 30) + "".join(
        clear() + f"{{'loss': '{2 + s / 10:.3g}', 'v': '{value}'}}\n" + bar(s, 30)
        for s in range(1, 31)
    )
    same(RawLog("hf.log", (text + "\n").encode()))


#: Keys and values whose commas, braces and colons a cut at the commas could take for
#: the cells' own (a cell is ``{'key': 'value'`` or `` 'key': 'value'`` or ``...}``).
_TRICKY = st.text(alphabet=list('ab1.,{}: %"') + ["\u00e9", "\u2022"], max_size=6)


@st.composite
def tricky_consoles(draw) -> str:
    """A Trainer's console whose dict lines hold arbitrary keys and values (of
    :data:`_TRICKY`) among the usual ones, each dict written after a clear and before
    a redraw."""
    steps = draw(st.integers(1, 30))
    usual = draw(st.dictionaries(_TRICKY, _TRICKY, min_size=1, max_size=4))
    out = [bar(0, steps)]
    for s in range(1, steps + 1):
        if draw(st.integers(0, 3)) == 0:
            row = draw(st.dictionaries(_TRICKY, _TRICKY, min_size=1, max_size=5))
        else:
            row = dict(usual)
        row["loss"] = f"{2 + s / 100:.4g}"
        out.append(clear() + repr(row) + "\n" + bar(s, steps))
    return "".join(out) + "\n"


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tricky_consoles())
def test_dicts_with_commas_and_braces_read_as_the_line_parser_reads_them(text):
    # (a value or key holding ", " or "': '" or a brace is cut in Python, at its quotes)
    jsonlines.MIN_BYTES, keep = 0, jsonlines.MIN_BYTES
    try:
        same(RawLog("hf.log", text.encode()))
    finally:
        jsonlines.MIN_BYTES = keep


def test_too_many_dicts_of_another_shape_go_to_json(small_logs_too, monkeypatch):
    # (past MAX_ODD_LINES lines cut in Python, the quoted cut gives up: JSON reads them)
    from dflash_diag.logs.fast import quoted

    monkeypatch.setattr(quoted, "MAX_ODD_LINES", 3)
    rng = np.random.default_rng(4)
    text = bar(0, 20) + "".join(
        clear() + record(rng, s, "train").replace("'epoch'", "'a, b'") + bar(s, 20)
        for s in range(1, 21)
    )
    data = (text + "\n").encode()
    got = console.console_records(data)
    assert got is not None and len(got.frame) == 20
    same(RawLog("hf.log", data))


#: What is put into a built console at random: bytes that are no UTF-8, carriage
#: returns and newlines (a bar cut, a line split), and the bytes the fast path tells
#: segments by.
_NOISE = [b"\xff", b"\xe2\x80", b"\r", b"\n", b"%", b"%|", b"{'", b"'", b",", b"}", b" ", b"\t"]


@pytest.mark.slow
@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(consoles(), st.lists(st.tuples(st.floats(0, 1), st.sampled_from(_NOISE)), max_size=4))
def test_damaged_consoles_read_as_the_line_parser_reads_them(text, noise):
    # (a byte put anywhere: the fast path reads the log as the line parser does, or
    # leaves it to it)
    data = text.encode()
    for where, piece in noise:
        at = int(where * len(data))
        data = data[:at] + piece + data[at:]
    jsonlines.MIN_BYTES, keep = 0, jsonlines.MIN_BYTES
    try:
        same(RawLog("hf.log", data))
    finally:
        jsonlines.MIN_BYTES = keep


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=40), st.integers(0, 2**32 - 1))
def test_a_stretch_of_dict_lines_is_placed_as_a_slice_as_an_index_places_it(chosen, seed):
    # (the cut's codes put at their lines: a slice where the lines are consecutive)
    from dflash_diag.logs.fast import quoted

    rng = np.random.default_rng(seed)
    if seed % 2:  # (a stretch: every line from one on, as a Trainer's dicts but the last)
        lo = int(rng.integers(0, len(chosen)))
        chosen = [
            lo <= i < lo + int(rng.integers(1, len(chosen) - lo + 1)) for i in range(len(chosen))
        ]
    lines = np.flatnonzero(chosen)
    codes = rng.integers(0, 50, len(lines)).astype(np.int32)
    base = int(rng.integers(0, 1000))
    got = np.full(len(chosen), -1, np.int32)
    quoted._place(got, lines, codes, base)
    want = np.full(len(chosen), -1, np.int32)
    want[lines] = codes + base
    assert got.tolist() == want.tolist()
