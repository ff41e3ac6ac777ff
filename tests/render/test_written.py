"""Every command says the files it wrote; the HTML holds every sample id; compare's page
says each answer once and names the runs in its title."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "args",
    [
        ["compare", "sample_logs/v1.log", "sample_logs/run.log", "--at", "349"],
        ["batches", "sample_logs/manifest.parquet", "--config", "sample_logs/dflash-diag.toml"],
    ],
    ids=["compare", "batches"],
)
def test_the_files_written_are_said(args, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    plot, html = tmp_path / "p.png", tmp_path / "r.html"
    result = CliRunner().invoke(app, [*args, "--plot", str(plot), "--html", str(html)])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"plot written to {plot}" in lines and f"report written to {html}" in lines
    assert plot.stat().st_size > 0 and html.stat().st_size > 0


def test_the_html_holds_every_sample_id_and_compare_says_each_answer_once(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    page = tmp_path / "s.html"
    args = ["spikes", "sample_logs/run.log", "--html", str(page)]
    assert CliRunner().invoke(app, args).exit_code == 0
    text = page.read_text()
    # step 1999's batch holds 42 samples: its table lists every one of them, none elided
    section = text[text.index("id='step-1999'") :]
    section = section[: section.index("</section>")]
    cells = re.findall(r"<td[^>]*>([0-9, ]+)</td>", section)
    assert max(len(c.split(", ")) for c in cells) == 42
    cmp = tmp_path / "c.html"
    args = ["compare", "sample_logs/v1.log", "sample_logs/run.log", "--at", "349"]
    assert CliRunner().invoke(app, [*args, "--html", str(cmp)]).exit_code == 0
    body = cmp.read_text()
    summary = body[body.index("<h2>Summary</h2>") : body.index("<h2>Plot</h2>")]
    # each --at answer is said once (it was said in the metric's sentence, then again)
    answers = re.findall(r"At step 349 it is [^:]*:", summary)
    assert len(answers) == 3 and len(set(answers)) == 3
    title = re.search(r"<title>([^<]*)</title>", body).group(1)
    assert title == "dflash-diag compare: run against v1"
