"""The one ranking: rank_work (dispatcher) and rank_ready (advisor) on real towns, plus its pure core."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from helpers.advisor import add_worktree, item, merge_request, stamp, write_items
from sluice.core.clock import order_of_ts, order_text
from sluice.core.items import effective_tokens, priority_of
from sluice.core.scoring import Candidate, score_all
from sluice.scheduler.queue.ranking import (
    ReadyGroup,
    Work,
    best_of_groups,
    rank_ready,
    rank_work,
)
from sluice.scheduler.queue.signals import Signals
from sluice.store.database.decisions import append_decisions
from sluice.store.files.policy import GraphOverride, Policy, PolicyWeights, set_policy
from sluice.store.files.town import Town
from sluice.store.items.rigstore import Stores

# -- the pure core --------------------------------------------------------------------


def groups_from(rows):
    """ReadyGroups over in-memory rows (rig, graph, priority, tokens, order, id)."""
    buckets: dict[tuple, list[tuple[str, str]]] = {}
    for rig, graph, priority, tokens, order, item_id in rows:
        buckets.setdefault((rig, graph, priority, tokens), []).append((order, item_id))
    out = []
    for (rig, graph, priority, tokens), members in buckets.items():
        members.sort()
        out.append(ReadyGroup(rig, graph, priority, tokens, len(members), lambda n, m=members: m[:n]))
    return out


row_strategy = st.tuples(
    st.sampled_from(["r1", "r2", "r3"]),
    st.sampled_from([None, "g1", "g2"]),
    st.integers(-1, 5),
    st.sampled_from([0, 250, 1000, 1500, 4000]),
    st.sampled_from(["2026-01-01T00:00:00.000000Z", "2026-01-02T00:00:00.000000Z", "~"]),
)


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(row_strategy, min_size=1, max_size=40),
    limit=st.integers(1, 12),
    fairness=st.sampled_from([0.0, 0.7]),
    override=st.sampled_from([None, 3.0, -1.0]),
    warm=st.sets(st.sampled_from(["r1", "r2", "r3"])),
    depth=st.integers(0, 4),
)
def test_groups_rank_exactly_as_scoring_every_item(rows, limit, fairness, override, warm, depth):
    rows = [(*row, f"id-{n:03d}") for n, row in enumerate(rows)]
    overrides = {"g1": GraphOverride(priority=override)} if override is not None else {}
    policy = Policy(weights=PolicyWeights(fairness=fairness), graph_overrides=overrides)
    signals = {"warm_rigs": warm, "merge_depths": {"r2": depth}, "decision_counts": {"r1": 2, "r3": 1}}
    everything = score_all(
        [Candidate(item_id, p, t, rig, order, graph) for rig, graph, p, t, order, item_id in rows],
        policy, **signals,
    )
    best = best_of_groups(groups_from(rows), policy, limit=limit, **signals)
    expect = [(s.candidate.item_id, s.score, s.reasons, s.pressured) for s in everything[:limit]]
    assert [(s.candidate.item_id, s.score, s.reasons, s.pressured) for s in best] == expect
    assert [s.candidate.order for s in best] == [s.candidate.order for s in everything[:limit]]


@pytest.mark.parametrize("limit", [1, 255, 256, 257, 700, 5000])
def test_a_tier_wider_than_the_first_explained_prefix_is_read_whole(limit):
    # 300 groups tie on (score, tokens) — one per graph — then 300 worse ones: the first pass
    # explains 256 groups, which cannot hold the tier, so the prefix must grow.
    rows = []
    for g in range(300):
        for k in range(2):
            rows.append(("r1", f"g{g:03d}", 1, 500, f"2026-01-01T00:00:{59 - k:02d}.000000Z", f"a{g:03d}{k}"))
            rows.append(("r2", f"g{g:03d}", 2, 500, "2026-01-01T00:00:00.000000Z", f"b{g:03d}{k}"))
    policy = Policy()
    signals = {"warm_rigs": set(), "merge_depths": {}, "decision_counts": {}}
    everything = score_all([Candidate(i, p, t, r, o, g) for r, g, p, t, o, i in rows], policy, **signals)
    best = best_of_groups(groups_from(rows), policy, limit=limit, **signals)
    assert [s.candidate.item_id for s in best] == [s.candidate.item_id for s in everything[:limit]]


@given(st.lists(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2100, 1, 1)), min_size=2))
def test_order_text_sorts_like_the_timestamps(moments):
    stamps = [m.replace(tzinfo=UTC).timestamp() for m in moments]
    by_float = sorted(range(len(stamps)), key=lambda i: (stamps[i], i))
    by_text = sorted(range(len(stamps)), key=lambda i: (order_of_ts(stamps[i]), i))
    assert by_float == by_text


def test_order_text_of_an_iso_timestamp():
    assert order_text("2026-01-01T00:00:00.000000Z") == "2026-01-01T00:00:00.000000Z"
    assert order_text("2026-01-01T02:00:00+02:00") == "2026-01-01T00:00:00.000000Z"
    assert order_text("2026-01-01T00:00:00.123456789Z") == "2026-01-01T00:00:00.123456Z"
    assert order_text("") == "~" and order_text(None) == "~None"
    assert order_of_ts(1767225600.0) == order_text("2026-01-01T00:00:00Z")


def test_an_undated_item_sorts_after_every_dated_one():
    assert order_of_ts(0.0) > order_of_ts(4102444800.0)  # 2100
    assert order_of_ts(1767225600.0) == "2026-01-01T00:00:00.000000Z"


def test_times_at_the_edge_of_utc_are_clamped_not_a_crash():
    """Year 1 or 9999 in a far time zone has no UTC spelling; it still orders, earliest or latest."""
    first, last = "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"
    assert order_text(first) == "0001-01-01T00:00:00.000000Z" == order_of_ts(-62135647200.0)
    assert order_text(last) == "9999-12-31T23:59:59.999999Z" == order_of_ts(253402351199.0)
    assert order_text(first) < order_text("2026-01-01T00:00:00Z") < order_text(last) < order_of_ts(0.0)


def test_schedule_next_ranks_items_created_at_the_edge_of_utc(cli, rig):
    write_items(cli.town, "alpha", [
        {**item("al-late"), "created_at": "9999-12-31T23:59:59-14:00"},
        {**item("al-early"), "created_at": "0001-01-01T00:00:00+14:00"},
        item("al-now"),
    ])  # fmt: skip
    decided = cli.json("schedule", "next", "--preview", "--limit", "3")
    assert [d["node_id"] for d in decided] == ["al-early", "al-now", "al-late"]


# -- rank_work: the dispatcher's entry point ---------------------------------------------


def work_of(town: Town, *pairs: tuple[str, str]) -> list[Work]:
    stores = Stores(town)
    out = []
    for item_id, order in pairs:
        store, record = stores.find(item_id)
        out.append(Work(item=record, rig=store.rig.name, order=order, context_id=f"ctx-{item_id}"))
    return out


def test_rank_work_scores_explains_and_orders(rigs, town_files, tmp_path):
    write_items(town_files.root, "alpha",
                [item("al-urgent", priority=0, tokens=1500), item("al-cheap", tokens=0)])
    write_items(town_files.root, "beta", [item("be-warm", tokens=500)])
    add_worktree(tmp_path / "repos" / "beta", tmp_path / "wt-beta")
    work = work_of(town_files, ("al-cheap", stamp(1)), ("be-warm", stamp(2)), ("al-urgent", stamp(3)))
    ranked = rank_work(town_files, Stores(town_files), work)
    assert [(w.item["id"], w.score) for w in ranked] == [
        ("al-urgent", 4.1),  # 4 + 0.25 * 0.4
        ("be-warm", 2.666667),  # 2 + 0.5 + 0.25 * 0.666667
        ("al-cheap", 2.25),  # 2 + 0.25 * 1
    ]
    assert ranked[1].reasons == ("priority=2", "affinity=1", "cost=0.6667(tokens=500)")
    assert [w.tokens for w in ranked] == [1500, 500, 0]
    assert all(w.context_id == f"ctx-{w.item['id']}" for w in ranked)  # the caller's Work objects come back


def test_rank_work_ties_fall_to_the_queue_order_then_the_id(rigs, town_files):
    write_items(town_files.root, "alpha", [item("al-b"), item("al-a"), item("al-c")])
    work = work_of(town_files, ("al-c", stamp(5)), ("al-b", stamp(1)), ("al-a", stamp(1)))
    assert [w.item["id"] for w in rank_work(town_files, Stores(town_files), work)] == ["al-a", "al-b", "al-c"]


def test_rank_work_compares_queue_times_as_utc_whatever_their_format(rigs, town_files):
    write_items(town_files.root, "alpha", [item("al-a"), item("al-b"), item("al-c"), item("al-d")])
    work = work_of(
        town_files,
        ("al-a", "2026-01-01T10:00:00+02:00"),  # 08:00Z
        ("al-b", "2026-01-01T08:30:00Z"),
        ("al-c", "2026-01-01T07:59:59.5"),  # naive: UTC
        ("al-d", "not a time"),  # unreadable: last
    )
    ranked = rank_work(town_files, Stores(town_files), work)
    assert [w.item["id"] for w in ranked] == ["al-c", "al-a", "al-b", "al-d"]
    assert work[0].order == "2026-01-01T10:00:00+02:00"  # the caller's value is left alone


def test_pressured_work_stays_in_the_ranking_with_its_penalty_even_in_skip_mode(rigs, town_files):
    set_policy(town_files.policy_path, town_files.lock_path("policy"), skip_on_merge_pressure=True)
    write_items(town_files.root, "alpha", [item("al-hot", priority=0), *(merge_request(f"al-m{n}", "open")
                                                                 for n in range(3))])
    write_items(town_files.root, "beta", [item("be-calm", priority=1)])
    ranked = rank_work(town_files, Stores(town_files),
                       work_of(town_files, ("al-hot", stamp(0)), ("be-calm", stamp(0))))
    assert [(w.item["id"], w.score, w.pressured) for w in ranked] == [
        ("be-calm", 3.125, False),
        ("al-hot", 2.125, True),  # 4.125 - 2.0: penalised, never dropped
    ]
    assert ranked[1].reasons[-1] == "merge_pressure depth=3 threshold=3 penalty=2.0"


def test_rank_work_applies_the_graph_weights_of_each_items_epic(rigs, town_files):
    write_items(town_files.root, "alpha", [
        item("al-epic", issue_type="epic", priority=4),
        item("al-in", priority=3, parent="al-epic"),
        item("al-out"),
    ])
    set_policy(town_files.policy_path, town_files.lock_path("policy"), priority=5.0, graph_id="al-epic")
    ranked = rank_work(town_files, Stores(town_files),
                       work_of(town_files, ("al-in", stamp(0)), ("al-out", stamp(0))))
    assert [(w.item["id"], w.score, w.graph_id) for w in ranked] == [
        ("al-in", 5.125, "al-epic"),  # 5 * 1 + 0.125
        ("al-out", 2.125, None),
    ]


POOL = [("al-e1", {"issue_type": "epic", "priority": 1}), ("al-e2", {"issue_type": "epic"}),
        ("al-a", {"priority": 0, "tokens": 500}), ("al-b", {"parent": "al-e1"}),
        ("al-c", {"parent": "al-e1", "tokens": 0}), ("al-d", {"parent": "al-e2", "priority": 3}),
        ("al-f", {"tokens": 500, "priority": 0}), ("be-a", {}), ("be-b", {"tokens": 4000}),
        ("be-c", {"priority": 0, "tokens": 500})]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from([i for i, _ in POOL]), st.integers(0, 3), st.booleans()),
                max_size=14),
       st.sampled_from([0.0, 0.5]), st.sampled_from([0.0, 1.0]), st.sampled_from([None, "al-e1"]))
@example(picks=[("al-a", 0, True), ("be-c", 0, True), ("al-f", 1, False)], aging=0.0, fairness=0.0,
         graph=None)  # alike but for the rig
def test_rank_work_scores_and_orders_as_scoring_each_item_alone(rigs, town_files, picks, aging, fairness,
                                                                 graph):
    """Work is scored by kind; every item must still get exactly its own score, reasons and place."""
    if not Stores(town_files).rig("alpha").index.ids():
        # alpha's merge queue is at the threshold: its work scores apart from beta's alike work
        pressure = [merge_request(f"al-m{n}", "open") for n in range(3)]
        write_items(town_files.root, "alpha",
                    [item(i, **e) for i, e in POOL if i.startswith("al")] + pressure)
        write_items(town_files.root, "beta", [item(i, **extra) for i, extra in POOL if i.startswith("be")])
    overrides = {graph: GraphOverride(priority=3.0)} if graph else {}
    policy = Policy(weights=PolicyWeights(fairness=fairness), aging=aging, graph_overrides=overrides)
    now = 1767232800.0  # 2026-01-01T02:00:00Z: contexts queued at minutes 0..3 have waited about 2 hours
    work = [Work(item=Stores(town_files).find(i)[1], rig=i[:2].replace("al", "alpha").replace("be", "beta"),
                 order=stamp(minute), context_id=f"ctx-{n}" if queued else None)
            for n, (i, minute, queued) in enumerate(picks)]
    signals = Signals(town_files, Stores(town_files))
    alone = []
    for n, w in enumerate(work):
        order = order_text(w.order)
        age = (now - datetime.fromisoformat(order).timestamp()) / 3600 if aging and w.context_id else 0.0
        alone.append(Candidate(w.item["id"], priority_of(w.item), effective_tokens(w.item), w.rig, order,
                               signals.graphs.of_record(w.item), n, age_hours=age))
    expected = score_all(alone, policy, **signals.scoring_inputs(w.rig for w in work))
    ranked = rank_work(town_files, Stores(town_files),
                       [Work(w.item, w.rig, w.order, w.context_id) for w in work], policy=policy, now=now)
    assert [(w.item["id"], w.order, w.score, w.reasons) for w in ranked] == [
        (s.candidate.item_id, work[s.candidate.payload].order, s.score, s.reasons) for s in expected]


def test_rank_work_of_nothing_reads_nothing(rigs, town_files):
    town_files.policy_path.parent.mkdir(parents=True, exist_ok=True)
    town_files.policy_path.write_text("{broken")
    assert rank_work(town_files, Stores(town_files), []) == []


# -- rank_ready: the advisor's entry point ------------------------------------------------


def full_ranking(town: Town, policy, now: float, graph_id=None) -> list[tuple]:
    """Every ready item scored one by one: what rank_ready must agree with."""
    stores = Stores(town)
    signals = Signals(town, stores)
    candidates = []
    for store in stores.all():
        for priority, created_ts, item_id, _raw in store.ready_raw(now, 0):
            record = store.require(item_id)
            graph = signals.graphs.of_record(record)
            if graph_id is not None and graph != graph_id:
                continue
            candidates.append(Candidate(item_id, priority, effective_tokens(record), store.rig.name,
                                        order_of_ts(created_ts), graph))
    rigs = {c.rig for c in candidates}
    ranked = score_all(candidates, policy, warm_rigs=signals.warm_rigs(rigs),
                       merge_depths=signals.merge_depths(rigs), decision_counts=signals.decision_counts)
    return [(s.candidate.item_id, s.score, s.reasons, s.candidate.graph_id) for s in ranked]


def busy_town(town: Town) -> None:
    rows_a, rows_b = [], []
    rows_a.append(item("al-epic", issue_type="epic", priority=1))
    rows_b.append(item("be-epic", issue_type="epic", priority=3))
    for n in range(60):
        parent = ["al-epic", "be-epic", None][n % 3]
        record = item(f"al-{n:03d}", priority=n % 5, tokens=[0, 500, 1000, None][n % 4], minute=n % 7,
                      parent=parent)
        rows_a.append(record)
        blockers = [f"be-{n - 1:03d}"] if n % 9 == 8 else []
        rows_b.append(item(f"be-{n:03d}", priority=(n * 7) % 5, tokens=[250, 1000][n % 2],
                           minute=(n * 3) % 11, blocked_by=blockers))
    rows_b.append(merge_request("be-m1", "open"))
    write_items(town.root, "alpha", rows_a)
    write_items(town.root, "beta", rows_b)
    hints = {"title": "t", "project": "alpha", "repository": "/r", "agent_id": None, "priority": 2}
    append_decisions(town, [{"decision_id": "d1", "node_id": "al-000", "dispatch_hints": hints}])


@pytest.mark.parametrize("limit", [1, 7, 500])
def test_rank_ready_agrees_with_scoring_every_ready_item(rigs, town_files, limit):
    busy_town(town_files)
    now = time.time()
    stores = Stores(town_files)
    for policy in (
        Policy(weights=PolicyWeights(fairness=0.6), merge_queue_threshold=1),
        Policy(graph_overrides={"be-epic": GraphOverride(priority=2.5, cost=None)}),
    ):
        got = rank_ready(town_files, stores, Signals(town_files, stores), policy, limit, now=now)
        expect = full_ranking(town_files, policy, now)[:limit]
        assert [(s.candidate.item_id, s.score, s.reasons, s.candidate.graph_id) for s in got] == expect


def test_rank_ready_of_one_graph(rigs, town_files):
    busy_town(town_files)
    now = time.time()
    stores = Stores(town_files)
    policy = Policy(weights=PolicyWeights(fairness=1.0))
    got = rank_ready(town_files, stores, Signals(town_files, stores), policy, 10, graph_id="al-epic", now=now)
    expect = full_ranking(town_files, policy, now, graph_id="al-epic")[:10]
    assert [(s.candidate.item_id, s.score, s.reasons, s.candidate.graph_id) for s in got] == expect
    assert {s.candidate.graph_id for s in got} == {"al-epic"}


