"""`dflash-diag compare` (being built)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("compare")
    def compare() -> None:
        """(being built)"""
        raise NotImplementedError
