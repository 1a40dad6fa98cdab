"""What every command shares: the town option, one output helper, error exits.

Commands stay thin: parse, call one method of the Python API
(:class:`sluice.api.Town`, from :func:`town`), hand the result to :func:`emit`.
Library imports happen inside commands so that ``--help`` and simple commands
do not pay for pydantic, pygit2 or the MCP SDK.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from sluice.core.text import printable_text
from sluice.surfaces.output import (  # noqa: F401 - the commands import them from here
    RawJSON,
    emit,
    error_text,
    flag_of,
    flag_words,
    shown,
)

JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]

_town_arg: dict[str, str | None] = {"path": None}


def set_town_arg(path: str | None) -> None:
    _town_arg["path"] = path


def town_arg() -> str | None:
    return _town_arg["path"]


def town():
    """The town from --town, SLUICE_TOWN or the cwd, opened through the Python API (TownNotFound if none)."""
    from sluice.api import open_town

    return open_town(_town_arg["path"])


def say(message: str) -> None:
    """A progress or status line for a person, on stderr so stdout stays data."""
    sys.stderr.write(printable_text(message) + "\n")




