"""The ``sluice`` command line (also ``git sluice``)."""

from __future__ import annotations

import logging
import os
import sys
from typing import Annotated

import typer

from sluice.core.text import printable_text
from sluice.surfaces.cli import common

app = typer.Typer(
    name="sluice",
    help="A git-native scheduler for multi-agent coding workspaces.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,  # --show-completion SHELL / --install-completion for bash, zsh and fish
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    # `sluice --version` alone is answered before typer loads (sluice.__main__); this serves the rest.
    if value:
        from sluice import __version__

        sys.stdout.write(f"sluice {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    town: Annotated[str | None, typer.Option(
        "--town", help="Town directory (default: SLUICE_TOWN, then the cwd upwards).")] = None,
    version: Annotated[bool, typer.Option(
        "--version", help="Print the version and exit.", is_eager=True, callback=_print_version)] = False,
) -> None:
    common.town_arg = town


def _register() -> None:
    from sluice.surfaces.cli import (
        demo_cmd,
        items_cmd,
        polecat_cmd,
        runs_cmd,
        schedule_cmd,
        scheduler_cmd,
        surfaces_cmd,
        town_cmd,
        views_cmd,
    )

    for module in (town_cmd, items_cmd, scheduler_cmd, schedule_cmd, polecat_cmd, runs_cmd, surfaces_cmd,
                   demo_cmd, views_cmd):
        module.register(app)


_register()


def command():
    """The app's click command tree with readable placeholders and examples in its help (helptext)."""
    from sluice.surfaces.cli.helptext import readable

    root = typer.main.get_command(app)
    readable(root)
    return root


class _StderrFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return printable_text(f"{record.levelname.lower()}: {record.getMessage()}")


def _try_help(command_path: str) -> None:
    sys.stderr.write(f"try '{command_path} --help'\n")


def _usage_error(err: typer.TyperException) -> None:
    """One plain ``error: …`` line and where to look, exit 2; bare ``sluice`` still shows the help."""
    ctx = getattr(err, "ctx", None)
    if type(err).__name__ == "NoArgsIsHelpError":  # a group named without a command: its help is the answer
        sys.stderr.write(printable_text(err.format_message().rstrip("\n")) + "\n")
        sys.exit(2)
    from sluice.surfaces.output import bounded

    sys.stderr.write(f"error: {bounded(printable_text(err.format_message()))}\n")
    if ctx is not None:
        _try_help(ctx.command_path)
    sys.exit(getattr(err, "exit_code", 2))


def _command_path(argv: list[str]) -> str:
    """``sluice schedule policy`` for an argv, so a usage error from a command can point at its help."""
    command = typer.main.get_command(app)
    words, skip = ["sluice"], False
    for arg in argv:
        if skip or arg.startswith("-"):
            skip = arg == "--town"
            continue
        commands = getattr(command, "commands", None)
        if not commands or arg not in commands:
            break
        words.append(arg)
        command = commands[arg]
    return " ".join(words)


def main() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_StderrFormatter())
    logger = logging.getLogger("sluice")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if os.environ.get("SLUICE_DEBUG") else logging.WARNING)
    logger.propagate = False

    from sluice.errors import SluiceError
    from sluice.surfaces.output import failure_text, unencodable_argument

    refused = unencodable_argument(sys.argv[1:])
    if refused is not None:  # nothing could print, store or pass it on: refused before parsing
        sys.stderr.write(f"error: {refused}\n")
        _try_help(_command_path(sys.argv[1:]))
        sys.exit(2)
    try:
        # Not standalone: typer's own usage errors reach us here instead of printing a boxed panel.
        code = command()(prog_name="sluice", standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except typer.TyperException as err:  # a bad flag, value or command name, found while parsing
        _usage_error(err)
    except typer.Abort:
        sys.stderr.write("aborted\n")
        sys.exit(1)
    except SluiceError as err:
        sys.stderr.write(failure_text(err))
        if err.exit_code == 2:
            _try_help(_command_path(sys.argv[1:]))
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as err:  # the machine said no (a directory where a file belongs, no permission, full disk)
        sys.stderr.write(failure_text(err))
        sys.exit(1)
    except Exception as err:  # a bug: say so plainly, keep the traceback for SLUICE_DEBUG
        if os.environ.get("SLUICE_DEBUG"):
            raise
        sys.stderr.write(failure_text(err))
        sys.exit(1)
