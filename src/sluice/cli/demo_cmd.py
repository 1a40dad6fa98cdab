"""Commands registered by this module (filled in as features land)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    return None
