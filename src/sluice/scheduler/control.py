"""Steering the queue: pause, resume, clear, compact.

``pause`` and ``resume`` only flip the state file (Gas Town R-J); ``clear``
closes contexts and never touches a work item or the state (R-K);
``compact`` rewrites rigs' ephemeral logs (:mod:`sluice.store.compaction`).
Reading the queue is :mod:`sluice.scheduler.queue`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.errors import StoreCorrupt
from sluice.scheduler import chain
from sluice.scheduler.session import Session
from sluice.store import contexts as ctxs
from sluice.store import events, openqueue
from sluice.store import runs as runlog
from sluice.store.compaction import compact as compact_log
from sluice.store.compaction import line_count
from sluice.store.rigstore import Stores
from sluice.store.state import detect_actor, set_paused, set_resumed

if TYPE_CHECKING:
    from sluice.store.rigstore import RigStore
    from sluice.store.town import Town

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


CLEAR_CHUNK = 2_000  # contexts closed per append by a clear


def clear(where: Town | Session, item_id: str | None = None, actor: str | None = None) -> dict:
    """Close every open context (``cleared``), or every one for ``item_id`` in every rig.

    An ``item_id`` that no rig has and no open context names is :class:`UnknownItem`
    (a typo must not read as "nothing to clear"); the contexts of an item that has
    gone missing are still cleared.
    """
    session = Session.of(where)
    town, stores = session.files, session.stores
    closed, failed = [], []
    by_rig: dict[str, list] = {}
    matched = 0
    everything = item_id is None
    # Lean: a log with no digest to start from is read without holding every record (100,000 of them
    # took over 400 MB); the closes then read each context's line where the read found it.  A clear of
    # everything keeps no digest of what it is about to close: it keeps the one after its closes.  A
    # clear of one item finds its contexts in each rig's item map, not among the whole queue.
    if everything:
        found = openqueue.open_contexts(stores, fresh=True, lean=True, digest=False)
    else:
        found = openqueue.open_of_items(stores, [item_id], valid=False).get(item_id, [])
    for context in found:
        matched += 1
        by_rig.setdefault(context.rig, []).append(context)
    if item_id is not None and not matched:
        stores.for_id(item_id)  # raises UnknownItem when no rig has it
    broken: set[str] = set()  # rigs where a chunk failed: what is open there is not known
    before = {store.rig.name: store.summary_at_own_mark() for store in stores.all()} if everything else {}
    for rig_name, found in by_rig.items():
        # A few thousand contexts per lock, read and append: linear in the queue, and a clear of
        # 100,000 holds one chunk's records, lines and events at a time, not all of them.
        for start in range(0, len(found), CLEAR_CHUNK):
            chunk = found[start:start + CLEAR_CHUNK]
            try:
                wanted = [(c.id, ctxs.CLEARED, {"item_id": c.work_id}) for c in chunk]
                done = set(ctxs.close_many(town, stores.rig(rig_name), wanted))
            except OSError as err:
                failed.extend({"context_id": c.id, "error": str(err)} for c in chunk)
                broken.add(rig_name)
                continue
            closed.extend({"context_id": c.id, "item_id": c.work_id, "rig": c.rig}
                          for c in chunk if c.id in done)
    if everything:
        gone = {row["context_id"] for row in closed}
        for store in stores.all():
            name = store.rig.name
            if name not in broken and name not in stores.unreadable:
                openqueue.keep_digests_after_closes(store, before.get(name),
                                               [c for c in by_rig.get(name, ()) if c.id not in gone])
    if closed:
        events.emit_event(town, events.CLEARED, {"item_id": item_id, "count": len(closed),
                                                 "by": actor or detect_actor()})
    return {"item_id": item_id, "cleared": len(closed), "contexts": closed, "errors": failed}


def _compacted(town: Town, store: RigStore, retention: float) -> dict:
    """One rig's log compacted; the last cycle's chain goes with the old file (whose inode the new log,
    or a later one, may take: the chain's marks must not seem to fit it)."""
    row = compact_log(store, retention).to_json()
    chain.forget(town)
    return row


def compact(where: Town | Session, rig: str | None = None) -> dict:
    """Compact every rig's ephemeral log (or ``rig``'s), archiving contexts closed before the retention."""
    session = Session.of(where)
    town, config, stores = session.files, session.config, session.stores
    targets = [stores.rig(town.rig(rig).name)] if rig is not None else stores.all()
    retention = config.scheduler.seconds("compact_retention")
    rows = [_compacted(town, store, retention) for store in targets]
    out = {"retention": config.scheduler.compact_retention, "rigs": rows}
    if rig is None:  # the run log is the town's, archived by the same retention
        out["runs"] = runlog.compact(town, retention).to_json()
    return out


def compact_if_long(town: Town) -> list[dict]:
    """The daemon's housekeeping: compact each rig whose log passed ``scheduler.compact_at`` lines."""
    sched = town.config.scheduler
    if sched.compact_at <= 0:
        return []
    retention = sched.seconds("compact_retention")
    rows = []
    for store in Stores(town).all():
        if line_count(store) <= sched.compact_at:
            continue
        try:
            rows.append(_compacted(town, store, retention))
        except StoreCorrupt:  # a rig that cannot be read is held, never rewritten; the others are compacted
            continue
    if runlog.count(town) > sched.compact_at:
        runs = runlog.compact(town, retention)
        if runs.archived:  # the run records are rows: only an archive is worth a line
            rows.append({"rig": "(run records)", **runs.to_json()})
    return rows
