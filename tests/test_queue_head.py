"""The queue's head read with SQL answers exactly as a survey of every context.

Real towns (two rigs over real git repositories, their own stores), random
queues: priorities, token estimates, labels, touches, blockers, deferrals,
ended and hooked items, contexts aimed at the other rig, promotions, failed
launches, forced slings, running polecats.  Each page the views show and each
cycle's plan is read both ways and compared whole.
"""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest

from helpers.scheduler import configure, issues_path, item, write_items
from sluice.scheduler.launch import dispatch
from sluice.scheduler.launch.sling import SlingOptions, sling
from sluice.scheduler.queue import head as queuehead
from sluice.scheduler.queue import views
from sluice.scheduler.queue.promote import promote
from sluice.scheduler.session import Session
from sluice.store.database import contexts as ctxs
from sluice.store.files.town import Town
from sluice.store.items.rigstore import Stores

FUTURE = "2999-01-01T00:00:00Z"
PAST = "2001-01-01T00:00:00Z"


def random_items(rng: random.Random, prefix: str, count: int) -> list[dict]:
    records = []
    for n in range(count):
        extra: dict = {"priority": rng.choice([0, 1, 2, 2, 3])}
        meta: dict = {}
        if rng.random() < 0.4:
            meta["estimated_tokens"] = rng.choice([500, 1000, 4000])
        if rng.random() < 0.15:
            meta["touches"] = [rng.choice(["src/a/*", "src/b.py", "docs/*"])]
        if meta:
            extra["metadata"] = meta
        if rng.random() < 0.2:
            extra["labels"] = rng.sample(["ui", "db", "ops"], rng.randint(1, 2))
        if rng.random() < 0.1:
            extra["defer_until"] = rng.choice([FUTURE, PAST])
        deps = ()
        if n and rng.random() < 0.15:
            deps = [("blocks", f"{prefix}-{rng.randrange(n)}")]
        extra["created_at"] = f"2026-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}T00:00:00Z"
        records.append(item(f"{prefix}-{n}", deps=deps, **extra))
    return records


def build(town_dir, rng: random.Random) -> dict[str, list[dict]]:
    exports = {"alpha": random_items(rng, "al", rng.randint(10, 40)),
               "beta": random_items(rng, "be", rng.randint(5, 25))}
    for rig, records in exports.items():
        write_items(town_dir, rig, records)
    town = Town(town_dir)
    for rig, records in exports.items():
        chosen = [r["id"] for r in records if rng.random() < 0.8]
        elsewhere = [i for i in chosen if rng.random() < 0.1]
        own = [i for i in chosen if i not in elsewhere]
        other = "beta" if rig == "alpha" else "alpha"
        if own:
            sling(town, [*own, rig], SlingOptions(force=rng.random() < 0.2))
        if elsewhere:
            sling(town, [*elsewhere, other], SlingOptions())
    return exports


def twist(town_dir, rng: random.Random, exports: dict[str, list[dict]]) -> None:
    """Make some contexts unusual and some items end: promotions, failures, ended and hooked items."""
    town = Town(town_dir)
    stores = Stores(town)
    queued = [c for c in ctxs.open_contexts(town) if c.valid]
    for context in rng.sample(queued, min(len(queued), rng.randint(0, 3))):
        promote(town, context.work_id)
    for context in rng.sample(queued, min(len(queued), rng.randint(0, 3))):
        ctxs.record_failure(stores.rig(context.rig), context.id, "launch failed")
    for rig, records in exports.items():
        for record in records:
            roll = rng.random()
            if roll < 0.05:
                record["status"] = "closed"
            elif roll < 0.08:
                record["status"] = "hooked"
            elif roll < 0.1:
                record["status"] = "in_progress"
        write_items(town_dir, rig, records)


PAGES = [(0, 1), (0, 3), (2, 5), (0, 50), (10, 30)]


def both_ways(town_dir, start: int, stop: int, now: float):
    town = Town(town_dir)
    fast_session = Session(town, now=now)
    head = queuehead.read_head(fast_session, stop)
    assert head is not None, "the head should be read with SQL here"
    fast = views._page(fast_session, head.view, head.assessment, start, stop, head).head()
    slow_session = Session(Town(town_dir), now=now)
    view, assessment = views.queue_view(slow_session)
    slow = views._page(slow_session, view, assessment, start, stop).head()
    return fast, slow


