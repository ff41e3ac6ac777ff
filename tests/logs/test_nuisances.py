"""Each nuisance of real logs: it neither breaks the reader nor pollutes the table."""

from __future__ import annotations

import gzip
import io
import sys
from pathlib import Path

import pandas as pd
import pytest
from budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.errors import InputError
from dflash_diag.logs import read_log

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
CLEAN = "".join(f"step={s} loss={3 - s / 10:.2f} acc={s * 10}% lr=1e-4\n" for s in range(1, 6))


def table(tmp_path, content: str | bytes, name: str = "run.log", **kw):
    p = tmp_path / name
    if isinstance(content, str):
        content = content.encode()
    p.write_bytes(content)
    return read_log(p, **kw)


def test_clean_reference(tmp_path):
    t = table(tmp_path, CLEAN).table
    assert t["step"].tolist() == [1, 2, 3, 4, 5]
    assert t["acc"].tolist() == [0.1, 0.2, 0.3, 0.4, 0.5]


def test_ansi_codes(tmp_path):
    coloured = CLEAN.replace("step=", "\x1b[1;32mstep\x1b[0m=").replace("loss", "\x1b[33mloss")
    a = table(tmp_path, coloured).table
    pd.testing.assert_frame_equal(a, table(tmp_path, CLEAN, "clean.log").table)
    assert read_log(LOGS / "nemo.log").table["loss"].notna().all()


def test_tqdm_postfix_counts_once_per_step(tmp_path):
    # A bar refreshed several times per step (same counter) and carried into epoch 1.
    refreshes = []
    for epoch in (0, 1):
        for n in (1, 1, 2, 2, 2, 3):
            refreshes.append(
                f"\rTraining Epoch {epoch}:  {n * 33}%|###   | {n}/3 [00:0{n}<00:03,  1.00it/s, "
                f"loss={epoch + n / 10:.2f}, acc={n / 10:.2f}]"
            )
    run = table(tmp_path, "Loading data\n" + "".join(refreshes) + "\n")
    t = run.table.set_index("step")
    assert t.index.tolist() == [1, 2, 3, 4, 5, 6]  # epoch 1 numbered on from epoch 0's total
    assert t.loc[2, "loss"] == 0.2 and t.loc[4, "loss"] == 1.1
    assert t.loc[4, "epoch"] == 1
    assert run.restarts == ()


def test_banners_config_dumps_warnings_tracebacks(tmp_path):
    noise = (
        "=" * 60 + "\n"
        "   My Trainer v1.2   step=0 of the banner is not a metric\n"
        'config: {"lr": 0.0006, "warmup_steps": 300, "step": 5, "loss": 9}\n'
        "2026-03-02 10:00:00 WARNING torch: step=3 loss=99 from a warning\n"
        "/x/y.py:12: UserWarning: step=3 loss=99\n"
        "  warnings.warn(\n"
        "Traceback (most recent call last):\n"
        '  File "t.py", line 1, in <module>\n'
        "    step=3 loss=99\n"
        "ValueError: step=3 loss=99\n"
    )
    run = table(tmp_path, noise + CLEAN)
    t = run.table
    assert t["step"].tolist() == [1, 2, 3, 4, 5]
    assert t["loss"].max() < 3  # nothing from the noise got in
    assert run.skipped["warning"] == 3 and run.skipped["traceback"] == 4


def test_blank_lines(tmp_path):
    spaced = "\n\n" + CLEAN.replace("\n", "\n\n   \n")
    run = table(tmp_path, spaced)
    assert run.table["step"].tolist() == [1, 2, 3, 4, 5]
    assert run.skipped["blank"] == 12


def test_truncated_last_line(tmp_path):
    cut = CLEAN + "step=6 loss=2.40 ac"
    run = table(tmp_path, cut)
    assert run.table["step"].tolist() == [1, 2, 3, 4, 5]
    assert run.skipped == {"truncated": 1}
    # a cut that leaves fewer fields than the line before had is cut too
    run = table(tmp_path, CLEAN + "step=6 loss=2.4", "b.log")
    assert run.table["step"].max() == 5
    # a whole last line without a newline is kept
    run = table(tmp_path, CLEAN + "step=6 loss=2.40 acc=60% lr=1e-4", "c.log")
    assert run.table["step"].max() == 6


def test_non_utf8_bytes(tmp_path):
    run = read_log(LOGS / "nonutf8_truncated.log")
    t = run.table
    assert t["step"].tolist() == [0, 1, 2]
    assert t["loss"].tolist() == [11.0116, 10.9586, 10.8579]
    assert run.skipped["bad_bytes"] == 5 and run.skipped["truncated"] == 1
    latin = table(tmp_path, CLEAN.encode().replace(b"acc", b"acc\xe9", 1))
    assert len(latin.table) == 5


