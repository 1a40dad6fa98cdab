"""Sling contexts: the ephemeral records that say "dispatch item X to rig R".

A context lives in the *target* rig's ``ephemeral.jsonl`` as a beads issue
(type ``task``, ``ephemeral: true``, label ``sluice:sling-context``, a
``tracks`` edge to the work item) whose description is the Gas Town
``SlingContextFields`` JSON.  Open means scheduled; closing it (with a
reason) ends its life.  The work item itself is never written.

Everything that reads or changes contexts goes through this module, so the
rules "last line wins", "close is idempotent" and "a failure is recorded on
the context" live in one place.
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
from sluice.errors import StoreCorrupt
from sluice.store import events, fsutil, openitems, queuedigest
from sluice.store.jsonlog import LogTail, worth_rewriting

if TYPE_CHECKING:
    from sluice.store.rigstore import RigStore, Stores
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
    """

    BULK = 64

    def __init__(self, store: RigStore, existing: Iterable[str], batch: int = 1):
        self.store = store
        self.ids = set(existing)
        self.durable = store.index.ids() if batch >= self.BULK else None

    def __contains__(self, candidate: object) -> bool:
        if candidate in self.ids:
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


def read_fresh(store: RigStore) -> dict[str, dict]:
    """The store's ephemeral records as on disk now, last line winning.

    Only lines appended since this store last read its log are parsed, so a
    long-lived reader (the daemon, the MCP server, a big batch) pays for what
    changed, not for the whole log again.
    """
    return store.ephemeral_fresh()


def _open_contexts_of(store: RigStore, fresh: bool, lean: bool = False, digest: bool = True) -> list[Context]:
    """The rig's open contexts in log order: from its kept digest and the lines appended after it.

    A process that has not read the log yet (every CLI command) takes the open
    contexts from ``<rig>.queue.json`` beside the index, kept at a mark of
    the log (:meth:`LogTail.mark`: how far, and the bytes just before), and
    parses only the lines appended after that mark, instead of every version
    of every context (docs/performance.md); writers never touch the digest,
    so an append costs only what it writes.  A process that has read the log (the daemon's cycle after its
    first read, the MCP server, a writer) reads on from where it was.  ``lean``: a log
    with no digest that fits is read as a stream that keeps only the open contexts
    (:meth:`RigStore.read_lean`), for a caller that needs nothing else of it; ``digest``
    False: that read keeps no digest of them, for a caller about to close them all
    (:func:`keep_digests_after_closes` keeps the one after).
    """
    if store.log_unread():
        kept = _kept_open(store, digest)
        if kept is not None:
            return kept
        if lean:
            return _lean_open(store, digest)
    records = read_fresh(store).values() if fresh else store.ephemeral().values()
    # Closed contexts are most of a long-lived log: skip them before parsing their descriptions.
    found = [parse(store.rig.name, r) for r in records if is_open(r)]
    if store.keeps("queue"):  # this process read the log whole: keep what it found
        at = store.line_offsets()
        _keep_digests(store, store.log_mark(), [(c, at[c.id]) for c in found])
    return found


def _lean_open(store: RigStore, digest: bool = True) -> list[Context]:
    """The open contexts from a read of the log that holds no other record, their digest kept from it
    (``digest``)."""
    name = store.rig.name

    def keep(record: dict) -> Context | None:
        return parse(name, record) if is_open(record) else None

    read = store.read_lean(keep)
    if read is None:
        return []
    kept, mark, at = read
    found = [context for context in kept.values() if context is not None]
    if digest:
        _keep_digests(store, mark, [(c, at[c.id]) for c in found])
    return found


def keep_digests_after_closes(store: RigStore, before: tuple | None, still_open: list[Context]) -> bool:
    """Keep the queue digest, the item map and the log summary of a log whose last lines are this
    process's closes:
    ``still_open`` its open contexts now, ``before`` :meth:`RigStore.summary_at_own_mark` taken
    before the closes.

    For a clear, whose closes would otherwise leave the next reader a digest
    of every context it closed and their closes to parse after it (at
    100,000 contexts, about two seconds and 500 MB of the next command).
    Kept only when the log ends exactly where this store's own last line
    left it (no other writer's line since its read, :meth:`RigStore.own_mark`)
    and each context's line is known; False: nothing kept, the next reader
    starts from whatever fits, as before.  The summary carries over
    unchanged, since a close changes no id and no dependency.  Written like
    any digest: at a mark the log only ever extends, so a line appended
    after it is the next reader's tail.
    """
    mark = store.end_at_own_mark()
    if mark is None:
        return False
    if before is not None:
        store.carry_summary(before[1], mark)
    at = [store.known_offset(c.id) for c in still_open]
    if any(offset is None for offset in at):
        return False
    _keep_digests(store, mark, list(zip(still_open, at, strict=True)))
    return True


