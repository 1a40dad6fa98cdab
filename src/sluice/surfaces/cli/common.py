"""What every command shares: the town option, one output helper, error exits.

Commands stay thin: parse, call one method of the Python API
(:class:`sluice.api.Town`, from :func:`town`), hand the result to :func:`emit`.
Library imports happen inside commands so that ``--help`` and simple commands
do not pay for pydantic, pygit2 or the MCP SDK.
"""

from __future__ import annotations

import re
import sys
from typing import Annotated

import typer

from sluice.core.text import printable_text
from sluice.surfaces.output import RawJSON, emit, shown  # noqa: F401 - the commands import them from here

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


#: Parameters whose flag is not simply ``--`` and the name with dashes.
_FLAGS = {"vars": "--var", "deps": "--dep", "labels": "--label", "add_labels": "--add-label"}


def flag_of(parameter: str) -> str:
    return _FLAGS.get(parameter, "--" + parameter.replace("_", "-"))


def flag_words(message: str, parameters: tuple[str, ...] = ()) -> str:
    """A library message as the command line says it: the parameters it names become flags.

    The library speaks of parameters (``batch``, ``force``) because it is also
    called from Python and over MCP; an error lists the ones its message names
    (first mention), and a refusal that ``force`` overrides says "override with
    force".  Only here are they spelled as flags.
    """
    for parameter in parameters:
        pattern = rf"(?<![\w-]){re.escape(parameter)}(?![\w-])"
        message = re.sub(pattern, flag_of(parameter), message, count=1)
    return message.replace("override with force", "override with --force")


def error_text(err: Exception) -> str:
    """A library error's message, in the command line's words (see :func:`flag_words`), safe to print.

    Messages quote what was asked for (an id, a path), which may hold control characters.
    """
    return printable_text(flag_words(str(err), getattr(err, "parameters", ())))


