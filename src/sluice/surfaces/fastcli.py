"""The hot read commands answered without typer, rich, pydantic or pygit2.

Agents and hooks run ``sluice item ready`` and friends thousands of times a
day; importing typer and rich alone takes about 0.1 s, more than the answer.
:func:`run` recognises the plain forms of these commands with a tiny parser
and calls the very library functions and output helpers the typer commands
call, so stdout is the same byte for byte.  It answers only the success
case: anything it does not recognise (``--help``, an unknown flag, a bad
number) and any error at all returns None, and the caller hands the whole
command line to typer, which parses and fails exactly as it always does.
These commands only read, so trying twice changes nothing.  Warnings logged
while answering are held back and said only when the answer stands.

Handled: ``[--town PATH] item ready [RIG] [--limit N] [--json]``,
``item blocked [RIG] [--json]`` and ``item show ID [--json]``.
"""

from __future__ import annotations

import logging
import os
import sys


class _Held(logging.Handler):
    """Keeps log lines until the answer is known to stand."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname.lower()}: {record.getMessage()}\n")


def _parse(args: list[str]) -> tuple[str | None, str, list[str], dict[str, str], bool] | None:
    """(town, command, positionals, options, as_json), or None for anything but the plain forms."""
    town = None
    if args and args[0] == "--town" and len(args) > 1:
        town, args = args[1], args[2:]
    elif args and args[0].startswith("--town="):
        town, args = args[0].split("=", 1)[1], args[1:]
    if len(args) < 2 or args[0] != "item" or args[1] not in ("ready", "blocked", "show"):
        return None
    command, rest = args[1], args[2:]
    positionals: list[str] = []
    options: dict[str, str] = {}
    as_json = False
    position = 0
    while position < len(rest):
        token = rest[position]
        position += 1
        if token == "--json":
            as_json = True
        elif command == "ready" and token == "--limit" and position < len(rest) and "limit" not in options:
            options["limit"] = rest[position]
            position += 1
        elif command == "ready" and token.startswith("--limit=") and "limit" not in options:
            options["limit"] = token.split("=", 1)[1]
        elif token.startswith("-"):
            return None  # --help, an unknown flag, a value that looks like one: typer says what it means
        else:
            positionals.append(token)
    wanted = (1, 1) if command == "show" else (0, 1)
    if not wanted[0] <= len(positionals) <= wanted[1]:
        return None
    return town, command, positionals, options, as_json


def _answer(town_arg, command: str, positionals: list[str], options: dict[str, str], as_json: bool) -> None:
    from sluice.api import open_town
    from sluice.store.configcache import plain_config
    from sluice.surfaces import output

    town = open_town(town_arg)
    plain = plain_config(town.files)
    if plain is not None:
        town.files.__dict__["config"] = plain
    if command == "show":
        output.emit(town.item(positionals[0]), as_json, output.item_text)
        return
    rig = positionals[0] if positionals else None
    if command == "ready":
        rows = town.ready(rig, int(options.get("limit", "100")))
        output.emit(output.RawJSON(rows.lines), as_json, output.ready_text)
        return
    output.emit(output.RawJSON(town.blocked(rig).lines), as_json, output.blocked_text)


def run(args: list[str]) -> int | None:
    """Answer a hot read command and return its exit code, or None to let typer handle it."""
    parsed = _parse(args)
    if parsed is None:
        return None
    if parsed[1] == "ready" and "limit" in parsed[3]:
        try:
            int(parsed[3]["limit"])
        except ValueError:
            return None
    logger = logging.getLogger("sluice")
    held = _Held()
    logger.addHandler(held)
    logger.setLevel(logging.DEBUG if os.environ.get("SLUICE_DEBUG") else logging.WARNING)
    logger.propagate = False
    real_stdout = sys.stdout
    import io

    sys.stdout = buffer = io.StringIO()
    try:
        _answer(*parsed)
    except Exception:
        return None
    finally:
        sys.stdout = real_stdout
        logger.removeHandler(held)
    try:
        sys.stderr.write("".join(held.lines))
        sys.stdout.write(buffer.getvalue())
        sys.stdout.flush()
    except BrokenPipeError:
        return 0
    return 0
