"""`sluice snapshot --json`: the one document every view shows, equal to what the CLI says."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from helpers.polecats import configure
from helpers.scheduler import item, sleeper, stop_polecats, wait_for, without_etas, write_items
from sluice.executors import get_executor
from sluice.scheduler.views.snapshot import snapshot
from sluice.store.database.events import emit_event, recent_events
from sluice.store.files.town import Town


@pytest.fixture
def busy_files(cli, rigs) -> Iterator[Town]:
    """Two rigs, a blocked chain, a merge request, two polecats running and four items queued."""
    write_items(cli.town, "alpha", [
        item("al-1", "first", priority=0), item("al-2", "second"), item("al-3", "third"),
        item("al-4", "waits", deps=[("blocks", "al-3")]),
        item("al-mr", "merge it", issue_type="merge-request"),
    ])
    write_items(cli.town, "beta", [item("be-1", "<script>alert(1)</script>"), item("be-2", "two")])
    configure(cli.town, {"scheduler.max_polecats": "2", "scheduler.batch_size": "2",
                         "executor.command": sleeper(60)})
    cli.run("sling", "al-1", "al-2", "al-3", "al-4", "alpha")
    cli.run("sling", "be-1", "be-2", "beta")
    cli.run("scheduler", "run")
    town = Town(cli.town)
    wait_for(lambda: len(get_executor(town).active()) == 2)
    yield town
    stop_polecats(cli.town)


def test_the_snapshot_is_what_status_list_and_polecat_list_say(cli, busy_files):
    snap = cli.json("snapshot")
    status = cli.json("scheduler", "status")
    listing = cli.json("scheduler", "list")
    polecats = cli.json("polecat", "list")

    items = status.pop("items")
    assert snap["scheduler"] == status
    assert without_etas(snap["queue"]) == items == without_etas(listing)  # status rows carry no forecast
    assert [r["id"] for r in snap["queue"]] == ["al-3", "be-1", "be-2", "al-4"]  # ready, then blocked
    running = [{k: v for k, v in p.items() if k not in ("runtime_seconds", "logs_command", "title")}
               for p in snap["polecats"]]
    assert running == [{k: v for k, v in p.items() if k != "runtime_seconds"}
                       for p in polecats if p["state"] == "running"]
    assert {p["item_id"]: p["title"] for p in snap["polecats"]} == {"al-1": "first", "al-2": "second"}
    assert sorted(p["item_id"] for p in running) == ["al-1", "al-2"]
    for row in snap["polecats"]:
        assert 0 <= row["runtime_seconds"] < 120
        assert row["logs_command"] == f"sluice polecat logs {row['id']}"
        assert row["title"] == cli.json("item", "show", row["item_id"])["title"]
    assert snap["executor"] == "local"  # the configured executor.kind

    assert snap["version"] == 1 and snap["town"] == str(cli.town)
    assert snap["rigs"]["alpha"] == {
        "ready": 3, "blocked": 1, "queued": 2, "queued_ready": 1, "queued_blocked": 1, "running": 2,
        "merge_queue": {"queued": 1, "running": 0, "depth": 1}, "source_stale": None,
    }
    assert snap["rigs"]["beta"]["queued"] == 2 and snap["rigs"]["beta"]["running"] == 0
    assert snap["rigs"]["beta"]["merge_queue"]["depth"] == 0
    assert {d["node_id"] for d in snap["decisions"]} == {"al-1", "al-2"}  # the dispatcher's decisions
    types = [e["type"] for e in snap["events"]]
    assert types.count("Dispatched") == 2 and "Enqueued" in types


def test_the_library_call_the_facade_and_the_command_agree(cli, busy_files):
    import sluice.api

    mine = snapshot(busy_files)
    facade = sluice.api.open_town(cli.town).snapshot().to_json()
    theirs = cli.json("snapshot")
    for snap in (mine, facade, theirs):
        del snap["at"], snap["forecast"]  # the forecast moves with the clock while no daemon ticks
        snap["queue"] = without_etas(snap["queue"])
        for row in snap["polecats"]:
            del row["runtime_seconds"]
    assert json.loads(json.dumps(mine)) == json.loads(json.dumps(facade)) == theirs


def test_pause_shows_in_the_snapshot(cli, busy_files):
    cli.run("scheduler", "pause")
    snap = snapshot(busy_files)
    assert snap["scheduler"]["paused"] is True
    assert snap["events"][-1]["type"] == "Paused"


def test_text_output_names_each_rig(cli, busy_files):
    text = cli.run("snapshot").stdout
    assert "alpha: 3 ready, 1 blocked, 2 queued, 2 running, merge queue 1" in text
    assert "2 polecat(s) running" in text


def test_an_empty_town_has_an_empty_snapshot(cli):
    snap = cli.json("snapshot")
    assert snap["queue"] == [] and snap["polecats"] == [] and snap["rigs"] == {}
    assert snap["events"] == [] and snap["decisions"] == []


def test_recent_events_reads_only_the_tail_and_skips_a_torn_append(cli):
    town = Town(cli.town)
    for n in range(500):
        emit_event(town, "Tick", {"n": n, "pad": "x" * 300})  # ~180 kB: more than one block from the end
    with open(town.events_path, "ab") as fh:
        fh.write(b'{"event_id": "torn')
    tail = recent_events(town, 5)
    assert [e["payload"]["n"] for e in tail] == [495, 496, 497, 498, 499]
    assert len(recent_events(town, 1000)) == 500
    assert recent_events(town, 0) == []


def test_recent_events_names_a_bad_line(cli):
    from sluice.errors import StoreCorrupt

    town = Town(cli.town)
    emit_event(town, "One", {})
    with open(town.events_path, "ab") as fh:
        fh.write(b"not json\n")
    emit_event(town, "Two", {})
    with pytest.raises(StoreCorrupt, match=r"scheduler\.jsonl:2: malformed event"):
        recent_events(town, 5)
