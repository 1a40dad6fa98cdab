"""`sluice schedule …`: advisory scoring — next, status, policy show|set|unset."""

from __future__ import annotations

from typing import Annotated

import typer

from sluice.core.defaults import NEXT_LIMIT
from sluice.surfaces.cli.common import JsonOption, emit, town
from sluice.surfaces.output import next_text, policy_text, schedule_status_text

schedule_app = typer.Typer(
    help="Advisory scoring: which ready item should go next. Advice only: it launches nothing"
    " (launching queued work is `sluice scheduler`).",
    no_args_is_help=True,
)
policy_app = typer.Typer(help="Show or change the scoring policy.", no_args_is_help=True)
schedule_app.add_typer(policy_app, name="policy")


@schedule_app.command("next")
def next_(
    graph_id: Annotated[str | None, typer.Option(
        "--graph-id", help="Only items under this top-level epic.")] = None,
    limit: Annotated[int, typer.Option(help="How many decisions (skipped ones count).")] = NEXT_LIMIT,
    preview: Annotated[bool, typer.Option("--preview", help="Decide, but record nothing.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Score the ready items of every rig and say which should go next."""
    emit(town().next(limit=limit, graph_id=graph_id, preview=preview).to_json(), as_json, next_text)


@schedule_app.command("status")
def status(
    recent: Annotated[int, typer.Option(help="How many recent decisions to show.")] = 10,
    as_json: JsonOption = False,
) -> None:
    """Policy, ready count, recent decisions (newest first) and merge pressure."""
    emit(town().schedule_status(recent=recent).to_json(), as_json, schedule_status_text)


@policy_app.command("show")
def policy_show(as_json: JsonOption = False) -> None:
    """The scoring policy in force (defaults when there is no policy file)."""
    emit(town().policy().to_json(), as_json, policy_text)


@policy_app.command("set")
def policy_set(
    priority: Annotated[float | None, typer.Option(help="Weight of urgency (4 - priority).")] = None,
    affinity: Annotated[float | None, typer.Option(help="Weight of a warm rig (live worktree).")] = None,
    cost: Annotated[float | None, typer.Option(help="Weight of cheapness, 1/(1 + tokens/1000).")] = None,
    fairness: Annotated[float | None, typer.Option(help="Weight of the least-scheduled rigs.")] = None,
    deadline: Annotated[float | None, typer.Option(
        help="Weight of beads' due_at, 1/(1 + hours until due/24) (default 0: deadlines do not count).")
    ] = None,
    merge_queue_threshold: Annotated[int | None, typer.Option(
        help="Merge-queue depth (>= 1) at which a rig is pressured.")] = None,
    merge_pressure_penalty: Annotated[float | None, typer.Option(
        help="Points a pressured rig loses.")] = None,
    skip_on_merge_pressure: Annotated[
        bool | None,
        typer.Option("--skip-on-merge-pressure/--no-skip-on-merge-pressure",
                     help="Report pressured items as skipped instead of choosing them."),
    ] = None,
    graph_id: Annotated[str | None, typer.Option(
        "--graph-id", help="Set the weights for this graph only (an override).")] = None,
    aging: Annotated[float | None, typer.Option(
        help="Points per hour a queued context has waited (0 = off).")] = None,
    aging_max: Annotated[float | None, typer.Option(help="The most points aging can add.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Change the scoring policy; prints the whole policy."""
    policy = town().set_policy(
        priority=priority, affinity=affinity, cost=cost, fairness=fairness, deadline=deadline,
        merge_queue_threshold=merge_queue_threshold, merge_pressure_penalty=merge_pressure_penalty,
        skip_on_merge_pressure=skip_on_merge_pressure, graph_id=graph_id, aging=aging,
        aging_max=aging_max)
    emit(policy.to_json(), as_json, lambda p: "policy updated\n" + policy_text(p))


@policy_app.command("unset")
def policy_unset(
    graph_id: Annotated[str, typer.Option("--graph-id", help="The graph whose weight overrides go.")],
    as_json: JsonOption = False,
) -> None:
    """Remove one graph's weight overrides (its items use the base weights again); prints the policy."""
    emit(town().unset_policy(graph_id).to_json(), as_json, lambda p: "policy updated\n" + policy_text(p))


def register(app: typer.Typer) -> None:
    app.add_typer(schedule_app, name="schedule")
