"""A work item that vanishes from a rig is held (`missing-item`), not closed at once.

Tools rewrite beads exports in place: for a moment the file is cut short or
empty.  A queued context whose item is missing is held, with the time it was
first found missing recorded on it; only once the item has stayed missing for
``scheduler.missing_grace`` is the context closed ``invalid-work-item``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from helpers import make_repo
from helpers.scheduler import configure, events, fields, item, open_contexts, sleeper, wait_for

WORK = ("ex-1", "ex-2", "ex-3", "ex-4")


@pytest.fixture
def export(cli, tmp_path):
    """A rig `ext` reading a real export: a blocker first, then four queued items it blocks."""
    repo = make_repo(tmp_path / "repos" / "ext")
    path = tmp_path / "export.jsonl"
    records = [item("ex-0", title="the blocker")]
    records += [item(i, deps=[("blocks", "ex-0")]) for i in WORK]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    cli.run("rig", "add", "ext", str(repo), "--prefix", "ex", "--items", str(path))
    configure(cli.town, "scheduler.max_polecats", "2")
    configure(cli.town, "executor.command", sleeper(5))
    cli.run("sling", *WORK, "ext")
    assert len(open_contexts(cli.town, "ext")) == 4
    return path


def daemon_log(town) -> str:
    path = town / ".sluice" / "runtime" / "daemon.log"
    return path.read_text() if path.exists() else ""


def ticks(town) -> int:
    return daemon_log(town).count(" tick ")


def wait_ticks(town, count: int) -> None:
    start = ticks(town)
    wait_for(lambda: ticks(town) >= start + count, timeout=60)


def test_an_export_truncated_and_emptied_under_the_daemon_loses_no_queued_work(cli, export):
    original = export.read_bytes()
    env = {**os.environ, "SLUICE_TOWN": str(cli.town)}
    daemon = subprocess.Popen([sys.executable, "-m", "sluice", "daemon", "--interval", "1"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ticks(cli.town, 1)
        # cut mid-line inside the third work item: ex-0, ex-1 and ex-2 survive whole
        cut = original.index(b'"ex-3"') + 3
        export.write_bytes(original[:cut])
        wait_ticks(cli.town, 2)
        listed = {row["id"]: row for row in cli.json("scheduler", "list")}
        assert listed["ex-3"]["held"] == listed["ex-4"]["held"] == "missing-item"
        assert listed["ex-1"]["held"] is None
        # emptied: every item is gone
        export.write_bytes(b"")
        wait_ticks(cli.town, 2)
        assert "held 4 (missing-item" in daemon_log(cli.town)
        patrol = cli.json("patrol", "ext")
        assert {row["item_id"] for row in patrol["held"]} == set(WORK)
        assert all(row["reason"] == "missing-item" for row in patrol["held"])
        export.write_bytes(original)
        wait_ticks(cli.town, 2)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    queued = open_contexts(cli.town, "ext")
    assert sorted(fields(c)["work_bead_id"] for c in queued) == sorted(WORK)
    assert not any(fields(c).get("missing_since") for c in queued)  # the item is back: the clock is reset
    closed = [e for e in events(cli.town, "ContextClosed") if e["payload"]["reason"] == "invalid-work-item"]
    assert closed == []


def test_missing_since_is_written_once_and_the_context_closes_after_the_grace(cli, export, clock):
    configure(cli.town, "scheduler.missing_grace", "1m")
    export.write_bytes(b"")
    first = cli.json("scheduler", "run")
    assert {row["item_id"] for row in first["held"]} == set(WORK)
    assert first["closed"] == []
    since = {fields(c)["work_bead_id"]: fields(c)["missing_since"] for c in open_contexts(cli.town, "ext")}
    assert len(since) == 4 and all(since.values())
    text = cli.run("scheduler", "list").stdout
    assert "held" in text and "missing-item" in text
    cli.run("scheduler", "run", "--json")
    again = {fields(c)["work_bead_id"]: fields(c)["missing_since"] for c in open_contexts(cli.town, "ext")}
    assert again == since  # written once
    configure(cli.town, "scheduler.missing_grace", "1s")  # the grace runs from the first sighting
    clock.advance(0.9)
    assert cli.json("scheduler", "run")["closed"] == []
    clock.advance(0.2)
    last = cli.json("scheduler", "run")
    assert sorted(row["item_id"] for row in last["closed"]) == sorted(WORK)
    assert {row["reason"] for row in last["closed"]} == {"invalid-work-item"}
    assert open_contexts(cli.town, "ext") == []


def test_a_grace_of_zero_closes_at_once(cli, export):
    configure(cli.town, "scheduler.missing_grace", "0")
    export.write_bytes(b"")
    done = cli.json("scheduler", "run")
    assert len(done["closed"]) == 4 and done["held"] == []


def test_missing_grace_is_validated_like_the_other_durations(cli):
    bad = cli.run("config", "set", "scheduler.missing_grace", "soon", check=False)
    assert bad.returncode == 2 and "scheduler.missing_grace" in bad.stderr
    cli.run("config", "set", "scheduler.missing_grace", "1m30s")
    assert cli.run("config", "get", "scheduler.missing_grace").stdout.strip() == "1m30s"


def test_a_torn_tail_is_warned_about_every_time_the_index_is_used(cli, export):
    original = export.read_bytes()
    export.write_bytes(original + b'{"id": "ex-9", "ti')
    for _ in range(3):
        done = cli.run("item", "ready")
        assert done.stderr.count("ignoring a torn last line") == 1, done.stderr


def test_marking_and_forgetting_missing_items_is_one_write_per_rig(cli, export, monkeypatch):
    """A whole queue going missing (or coming back) costs one write of all its contexts, not one each."""
    from sluice.store.database import contexts

    batches: list[list[str]] = []
    original = contexts.update_fields_many

    def counted(store, changes, town=None):
        written = original(store, changes, town)
        if written:
            batches.append(sorted(written))
        return written

    monkeypatch.setattr(contexts, "update_fields_many", counted)
    kept = export.read_bytes()
    configure(cli.town, "scheduler.missing_grace", "1h")
    export.write_bytes(b"")
    cli.json("scheduler", "run", "--dry-run")
    assert batches == []  # a dry run writes nothing
    cli.json("scheduler", "run")
    ids = sorted(c["id"] for c in open_contexts(cli.town, "ext"))
    assert batches == [ids]
    assert all(fields(c)["missing_since"] for c in open_contexts(cli.town, "ext"))
    export.write_bytes(kept)
    batches.clear()
    cli.json("scheduler", "run")
    assert batches == [ids]
    assert not any(fields(c).get("missing_since") for c in open_contexts(cli.town, "ext"))
