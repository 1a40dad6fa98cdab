"""Beads ready/blocked rules on small hand-built graphs (pure, no IO).

One test (or a small table) per rule of the beads model: B0–B6 decide
``is_blocked``, R1–R7/R10/R11 decide ``ready``, K1–K5 decide ``blocked``.
Every expectation below is read off the rule, not off the code.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.core.readiness import (
    NOT_WORK_TYPES,
    Node,
    blocked_nodes,
    blocked_state,
    deferred_parents,
    is_ready_candidate,
    ready_nodes,
    ready_order,
)

NOW = 1_800_000_000.0
FUTURE = NOW + 86_400
PAST = NOW - 86_400


def node(node_id: str, status: str = "open", **kw) -> Node:
    deps = tuple(kw.pop("deps", ()))
    return Node(node_id, status=status, deps=deps, **kw)


def edge(dep_type: str, target: str, gate: str | None = None) -> tuple[str, str, str | None]:
    return (dep_type, target, gate)


def graph(*nodes: Node) -> dict[str, Node]:
    return {node.id: node for node in nodes}


def blocked_ids(nodes) -> set[str]:
    return {nid for nid, is_blocked in blocked_state(nodes).items() if is_blocked}


def ready_ids(nodes, now: float = NOW, limit: int = 0) -> list[str]:
    return [n.id for n in ready_nodes(nodes, now, limit=limit)]


def blocked_rows(nodes) -> dict[str, list[str]]:
    return {n.id: causes for n, causes in blocked_nodes(nodes)}


# -- B0–B6: is_blocked ---------------------------------------------------------


@pytest.mark.parametrize("status", ["closed", "pinned"])
def test_b0_closed_and_pinned_rows_are_never_blocked(status):
    nodes = graph(
        node("t-blocker"),
        node("t-row", status, deps=[edge("blocks", "t-blocker")]),
        node("t-epic", deps=[edge("blocks", "t-blocker")]),
        node("t-child", status, deps=[edge("parent-child", "t-epic")]),
    )
    assert blocked_ids(nodes) == {"t-epic"}
    assert "t-row" not in blocked_rows(nodes)


@pytest.mark.parametrize(
    ("blocker_status", "blocks"),
    [
        ("open", True),
        ("in_progress", True),
        ("blocked", True),
        ("hooked", True),
        ("deferred", True),
        ("closed", False),
        ("pinned", False),
    ],
)
def test_b1_blocks_edge_to_an_active_target(blocker_status, blocks):
    nodes = graph(node("t-b", blocker_status), node("t-a", deps=[edge("blocks", "t-b")]))
    assert ("t-a" in blocked_ids(nodes)) is blocks
    assert ("t-a" in ready_ids(nodes)) is not blocks


def test_b1_one_active_blocker_among_closed_ones_is_enough():
    nodes = graph(
        node("t-c1", "closed"),
        node("t-c2", "pinned"),
        node("t-o", "open"),
        node("t-a", deps=[edge("blocks", "t-c1"), edge("blocks", "t-c2"), edge("blocks", "t-o")]),
    )
    assert blocked_ids(nodes) == {"t-a"}


def _spawner_graph(children_statuses, gate=None, spawner_status="open"):
    """t-w waits for spawner t-s, whose children have the given statuses."""
    nodes = [node("t-s", spawner_status), node("t-w", deps=[edge("waits-for", "t-s", gate)])]
    for i, status in enumerate(children_statuses):
        nodes.append(node(f"t-s.{i}", status, deps=[edge("parent-child", "t-s")]))
    return graph(*nodes)


@pytest.mark.parametrize(
    ("children", "gate", "blocked"),
    [
        (["open", "closed"], None, True),  # default gate: all children
        (["open", "closed"], "all-children", True),
        (["closed", "closed"], None, False),
        (["closed", "pinned"], None, False),  # pinned children count as finished
        (["in_progress"], None, True),
        (["open", "closed"], "any-children", False),  # any-children with one closed child
        (["open", "open"], "any-children", True),
        (["open", "pinned"], "any-children", True),  # the any-children test is for *closed*
        ([], None, False),  # no children ⇒ not blocked
        ([], "any-children", False),
    ],
)
def test_b2_waits_for_gates_on_the_spawners_children(children, gate, blocked):
    nodes = _spawner_graph(children, gate)
    assert ("t-w" in blocked_ids(nodes)) is blocked


@pytest.mark.parametrize("spawner_status", ["open", "closed", "pinned", "hooked"])
def test_b2_spawner_status_is_irrelevant(spawner_status):
    assert "t-w" in blocked_ids(_spawner_graph(["open"], spawner_status=spawner_status))
    assert "t-w" not in blocked_ids(_spawner_graph(["closed"], spawner_status=spawner_status))
    assert "t-w" not in blocked_ids(_spawner_graph([], spawner_status=spawner_status))


def test_b3_blockage_is_inherited_at_any_depth():
    nodes = graph(
        node("t-blocker"),
        node("t-epic", issue_type="epic", deps=[edge("blocks", "t-blocker")]),
        node("t-child", deps=[edge("parent-child", "t-epic")]),
        node("t-grandchild", deps=[edge("parent-child", "t-child")]),
        node("t-great", deps=[edge("parent-child", "t-grandchild")]),
    )
    assert blocked_ids(nodes) == {"t-epic", "t-child", "t-grandchild", "t-great"}
    assert ready_ids(nodes) == ["t-blocker"]


def test_b3_closed_or_pinned_link_stops_propagation():
    for stopper in ("closed", "pinned"):
        nodes = graph(
            node("t-blocker"),
            node("t-epic", deps=[edge("blocks", "t-blocker")]),
            node("t-mid", stopper, deps=[edge("parent-child", "t-epic")]),
            node("t-leaf", deps=[edge("parent-child", "t-mid")]),
        )
        assert blocked_ids(nodes) == {"t-epic"}, stopper
        assert "t-leaf" in ready_ids(nodes)


@pytest.mark.parametrize("parent_status", ["blocked", "deferred", "hooked", "in_progress"])
def test_b3_a_parents_stored_status_does_not_propagate(parent_status):
    nodes = graph(node("t-epic", parent_status), node("t-child", deps=[edge("parent-child", "t-epic")]))
    assert blocked_ids(nodes) == set()
    assert ready_ids(nodes) == ["t-child"]


def test_b3_inherits_from_a_waits_for_blocked_parent():
    nodes = _spawner_graph(["open"])
    nodes["t-wc"] = node("t-wc", deps=[edge("parent-child", "t-w")])
    assert {"t-w", "t-wc"} <= blocked_ids(nodes)


@pytest.mark.parametrize(
    "dep_type",
    ["related", "discovered-from", "tracks", "relates-to", "replies-to", "duplicates", "supersedes",
     "authored-by", "until", "caused-by", "validates", "my-custom-edge"],
)
def test_b4_other_edge_types_never_block(dep_type):
    nodes = graph(node("t-b"), node("t-a", deps=[edge(dep_type, "t-b")]))
    assert blocked_ids(nodes) == set()
    assert set(ready_ids(nodes)) == {"t-a", "t-b"}


@pytest.mark.parametrize("dep_type", ["blocks", "conditional-blocks", "waits-for", "parent-child"])
@pytest.mark.parametrize(
    "target",
    ["external:other:capability", "u-open", "t-missing"],
    ids=["external", "cross-prefix", "missing"],
)
def test_b5_external_cross_prefix_and_missing_targets_never_block(dep_type, target):
    nodes = graph(
        node("t-open"),
        node("u-open", issue_type="epic", deps=[edge("blocks", "u-x")]),  # open and blocked itself
        node("u-x"),
        node("u-open.1", deps=[edge("parent-child", "u-open")]),  # u-open has an open child
        node("t-a", deps=[edge(dep_type, target)]),
    )
    assert "t-a" not in blocked_ids(nodes)
    assert "t-a" in ready_ids(nodes)
    assert "t-a" not in blocked_rows(nodes)


def test_b5_a_cross_prefix_child_is_not_a_child():
    # u-kid's parent-child edge crosses prefixes, so beads keeps it as external: t-s has no children.
    nodes = graph(
        node("t-s"),
        node("u-kid", deps=[edge("parent-child", "t-s")]),
        node("t-w", deps=[edge("waits-for", "t-s")]),
        node("t-blocker"),
        node("t-epic", defer_ts=FUTURE, deps=[edge("blocks", "t-blocker")]),
        node("u-inherits", deps=[edge("parent-child", "t-epic")]),
    )
    assert blocked_ids(nodes) == {"t-epic"}
    assert {"t-w", "u-kid", "u-inherits"} <= set(ready_ids(nodes))


@pytest.mark.parametrize(("target_status", "blocked"), [("open", True), ("hooked", True), ("closed", False)])
def test_b6_conditional_blocks_is_the_same_as_blocks(target_status, blocked):
    plain = graph(node("t-b", target_status), node("t-a", deps=[edge("blocks", "t-b")]))
    cond = graph(node("t-b", target_status), node("t-a", deps=[edge("conditional-blocks", "t-b")]))
    assert blocked_ids(plain) == blocked_ids(cond)
    assert ("t-a" in blocked_ids(cond)) is blocked
    assert blocked_rows(plain) == blocked_rows(cond)


def test_wisps_and_durable_rows_block_each_other():
    nodes = graph(
        node("t-wisp-1", ephemeral=True),
        node("t-work", deps=[edge("blocks", "t-wisp-1")]),
        node("t-wisp-2", ephemeral=True, deps=[edge("blocks", "t-work")]),
    )
    assert blocked_ids(nodes) == {"t-work", "t-wisp-2"}


# -- R1–R11: ready -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "ready"),
    [("open", True), ("in_progress", False), ("blocked", False), ("hooked", False),
     ("deferred", False), ("pinned", False), ("closed", False), ("my-custom", False)],
)  # fmt: skip
def test_r1_only_open_rows_are_ready(status, ready):
    assert (ready_ids(graph(node("t-a", status))) == ["t-a"]) is ready


def test_r2_pinned_flag_is_never_ready():
    nodes = graph(node("t-a", pinned=True), node("t-b"))
    assert ready_ids(nodes) == ["t-b"]


def test_r3_blocked_rows_are_not_ready():
    nodes = graph(node("t-b"), node("t-a", deps=[edge("blocks", "t-b")]))
    assert ready_ids(nodes) == ["t-b"]


def test_r4_ephemeral_rows_are_not_ready_but_are_listed_blocked():
    nodes = graph(
        node("t-wisp-free", ephemeral=True),
        node("t-wisp-stuck", ephemeral=True, deps=[edge("blocks", "t-b")]),
        node("t-b", created_ts=1.0),
    )
    assert ready_ids(nodes) == ["t-b"]
    assert blocked_rows(nodes) == {"t-wisp-stuck": ["t-b"]}


@pytest.mark.parametrize("issue_type", sorted(NOT_WORK_TYPES))
def test_r5_infrastructure_types_are_never_ready(issue_type):
    nodes = graph(node("t-a", issue_type=issue_type), node("t-blocked", issue_type=issue_type,
                                                          deps=[edge("blocks", "t-a")]))
    assert ready_ids(nodes) == []
    assert blocked_rows(nodes) == {"t-blocked": ["t-a"]}  # K1: no type filter on blocked


@pytest.mark.parametrize(
    "issue_type", ["task", "bug", "feature", "epic", "chore", "decision", "convoy", "event", "spike"]
)
def test_r5_work_types_are_ready(issue_type):
    assert ready_ids(graph(node("t-a", issue_type=issue_type))) == ["t-a"]


@pytest.mark.parametrize(("defer_ts", "ready"), [(FUTURE, False), (NOW, True), (PAST, True), (None, True)])
def test_r6_defer_until_in_the_future_hides_the_row(defer_ts, ready):
    nodes = graph(node("t-a", defer_ts=defer_ts))
    assert (ready_ids(nodes) == ["t-a"]) is ready
    assert blocked_ids(nodes) == set()  # deferral is not blockage


def test_r7_future_deferred_parent_hides_direct_children_only():
    nodes = graph(
        node("t-epic", defer_ts=FUTURE),
        node("t-child", deps=[edge("parent-child", "t-epic")]),
        node("t-grandchild", deps=[edge("parent-child", "t-child")]),
    )
    assert ready_ids(nodes) == ["t-grandchild"]
    assert deferred_parents(nodes, NOW) == {"t-child"}
    assert set(ready_ids(nodes, now=FUTURE + 1)) == {"t-epic", "t-child", "t-grandchild"}


def test_r7_past_deferral_does_not_hide_children():
    nodes = graph(node("t-epic", defer_ts=PAST), node("t-child", deps=[edge("parent-child", "t-epic")]))
    assert set(ready_ids(nodes)) == {"t-epic", "t-child"}


def test_r7_status_only_deferred_parent_does_not_hide_children():
    nodes = graph(node("t-epic", "deferred"), node("t-child", deps=[edge("parent-child", "t-epic")]))
    assert ready_ids(nodes) == ["t-child"]


def test_r10_order_is_priority_then_newest_then_id():
    nodes = graph(
        node("t-old-p1", priority=1, created_ts=100.0),
        node("t-new-p1", priority=1, created_ts=200.0),
        node("t-p0", priority=0, created_ts=50.0),
        node("t-b-p2", priority=2, created_ts=300.0),
        node("t-a-p2", priority=2, created_ts=300.0),
        node("t-p4", priority=4, created_ts=999.0),
    )
    assert ready_ids(nodes) == ["t-p0", "t-new-p1", "t-old-p1", "t-a-p2", "t-b-p2", "t-p4"]


def test_r11_limit_cuts_after_sorting_and_zero_means_all():
    nodes = graph(*(node(f"t-{i:02d}", priority=i % 5, created_ts=float(i)) for i in range(20)))
    everything = ready_ids(nodes, limit=0)
    assert len(everything) == 20
    assert ready_ids(nodes, limit=3) == everything[:3]
    assert ready_ids(nodes, limit=100) == everything


# -- K1–K5: blocked ----------------------------------------------------------------


def test_k1_blocked_lists_wisps_and_every_type_but_never_closed_or_pinned():
    nodes = graph(
        node("t-b"),
        node("t-wisp", ephemeral=True, deps=[edge("blocks", "t-b")]),
        node("t-mr", issue_type="merge-request", deps=[edge("blocks", "t-b")]),
        node("t-hooked", "hooked", deps=[edge("blocks", "t-b")]),
        node("t-flagged", pinned=True, deps=[edge("blocks", "t-b")]),
        node("t-closed", "closed", deps=[edge("blocks", "t-b")]),
        node("t-pinned", "pinned", deps=[edge("blocks", "t-b")]),
    )
    assert set(blocked_rows(nodes)) == {"t-wisp", "t-mr", "t-hooked", "t-flagged"}


def test_k2_blocked_by_lists_active_own_blockers_and_waits_for_spawners():
    nodes = graph(
        node("t-open"),
        node("t-done", "closed"),
        node("t-pin", "pinned"),
        node("t-spawner"),
        node("t-spawner.1", deps=[edge("parent-child", "t-spawner")]),
        node("t-row", deps=[
            edge("blocks", "t-done"), edge("blocks", "t-open"), edge("conditional-blocks", "t-pin"),
            edge("waits-for", "t-spawner"), edge("related", "t-x"), edge("blocks", "external:p:c"),
        ]),
    )  # fmt: skip
    assert blocked_rows(nodes)["t-row"] == ["t-open", "t-spawner"]


def test_k2_waits_for_names_the_spawner_by_its_own_status():
    # Blocked by a real blocker; the waits-for spawner is closed, so it is not named.
    nodes = _spawner_graph(["open"], spawner_status="closed")
    nodes["t-b"] = node("t-b")
    nodes["t-w"] = node("t-w", deps=[edge("waits-for", "t-s"), edge("blocks", "t-b")])
    assert blocked_rows(nodes)["t-w"] == ["t-b"]


def test_k3_inherited_blockage_names_the_parent():
    nodes = graph(
        node("t-blocker"),
        node("t-epic", deps=[edge("blocks", "t-blocker")]),
        node("t-child", deps=[edge("parent-child", "t-epic")]),
        node("t-grandchild", deps=[edge("parent-child", "t-child")]),
    )
    rows = blocked_rows(nodes)
    assert rows == {"t-epic": ["t-blocker"], "t-child": ["t-epic"], "t-grandchild": ["t-child"]}


def test_k4_row_with_nothing_to_name_is_dropped():
    # Blocked (B2: the spawner has an open child) but the spawner itself is closed and there is no parent.
    nodes = _spawner_graph(["open"], spawner_status="closed")
    assert "t-w" in blocked_ids(nodes)
    assert "t-w" not in blocked_rows(nodes)
    assert "t-w" not in ready_ids(nodes)


def test_k5_blocked_is_sorted_by_priority_then_newest():
    nodes = graph(
        node("t-b", "in_progress"),
        node("t-low", priority=3, created_ts=500.0, deps=[edge("blocks", "t-b")]),
        node("t-old", priority=1, created_ts=100.0, deps=[edge("blocks", "t-b")]),
        node("t-new", priority=1, created_ts=200.0, deps=[edge("blocks", "t-b")]),
        node("t-top", priority=0, created_ts=1.0, deps=[edge("blocks", "t-b")]),
    )
    assert [n.id for n, _ in blocked_nodes(nodes)] == ["t-top", "t-new", "t-old", "t-low"]


# -- properties over random graphs -------------------------------------------------------

STATUSES = ["open", "open", "open", "in_progress", "blocked", "hooked", "deferred", "pinned", "closed"]
DEP_TYPES = ["blocks", "conditional-blocks", "waits-for", "parent-child", "related", "tracks"]
TYPES = ["task", "task", "bug", "epic", "gate", "molecule", "message"]


@st.composite
def graphs(draw):
    size = draw(st.integers(1, 14))
    ids = [f"t-{i}" for i in range(size)]
    targets = st.sampled_from([*ids, "t-missing", "u-1", "external:x:y"])
    nodes = []
    for nid in ids:
        deps = draw(
            st.lists(
                st.tuples(st.sampled_from(DEP_TYPES), targets, st.sampled_from([None, "any-children"])),
                max_size=3,
            )
        )
        nodes.append(
            Node(
                nid,
                status=draw(st.sampled_from(STATUSES)),
                issue_type=draw(st.sampled_from(TYPES)),
                priority=draw(st.integers(0, 4)),
                created_ts=float(draw(st.integers(0, 5))),
                pinned=draw(st.booleans()),
                ephemeral=draw(st.booleans()),
                defer_ts=draw(st.sampled_from([None, PAST, FUTURE])),
                deps=tuple(d for d in deps if d[1] != nid),
            )
        )
    return {node.id: node for node in nodes}


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_property_ready_and_blocked_are_disjoint(nodes):
    ready = set(ready_ids(nodes))
    blocked = set(blocked_rows(nodes))
    assert not ready & blocked
    assert not ready & blocked_ids(nodes)


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_property_every_ready_row_passes_the_candidate_predicate(nodes):
    state = blocked_state(nodes)
    hidden = deferred_parents(nodes, NOW)
    for ready in ready_nodes(nodes, NOW):
        assert is_ready_candidate(ready, state[ready.id])
        assert ready.defer_ts is None or ready.defer_ts <= NOW
        assert ready.id not in hidden


@settings(max_examples=150, deadline=None)
@given(graphs(), st.data())
def test_property_adding_a_closed_blocker_never_changes_ready(nodes, data):
    before = ready_ids(nodes)
    source = data.draw(st.sampled_from(sorted(nodes)))
    dep_type = data.draw(st.sampled_from(["blocks", "conditional-blocks"]))
    changed = dict(nodes)
    changed["t-done"] = Node("t-done", status=data.draw(st.sampled_from(["closed", "pinned"])))
    old = nodes[source]
    changed[source] = Node(old.id, old.status, old.issue_type, old.priority, old.created_ts, old.pinned,
                           old.ephemeral, old.defer_ts, (*old.deps, (dep_type, "t-done", None)))
    assert ready_ids(changed) == before


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_property_ready_and_blocked_are_sorted(nodes):
    ready = ready_nodes(nodes, NOW)
    assert [ready_order(n) for n in ready] == sorted(ready_order(n) for n in ready)
    rows = [n for n, _ in blocked_nodes(nodes)]
    keys = [(n.priority, -n.created_ts) for n in rows]
    assert keys == sorted(keys)


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_property_blocked_rows_name_at_least_one_cause(nodes):
    state = blocked_state(nodes)
    for row, causes in blocked_nodes(nodes):
        assert state[row.id] and row.status not in ("closed", "pinned")
        assert causes and len(causes) == len(set(causes))


def _oracle_blocked(nodes: dict[str, Node]) -> set[str]:
    """B0–B6 read literally, as a recursive definition (parents looked up, not pushed down)."""

    def target(source: str, dep_id: str) -> Node | None:
        if dep_id.startswith("external:") or dep_id.split("-")[0] != source.split("-")[0]:
            return None
        return nodes.get(dep_id)

    def active(row: Node) -> bool:
        return row.status not in ("closed", "pinned")

    def kids(spawner: str) -> list[Node]:
        return [n for n in nodes.values()
                if any(t == "parent-child" and d == spawner and target(n.id, d) for t, d, _ in n.deps)]

    def is_blocked(row: Node, seen: frozenset = frozenset()) -> bool:
        if not active(row) or row.id in seen:
            return False
        for dep_type, dep_id, gate in row.deps:
            tgt = target(row.id, dep_id)
            if tgt is None:
                continue
            if dep_type in ("blocks", "conditional-blocks") and active(tgt):
                return True
            if dep_type == "waits-for":
                children = kids(dep_id)
                released = gate == "any-children" and any(k.status == "closed" for k in children)
                if any(active(k) for k in children) and not released:
                    return True
            if dep_type == "parent-child" and is_blocked(tgt, seen | {row.id}):
                return True
        return False

    return {nid for nid, row in nodes.items() if is_blocked(row)}


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_property_blocked_state_matches_the_rules_read_literally(nodes):
    assert blocked_ids(nodes) == _oracle_blocked(nodes)
