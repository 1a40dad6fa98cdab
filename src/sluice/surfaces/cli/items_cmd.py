"""`sluice item …`: the small tracker for rigs without beads, and ready/blocked for all."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sluice.core.defaults import READY_LIMIT
from sluice.surfaces.cli.common import JsonOption, RawJSON, emit, shown, town
from sluice.surfaces.output import blocked_text, item_lines, item_text, ready_text

item_app = typer.Typer(help="Create, inspect and query work items.", no_args_is_help=True)
dep_app = typer.Typer(help="Dependencies between items.", no_args_is_help=True)
item_app.add_typer(dep_app, name="dep")


@item_app.command("create")
def create(
    rig: Annotated[str, typer.Argument(help="Rig to create the item in.")],
    title: Annotated[str, typer.Option("--title", help="Item title.")],
    priority: Annotated[int, typer.Option(help="0 (most urgent) … 4.")] = 2,
    issue_type: Annotated[str, typer.Option("--type", help="task, bug, feature, epic, convoy, …")] = "task",
    label: Annotated[list[str] | None, typer.Option("--label", help="Label (repeatable).")] = None,
    dep: Annotated[list[str] | None, typer.Option(
        "--dep", help="ID: the new item is blocked by ID; TYPE:ID for another edge type.")] = None,
    parent: Annotated[str | None, typer.Option(help="Parent item (parent-child edge).")] = None,
    description: Annotated[str, typer.Option(help="Item description.")] = "",
    tokens: Annotated[int | None, typer.Option(help="Estimated tokens (metadata.estimated_tokens).")] = None,
    assignee: Annotated[str, typer.Option(help="Assignee.")] = "",
    touches: Annotated[list[str] | None, typer.Option(
        "--touches", help="Glob of paths (relative to the rig) the work will edit (repeatable).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Create an item in RIG's own store."""
    created = town().create_item(rig, title, priority=priority, issue_type=issue_type, labels=label or (),
                                 deps=dep or (), parent=parent, description=description, tokens=tokens,
                                 assignee=assignee, touches=touches or ())
    emit(created.to_json(), as_json, lambda i: f"created {shown(i['id'])}: {shown(i['title'])}")


@item_app.command("show")
def show(item_id: Annotated[str, typer.Argument(help="Item id.")], as_json: JsonOption = False) -> None:
    """Show one item (any rig; ids route by prefix)."""
    emit(town().item(item_id).to_json(), as_json, item_text)


@item_app.command("list")
def list_(
    rig: Annotated[str | None, typer.Argument(help="Rig (default: all rigs).")] = None,
    status: Annotated[str | None, typer.Option(help="Only this status.")] = None,
    label: Annotated[list[str] | None, typer.Option(
        "--label", help="Must carry this label (repeatable).")] = None,
    as_json: JsonOption = False,
) -> None:
    """List items (ephemeral sluice records are not items and are not listed)."""
    emit(town().items(rig, status, label or ()).to_json(), as_json, item_lines)


@item_app.command("ready")
def ready(
    rig: Annotated[str | None, typer.Argument(help="Rig (default: all rigs).")] = None,
    limit: Annotated[int, typer.Option(help="At most N rows; 0 = all.")] = READY_LIMIT,
    label: Annotated[list[str] | None, typer.Option(
        "--label", help="Must carry this label (repeatable: all of them).")] = None,
    label_any: Annotated[list[str] | None, typer.Option(
        "--label-any", help="Must carry at least one of these labels (repeatable).")] = None,
    assignee: Annotated[str | None, typer.Option(help="Only items assigned to this assignee.")] = None,
    unassigned: Annotated[bool, typer.Option("--unassigned", help="Only items with no assignee.")] = False,
    issue_type: Annotated[str | None, typer.Option("--type", help="Only items of this type.")] = None,
    priority: Annotated[int | None, typer.Option(help="Only items of this priority (0-4).")] = None,
    sort: Annotated[str, typer.Option(
        help="priority (most urgent, then newest first) or oldest (created first).")] = "priority",
    as_json: JsonOption = False,
) -> None:
    """Items ready to work on, by beads' rules, most urgent first."""
    rows = town().ready(rig, limit, labels=label or (), labels_any=label_any or (), assignee=assignee,
                        unassigned=unassigned, issue_type=issue_type, priority=priority, sort=sort)
    emit(RawJSON(rows.lines), as_json, ready_text)


@item_app.command("blocked")
def blocked(
    rig: Annotated[str | None, typer.Argument(help="Rig (default: all rigs).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Blocked items, each with what blocks it (`blocked_by`)."""
    rows = town().blocked(rig)
    emit(RawJSON(rows.lines), as_json, blocked_text)


@item_app.command("update")
def update(
    item_id: Annotated[str, typer.Argument(help="Item id.")],
    status: Annotated[str | None, typer.Option(help="New status.")] = None,
    priority: Annotated[int | None, typer.Option(help="New priority 0–4.")] = None,
    assignee: Annotated[str | None, typer.Option(help="New assignee.")] = None,
    add_label: Annotated[list[str] | None, typer.Option(
        "--add-label", help="Add a label (repeatable).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Change an item's status, priority, assignee or labels."""
    updated = town().update_item(item_id, status=status, priority=priority, assignee=assignee,
                                 add_labels=add_label or ())
    emit(updated.to_json(), as_json, lambda i: f"updated {i['id']}")


@item_app.command("close")
def close(
    item_id: Annotated[str, typer.Argument(help="Item id.")],
    reason: Annotated[str, typer.Option(help="Close reason.")] = "Closed",
    as_json: JsonOption = False,
) -> None:
    """Close an item."""
    emit(town().close_item(item_id, reason).to_json(), as_json, lambda i: f"closed {i['id']}")


@dep_app.command("add")
def dep_add(
    source: Annotated[str, typer.Argument(help="The item that depends (A).")],
    target: Annotated[str, typer.Argument(help="The item depended on (B).")],
    dep_type: Annotated[str, typer.Option("--type", help="Edge type (blocks, parent-child, …).")] = "blocks",
    as_json: JsonOption = False,
) -> None:
    """A depends on B (A is blocked by B for `blocks`); self edges and cycles are refused."""
    row = town().add_dependency(source, target, dep_type)
    verb = "now depends" if row["status"] == "added" else "already depends"
    emit(row.to_json(), as_json, lambda r: f"{shown(source)} {verb} on {shown(target)} ({shown(dep_type)})")


@item_app.command("import")
def import_(
    rig: Annotated[str, typer.Argument(help="Rig whose own store receives the items.")],
    file: Annotated[Path, typer.Argument(help="A beads JSONL export.")],
    as_json: JsonOption = False,
) -> None:
    """Copy a beads export into RIG's own store (upsert by id, tombstones dropped)."""
    emit(town().import_items(rig, file).to_json(), as_json,
         lambda r: f"imported into {r['rig']}: {r['added']} added, {r['updated']} updated,"
         f" {r['skipped_tombstones']} tombstones dropped")


def register(app: typer.Typer) -> None:
    app.add_typer(item_app, name="item")
