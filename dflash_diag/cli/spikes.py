"""`dflash-diag spikes` (being built)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("spikes")
    def spikes() -> None:
        """(being built)"""
        raise NotImplementedError
