"""The vectorised fast path gives exactly the general parser's table."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pandas as pd
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.errors import InputError
from dflash_diag.logs.fast import lineshape as fastpath
from dflash_diag.logs.fast import rows
from dflash_diag.logs.io import RawLog, read_bytes
from dflash_diag.logs.text import read_lines

from .equivalence import same

DATA = Path(__file__).resolve().parents[1] / "data"
TEXT_LOGS = [
    DATA / "real_run" / "run.log",
    DATA / "real_logs" / "llmc_gpt2_124m_main.log",
    DATA / "real_logs" / "gpt_lab_diffusion_modded_nanogpt_train.log",
    DATA / "real_logs" / "nanogpt_enwik8_char_bpc_wandb_output.log",
    *sorted((DATA / "logs").glob("*.log")),
]


@pytest.fixture(params=["csv", "by_count"])
def eager(request, monkeypatch):
    """Use the fast path on small logs too, read in many byte ranges (threads); each test
    runs twice, ranges split by the CSV reader alone and by delimiter count first."""
    monkeypatch.setattr(fastpath, "FAST_MIN_LINES", 1)
    monkeypatch.setattr(fastpath, "MIN_MATCHES", 1)
    monkeypatch.setattr(fastpath, "PART_BYTES", 3000)
    monkeypatch.setattr(fastpath, "BY_COUNT_SHARE", -1.0 if request.param == "by_count" else 2.0)
    return request.param


@pytest.fixture
def one_template(monkeypatch):
    """The fast path reads the dominant template only (what it leaves is asserted)."""
    monkeypatch.setattr(fastpath, "MAX_TEMPLATES", 1)


@pytest.mark.slow
@pytest.mark.parametrize("path", TEXT_LOGS, ids=lambda p: p.name)
def test_fast_path_equals_general_parser(path, eager):
    same(read_bytes(path))


def _mixed_log(n: int, seed: int) -> bytes:
    """Lines of one template with varying suffixes, nan/inf, noise, a resume, a cut end."""
    rnd = random.Random(seed)
    out = ["== banner ==", "config: {'lr': 6e-4}"]
    step = 0
    for i in range(n):
        step = step - 40 if i == n // 2 else step + 1  # a resume
        loss = rnd.choice([f"{rnd.uniform(0, 9):.4f}", "nan", "inf", f"{rnd.uniform(0, 1):.3e}"])
        tps = rnd.choice([f"{rnd.uniform(1, 99):.1f}K", f"{rnd.uniform(1, 9):.2f}M", "980"])
        acc = f"{rnd.uniform(0, 100):.1f}%"
        out.append(
            f"2026-03-02 14:03:{i % 60:02d},{i % 1000:03d} | INFO | dflash.train | epoch=0 "
            f"step={step}/3000 loss={loss} acc={acc} lr={rnd.uniform(0, 1e-3):.2e} "
            f"grad_norm={rnd.uniform(0, 5):.2f} ntok={rnd.randint(1, 70000)} tok/s={tps}"
        )
        r = rnd.random()
        if r < 0.02:
            out.append("2026-03-02 14:03:11,204 | WARNING | dflash.train | step=1 loss=99 slow")
        elif r < 0.03:
            out += ["Traceback (most recent call last):", '  File "x.py", line 1', "E: step=2"]
        elif r < 0.04:
            out.append(f"2026-03-02 14:03:11,204 | INFO | dflash.eval | eval step={step} loss=1.5")
        elif r < 0.05:
            out.append("")
    return ("\n".join(out) + "\n").encode() + b"2026-03-02 14:03:11,204 | INFO | dflash.tr"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fast_path_on_a_mixed_log(seed, eager, tmp_path):
    p = tmp_path / "mixed.log"
    p.write_bytes(_mixed_log(3000, seed))
    run = same(read_bytes(p))
    assert run.restarts and run.skipped["traceback"] > 0
    assert (run.table["tok_per_s"] >= 980).all()


def test_fast_path_is_used_on_a_large_log(tmp_path):
    p = tmp_path / "big.log"
    p.write_bytes(_mixed_log(fastpath.FAST_MIN_LINES + 10, 3))
    calls = []
    got = fastpath.fast_records(p.read_bytes(), {}, lambda done, total: calls.append((done, total)))
    assert got is not None
    frame, rest = _joined(got)
    assert calls and calls[-1][0] == calls[-1][1] and calls == sorted(calls)
    assert len(frame) > 0.9 * fastpath.FAST_MIN_LINES
    assert len(rest) < 0.1 * fastpath.FAST_MIN_LINES


def test_fast_path_keeps_per_position_and_rank_fields_apart(eager, tmp_path):
    lines = []
    for step in range(1, 400):
        pos = step % 3
        lines.append(f"Train - Step {step} [{step}/999?], position {pos},  Acc: {pos / 10:.2f}")
        for rank in (0, 1):
            lines.append(f"rank={rank} step={step} loss={step / 100 + rank:.2f}")
    p = tmp_path / "positions.log"
    p.write_text("\n".join(lines) + "\n")
    assert fastpath.fast_records(p.read_bytes(), {}) is not None  # the rank lines' template
    run = same(read_bytes(p))
    t = run.table.set_index("step")
    assert t.loc[5, "acc_2"] == 0.2 and t.loc[6, "acc_0"] == 0.0 and t.loc[4, "acc_1"] == 0.1
    assert run.ranks == (0, 1) and t.loc[5, "loss"] == 0.05


def test_fast_path_leaves_per_position_lines_to_the_general_parser(eager, tmp_path):
    lines = [
        f"Eval - Step {s} [{s}/9?], position {pos},  Acc: {pos / 10:.2f}"
        for s in range(1, 300)
        for pos in range(3)
    ]
    p = tmp_path / "eagle3.log"
    p.write_text("\n".join(lines) + "\n")
    t = same(read_bytes(p)).table.set_index("step")
    assert t.loc[7, ["eval_acc_0", "eval_acc_1", "eval_acc_2"]].tolist() == [0.0, 0.1, 0.2]


def _write(tmp_path, lines: list[str], end: str = "\n", name: str = "t.log"):
    p = tmp_path / name
    p.write_bytes((end.join(lines) + end).encode("utf-8"))
    return read_bytes(p)


def _train(i: int, step: int, loss: str = "1.5000", tps: str = "25.1K", acc: str = "87%") -> str:
    return (
        f"2026-03-02 14:03:{i % 60:02d},{i % 1000:03d} | INFO | dflash.train | epoch=0 "
        f"step={step}/3000 loss={loss} acc={acc} lr=6.00e-04 grad_norm=1.25 ntok=60000 "
        f"tok/s={tps} step_time={i % 7 + 0.5}ms"
    )


def _fast(raw) -> tuple[pd.DataFrame, list[tuple[int, str]]] | None:
    """The fast path's records (of all its templates, in line order) and the other lines."""
    return _joined(fastpath.fast_records(raw.data, {}))


