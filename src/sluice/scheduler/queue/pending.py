"""What the queue holds right now: pending, blocked, stale and mid-launch contexts.

One survey of every rig's open sling contexts, shared by the dispatch cycle,
its dry run, ``scheduler list`` and ``scheduler status``, so they can never
disagree about what is queued or in which order (Gas Town's views drifted
apart: its status counted polecats unlike its dispatcher, and contexts of
missing items were never cleaned).  The survey only reads; the cycle acts on
what it reports.

* **stale** contexts are closed by the cycle's cleanup: unparseable
  (``invalid-context``), breaker tripped (``circuit-broken``), item gone
  for longer than ``scheduler.missing_grace`` (``invalid-work-item``), item
  closed, tombstoned or hooked (``stale-work-item``; a forced context keeps
  a hooked item).
* **held** contexts (reason ``missing-item``) point at an item no rig has
  *right now*, but have not been missing for the grace period yet.  An
  export being rewritten in place (truncated, then written again) loses its
  items for a moment; closing their contexts at once would empty the queue
  for good.  The cycle records ``missing_since`` on a held context the first
  time it sees the item gone and clears it when the item is back.
* **mid-launch** contexts carry a launch intent from a cycle that did not
  finish; the executor's records decide whether the polecat exists
  (close as dispatched) or not (launch again).
* the rest are **queued**, one per item (the oldest context wins), each
  either **ready** (its item is in its store's ready set, or — for a forced
  context — merely unblocked) or **blocked**; both lists are ordered by
  :func:`sluice.scheduler.queue.ranking.rank_work`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sluice.core.clock import iso_epoch
from sluice.core.items import DONE_STATUSES, is_context, parse_ts
from sluice.core.plan import is_circuit_broken, pick_oldest_per_item
from sluice.core.recordclass import field, recordclass
from sluice.errors import StoreCorrupt, UnknownItem
from sluice.scheduler.launch.polecats import is_retry_due
from sluice.scheduler.queue.ranking import Work, rank_work
from sluice.store.database import contexts as ctxs

if TYPE_CHECKING:
    from sluice.executors.base import Polecat
    from sluice.store.database.contexts import Context
    from sluice.store.files.town import Town
    from sluice.store.items.rigstore import RigStore, Stores


@recordclass
class Stale:
    context: Context
    reason: str
    detail: str = ""


#: Why a queued context is held back although it is not stale (shown by list, patrol, the daemon).
MISSING_ITEM = "missing-item"
RIG_UNREADABLE = "rig-unreadable"


@recordclass
class Held:
    """A context whose work item is missing, kept open until ``scheduler.missing_grace`` runs out."""

    context: Context
    reason: str
    since: str | None  # when a cycle first saw the item missing; None: not recorded yet
    closes_at: float | None  # epoch seconds when the grace runs out (None until ``since`` is recorded)
    detail: str | None = None  # rig-unreadable: what cannot be read (file and line)


def held_row(held: Held) -> dict:
    """One held context as the cycle, ``scheduler list`` and patrol report it."""
    context = held.context
    closes_at = iso_epoch(held.closes_at) if held.closes_at is not None else None
    row = {"context_id": context.id, "item_id": context.work_id, "rig": context.rig,
           "reason": held.reason, "missing_since": held.since, "closes_at": closes_at}
    if held.detail is not None:
        row["detail"] = held.detail
    return row


@recordclass
class Survey:
    ready: list[Work] = field(default_factory=list)  # ranked, one per item
    blocked: list[Work] = field(default_factory=list)  # ranked, one per item
    stale: list[Stale] = field(default_factory=list)
    launched: list[tuple[Context, Polecat]] = field(default_factory=list)  # mid-launch, polecat exists
    relaunch: list[Context] = field(default_factory=list)  # mid-launch, no polecat: intent to clear
    duplicates: list[Context] = field(default_factory=list)  # younger contexts of a queued item
    backing_off: list[Work] = field(default_factory=list)  # ready, but a failed launch's backoff runs
    held: list[Held] = field(default_factory=list)  # item missing (within the grace) or its rig unreadable
    reappeared: list[Context] = field(default_factory=list)  # item back: ``missing_since`` to clear
    unreadable: dict[str, str] = field(default_factory=dict)  # rig → the file (and line) it cannot read

    @property
    def queued(self) -> list[Work]:
        return self.ready + self.blocked

    def rig_counts(self) -> dict[str, list[int]]:
        """Target rig → [ready (backing off too), blocked (held too)] of the works and contexts surveyed."""
        counts: dict[str, list[int]] = {}
        for work in self.ready + self.backing_off:
            counts.setdefault(work.rig, [0, 0])[0] += 1
        for rig in [w.rig for w in self.blocked] + [h.context.fields.target_rig for h in self.held]:
            counts.setdefault(rig, [0, 0])[1] += 1
        return counts


def item_store(stores: Stores, item_id: str) -> tuple[RigStore, dict] | None:
    """The store holding a work item and its record, or None when no rig has it."""
    try:
        store = stores.for_id(item_id)
    except UnknownItem:
        return None
    record = store.get(item_id)
    if record is None or is_context(record):
        return None  # a context is never work
    return store, record


def items_of(stores: Stores, contexts: list[Context], now: float
             ) -> dict[str, tuple[RigStore, dict, bool, int | None] | None]:
    """:func:`item_store` for every valid context's item at once, with whether the item is ready
    and its effective tokens when the index keeps them (None: work them out from the record).

    One index query per few hundred ids and rig instead of one per context, so
    a cycle over a long queue pays per query, not per context (docs/performance.md).
    """
    found: dict[str, tuple[RigStore, dict, bool, int | None] | None] = {}
    routed: dict[str, list[str]] = {}
    astray: list[str] = []  # ids whose prefix routes to no rig
    for context in contexts:
        if not context.valid or context.fields is None or context.fields.work_bead_id in found:
            continue
        item_id = context.fields.work_bead_id
        found[item_id] = None
        rig = stores.town.rig_for_id(item_id)
        if rig is None:
            astray.append(item_id)
        else:
            routed.setdefault(rig.name, []).append(item_id)
    for name, ids in routed.items():
        store = stores.rig(name)
        try:
            records, ready, tokens = store.get_many_ready(ids, now)
        except (StoreCorrupt, OSError) as err:  # held, not missing: the item may well be there
            stores.hold_unreadable(name, err)
            found.update((item_id, UNREADABLE) for item_id in ids)
            continue
        astray += [item_id for item_id in ids if item_id not in records]
        for item_id, record in records.items():
            if not is_context(record):  # a context is never work
                found[item_id] = (store, record, item_id in ready, tokens.get(item_id))
    for item_id in astray:  # not where its prefix routes: the search of every rig, as item_store does
        there = item_store(stores, item_id)
        if there is not None:
            found[item_id] = (*there, item_id in there[0].ready_among(now, [item_id]), None)
        elif stores.unreadable:
            found[item_id] = UNREADABLE  # it may be in the rig that cannot be read
    return found


#: What :func:`items_of` says of an item in a rig whose files cannot be read.
UNREADABLE = "unreadable"


def _missing(out: Survey, context: Context, now: float, grace: float) -> None:
    """Hold a context whose item is missing, or call it stale once the grace period is over."""
    fields = context.fields
    assert fields is not None
    since = parse_ts(fields.missing_since)
    if grace <= 0 or (since is not None and now - since >= grace):
        detail = f"item {fields.work_bead_id} not found"
        if since is not None and grace > 0:
            detail += f" since {fields.missing_since}"
        out.stale.append(Stale(context, ctxs.INVALID_WORK_ITEM, detail))
        return
    closes_at = since + grace if since is not None else None
    recorded = fields.missing_since if since is not None else None
    out.held.append(Held(context, MISSING_ITEM, recorded, closes_at))


def survey(
    town: Town,
    stores: Stores,
    max_failures: int,
    active: list[Polecat],
    find: Callable[[str], Polecat | None],
    now: float | None = None,
    backoff: tuple[float, float] | None = None,
    contexts: list[Context] | None = None,
) -> Survey:
    """Classify every open context; see the module docstring.

    With ``backoff`` (retry base and maximum, in seconds) a ready context
    whose last failed launch is too recent is set aside in ``backing_off``
    instead of ``ready``.  The town's ``scheduler.missing_grace`` is how long
    an item may stay missing before its context is stale; 0 makes it stale
    at once.  ``contexts``: survey these
    open contexts instead of every one (:mod:`sluice.scheduler.queue.head` hands
    over the few that are not plain).
    """
    now = time.time() if now is None else now
    missing_grace = town.config.scheduler.seconds("missing_grace")
    out = Survey()
    registered = {rig.name for rig in town.rigs()}
    candidates: list[tuple[Context, RigStore, dict, bool, int | None]] = []
    contexts = ctxs.open_contexts(town) if contexts is None else contexts
    items = items_of(stores, contexts, now)
    for context in contexts:
        if not context.valid:
            out.stale.append(Stale(context, ctxs.INVALID_CONTEXT, "description is not a valid sling context"))
            continue
        fields = context.fields
        assert fields is not None
        if is_circuit_broken(fields.dispatch_failures, max_failures):
            detail = f"{fields.dispatch_failures} failed dispatches"
            out.stale.append(Stale(context, ctxs.CIRCUIT_BROKEN, detail))
            continue
        if fields.target_rig not in registered:
            detail = f"target rig {fields.target_rig!r} is unknown"
            out.stale.append(Stale(context, ctxs.INVALID_CONTEXT, detail))
            continue
        found = items[fields.work_bead_id]
        if found == UNREADABLE:
            rig = stores.town.rig_for_id(fields.work_bead_id)
            name = rig.name if rig is not None and rig.name in stores.unreadable else min(stores.unreadable)
            detail = f"rig {name!r} cannot be read: {stores.unreadable[name]}"
            out.held.append(Held(context, RIG_UNREADABLE, None, None, detail))
            continue
        if found is None:
            _missing(out, context, now, missing_grace)
            continue
        if fields.missing_since:
            out.reappeared.append(context)
        store, item, is_ready, tokens = found
        status = item.get("status", "open")
        if status in DONE_STATUSES or (status == "hooked" and not fields.force):
            out.stale.append(Stale(context, ctxs.STALE_WORK_ITEM, f"item is {status}"))
            continue
        if fields.launch_started_at:
            polecat = find(context.id)
            if polecat is not None:
                out.launched.append((context, polecat))
                continue
            out.relaunch.append(context)
        candidates.append((context, store, item, is_ready, tokens))

    survivors, duplicates = pick_oldest_per_item(
        candidates, item_of=lambda c: c[0].work_id, order_key=lambda c: c[0].order, id_of=lambda c: c[0].id
    )
    out.duplicates = [c[0] for c in duplicates]

    busy_items = {p.item_id for p in active}
    unblocked_sets: dict[str, set[str]] = {}
    ready: list[Work] = []
    blocked: list[Work] = []
    for context, store, item, is_ready, tokens in survivors:
        fields = context.fields
        assert fields is not None
        name = store.rig.name
        if not is_ready and fields.force and item.get("status") in ctxs.PROTECTED_STATUSES:
            # A forced sling bypasses the status guard, not the dependencies.
            if name not in unblocked_sets:
                unblocked_sets[name] = {record["id"] for record, _causes in store.blocked()}
            is_ready = item["id"] not in unblocked_sets[name]
        if item["id"] in busy_items:
            is_ready = False  # a polecat is already on it; the context waits for it to end
        work = Work(item=item, rig=fields.target_rig, order=context.order, context_id=context.id,
                    payload=context, tokens=tokens, promoted_at=fields.promoted_at)
        if is_ready and backoff is not None and not is_retry_due(fields, now, *backoff):
            out.backing_off.append(work)
            continue
        (ready if is_ready else blocked).append(work)
    out.ready = rank_work(town, stores, ready, now=now) if ready else []
    out.blocked = rank_work(town, stores, blocked, now=now) if blocked else []
    out.unreadable = dict(stores.unreadable)
    return out
