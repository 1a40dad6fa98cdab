"""`sluice snapshot`, `sluice top`, `sluice web`: watching the town, all from one snapshot."""

from __future__ import annotations

from typing import Annotated

import typer

from sluice.surfaces.cli.common import JsonOption, emit, town
from sluice.surfaces.output import snapshot_text


def snapshot(
    limit: Annotated[int, typer.Option(help="Only the first N queue rows; 0 = all (counts stay exact).")] = 0,
    as_json: JsonOption = False,
) -> None:
    """The town's state in one document: scheduler, queue, polecats, rigs, decisions, events."""
    emit(town().snapshot(limit).to_json(), as_json, snapshot_text)


def top(
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes (changes show at once).")] = 1.0,
    rig: Annotated[str | None, typer.Option(help="Show only this rig (`/` changes it live).")] = None,
) -> None:
    """Watch the town live: queue in dispatch order, running polecats, events (q quits, p pauses)."""
    from sluice.errors import UsageError
    from sluice.surfaces.top import run_top

    if interval <= 0:
        raise UsageError(f"--interval must be > 0 seconds (got {interval:g})")
    run_top(town(), once=once, interval=interval, rig=rig)


def web(
    host: Annotated[str, typer.Option(help="Address to listen on (other than loopback: announced loudly).")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free port).")] = 8765,
    token: Annotated[str | None, typer.Option(
        help="Token the actions need (seen by every local user in ps: prefer --token-file or"
             " SLUICE_WEB_TOKEN; default: a new random one).")] = None,
    token_file: Annotated[str | None, typer.Option(help="Read the token from this file (its first line).")]
    = None,
    allow_host: Annotated[list[str] | None, typer.Option(
        help="Also answer requests naming this host (repeatable; any port).")] = None,
    allow_any_host: Annotated[bool, typer.Option(
        "--allow-any-host", help="Answer any Host name (no DNS-rebinding check; warned).")] = False,
) -> None:
    """Serve the dashboard: the same panels as top, live in a browser, with pause/resume/clear/stop."""
    from sluice.surfaces.web.serve import run_web

    run_web(town(), host=host, port=port, token=token, token_file=token_file,
            allow_hosts=tuple(allow_host or ()), allow_any_host=allow_any_host)


def register(app: typer.Typer) -> None:
    app.command("snapshot")(snapshot)
    app.command("top")(top)
    app.command("web")(web)
