"""The ``sluice`` command line (also ``git sluice``)."""

from __future__ import annotations

import logging
import os
import sys
from typing import Annotated

import typer

from sluice.surfaces.cli import common

app = typer.Typer(
    name="sluice",
    help="A git-native scheduler for multi-agent coding workspaces.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root(
    town: Annotated[
        str | None,
        typer.Option("--town", help="Town directory (default: SLUICE_TOWN, then the cwd upwards)."),
    ] = None,
) -> None:
    common.set_town_arg(town)


def _register() -> None:
    from sluice.surfaces.cli import (
        demo_cmd,
        items_cmd,
        polecat_cmd,
        schedule_cmd,
        scheduler_cmd,
        surfaces_cmd,
        town_cmd,
        views_cmd,
    )

    for module in (town_cmd, items_cmd, scheduler_cmd, schedule_cmd, polecat_cmd, surfaces_cmd, demo_cmd,
                   views_cmd):
        module.register(app)


_register()


class _StderrFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {record.getMessage()}"


def main() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_StderrFormatter())
    logger = logging.getLogger("sluice")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if os.environ.get("SLUICE_DEBUG") else logging.WARNING)
    logger.propagate = False

    from sluice.errors import SluiceError, os_error_text

    try:
        app()
    except SluiceError as err:
        sys.stderr.write(f"error: {err}\n")
        sys.exit(err.exit_code)
    except TimeoutError as err:  # filelock.Timeout: a lock stayed busy past its timeout
        lock = getattr(err, "lock_file", "a lock")
        sys.stderr.write(f"error: timed out waiting for {lock}; another sluice command is holding it\n")
        sys.exit(1)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as err:  # the machine said no (a directory where a file belongs, no permission, full disk)
        sys.stderr.write(f"error: {os_error_text(err)}\n")
        sys.exit(1)
    except Exception as err:  # a bug: say so plainly, keep the traceback for SLUICE_DEBUG
        if os.environ.get("SLUICE_DEBUG"):
            raise
        detail = f"{type(err).__name__}: {err}"
        sys.stderr.write(f"error: internal error: {detail} (set SLUICE_DEBUG=1 for details)\n")
        sys.exit(1)
