"""The two consoles: stdout for results, stderr for errors and progress."""

from __future__ import annotations

from rich.console import Console

out_console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)
