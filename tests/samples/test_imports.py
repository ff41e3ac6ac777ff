"""The samples package stands on numpy, pandas, scipy, dflash_diag.errors and
dflash_diag.arrays only, so the composition layer and the commands can sit above it."""

from __future__ import annotations

import ast
from pathlib import Path

import dflash_diag.samples as samples

ALLOWED = {"numpy", "pandas", "scipy", "dataclasses", "typing", "__future__", "itertools"}
ALLOWED |= {"collections", "functools"}  # (collections.abc; partial, cached_property)


def test_samples_imports_only_numpy_pandas_scipy_and_errors() -> None:
    folder = Path(samples.__file__).parent
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: inside the package, or ..errors, ..arrays
                    outside = node.module in ("errors", "arrays")
                    assert node.level == 1 or outside, (path.name, node.module)
                    continue
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in ALLOWED, f"{path.name} imports {name}"
