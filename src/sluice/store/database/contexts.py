"""Sling contexts: the ephemeral records that say "dispatch item X to rig R".

A context is an ephemeral issue record of the *target* rig, kept in the town
database (:mod:`sluice.store.database.db`) in beads' shape: type ``task``, label
``sluice:sling-context``, a ``tracks`` dependency to the work item, and the
Gas Town ``SlingContextFields`` JSON as its description.  Open means
scheduled; closing it (with a reason) ends its life.  The work item itself is
never written.

Everything that makes, changes or finds contexts goes through this module, so
the rules "at most one open context per item" (the ``open_item`` column's
UNIQUE constraint), "close is idempotent" and "a failure is recorded on the
context" live in one place, each change one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from sluice.core.clock import UNDATED, iso, new_id, order_text
from sluice.core.items import (
    CONTEXT_LABEL,
    DEFAULT_PRIORITY,
    dependency,
    is_context,
    priority_of,
)
from sluice.core.recordclass import field, recordclass
from sluice.core.records import SlingContextFields
from sluice.store.database import events

if TYPE_CHECKING:
    from sluice.store.files.town import Town
    from sluice.store.items.rigstore import RigStore

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


#: What a context is read from: its id, rig and description.
_READ = "SELECT id, rig, description FROM issues"
#: The label that makes an ephemeral record a sling context, as a condition on ``issues`` rows.
_LABELLED = "EXISTS (SELECT 1 FROM labels l WHERE l.issue_id = issues.id AND l.label = ?)"
#: Ids bound per statement: under every database's limit on parameters.
_CHUNK = 500


def _chunks(ids: list[str]) -> Iterable[list[str]]:
    for start in range(0, len(ids), _CHUNK):
        yield ids[start:start + _CHUNK]


def _marks(count: int) -> str:
    return ",".join("?" * count)


def _of_ids(ids: list[str], state: str, store: RigStore | None) -> tuple[str, list]:
    """The condition (and its parameters) for records among ``ids`` in ``state`` (an SQL condition on
    ``status``), of ``store``'s rig when one is given."""
    where, params = f"id IN ({_marks(len(ids))}) AND {state}", list(ids)
    if store is not None:
        where += " AND rig = ?"
        params.append(store.rig.name)
    return where, params


# -- reading -------------------------------------------------------------------


def _listing_key(context: Context) -> tuple[bool, str, str]:
    """Valid contexts oldest first (ties by id), then the rest."""
    return (not context.valid, context.order, context.id)


def from_rows(rows: Iterable[tuple[str, str, str]]) -> list[Context]:
    """The contexts read from ``(id, rig, description)`` rows."""
    return [Context(cid, rig, SlingContextFields.from_description(text)) for cid, rig, text in rows]


def open_contexts(town: Town, rigs: Iterable[str] | None = None) -> list[Context]:
    """Open contexts of every rig (or of ``rigs``): valid ones oldest first (ties by id), unparseable
    ones last."""
    rows = town.db.query(f"{_READ} WHERE status = 'open' AND {_LABELLED}", (CONTEXT_LABEL,))
    wanted = None if rigs is None else set(rigs)
    return sorted(from_rows(row for row in rows if wanted is None or row[1] in wanted), key=_listing_key)


def open_of_items(town: Town, item_ids: Iterable[str], valid: bool = True) -> dict[str, list[Context]]:
    """The open contexts of ``item_ids`` in every rig, grouped by item, oldest first; ``valid`` False:
    the invalid ones that name one of them too.  One indexed lookup per few hundred items."""
    found: list[Context] = []
    for ids in _chunks(sorted(set(item_ids))):
        # The status is tested here, not in SQL: there it would lead the planner to walk every open row
        # rather than look the items up.
        rows = town.db.query(f"SELECT id, rig, description, status FROM issues WHERE work_item IN"
                             f" ({_marks(len(ids))}) AND {_LABELLED}", (*ids, CONTEXT_LABEL))
        found += from_rows(row[:3] for row in rows if row[3] == "open")
    out: dict[str, list[Context]] = {}
    for context in sorted(found, key=_listing_key):
        if valid and not context.valid:
            continue
        out.setdefault(context.work_id or "", []).append(context)
    return out


