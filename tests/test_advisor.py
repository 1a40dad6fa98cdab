"""The advisor's library functions (the CLI and the MCP server call exactly these)."""

from __future__ import annotations

import time

import pytest

from helpers import make_repo
from helpers.advisor import decisions, events, item, merge_request, write_items
from sluice.core.clock import order_of_ts
from sluice.core.items import effective_tokens
from sluice.core.scoring import Candidate, score_all
from sluice.errors import UsageError
from sluice.scheduler.queue.ranking import rank_ready
from sluice.scheduler.queue.signals import Signals
from sluice.scheduler.views import advisor
from sluice.store.database.events import SCHEDULE_DECISION, SCHEDULE_SKIPPED
from sluice.store.files.policy import load_policy
from sluice.store.files.town import Town
from sluice.store.items.rigstore import Stores


@pytest.mark.parametrize("limit", [0, -1, True, "3", 1.5])
def test_a_bad_limit_is_a_usage_error_before_anything_is_read(rig, town_files, limit):
    town_files.policy_path.write_text("{broken")  # would be a ConfigError if it were read
    with pytest.raises(UsageError, match="limit must be"):
        advisor.next_decisions(town_files, limit=limit)


def test_a_blank_graph_id_is_a_usage_error(rig, town_files):
    with pytest.raises(UsageError, match="graph_id must be a non-empty string"):
        advisor.next_decisions(town_files, graph_id="  ")


def test_a_bad_recent_is_a_usage_error(rig, town_files):
    with pytest.raises(UsageError, match="recent must be >= 0"):
        advisor.status(town_files, recent=-1)


def test_an_empty_town_answers_nothing_and_writes_nothing(rig, town_files):
    assert advisor.next_decisions(town_files, limit=5) == []
    assert not town_files.decisions_path.exists()
    assert events(town_files.root) == []


def test_next_decisions_persist_unless_previewing(rig, town_files):
    write_items(town_files.root, "alpha", [item("al-1", priority=1), item("al-2", priority=2, minute=1)])
    preview = advisor.next_decisions(town_files, limit=2, preview=True)
    assert [d["node_id"] for d in preview] == ["al-1", "al-2"]
    assert decisions(town_files.root) == []
    made = advisor.next_decisions(town_files, limit=2)
    assert [d["node_id"] for d in made] == ["al-1", "al-2"]
    assert decisions(town_files.root) == made
    logged = events(town_files.root, SCHEDULE_DECISION)
    assert [e["payload"]["decision_id"] for e in logged] == [d["decision_id"] for d in made]
    assert list(logged[0]["payload"]) == ["decision_id", "graph_id", "node_id", "score", "skipped", "reasons"]


def test_skipped_decisions_are_logged_as_skipped_events(rig, town_files):
    write_items(
        town_files.root, "alpha",
        [item("al-1"), *(merge_request(f"al-m{n}", "in_progress") for n in range(3))],
    )
    advisor.policy_set(town_files, skip_on_merge_pressure=True)
    [skipped] = advisor.next_decisions(town_files)
    assert skipped["skipped"] is True
    assert skipped["score"] == 0.125  # 2.125 - 2.0: the penalty applies in skip mode too
    assert [e["type"] for e in events(town_files.root, SCHEDULE_DECISION, SCHEDULE_SKIPPED)] == [
        SCHEDULE_SKIPPED
    ]


def test_status_is_one_document(rig, town_files):
    write_items(town_files.root, "alpha", [item("al-1"), merge_request("al-m", "in_progress")])
    advisor.next_decisions(town_files)
    status = advisor.status(town_files, recent=5)
    assert list(status) == ["policy", "ready_count", "recent_decisions", "merge_pressure"]
    assert status["ready_count"] == 1
    assert status["merge_pressure"] == {"alpha": 1}
    assert [d["node_id"] for d in status["recent_decisions"]] == ["al-1"]


def test_policy_functions_return_the_whole_policy(rig, town_files):
    write_items(town_files.root, "alpha", [item("al-e", issue_type="epic")])  # a graph to override
    assert advisor.policy_show(town_files)["weights"]["priority"] == 1.0
    changed = advisor.policy_set(town_files, cost=0.75, graph_id="al-e")
    assert changed["weights"]["cost"] == 0.25
    assert changed["graph_overrides"]["al-e"]["cost"] == 0.75
    assert advisor.policy_show(town_files) == changed
    with pytest.raises(UsageError, match="unknown policy field"):
        advisor.policy_set(town_files, colour="red")
    with pytest.raises(UsageError, match="merge_queue_threshold must be >= 1"):
        advisor.policy_set(town_files, merge_queue_threshold=0)


def test_real_beads_exports_rank_as_scoring_every_ready_item(cli, tmp_path, beads_data):
    """The grouped top-k on real exports (epics, nested children, wisps) equals scoring each item."""
    for name, prefix, export in (
        ("beads", "bd", "steveyegge__beads@2026-01-14.issues.jsonl"),
        ("gastown", "gt", "steveyegge__gastown@2026-01-07.issues.jsonl"),
        ("keeper", "artifact-keeper", "artifact-keeper__artifact-keeper.issues.jsonl"),
    ):
        repo = make_repo(tmp_path / "repos" / name)
        cli.run("rig", "add", name, str(repo), "--prefix", prefix, "--items", str(beads_data / export))
    town = Town(cli.town)
    advisor.policy_set(town, fairness=0.4)
    now = time.time()
    stores = Stores(town)
    signals = Signals(town, stores)
    candidates = []
    for store in stores.all():
        for priority, created_ts, item_id, _raw in store.ready_raw(now, 0):
            record = store.require(item_id)
            candidates.append(
                Candidate(
                    item_id,
                    priority,
                    effective_tokens(record),
                    store.rig.name,
                    order_of_ts(created_ts),
                    signals.graphs.of_record(record),
                )
            )
    assert len(candidates) > 50
    rigs = {c.rig for c in candidates}
    policy = load_policy(town.policy_path)
    everything = score_all(
        candidates,
        policy,
        warm_rigs=signals.warm_rigs(rigs),
        merge_depths=signals.merge_depths(rigs),
        decision_counts=signals.decision_counts,
    )
    for limit in (1, 25):
        got = rank_ready(town, stores, signals, policy, limit, now=now)
        expect = [(s.candidate.item_id, s.score, s.reasons, s.candidate.graph_id) for s in everything[:limit]]
        assert [(s.candidate.item_id, s.score, s.reasons, s.candidate.graph_id) for s in got] == expect
    graphs = {c.graph_id for c in candidates if c.graph_id}
    assert graphs  # the exports do have epics with ready work under them
    some_graph = sorted(graphs)[0]
    in_graph = advisor.next_decisions(town, graph_id=some_graph, limit=100, preview=True)
    assert {d["graph_id"] for d in in_graph} == {some_graph}
    assert len(in_graph) == sum(1 for c in candidates if c.graph_id == some_graph)
