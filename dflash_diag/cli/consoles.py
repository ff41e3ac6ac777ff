"""The two consoles: stdout for results, stderr for errors and progress.

On a terminal rich uses its width; in a pipe or a file (where rich would assume 80
columns) tables get 120 columns, or ``$COLUMNS`` when it is set, so reports pasted into
issues and notebooks keep one row per line.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console


def _width() -> int | None:
    if os.environ.get("COLUMNS") or sys.stdout.isatty():
        return None
    return 120


out_console = Console(highlight=False, width=_width())
err_console = Console(stderr=True, highlight=False)
