"""Sling contexts: the ephemeral records that say "dispatch item X to rig R".

A context lives in the *target* rig's ``ephemeral.jsonl`` as a beads issue
(type ``task``, ``ephemeral: true``, label ``sluice:sling-context``, a
``tracks`` edge to the work item) whose description is the Gas Town
``SlingContextFields`` JSON.  Open means scheduled; closing it (with a
reason) ends its life.  The work item itself is never written.

Everything that makes or changes contexts goes through this module, so the
rules "last line wins", "close is idempotent" and "a failure is recorded on
the context" live in one place; reading the open queue from what is kept of
it is :mod:`sluice.store.openqueue`'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core.clock import UNDATED, iso, new_id, order_text
from sluice.core.items import (
    CONTEXT_LABEL,
    DEFAULT_PRIORITY,
    DONE_STATUSES,
    dependency,
    is_context,
    priority_of,
)
from sluice.core.recordclass import field, recordclass
from sluice.core.records import SlingContextFields
from sluice.store import events, fsutil
from sluice.store.archiveids import ArchivedIds

if TYPE_CHECKING:
    from sluice.store.rigstore import RigStore
    from sluice.store.town import Town

SLING_LOCK = "sling"  # town-wide: held by a deferred sling from its check to its append
SLING_LOCK_WAIT = 120.0  # seconds; a sling of 100,000 items holds the lock for a few seconds
TITLE_PREFIX = "sling-context: "
TITLE_LIMIT = 200  # characters, so a multi-byte title is never split inside a character
PROTECTED_STATUSES = frozenset({"hooked", "in_progress", "pinned"})

# Close reasons (Gas Town's, with "bead" spelled "item").
DISPATCHED = "dispatched"
CIRCUIT_BROKEN = "circuit-broken"
CLEARED = "cleared"
INVALID_CONTEXT = "invalid-context"
STALE_WORK_ITEM = "stale-work-item"
INVALID_WORK_ITEM = "invalid-work-item"
DISPATCH_CLOSE_FAILED = "dispatch-close-failed"


def sling_lock(town: Town) -> fsutil.FileLock:
    """The town's sling lock: whoever checks for an open context and then creates one holds it throughout.

    A deferred sling and every re-queue (the breaker, a throttle exit, a
    reset) take it, so two of them never both find no context and both add one.
    """
    return fsutil.file_lock(town.lock_path(SLING_LOCK), timeout=SLING_LOCK_WAIT)


@recordclass
class Context:
    """One open context as read: its id, its rig and its parsed fields (None when unparseable)."""

    id: str
    rig: str  # the rig whose store holds the record
    fields: SlingContextFields | None

    @property
    def valid(self) -> bool:
        return self.fields is not None and bool(self.fields.work_bead_id) and bool(self.fields.target_rig)

    @property
    def work_id(self) -> str | None:
        return self.fields.work_bead_id if self.fields is not None else None

    @property
    def failures(self) -> int:
        return self.fields.dispatch_failures if self.fields is not None else 0

    #: ``enqueued_at`` normalised to sluice's UTC format, so string order is time order.  Worked out
    #: as the context is read: a survey sorts and groups every context by it, and a lazy property's
    #: first read cost more than the normalising itself.
    order: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.order = order_text(self.fields.enqueued_at if self.fields is not None else "")


def parse(rig: str, record: dict) -> Context:
    return Context(record["id"], rig, SlingContextFields.from_description(record.get("description")))


# -- building ----------------------------------------------------------------


class _Taken:
    """Ids already used in a store, plus the ones a batch is about to add.

    Durable ids are looked up one by one for a small batch and read once, all
    of them, for a big one (a query per candidate would dominate a big sling).
    The ids compaction archived count as used too: a context id names one
    context for good, in the archive, the events and the run records.
    """

    BULK = 64

    def __init__(self, store: RigStore, existing: Iterable[str], batch: int = 1):
        self.store = store
        self.ids = set(existing)
        self.durable = store.index.ids() if batch >= self.BULK else None
        self.archived = ArchivedIds(store.ephemeral_path.parent, store.lock_path, bulk=batch >= self.BULK)

    def __contains__(self, candidate: object) -> bool:
        if candidate in self.ids or candidate in self.archived:
            return True
        if self.durable is not None:
            return candidate in self.durable
        return self.store.index.get_raw(str(candidate)) is not None


def id_allocator(store: RigStore, existing: Iterable[str], batch: int = 1) -> Callable[[str], str]:
    """A function giving fresh ``<prefix>-wisp-<base36>`` ids in ``store``; ``batch``: how many."""
    taken = _Taken(store, existing, batch)

    def allocate(seed: str) -> str:
        context_id = new_id(f"{store.rig.prefix}-wisp", seed, taken)
        taken.ids.add(context_id)
        return context_id

    return allocate


def context_title(item_title: str) -> str:
    return (TITLE_PREFIX + (item_title or ""))[:TITLE_LIMIT]


def build_record(context_id: str, item: dict, fields: SlingContextFields, stamp: str) -> dict:
    """The beads record of a new, open context for ``item``."""
    return {
        "id": context_id,
        "title": context_title(str(item.get("title") or "")),
        "description": fields.to_description(),
        "status": "open",
        "priority": priority_of(item) if "priority" in item else DEFAULT_PRIORITY,
        "issue_type": "task",
        "ephemeral": True,
        "labels": [CONTEXT_LABEL],
        "dependencies": [dependency(context_id, item["id"], "tracks", stamp)],
        "created_at": stamp,
        "updated_at": stamp,
    }


# -- reading -------------------------------------------------------------------


def is_open(record: dict) -> bool:
    """Whether a log record is an open sling context: what the queue digest holds."""
    return record.get("status", "open") not in DONE_STATUSES and is_context(record)



# -- changing ------------------------------------------------------------------


def close(town, store: RigStore, context_id: str, reason: str, extra: dict | None = None) -> bool:
    """Close a context with ``reason``; False (and no write) if it was already closed.

    Each close that happens is logged as a ``ContextClosed`` event.
    """
    return bool(close_many(town, store, [(context_id, reason, extra)]))


def close_many(town, store: RigStore, closes: Iterable[tuple[str, str, dict | None]]) -> list[str]:
    """Close contexts of one rig, each ``(id, reason, extra)``, with one lock, one read and one append.

    Idempotent like :func:`close`: an id already closed (or unknown) is left
    alone.  Returns the ids closed now, each logged as a ``ContextClosed``
    event (all in one append to the event log).
    """
    stamp = iso()
    reasons: dict[str, tuple[str, dict | None]] = {}
    for context_id, reason, extra in closes:
        reasons.setdefault(context_id, (reason, extra))
    ways = {reason: _closing(stamp, reason) for reason in {reason for reason, _extra in reasons.values()}}
    written = store.update_ephemeral_many({cid: ways[reason][0] for cid, (reason, _e) in reasons.items()},
                                          {cid: ways[reason][1] for cid, (reason, _e) in reasons.items()})
    batch = []
    for context_id, record in written.items():
        reason, extra = reasons[context_id]
        if extra and "item_id" in extra:  # the caller knows it: 100,000 descriptions need not be parsed again
            item = extra["item_id"]
        else:
            if isinstance(record, str):  # closed from its line's text
                record = json.loads(record)
            fields = SlingContextFields.from_description(record.get("description"))
            item = fields.work_bead_id if fields else None
        batch.append((events.CONTEXT_CLOSED, {
            "context_id": context_id,
            "item_id": item,
            "rig": store.rig.name,
            "reason": reason,
            **(extra or {}),
        }))
    events.emit_events(town, batch)
    return list(written)


def _closing(stamp: str, reason: str) -> tuple[Callable[[dict], dict | None], Callable[[str], str | None]]:
    """A close, as a change of the record and as the same change made to its line's text.

    The line's way spares parsing and encoding again the line of every
    context closed (most of what a clear of 100,000 cost); it applies only
    to a line of :func:`build_record`'s shape, and any other line is parsed.
    """

    def change(record: dict) -> dict | None:
        if record.get("status") in DONE_STATUSES:
            return None
        record.update(status="closed", closed_at=stamp, updated_at=stamp, close_reason=reason)
        return record

    suffix = closed_suffix(stamp, reason)
    return change, lambda text: closed_line(text, suffix)


#: One JSON string, exactly as the grammar has it (so a line that matches is valid JSON); possessive,
#: so a line that does not match fails at once rather than after backtracking.
_STRING = r'"[^"\\\x00-\x1f]*+(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*+)*+"'
@cache
def _open_line() -> re.Pattern:
    """The whole line :func:`build_record` makes (as :func:`~sluice.store.jsonlog.line_text` writes it),
    open, with any strings: its ``"status":"open"`` and its ``updated_at`` value are the groups.
    Compiled by the first close (about 1 ms, which a read-only view never spends)."""
    return re.compile(
        r'\{"id":<s>,"title":<s>,"description":<s>,("status":"open"),"priority":[0-4],"issue_type":"task",'
        r'"ephemeral":true,"labels":\["sluice:sling-context"\],'
        r'"dependencies":\[\{"issue_id":<s>,"depends_on_id":<s>,"type":"tracks","created_at":<s>\}\],'
        r'"created_at":<s>,"updated_at":(<s>)\}'.replace("<s>", _STRING))


def closed_suffix(stamp: str, reason: str) -> str:
    """What a close writes after ``"updated_at":``: the stamp, then the two keys it adds."""
    text = json.dumps(stamp, ensure_ascii=False)
    return f'{text},"closed_at":{text},"close_reason":{json.dumps(reason, ensure_ascii=False)}}}'


def closed_line(text: str, suffix: str) -> str | None:
    """The closed version of an open context's line of :func:`build_record`'s shape; None for any other line.

    The same line the record's close writes after a parse (status closed,
    ``updated_at`` the stamp, ``closed_at`` and ``close_reason`` added at
    the end), made by replacing the two values in place: the pattern holds
    the whole line's grammar, so only a line whose keys are those, in that
    order, is patched, and every other one is parsed and re-encoded.
    """
    match = _open_line().fullmatch(text)
    if match is None:
        return None
    return f'{text[:match.start(1)]}"status":"closed"{text[match.end(1):match.start(2)]}{suffix}'


FieldsChange = Callable[[SlingContextFields], SlingContextFields | None]


def _on_fields(change: FieldsChange) -> Callable[[dict], dict | None]:
    """A change of an open context's record made from a change of its fields."""

    def apply(record: dict) -> dict | None:
        if record.get("status") in DONE_STATUSES:
            return None
        fields = SlingContextFields.from_description(record.get("description"))
        if fields is None:
            return None
        updated = change(fields)
        if updated is None:
            return None
        record["description"] = updated.to_description()
        record["updated_at"] = iso()
        return record

    return apply


