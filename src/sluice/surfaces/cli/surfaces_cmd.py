"""`sluice hooks …`, `sluice patrol`, `sluice mcp`: the ways in for repositories and agents."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sluice.surfaces.cli.common import JsonOption, emit, say, shown, town

hooks_app = typer.Typer(help="Git hooks that report a rig's merge-queue depth.", no_args_is_help=True)


@hooks_app.command("install")
def hooks_install(
    rig: Annotated[str, typer.Argument(help="Rig whose repository gets the hooks.")],
    force: Annotated[bool, typer.Option(help="Move foreign hooks aside (<name>.sluice-orig).")] = False,
    as_json: JsonOption = False,
) -> None:
    """Link post-commit, post-merge and pre-push into RIG's repository (its only write by sluice)."""
    from sluice.surfaces.githooks import install

    emit(install(town().files, rig, force), as_json, lambda r: "\n".join(
        [f"hooks in {r['hooks_dir']}:"]
        + [f"  installed {n}" for n in r["installed"] if n not in r["replaced"]]
        + [f"  replaced {n} (the old hook is {n}.sluice-orig)" for n in r["replaced"]]
        + [f"  {n} already installed" for n in r["unchanged"]]))


@hooks_app.command("uninstall")
def hooks_uninstall(
    rig: Annotated[str, typer.Argument(help="Rig whose repository has the hooks.")],
    as_json: JsonOption = False,
) -> None:
    """Remove only the hooks `install` linked; put back hooks it moved aside; leave any other hook."""
    from sluice.surfaces.githooks import uninstall

    emit(uninstall(town().files, rig), as_json, lambda r: "\n".join(
        [f"hooks in {r['hooks_dir']}:"]
        + [f"  removed {n}" for n in r["removed"] if n not in r["restored"]]
        + [f"  removed {n}; the hook it replaced is back" for n in r["restored"] if n in r["removed"]]
        + [f"  restored {n} from {n}.sluice-orig" for n in r["restored"] if n not in r["removed"]]
        + [f"  {n} is not sluice's; left alone" for n in r["kept"]]
        + ([] if r["removed"] or r["restored"] or r["kept"] else ["  no sluice hooks were installed"])))


@hooks_app.command("report")
def hooks_report(
    rig: Annotated[str | None, typer.Option(help="Rig to report on.")] = None,
    repo: Annotated[Path | None, typer.Option(help="Or: the rig's repository path.")] = None,
    hook: Annotated[str, typer.Option(help="Which hook is calling (logged in the event).")] = "",
    as_json: JsonOption = False,
) -> None:
    """Print the rig's merge-queue depth on stderr and log a MergeQueueDepth event."""
    queue = town().hooks_report(rig, repo, hook)
    say(queue.line())
    if as_json:
        emit(queue.to_json(), True)


def patrol(
    rig: Annotated[str, typer.Argument(help="Rig to patrol.")],
    fix: Annotated[bool, typer.Option(help="Close stale and duplicate contexts (never an item).")] = False,
    as_json: JsonOption = False,
) -> None:
    """Witness patrol: one rig's queued, failing, stale, duplicate and orphaned contexts and polecats."""
    emit(town().patrol(rig, fix).to_json(), as_json, _patrol_text)


def _patrol_text(r: dict) -> str:
    mq = r["merge_queue"]
    lines = [f"patrol {r['rig']}: {r['ready']} ready, {r['blocked']} blocked, {len(r['polecats'])}"
             f" polecat(s), merge queue {mq['queued']} queued / {mq['running']} running"]
    lines += [f"  {'⏸' if row['blocked'] else '○'} {shown(row['item_id'])}: {shown(row['title'])}"
              for row in r["queued"]]
    for row in r.get("held", ()):
        since = f" since {row['missing_since']}" if row.get("missing_since") else ""
        lines.append(f"  held: {row['context_id']} (item {shown(row['item_id'])}) {row['reason']}:"
                     f" not found in any rig{since}")
    for key in ("failing", "stale", "duplicates", "orphaned"):
        for row in r[key]:
            extra = shown(row.get("last_failure") or row.get("detail") or "")
            lines.append(f"  {key}: {row['context_id']} (item {shown(row['item_id'])}) {extra}".rstrip())
    lines += [f"  fixed: closed {row['context_id']} ({row['reason']})" for row in r.get("fixed", [])]
    if r.get("executor_error"):
        lines.append(f"  executor: {r['executor_error']}")
    for other in r.get("other_towns") or ():
        lines.append(f"  shared: this rig's repository is also a rig of town {shown(other)}: both towns"
                     " would dispatch its items (remove the rig from one of them)")
    if r.get("unreadable"):
        lines.append(f"  unreadable (rig held, rig-unreadable): {shown(r['unreadable'])}")
    gone = r.get("events_missing")
    if gone:
        lines.append(f"  events waiting: {gone['count']} event(s) not yet written to the event log"
                     f" ({shown(gone.get('error') or 'being written')}); they are kept and written"
                     " once the log accepts them")
    return "\n".join(lines)


def mcp() -> None:
    """Serve the sluice tools over MCP on stdio (for agent clients)."""
    from sluice.surfaces.cli import common
    from sluice.surfaces.mcp_server import serve

    serve(common.town_arg)


def register(app: typer.Typer) -> None:
    app.add_typer(hooks_app, name="hooks")
    app.command("patrol")(patrol)
    app.command("mcp")(mcp)
