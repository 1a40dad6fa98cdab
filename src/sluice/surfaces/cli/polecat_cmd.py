"""`sluice polecat list|stop|logs`: watch and control the town's polecats through its executor."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from sluice.surfaces.cli.common import JsonOption, emit, shown, town
from sluice.surfaces.output import FAILED_OUTCOMES, duration_text

polecat_app = typer.Typer(help="List, stop and read the polecats (worker agents) of the town.",
                          no_args_is_help=True)

RefArgument = Annotated[str, typer.Argument(help="A polecat id, or the id of the item it works on.")]


@polecat_app.command("list")
def polecat_list(
    as_json: JsonOption = False,
    running: Annotated[bool, typer.Option("--running", help="Only the live polecats.")] = False,
) -> None:
    """The running polecats, then the runs that ended in the last hour with outcome and exit status."""
    emit(town().polecats(running=running).to_json(), as_json, _list_text)


def _list_text(rows: list[dict]) -> str:
    if not rows:
        return "No polecats."
    lines = [f"{'ID':<28} {'ITEM':<14} {'RIG':<12} {'STATE':<8} {'PID':>7}  STARTED"]
    live = [r for r in rows if r["state"] in ("running", "pending")]
    for row in live:
        pid = str(row["pid"]) if row["pid"] is not None else "-"
        lines.append(f"{shown(row['id']):<28} {shown(row['item_id']) or '-':<14}"
                     f" {shown(row['rig']) or '-':<12} {row['state']:<8}"
                     f" {pid:>7}  {row['started_at'] or '-'}")
        if row["attach"]:
            lines.append(f"    attach: {row['attach']}")
    ended = [r for r in rows if r not in live]
    if ended:
        lines.append("")
        lines.append(f"Ended (last hour):\n{'ID':<28} {'ITEM':<14} {'RIG':<12} {'STATE':<8} {'OUTCOME':<10}"
                     f" {'EXIT':>5}  RUNTIME")
        for row in ended:
            code = str(row["exit_code"]) if row["exit_code"] is not None else "-"
            mark = "!" if row.get("outcome") in FAILED_OUTCOMES else " "
            lines.append(f"{shown(row['id']):<28} {shown(row['item_id']) or '-':<14}"
                         f" {shown(row['rig']) or '-':<12} {row['state']:<8}"
                         f" {mark}{row.get('outcome') or '-':<9} {code:>5}"
                         f"  {duration_text(row.get('runtime_seconds'))}")
    return "\n".join(lines)


@polecat_app.command("stop")
def polecat_stop(ref: RefArgument, as_json: JsonOption = False) -> None:
    """Stop a polecat (by id) or every running polecat of an item, with its child processes."""
    emit(town().stop_polecat(ref).to_json(), as_json, lambda rows: "\n".join(
        f"Stopped {shown(r['id'])} ({shown(r['item_id']) or 'no item'})" if r["stopped"]
        else f"{shown(r['id'])} ({shown(r['item_id']) or 'no item'}) was not running ({r['state']})"
        for r in rows))


@polecat_app.command("usage")
def polecat_usage(
    ref: RefArgument,
    tokens: Annotated[int, typer.Option("--tokens", help="Tokens the polecat really used.")],
    as_json: JsonOption = False,
) -> None:
    """Report what a polecat really used; it replaces the estimate in the token budget."""
    emit(town().polecat_usage(ref, tokens).to_json(), as_json, lambda d: (
        f"{d['polecat_id']} ({d['item_id']}): {d['tokens']} tokens counted" if d["counted"]
        else f"{d['polecat_id']} ({d['item_id']}): launched outside the budget window; nothing to count"))


@polecat_app.command("logs")
def polecat_logs(
    ref: RefArgument,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until it ends.")] = False,
) -> None:
    """Print a polecat's output (the newest polecat of an item, when given an item id)."""
    for line in town().polecat_logs(ref, follow=follow):
        sys.stdout.write(line + "\n")
        if follow:
            sys.stdout.flush()


def register(app: typer.Typer) -> None:
    app.add_typer(polecat_app, name="polecat")
