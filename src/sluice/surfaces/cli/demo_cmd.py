"""`sluice demo`: a throwaway town worked through live."""

from __future__ import annotations

from typing import Annotated

import typer

from sluice.surfaces.cli.common import JsonOption, emit, say


def demo(
    keep: Annotated[bool, typer.Option(help="Keep the demo town afterwards (its path is printed).")] = False,
    work_seconds: Annotated[str, typer.Option(
        help="How long each demo polecat works: N or LOW-HIGH seconds.")] = "1.5-3.5",
    timeout: Annotated[float, typer.Option(help="Give up after this many seconds.")] = 150.0,
    web: Annotated[bool, typer.Option("--web", help="Also serve the dashboard on 127.0.0.1 while it runs.")]
    = False,
    port: Annotated[int, typer.Option(help="The dashboard's port with --web (0: any free port).")] = 8765,
    as_json: JsonOption = False,
) -> None:
    """Build a throwaway town, sling everything under a cap of 3 polecats, and watch it drain."""
    from sluice.surfaces.demo import run

    summary = run(work_seconds=work_seconds, keep=keep, timeout=timeout, live=False if as_json else None,
                  web_port=port if web else None, say=say)
    emit(summary.to_json(), as_json, _summary_text)
    if not summary.ok:
        raise typer.Exit(1)


def _summary_text(s: dict) -> str:
    lines = [
        "",
        f"sluice demo: {s['done']}/{s['items']} items done in {s['elapsed']:.1f}s"
        f" over {s['ticks']} daemon ticks",
        f"  dispatched {s['dispatched']}, failed {s['failed']}, most polecats at once {s['max_active']}"
        f" (cap {s['cap']})",
    ]
    if s["timed_out"]:
        lines.append("  gave up: the queue did not drain in time")
    if s["max_active"] > s["cap"]:
        lines.append("  the cap was exceeded — this is a bug")
    lines.append(f"  town kept at {s['town']}" if s["kept"] else "  the demo town was removed")
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
