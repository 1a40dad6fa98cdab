"""`sluice init`, `sluice rig …`, `sluice config …`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sluice.surfaces.cli.common import JsonOption, emit, town
from sluice.surfaces.output import write_text

rig_app = typer.Typer(help="Register and list rigs (git repositories with work items).", no_args_is_help=True)
config_app = typer.Typer(help="Read and change town configuration.", no_args_is_help=True)


def init(
    path: Annotated[Path, typer.Argument(help="Directory for the new town.")] = Path("."),
    as_json: JsonOption = False,
) -> None:
    """Create a town (`.sluice/config.json`) in PATH; an existing town is left alone."""
    from sluice.api import init_town

    created = init_town(path)
    emit({"town": str(created.root)}, as_json, lambda d: f"town ready at {d['town']}")


@rig_app.command("add")
def rig_add(
    name: Annotated[str, typer.Argument(help="Rig name.")],
    repo: Annotated[Path, typer.Argument(help="Path to the rig's git repository.")],
    prefix: Annotated[str | None, typer.Option(help="Id prefix routed to this rig (default: NAME).")] = None,
    items: Annotated[Path | None, typer.Option(help="Read items from this beads export (read-only).")] = None,
    items_command: Annotated[str | None, typer.Option(
        help="Read items from what this command prints (beads JSONL or a JSON array), e.g. 'bd export';"
             " split like a shell would, never run by one, or a JSON array of argv strings.")] = None,
    watch: Annotated[list[Path] | None, typer.Option(
        help="With --items-command: run it again when this path changes (repeatable; default REPO/.beads).")
    ] = None,
    own_store: Annotated[bool, typer.Option(
        "--own-store",
        help="Give the rig sluice's own item store even though the repository has a beads store.")] = False,
    remote: Annotated[str | None, typer.Option(
        help="URL a workspace on another machine clones the rig from (default: the repository's origin).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Register REPO as rig NAME; a `.beads/issues.jsonl` there becomes its read-only item source.

    A repository with a beads store but no export is refused (it would look
    empty) until --items-command, --items or --own-store says where its items
    are.
    """
    rig = town().add_rig(name, repo, prefix, items, items_command=items_command, watch=watch or (),
                         own_store=own_store, remote=remote)
    emit(rig.to_json(), as_json, _added_text)


def _added_text(r: dict) -> str:
    text = f"rig {r['name']} (prefix {r['prefix']}) → {r['repo']}"
    if r["source"] == "command":
        return text + f", items from `{' '.join(r['items_command'])}` (read-only, kept in {r['items']})"
    return text + (f", items from {r['items']} (read-only)" if r["read_only"] else "")


@rig_app.command("list")
def rig_list(as_json: JsonOption = False) -> None:
    """List the town's rigs; a read-only source behind its beads store is flagged source-stale."""
    emit([rig.to_json() for rig in town().rigs()], as_json, lambda rs: "\n".join(
        f"{r['name']:<16} {r['prefix']:<10} {r['repo']}" + _source_text(r) for r in rs
    ) or "no rigs registered")


def _source_text(r: dict) -> str:
    text = {"own": "", "export": "  (read-only items)", "command": "  (items from a command)"}[r["source"]]
    stale = r["source_stale"]
    return text + (f"\n    source-stale: {stale['detail']}" if stale else "")


@rig_app.command("refresh")
def rig_refresh(
    name: Annotated[str, typer.Argument(help="Rig name.")],
    as_json: JsonOption = False,
) -> None:
    """Run rig NAME's items command now and keep its output (exit 1 naming the command if it fails)."""
    emit(town().refresh_rig(name).to_json(), as_json,
         lambda r: f"rig {r['rig']}: {r['records']} records at {r['ok_at']}")


@rig_app.command("remove")
def rig_remove(
    name: Annotated[str, typer.Argument(help="Rig name.")],
    force: Annotated[bool, typer.Option(
        help="Remove even with queued contexts; they are closed as rig-removed.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Unregister rig NAME; its store moves to .sluice/removed/, its repository is not touched."""
    emit(town().remove_rig(name, force).to_json(), as_json, _removed_text)


def _removed_text(r: dict) -> str:
    lines = [f"rig {r['name']} (prefix {r['prefix']}) removed; {r['repo']} was not touched"]
    lines += [f"  closed {c['context_id']} (item {c['item_id']}, rig-removed)" for c in r["closed"]]
    if r["store"]:
        lines.append(f"  its store was moved to {r['store']}")
    return "\n".join(lines)


@config_app.command("get")
def config_get(key: Annotated[str, typer.Argument(help="e.g. scheduler.max_polecats")]) -> None:
    """Print one config value as a bare scalar (JSON for lists and objects)."""
    import json

    value = town().config_get(key)
    write_text(json.dumps(value) if isinstance(value, (list, dict)) else "" if value is None else str(value))


@config_app.command(
    "set", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
def config_set(
    key: Annotated[str, typer.Argument(help="e.g. scheduler.max_polecats")],
    value: Annotated[str, typer.Argument(help="The new value; `-1` works as typed.")],
) -> None:
    """Set one config value; a bad value is refused naming the key and what it accepts."""
    town().config_set(key, value)
    write_text(f"Set {key} = {value}")


def export(
    rig: Annotated[str | None, typer.Argument(help="Only this rig's records (default: every rig's).")] = None,
    runs: Annotated[bool, typer.Option("--runs", help="The run records instead, as JSON lines.")] = False,
    open_only: Annotated[bool, typer.Option("--open", help="Only open records: the queue.")] = False,
) -> None:
    """Print the town's own records: each rig's sling contexts as beads JSONL (closed ones too), or the
    run records; one JSON object per line, for beads tools, jq and backups."""
    for record in town().export(rig, runs=runs, open_only=open_only).to_json():
        emit(record, True)  # one JSON document per line


def register(app: typer.Typer) -> None:
    app.command("init")(init)
    app.command("export")(export)
    app.add_typer(rig_app, name="rig")
    app.add_typer(config_app, name="config")
