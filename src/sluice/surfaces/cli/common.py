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
from sluice.surfaces.output import RawJSON, emit, flag_words, shown  # noqa: F401 - the commands' imports

JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]

#: The ``--town`` given to the command line, if any (set by its root callback).
town_arg: str | None = None


def town():
    """The town from --town, SLUICE_TOWN or the cwd, opened through the Python API (TownNotFound if none)."""
    from sluice.api import open_town

    return open_town(town_arg)


def say(message: str) -> None:
    """A progress or status line for a person, on stderr so stdout stays data."""
    sys.stderr.write(printable_text(message) + "\n")
