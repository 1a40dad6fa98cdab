"""The entry point of ``sluice``, ``git sluice`` and ``python -m sluice``.

``sluice --version`` is answered here, before the command line is imported:
it must stay fast, so it never pays for typer, rich, pydantic or pygit2.
The hot read commands are answered by :mod:`sluice.surfaces.fastcli` (same
output, none of those imports); everything else, and every error, goes to
the typer app in :mod:`sluice.surfaces.cli`.
"""

from __future__ import annotations

import gc
import sys

#: Allocations between young-generation collections.  A command reading 10,000 contexts makes
#: millions of short-lived, acyclic objects; at Python's default (700) the collector's full passes
#: over them cost about a fifth of a dispatch cycle.  Cycles are still collected, less often.
GC_YOUNG = 50_000


def main() -> None:
    gc.set_threshold(GC_YOUNG, 20, 20)
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
