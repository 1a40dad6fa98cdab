"""Steering the queue: pause, resume, clear, compact.

``pause`` and ``resume`` only flip the state file (Gas Town R-J); ``clear``
closes contexts and never touches a work item or the state (R-K);
``compact`` archives old run records.
Reading the queue is :mod:`sluice.scheduler.queue.views`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.scheduler.session import Session
from sluice.store.database import contexts as ctxs
from sluice.store.database import events
from sluice.store.database import runs as runlog
from sluice.store.database.state import detect_actor, set_paused, set_resumed

if TYPE_CHECKING:
    from sluice.store.files.town import Town

# Every control command opens its session first, which reads the config: a corrupt file is an
# error, never a default.


def pause(where: Town | Session, actor: str | None = None) -> dict:
    town = Session.of(where).files
    state, changed = set_paused(town, actor)
    if changed:
        events.emit_event(town, events.PAUSED, {"by": state.paused_by})
    return {"paused": True, "paused_by": state.paused_by, "paused_at": state.paused_at, "changed": changed}


def resume(where: Town | Session, actor: str | None = None) -> dict:
    town = Session.of(where).files
    _state, changed = set_resumed(town)
    if changed:
        events.emit_event(town, events.RESUMED, {"by": actor or detect_actor()})
    # The keys of `pause`, so a caller reads one shape: after a resume nobody has it paused.
    return {"paused": False, "paused_by": None, "paused_at": None, "changed": changed}


def clear(where: Town | Session, item_id: str | None = None, actor: str | None = None) -> dict:
    """Close every open context (``cleared``), or every one for ``item_id`` in every rig, in one
    transaction with its events: all of them are closed, or none and the error says why.

    An ``item_id`` that no rig has and no open context names is :class:`UnknownItem`
    (a typo must not read as "nothing to clear"); the contexts of an item that has
    gone missing are still cleared.
    """
    session = Session.of(where)
    town, stores = session.files, session.stores
    with town.db.transaction():
        rows = ctxs.close_open(town, ctxs.CLEARED, item_id)
        if item_id is not None and not rows:
            stores.for_id(item_id)  # raises UnknownItem when no rig has it
        closed = [{"context_id": cid, "item_id": work, "rig": rig} for cid, rig, work in rows]
        if closed:
            events.emit_event(town, events.CLEARED, {"item_id": item_id, "count": len(closed),
                                                     "by": actor or detect_actor()})
    return {"item_id": item_id, "cleared": len(closed), "contexts": closed, "errors": []}


def compact(where: Town | Session, rig: str | None = None) -> dict:
    """Archive the run records ended before the retention.  Closed contexts stay in the town database
    (nothing is rewritten for them: they are rows, and the queue's queries never read them)."""
    session = Session.of(where)
    town, config = session.files, session.config
    if rig is not None:
        town.rig(rig)  # an unknown rig is an error, as before
    retention = config.scheduler.seconds("compact_retention")
    out = {"retention": config.scheduler.compact_retention, "rigs": []}
    if rig is None:  # the run log is the town's, archived by the same retention
        out["runs"] = runlog.compact(town, retention).to_json()
    return out


def compact_if_long(town: Town) -> list[dict]:
    """The daemon's housekeeping: archive old run records once the town keeps more than
    ``scheduler.compact_at`` of them."""
    sched = town.config.scheduler
    if sched.compact_at <= 0 or runlog.count(town) <= sched.compact_at:
        return []
    runs = runlog.compact(town, sched.seconds("compact_retention"))
    # The run records are rows: only an archive is worth a line.
    return [{"rig": "(run records)", **runs.to_json()}] if runs.archived else []
