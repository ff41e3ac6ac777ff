"""`dflash-diag batches` (being built)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("batches")
    def batches() -> None:
        """(being built)"""
        raise NotImplementedError
