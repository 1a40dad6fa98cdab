"""`sluice runs` and `sluice feed`: what happened after each launch, and the event log in words."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from sluice.errors import UsageError
from sluice.surfaces.cli.common import JsonOption, emit, shown, town
from sluice.surfaces.output import FAILED_OUTCOMES, duration_text, write_text

SinceOption = Annotated[str | None, typer.Option("--since", help="Only this recent: a duration (30m, 2h).")]
RigOption = Annotated[str | None, typer.Option("--rig", help="Only this rig.")]


def runs(
    item: Annotated[str | None, typer.Option("--item", help="Only runs of this item.")] = None,
    rig: RigOption = None,
    outcome: Annotated[str | None, typer.Option("--outcome", help=(
        "Only this outcome: running, ok, failed, throttled, timed-out, stopped, vanished."))] = None,
    since: SinceOption = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many (0 = all).")] = 100,
    ids: Annotated[bool, typer.Option("--ids", help=(
        "Print only the items whose latest run matches, one per line (for `sluice sling -`)."))] = False,
    as_json: JsonOption = False,
) -> None:
    """The run history, newest first: one record per launch, with its outcome and exit status."""
    if ids:
        if item is not None:
            raise UsageError("give --item or --ids, not both")
        found = town().run_item_ids(rig=rig, outcome=outcome, since=since, limit=limit)
        emit(found, as_json, lambda rows: "\n".join(shown(i) for i in rows))
        return
    emit(town().runs(item=item, rig=rig, outcome=outcome, since=since, limit=limit).to_json(), as_json,
         _runs_text)


def _runs_text(rows: list[dict]) -> str:
    if not rows:
        return "No runs."
    lines = [f"  {'RUN':<14} {'ITEM':<14} {'RIG':<12} {'OUTCOME':<10} {'EXIT':>5} {'RUNTIME':>9}  STARTED"]
    for row in rows:
        code = str(row["exit_code"]) if row.get("exit_code") is not None else "-"
        took = duration_text(row.get("runtime_seconds"))
        mark = "! " if row.get("outcome") in FAILED_OUTCOMES else "  "
        lines.append(f"{mark}{shown(row['run_id']):<14} {shown(row.get('item_id')) or '-':<14}"
                     f" {shown(row.get('rig')) or '-':<12} {row.get('outcome'):<10} {code:>5} {took:>9}"
                     f"  {row.get('started_at') or '-'}")
        if row.get("reason"):
            lines.append(f"    reason: {shown(row['reason'])}")
        if row.get("workspace") and row.get("workspace_kept"):
            lines.append(f"    workspace kept: {shown(row['workspace'])} ({shown(row['workspace_kept'])})")
    return "\n".join(lines)


def feed(
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing events as they come.")] = (
        False),
    rig: RigOption = None,
    kind: Annotated[str | None, typer.Option("--kind", help="Only this event type (PolecatExited …).")] = (
        None),
    since: SinceOption = None,
    limit: Annotated[int, typer.Option("--limit", help="The last this many (0 = all).")] = 100,
    as_json: JsonOption = False,
) -> None:
    """The event log as a readable stream, one line per event; --follow tails it live."""
    from sluice.scheduler.views.feed import follow as follow_feed
    from sluice.scheduler.views.feed import line, log_end

    the_town = town()
    start = log_end(the_town.files) if follow else None  # before the last events are read: none lost
    rows = the_town.feed(rig=rig, kind=kind, since=since, limit=limit).to_json()
    if not follow:
        emit(rows, as_json, lambda rs: "\n".join(line(r) for r in rs) or "No events.")
        return
    for row in rows:
        _print(row, as_json)
    seen = {r["event"].get("event_id") for r in rows}
    try:
        for row in follow_feed(the_town.files, rig=rig, kind=kind, start=start, seen=seen):
            _print(row, as_json)
    except KeyboardInterrupt:
        return


def _print(row: dict, as_json: bool) -> None:
    """One row at a time (JSON lines with --follow --json: the stream has no end to close an array)."""
    from sluice.scheduler.views.feed import line

    if as_json:
        sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
    else:
        write_text(line(row))
    sys.stdout.flush()


def register(app: typer.Typer) -> None:
    app.command("runs")(runs)
    app.command("feed")(feed)
