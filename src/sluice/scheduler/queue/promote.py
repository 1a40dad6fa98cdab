"""The operator's word on order: ``scheduler promote ITEM`` and ``scheduler run --item ITEM``.

Score order is right most of the time; when it is not ("P0 waits behind
P2"), the operator says so.  A promotion is written on the item's open sling
context (``promoted_at``), so it survives restarts and every reader of the
queue sees it: the ranking puts promoted contexts first, in the order they
were promoted, and score order follows (:func:`sluice.scheduler.queue.ranking.rank_work`).
``--undo`` withdraws it.  A promotion changes only the order: every cap,
budget, throttle and gate still applies to a promoted item.

``run --item`` (:func:`sluice.scheduler.launch.dispatch.run_cycle` with ``item``)
is the same wish for right now: launch that one item in a cycle of its own,
if admission lets it — otherwise :class:`~sluice.errors.NotAdmitted` carries
the reasons, the same ones ``explain`` gives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.core.clock import iso
from sluice.errors import InvalidOperation
from sluice.scheduler.session import Session
from sluice.store.database import contexts as ctxs
from sluice.store.database import events

if TYPE_CHECKING:
    from sluice.store.files.town import Town


def promote(where: Town | Session, item_id: str, undo: bool = False) -> dict:
    """Move ``item_id``'s open context to the head of the dispatch order (``undo``: back to score order)."""
    session = Session.of(where)
    town, stores = session.files, session.stores
    found = sorted(ctxs.find_open(stores.town, item_id), key=lambda c: (c.order, c.id))
    if not found:
        stores.for_id(item_id)  # UnknownItem for a typo, before "not queued"
        raise InvalidOperation(f"{item_id} has no open sling context"
                               f" (`sluice sling {item_id} RIG` queues it)")
    context = found[0]  # the one the cycle dispatches (oldest wins)
    was = context.fields.promoted_at if context.fields is not None else ""
    stamp = "" if undo else (was or iso())  # promoting twice keeps the first place in line
    changed = stamp != was
    if changed:
        updated = ctxs.set_promoted(stores.rig(context.rig), context.id, stamp)
        if updated is None:
            raise InvalidOperation(f"{item_id}'s context {context.id} closed meanwhile")
        events.emit_event(town, events.PROMOTED, {"item_id": item_id, "context_id": context.id,
                                                  "rig": context.rig, "undo": undo})
    return {"item_id": item_id, "context_id": context.id, "rig": context.rig,
            "promoted": not undo, "promoted_at": stamp or None, "changed": changed}