def update_fields(store: RigStore, context_id: str, change: FieldsChange) -> Context | None:
    """Rewrite an open context's fields; None when it is closed, gone, unparseable or unchanged."""
    return update_fields_many(store, {context_id: change}).get(context_id)


def update_fields_many(store: RigStore, changes: dict[str, FieldsChange]) -> dict[str, Context]:
    """:func:`update_fields` for many contexts of one rig: one lock, one read, one append."""
    written = store.update_ephemeral_many({cid: _on_fields(change) for cid, change in changes.items()})
    return {cid: parse(store.rig.name, record) for cid, record in written.items()}


def mark_launch(store: RigStore, context_id: str) -> Context | None:
    """Record the launch intent before the executor is asked (crash safety)."""

    def change(fields: SlingContextFields) -> SlingContextFields:
        fields.launch_started_at = iso()
        return fields

    return update_fields(store, context_id, change)


def clear_launch(store: RigStore, context_ids: Iterable[str]) -> dict[str, Context]:
    """Drop the launch intents of contexts whose launch never happened (one write for all)."""

    def change(fields: SlingContextFields) -> SlingContextFields | None:
        if not fields.launch_started_at:
            return None
        fields.launch_started_at = ""
        return fields

    return update_fields_many(store, dict.fromkeys(context_ids, change))


