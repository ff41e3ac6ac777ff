"""The package is layered (docs/architecture.md): each top-level module or package of
``dflash_diag`` imports only those of lower layers, at module level or inside a
function (an import moved into a function does not dodge the rule), and never a private
name of another module.  ``tests/logs/test_layers.py`` holds the same rule inside
``dflash_diag.logs``.

A module or package added to ``dflash_diag`` must be given a layer here, or this test
fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dflash_diag"

#: top-level module or package -> layer; an import must go to a strictly lower layer
#: (or stay inside its own module or package).
LAYERS: dict[str, int] = {
    # the one exception; where files live (local paths and URIs)
    "errors": 0,
    "storage": 1,
    "limits": 1,
    "arrays": 1,
    "printable": 1,
    # the plain data passed between stages
    "data": 2,
    "outpath": 2,
    "lr_phases": 2,
    "stattests": 2,
    # readers of the inputs: logs, manifests, schedules replayed, recordings
    "logs": 3,
    "manifest": 4,
    "schedule": 4,
    "record": 5,
    # what each step held, and on what ground
    "composition": 6,
    # the analyses
    "batches": 7,
    "compare": 7,
    "samples": 7,
    "spikes": 8,
    # a command's report as data; the live watcher
    "reports": 9,
    "watch": 9,
    # text, JSON, HTML, plots
    "render": 10,
    # the command line
    "cli": 11,
    "__main__": 12,
}
#: names of the package root that any layer may import (no module behind them)
ROOT_NAMES = {"__version__"}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _parts(path: Path) -> list[str]:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _targets(path: Path) -> list[tuple[list[str], list[str], int]]:
    """``(module parts under dflash_diag, names, line)`` of every import of the package
    in ``path``, relative or absolute, wherever it stands."""
    parts = _parts(path)
    return _imports(path.read_text(), parts if path.name == "__init__.py" else parts[:-1])


def _imports(text: str, here: list[str]) -> list[tuple[list[str], list[str], int]]:
    """:func:`_targets` of source ``text`` in the package ``here`` (parts under
    dflash_diag)."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                mod = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "dflash_diag":
                mod = node.module.split(".")[1:]
            else:
                continue
            if not node.module and not mod:  # from .. import x: x is the module
                out.extend(([n], [], node.lineno) for n in names)
            else:
                out.append((mod, names, node.lineno))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "dflash_diag":
                    out.append((a.name.split(".")[1:], [], node.lineno))
    return out


def _top(path: Path) -> str:
    parts = _parts(path)
    return parts[0] if parts else ""


@pytest.mark.slow
@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_go_down(path: Path) -> None:
    me = _top(path)
    if me == "":  # the package root re-exports the public API
        return
    assert me in LAYERS, f"give {me} a layer in tests/test_layers.py"
    for mod, names, line in _targets(path):
        if not mod:
            assert set(names) <= ROOT_NAMES, f"{path.name}:{line} imports {names} from the root"
            continue
        other = mod[0]
        if other == me or other in ROOT_NAMES:
            continue
        assert other in LAYERS, f"{path.name}:{line}: {other} has no layer"
        assert LAYERS[other] < LAYERS[me], (
            f"{path.relative_to(PACKAGE)}:{line} imports {'.'.join(mod)} "
            f"(layer {LAYERS[other]}) from layer {LAYERS[me]} ({me})"
        )


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_private_name_crosses_modules(path: Path) -> None:
    for mod, names, line in _targets(path):
        private = [n for n in names if n.startswith("_") and not n.startswith("__")]
        assert not private, f"{path.name}:{line} imports {private} from {'.'.join(mod)}"


def test_every_layer_names_a_real_module() -> None:
    present = {_top(p) for p in _modules()} - {""}
    assert set(LAYERS) - {"samples"} <= present | {"__main__"}, set(LAYERS) - present


def test_the_rule_sees_an_upward_import_inside_a_function() -> None:
    """The checker itself: ``from ..render import text`` inside a function of
    ``logs/x.py`` is found, resolved to render, which is above logs."""
    found = _imports("def f():\n    from ..render import text\n", ["logs"])
    assert found == [(["render"], ["text"], 2)]
    assert LAYERS["render"] > LAYERS["logs"]