def keep_digest_of(store: RigStore, mark: dict, records_at: Iterable[tuple[dict, int]]) -> None:
    """Keep the queue digest and the item map of a log just written whole (compaction): its records, each
    with its line's offset, in the order they stand in the file."""
    name = store.rig.name
    found = [(parse(name, record), at) for record, at in records_at if is_open(record)]
    _keep_digests(store, mark, found)


def is_open(record: dict) -> bool:
    """Whether a log record is an open sling context: what the queue digest holds."""
    return record.get("status", "open") not in DONE_STATUSES and is_context(record)


def _keep_digests(store: RigStore, mark: dict, found: list[tuple[Context, int]]) -> None:
    """Keep the queue digest and the item map of the rig's open contexts ``found`` (each with where its
    latest line starts) as of ``mark``: whoever has them all at hand keeps both."""
    queuedigest.write(store.queue_digest_path, mark, [_row(c, offset) for c, offset in found])
    openitems.write(store.open_items_path, mark,
                    [(c.work_id, c.id, offset) for c, offset in found if c.work_id])


def _row(context: Context, offset: int) -> list:
    return [context.id, context.fields.to_compact() if context.fields is not None else None, offset]


def _kept_open(store: RigStore, digest: bool = True) -> list[Context] | None:
    """The open contexts from the digest and the log's lines after its mark; None: read the log whole.

    The lines after the mark are applied as a whole read would apply them
    (each id's latest version wins; closed or not a context: gone), and the
    result is kept at the new mark, so the next reader starts from there
    (``digest`` False: not by a caller about to close them all).
    """
    kept = queuedigest.rows(store.queue_digest_path)
    if kept is None:
        return None
    mark, rows = kept
    tail = LogTail.resume(store.ephemeral_path, mark)
    if tail is None:
        return None
    name = store.rig.name
    offsets = {row[0]: row[2] for row in rows}
    offsets.update(tail.at)
    store.know_lines(tail.mark(), offsets)
    found = {context_id: Context(context_id, name, SlingContextFields.from_object(data))
             for context_id, data, _at in rows}
    if tail.lines == mark["lines"]:
        return list(found.values())
    for record_id, record in tail.records.items():
        if is_open(record):
            found[record_id] = parse(name, record)
        else:
            found.pop(record_id, None)
    if digest and worth_rewriting(tail.lines - mark["lines"], len(rows)):
        _keep_digests(store, tail.mark(), [(c, offsets[c.id]) for c in found.values()])
    return list(found.values())


def open_contexts(stores: Stores, fresh: bool = False, lean: bool = False, digest: bool = True
                  ) -> list[Context]:
    """Open contexts of every rig: valid ones oldest first (ties by id), unparseable ones last.

    A rig whose log cannot be read (a malformed line, an unreadable file) is
    left out and noted in ``stores.unreadable``: one bad rig does not stop
    the town, and nothing of it is rewritten or closed.  ``lean``: the caller
    needs nothing of the logs but the open contexts (see :func:`_open_contexts_of`).
    """
    found = []
    for store in stores.all():
        try:
            found.extend(_open_contexts_of(store, fresh, lean, digest))
        except (StoreCorrupt, OSError) as err:
            stores.hold_unreadable(store.rig.name, err)
    found.sort(key=_listing_key)
    return found


def _listing_key(context: Context) -> tuple[bool, str, str]:
    """Valid contexts oldest first (ties by id), then the rest: ``(not valid, order, id)``, the
    validity read off the fields directly (one sort key per open context)."""
    fields = context.fields
    return (fields is None or not fields.work_bead_id or not fields.target_rig, context.order, context.id)


def open_by_item(stores: Stores, fresh: bool = True) -> dict[str, list[Context]]:
    """Open, valid contexts grouped by work item, in every rig."""
    out: dict[str, list[Context]] = {}
    for context in open_contexts(stores, fresh):
        if context.valid:
            out.setdefault(context.work_id or "", []).append(context)
    return out


def find_open(stores: Stores, item_id: str) -> list[Context]:
    """Every open, valid context for ``item_id`` in every rig (duplicates included), oldest first."""
    return open_of_items(stores, [item_id]).get(item_id, [])


def open_of_items(stores: Stores, item_ids: Iterable[str], valid: bool = True) -> dict[str, list[Context]]:
    """The open contexts of ``item_ids`` in every rig, grouped by item, oldest first; ``valid`` False:
    the invalid ones that name one of them too.  What :func:`open_by_item` answers for them, as the
    logs stand now, at the cost of those items' contexts and the lines appended since each rig's item
    map (:mod:`sluice.store.openitems`), not of the whole queue."""
    wanted = set(item_ids)
    found: list[Context] = []
    for store in stores.all():
        try:
            found.extend(c for c in _of_items(store, wanted) if c.valid or not valid)
        except (StoreCorrupt, OSError) as err:
            stores.hold_unreadable(store.rig.name, err)
    found.sort(key=_listing_key)
    out: dict[str, list[Context]] = {}
    for context in found:
        out.setdefault(context.work_id or "", []).append(context)
    return out


