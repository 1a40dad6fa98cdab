"""`sluice sling`, `sluice scheduler …`, `sluice daemon`: the dispatcher's commands."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from sluice.errors import UsageError
from sluice.surfaces.cli.common import JsonOption, emit, flag_words, say, shown, town
from sluice.surfaces.output import cycle_text, explain_text, forecast_text, queue_status_text, queue_text

scheduler_app = typer.Typer(
    help="Deferred dispatch: queue status, dispatch cycles, pause, clear. This launches polecats"
    " (advice on what to take next, launching nothing, is `sluice schedule`).",
    no_args_is_help=True,
)


def sling(
    targets: Annotated[list[str] | None, typer.Argument(
        metavar="ITEM... [RIG]", help="Items, epics, convoys; rig last; - reads ids from stdin.")] = None,
    ready: Annotated[str | None, typer.Option(
        "--ready", metavar="RIG", help="Every ready item of RIG.")] = None,
    label: Annotated[list[str] | None, typer.Option(
        "--label", help="Only ready items with this label (repeatable; every rig's unless --ready).")] = None,
    all_rigs: Annotated[bool, typer.Option("--all", help="Every ready item of every rig.")] = False,
    formula: Annotated[str, typer.Option(help="Formula the polecat should apply.")] = "",
    args: Annotated[str, typer.Option("--args", help="Instructions passed to the polecat.")] = "",
    var: Annotated[list[str] | None, typer.Option("--var", help="KEY=VALUE (repeatable).")] = None,
    agent: Annotated[str, typer.Option(help="Agent to run as the polecat.")] = "",
    force: Annotated[bool, typer.Option("--force", help="Override the cross-rig and status guards.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", "-n", help="Say what would happen.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Queue items for dispatch (deferred mode) or launch them now (direct mode)."""
    options = {"formula": formula, "args": args, "vars": var or (), "agent": agent, "force": force,
               "dry_run": dry_run}
    if ready is not None or label or all_rigs:
        if targets:
            raise UsageError("give items, or --ready, --label and --all, not both")
        if ready is not None and all_rigs:
            raise UsageError("give --ready RIG or --all, not both")
        result = town().sling_ready(ready, label or (), **options)
    else:
        if not targets:
            raise UsageError("sling needs items (ITEM... [RIG], or - to read them from stdin),"
                             " or --ready RIG, --label L or --all")
        result = town().sling(_with_stdin(targets), rig_last=True, **options)
    if not as_json:
        for row in result.errors:
            say(f"error: {shown(flag_words(row['error']))}")  # one line, whatever the id holds
    emit(result.to_json(), as_json, _sling_text)
    if not result.ok:
        raise typer.Exit(1)


