"""Which items are ready and which are blocked, by beads' rules (pure).

Everything here works on :class:`Node`, a compact view of one item, and does
no IO: the store builds nodes, this module decides.  The rules are beads'
(HEAD): a row is *blocked* (B0–B6) by an active ``blocks`` /
``conditional-blocks`` target, by a ``waits-for`` spawner with unfinished
children, or by inheriting the blockage of a ``parent-child`` parent at any
depth.  A blocker stops blocking once its status is ``closed`` or ``pinned``;
targets that are missing, ``external:`` or carry another id prefix never
block.  *Ready* (R1–R7) is then a filter over unblocked rows, sorted by
priority, newest first, then id (R10).

Blocked state does not depend on the clock; only readiness does (through
``defer_until``), which is why the two are separate functions and why an
index may cache :func:`blocked_state` but must re-check deferral at query time.
"""

from __future__ import annotations

from collections.abc import Mapping

from sluice.core.recordclass import field, recordclass

# Statuses in which an item no longer holds anything up (B0, B1).
INACTIVE = frozenset({"closed", "pinned"})
BLOCKING_TYPES = frozenset({"blocks", "conditional-blocks"})
# Types that `bd ready` never offers as work (R5).
NOT_WORK_TYPES = frozenset({"merge-request", "gate", "molecule", "message", "agent", "role", "rig"})


@recordclass(slots=True)
class Node:
    """What readiness needs of one item; ``deps`` are (type, target, gate)."""

    id: str
    status: str = "open"
    issue_type: str = "task"
    priority: int = 0
    created_ts: float = 0.0
    pinned: bool = False
    ephemeral: bool = False
    defer_ts: float | None = None
    deps: tuple[tuple[str, str, str | None], ...] = field(default_factory=tuple)


def id_prefix(item_id: str) -> str:
    """Text up to and including the first ``-`` (``hq-cv-abc`` → ``hq-``)."""
    cut = item_id.find("-")
    return item_id[: cut + 1] if cut > 0 else ""


def local_target(source: str, target: str, nodes: Mapping[str, Node]) -> Node | None:
    """The node an edge points at, or None when the edge can never block (B5)."""
    if target.startswith("external:") or id_prefix(source) != id_prefix(target):
        return None
    return nodes.get(target)


def blocked_state(nodes: Mapping[str, Node]) -> dict[str, bool]:
    """``is_blocked`` for every node, as beads keeps it (B0–B6).

    Direct causes (B1, B2) are decided first; parent-child inheritance (B3)
    then spreads blockage down the tree to any depth, stopping at closed or
    pinned rows (B0).
    """
    children = children_of(nodes)

    blocked: dict[str, bool] = {}
    for node in nodes.values():
        blocked[node.id] = node.status not in INACTIVE and _directly_blocked(node, nodes, children)

    # B3: breadth-first from every blocked row to its descendants.
    frontier = [nid for nid, is_blocked in blocked.items() if is_blocked]
    while frontier:
        parent = frontier.pop()
        for child_id in children.get(parent, ()):
            child = nodes[child_id]
            if blocked[child_id] or child.status in INACTIVE:
                continue
            blocked[child_id] = True
            frontier.append(child_id)
    return blocked


def children_of(nodes: Mapping[str, Node]) -> dict[str, list[str]]:
    """Parent id → ids with a ``parent-child`` edge to it.

    Only edges to an existing parent with the child's own prefix count: beads
    stores a cross-prefix edge as external, so it makes no one a child (B5).
    """
    children: dict[str, list[str]] = {}
    for node in nodes.values():
        for dep_type, target, _gate in node.deps:
            if dep_type == "parent-child" and local_target(node.id, target, nodes) is not None:
                children.setdefault(target, []).append(node.id)
    return children


def _directly_blocked(node: Node, nodes: Mapping[str, Node], children: Mapping[str, list[str]]) -> bool:
    for dep_type, target, gate in node.deps:
        if dep_type in BLOCKING_TYPES:
            blocker = local_target(node.id, target, nodes)
            if blocker is not None and blocker.status not in INACTIVE:
                return True
        elif (dep_type == "waits-for" and local_target(node.id, target, nodes) is not None
              and _gate_holds(target, gate, nodes, children)):
            return True
    return False


def _gate_holds(spawner: str, gate: str | None, nodes: Mapping[str, Node], children) -> bool:
    """B2: a waits-for gate holds while the spawner's children are unfinished."""
    kids = [nodes[c] for c in children.get(spawner, ())]
    if not kids:
        return False
    if gate == "any-children" and any(k.status == "closed" for k in kids):
        return False
    return any(k.status not in INACTIVE for k in kids)


def deferred_parents(nodes: Mapping[str, Node], now_ts: float) -> set[str]:
    """Ids that are direct children of a parent deferred into the future (R7)."""
    hidden = set()
    for node in nodes.values():
        for dep_type, target, _gate in node.deps:
            if dep_type != "parent-child":
                continue
            parent = local_target(node.id, target, nodes)
            if parent is not None and parent.defer_ts is not None and parent.defer_ts > now_ts:
                hidden.add(node.id)
                break
    return hidden


def is_ready_candidate(node: Node, blocked: bool) -> bool:
    """R1–R5: everything in readiness that does not depend on the clock."""
    return (
        node.status == "open"
        and not node.pinned
        and not blocked
        and not node.ephemeral
        and node.issue_type not in NOT_WORK_TYPES
    )


def ready_order(node: Node) -> tuple:
    """R10: priority ascending, newest first, then id."""
    return (node.priority, -node.created_ts, node.id)


def ready_nodes(nodes: Mapping[str, Node], now_ts: float, limit: int = 0) -> list[Node]:
    """Ready rows in beads order; ``limit`` 0 means all (R11)."""
    blocked = blocked_state(nodes)
    hidden = deferred_parents(nodes, now_ts)
    out = [
        node
        for node in nodes.values()
        if is_ready_candidate(node, blocked[node.id])
        and (node.defer_ts is None or node.defer_ts <= now_ts)
        and node.id not in hidden
    ]
    out.sort(key=ready_order)
    return out[:limit] if limit > 0 else out


def blocked_by(node: Node, nodes: Mapping[str, Node]) -> list[str]:
    """K2/K3: the row's own active blockers, else the parent it inherits from."""
    own = []
    for dep_type, target, _gate in node.deps:
        if dep_type in BLOCKING_TYPES or dep_type == "waits-for":
            blocker = local_target(node.id, target, nodes)
            if blocker is not None and blocker.status not in INACTIVE and target not in own:
                own.append(target)
    if own:
        return own
    parents = sorted(
        target
        for dep_type, target, _gate in node.deps
        if dep_type == "parent-child" and local_target(node.id, target, nodes) is not None
    )
    return parents[:1]


def blocked_nodes(nodes: Mapping[str, Node]) -> list[tuple[Node, list[str]]]:
    """K1–K5: every blocked row (wisps included) with what blocks it."""
    blocked = blocked_state(nodes)
    rows = []
    for node in nodes.values():
        if not blocked[node.id] or node.status in INACTIVE:
            continue
        causes = blocked_by(node, nodes)
        if causes:  # K4: nothing to name ⇒ beads drops the row
            rows.append((node, causes))
    rows.sort(key=lambda row: ready_order(row[0]))
    return rows
