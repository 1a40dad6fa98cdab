"""The small item tracker: what `sluice item …` does (a rig's life is :mod:`sluice.store.items.rigs`).

Scheduling never writes an item; only these functions do, and only in rigs
that keep their own store.  Rigs whose items come from a beads export are
read here and refused for writes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from sluice.core.clock import iso, new_id
from sluice.core.defaults import READY_LIMIT
from sluice.core.items import STATUSES, ReadyFilter, dependency, labels_of, normalise
from sluice.core.readiness import id_prefix
from sluice.core.recordclass import recordclass
from sluice.errors import InvalidOperation, MissingFile, UnknownItem, UsageError
from sluice.store.database import contexts as ctxs
from sluice.store.files.town import Town
from sluice.store.items.rigstore import RigStore, Stores, ensure_no_cycle, read_jsonl


@recordclass
class NewItem:
    title: str
    priority: int = 2
    issue_type: str = "task"
    labels: tuple[str, ...] = ()
    deps: tuple[str, ...] = ()  # "ID" (blocks) or "TYPE:ID"
    parent: str | None = None
    description: str = ""
    tokens: int | None = None
    assignee: str = ""
    touches: tuple[str, ...] = ()  # metadata.touches: path globs the work will edit (the overlap gate)


def _parse_dep(spec: str) -> tuple[str, str]:
    typed = ":" in spec and not spec.startswith("external:")
    dep_type, target = spec.split(":", 1) if typed else ("blocks", spec)
    if not dep_type or not target.strip():
        raise UsageError(f"deps {spec!r}: expected ID or TYPE:ID", parameters=("deps",))
    return dep_type, target


def validate_title(title: str) -> str:
    if not title or not title.strip():
        raise UsageError("an item needs a non-empty title", parameters=("title",))
    if len(title) > 500:
        raise UsageError(f"title is {len(title)} characters; beads allows at most 500")
    return title


def validate_priority(priority: int) -> int:
    if not 0 <= priority <= 4:
        raise UsageError(f"priority must be 0–4 (0 is most urgent), got {priority}")
    return priority


def create_item(town: Town, rig_name: str, spec: NewItem) -> dict:
    stores = Stores(town)
    store = stores.rig(rig_name)
    validate_title(spec.title)
    validate_priority(spec.priority)
    if spec.tokens is not None and spec.tokens < 0:
        raise UsageError("tokens must be >= 0", parameters=("tokens",))
    for glob in spec.touches:
        if not glob.strip() or "\x00" in glob:
            raise UsageError(f"touches must be non-empty path globs (got {glob!r})", parameters=("touches",))
    edges = [_parse_dep(d) for d in spec.deps]
    if spec.parent:
        edges.append(("parent-child", spec.parent))
    edges = list(dict.fromkeys(edges))
    types_by_target: dict[str, str] = {}
    for dep_type, target in edges:
        if types_by_target.setdefault(target, dep_type) != dep_type:
            raise UsageError(
                f"one edge per pair: {target} given as both {types_by_target[target]!r} and {dep_type!r}"
            )
    for _dep_type, target in edges:
        local = not target.startswith("external:") and id_prefix(target) == id_prefix(store.rig.prefix + "-x")
        if local and store.get(target) is None:
            raise UnknownItem(f"dependency target {target!r} does not exist in rig {rig_name!r}")

    def change(records: list[dict]) -> dict:
        taken = {r["id"] for r in records}
        stamp = iso()
        item_id = new_id(store.rig.prefix, spec.title, taken)
        record: dict = {
            "id": item_id,
            "title": spec.title,
            "status": "open",
            "priority": spec.priority,
            "issue_type": spec.issue_type or "task",
            "created_at": stamp,
            "updated_at": stamp,
        }
        if spec.description:
            record["description"] = spec.description
        if spec.assignee:
            record["assignee"] = spec.assignee
        if spec.labels:
            record["labels"] = list(dict.fromkeys(spec.labels))
        if spec.tokens is not None:
            record["metadata"] = {"estimated_tokens": spec.tokens}
        if spec.touches:
            record.setdefault("metadata", {})["touches"] = list(spec.touches)
        if edges:
            record["dependencies"] = [dependency(item_id, target, kind, stamp) for kind, target in edges]
        records.append(record)
        return record

    return store.mutate_durable(change)


def show_item(town: Town, item_id: str) -> dict:
    return Stores(town).find(item_id)[1]


def list_items(town: Town, rig: str | None, status: str | None, labels: tuple[str, ...] = ()) -> list[dict]:
    stores = Stores(town)
    chosen = [stores.rig(rig)] if rig else stores.all()
    if status is not None and status not in STATUSES:
        raise UsageError(f"unknown status {status!r} (one of {', '.join(STATUSES)})")
    where, params = ("status = ?", [status]) if status else ("", [])
    return [record for store in chosen for record in store.durable(where, params)
            if all(label in labels_of(record) for label in labels)]


SORTS = ("priority", "oldest")


def ready(town: Town, rig: str | None = None, limit: int = READY_LIMIT, now: float | None = None,
          where: ReadyFilter | None = None, sort: str = "priority") -> list[str]:
    """Raw JSON of ready items over one or all rigs, in beads order (limit 0 = all).

    ``where`` keeps only the items its filters match (``bd ready``'s
    ``--label`` … ``--priority``); ``sort`` ``oldest`` orders by
    ``created_at`` ascending, then id, instead of urgency (R10).
    """
    if limit < 0:
        raise UsageError("limit must be >= 0 (0 = all)", parameters=("limit",))
    if sort not in SORTS:
        raise UsageError(f"sort must be one of {', '.join(SORTS)} (got {sort!r})", parameters=("sort",))
    if where is not None and where.priority is not None:
        validate_priority(where.priority)
    stores = Stores(town)
    chosen = [stores.rig(rig)] if rig else stores.all()
    now = time.time() if now is None else now
    narrowed = bool(where) or sort != "priority"  # every ready row is needed before the cut
    rows = [row for store in chosen for row in store.ready_raw(now, 0 if narrowed else limit)]
    if where:
        rows = [row for row in rows if where.matches(json.loads(row[3]))]
    if sort == "oldest":
        rows.sort(key=lambda r: (not r[1], r[1], r[2]))  # undated last, as everywhere else
    elif len(chosen) > 1:
        rows.sort(key=lambda r: (r[0], -r[1], r[2]))
    if limit:
        rows = rows[:limit]
    return [row[3] for row in rows]


def blocked(town: Town, rig: str | None = None) -> list[dict]:
    """Blocked items of one or all rigs, each with ``blocked_by_count`` and ``blocked_by``."""
    return [normalise(json.loads(text)) for text in blocked_json(town, rig)]


def blocked_json(town: Town, rig: str | None = None) -> list[str]:
    """:func:`blocked` as one JSON text per row, in beads order, without re-encoding each record.

    A durable row is its stored line with the two keys appended, so a large rig
    costs no parse/serialise round trip per row.
    """
    stores = Stores(town)
    chosen = [stores.rig(rig)] if rig else stores.all()
    rows = [row for store in chosen for row in store.index.blocked_lines()]
    if len(chosen) > 1:
        rows.sort(key=lambda r: (r[0], -r[1], r[2]))
    return [row[3] for row in rows]


def _update_record(town: Town, item_id: str, apply) -> dict:
    if ctxs.rig_of(town, item_id) is not None:
        raise InvalidOperation(f"{item_id} is a sluice record, not a work item; it cannot be edited here")
    stores = Stores(town)
    store = stores.for_id(item_id)

    def change(records: list[dict]) -> dict:
        for record in reversed(records):  # the last line for an id is the record readers see
            if record["id"] == item_id:
                stamp = iso()
                if apply(record, records, stamp) is not False:  # False: nothing changed
                    record["updated_at"] = stamp
                return record
        raise UnknownItem(f"no item {item_id!r} in rig {store.rig.name!r}")

    return store.mutate_durable(change)


def update_item(town: Town, item_id: str, status: str | None = None, priority: int | None = None,
                assignee: str | None = None, add_labels: tuple[str, ...] = ()) -> dict:
    if status is not None and status not in STATUSES:
        raise UsageError(f"unknown status {status!r} (one of {', '.join(STATUSES)})")
    if priority is not None:
        validate_priority(priority)
    if status is None and priority is None and assignee is None and not add_labels:
        raise UsageError("nothing to update (give status, priority, assignee or add_labels)",
                         parameters=("status", "priority", "assignee", "add_labels"))

    def apply(record: dict, _records, stamp: str) -> None:
        if status is not None:
            if status == "closed" and record.get("status") != "closed":
                record["closed_at"] = stamp
            elif status != "closed":
                record.pop("closed_at", None)
                record.pop("close_reason", None)
            record["status"] = status
        if priority is not None:
            record["priority"] = priority
        if assignee is not None:
            record["assignee"] = assignee
        if add_labels:
            record["labels"] = list(dict.fromkeys([*labels_of(record), *add_labels]))

    return _update_record(town, item_id, apply)


def close_item(town: Town, item_id: str, reason: str = "Closed") -> dict:
    """Close an item; closing a closed item changes nothing and succeeds (as beads)."""
    store, current = Stores(town).find(item_id)
    store.require_writable()  # a read-only rig is refused even when there is nothing to change
    if current.get("status") == "closed":
        return current

    def apply(record: dict, _records, stamp: str) -> bool:
        if record.get("status") == "closed":
            return False
        record["status"] = "closed"
        record["closed_at"] = stamp
        record["close_reason"] = reason
        return True

    return _update_record(town, item_id, apply)


def add_dependency(town: Town, source: str, target: str, dep_type: str = "blocks") -> dict:
    """Add the edge source → target; ``status`` is ``added``, or ``exists`` when it was already there."""
    if not target.strip():
        raise UsageError("dependency target must be a non-empty id")
    if source == target:
        raise InvalidOperation(f"{source} cannot depend on itself")
    if not dep_type or len(dep_type) > 50:
        raise UsageError("dependency type must be 1–50 characters")

    def apply(record: dict, records: list[dict], stamp: str) -> bool:
        by_id = {r["id"]: r for r in records}
        local = not target.startswith("external:") and id_prefix(target) == id_prefix(source)
        if local and target not in by_id:
            raise UnknownItem(f"dependency target {target!r} does not exist")
        deps = record.setdefault("dependencies", [])
        for dep in deps:
            if dep.get("depends_on_id") == target:
                if dep.get("type") != dep_type:
                    raise InvalidOperation(
                        f"{source} already depends on {target} with type {dep.get('type')!r}"
                    )
                added.append(False)
                return False  # one edge per pair: adding it again changes nothing
        if dep_type in ("blocks", "conditional-blocks", "parent-child", "waits-for") and local:
            ensure_no_cycle(by_id, source, target)
        deps.append(dependency(source, target, dep_type, stamp))
        added.append(True)
        return True

    added: list[bool] = []
    _update_record(town, source, apply)
    return {"issue_id": source, "depends_on_id": target, "type": dep_type,
            "status": "added" if added and added[-1] else "exists"}


def import_items(town: Town, rig_name: str, path: Path) -> dict:
    """Copy a beads export into a rig's own store (upsert by id; tombstones dropped)."""
    store: RigStore = Stores(town).rig(rig_name)
    store.require_writable()  # refuse a read-only rig before reading the file
    if not Path(path).is_file():
        raise MissingFile(f"{path}: no such file")
    incoming, tombstones = [], 0
    for _n, record, _raw in read_jsonl(Path(path)):
        if record.get("status") == "tombstone":
            tombstones += 1
            continue
        incoming.append(record)

    def change(records: list[dict]) -> dict:
        position = {r["id"]: i for i, r in enumerate(records)}
        added = updated = 0
        for record in incoming:
            if record["id"] in position:
                records[position[record["id"]]] = record
                updated += 1
            else:
                position[record["id"]] = len(records)
                records.append(record)
                added += 1
        return {"rig": rig_name, "added": added, "updated": updated, "skipped_tombstones": tombstones}

    return store.mutate_durable(change)
