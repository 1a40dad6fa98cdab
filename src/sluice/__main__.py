"""The entry point of ``sluice``, ``git sluice`` and ``python -m sluice``.

``sluice --version`` is answered here, before the command line is imported:
it must stay fast, so it never pays for typer, rich, pydantic or pygit2.
The hot read commands are answered by :mod:`sluice.surfaces.fastcli` (same
output, none of those imports); everything else, and every error, goes to
the typer app in :mod:`sluice.surfaces.cli`.
"""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        from sluice import __version__

        sys.stdout.write(f"sluice {__version__}\n")
        return
    from sluice.surfaces.fastcli import run

    if run(sys.argv[1:]) is not None:  # a hot read command, answered without typer or pydantic
        return
    from sluice.surfaces.cli import main as run_cli

    run_cli()


if __name__ == "__main__":
    main()