def _joined(got):
    if got is None:
        return None
    frames, rest = got
    return pd.concat(frames, ignore_index=True).sort_values("line", ignore_index=True), rest


@pytest.mark.slow
def test_suffix_units_are_read_per_line(eager, tmp_path):
    tps = ["25.1K", "1.2M", "980", "0.5G", "3k", "7.25B"]
    acc = ["87%", "9.5%", "100%", "0%"]
    lines = [_train(i, i + 1, tps=tps[i % 6], acc=acc[i % 4]) for i in range(600)]
    raw = _write(tmp_path, lines)
    assert _fast(raw) is not None and len(_fast(raw)[1]) == 0  # every line on the fast path
    t = same(raw).table
    factor = {"K": 1e3, "M": 1e6, "G": 1e9, "k": 1e3, "B": 1e9}
    want = [float(x[:-1]) * factor[x[-1]] if x[-1] in factor else float(x) for x in tps]
    assert t["tok_per_s"].tolist() == [want[i % 6] for i in range(600)]
    assert t["acc"].tolist() == [float(acc[i % 4][:-1]) * 0.01 for i in range(600)]
    assert t["step_time"].tolist() == [(i % 7 + 0.5) * 1e-3 for i in range(600)]


@pytest.mark.slow
@pytest.mark.parametrize(
    "odd",
    ["nan", "inf", "-inf", "NaN", "+INF", "1.", ".5", "-0", "1e5", "2E-3", "007"],
)
def test_one_field_with_another_number_form(odd, eager, tmp_path):
    lines = [_train(i, i + 1, loss=odd if i % 3 == 0 else f"{i / 100:.4f}") for i in range(300)]
    raw = _write(tmp_path, lines)
    got = _fast(raw)
    assert got is not None and len(got[1]) == 0
    loss = same(raw).table["loss"].tolist()
    assert str(loss[0]) == str(float(odd)) and loss[1] == 0.01


