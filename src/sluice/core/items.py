"""Beads item records: reading them as beads does, making new ones.

Items are plain dicts so that every key a beads export carries survives a
rewrite untouched.  This module is the one place that knows how a raw record
maps onto what sluice needs (:class:`~sluice.core.readiness.Node`, tokens,
timestamps) and how beads' import normalises old exports (L1–L4).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sluice.core.clock import iso
from sluice.core.readiness import Node
from sluice.core.recordclass import frozen

STATUSES = ("open", "in_progress", "blocked", "hooked", "deferred", "pinned", "closed", "tombstone")
DONE_STATUSES = frozenset({"closed", "tombstone"})  # a record in one of these has ended
CONTEXT_LABEL = "sluice:sling-context"


def parse_ts(value: Any) -> float | None:
    """Epoch seconds of a beads timestamp in any era's format, None if absent or unreadable."""
    if not value or not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def due_in_hours(record: Mapping, now: float) -> float | None:
    """Hours until beads' ``due_at`` (negative once past), None without a readable one."""
    due = parse_ts(record.get("due_at"))
    return None if due is None else (due - now) / 3600.0


def estimated_minutes(record: Mapping) -> int | None:
    """beads' ``estimated_minutes`` (an integer >= 0), None when absent or unusable."""
    value = record.get("estimated_minutes")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def minutes_of(record: Mapping) -> int | None:
    """An item's estimated minutes as the forecast reads them: its own, else its metadata's."""
    minutes = estimated_minutes(record)
    if minutes is None and isinstance(record.get("metadata"), dict):
        minutes = estimated_minutes(record["metadata"])
    return minutes


def gate_of(record: Mapping) -> dict | None:
    """A gate item's ``await_type`` / ``await_id`` / ``timeout`` (nanoseconds, shown as a duration).

    None for an item that is no gate.  An open gate blocks what depends on it
    like any open blocker (B1): it is how beads makes work wait for a CI run,
    a pull request, a timer or a person.
    """
    if record.get("issue_type") != "gate" and not record.get("await_type"):
        return None
    from sluice.core.clock import format_duration

    timeout = record.get("timeout")
    usable = isinstance(timeout, int) and not isinstance(timeout, bool) and timeout > 0
    return {"id": record.get("id"), "status": record.get("status", "open"),
            "await_type": record.get("await_type") or None, "await_id": record.get("await_id") or None,
            "timeout": format_duration(timeout / 1e9) if usable else None}


def item_hints(record: Mapping, now: float) -> dict:
    """What beads 1.x says about an item's runtime and deadline, as ``explain`` and the views show it."""
    from sluice.core.scoring import due_text

    due = due_in_hours(record, now)
    return {"estimated_minutes": estimated_minutes(record), "due_at": record.get("due_at") if due is not None
            else None, "due": due_text(due) if due is not None else None}


@frozen
class ReadyFilter:
    """``bd ready``'s filters people use (R8, R9): all given ones must hold."""

    labels: tuple[str, ...] = ()  # every one of these labels (AND)
    labels_any: tuple[str, ...] = ()  # at least one of these labels (OR)
    assignee: str | None = None  # exactly this assignee
    unassigned: bool = False  # no assignee (absent or empty)
    issue_type: str | None = None
    priority: int | None = None  # exactly this priority

    def __bool__(self) -> bool:
        return bool(self.labels or self.labels_any or self.assignee is not None or self.unassigned
                    or self.issue_type is not None or self.priority is not None)

    def matches(self, record: Mapping) -> bool:
        held = set(labels_of(record))
        if not held.issuperset(self.labels) or (self.labels_any and held.isdisjoint(self.labels_any)):
            return False
        assignee = record.get("assignee") or ""
        if (self.assignee is not None and assignee != self.assignee) or (self.unassigned and assignee):
            return False
        if self.issue_type is not None and (record.get("issue_type") or "task") != self.issue_type:
            return False
        return self.priority is None or priority_of(record) == self.priority


def unwrap_envelope(value: Any) -> Any:
    """The payload of beads' JSON envelope (``{"schema_version": 1, "data": …}``), else ``value``.

    The envelope is opt-in with ``BD_JSON_ENVELOPE=1`` and the default from
    beads 2.0.  A record never has both keys and no ``id``, so nothing else is
    mistaken for one.
    """
    while (isinstance(value, dict) and "data" in value and "schema_version" in value
           and "id" not in value):
        value = value["data"]
    return value


def normalise(record: dict) -> dict:
    """Beads import defaults (L3, L4) applied in place: status, type, priority, ephemeral."""
    if "wisp" in record and "ephemeral" not in record:
        record["ephemeral"] = bool(record.pop("wisp"))
    if not record.get("status"):
        record["status"] = "open"
    if not record.get("issue_type"):
        record["issue_type"] = "task"
    value = record.get("priority")
    if type(value) is not int or not 0 <= value <= 4:  # a beads priority stays as it is
        record["priority"] = priority_of(record)
    return record


#: What an unusable priority counts as: beads' own default for a new item.
DEFAULT_PRIORITY = 2


def priority_problem(value: Any) -> str | None:
    """Why ``value`` is not a beads priority (an integer 0–4), or None when it is one or is absent.

    An absent or null priority is beads' zero value, P0 (import rule L4); anything
    else outside 0–4 — ``"high"``, ``9``, ``1.5``, ``true`` — cannot have come from beads.
    """
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 4):
        return None
    shown = json.dumps(value)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return f"priority {shown} is not an integer 0-4; treated as the default {DEFAULT_PRIORITY}"


