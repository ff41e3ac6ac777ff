"""The reader is layered by idea (issue 12): each module of ``dflash_diag.logs`` imports
only modules of lower layers (at module level or inside a function), never a private
name of another module.  A new line format is one grammar entry plus one reader-table
row (:mod:`dflash_diag.logs.formats`).

A module added to the package must be given a layer here, or this test fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "dflash_diag" / "logs"

#: module (dotted, under dflash_diag.logs) -> layer; an import must go to a lower layer.
LAYERS: dict[str, int] = {
    # names and bytes
    "names": 0,
    "io": 0,
    # the grammar of lines (prefixes, tracebacks, RichHandler, progress bars)
    "grammar": 1,
    "bars": 1,
    # the grammar of messages; the table every reader ends with
    "fields": 2,
    "normalise": 2,
    # the general line parser; a JSON document read whole
    "lines": 3,
    "documents": 3,
    # the fast paths, in their own order (each imports the grammar and the line
    # parser, never the readers above them)
    "fast.leftover": 4,
    "fast.rows": 5,
    "fast.template": 5,
    "fast.layout": 6,
    "fast.jsonlines": 6,
    "fast.quoted": 6,
    "fast.segments": 6,
    "fast.columns": 7,
    "fast.console": 7,
    "fast.lineshape": 8,
    "fast": 8,
    # the readers, one per format family
    "text": 9,
    "csv": 9,
    "hf_state": 9,
    "tensorboard": 9,
    "trackers": 9,
    "wandb_run": 9,
    "json_rows": 9,
    # which reader a log needs; the reader table; the entry point
    "detect": 10,
    "formats": 10,
    "": 11,
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(parts)


def _imports(path: Path, name: str | None = None) -> list[tuple[str, list[str], int]]:
    """``(imported module under dflash_diag.logs, names, line)`` per relative import of
    the module at ``path`` (named ``name``, else by its place in the package), at
    module level or inside a function."""
    is_pkg = path.name == "__init__.py"
    name = _module_name(path) if name is None else name
    here = name.split(".") if name else []
    base = here if is_pkg else here[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        up = node.level - 1
        if up > len(base):
            continue  # above dflash_diag.logs (errors, records)
        parts = base[: len(base) - up] + (node.module.split(".") if node.module else [])
        target = ".".join(parts)
        names = [a.name for a in node.names]
        if not node.module:  # `from . import x`: x is a module
            out += [(f"{target}.{a}" if target else a, [], node.lineno) for a in names]
        else:
            out.append((target, names, node.lineno))
    return out


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer():
    assert sorted(_module_name(p) for p in MODULES) == sorted(LAYERS)


@pytest.mark.parametrize("path", MODULES, ids=_module_name)
def test_imports_go_down_only(path):
    name = _module_name(path)
    for target, _, line in _imports(path):
        assert target in LAYERS, f"{name}:{line} imports unknown {target}"
        below = LAYERS[target] < LAYERS[name]
        assert below, f"{name} ({LAYERS[name]}) imports {target} ({LAYERS[target]}), line {line}"


@pytest.mark.parametrize("path", MODULES, ids=_module_name)
def test_no_private_name_crosses_modules(path):
    name = _module_name(path)
    for target, names, line in _imports(path):
        private = [n for n in names if n.startswith("_")]
        assert not private, f"{name}:{line} imports {private} from {target}"


def test_the_layer_test_sees_an_upward_import_and_a_private_name(tmp_path):
    """What the checks above read: a grammar module importing the line parser inside a
    function is an upward import; a private name is seen too."""
    bad = tmp_path / "grammar.py"
    bad.write_text("def f():\n    from .lines import _count, parse_line\n")
    ((target, names, line),) = _imports(bad, "grammar")
    assert (target, line) == ("lines", 2) and LAYERS[target] > LAYERS["grammar"]
    assert [n for n in names if n.startswith("_")] == ["_count"]


def test_a_new_line_format_is_one_grammar_entry_and_one_reader_row(monkeypatch, tmp_path):
    """Adding ``structured`` (dict and JSON lines, no free text) takes exactly an entry
    in ``grammar.LINE_FORMATS`` and a row in ``formats.READERS``; nothing else knows
    the list of formats."""
    from dflash_diag.logs import formats, grammar, read_log

    monkeypatch.setitem(grammar.LINE_FORMATS, "structured", frozenset({"dict", "json"}))
    monkeypatch.setitem(
        formats.READERS,
        "structured",
        formats.Reader("dict or JSON lines", formats.READERS["text"].read),
    )
    p = tmp_path / "mixed.log"
    p.write_text("step=1 loss=9.0\n{\"step\": 2, \"loss\": 2.5}\n{'step': 3, 'loss': 2.25}\n")
    run = read_log(p, format="structured")
    assert run.format == "structured"
    assert run.table["step"].tolist() == [2, 3] and run.table["loss"].tolist() == [2.5, 2.25]
    assert read_log(p, format="text").table["step"].tolist() == [1, 2, 3]
