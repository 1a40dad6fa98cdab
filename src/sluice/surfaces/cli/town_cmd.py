"""`sluice init`, `sluice rig …`, `sluice config …`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sluice.surfaces.cli.common import JsonOption, emit, town

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
    items: Annotated[
        Path | None, typer.Option(help="Read items from this beads export (read-only).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Register REPO as rig NAME; a `.beads/issues.jsonl` there becomes its read-only item source."""
    emit(town().add_rig(name, repo, prefix, items).to_json(), as_json,
         lambda r: f"rig {r['name']} (prefix {r['prefix']}) → {r['repo']}"
         + (f", items from {r['items']} (read-only)" if r["read_only"] else ""))


@rig_app.command("list")
def rig_list(as_json: JsonOption = False) -> None:
    """List the town's rigs."""
    emit([rig.to_json() for rig in town().rigs()], as_json, lambda rs: "\n".join(
        f"{r['name']:<16} {r['prefix']:<10} {r['repo']}" + ("  (read-only items)" if r["read_only"] else "")
        for r in rs) or "no rigs registered")


@rig_app.command("remove")
def rig_remove(
    name: Annotated[str, typer.Argument(help="Rig name.")],
    force: Annotated[
        bool, typer.Option(help="Remove even with queued contexts; they are closed as rig-removed.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Unregister rig NAME; its store moves to .sluice/removed/, its repository is not touched."""
    emit(town().remove_rig(name, force), as_json, _removed_text)


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
    typer.echo(json.dumps(value) if isinstance(value, (list, dict)) else value)


@config_app.command(
    "set", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
def config_set(
    key: Annotated[str, typer.Argument(help="e.g. scheduler.max_polecats")],
    value: Annotated[str, typer.Argument(help="The new value; `-1` works as typed.")],
) -> None:
    """Set one config value; a bad value is refused naming the key and what it accepts."""
    town().config_set(key, value)
    typer.echo(f"Set {key} = {value}")


def register(app: typer.Typer) -> None:
    app.command("init")(init)
    app.add_typer(rig_app, name="rig")
    app.add_typer(config_app, name="config")