def _of_items(store: RigStore, wanted: set[str]) -> list[Context]:
    """One rig's open contexts naming an item of ``wanted``, from its item map when one fits; else from
    every open context, whose map is kept for the next lookup."""
    if not wanted or not store.ephemeral_path.exists():
        return []
    found = _from_item_map(store, wanted)
    if found is None and store.log_unread() and _item_map_from_digest(store):
        found = _from_item_map(store, wanted)
    if found is not None:
        return found
    every = _open_contexts_of(store, fresh=True)
    _keep_item_map(store, every)
    return [c for c in every if c.work_id in wanted]


def _item_map_from_digest(store: RigStore) -> bool:
    """Keep the item map made from the queue digest and the lines after its mark; False: no digest fits.

    The digest's rows are not made into contexts (most of what reading the queue costs): a row names
    its item when its fields hold one as text, which every context whose fields parse and name an item
    does (a row whose fields do not parse is in the map too; a lookup reads its line and leaves it out).
    """
    kept = queuedigest.rows(store.queue_digest_path)
    if kept is None:
        return False
    mark, rows = kept
    tail = LogTail.resume(store.ephemeral_path, mark)
    if tail is None:
        return False
    found = [(data["work_bead_id"], context_id, offset) for context_id, data, offset in rows
             if context_id not in tail.records and isinstance(data, dict)
             and isinstance(data.get("work_bead_id"), str) and data["work_bead_id"]]
    opened = [parse(store.rig.name, r) for r in tail.records.values() if is_open(r)]
    found += [(c.work_id, c.id, tail.at[c.id]) for c in opened if c.work_id]
    openitems.write(store.open_items_path, tail.mark(), found)
    return True


def _from_item_map(store: RigStore, wanted: set[str]) -> list[Context] | None:
    """The rig's open contexts of ``wanted`` from its kept map, the lines after its mark and each found
    context's line; None: no map fits (then nothing was changed)."""
    kept = openitems.read(store.open_items_path)
    if kept is None:
        return None
    mark, body = kept
    tail = LogTail.resume(store.ephemeral_path, mark)
    if tail is None:
        return None
    try:
        rows = [row for row in openitems.find(body, wanted) if row[1] not in tail.records]
    except ValueError:
        return None
    name = store.rig.name
    found = [parse(name, r) for r in tail.records.values() if is_open(r)]
    if store.log_unread():
        at_mark = _lines_at(store, [(context_id, offset) for _item, context_id, offset in rows])
        if at_mark is None:
            return None
        if store.read_mark() is None:  # a store that read nothing yet changes what it found at its line
            store.know_lines(tail.mark(), {**{row[1]: row[2] for row in rows}, **tail.at})
    else:  # read already: what is in memory is the log as it stands now
        records = store.ephemeral_fresh()
        at_mark = [records[context_id] for _item, context_id, _offset in rows if context_id in records]
    opened = [parse(name, r) for r in at_mark if is_open(r)]
    if len(opened) != len(rows):  # a line not as the map says: not this log's map
        return None
    if worth_rewriting(tail.lines - mark["lines"], body.count(b"\n") - 1):
        _carry_item_map(store, body, tail, found)
    return [c for c in (*opened, *found) if c.work_id in wanted]


def _lines_at(store: RigStore, places: list[tuple[str, int]]) -> list[dict] | None:
    """The records on the lines at ``places`` (id, offset); None when one is not that id's line."""
    out = []
    with open(store.ephemeral_path, "rb") as fh:
        for context_id, offset in places:
            fh.seek(offset)
            line = fh.readline()
            try:
                record = json.loads(line)
            except ValueError:
                return None
            if not isinstance(record, dict) or record.get("id") != context_id:
                return None
            out.append(record)
    return out


def _carry_item_map(store: RigStore, body: bytes, tail: LogTail, opened: list[Context]) -> None:
    """Keep the map at ``tail``'s end: its lines less the records the tail changed, plus the open
    contexts the tail leaves (``opened``)."""
    try:
        kept = [row for row in openitems.rows(body) if row[1] not in tail.records]
    except ValueError:
        return
    kept += [(c.work_id, c.id, tail.at[c.id]) for c in opened if c.work_id]
    openitems.write(store.open_items_path, tail.mark(), kept)


def _keep_item_map(store: RigStore, every: list[Context]) -> None:
    """Keep the map of ``every`` open context of the rig, as this store has just read them."""
    mark = store.read_mark()
    if mark is None:
        return
    at = store.line_offsets() if not store.log_unread() else None
    rows = []
    for context in every:
        if context.work_id:
            offset = at.get(context.id) if at is not None else store.known_offset(context.id)
            if offset is None:
                return
            rows.append((context.work_id, context.id, offset))
    openitems.write(store.open_items_path, mark, rows)


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