@pytest.mark.parametrize("odd", ["infK", "nanM", "inf%x", "1.2.3", "1e", "--1", "0x10", "1_0"])
def test_a_field_that_is_not_a_number_leaves_the_line_to_the_general_parser(
    odd, eager, one_template, tmp_path
):
    lines = [_train(i, i + 1) for i in range(300)]
    lines[100] = _train(100, 101, tps=odd) if odd.endswith(("K", "M")) else _train(100, 101, odd)
    raw = _write(tmp_path, lines)
    frame, rest = _fast(raw)
    assert [no for no, _ in rest] == [101]
    same(raw)


def _three_shapes() -> list[str]:
    """Train lines, with an evaluation line every 10 and a throughput line every 25."""
    lines = []
    for i in range(900):
        lines.append(_train(i, i + 1))
        if i % 10 == 9:  # evaluation lines: another shape, read by the general parser
            lines.append(
                f"2026-03-02 14:03:00,000 | INFO | dflash.eval | Eval - step={i + 1} loss=2.5"
            )
        if i % 25 == 0:
            lines.append(
                f"2026-03-02 14:03:00,000 | INFO | dflash.train | step={i + 1} tflops=312.5"
            )
    return lines


@pytest.mark.slow
def test_second_template_interleaved(eager, one_template, tmp_path):
    lines = _three_shapes()
    raw = _write(tmp_path, lines)
    frame, rest = _fast(raw)
    assert len(frame) == 900 and len(rest) == len(lines) - 900
    t = same(raw).table.set_index("step")
    assert (
        t.loc[10, "eval_loss"] == 2.5 and t.loc[26, "tflops"] == 312.5 and t.loc[26, "loss"] == 1.5
    )


@pytest.mark.slow
@pytest.mark.parametrize("cut", [False, True])
def test_the_lines_a_template_leaves_are_read_by_their_own_templates(cut, eager, tmp_path):
    """Each shape is a template of its own: every line is read by the fast path, and the
    table is the general parser's (a last line without a newline stays with it)."""
    lines = _three_shapes()
    raw = _write(tmp_path, lines)
    if cut:
        raw = RawLog(raw.path, raw.data[:-1])  # the last line (an eval line) unterminated
    got = fastpath.fast_records(raw.data, {})
    assert got is not None and len(got[0]) == 3
    frame, rest = _joined(got)
    assert [no for no, _ in rest] == ([len(lines)] if cut else [])
    assert frame["line"].tolist() == list(range(1, len(lines) + 1 - cut))
    t = same(raw).table.set_index("step")
    assert t.loc[10, "eval_loss"] == 2.5 and t.loc[26, "tflops"] == 312.5


def test_crlf_line_ends(eager, tmp_path):
    lines = [_train(i, i + 1, loss=f"{i / 7:.4f}") for i in range(400)]
    lines[50] = "Traceback (most recent call last):"
    lines[51] = '  File "train.py", line 3'
    lines[52] = "RuntimeError: step=3 loss=9"
    raw = _write(tmp_path, lines, end="\r\n")
    frame, rest = _fast(raw)
    assert len(rest) == 3
    t = same(raw).table
    assert t["loss"].tolist() == [float(f"{i / 7:.4f}") for i in range(400) if not 50 <= i <= 52]


def test_crlf_and_a_cut_last_line(eager, tmp_path):
    lines = [_train(i, i + 1) for i in range(400)]
    p = tmp_path / "cut.log"
    p.write_bytes(("\r\n".join(lines) + "\r\n").encode() + lines[0][:60].encode())
    assert _fast(read_bytes(p)) is not None
    same(read_bytes(p))


def test_bare_carriage_returns_leave_the_log_to_the_general_parser(eager, tmp_path):
    lines = [_train(i, i + 1) for i in range(300)]
    lines[10] = "Epoch 0:  10%|#    | 10/100 [00:01<00:09]\r" + lines[10]
    raw = _write(tmp_path, lines)
    assert _fast(raw) is None
    same(raw)