@pytest.mark.parametrize("seed", range(8))
def test_the_head_read_with_sql_is_the_survey(town_dir, rigs, capacity, memory, seed):
    rng = random.Random(seed)
    capacity(rng.choice([1, 3, 50]), batch_size=rng.choice([1, 2, 5]))
    if seed % 2:
        configure(town_dir, "scheduler.label_caps.ui", "1")
        configure(town_dir, "rigs.beta.max_polecats", "1")
    exports = build(town_dir, rng)
    dispatch.run_cycle(Town(town_dir))  # some polecats running: their items wait, and count
    if seed % 3:
        twist(town_dir, rng, exports)
    now = 1_900_000_000.0
    for start, stop in PAGES:
        fast, slow = both_ways(town_dir, start, stop, now)
        assert fast == slow, (start, stop)


def test_a_context_plain_again_after_the_index_changed_gets_the_new_facts(town_dir, rig, capacity, memory):
    """Once a prefix's facts are all from one index, only new or changed rows are looked for: a context
    that was unusual while the index changed must still be filled anew when it is plain again."""
    capacity(1)
    write_items(town_dir, "alpha", [item(f"al-{n}", priority=2) for n in (1, 2, 3)])
    sling(Town(town_dir), ["al-1", "al-2", "al-3", "alpha"], SlingOptions())
    assert [r["id"] for r in views.list_queue(Town(town_dir), limit=10)] == ["al-1", "al-2", "al-3"]
    promote(Town(town_dir), "al-3")  # unusual: its row keeps the facts it had
    write_items(town_dir, "alpha", [item("al-3", priority=4)])
    assert [r["id"] for r in views.list_queue(Town(town_dir), limit=10)] == ["al-3", "al-1", "al-2"]
    promote(Town(town_dir), "al-3", undo=True)  # plain again, under facts read before the edit
    town = Town(town_dir)
    assert queuehead.read_head(Session(town), 10) is not None
    assert [r["id"] for r in views.list_queue(town, limit=10)] == ["al-1", "al-2", "al-3"]
    assert dict(town.db.query("SELECT work_item, f_priority FROM issues"))["al-3"] == 4


@pytest.mark.parametrize("seed", range(4))
def test_a_cycle_from_the_head_plans_as_one_from_the_survey(town_dir, rigs, capacity, memory, monkeypatch,
                                                              seed):
    rng = random.Random(100 + seed)
    capacity(rng.choice([2, 4]), batch_size=rng.choice([1, 3]))
    exports = build(town_dir, rng)
    twist(town_dir, rng, exports)
    fast = dispatch.run_cycle(Town(town_dir), dry_run=True).to_json()
    monkeypatch.setattr(dispatch, "read_head", lambda *a, **k: None)
    slow = dispatch.run_cycle(Town(town_dir), dry_run=True).to_json()
    assert fast == slow


def test_a_policy_that_scores_each_context_apart_is_surveyed(town_dir, rig, capacity, memory):
    capacity(1)
    write_items(town_dir, "alpha", [item("al-1"), item("al-2")])
    sling(Town(town_dir), ["al-1", "al-2", "alpha"], SlingOptions())
    assert queuehead.read_head(Session(Town(town_dir)), 10) is not None
    (town_dir / ".sluice" / "schedule" / "policy.json").write_text('{"aging": 1.0}')
    assert queuehead.read_head(Session(Town(town_dir)), 10) is None
    assert [r["id"] for r in views.list_queue(Town(town_dir), limit=10)] == ["al-1", "al-2"]


def test_an_item_missing_from_its_rig_is_left_to_the_survey(town_dir, rig, capacity, memory):
    capacity(1)
    write_items(town_dir, "alpha", [item("al-1"), item("al-2")])
    sling(Town(town_dir), ["al-1", "al-2", "alpha"], SlingOptions())
    issues_path(town_dir, "alpha").write_text(json.dumps(item("al-1")) + "\n")  # al-2 is gone
    assert queuehead.read_head(Session(Town(town_dir)), 10) is None
    rows = views.list_queue(Town(town_dir), limit=10)
    assert [(r["id"], r["held"]) for r in rows] == [("al-1", None), ("al-2", "missing-item")]


