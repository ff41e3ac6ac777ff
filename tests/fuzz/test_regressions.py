"""Every class of crash the fuzzer found (issue 17), each with its smallest input.

Each input used to end in something other than the one-line InputError or a good
result: a SIGSEGV, a RecursionError, an OverflowError, a MemoryError, a numpy warning on
stderr, a wrapped negative length.  Now it is a clean error naming the file (and the key,
for a config) or a read that keeps RunLog's promises.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.data import ScheduleParams
from dflash_diag.errors import InputError
from dflash_diag.logs import read_log
from dflash_diag.manifest import read_manifest
from dflash_diag.schedule import replay
from dflash_diag.schedule.config import resolve_schedule

from .mutate import npy_header

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def one_line_error(path: Path, call) -> str:
    """The message of the InputError ``call()`` raises: one line, naming ``path``."""
    with pytest.raises(InputError) as info:
        call()
    text = str(info.value)
    assert "\n" not in text and text.startswith(str(path)), text
    assert len(text) - len(str(path)) <= 300
    return text


def json_lines(n: int, deep_line: bytes | None = None, at: int = 0) -> bytes:
    lines = [b'{"step": %d, "loss": %.2f}' % (i, 2 + i / n) for i in range(1, n + 1)]
    if deep_line is not None:
        lines[at] = deep_line
    return b"\n".join(lines) + b"\n"


# ---------------------------------------------------------------- segfault, recursion


@pytest.mark.slow
def test_json_lines_nested_100000_deep_do_not_kill_the_process(tmp_path):
    # Arrow's JSON reader (the path for logs over 20 kB) recursed once per level in C:
    # SIGSEGV.  Run in a child so a regression fails this test, not the whole session.
    deep = b'{"step": 7, "loss": 1.5, "x": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_000 + b"}"
    log = tmp_path / "metrics.jsonl"
    log.write_bytes(json_lines(2000, deep, at=6))
    code = textwrap.dedent(f"""
        from dflash_diag.logs import read_log
        t = read_log({str(log)!r}).table
        assert len(t) == 1999 and 7 not in set(t["step"]), t
        """)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert child.returncode == 0, child.stderr[-2000:]


@pytest.mark.parametrize("opener", [b"[", b'{"a": '])
def test_json_lines_nested_past_the_recursion_limit_are_skipped_lines(tmp_path, opener):
    # walk() in logs/jsonlines.py and the line parser's flattening recursed per level
    closer = b"]" if opener == b"[" else b"}"
    deep = b'{"step": 3, "loss": 1.5, "x": ' + opener * 1500 + b"1" + closer * 1500 + b"}"
    for n in (10, 2000):  # the line parser, and the Arrow path
        log = tmp_path / f"m{n}.jsonl"
        log.write_bytes(json_lines(n, deep, at=2))
        t = read_log(log).table
        assert len(t) == n - 1 and 3 not in set(t["step"])


def test_deep_trainer_state_is_an_input_error(tmp_path):
    # logs/hf_state.py: json.loads raised RecursionError
    p = tmp_path / "trainer_state.json"
    p.write_bytes(b'{"log_history": [' + b"[" * 5000 + b"]" * 5000 + b"]}")
    assert "nested too deep" in one_line_error(p, lambda: read_log(p))


@pytest.mark.parametrize("name", ["run.log", "metrics.jsonl"])
def test_a_file_of_one_deep_list_is_an_input_error(tmp_path, name):
    # logs/detect.py: json.loads raised RecursionError while choosing the format
    p = tmp_path / name
    p.write_bytes(b"[" * 5000 + b"]" * 5000 + b"\n")
    one_line_error(p, lambda: read_log(p))


# ---------------------------------------------------------------- configs


BAD_CONFIG_VALUES = [
    ("token_budget", "'lots'", "must be a whole number, got 'lots'"),
    ("epochs", '"8"', "must be a whole number, got '8'"),
    ("epochs", "1e308", "must be a whole number, got 1e+308"),
    ("seed", "{a = 1}", "must be a whole number, got {'a': 1}"),
    ("grad_accum", "9223372036854775807", "must be at most 1048576"),
    ("max_batch_size", "'1e3'", "must be a whole number, got '1e3'"),
    ("world_size", "true", "must be a whole number, got True"),
    ("first_step", "-1", "must be 0 or more, got -1"),
    ("strategy", "3", "must be text, got 3"),
    ("buckets", "[0, 1e400]", "not a list of numbers"),
    ("buckets", '"0,1,x"', "not a list of numbers"),
    ("metric_rank", "true", "must be a rank number, 'all' or 'auto', got True"),
    ("manifest", "{}", "must be text, got {}"),
]


@pytest.mark.parametrize("key, value, what", BAD_CONFIG_VALUES)
def test_a_config_value_of_the_wrong_type_or_size_names_the_file_and_key(
    tmp_path, key, value, what
):
    cfg = tmp_path / "dflash-diag.toml"
    cfg.write_text(f"[schedule]\n{key} = {value}\n")
    text = one_line_error(cfg, lambda: resolve_schedule({}, config=cfg))
    assert f"[schedule] {key}" in text and what in text, text


def test_a_config_that_is_not_utf8_is_an_input_error(tmp_path):
    # read_config: UnicodeDecodeError
    cfg = tmp_path / "dflash-diag.toml"
    cfg.write_bytes(b"[schedule]\nseed = 1 # caf\xe9\n")
    assert "not UTF-8" in one_line_error(cfg, lambda: resolve_schedule({}, config=cfg))


def test_unknown_keys_make_a_short_line(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[schedule]\nsede = 1\n" + "".join(f"k{i} = 1\n" for i in range(40)))
    text = one_line_error(cfg, lambda: resolve_schedule({}, config=cfg))
    assert "did you mean seed?" in text


@pytest.mark.parametrize(
    "flag, value",
    [("--grad-accum", "9223372036854775807"), ("--epochs", "1000000"), ("--seed", str(2**64))],
)
def test_the_same_bounds_hold_for_flags(tmp_path, monkeypatch, flag, value):
    monkeypatch.chdir(tmp_path)
    m = tmp_path / "m.csv"
    m.write_text("length\n5\n7\n")
    result = runner.invoke(app, ["batches", str(m), flag, value])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"error: {flag}: must be")


def test_sizes_are_bounded_before_memory_is_asked_for():
    # grad_accum = 2**32 once reached np.arange in replay._positions (32 GiB); epochs
    # = 10**9 the buffer of n x epochs sample ids
    with pytest.raises(InputError, match="--grad-accum: must be at most"):
        ScheduleParams(grad_accum=2**32)
    with pytest.raises(InputError, match="--epochs: must be at most"):
        replay(np.array([3, 1, 2]), ScheduleParams(), epochs=10**9)
    with pytest.raises(InputError, match="--token-budget: must be a whole number"):
        ScheduleParams(token_budget="4096")  # type: ignore[arg-type]


# ---------------------------------------------------------------- manifests


def npy_bytes(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


MANIFESTS = [
    ("empty.npy", b"", "header is damaged"),  # EOFError
    ("cut.npy", npy_bytes(np.arange(4))[:30], "header is damaged"),  # tokenize.TokenError
    ("huge.npy", npy_header("(18446744073709551616,)") + b"\0" * 8, "header says shape"),
    ("short.npy", npy_header("(1000,)") + b"\0" * 8, "the file holds 8 bytes"),
    ("text.npy", npy_bytes(np.array(["12", "\udc80"])), "holds text (dtype <U2)"),
    ("wrap.tsv", b"length\n5\n18446744073709551616\n", "lengths outside 0..1099511627776"),
    ("big.csv", b"length\n5\n" + b"9" * 400 + b"\n", "lengths outside 0..1099511627776"),
    ("neg.jsonl", b'{"length": 5}\n{"length": -3}\n', "negative lengths at rows 1 (-3)"),
    ("ids.csv", b"sample_id,length\n1,5\n9223372036854775808,5\n", "sample ids outside"),
    ("fids.csv", b"sample_id,length\n1,5\n9.223372036854775807e18,6\n", "sample ids outside"),
]


@pytest.mark.parametrize("name, data, what", MANIFESTS, ids=[m[0] for m in MANIFESTS])
def test_damaged_manifests_are_one_line_errors(tmp_path, name, data, what):
    p = tmp_path / name
    p.write_bytes(data)
    text = one_line_error(p, lambda: read_manifest(p))
    assert what in text, text


def test_a_structured_npy_with_text_that_is_not_unicode_reads(tmp_path):
    # pandas' Arrow-backed text refused lone surrogates: ArrowException "Wrapping failed"
    arr = np.zeros(2, dtype=[("length", "<i8"), ("source", "<U2")])
    arr["length"], arr["source"] = [3, 4], ["ok", "\udc80"]
    p = tmp_path / "m.npy"
    p.write_bytes(npy_bytes(arr))
    m = read_manifest(p)
    assert m.lengths.tolist() == [3, 4] and len(m.category_names) == 2


def test_a_parquet_file_with_a_damaged_schema_reads_its_columns(tmp_path):
    # pandas metadata naming a dtype numpy does not know: TypeError in to_pandas
    table = pa.table({"length": [3, 4]}).replace_schema_metadata(
        {
            b"pandas": b'{"columns": [{"name": "length", "numpy_type": "zz", "pandas_type":'
            b' "int64", "metadata": null, "field_name": "length"}], "index_columns": []}'
        }
    )
    p = tmp_path / "m.parquet"
    pq.write_table(table, p)
    assert read_manifest(p).lengths.tolist() == [3, 4]


def test_a_folder_given_as_manifest_says_so(tmp_path):
    d = tmp_path / "manifest.parquet"
    d.mkdir()
    text = one_line_error(d, lambda: read_manifest(d))
    assert "is a folder, not a manifest file" in text


# ---------------------------------------------------------------- logs


def test_a_csv_log_with_an_integer_too_large_for_a_float(tmp_path):
    # logs/csv.py: pandas kept it as a Python int; to_numeric raised OverflowError
    p = tmp_path / "metrics.csv"
    p.write_text("step,loss\n1,2.5\n2," + "1" * 400 + "\n3,2.4\n")
    t = read_log(p).table
    assert t["loss"].tolist() == [2.5, float("inf"), 2.4]


def test_a_json_integer_too_large_for_a_float_is_inf(tmp_path):
    p = tmp_path / "trainer_state.json"
    p.write_text(
        '{"log_history": [{"step": 1, "loss": 1' + "0" * 400 + '}, {"step": 2, "loss": 2}]}'
    )
    assert read_log(p).table["loss"].tolist() == [float("inf"), 2.0]


def test_a_rank_prefix_or_bar_counter_past_any_real_one(tmp_path):
    # an int() of 300 digits reached float() (OverflowError) in the text reader
    p = tmp_path / "run.log"
    big = "1" + "0" * 300
    p.write_text(f"[default{big}]:step=3 loss=2.7\n 10%|#  | {big}/{big} [00:01<00:09, loss=2.5]\n")
    t = read_log(p, rank="all").table
    assert t["step"].tolist() == [3] and t["rank"].tolist() == [0]


def test_no_runtime_warning_from_a_huge_length(tmp_path):
    # manifest.py cast 2**64 to int64: "invalid value encountered in cast" on stderr,
    # then a wrapped negative length; pyproject turns the warning into an error here
    p = tmp_path / "m.tsv"
    p.write_text("length\n18446744073709551616\n")
    text = one_line_error(p, lambda: read_manifest(p))
    assert "-" not in text.split("rows 0")[1]


def test_the_cli_error_for_a_wrapped_length_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "m.tsv"
    p.write_text("length\n18446744073709551616\n")
    result = runner.invoke(app, ["batches", str(p)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr


def test_no_degrees_of_freedom_warning_for_a_schedule_with_no_step():
    # batchstats._category_spread took np.std of no micro-batch: "Degrees of freedom <= 0"
    # on stderr under exit 0 (pyproject makes the warning an error here)
    from dflash_diag.batches.stats import schedule_stats

    r = replay(np.array([308, 2479]), ScheduleParams(world_size=8), categories=["a", "b"])
    assert len(r.steps) == 0
    stats = schedule_stats(r)
    assert stats is not None


def test_a_value_times_its_magnitude_past_a_float_is_inf_quietly(tmp_path):
    # logs/columns.py scaled `1e308K` by 1e3: "overflow encountered in multiply" on stderr
    text = (ROOT / "sample_logs/run.log").read_text()
    first = re.search(r"tok/s=[0-9.]+K", text)
    assert first is not None
    p = tmp_path / "run.log"
    p.write_text(text[: first.start()] + "tok/s=1e308K" + text[first.end() :])
    # recorded, not raised: raised, it would send the read down another path
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        t = read_log(p).table
    assert [str(w.message) for w in seen] == []
    assert np.isinf(t["tok_per_s"]).sum() == 1 and t["tok_per_s"].notna().all()


def test_a_manifest_cell_holding_a_list(tmp_path):
    # manifest.py factorised the cells: "unhashable type: 'list'"
    p = tmp_path / "m.jsonl"
    p.write_text('{"length": 3}\n{"length": [1, 2]}\n')
    assert "non-numbers at rows 1 (a list of 2)" in one_line_error(p, lambda: read_manifest(p))


@settings(max_examples=examples(100), deadline=None)
@given(
    data=st.lists(st.sampled_from([b"{", b"[", b"}", b"\n", b"a", b'"']), max_size=80).map(
        b"".join
    ),
    chunk=st.integers(1, 20),
    limit=st.integers(0, 6),
)
def test_too_nested_counts_brackets_per_line_across_chunks(data, chunk, limit):
    # the guard in front of Arrow's JSON reader: any line with more than `limit`
    # openers, whatever the chunk boundaries
    from dflash_diag.logs.fast import jsonlines

    expected = any(line.count(b"{") + line.count(b"[") > limit for line in data.split(b"\n"))
    old = jsonlines.SCAN_CHUNK
    jsonlines.SCAN_CHUNK = chunk
    try:
        assert jsonlines.too_nested(data, limit) == expected
    finally:
        jsonlines.SCAN_CHUNK = old


@pytest.mark.slow
def test_spikes_on_a_log_of_one_step_prints_no_warning(tmp_path):
    # variance.py took np.nanvar of no residual: "Degrees of freedom <= 0" on stderr
    # under exit 0 (a child process: the warning as a user would see it)
    (tmp_path / "run.log").write_text("epoch=0 step=100 loss=2.4000 acc=0.4100 lr=0.0006\n")
    for name in ("dflash-diag.toml", "manifest.parquet"):
        (tmp_path / name).write_bytes((ROOT / "sample_logs" / name).read_bytes())
    child = subprocess.run(
        [sys.executable, "-m", "dflash_diag", "spikes", "run.log", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.returncode == 0 and child.stderr == "", child.stderr[-1500:]
    assert json.loads(child.stdout)["variance"]["metric_var"] is None


def test_a_grad_norm_whose_square_overflows_is_left_out_quietly():
    # variance.noise_scale squared 1e200: "overflow encountered in square" on stderr
    from dflash_diag.spikes.variance import noise_scale

    rng = np.random.default_rng(0)
    b = rng.uniform(1000, 4000, 400)
    g = np.sqrt(2.0 + 6000.0 / b)
    g[7] = 1e200
    assert round(noise_scale(g, b).b_simple) == round(
        noise_scale(np.delete(g, 7), np.delete(b, 7)).b_simple
    )


def test_category_bytes_that_are_not_utf8(tmp_path):
    # manifest._factorize: str() of numpy bytes raised UnicodeDecodeError
    arr = np.zeros(2, dtype=[("length", "<i8"), ("source", "S3")])
    arr["length"], arr["source"] = [3, 4], [b"ok", b"\xff\xfe"]
    p = tmp_path / "m.npy"
    p.write_bytes(npy_bytes(arr))
    assert read_manifest(p).category_names == ("ok", "\ufffd\ufffd")


def test_a_wandb_export_of_two_long_run_names_is_a_short_line(tmp_path):
    # logs/csv.py named the runs whole: a 400-character error line
    long = "drafter-v1" + "0" * 300
    p = tmp_path / "wandb_export.csv"
    p.write_text(f'"Step","{long} - train/loss","other - train/loss"\n1,2.5,2.4\n2,2.4,2.3\n')
    assert "2 runs in one export" in one_line_error(p, lambda: read_log(p))


def test_category_text_past_unicode(tmp_path):
    # a .npy text field holding U+BE0000: pandas kept it, Arrow could not decode it later
    arr = np.zeros(2, dtype=[("length", "<i8"), ("source", "<U4")])
    arr["length"] = [3, 4]
    raw = arr.view(np.uint8).copy()
    p = tmp_path / "m.npy"
    source = raw.reshape(2, -1)[:, 8:].copy().view(np.uint32)
    source[1, 0] = 0x00BE0000
    raw.reshape(2, -1)[:, 8:] = source.view(np.uint8)
    p.write_bytes(npy_bytes(raw.view(arr.dtype)))
    assert read_manifest(p).category_names == ("", "\ufffd")


def test_a_seed_search_over_a_huge_range_is_refused_at_once():
    # (it would replay every seed: a hang, not an answer)
    result = CliRunner().invoke(
        app,
        ["batches", str(ROOT / "sample_logs/manifest.parquet"), "--search-seed", "0..99999999999"],
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --search-seed: 100000000000 seeds is more than")


def test_a_jsonl_manifest_key_that_is_not_utf8_is_one_error_line(tmp_path):
    # Arrow's JSON reader keeps the key's bytes; decoding the schema's names raised
    # UnicodeDecodeError (found by benchmarks/fuzz.py --n 10000 --seed 0, manifest:5641)
    path = tmp_path / "manifest.jsonl"
    path.write_bytes(b'{"\xd7":NaN}{"":8}')
    result = CliRunner().invoke(app, ["batches", str(path)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {path}: ") and result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "row", ["1," + "\t" * 40_000 + "2.5", "1," + "," * 60_000 + "2.5"], ids=["tabs", "commas"]
)
def test_a_csv_row_of_a_long_separator_run_reads_in_linear_time(tmp_path, row):
    """Issue 27's hang "in numeric_column" (found again by the ``runs`` safety class): a
    first row longer than the header made pandas index the table by its leading cells (a
    MultiIndex of 60,000 levels, 86 s), and a run of tabs took the printed-NaN regex
    O(n^2) (41 s for 40,000).  A 120 KB file reads in well under a second."""
    from dflash_diag.logs import read_log

    from .safety import _within

    path = tmp_path / "metrics.csv"
    path.write_text("step,loss\n" + row + "\n2,2.4\n3,2.3\n")
    assert _within(5.0, lambda: read_log(path), InputError) != "hang"


@pytest.mark.parametrize("command", ["spikes", "samples", "watch", "parse"])
@pytest.mark.parametrize("folder", [".", "..", "/"])
def test_a_folder_with_no_name_as_the_log_is_one_error_line(command, folder, tmp_path, monkeypatch):
    # record.find_recording: Path(".").with_suffix raised ValueError (an internal error)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    args = [command, folder] + (["--timeout", "1"] if command == "watch" else [])
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
