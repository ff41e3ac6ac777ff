"""Strings from files and names reach the terminal printable: an ESC in a category, a
TOML key, a path or a label is shown as ``\\x1b``, never sent; and one-line errors stay
one short line however big the input is."""

from __future__ import annotations

import io
import shutil
import warnings
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.printable import PrintableConsole, printable

REAL = Path(__file__).parents[1] / "data" / "real_run"
runner = CliRunner()
#: OSC 52 (write the clipboard), clear the screen, a one-byte CSI, a bidi override.
NASTY = "\x1b]52;c;ZXZpbA==\x07\x1b[2J\x9b2J\u202e"


@pytest.mark.slow
@given(st.text())
def test_printable_leaves_no_control_character(text):
    out = printable(text)
    assert not any(ord(c) < 32 and c not in "\t\n" for c in out)
    assert not any(0x7F <= ord(c) <= 0x9F for c in out)
    assert printable(out) == out  # (made visible once, it stays as it is)


def test_the_console_keeps_its_own_styles_and_shows_the_data_escapes():
    buf = io.StringIO()
    console = PrintableConsole(
        file=buf, force_terminal=True, color_system="standard", highlight=False
    )
    console.print("[red]bad[/red] " + NASTY)
    out = buf.getvalue()
    assert "\x1b[31m" in out  # rich's colour
    assert "\x1b]" not in out and "\x1b[2J" not in out and "\x9b" not in out
    assert "\\x1b]52;c;ZXZpbA==" in out and "\\u202e" in out


def test_an_unknown_toml_key_with_escapes_reaches_stderr_printable(tmp_path):
    cfg = tmp_path / "c.toml"
    escaped = "".join(f"\\u{ord(c):04x}" for c in NASTY)  # (TOML's escapes: a real ESC)
    cfg.write_text(f'[schedule]\n"k{escaped}" = 1\n', encoding="utf-8")
    shutil.copy(REAL / "run.log", tmp_path / "run.log")
    result = runner.invoke(app, ["spikes", str(tmp_path / "run.log"), "--config", str(cfg)])
    assert result.exit_code == 2
    assert "\x1b" not in result.stderr and "\\x1b" in result.stderr


def test_a_file_name_with_escapes_reaches_stderr_printable(tmp_path):
    result = runner.invoke(app, ["parse", str(tmp_path / f"run{NASTY}.log")])
    assert result.exit_code == 2
    assert "\x1b" not in result.stderr and "\\x1b]52" in result.stderr


def test_manifest_categories_with_escapes_reach_stdout_printable(tmp_path, monkeypatch):
    import pandas as pd

    monkeypatch.chdir(tmp_path)
    n = 64
    pd.DataFrame(
        {
            "input_ids": [[1] * (10 + i) for i in range(n)],
            "source": [f"c{i % 2}{NASTY}" for i in range(n)],
        }
    ).to_parquet("data.parquet")
    result = runner.invoke(app, ["manifest", "data.parquet", "--to", "m.csv"])
    assert result.exit_code == 0, result.output
    assert "\\x1b]52" in result.stdout and "\x1b" not in result.stdout


@pytest.mark.slow
def test_a_metric_not_in_a_log_of_3000_columns_is_one_short_line(tmp_path):
    header = ",".join(["step", "loss"] + [f"col_{k:04d}" for k in range(3000)])
    rows = "\n".join(",".join([str(s), "1.0"] + ["0"] * 3000) for s in range(1, 40))
    (tmp_path / "wide.csv").write_text(header + "\n" + rows + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = runner.invoke(app, ["spikes", str(tmp_path / "wide.csv"), "--metric", "nope"])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.stderr[:500]
    assert len(lines[0]) <= 300 and "more" in lines[0]


def test_parse_of_a_wide_log_prints_no_pandas_warning(tmp_path):
    header = ",".join(["step", "loss"] + [f"col_{k:03d}" for k in range(150)])
    rows = "\n".join(",".join([str(s), "1.0"] + ["0.5"] * 150) for s in range(1, 30))
    (tmp_path / "wide.csv").write_text(header + "\n" + rows + "\n")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        result = runner.invoke(app, ["parse", str(tmp_path / "wide.csv")])
    assert result.exit_code == 0, result.output
    assert not [w for w in said if "fragmented" in str(w.message)]
    assert "PerformanceWarning" not in result.stderr and result.stderr == ""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["label", "file"])
def test_dollars_in_a_label_or_file_name_do_not_crash_the_plot(tmp_path, where):
    name = "run_$x^{$.log" if where == "file" else "run.log"
    shutil.copy(REAL / "run.log", tmp_path / name)
    args = ["spikes", str(tmp_path / name), "--plot", str(tmp_path / "p.svg")]
    if where == "label":
        args += ["--label", "a $x^{$ label"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "p.svg").stat().st_size > 0


@pytest.mark.slow
def test_the_html_page_and_its_plot_hold_no_control_character_from_a_name(tmp_path):
    """The HTML edge filters as the terminal's does: the text fold, the header and the
    SVG plot (its text comments, its glyphs) show a file name's ESC as ``\\x1b``."""
    import re

    import pandas as pd

    n = 200
    name = tmp_path / f"m{NASTY}.parquet"
    pd.DataFrame({"length": [50 + (i * 37) % 900 for i in range(n)]}).to_parquet(name)
    page = tmp_path / "report.html"
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        result = runner.invoke(app, ["batches", str(name), "--html", str(page)])
    assert result.exit_code == 0, result.output
    text = page.read_text(encoding="utf-8")
    assert re.findall("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", text) == []
    shown = "m\\x1b]52;c;ZXZpbA=="  # (rich drops the BEL itself; the rest is shown)
    fold = text[text.index("<pre>") : text.index("</pre>")]
    svg = text[text.index("<svg") : text.index("</svg>")]
    assert shown in fold and shown in svg and shown in text[: text.index("<body>")]
    assert [str(w.message) for w in said if "Glyph" in str(w.message)] == []