def retry(
    items: Annotated[list[str] | None, typer.Argument(metavar="[ITEM]...", help="Items to retry.")] = None,
    failed: Annotated[bool, typer.Option("--failed", help="Every item whose latest run failed.")] = False,
    since: Annotated[str | None, typer.Option(
        "--since", help="With --failed: only runs started this recently (1d, 2h).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", "-n", help="Say what would happen.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Queue again the items whose latest run failed, timed out or vanished, named or (--failed) all."""
    if bool(items) == failed:
        raise UsageError("give the items to retry, or --failed for every failed item")
    if since is not None and not failed:
        raise UsageError("--since goes with --failed")
    result = town().retry(items or (), since=since, dry_run=dry_run)
    if not as_json:
        for row in result.errors:
            say(f"error: {shown(flag_words(row['error']))}")
    emit(result.to_json(), as_json, _sling_text)
    if not result.ok:
        raise typer.Exit(1)


def _with_stdin(targets: list[str]) -> list[str]:
    """``targets`` with a ``-`` replaced by the ids read from stdin (whitespace apart, as ``xargs`` reads)."""
    if "-" not in targets:
        return targets
    if targets.count("-") > 1:
        raise UsageError("stdin can be read once: give - once")
    read = sys.stdin.read().split()
    if not read:
        raise UsageError("- read no item id from stdin")
    at = targets.index("-")
    return [*targets[:at], *read, *targets[at + 1:]]


def _sling_text(data: dict) -> str:
    verb = "Would schedule" if data["dry_run"] else "Scheduled"
    lines = [f"{verb} {shown(row['item_id'])} → {row['rig']}"
             + (f" (context {row['context_id']})" if row["context_id"] else "") for row in data["scheduled"]]
    for row in data["already"]:
        how = f"context {row['context_id']}" if row.get("context_id") else f"polecat {row.get('polecat_id')}"
        lines.append(f"Already scheduled {shown(row['item_id'])} ({how}), nothing to do")
        if data["mode"] == "direct" and row.get("context_id"):
            lines.append("  (queued from deferred mode; `sluice scheduler clear --item"
                         f" {shown(row['item_id'])}` to launch it directly)")
    lines += [f"Dispatched {shown(row['item_id'])} → {row['rig']} (polecat {row['polecat_id']})"
              if row["polecat_id"] else f"Would dispatch {shown(row['item_id'])} → {row['rig']}"
              for row in data["dispatched"]]
    lines += [f"Skipped {shown(r['item_id'])}: {flag_words(shown(r['reason']))}" for r in data["skipped"]]
    done = len(data["scheduled"]) + len(data["dispatched"])
    if done + len(data["already"]) > 1 or data["errors"] or data["skipped"]:
        verb = "would be handled" if data["dry_run"] else "handled"
        skipped = f", {len(data['skipped'])} skipped" if data["skipped"] else ""
        lines.append(f"{done + len(data['already'])} item(s) {verb}, {len(data['errors'])} error(s){skipped}"
                     f" ({data['mode']} mode)")
    return "\n".join(lines)


@scheduler_app.command("status")
def status(
    limit: Annotated[int, typer.Option(help="List the first N queued items; 0 = all.")] = 50,
    as_json: JsonOption = False,
) -> None:
    """Pause state, queue size, active polecats, capacity, and when the last forecast drains the queue."""
    emit(town().status(limit).to_json(), as_json, queue_status_text)


@scheduler_app.command("list")
def list_(
    limit: Annotated[int, typer.Option(help="At most N rows; 0 = all.")] = 0,
    offset: Annotated[int, typer.Option(help="Skip the first K rows.")] = 0,
    as_json: JsonOption = False,
) -> None:
    """Queued items in dispatch order (ready first, then blocked), each with its forecast start and finish."""
    emit(town().list(limit, offset).to_json(), as_json, queue_text)


@scheduler_app.command("run")
def run(
    batch: Annotated[int | None, typer.Option(help="At most N launches (default: batch_size).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", "-n", help="Preview; change nothing.")] = False,
    ignore_backoff: Annotated[bool, typer.Option(
        "--ignore-backoff", help="Retry failed launches now, not after their backoff.")] = False,
    item: Annotated[str | None, typer.Option(
        "--item", help="Launch only this item now, if every cap, budget and gate allows.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Run one dispatch cycle now."""
    report = town().run_cycle(batch=batch, dry_run=dry_run, ignore_backoff=ignore_backoff, item=item)
    if not as_json:
        for message in report.messages:
            say(message)
    emit(report.to_json(), as_json, cycle_text)


@scheduler_app.command("pause")
def pause(as_json: JsonOption = False) -> None:
    """Stop dispatch cycles from launching (slinging still queues)."""
    emit(town().pause().to_json(), as_json, lambda d: "Scheduler paused" if d["changed"]
         else f"Scheduler is already paused (by {d['paused_by'] or 'unknown'})")


@scheduler_app.command("resume")
def resume(as_json: JsonOption = False) -> None:
    """Let dispatch cycles launch again."""
    emit(town().resume().to_json(), as_json,
         lambda d: "Scheduler resumed" if d["changed"] else "Scheduler is not paused")


@scheduler_app.command("clear")
def clear(
    item: Annotated[str | None, typer.Option("--item", help="Only this item's contexts (every rig).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Close queued sling contexts (all, or one item's); work items are not touched."""
    emit(town().clear(item).to_json(), as_json, _clear_text)


def _clear_text(data: dict) -> str:
    lines = [f"warning: could not close {row['context_id']}: {row['error']}" for row in data["errors"]]
    if data["item_id"]:
        item = shown(data["item_id"])
        lines.append(f"Removed {item} from the scheduler (closed {data['cleared']} context(s))"
                     if data["cleared"] else f"No sling context found for {item}")
    else:
        lines.append(f"Cleared {data['cleared']} context(s) from the scheduler" if data["cleared"]
                     else "Scheduler is already empty.")
    return "\n".join(lines)


@scheduler_app.command("forecast")
def forecast(
    limit: Annotated[int, typer.Option(help="At most N items; 0 = all.")] = 0,
    as_json: JsonOption = False,
) -> None:
    """When each queued item is expected to start and finish, learned from the run history."""
    emit(town().forecast(limit).to_json(), as_json, forecast_text)


@scheduler_app.command("explain")
def explain(
    item: Annotated[str, typer.Argument(help="The work item to explain.")],
    as_json: JsonOption = False,
) -> None:
    """Would the next cycle launch ITEM, every reason it would not, and when it would start and finish."""
    emit(town().explain(item).to_json(), as_json, explain_text)


@scheduler_app.command("promote")
def promote(
    item: Annotated[str, typer.Argument(help="A queued item.")],
    undo: Annotated[bool, typer.Option("--undo", help="Put it back in score order.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Move a queued item to the head of the dispatch order (caps and gates still apply)."""
    emit(town().promote(item, undo=undo).to_json(), as_json, _promote_text)


def _promote_text(data: dict) -> str:
    item = shown(data["item_id"])
    if not data["promoted"]:
        return f"{item} is back in score order" if data["changed"] else f"{item} was not promoted"
    when = f" (promoted {data['promoted_at']})"
    return (f"{item} goes ahead of score order{when}" if data["changed"]
            else f"{item} was already promoted{when}")


@scheduler_app.command("throttle")
def throttle(
    until: Annotated[str | None, typer.Option(
        "--until", help="TIME (ISO) or DURATION (10m) to hold until.")] = None,
    rig: Annotated[str | None, typer.Option("--rig", help="Only this rig (default: the whole town).")] = None,
    reason: Annotated[str, typer.Option("--reason", help="Why (shown by status and explain).")] = "",
    clear: Annotated[bool, typer.Option("--clear", help="Lift the throttle instead.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Hold new launches (of one rig or the town) until a time; running polecats go on."""
    emit(town().throttle(until=until, rig=rig, reason=reason, clear=clear).to_json(), as_json, _throttle_text)


def _throttle_text(data: dict) -> str:
    who = "the town" if data["rig"] is None else f"rig {data['rig']}"
    if "cleared" in data:
        return f"Throttle on {who} lifted" if data["cleared"] else f"{who} was not throttled"
    return f"New launches of {who} held until {data['until']}"


@scheduler_app.command("broken")
def broken(as_json: JsonOption = False) -> None:
    """Circuit-broken items: failures, last error, and when each is tried again."""
    emit(town().broken().to_json(), as_json, _broken_text)


def _broken_text(rows: list[dict]) -> str:
    if not rows:
        return "No circuit-broken items."
    lines = []
    for row in rows:
        nxt = row["next_attempt_at"] or "never (scheduler.breaker_cooldown is 0)"
        state = "  [half-open: one attempt queued]" if row["half_open"] else ""
        lines.append(f"{shown(row['item_id']):<16} → {shown(row['rig']):<12} {row['failures']} failed,"
                     f" next attempt {nxt}{state}")
        lines.append(f"    last error: {shown(row['last_error'] or '')}")
    return "\n".join(lines)


@scheduler_app.command("reset")
def reset(
    item: Annotated[str, typer.Argument(help="A circuit-broken item.")],
    as_json: JsonOption = False,
) -> None:
    """Queue a circuit-broken item again now, with a fresh failure count."""
    emit(town().reset(item).to_json(), as_json,
         lambda d: f"Queued {shown(d['item_id'])} → {shown(d['rig'])} again"
         + (f" (context {shown(d['context_id'])})" if d["context_id"] else ""))


def compact(
    rig: Annotated[str | None, typer.Option("--rig", help=(
        "Only check this rig's name (its closed contexts are rows: nothing to rewrite)."))] = None,
    as_json: JsonOption = False,
) -> None:
    """Archive the run records that ended before scheduler.compact_retention."""
    emit(town().compact(rig).to_json(), as_json, _compact_text)


def _compact_text(data: dict) -> str:
    runs = data.get("runs")
    if not runs:
        return "Nothing to archive: closed contexts are rows of the town database."
    return (f"run records: {runs['lines_before']} → {runs['lines_after']}"
            f" ({runs['archived']} ended before the retention archived)")


def daemon(
    interval: Annotated[float, typer.Option(help="Seconds between dispatch cycles.")] = 180.0,
    once: Annotated[bool, typer.Option("--once", help="Run one tick and exit.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds a cycle may take before it is killed.")] = 300.0,
) -> None:
    """Run dispatch cycles every INTERVAL seconds and reap finished polecats (one per town)."""
    code = town().daemon(interval=interval, once=once, timeout=timeout)
    sys.stdout.flush()
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("sling")(sling)
    app.command("retry")(retry)
    app.add_typer(scheduler_app, name="scheduler")
    app.command("daemon")(daemon)
    app.command("compact")(compact)
