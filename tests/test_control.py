"""`scheduler status|list|pause|resume|clear`: JSON shapes, order, clearing duplicates, corrupt config."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from helpers.scheduler import (
    configure,
    contexts,
    events,
    fields,
    issues_path,
    item,
    open_contexts,
    without_etas,
    write_items,
)
from sluice.core.records import SchedulerState
from sluice.store.database.state import detect_actor, load_state
from sluice.store.files.town import Town

LIST_KEYS = {"id", "title", "status", "target_rig", "blocked", "context_id", "enqueued_at",
             "dispatch_failures"}
STATUS_KEYS = {"paused", "paused_by", "paused_at", "queued_total", "queued_ready", "active_polecats",
               "capacity", "max_polecats", "mode", "last_dispatch_at", "last_dispatch_count", "items"}


@pytest.fixture
def queue_dir(town_dir, rigs, capacity) -> Path:
    """Rigs alpha (a blocker, the item it blocks, an urgent one, an ordinary one) and beta; three polecats."""
    capacity(3)
    write_items(town_dir, "alpha", [
        item("al-a", "blocker"),
        item("al-b", "waits for a", deps=[("blocks", "al-a")]),
        item("al-c", "urgent", priority=0),
        item("al-d", "ordinary"),
    ])
    write_items(town_dir, "beta", [item("be-1", "beta work")])
    return town_dir


def test_list_rows_ready_in_rank_order_then_blocked(cli, queue_dir):
    cli.run("sling", "al-d", "al-b", "al-c", "alpha")
    cli.run("sling", "be-1")
    rows = cli.json("scheduler", "list")
    assert all(set(r) >= LIST_KEYS for r in rows)
    assert [(r["id"], r["blocked"]) for r in rows] == [
        ("al-c", False), ("al-d", False), ("be-1", False), ("al-b", True)]
    first = rows[0]
    assert (first["title"], first["status"], first["target_rig"], first["dispatch_failures"]) == (
        "urgent", "open", "alpha", 0)
    assert first["context_id"] == open_contexts(queue_dir, "alpha", "al-c")[0]["id"]
    assert first["enqueued_at"] == fields(open_contexts(queue_dir, "alpha", "al-c")[0])["enqueued_at"]
    assert without_etas(cli.json("scheduler", "list")) == without_etas(rows)  # deterministic but the clock
    text = cli.run("scheduler", "list").stdout
    assert "Scheduled work (4 item(s))" in text and re.search(r"\bblocked +al-b\b", text)
    header = ["#", "STATE", "ITEM", "RIG", "PRI", "SCORE", "START≈", "DONE≈", "WAITS", "FOR", "TITLE"]
    assert text.splitlines()[2].split() == header


def test_titles_cannot_forge_rows_or_drive_the_terminal(cli, queue_dir):
    write_items(queue_dir, "alpha",
                [item("al-x", "fix\n  ready   al-fake          → alpha        forged\x1b[2J")])
    cli.run("sling", "al-x", "alpha")
    for command in ("list", "status"):
        text = cli.run("scheduler", command).stdout
        assert "al-fake" in text and "\x1b" not in text
        [row] = [line for line in text.splitlines() if "al-" in line]
        assert row.endswith("fix\\n  ready   al-fake          → alpha        forged\\x1b[2J")
    assert cli.json("scheduler", "list")[0]["title"].startswith("fix\n")  # the data itself is untouched


def test_empty_list_and_status(cli, queue_dir):
    assert cli.json("scheduler", "list") == []
    assert "Nothing scheduled" in cli.run("scheduler", "list").stdout
    status = cli.json("scheduler", "status")
    assert set(status) >= STATUS_KEYS
    assert status["paused"] is False and status["items"] == [] and status["queued_total"] == 0
    assert (status["mode"], status["max_polecats"], status["capacity"], status["active_polecats"]) == (
        "deferred", 3, 3, 0)


def test_views_show_the_first_rows_and_count_them_all(cli, queue_dir):
    """status, list and snapshot cost what they show: a slice of the rows, every count exact."""
    cli.run("sling", "al-b", "al-c", "al-d", "be-1")
    every = without_etas(cli.json("scheduler", "list"))
    assert len(every) == 4
    status = cli.json("scheduler", "status", "--limit", "2")
    assert status["items"] == without_etas(cli.json("scheduler", "list", "--limit", "2")) == every[:2]
    assert (status["items_total"], status["truncated"], status["queued_total"]) == (4, True, 4)
    assert status["queued_ready"] == sum(1 for row in every if not row["blocked"])
    assert "… and 2 more" in cli.run("scheduler", "status", "--limit", "2").stdout
    whole = cli.json("scheduler", "status")  # the default shows 50 rows: all four here
    assert whole["items"] == every and whole["truncated"] is False
    assert cli.json("scheduler", "status", "--limit", "0")["items"] == every
    assert without_etas(cli.json("scheduler", "list", "--limit", "2", "--offset", "3")) == every[3:]
    assert cli.json("scheduler", "list", "--offset", "9") == []
    snap, full = cli.json("snapshot", "--limit", "1"), cli.json("snapshot")
    assert without_etas(snap["queue"]) == every[:1]
    assert (snap["scheduler"]["items_total"], snap["scheduler"]["truncated"]) == (4, True)
    assert without_etas(full["queue"]) == every and full["scheduler"]["truncated"] is False
    assert snap["rigs"] == full["rigs"] and full["rigs"]["alpha"]["queued"] == 3  # counts of every row
    done = cli.run("scheduler", "list", "--offset", "-1", check=False)
    assert done.returncode == 2 and "--offset must be >= 0" in done.stderr


def test_status_counts_and_text(cli, queue_dir):
    cli.run("sling", "al-b", "al-d", "alpha")
    status = cli.json("scheduler", "status")
    assert (status["queued_total"], status["queued_ready"]) == (2, 1)
    assert [r["id"] for r in status["items"]] == ["al-d", "al-b"]
    assert status["last_dispatch_at"] is None and status["last_dispatch_count"] == 0
    text = cli.run("scheduler", "status").stdout
    assert "State:      active" in text and "Queued:     2 total, 1 ready" in text and "deferred" in text
    configure(cli.town, "scheduler.max_polecats", "-1")
    assert cli.json("scheduler", "status")["mode"] == "direct"
    assert "direct" in cli.run("scheduler", "status").stdout


def test_pause_and_resume(cli, queue_dir):
    out = cli.run("scheduler", "pause", env={"SLUICE_ACTOR": "mayor"})
    assert out.stdout.strip() == "Scheduler paused"
    again = cli.run("scheduler", "pause")
    assert again.stdout.strip() == "Scheduler is already paused (by mayor)"
    status = cli.json("scheduler", "status")
    assert status["paused"] is True and status["paused_by"] == "mayor" and status["paused_at"]
    assert "PAUSED (by mayor)" in cli.run("scheduler", "status").stdout
    cli.run("sling", "al-d", "alpha")  # slinging still queues while paused
    assert len(open_contexts(queue_dir, "alpha")) == 1
    # resume answers with pause's keys, and status no longer names who paused or when
    assert cli.json("scheduler", "resume") == {"paused": False, "paused_by": None, "paused_at": None,
                                               "changed": True}
    after = cli.json("scheduler", "status")
    assert (after["paused"], after["paused_by"], after["paused_at"]) == (False, None, None)
    assert cli.run("scheduler", "resume").stdout.strip() == "Scheduler is not paused"
    paused = [e["type"] for e in events(queue_dir) if e["type"] in ("Paused", "Resumed")]
    assert paused == ["Paused", "Resumed"]


def test_clear_closes_every_open_context_and_nothing_else(cli, queue_dir):
    cli.run("sling", "al-d", "al-c", "alpha")
    cli.run("sling", "be-1")
    cli.run("scheduler", "pause")
    state = load_state(Town(queue_dir))
    items = issues_path(queue_dir, "alpha").read_bytes()
    out = cli.json("scheduler", "clear")
    assert out["cleared"] == 3 and out["item_id"] is None
    assert open_contexts(queue_dir, "alpha") == [] and open_contexts(queue_dir, "beta") == []
    closed = contexts(queue_dir, "alpha") + contexts(queue_dir, "beta")
    assert {c["close_reason"] for c in closed} == {"cleared"}
    assert issues_path(queue_dir, "alpha").read_bytes() == items
    assert load_state(Town(queue_dir)) == state and state.paused
    assert cli.run("scheduler", "clear").stdout.strip() == "Scheduler is already empty."
    assert events(queue_dir, "Cleared")[0]["payload"] == {"item_id": None, "count": 3, "by": detect_actor()}


def test_clear_item_closes_its_context_and_no_other(cli, queue_dir):
    cli.run("sling", "al-d", "al-c", "alpha")
    assert [r["id"] for r in cli.json("scheduler", "list")].count("al-d") == 1  # one row per item
    text = cli.run("scheduler", "clear", "--item", "al-d").stdout
    assert text.strip() == "Removed al-d from the scheduler (closed 1 context(s))"
    assert open_contexts(queue_dir, "alpha", "al-d") == [] and open_contexts(queue_dir, "beta") == []
    assert len(open_contexts(queue_dir, "alpha", "al-c")) == 1
    none = cli.run("scheduler", "clear", "--item", "al-d").stdout
    assert none.strip() == "No sling context found for al-d"
    unknown = cli.run("scheduler", "clear", "--item", "al-nope", check=False)
    assert unknown.returncode == 1 and "no item 'al-nope'" in unknown.stderr and unknown.stdout == ""


@pytest.mark.parametrize("command", [
    ("sling", "al-d", "alpha"), ("scheduler", "status"), ("scheduler", "list"), ("scheduler", "run"),
    ("scheduler", "run", "--dry-run"), ("scheduler", "pause"), ("scheduler", "resume"),
    ("scheduler", "clear"), ("daemon", "--once"),
])
def test_a_corrupt_config_is_an_error_for_every_command(cli, queue_dir, command):
    (queue_dir / ".sluice" / "config.json").write_text('{"version": 1, "rigs": ')
    done = cli.run(*command, check=False)
    assert done.returncode == 1, done.stdout
    assert "config.json" in done.stderr and "Traceback" not in done.stderr
    assert load_state(Town(queue_dir)) == SchedulerState()  # nothing written: still the zero state


def test_status_says_capacity_is_unknown_when_the_executor_cannot_be_asked(cli, queue_dir, memory):
    memory.unavailable = "no cluster answers at 127.0.0.1:9"
    status = cli.json("scheduler", "status")
    assert "no cluster answers" in status["executor_error"] and status["active_polecats"] is None
    assert status["capacity"] is None  # unknown, never "3 free"
    assert "unknown active, unknown free of 3" in cli.run("scheduler", "status").stdout


def test_a_clear_closes_the_whole_queue_and_names_every_item(cli, queue_dir):
    from sluice.api import open_town

    cli.run("sling", "al-b", "al-c", "al-d", "be-1")
    queued = {row["context_id"]: row["id"] for row in cli.json("scheduler", "list")}
    result = open_town(cli.town).clear()
    assert result.to_json()["cleared"] == 4 and cli.json("scheduler", "list") == []
    events_log = cli.town / ".sluice" / "events" / "scheduler.jsonl"
    closed = [json.loads(line)["payload"] for line in events_log.read_text().splitlines()
              if '"ContextClosed"' in line]
    assert {e["context_id"]: e["item_id"] for e in closed} == queued
    assert all(e["reason"] == "cleared" for e in closed)
