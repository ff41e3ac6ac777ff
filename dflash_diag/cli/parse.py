"""`dflash-diag parse` (being built)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("parse")
    def parse() -> None:
        """(being built)"""
        raise NotImplementedError
