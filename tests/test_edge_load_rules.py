"""Which edges of an item count: beads keeps one edge per (item, target), the first, and none to itself.

A record may list two edges to the same target (an export written by hand or
by an older tool).  beads' import keeps only the first, so an earlier
``parent-child`` edge is not overridden by a later ``blocks`` edge: the child
of an open, unblocked epic stays ready.  Both of sluice's paths — the pure
readiness code and the derived index behind every store read — must agree with
the rules restated independently in ``helpers.beads_rules``, on random graphs
full of repeated targets.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import Cli
from helpers.beads_rules import Rules
from helpers.foundation import quick_rig, quick_town
from sluice.core.items import edges, normalise, to_node
from sluice.core.readiness import blocked_nodes, ready_nodes
from sluice.store.files.town import Town
from sluice.store.items.rigstore import Stores

NOW = datetime(2026, 6, 1, tzinfo=UTC).timestamp()
PAST, FUTURE = "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"
DEP_TYPES = ["blocks", "conditional-blocks", "waits-for", "parent-child", "related", "tracks"]


def record(item_id: str, *deps: tuple[str, str], **extra) -> dict:
    return {
        "id": item_id, "title": f"work {item_id}", "status": "open", "priority": 2, "issue_type": "task",
        "created_at": PAST, "updated_at": PAST,
        "dependencies": [{"issue_id": item_id, "depends_on_id": target, "type": dep_type, "created_at": PAST}
                         for dep_type, target in deps],
        **extra,
    }


def pure(records: list[dict]) -> tuple[list[str], dict[str, list[str]]]:
    nodes = {n.id: n for n in (to_node(normalise(json.loads(json.dumps(r)))) for r in records)}
    ready = [n.id for n in ready_nodes(nodes, NOW)]
    return ready, {n.id: causes for n, causes in blocked_nodes(nodes)}


def oracle(records: list[dict]) -> tuple[list[str], dict[str, list[str]]]:
    rules = Rules({r["id"]: r for r in records})
    return rules.ready(NOW), rules.blocked()


# -- the case that was wrong -------------------------------------------------------------

CHILD_OF_OPEN_EPIC = [
    record("bd-epic", issue_type="epic"),
    record("bd-child", ("parent-child", "bd-epic"), ("blocks", "bd-epic")),
]


def test_a_later_blocks_edge_does_not_override_an_earlier_parent_child_edge():
    assert edges(CHILD_OF_OPEN_EPIC[1]) == (("parent-child", "bd-epic", None),)
    ready, blocked = pure(CHILD_OF_OPEN_EPIC)
    assert "bd-child" in ready and "bd-child" not in blocked


def test_the_first_edge_wins_the_other_way_round_too():
    child = record("bd-child", ("blocks", "bd-epic"), ("parent-child", "bd-epic"))
    ready, blocked = pure([CHILD_OF_OPEN_EPIC[0], child])
    assert "bd-child" not in ready and blocked["bd-child"] == ["bd-epic"]


def test_an_edge_to_the_item_itself_is_dropped():
    assert edges(record("bd-a", ("blocks", "bd-a"), ("blocks", "bd-b"))) == (("blocks", "bd-b", None),)
    ready, _blocked = pure([record("bd-a", ("blocks", "bd-a"))])
    assert ready == ["bd-a"]


def test_the_cli_and_its_index_keep_the_first_edge(tmp_path):
    town = quick_town(tmp_path)
    quick_rig(town, tmp_path, "beads", "bd")
    path = town / ".sluice" / "rigs" / "beads" / "issues.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in CHILD_OF_OPEN_EPIC))
    cli = Cli(town)
    assert [r["id"] for r in cli.json("item", "ready")] == ["bd-child", "bd-epic"]
    assert cli.json("item", "blocked") == []


# -- random graphs against the independent reading ---------------------------------------------


@st.composite
def exports(draw):
    size = draw(st.integers(1, 10))
    ids = [f"bd-{i}" for i in range(size)]
    targets = st.sampled_from([*ids, "bd-missing", "gt-1", "external:gt:cap"])
    records = []
    for position, item_id in enumerate(ids):
        deps = draw(st.lists(st.tuples(st.sampled_from(DEP_TYPES), targets), max_size=4))
        if deps and draw(st.booleans()):  # the point of the test: the same target again, another type
            deps.append((draw(st.sampled_from(DEP_TYPES)), draw(st.sampled_from([t for _ty, t in deps]))))
        extra = {
            "status": draw(st.sampled_from(["open", "open", "in_progress", "closed", "pinned", "hooked"])),
            "issue_type": draw(st.sampled_from(["task", "task", "epic", "bug", "gate"])),
            "priority": draw(st.integers(0, 4)),
            "created_at": f"2026-01-01T00:00:{position:02d}Z",
        }
        if draw(st.integers(0, 5)) == 0:
            extra["defer_until"] = draw(st.sampled_from([PAST, FUTURE]))
        if draw(st.integers(0, 5)) == 0:
            extra["pinned"] = True
        made = record(item_id, *deps, **extra)
        for dep in made["dependencies"]:
            if dep["type"] == "waits-for" and draw(st.booleans()):
                dep["metadata"] = json.dumps({"gate": "any-children"})
        records.append(made)
    return records


@settings(max_examples=200, deadline=None)
@given(exports())
def test_property_the_pure_path_agrees_with_the_rules(records):
    assert pure(records) == oracle(records)


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory) -> Path:
    """One town for the module with rig beads, whose export each example replaces."""
    root = tmp_path_factory.mktemp("edges")
    town = quick_town(root)
    quick_rig(town, root, "beads", "bd")
    return town


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exports())
def test_property_the_derived_index_agrees_with_the_rules(store_dir, records):
    path = store_dir / ".sluice" / "rigs" / "beads" / "issues.jsonl"
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
    os.replace(tmp, path)  # a new file each time: the index sees it changed and rebuilds
    store = Stores(Town(store_dir)).rig("beads")
    try:
        ready = [row[2] for row in store.ready_raw(NOW)]
        blocked = {row[2]: row[4] for row in store.blocked_raw()}
    finally:
        store.refresh()
    assert (ready, blocked) == oracle(records)
