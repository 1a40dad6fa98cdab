"""The self-healing circuit breaker (R-H): trip, cool down, try once more (half-open), heal or reset.

A context that failed ``scheduler.max_dispatch_failures`` launches closes
``circuit-broken`` and its item is booked here
(:mod:`sluice.store.database.admission_state`, the ``breaker`` table).  Once ``scheduler.breaker_cooldown``
has passed, :func:`requeue_due` queues it again one failure short of the
threshold — one more failure trips it again, with a longer cooldown; a
launch heals it.  An item whose *runs* failed past
``scheduler.retry_failed_runs`` (:mod:`sluice.scheduler.launch.ends`) is booked
the same way, with ``broken_by: runs``, and comes back for one more run.
``scheduler reset ITEM`` forgets the record and queues the item with a
fresh count.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sluice.errors import InvalidOperation
from sluice.scheduler.queue.requeue import queue_again, sling_params
from sluice.scheduler.session import Session
from sluice.store.database import admission_state as kept
from sluice.store.database import contexts as ctxs
from sluice.store.database import events
from sluice.store.items.rigstore import Stores

if TYPE_CHECKING:
    from sluice.core.records import SlingContextFields
    from sluice.store.files.town import Town


def trip_breaker(town: Town, fields: SlingContextFields, error: str, now: float | None = None,
                 run_failures: int | None = None) -> dict:
    """Book that ``fields``' item was circuit-broken, so a cooldown can bring it back.

    ``run_failures`` given: its runs failed (not its launches), and ``scheduler broken`` says so.
    """
    return kept.trip(
        town, item_id=fields.work_bead_id, rig=fields.target_rig, failures=fields.dispatch_failures,
        last_error=error or fields.last_failure, sling=sling_params(fields),
        base=town.config.scheduler.seconds("breaker_cooldown"), now=time.time() if now is None else now,
        run_failures=fields.run_failures if run_failures is None else run_failures,
        broken_by="launches" if run_failures is None else "runs",
    )


def requeue_due(town: Town, stores: Stores, now: float | None = None) -> list[dict]:
    """Queue every broken item whose cooldown has passed for one attempt (half-open)."""
    now = time.time() if now is None else now
    out = []
    sched = town.config.scheduler
    one_more = max(sched.max_dispatch_failures - 1, 0)
    for entry in kept.due(town, now):
        if entry.get("broken_by") == "runs":  # one more run: another failure breaks it again
            carried, failures = {"run_failures": sched.retry_failed_runs}, 0
        else:
            carried, failures = {}, one_more
        record = queue_again(town, stores, entry["item_id"], entry["rig"], entry.get("sling", {}), failures,
                             **carried)
        kept.mark_half_open(town, entry["item_id"])
        if record is not None:
            payload = {"item_id": entry["item_id"], "rig": entry["rig"], "context_id": record["id"],
                       "why": "breaker-cooldown", "trips": entry.get("trips")}
            events.emit_event(town, events.REQUEUED, payload)
            out.append(payload)
    return out


def reset(where: Town | Session, item_id: str) -> dict:
    """``scheduler reset ITEM``: forget the breaker record and queue the item now with a fresh count."""
    session = Session.of(where)
    town, stores = session.files, session.stores
    entry = kept.broken_entry(town, item_id)
    if entry is None:
        raise InvalidOperation(f"{item_id} is not circuit-broken (see `sluice scheduler broken`)")
    record = queue_again(town, stores, item_id, entry["rig"], entry.get("sling", {}), 0)
    kept.heal(town, item_id)
    if record:
        context_id = record["id"]
    else:
        already = ctxs.find_open(stores.town, item_id)
        context_id = already[0].id if already else None
    events.emit_event(town, events.REQUEUED,
                      {"item_id": item_id, "rig": entry["rig"], "context_id": context_id, "why": "reset"})
    return {"item_id": item_id, "rig": entry["rig"], "context_id": context_id, "reset": True}


def broken_rows(where: Town | Session) -> list[dict]:
    """``scheduler broken``: every circuit-broken item, when it is tried next (None: never by itself)."""
    entries = kept.broken(Session.of(where).files).values()
    return [{"item_id": entry["item_id"], "rig": entry.get("rig"), "failures": entry.get("failures"),
             "dispatch_failures": entry.get("failures"), "run_failures": entry.get("run_failures", 0),
             "broken_by": entry.get("broken_by", "launches"), "last_error": entry.get("last_error"),
             "broken_at": entry.get("broken_at"), "trips": entry.get("trips"),
             "next_attempt_at": entry.get("next_attempt_at"), "half_open": bool(entry.get("half_open"))}
            for entry in sorted(entries, key=lambda e: (e.get("broken_at", ""), e["item_id"]))]