def priority_of(record: Mapping) -> int:
    """The priority sluice ranks by: 0 when absent (beads L4), the default 2 when unusable.

    An unusable value must never rank above a real P0, so it is not read as 0.
    """
    value = record.get("priority")
    if value is None:
        return 0
    return DEFAULT_PRIORITY if priority_problem(value) is not None else value


def skip_record(record: Mapping) -> bool:
    """Lines beads' importer skips (L1): schema headers and memory records.

    An issue line without an id is *not* skipped: it is damage, and the reader
    reports it with its line number rather than dropping it silently.
    """
    return "_schema" in record or record.get("_type", "issue") != "issue"


#: Keys beads stores as strings; anything else there is damage, not an item.
_TEXT_KEYS = ("status", "issue_type", "assignee")
_INT64_MAX = 2**63 - 1


def shape_problem(record: Mapping) -> str | None:
    """What makes a parsed line unusable as an item, or None when it is usable.

    beads itself could not have written such a line (its fields are typed), so
    the reader reports it naming file and line instead of crashing later or
    guessing: a status, type or assignee that is not a string, labels or
    dependencies that are not lists, a dependency that is not an object.  (A
    priority outside 0–4 is only a warning: see :func:`priority_problem`.)
    """
    for key in _TEXT_KEYS:
        value = record.get(key)
        if value is not None and not isinstance(value, str):
            return f"{key} is not a string"
    for key in ("labels", "dependencies"):
        value = record.get(key)
        if value is not None and not isinstance(value, list):
            return f"{key} is not a list"
    for position, dep in enumerate(record.get("dependencies") or ()):
        if not isinstance(dep, Mapping):
            return f"dependencies[{position}] is not an object"
    return None


def dep_gate(dep: Mapping) -> str | None:
    meta = dep.get("metadata")
    if meta == "{}":  # what beads writes for an edge without metadata: no need to parse it
        return None
    if isinstance(meta, str) and meta:
        try:
            meta = json.loads(meta)
        except (ValueError, RecursionError):
            return None
    gate = meta.get("gate") if isinstance(meta, dict) else None
    return gate if isinstance(gate, str) else None


def edges(record: Mapping) -> tuple[tuple[str, str, str | None], ...]:
    """(type, target, gate) of an item's dependencies, as beads keeps them when it loads the item.

    beads stores one edge per (item, target): when a record lists two edges to
    the same target only the first survives (L7) — a later ``blocks`` does not
    override an earlier ``parent-child`` — and an edge from an item to itself
    is dropped (L8).
    """
    source = record.get("id")
    seen: set[str] = set()
    out = []
    for dep in record.get("dependencies") or ():
        if not isinstance(dep, Mapping) or not dep.get("depends_on_id"):
            continue
        target = str(dep["depends_on_id"])
        if target in seen or target == source:
            continue
        seen.add(target)
        out.append((str(dep.get("type") or "blocks"), target, dep_gate(dep)))
    return tuple(out)


def to_node(record: Mapping) -> Node:
    deps = edges(record)
    return Node(
        id=record["id"],
        status=record.get("status") or "open",
        issue_type=record.get("issue_type") or "task",
        priority=priority_of(record),
        created_ts=parse_ts(record.get("created_at")) or 0.0,
        pinned=bool(record.get("pinned")),
        ephemeral=bool(record.get("ephemeral")),
        defer_ts=parse_ts(record.get("defer_until")),
        deps=deps,
    )


def _metadata(record: Mapping) -> Mapping | None:
    """An item's ``metadata`` object, decoded first where older exports store it as a JSON string."""
    meta = record.get("metadata")
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except (ValueError, RecursionError):
            return None
    return meta if isinstance(meta, Mapping) else None


def effective_tokens(record: Mapping) -> int:
    """An item's token estimate by :func:`sluice.core.scoring.effective_tokens` (the one rule).

    Beyond 64 bits an estimate is simply the most expensive item there is.
    """
    from sluice.core.scoring import effective_tokens as tokens_from

    return min(tokens_from(_metadata(record)), _INT64_MAX)


def labels_of(record: Mapping) -> list[str]:
    labels = record.get("labels") or []
    return [label for label in labels if isinstance(label, str)]


def is_context(record: Mapping) -> bool:
    return bool(record.get("labels")) and CONTEXT_LABEL in labels_of(record)  # most items have none


def tracked_ids(record: Mapping) -> list[str]:
    """Targets of ``tracks`` edges, with any ``external:<rig>:`` wrapper removed."""
    out = []
    for dep in record.get("dependencies") or ():
        if isinstance(dep, Mapping) and dep.get("type") == "tracks" and dep.get("depends_on_id"):
            target = str(dep["depends_on_id"])
            if target.startswith("external:"):
                target = target.rsplit(":", 1)[-1]
            out.append(target)
    return out


def dependency(source: str, target: str, dep_type: str = "blocks", created_at: str | None = None) -> dict:
    return {"issue_id": source, "depends_on_id": target, "type": dep_type, "created_at": created_at or iso()}


def touches_of(item: Mapping) -> tuple[str, ...]:
    """``metadata.touches`` of an item: the globs (relative to its rig) it says it will edit."""
    touches = (_metadata(item) or {}).get("touches")
    if isinstance(touches, str):
        touches = [touches]
    if not isinstance(touches, list):
        return ()
    return tuple(t for t in touches if isinstance(t, str) and t.strip())
