"""The entry point of ``sluice``, ``git sluice`` and ``python -m sluice``.

``sluice --version`` is answered here, before the command line is imported:
it must stay fast, so it never pays for typer, rich, pydantic or pygit2.
The hot read commands are answered by :mod:`sluice.surfaces.fastcli` (same
output, none of those imports); everything else, and every error, goes to
the typer app in :mod:`sluice.surfaces.cli`.
"""

from __future__ import annotations

import gc
import os
import sys

#: Allocations between young-generation collections.  A command reading 10,000 contexts makes
#: millions of short-lived, acyclic objects; at Python's default (700) the collector's full passes
#: over them cost about a fifth of a dispatch cycle.  Cycles are still collected, less often.
GC_YOUNG = 50_000


def main() -> int | None:
    """Answer the command line; returns the exit code of a hot command answered without typer."""
    gc.set_threshold(GC_YOUNG, 20, 20)
    if sys.argv[1:] == ["--version"]:
        from sluice import __version__

        sys.stdout.write(f"sluice {__version__}\n")
        return 0
    if "_SLUICE_COMPLETE" not in os.environ:  # a shell asking for completions goes straight to typer
        from sluice.surfaces.fastcli import run

        code = run(sys.argv[1:])
        if code is not None:  # a hot read command, answered without typer or pydantic
            return code
    from sluice.surfaces.cli import main as run_cli

    run_cli()
    return None


def entry() -> None:
    """The ``sluice`` program: :func:`main`, then, after a hot command, an exit without teardown.

    The answer is written and flushed by then.  An orderly interpreter
    shutdown would only free, one by one, the objects a command read (a
    dispatch dry run over 10,000 contexts holds about 90 MB of them), which
    took longer than some whole answers.
    """
    code = main()
    if code is None:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # the reader left: nothing more to say
        pass
    os._exit(code)


if __name__ == "__main__":
    entry()