def test_ansi_colour_codes_are_stripped_before_the_fast_path(eager, tmp_path):
    lines = [_train(i, i + 1).replace("INFO", "\x1b[32mINFO\x1b[0m") for i in range(300)]
    lines[7] = "\x1b[1;33mWARNING\x1b[0m slow step"
    raw = _write(tmp_path, lines)
    frame, rest = _fast(raw)
    assert len(frame) == 299 and rest == [(8, "WARNING slow step")]
    assert same(raw).table["step"].tolist() == [i + 1 for i in range(300) if i != 7]


@pytest.mark.parametrize(
    "odd",
    [
        "\x1b]0;run 3\x07",  # a terminal title (OSC): it may hold newlines
        "\x1b",  # an escape that starts no code: the general parser keeps it
        "\x1b[",
    ],
)
def test_escapes_the_byte_stripping_does_not_reproduce_leave_the_log_to_the_general_parser(
    odd, eager, tmp_path
):
    lines = [_train(i, i + 1).replace("INFO", "\x1b[32mINFO\x1b[0m") for i in range(300)]
    lines[40] = odd + lines[40]
    raw = _write(tmp_path, lines)
    assert _fast(raw) is None
    same(raw)


def test_a_colour_code_after_the_last_newline(eager, tmp_path):
    lines = [_train(i, i + 1).replace("INFO", "\x1b[32mINFO\x1b[0m") for i in range(300)]
    p = tmp_path / "t.log"
    p.write_bytes(("\n".join(lines) + "\n\x1b[0m").encode())
    raw = read_bytes(p)
    assert _fast(raw) is None  # stripped, the log would end in a newline it does not
    assert same(raw).n_lines == 301


def test_a_value_in_the_first_token_of_the_first_line(eager, tmp_path):
    lines = [f"step={i} loss={i / 8} lr=1e-4" for i in range(1, 400)]
    raw = _write(tmp_path, lines)
    frame, rest = _fast(raw)
    assert len(frame) == 399 and not rest
    assert same(raw).table["loss"].tolist() == [i / 8 for i in range(1, 400)]


def test_non_ascii_text_shifts_byte_offsets(eager, tmp_path):
    lines = [f"épreuve → step={i} perte≈ loss={i / 4} débit={i}K" for i in range(1, 300)]
    raw = _write(tmp_path, lines)
    assert _fast(raw) is not None
    t = same(raw).table
    assert t["loss"].tolist() == [i / 4 for i in range(1, 300)]


@pytest.mark.parametrize(
    "where",
    ["a line of its own", "a line of another shape", "a number", "the fixed text", "the end"],
)
def test_bad_utf8_leaves_the_log_to_the_general_parser(where, eager, tmp_path, monkeypatch):
    reports: list = []  # what would reach stderr as "Exception ignored in ..."
    monkeypatch.setattr(sys, "unraisablehook", reports.append)
    lines = [_train(i, i + 1).encode() for i in range(300)]
    bad = {
        "a line of its own": b"\xff",
        "a line of another shape": b"oops \xfe\xff = more",
        "a number": lines[150].replace(b"loss=1.5000", b"loss=1.5\xff00"),
        "the fixed text": lines[150].replace(b"dflash.train", b"dflash.tr\xe9in"),
        "the end": lines[150] + b" \xc3",
    }[where]
    lines[150:151] = [bad]
    p = tmp_path / "bad.log"
    p.write_bytes(b"\n".join(lines) + b"\n")
    assert _fast(read_bytes(p)) is None
    same(read_bytes(p))
    # pyarrow decodes a line of another shape before the handler sees it: its failure
    # must not be reported
    assert reports == []


