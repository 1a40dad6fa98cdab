"""The beads rules restated plainly, as an oracle for sluice's readiness code.

Written from the wording of the beads model, on raw records (dicts as an
export holds them), and deliberately unlike sluice's implementation: edges are
read straight off each record, blockage is a least fixpoint over the whole
set, readiness a filter.  Tests compare sluice's answers against these on the
real exports and on random graphs.

Load rules: blank, ``_schema`` and non-issue lines are skipped, tombstones
dropped, ``wisp`` read as ``ephemeral``; of two edges from one item to the
same target only the first is kept, and an edge to the item itself is
dropped (beads keeps one edge per (item, target) and no self edges).
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

NOT_WORK = {"merge-request", "gate", "molecule", "message", "agent", "role", "rig"}


def load(path: Path) -> dict[str, dict]:
    """Every record beads would import: blank/_schema/non-issue lines skipped, tombstones dropped."""
    records = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if "_schema" in record or record.get("_type", "issue") != "issue":
            continue
        if "wisp" in record and "ephemeral" not in record:
            record["ephemeral"] = record["wisp"]
        records[record["id"]] = record
    return {rid: r for rid, r in records.items() if r.get("status") != "tombstone"}


def epoch(value) -> float | None:
    if not value:
        return None
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def status(record: dict) -> str:
    return record.get("status") or "open"


def finished(record: dict) -> bool:
    """A closed or pinned item holds nothing up and is never blocked."""
    return status(record) in ("closed", "pinned")


def priority(record: dict) -> int:
    value = record.get("priority")
    return value if isinstance(value, int) else 0


def prefix(item_id: str) -> str:
    return item_id.split("-", 1)[0] if "-" in item_id else ""


def edges(record: dict):
    """(type, target, metadata) of the edges beads keeps: the first per target, none to itself."""
    kept = {}
    for dep in record.get("dependencies") or []:
        target = dep["depends_on_id"]
        if target != record["id"] and target not in kept:
            kept[target] = (dep.get("type") or "blocks", target, dep.get("metadata"))
    return list(kept.values())


def gate_of(metadata) -> str | None:
    if isinstance(metadata, str) and metadata:
        metadata = json.loads(metadata)
    return metadata.get("gate") if isinstance(metadata, dict) else None


class Rules:
    """ready / blocked for one rig's records, following the beads model step by step."""

    def __init__(self, records: dict[str, dict]):
        self.records = records
        self.children = defaultdict(list)
        for record in records.values():
            for dep_type, target, _meta in edges(record):
                if dep_type == "parent-child" and self.target(record["id"], target):
                    self.children[target].append(record)
        self.blocked_ids = self._settle()

    def target(self, source: str, target: str) -> dict | None:
        """An edge only counts when it points at an existing item with the same prefix."""
        if target.startswith("external:") or prefix(target) != prefix(source):
            return None
        return self.records.get(target)

    def gate_holds(self, spawner: str, gate: str | None) -> bool:
        kids = self.children[spawner]
        if not kids:
            return False
        if gate == "any-children" and any(status(k) == "closed" for k in kids):
            return False
        return any(not finished(k) for k in kids)

    def parents(self, record: dict) -> list[dict]:
        found = [self.target(record["id"], t) for ty, t, _m in edges(record) if ty == "parent-child"]
        return [p for p in found if p is not None]

    def directly_blocked(self, record: dict) -> bool:
        for dep_type, target_id, meta in edges(record):
            target = self.target(record["id"], target_id)
            if target is None:
                continue
            if dep_type in ("blocks", "conditional-blocks") and not finished(target):
                return True
            if dep_type == "waits-for" and self.gate_holds(target_id, gate_of(meta)):
                return True
        return False

    def _settle(self) -> set[str]:
        """Blocked = directly blocked, or a child of a blocked parent; repeated until nothing changes."""
        live = [r for r in self.records.values() if not finished(r)]
        blocked = {r["id"] for r in live if self.directly_blocked(r)}
        changed = True
        while changed:
            changed = False
            for record in live:
                if record["id"] not in blocked and any(p["id"] in blocked for p in self.parents(record)):
                    blocked.add(record["id"])
                    changed = True
        return blocked

    def is_blocked(self, record: dict) -> bool:
        return record["id"] in self.blocked_ids

    def ready(self, now: float) -> list[str]:
        deferred_parent_ids = {
            rid for rid, r in self.records.items() if (epoch(r.get("defer_until")) or 0) > now
        }
        out = []
        for record in self.records.values():
            defer = epoch(record.get("defer_until"))
            if (
                status(record) == "open"
                and not record.get("pinned")
                and not self.is_blocked(record)
                and not record.get("ephemeral")
                and (record.get("issue_type") or "task") not in NOT_WORK
                and (defer is None or defer <= now)
                and not any(p["id"] in deferred_parent_ids for p in self.parents(record))
            ):
                out.append(record)
        out.sort(key=lambda r: (priority(r), -(epoch(r["created_at"]) or 0), r["id"]))
        return [r["id"] for r in out]

    def blocked(self) -> dict[str, list[str]]:
        out = {}
        for record in self.records.values():
            if finished(record) or not self.is_blocked(record):
                continue
            own = []
            for dep_type, target_id, _meta in edges(record):
                target = self.target(record["id"], target_id)
                counts = dep_type in ("blocks", "conditional-blocks", "waits-for")
                if counts and target and not finished(target) and target_id not in own:
                    own.append(target_id)
            causes = own or sorted(p["id"] for p in self.parents(record))[:1]
            if causes:
                out[record["id"]] = causes
        return out
