"""Start-up imports only what runs (DESIGN.md: "``dflash-diag --help`` is instant").

Each case runs the typer app in a fresh interpreter, in-process there, and then lists the
modules that interpreter has imported: ``--help`` and ``parse --help`` import none of the
heavy libraries and none of the analyses, and ``parse LOG`` imports its own command
module only.  How long start-up takes is ``benchmarks/bench_startup.py``'s business; these
assert what is imported, which does not depend on the machine's load.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import COMMANDS, app

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "numpy", "scipy", "matplotlib", "pyarrow")

# Runs `dflash-diag ARGS` in this interpreter, then prints the modules it imported as one
# JSON line after a marker, whatever the command printed before.
RUNNER = """
import json, sys
from dflash_diag.cli import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print("\\n--modules--")
print(json.dumps(sorted(sys.modules)))
sys.exit(code)
"""


@functools.cache
def imported_by(*args: str) -> frozenset[str]:
    """The modules a fresh interpreter holds after running ``dflash-diag ARGS`` (one
    interpreter per ``ARGS``: two tests read ``parse --help``)."""
    out = subprocess.run(
        [sys.executable, "-c", RUNNER, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        # the code under test, not whatever copy is installed
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"},
    )
    assert out.returncode == (0 if args else 2), out.stderr[-2000:]
    assert "--modules--" in out.stdout, out.stdout[-2000:]
    return frozenset(json.loads(out.stdout.rsplit("--modules--", 1)[1]))


def tops(modules: frozenset[str]) -> set[str]:
    """Top-level packages of ``modules``."""
    return {m.split(".")[0] for m in modules}


@pytest.mark.parametrize("args", [["--help"], ["-h"], []], ids=lambda a: " ".join(a) or "none")
def test_the_apps_help_imports_neither_typer_nor_a_command(args):
    """``dflash-diag --help`` is drawn from ``cli/listing.py`` by ``cli/helpscreen.py``
    (rich alone): typer, its click, the app and the command modules stay unimported."""
    modules = imported_by(*args)
    assert "dflash_diag.cli.helpscreen" in modules  # the screen was drawn
    assert tops(modules).isdisjoint({"typer", "click", *HEAVY}), sorted(tops(modules))
    commands = {f"dflash_diag.cli.{m}" for m in COMMANDS.values()}
    assert modules.isdisjoint({"dflash_diag.cli.group", *commands})


def test_version_imports_neither_typer_nor_rich():
    modules = imported_by("--version")
    assert tops(modules).isdisjoint({"typer", "click", "rich", *HEAVY}), sorted(tops(modules))


@pytest.mark.parametrize("args", [["--help"], ["parse", "--help"]], ids=" ".join)
def test_help_imports_no_heavy_library_and_no_analysis(args):
    modules = imported_by(*args)
    assert tops(modules).isdisjoint(HEAVY), sorted(tops(modules) & set(HEAVY))
    ours = {m.split(".")[1] for m in modules if m.startswith("dflash_diag.")}
    # the command modules, the data and option names their help shows; no reader, no
    # analysis, no renderer
    assert ours.isdisjoint({"logs", "manifest", "schedule", "spikes", "reports", "render"}), ours


@pytest.mark.parametrize("args", [["--help"], ["parse", "--help"]], ids=" ".join)
def test_plain_panel_titles_load_no_emoji_table(args):
    """Titles without markup ("Options", "Commands") are drawn as text: rich's emoji
    table, a large dict, is not imported to read them."""
    modules = imported_by(*args)
    assert "dflash_diag.cli.helpscreen" in modules  # the screen was drawn here
    assert "rich._emoji_codes" not in modules


@pytest.mark.parametrize("args", [["--help"], ["parse", "--help"]], ids=" ".join)
def test_help_does_not_build_pydantic_adapters(args):
    """typer coerces options through pydantic; a help option left unset was coerced
    too (a None), which cost ~0.1 s of imports before the help was read."""
    assert "pydantic" not in tops(imported_by(*args))


# Draws every help screen in one interpreter, then prints the modules it has imported.
SCREENS = """
import json, sys
from dflash_diag.cli import COMMANDS, main
for args in [["--help"], *([name, "--help"] for name in COMMANDS)]:
    try:
        main(args)
    except SystemExit:
        pass