def test_eval_lines_never_overwrite_train_loss(tmp_path):
    lines = CLEAN + "Evaluation | step=5 loss=9.50 acc=1%\n" + "[eval] step=5 | loss 9.25\n"
    t = table(tmp_path, lines).table.set_index("step")
    assert t.loc[5, "loss"] == 2.5
    assert t.loc[5, "eval_loss"] == 9.25  # the later eval line of the same step wins
    assert t.loc[5, "eval_acc"] == 0.01


def test_rich_handler_wrapped_records():
    run = read_log(LOGS / "rich_handler.log")
    t = run.table.set_index("step")
    assert t.index.tolist() == [1, 2, 3]
    assert t.loc[1, "grad_norm"] == 3.21 and t.loc[2, "tokens"] == 60000
    assert t.loc[3, "loss"] == 4.6
    assert run.skipped == {"warning": 1}


def test_crlf_line_ends(tmp_path):
    a = table(tmp_path, CLEAN.replace("\n", "\r\n")).table
    pd.testing.assert_frame_equal(a, table(tmp_path, CLEAN, "clean.log").table)


def test_gzip(tmp_path):
    src = (LOGS / "sample_run.log").read_bytes()
    gz = tmp_path / "sample_run.log.gz"
    gz.write_bytes(gzip.compress(src))
    pd.testing.assert_frame_equal(read_log(gz).table, read_log(LOGS / "sample_run.log").table)
    broken = tmp_path / "broken.gz"
    broken.write_bytes(b"\x1f\x8b" + b"\x00" * 30)
    with pytest.raises(InputError):
        read_log(broken)


def test_stdin(monkeypatch):
    data = (LOGS / "deepspec.log").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    run = read_log("-")
    assert run.path == "-" and len(run.table) == 6


def test_restart_later_values_supersede(tmp_path):
    run = read_log(LOGS / "sample_run.log")
    assert run.restarts == (9,)
    t = run.table.set_index("step")
    assert t.index.tolist() == list(range(1, 14))
    assert t.loc[9, "loss"] == pytest.approx(3.91) and t.loc[8, "loss"] == pytest.approx(4.6)
    # two resumes
    lines = [f"step={s} loss={s}.0" for s in [1, 2, 3, 4, 2, 3, 4, 5, 3, 4, 5, 6]]
    run = table(tmp_path, "\n".join(lines) + "\n")
    assert run.restarts == (2, 3)
    assert run.table["step"].tolist() == [1, 2, 3, 4, 5, 6]


def test_ranks(tmp_path):
    path = LOGS / "torchrun_ranks.log"
    r0 = read_log(path)
    assert r0.ranks == (0, 1) and "rank" not in r0.table
    assert r0.table["grad_norm"].eq(1).all() and r0.skipped["other_rank"] == 4
    r1 = read_log(path, rank=1)
    assert r1.table["grad_norm"].eq(2).all()
    every = read_log(path, rank="all")
    assert every.table[["rank", "step"]].values.tolist() == [
        [r, s] for r in (0, 1) for s in (1, 2, 3, 4)
    ]
    with pytest.raises(InputError) as e:
        read_log(path, rank=5)
    assert "no lines for rank 5; ranks with data: 0, 1" in str(e.value)
    # only rank 3 logged: it is the default
    only = table(tmp_path, "".join(f"[rank3]:step={s} loss=1\n" for s in (1, 2)))
    assert only.ranks == (3,) and len(only.table) == 2


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(
        st.sampled_from(["Warning:", "warnings.warn(", "User", " ", "x", "_", ":", "\t", "W"]),
        max_size=8,
    ).map("".join)
)
def test_the_warning_prefilter_finds_what_the_regex_finds(text):
    from dflash_diag.logs.grammar import WARNING_TEXT, warning_text

    assert warning_text(text) == bool(WARNING_TEXT.search(text))


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(
        st.sampled_from(["dflash", ".train", " | ", ":", "=", "7", "٣", "nan", "Inf", "x", " "]),
        max_size=8,
    ).map("".join)
)
def test_the_logger_check_skips_the_field_regex_only_where_it_cannot_match(text):
    """A logger prefix is kept when it holds a field; the cheap test (no digit, no
    nan/inf: no number) must agree with the regex itself."""
    from dflash_diag.logs.fields import FIELD
    from dflash_diag.logs.lines import holds_field

    assert holds_field(text) == (FIELD.search(text) is not None)