def mark_missing(store: RigStore, context_ids: Iterable[str], stamp: str) -> dict[str, Context]:
    """Record when each context's item was first found missing; an earlier record is kept."""

    def change(fields: SlingContextFields) -> SlingContextFields | None:
        if fields.missing_since and order_text(fields.missing_since)[0] != UNDATED:
            return None  # written once: the grace period runs from the first sighting
        fields.missing_since = stamp
        return fields

    return update_fields_many(store, dict.fromkeys(context_ids, change))


def clear_missing(store: RigStore, context_ids: Iterable[str]) -> dict[str, Context]:
    """The items are back: forget when they went missing, so a later loss starts a fresh grace period."""

    def change(fields: SlingContextFields) -> SlingContextFields | None:
        if not fields.missing_since:
            return None
        fields.missing_since = ""
        return fields

    return update_fields_many(store, dict.fromkeys(context_ids, change))


def set_promoted(store: RigStore, context_id: str, stamp: str) -> Context | None:
    """Record (``stamp``) or, with ``""``, withdraw a promotion; None when the context is not open."""

    def change(fields: SlingContextFields) -> SlingContextFields:
        fields.promoted_at = stamp
        return fields

    return update_fields(store, context_id, change)


def record_failure(store: RigStore, context_id: str, error: str) -> Context | None:
    """Count one failed dispatch: failures + 1, the error, when; the launch intent is cleared."""

    def change(fields: SlingContextFields) -> SlingContextFields:
        fields.dispatch_failures += 1
        fields.last_failure = error
        fields.last_failure_at = iso()
        fields.launch_started_at = ""
        return fields

    return update_fields(store, context_id, change)


def creation_lock_path(store: RigStore) -> Path:
    return store.town.runtime / "locks" / f"contexts-{store.rig.name}.lock"


def create(store: RigStore, specs: list[tuple[dict, SlingContextFields, str]]) -> list[dict]:
    """Write new open contexts, one per ``(item, fields, stamp)``, in one append; returns the records.

    Ids are picked and written under the rig's creation lock, from a fresh read
    of its log, so two creators never pick the same id from the same snapshot
    (the later line would silently replace the other's context).
    """
    if not specs:
        return []
    with fsutil.file_lock(creation_lock_path(store)):
        allocate = id_allocator(store, store.log_ids(), len(specs))
        records = [build_record(allocate(item["id"]), item, fields, stamp) for item, fields, stamp in specs]
        store.put_ephemeral_many(records)
    return records
