"""``--html``: one self-contained page per command, checked in a real headless Chromium.

The browser tests run wherever Chromium is installed and always under CI (``CI`` set;
.ci/run installs it): they are skipped only on a machine without Chromium outside CI.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

# CLI runs on the sample logs, seconds each: CI runs them, the local loop does not
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"),
    reason="chromium is not installed (CI installs it and runs these tests)",
)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    got = subprocess.run(
        [sys.executable, "-m", "dflash_diag", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "110"},
    )
    assert got.returncode == 0, got.stderr
    return got


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, object]]:
    """The three sample reports, written by the commands as a user would (with --json,
    whose document says what the page must show)."""
    out = tmp_path_factory.mktemp("html")
    made: dict[str, tuple[Path, object]] = {}
    for name, args in {
        "spikes": ["spikes", "sample_logs/run.log"],
        "compare": ["compare", "sample_logs/v1.log", "sample_logs/run.log", "--at", "349"],
        "batches": [
            "batches",
            "sample_logs/manifest.parquet",
            "--config",
            "sample_logs/dflash-diag.toml",
            "--compare",
            "sorted-greedy,bucketed,random",
        ],
    }.items():
        page = out / f"{name}.html"
        got = _run(*args, "--html", str(page), "--json")
        made[name] = (page, json.loads(got.stdout))
    return made


@pytest.mark.parametrize("name", ["spikes", "compare", "batches"])
def test_the_page_names_nothing_on_a_network(pages, name):
    text = pages[name][0].read_text(encoding="utf-8")
    assert not re.findall(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", text, flags=re.I)
    assert not re.search(r"@import|url\(\s*['\"]?(?:https?:)?//", text, flags=re.I)
    assert "<svg" in text and "<style>" in text


class _Dom(HTMLParser):
    """Collects the elements a reader sees: each spike section's id, classes and text;
    the svg elements; the title."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, dict[str, object]] = {}
        self.svgs = 0
        self.title = ""
        self._open: list[str] = []
        self._section: str | None = None
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "svg":
            self.svgs += 1
        if tag == "title":
            self._in_title = True
        if tag == "section" and a.get("id"):
            self._section = str(a["id"])
            self.sections[self._section] = {"class": str(a.get("class")).split(), "text": ""}

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self._section = None
        if tag == "title":
            self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        if self._section is not None:
            sec = self.sections[self._section]
            sec["text"] = str(sec["text"]) + " " + data


def _chromium(page: Path, tmp_path: Path) -> tuple[str, list[dict[str, object]]]:
    """Open ``page`` in headless Chromium with every host unresolvable; returns the DOM
    after load and the URL requests of the net log that came from the page (those with
    an initiator: Chromium's own background requests have none, "not an origin")."""
    assert CHROMIUM is not None, "CI must install chromium (.ci/run does)"
    net = tmp_path / f"{page.stem}.netlog.json"
    got = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-extensions",
            "--disable-default-apps",
            "--disable-features=NetworkTimeServiceQuerying",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--log-net-log={net}",
            "--dump-dom",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr[-2000:]
    log = json.loads(net.read_text(encoding="utf-8"))
    types = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    requests = [
        e["params"]
        for e in log["events"]
        if types.get(e["type"]) == "URL_REQUEST_START_JOB"
        and "url" in e.get("params", {})
        and e["params"].get("initiator") != "not an origin"
    ]
    return got.stdout, requests


@needs_chromium
def test_the_net_log_catches_a_page_that_fetches(tmp_path):
    # The control: without it, "no requests" could mean the check sees nothing.
    page = tmp_path / "fetches.html"
    page.write_text(
        "<html><body><img src='https://example.com/x.png'>"
        "<link rel=stylesheet href='http://cdn.example.org/a.css'></body></html>"
    )
    _, requests = _chromium(page, tmp_path)
    assert {r["url"] for r in requests} == {
        "https://example.com/x.png",
        "http://cdn.example.org/a.css",
    }


@needs_chromium
def test_spikes_page_in_a_browser_shows_254_and_258_with_their_samples(pages, tmp_path):
    page, doc = pages["spikes"]
    dom, requests = _chromium(page, tmp_path)
    assert requests == [], f"the page requested {[r['url'] for r in requests]}"
    seen = _Dom()
    seen.feed(dom)
    assert seen.title.startswith("dflash-diag spikes")
    assert seen.svgs >= 1
    by_step = {s["step"]: s for s in doc["spikes"]}
    for step in (254, 258):
        section = seen.sections[f"step-{step}"]
        assert "composition" in section["class"]
        assert re.search(rf"step {step}:\s+composition", str(section["text"]))
        ids = [i for b in by_step[step]["batches"] for i in b["sample_ids"]]
        assert ids, "the report has the batch's sample ids"
        for i in ids[:8]:
            assert re.search(rf"\b{i}\b", str(section["text"])), (step, i)
    # every spike of the report has its section
    assert {f"step-{s['step']}" for s in doc["spikes"]} <= set(seen.sections)


@needs_chromium
@pytest.mark.parametrize("name", ["compare", "batches"])
def test_compare_and_batches_pages_in_a_browser(pages, name, tmp_path):
    page, doc = pages[name]
    dom, requests = _chromium(page, tmp_path)
    assert requests == [], f"the page requested {[r['url'] for r in requests]}"
    seen = _Dom()
    seen.feed(dom)
    assert seen.title.startswith(f"dflash-diag {name}")
    assert seen.svgs >= 1
    if name == "compare":
        for m in doc["metrics"].values():
            assert m["sentence"] in html.unescape(dom)
    else:
        for st in doc["strategies"]:
            assert f'<td class="l">{st["strategy"]}</td>' in dom


def test_html_needs_an_html_suffix(tmp_path):
    got = subprocess.run(
        [sys.executable, "-m", "dflash_diag", "spikes", "sample_logs/run.log"]
        + ["--html", str(tmp_path / "r.txt")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert got.returncode == 2
    assert "cannot tell the report format" in got.stderr