def find_open(town: Town, item_id: str) -> list[Context]:
    """Every open, valid context for ``item_id`` in every rig, oldest first."""
    return open_of_items(town, [item_id]).get(item_id, [])


_RECORD = ("SELECT id, rig, title, description, status, priority, issue_type, created_at, updated_at,"
           " closed_at, close_reason, extra FROM issues")


def records(town: Town, rig: str | None = None, open_only: bool = False,
            ids: Iterable[str] | None = None) -> list[dict]:
    """Ephemeral records as beads JSON objects (the shape of 0.1's ``ephemeral.jsonl`` lines), oldest
    first: a rig's (or every rig's), all or only the open ones, or those of ``ids``."""
    where, params = [], []
    if rig is not None:
        where.append("rig = ?")
        params.append(rig)
    if open_only:
        where.append("status = 'open'")
    if ids is not None:
        found: list[dict] = []
        for chunk in _chunks(list(dict.fromkeys(ids))):
            found += records_where(town, [*where, f"id IN ({_marks(len(chunk))})"], [*params, *chunk])
        return found
    return records_where(town, where, params)


def records_where(town: Town, where: list[str], params: list) -> list[dict]:
    sql = _RECORD + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY seq"
    rows = town.db.query(sql, params)
    if not rows:
        return []
    labels: dict[str, list[str]] = {}
    deps: dict[str, list[dict]] = {}
    for chunk in _chunks([row[0] for row in rows]):
        marks = _marks(len(chunk))
        for issue_id, label in town.db.query(
                f"SELECT issue_id, label FROM labels WHERE issue_id IN ({marks})"
                " ORDER BY issue_id, label", chunk):
            labels.setdefault(issue_id, []).append(label)
        for issue_id, target, kind, created in town.db.query(
                "SELECT issue_id, depends_on_id, type, created_at FROM dependencies"
                f" WHERE issue_id IN ({marks})", chunk):
            deps.setdefault(issue_id, []).append(
                {"issue_id": issue_id, "depends_on_id": target, "type": kind, "created_at": created})
    return [_record(row, labels.get(row[0], []), deps.get(row[0], [])) for row in rows]


def _record(row: tuple, labels: list[str], deps: list[dict]) -> dict:
    (cid, _rig, title, description, status, priority, issue_type, created, updated, closed_at, reason,
     extra) = row
    record = {"id": cid, "title": title, "description": description, "status": status, "priority": priority,
              "issue_type": issue_type, "ephemeral": True, "labels": labels, "dependencies": deps,
              "created_at": created, "updated_at": updated}
    if closed_at is not None:
        record["closed_at"] = closed_at
    if reason is not None:
        record["close_reason"] = reason
    if extra:
        record.update(json.loads(extra))
    return record


def record(town: Town, record_id: str) -> dict | None:
    """One ephemeral record by id, open or closed; None when there is none."""
    found = records(town, ids=[record_id])
    return found[0] if found else None


def rig_of(town: Town, record_id: str) -> str | None:
    row = town.db.one("SELECT rig FROM issues WHERE id = ?", (record_id,))
    return row[0] if row is not None else None


# -- building ----------------------------------------------------------------