def test_only_the_fast_paths_own_decode_reports_are_kept_quiet():
    seen = []
    previous = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        with rows.quiet_decode_errors():

            def other_shape():  # the name of the fast path's invalid-row handler
                pass

            for obj, exc in [
                (other_shape, UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad")),
                (other_shape, ValueError("a bug")),
                (print, UnicodeDecodeError("utf-8", b"\xff", 0, 1, "someone else's")),
            ]:
                report = type("Report", (), {"object": obj, "exc_value": exc})()
                sys.unraisablehook(report)
        after = sys.unraisablehook
    finally:
        sys.unraisablehook = previous
    assert [str(r.exc_value) for r in seen] == [
        "a bug",
        "'utf-8' codec can't decode byte 0xff in position 0: someone else's",
    ]
    assert after == seen.append


def test_template_lines_that_could_end_a_traceback(eager, tmp_path):
    lines = [f"Train: step={i} loss={i / 8}" for i in range(1, 300)]
    lines[100:100] = ["Traceback (most recent call last):", '  File "x.py", line 1']
    raw = _write(tmp_path, lines)
    assert _fast(raw) is None  # the general parser skips line 103 as the traceback's end
    assert 101 not in same(raw).table["step"].tolist()


_MUTATIONS = [
    *["nan", "inf", "1e3", "x", "", " ", "  ", "\t", "=", "|", "é", "\r", "-", "5K", "%"],
    *["0", "9", "/", ":", ",", ".", "e", "K", "\ufeff", "\x00", "=="],
    *["\x1b[0m", "\x1b[1;32m", "\x1b", "\x1b]2;t\x07", "\x1bM"],
]


#: Whole lines put between a log's lines: what a trainer's neighbours print.
_INSERTS = [
    "Traceback (most recent call last):",
    '  File "train.py", line 3, in <module>',
    "    save_checkpoint()",
    "OSError: [Errno 28] No space left on device",
    "WARNING: the tokenizer is slow",
    "  12 34 indented numbers",
    "",
]


def _megatron(i: int) -> str:
    """A line as Megatron-LM's training_log prints it: a leading space, right-aligned
    integers (`{:8d}`, `{:12d}`), `{:.6E}` losses."""
    return (
        f" [2026-03-02 14:{i // 60 % 60:02d}:{i % 60:02d}] iteration {i * 7:8d}/    1000 |"
        f" consumed samples: {i * 7 * 256:12d} | learning rate: {i * 3e-6:.6E} |"
        f" lm loss: {2 + i / 300:.6E} | grad norm: {1 + i / 50:.3f} |"
        f" number of skipped iterations: {i // 150:3d} |"
    )


@pytest.mark.slow
@settings(max_examples=examples(80), deadline=None)
@given(
    edits=st.lists(
        st.tuples(st.integers(0, 199), st.integers(0, 200), st.sampled_from(_MUTATIONS)),
        max_size=12,
    ),
    inserts=st.lists(
        st.tuples(st.integers(0, 199), st.sampled_from(_INSERTS)),
        max_size=4,
    ),
    crlf=st.booleans(),
    part=st.sampled_from([200, 1000, 1 << 24]),
    shape=st.sampled_from(["key=value", "ranked", "megatron"]),
    by_count=st.booleans(),
)
def test_fast_path_equals_general_parser_on_mutated_logs(
    edits, inserts, crlf, part, shape, by_count
):
    if shape == "megatron":
        lines = [_megatron(i + 1) for i in range(200)]
    else:
        lines = [
            (f"[rank{i % 3}]:" if shape == "ranked" else "") + _train(i, i + 1, loss=f"{i / 3:.4f}")
            for i in range(200)
        ]
    for row, col, text in edits:
        line = lines[row]
        lines[row] = line[:col] + text + line[col + 1 :]
    for row, text in sorted(inserts, reverse=True):
        lines.insert(row, text)
    data = (("\r\n" if crlf else "\n").join(lines) + "\n").encode()
    old = fastpath.FAST_MIN_LINES, fastpath.MIN_MATCHES, fastpath.PART_BYTES
    old_share = fastpath.BY_COUNT_SHARE
    fastpath.FAST_MIN_LINES = fastpath.MIN_MATCHES = 1
    fastpath.PART_BYTES = part
    fastpath.BY_COUNT_SHARE = -1.0 if by_count else 2.0
    try:
        raw = RawLog("mutated.log", data)
        try:
            slow = read_lines(raw, fast=False)
        except InputError:
            with pytest.raises(InputError):
                read_lines(raw, fast=True)
            return
        fast = read_lines(raw, fast=True)
    finally:
        fastpath.FAST_MIN_LINES, fastpath.MIN_MATCHES, fastpath.PART_BYTES = old
        fastpath.BY_COUNT_SHARE = old_share
    pd.testing.assert_frame_equal(fast.table, slow.table)
    assert (fast.restarts, fast.ranks, fast.skipped) == (slow.restarts, slow.ranks, slow.skipped)


@pytest.mark.slow
def test_byte_order_marks_before_lines(eager, tmp_path):
    """Before the first line, and (concatenated files) before others, some of which start
    a range the CSV reader is given (it drops a mark at the start of its input)."""
    lines = [
        ("\ufeff" if i % 7 == 3 else "") + _train(i, i + 1, loss=f"{i / 9:.4f}") for i in range(300)
    ]
    p = tmp_path / "bom.log"
    p.write_bytes(b"\xef\xbb\xbf" + ("\n".join(lines) + "\n").encode())
    assert _fast(read_bytes(p)) is not None
    assert same(read_bytes(p)).table["step"].iloc[0] == 1


@pytest.mark.parametrize("odd", ["", "=" * 9, " " * 12, "=" * 8, "==== banner ===="])
def test_lines_of_delimiters_or_nothing(odd, eager, tmp_path):
    """A line of only delimiters splits into the template's number of empty columns, as
    an empty line does: its text is looked up in the bytes, not joined back."""
    lines = [_train(i, i + 1) for i in range(300)]
    for at in (0, 7, 150, 299):
        lines.insert(at, odd)
    raw = _write(tmp_path, lines)
    frame, rest = _fast(raw)
    assert [text for _, text in rest] == [odd] * 4
    same(raw)


def test_a_line_of_the_template_with_the_wrong_bytes_between_numbers(eager, tmp_path):
    lines = [_train(i, i + 1) for i in range(300)]
    lines[40] = lines[40].replace(" acc=", " acx=")
    lines[41] = lines[41].replace("| INFO |", "| INFA |")
    lines[42] = lines[42].replace("14:03:", "14:0x:")
    lines[43] = lines[43].replace("/3000", "/30000")
    raw = _write(tmp_path, lines)
    frame, rest = _fast(raw)
    assert [no for no, _ in rest] == [41, 42, 43, 44]
    same(raw)


# --- read_log maps a large plain log and reads it through the fast path -------------


@pytest.mark.slow
def test_read_log_maps_a_large_log_without_copying_it(eager, tmp_path, monkeypatch):
    from dflash_diag.logs import io, read_log

    p = tmp_path / "mixed.log"
    p.write_bytes(_mixed_log(3000, 5))
    want = read_lines(read_bytes(p), fast=False)

    def no_copy(path):
        raise AssertionError("the mapped fast path should have read this log")

    monkeypatch.setattr(io, "read_bytes", no_copy)
    got = read_log(p)
    pd.testing.assert_frame_equal(got.table, want.table)
    assert (got.restarts, got.skipped, got.n_lines, got.format) == (
        want.restarts,
        want.skipped,
        want.n_lines,
        want.format,
    )


@pytest.mark.parametrize("kind", ["gzip", "json", "ansi"])
def test_read_log_falls_back_when_the_mapped_path_does_not_apply(kind, eager, tmp_path):
    import gzip
    import json

    from dflash_diag.logs import read_log

    lines = [_train(i, i + 1) for i in range(400)]
    if kind == "json":
        lines = [json.dumps({"step": i + 1, "loss": i / 8}) for i in range(400)]
    if kind == "ansi":
        lines = [x.replace("INFO", "\x1b[32mINFO\x1b[0m") for x in lines]
    data = ("\n".join(lines) + "\n").encode()
    p = tmp_path / "run.log"
    p.write_bytes(gzip.compress(data) if kind == "gzip" else data)
    got = read_log(p)
    assert got.table["step"].tolist() == list(range(1, 401))
    assert got.format == ("jsonl" if kind == "json" else "text")


def test_a_forced_text_format_still_refuses_a_binary_file(eager, tmp_path):
    from dflash_diag.logs import read_log

    p = tmp_path / "lengths.parquet"
    p.write_bytes(b"PAR1" + b"\x00" * 400_000)
    with pytest.raises(InputError, match="Parquet"):
        read_log(p, format="text")


@pytest.mark.slow
@pytest.mark.parametrize(
    "prefix",
    ["[default{r}]:", "[rank{r}]: ", "[RANK {r}] ", "rank {r} | ", "[rank {r}/8]: "],
)
def test_rank_prefixed_lines_take_the_fast_path(prefix, eager, tmp_path):
    """torchrun's `--tee` and `[rankN]:` prefixes: the rank is read per line as a number,
    so every rank's lines fit one template."""
    lines = []
    for step in range(1, 201):
        for r in (0, 1, 3):
            lines.append(prefix.format(r=r) + _train(step, step, loss=f"{step / 50 + r:.4f}"))
    lines[30] = lines[30].replace("[default", "[defaulx").replace("rank", "rang")
    raw = _write(tmp_path, lines)
    frame, rest = _fast(raw)
    assert len(rest) <= 1 and sorted(set(frame["rank"])) == [0.0, 1.0, 3.0]
    fast = read_lines(raw, fast=True, rank="all")
    slow = read_lines(raw, fast=False, rank="all")
    pd.testing.assert_frame_equal(fast.table, slow.table)
    assert fast.ranks == slow.ranks == (0, 1, 3)
    assert same(raw).table["loss"].iloc[9] == 10 / 50


@pytest.mark.parametrize("odd", ["+1", "1.", "01", "1e0", "nan", "-1", "x"])
def test_a_rank_prefix_number_is_read_only_as_the_general_parser_reads_it(
    odd, eager, one_template, tmp_path
):
    lines = [f"[rank{step % 2}]:" + _train(step, step) for step in range(1, 301)]
    lines[100] = f"[rank{odd}]:" + _train(101, 101)
    raw = _write(tmp_path, lines)
    frame, rest = _fast(raw)
    assert [no for no, _ in rest] == ([] if odd == "01" else [101])
    fast = read_lines(raw, fast=True, rank="all")
    slow = read_lines(raw, fast=False, rank="all")
    pd.testing.assert_frame_equal(fast.table, slow.table)
    assert (fast.ranks, fast.skipped) == (slow.ranks, slow.skipped)


def test_a_rank_prefix_of_one_width_that_is_no_integer_is_not_a_rank(eager, tmp_path):
    """Byte ranges whose every line has `[rank2.5]:` (one width, so one layout): the
    general parser reads only digits as a rank, and so must the fast path."""
    lines = [f"[rank{1 if step <= 200 else 2.5}]:" + _train(step, step) for step in range(1, 301)]
    raw = _write(tmp_path, lines)
    fast = read_lines(raw, fast=True, rank="all")
    slow = read_lines(raw, fast=False, rank="all")
    pd.testing.assert_frame_equal(fast.table, slow.table)
    assert (fast.ranks, fast.skipped) == (slow.ranks, slow.skipped)


@pytest.mark.slow
def test_a_line_longer_than_the_csv_readers_block(eager, tmp_path):
    """A config dump of over 1 MiB on one line: that range is split in one block."""
    lines = [_train(i, i + 1) for i in range(300)]
    lines[150] = "config: {'notes': '" + "x" * (1 << 21) + "'}"
    raw = _write(tmp_path, lines)
    frame, rest = _fast(raw)
    assert [no for no, _ in rest] == [151] and len(frame) == 299
    same(raw)


@pytest.mark.slow
def test_fixed_text_holding_a_number_of_another_width_is_another_template(eager, tmp_path):
    """SpecForge repeats the step in a bracket: `Step 50 [50/187500?]`.  Each width of
    that number is a template of its own, the most common first (the first line's alone
    would fit too few lines for the fast path), then the others."""
    lines = [
        f"02/14/2026 10:21:05 - INFO - specforge.utils - Train - Step {i} [{i}/187500?], "
        f"Loss: {6 - i / 1000:.4f}, Acc: {i / 2000:.4f}"
        for i in range(1, 1200)
    ]
    raw = _write(tmp_path, lines)
    frames, rest = fastpath.fast_records(raw.data, {})
    assert [len(f) for f in frames] == [900, 200, 90, 9] and not rest
    assert same(raw).table["step"].tolist() == list(range(1, 1200))


@pytest.mark.slow
def test_megatron_lines_with_right_aligned_numbers_take_the_fast_path(eager, tmp_path):
    lines = [_megatron(i) for i in range(1, 400)]  # line k: iteration 7 k

    def pad(k: int, new: str) -> None:
        old = f"iteration {7 * k:8d}/"
        assert old in lines[k - 1]
        lines[k - 1] = lines[k - 1].replace(old, new)

    pad(50, "iteration 350/")  # less padding than the others
    pad(60, "iteration\t     420/")  # a tab is no padding
    pad(70, "iteration 123456789/")  # wider than the field
    raw = _write(tmp_path, lines)
    frame, rest = _fast(raw)
    assert [no for no, _ in rest] == [60]  # (the general parser's)
    t = same(raw).table.set_index("step")
    assert t.loc[350, "consumed_samples"] == 50 * 7 * 256 and 123456789 in t.index
    assert t.loc[7, "consumed_samples"] == 7 * 256 and t.loc[7, "loss"] == float("2.003333E+00")