print("\\n--modules--")
print(json.dumps(sorted(sys.modules)))
"""


def test_no_help_screen_imports_a_markdown_or_traceback_renderer():
    """The screens are drawn by ``cli/helpscreen.py``: typer's renderer imports rich's
    Markdown (markdown-it, pygments) and traceback renderers, a third of ``--help``.
    (All the screens, one after another in one interpreter: what any of them imported
    is there at the end.)"""
    out = subprocess.run(
        [sys.executable, "-c", SCREENS],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("Usage: dflash-diag") == 1 + len(COMMANDS)
    modules = frozenset(json.loads(out.stdout.rsplit("--modules--", 1)[1]))
    assert "dflash_diag.cli.helpscreen" in modules  # the screens were drawn here
    drawn_by_typer = {"typer.rich_utils", "rich.markdown", "rich.traceback"}
    assert modules.isdisjoint(drawn_by_typer), sorted(modules & drawn_by_typer)
    assert tops(modules).isdisjoint({"markdown_it", "pygments"})


def test_parse_with_string_options_builds_no_pydantic_adapter(tmp_path):
    """Options not given (None) and strings for plain ``str`` options need no coercion:
    typer's pydantic adapters (~0.1 s of imports) are built only for the others."""
    log = tmp_path / "run.log"
    log.write_text("".join(f"step={i} loss={3.0 - i / 10}\n" for i in range(1, 11)))
    modules = imported_by("parse", str(log), "--rank", "0", "--format", "text")
    assert "dflash_diag.reports.parse" in modules  # it did the work
    assert "pydantic" not in tops(modules)


def test_numbers_and_paths_build_no_pydantic_adapter(tmp_path):
    """An int and a path are read as typer reads them (``cli/coercion.py``)."""
    log = tmp_path / "run.log"
    log.write_text("".join(f"step={i} loss={3.0 - i / 10}\n" for i in range(1, 11)))
    to = tmp_path / "table.csv"
    modules = imported_by("parse", str(log), "--run", "1", "--to", str(to))
    assert "dflash_diag.reports.parse" in modules  # it did the work
    assert "pydantic" not in tops(modules)
    assert to.read_text().startswith("step,")


def test_spikes_with_its_choices_left_at_their_defaults_builds_no_pydantic_adapter(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("".join(f"step={i} loss={3.0 - i / 100}\n" for i in range(1, 80)))
    modules = imported_by("spikes", str(log), "--window", "20", "--json")
    assert "dflash_diag.reports.spikes" in modules  # it did the work
    assert "pydantic" not in tops(modules)


def test_options_that_need_coercion_still_get_it(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("".join(f"step={i} loss={3.0 - i / 10}\n" for i in range(1, 11)))
    to = tmp_path / "table.csv"
    result = CliRunner().invoke(app, ["parse", str(log), "--run", "1", "--to", str(to)])
    assert result.exit_code == 0, result.output
    assert to.read_text().startswith("step,")  # a Path made of the string, and written
    result = CliRunner().invoke(app, ["parse", str(log), "--run", "one"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and "--run" in result.stderr


def test_parse_imports_its_command_module_only(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("".join(f"step={i} loss={3.0 - i / 10}\n" for i in range(1, 11)))
    modules = imported_by("parse", str(log))
    assert "dflash_diag.reports.parse" in modules  # it did the work
    others = {f"dflash_diag.cli.{m}" for name, m in COMMANDS.items() if name != "parse"}
    assert modules.isdisjoint(others), sorted(modules & others)
    assert tops(modules).isdisjoint({"scipy", "matplotlib"})


def test_help_lists_every_command_in_order():
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0
    panel = result.stdout.split("─ Commands ─", 1)[1].split("╰", 1)[0]
    # a command's row starts with its name; a wrapped description starts with spaces
    listed = [line.split()[1] for line in panel.splitlines() if line[2:3].isalpha()]
    assert listed == list(COMMANDS)


def test_a_misspelt_command_is_still_named_without_loading_any():
    result = CliRunner().invoke(app, ["spike"])
    assert result.exit_code == 2
    assert result.stderr == (
        "error: No such command 'spike'. Did you mean 'spikes'?; see 'dflash-diag --help'\n"
    )


@pytest.mark.parametrize(
    ("given", "command"),
    [(None, "parse"), (None, "samples"), (None, "--debug samples"), (None, "spikes"),
     ("1", "parse"), ("1", "samples"), ("0", "parse"), ("0", "samples")],
)  # fmt: skip
def test_the_command_turns_numpy_huge_pages_off_unless_told(given, command, tmp_path):
    """numpy's ``NUMPY_MADVISE_HUGEPAGE`` is 0 in a command's process (first touches of
    huge pages can compact memory on the spot), unless the environment sets it; the
    ``samples`` and ``spikes`` commands leave numpy's default (their arrays are filled
    over many passes, where huge pages save more than their first touches cost)."""
    log = tmp_path / "run.log"
    log.write_text("".join(f"step={i} loss={3.0 - i / 10}\n" for i in range(1, 11)))
    code = (
        "import os, sys\n"
        "from dflash_diag.cli import main\n"
        "try:\n    main(sys.argv[1:])\n"
        "except SystemExit:\n    pass\n"
        "print(repr(os.environ.get('NUMPY_MADVISE_HUGEPAGE')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if given is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = given
    out = subprocess.run(
        [sys.executable, "-c", code, *command.split(), str(log)],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    samples = command.endswith("samples")  # (refused without batches: exit 2)
    assert samples or out.returncode == 0, out.stderr[-2000:]
    default = None if samples or command == "spikes" else "0"
    assert out.stdout.strip().splitlines()[-1] == repr(given or default)