class _Ids:
    """Fresh ``<prefix>-wisp-<base36>`` ids of a rig, none of those already used there: every id ever
    drawn (archived ones too: a context id names one context for good), durable items' ids, and the ones
    this batch drew.

    Looked up one by one for a small batch and read once, all of them, for a
    big one (a query per candidate would dominate a big sling).
    """

    BULK = 64

    def __init__(self, store: RigStore, batch: int = 1):
        self.store = store
        self.bulk = batch >= self.BULK
        prefix = f"{store.rig.prefix}-wisp-"
        self.taken = (store.index.ids() | {row[0] for row in store.town.db.query(
            "SELECT id FROM drawn_ids WHERE id >= ? AND id < ?", (prefix, prefix + "\U0010ffff"))}
            if self.bulk else set())

    def __contains__(self, candidate: object) -> bool:
        if candidate in self.taken or self.bulk:
            return candidate in self.taken
        return (self.store.town.db.one("SELECT 1 FROM drawn_ids WHERE id = ?", (str(candidate),)) is not None
                or self.store.index.get_raw(str(candidate)) is not None)

    def draw(self, seed: str) -> str:
        context_id = new_id(f"{self.store.rig.prefix}-wisp", seed, self)
        self.taken.add(context_id)
        return context_id


def build_record(context_id: str, item: dict, fields: SlingContextFields, stamp: str) -> dict:
    """The beads record of a new, open context for ``item``."""
    return {
        "id": context_id,
        "title": (TITLE_PREFIX + str(item.get("title") or ""))[:TITLE_LIMIT],
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


_KNOWN_KEYS = frozenset({"id", "title", "description", "status", "priority", "issue_type", "ephemeral",
                         "labels", "dependencies", "created_at", "updated_at", "closed_at", "close_reason"})


def insert(conn, rig: str, records: Iterable[dict], open_items: set[str] | None = None,
           given: list[SlingContextFields] | None = None) -> None:
    """Write ephemeral records of ``rig`` as they are (a new context, or an old town's record).

    ``open_items``: items already holding an open context (an old town's); a
    record opening another one for them is written outside the constraint.
    ``given``: each record's fields when the caller has them (a sling just
    made them), so no description is parsed again.
    """
    issues, labels, deps, drawn = [], [], [], []
    for position, rec in enumerate(records):
        status = str(rec.get("status") or "open")
        fields = given[position] if given is not None else SlingContextFields.from_description(
            rec.get("description"))
        work = fields.work_bead_id if fields is not None and fields.work_bead_id else None
        target, enqueued, plain = fields.queue_facts() if fields is not None else (None, None, 0)
        extra = {k: v for k, v in rec.items() if k not in _KNOWN_KEYS}
        if rec.get("ephemeral") is not True:
            extra["ephemeral"] = rec.get("ephemeral")
        stamp = str(rec.get("created_at") or iso())
        claimed = _claim(work, status, rec, open_items)
        issues.append((rec["id"], rig, str(rec.get("title") or ""), str(rec.get("description") or ""),
                       status, priority_of(rec) if "priority" in rec else DEFAULT_PRIORITY,
                       str(rec.get("issue_type") or "task"), stamp, str(rec.get("updated_at") or stamp),
                       rec.get("closed_at"), rec.get("close_reason"), work,
                       claimed, json.dumps(extra, ensure_ascii=False) if extra else None, target, enqueued,
                       plain if claimed is not None else 0))
        labels += [(rec["id"], str(label)) for label in dict.fromkeys(rec.get("labels") or ())]
        seen = set()
        for dep in rec.get("dependencies") or ():
            if isinstance(dep, dict) and dep.get("depends_on_id") and dep["depends_on_id"] not in seen:
                seen.add(dep["depends_on_id"])
                deps.append((rec["id"], str(dep["depends_on_id"]), str(dep.get("type") or "blocks"),
                             str(dep.get("created_at") or stamp)))
        drawn.append((rec["id"],))
    conn.executemany(
        "INSERT INTO issues (id, rig, title, description, status, priority, issue_type, created_at,"
        " updated_at, closed_at, close_reason, work_item, open_item, extra, target_rig, enqueued_at, plain)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", issues)
    conn.executemany("INSERT INTO labels (issue_id, label) VALUES (?, ?)", labels)
    conn.executemany("INSERT INTO dependencies (issue_id, depends_on_id, type, created_at)"
                     " VALUES (?, ?, ?, ?)", deps)
    conn.executemany("INSERT INTO drawn_ids (id) VALUES (?) ON CONFLICT (id) DO NOTHING", drawn)


def _claim(work: str | None, status: str, record: dict, open_items: set[str] | None) -> str | None:
    """The ``open_item`` of a record: its work item while it is an open context (once per item)."""
    if work is None or status != "open" or not is_context(record):
        return None
    if open_items is not None:
        if work in open_items:
            return None
        open_items.add(work)
    return work


def create(store: RigStore, specs: list[tuple[dict, SlingContextFields, str]]) -> list[dict]:
    """Write new open contexts, one per ``(item, fields, stamp)``, in one transaction; returns the records.

    Ids are drawn inside the write transaction, so two creators never draw the
    same one; the ``open_item`` constraint refuses a second open context for
    an item, whoever tries.
    """
    if not specs:
        return []
    db = store.town.db
    with db.transaction() as conn:
        ids = _Ids(store, len(specs))
        made = [build_record(ids.draw(item["id"]), item, fields, stamp) for item, fields, stamp in specs]
        insert(conn, store.rig.name, made, given=[fields for _item, fields, _stamp in specs])
        db.advance("queue")
    return made


# -- changing ------------------------------------------------------------------


def close(town, store: RigStore, context_id: str, reason: str, extra: dict | None = None) -> bool:
    """Close a context with ``reason``; False (and no write) if it was already closed.

    Each close that happens is logged as a ``ContextClosed`` event.
    """
    return bool(close_many(town, store, [(context_id, reason, extra)]))


def close_many(town, store: RigStore | None, closes: Iterable[tuple[str, str, dict | None]]) -> list[str]:
    """Close contexts (of ``store``'s rig, or any rig with None), each ``(id, reason, extra)``, in one
    transaction with their ``ContextClosed`` events.

    Idempotent like :func:`close`: an id already closed (or unknown) is left
    alone.  Returns the ids closed now.
    """
    reasons: dict[str, tuple[str, dict | None]] = {}
    for context_id, reason, extra in closes:
        reasons.setdefault(context_id, (reason, extra))
    if not reasons:
        return []
    stamp = iso()
    closed: list[tuple[str, str, str | None]] = []
    with town.db.transaction() as conn:
        for ids in _chunks(list(reasons)):
            where, params = _of_ids(ids, "status NOT IN ('closed', 'tombstone')", store)
            rows = conn.execute(f"SELECT id, rig, work_item FROM issues WHERE {where}", params).fetchall()
            conn.executemany(_CLOSE + "id = ?", [(stamp, stamp, reasons[row[0]][0], row[0]) for row in rows])
            closed += rows
        _closed(town, closed, reasons)
    return [row[0] for row in closed]


_CLOSE = ("UPDATE issues SET status = 'closed', closed_at = ?, updated_at = ?, close_reason = ?,"
          " open_item = NULL, plain = 0 WHERE ")


def _closed(town: Town, rows: list[tuple[str, str, str | None]],
            reasons: dict[str, tuple[str, dict | None]]) -> None:
    """The ``ContextClosed`` events of the contexts ``rows`` (id, rig, item) closed, and the queue's
    version advanced, in the closing transaction; nothing when none closed."""
    if rows:
        town.db.advance("queue")
        events.emit_events(town, [
            (events.CONTEXT_CLOSED, {"context_id": cid, "item_id": work, "rig": rig,
                                     "reason": reasons[cid][0], **(reasons[cid][1] or {})})
            for cid, rig, work in rows])


def close_open(town: Town, reason: str, item_id: str | None = None) -> list[tuple[str, str, str | None]]:
    """Close every open context (or every one of ``item_id``) with ``reason``, in one transaction with
    their ``ContextClosed`` events; returns ``(context id, rig, item)`` of each, oldest first.

    One statement finds them and one closes them: a clear of 100,000 never
    parses a description.
    """
    stamp = iso()
    # A plain row is an open context by construction; only the others need their label looked up.
    where = f"status = 'open' AND (plain = 1 OR {_LABELLED})"
    params: list = [CONTEXT_LABEL]
    if item_id is not None:
        where += " AND work_item = ?"
        params.append(item_id)
    with town.db.transaction() as conn:
        rows = conn.execute(f"SELECT id, rig, work_item FROM issues WHERE {where} ORDER BY seq",
                            params).fetchall()
        if rows:
            conn.execute(_CLOSE + where, [stamp, stamp, reason, *params])
            _closed(town, rows, dict.fromkeys([row[0] for row in rows], (reason, None)))
    return rows


FieldsChange = Callable[[SlingContextFields], SlingContextFields | None]


def update_fields(store: RigStore, context_id: str, change: FieldsChange) -> Context | None:
    """Rewrite an open context's fields; None when it is closed, gone, unparseable or unchanged."""
    return update_fields_many(store, {context_id: change}).get(context_id)


def update_fields_many(store: RigStore | None, changes: dict[str, FieldsChange],
                       town: Town | None = None) -> dict[str, Context]:
    """:func:`update_fields` for many contexts (of one rig, or of any with ``store`` None), in one
    transaction."""
    town = town if town is not None else store.town  # type: ignore[union-attr]
    db = town.db
    written: dict[str, Context] = {}
    with db.transaction() as conn:
        stamp = iso()
        for ids in _chunks(list(changes)):
            where, params = _of_ids(ids, "status = 'open'", store)
            rows = conn.execute(f"{_READ} WHERE {where}", params).fetchall()
            updates = []
            for cid, rig, text in rows:
                fields = SlingContextFields.from_description(text)
                if fields is None:
                    continue
                updated = changes[cid](fields)
                if updated is None:
                    continue
                updates.append((updated.to_description(), stamp, *updated.queue_facts(), cid))
                written[cid] = Context(cid, rig, updated)
            # facts_of NULL: a row plain again is filled anew by the next read (store.database.queue.refresh)
            conn.executemany("UPDATE issues SET description = ?, updated_at = ?, target_rig = ?,"
                             " enqueued_at = ?, plain = ?, facts_of = NULL WHERE id = ?", updates)
        if written:
            db.advance("queue")
    return written


def _setting(**values: str) -> FieldsChange:
    """A change that sets ``values`` on the fields."""

    def change(fields: SlingContextFields) -> SlingContextFields:
        for name, value in values.items():
            setattr(fields, name, value)
        return fields

    return change


def _clearing(name: str) -> FieldsChange:
    """A change that empties the field ``name``; none (no write) when it is empty already."""
    return lambda fields: _setting(**{name: ""})(fields) if getattr(fields, name) else None


def mark_launch(store: RigStore, context_id: str) -> Context | None:
    """Record the launch intent before the executor is asked (crash safety)."""
    return update_fields(store, context_id, _setting(launch_started_at=iso()))


def clear_launch(store: RigStore, context_ids: Iterable[str]) -> dict[str, Context]:
    """Drop the launch intents of contexts whose launch never happened (one write for all)."""
    return update_fields_many(store, dict.fromkeys(context_ids, _clearing("launch_started_at")))


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
    return update_fields_many(store, dict.fromkeys(context_ids, _clearing("missing_since")))


def set_promoted(store: RigStore, context_id: str, stamp: str) -> Context | None:
    """Record (``stamp``) or, with ``""``, withdraw a promotion; None when the context is not open."""
    return update_fields(store, context_id, _setting(promoted_at=stamp))


def record_failure(store: RigStore, context_id: str, error: str) -> Context | None:
    """Count one failed dispatch: failures + 1, the error, when; the launch intent is cleared."""

    def change(fields: SlingContextFields) -> SlingContextFields:
        fields.dispatch_failures += 1
        fields.last_failure = error
        fields.last_failure_at = iso()
        fields.launch_started_at = ""
        return fields

    return update_fields(store, context_id, change)