def test_every_writer_keeps_the_queue_columns(town_dir, rig, capacity, memory):
    """A context is plain while nothing but its item places it; each change that makes it unusual says so."""
    capacity(1)
    write_items(town_dir, "alpha", [item("al-1"), item("al-2"), item("al-3")])
    town = Town(town_dir)
    sling(town, ["al-1", "al-2", "al-3", "alpha"], SlingOptions())

    def plain() -> dict[str, int]:
        rows = town.db.query("SELECT work_item, plain FROM issues")
        return dict(rows)

    assert plain() == {"al-1": 1, "al-2": 1, "al-3": 1}
    promote(town, "al-2")
    [context] = ctxs.find_open(town, "al-3")
    ctxs.record_failure(Stores(town).rig("alpha"), context.id, "no")
    assert plain() == {"al-1": 1, "al-2": 0, "al-3": 0}
    ctxs.close_open(town, ctxs.CLEARED, "al-1")
    assert plain()["al-1"] == 0  # closed: no longer in the queue at all


def test_a_schema_1_database_gains_the_queue_columns(town_dir, rig, capacity, memory):
    capacity(1)
    write_items(town_dir, "alpha", [item("al-1", priority=3), item("al-2", priority=1)])
    sling(Town(town_dir), ["al-1", "al-2", "alpha"], SlingOptions())
    promote(Town(town_dir), "al-1")
    before = [r["id"] for r in views.list_queue(Town(town_dir), limit=10)]
    columns = ("plain", "enqueued_at", "target_rig", "f_class", "f_priority", "f_tokens", "f_labels",
               "f_touches", "f_kind", "f_minutes", "defer_ts", "facts_of")
    town = _rewritten(town_dir, "DROP INDEX issues_facts", "DROP INDEX issues_facts_of",
                      "DROP INDEX issues_status", *(f"ALTER TABLE issues DROP COLUMN {c}" for c in columns),
                      "CREATE INDEX issues_status ON issues (status, rig)",
                      "UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    assert [r["id"] for r in views.list_queue(town, limit=10)] == before == ["al-1", "al-2"]
    assert dict(town.db.query("SELECT work_item, plain FROM issues")) == {"al-1": 0, "al-2": 1}
    assert town.db.query("SELECT value FROM meta WHERE key = 'schema_version'") == [("3",)]
    assert _queue_indexes(town) == _queue_indexes(_fresh_town(town_dir.parent / "fresh"))


def _rewritten(town_dir: Path, *statements: str) -> Town:
    """The town after ``statements`` ran on its database behind sluice's back, opened as a new process
    opens it."""
    from sluice.store.database import db as dbmod

    Town(town_dir).db.close()
    path = town_dir / ".sluice" / "town.db"
    raw = sqlite3.connect(path)
    for statement in statements:
        raw.execute(statement)
    raw.commit()
    raw.close()
    for key in [k for k in dbmod._shared if Path(k).resolve() == path.resolve()]:
        del dbmod._shared[key]
    return Town(town_dir)


def _queue_indexes(town) -> list:
    return town.db.query("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'issues'"
                         " ORDER BY name")


def _fresh_town(path):
    from sluice.store.files.town import init_town

    return init_town(path)


def test_a_schema_2_database_gets_the_queue_indexes_of_open_plain_contexts(town_dir, rig, capacity,
                                                                          memory):
    capacity(1)
    write_items(town_dir, "alpha", [item("al-1", priority=3), item("al-2", priority=1)])
    sling(Town(town_dir), ["al-1", "al-2", "alpha"], SlingOptions())
    before = [r["id"] for r in views.list_queue(Town(town_dir), limit=10)]
    town = _rewritten(town_dir, "DROP INDEX issues_facts", "DROP INDEX issues_facts_of",
                      "CREATE INDEX issues_closed ON issues (closed_at)",
                      "CREATE INDEX issues_facts ON issues (plain, target_rig, f_class, f_priority, f_tokens,"
                      " f_labels, f_touches, f_kind, f_minutes, enqueued_at, open_item, defer_ts)",
                      "CREATE INDEX issues_facts_of ON issues (plain, facts_of, open_item)",
                      "UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    assert [r["id"] for r in views.list_queue(town, limit=10)] == before == ["al-2", "al-1"]
    assert town.db.query("SELECT value FROM meta WHERE key = 'schema_version'") == [("3",)]
    assert _queue_indexes(town) == _queue_indexes(_fresh_town(town_dir.parent / "fresh"))
    assert "issues_closed" not in [name for name, _sql in _queue_indexes(town)]


@pytest.mark.parametrize("seed", range(6))
def test_the_forecast_from_the_head_replays_as_the_survey(town_dir, rigs, capacity, memory, monkeypatch,
                                                          seed):
    from sluice.scheduler.views import forecast

    rng = random.Random(200 + seed)
    capacity(rng.choice([1, 3]), batch_size=rng.choice([1, 2]))
    if seed % 2:
        configure(town_dir, "rigs.alpha.max_polecats", "1")
    exports = build(town_dir, rng)
    dispatch.run_cycle(Town(town_dir))
    if seed % 3:
        twist(town_dir, rng, exports)
    now = 1_900_000_000.0

    def replayed(rows: int):
        result = forecast.replay(Session(Town(town_dir), now=now), rows=rows).result
        return (result.drain_at, result.drain_p90_at,
                [(s.item_id, s.start_at, s.done_at) for s in result.slots[:rows]])

    def listed():
        return forecast.list_queue(Session(Town(town_dir), now=now), limit=7, offset=2)

    fast = [replayed(3), replayed(40), listed()]
    assert queuehead.read_order(Session(Town(town_dir), now=now), 500) is not None
    monkeypatch.setattr(queuehead, "read_order", lambda *a, **k: None)
    monkeypatch.setattr(queuehead, "read_head", lambda *a, **k: None)
    monkeypatch.setattr(views, "HEAD_ROWS_MAX", 0)
    slow = [replayed(3), replayed(40), listed()]
    assert fast == slow


def test_the_facts_follow_a_rebuilt_index_and_a_busy_database_is_surveyed(town_dir, rig, capacity,
                                                                         memory):
    capacity(1)
    write_items(town_dir, "alpha", [item(f"al-{n}", priority=2) for n in (1, 2, 3)])
    sling(Town(town_dir), ["al-1", "al-2", "al-3", "alpha"], SlingOptions())
    assert [r["id"] for r in views.list_queue(Town(town_dir), limit=10)] == ["al-1", "al-2", "al-3"]
    write_items(town_dir, "alpha", [item("al-3", priority=0)])  # the later line wins: al-3 is urgent now
    town = Town(town_dir)
    assert queuehead.read_head(Session(town), 10) is not None
    assert [r["id"] for r in views.list_queue(town, limit=10)] == ["al-3", "al-1", "al-2"]
    facts = dict(town.db.query("SELECT work_item, f_priority FROM issues"))
    assert facts == {"al-1": 2, "al-2": 2, "al-3": 0}
    write_items(town_dir, "alpha", [item("al-1", priority=1)])
    other = sqlite3.connect(town_dir / ".sluice" / "town.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another writer holds the database: the facts wait, the answer does not
    try:
        assert queuehead.read_head(Session(Town(town_dir)), 10) is None
        assert [r["id"] for r in views.list_queue(Town(town_dir), limit=10)] == ["al-3", "al-1", "al-2"]
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert queuehead.read_head(Session(Town(town_dir)), 10) is not None


@pytest.mark.parametrize("seed", range(4))
def test_explain_from_the_head_says_what_the_survey_says(town_dir, rigs, capacity, memory, monkeypatch,
                                                        seed):
    from sluice.scheduler.views import forecast

    rng = random.Random(300 + seed)
    capacity(rng.choice([1, 3]), batch_size=rng.choice([1, 2]))
    exports = build(town_dir, rng)
    dispatch.run_cycle(Town(town_dir))
    twist(town_dir, rng, exports)
    now = 1_900_000_000.0
    ids = [r["id"] for records in exports.values() for r in records] + ["al-999"]

    def explained():
        return {i: forecast.explain(Session(Town(town_dir), now=now), i) for i in ids}

    fast = explained()
    monkeypatch.setattr(queuehead, "read_order", lambda *a, **k: None)
    monkeypatch.setattr(queuehead, "read_head", lambda *a, **k: None)
    slow = explained()
    assert fast == slow
