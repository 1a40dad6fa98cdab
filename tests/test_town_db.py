"""The town database: durable settings, one transaction per change, the one-open-context constraint, the
outbox that feeds the JSON-lines logs, and the refusal of a schema from a newer sluice."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from helpers.scheduler import events, item, open_contexts, write_items
from sluice.errors import ConfigError
from sluice.store.database import contexts as ctxs
from sluice.store.database import db as dbmod
from sluice.store.database import outbox
from sluice.store.files.town import Town


@pytest.fixture
def queue_files(cli, rig, town_dir, capacity) -> Town:
    """Rig ``alpha`` with four items, deferred mode, nothing slung yet."""
    capacity(2)
    write_items(town_dir, "alpha", [item(f"al-{n}") for n in range(1, 5)])
    return Town(town_dir)


def test_the_database_is_durable_and_waits_for_a_busy_writer(queue_files):
    conn = queue_files.db.conn
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL: a commit survives a power cut
    assert conn.execute("PRAGMA foreign_keys").fetchone() == (1,)
    assert conn.execute("PRAGMA busy_timeout").fetchone() == (dbmod.BUSY_TIMEOUT_MS,)


def test_a_town_made_by_a_newer_sluice_is_refused_and_left_alone(cli, town_dir):
    path = dbmod.database_path(town_dir / ".sluice")
    raw = sqlite3.connect(path)
    raw.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(dbmod.SCHEMA_VERSION + 1),))
    raw.commit()
    raw.close()
    before = path.read_bytes()
    done = cli.run("scheduler", "status", check=False, isolated=True)  # a process that opens it anew
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"schema version {dbmod.SCHEMA_VERSION + 1}, made by a newer sluice" in done.stderr
    assert path.read_bytes() == before


def test_at_most_one_open_context_per_item_is_the_databases_rule(cli, queue_files):
    cli.run("sling", "al-1", "alpha")
    [context] = open_contexts(queue_files.root, "alpha", "al-1")
    second = {**context, "id": "al-wisp-second"}
    with pytest.raises(sqlite3.IntegrityError), queue_files.db.transaction() as conn:
        ctxs.insert(conn, "alpha", [second])
    assert [c["id"] for c in open_contexts(queue_files.root, "alpha", "al-1")] == [context["id"]]
    cli.run("scheduler", "clear", "--item", "al-1")
    with queue_files.db.transaction() as conn:  # once closed, the item may be queued again
        ctxs.insert(conn, "alpha", [second])
    assert [c["id"] for c in open_contexts(queue_files.root, "alpha", "al-1")] == ["al-wisp-second"]


def test_nested_changes_commit_together_or_not_at_all(queue_files):
    db = queue_files.db
    with pytest.raises(RuntimeError), db.transaction():
        db.advance("queue")
        with db.transaction():
            db.advance("queue")
            outbox.put(queue_files, outbox.EVENTS, ['{"event":"never"}'])
        raise RuntimeError("the outer change fails")
    assert db.versions("queue") == {"queue": 0}
    assert queue_files.db.query("SELECT * FROM outbox") == []
    with db.transaction():
        db.advance("queue")
        with db.transaction():
            db.advance("queue")
    assert db.versions("queue") == {"queue": 2}


def test_a_sling_of_many_items_is_one_transaction(cli, queue_files, monkeypatch):
    from sluice.scheduler.launch.sling import sling
    from sluice.store.database import events as event_log

    def refused(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(event_log, "emit_events", refused)  # the last step of the sling's transaction
    with pytest.raises(OSError):
        sling(queue_files, ["al-1", "al-2", "al-3", "alpha"])
    monkeypatch.undo()
    assert open_contexts(queue_files.root, "alpha") == []
    assert queue_files.db.one("SELECT count(*) FROM drawn_ids")[0] == 0
    result = sling(Town(queue_files.root), ["al-1", "al-2", "al-3", "alpha"])
    assert len(result.scheduled) == 3 and len(events(queue_files.root, "Enqueued")) == 3


def test_a_clear_that_cannot_be_made_says_so_and_changes_nothing(cli, queue_files, monkeypatch):
    from sluice.api import open_town
    from sluice.errors import StorageError

    cli.run("sling", "al-1", "al-2", "al-3", "alpha")
    monkeypatch.setattr(dbmod, "BUSY_TIMEOUT_MS", 200)
    locker = sqlite3.connect(dbmod.database_path(queue_files.dir), timeout=0)
    locker.execute("BEGIN IMMEDIATE")  # another writer holds the write lock past the busy timeout
    try:
        with pytest.raises(StorageError, match=r"town\.db"):
            open_town(queue_files.root).clear()
    finally:
        locker.rollback()
        locker.close()
    assert len(open_contexts(queue_files.root, "alpha")) == 3


def test_the_event_log_gets_a_committed_event_once_even_when_a_flush_died_half_way(queue_files):
    log = queue_files.events_path
    outbox.put(queue_files, outbox.EVENTS, ['{"n":1}'])
    assert log.read_text().splitlines() == ['{"n":1}']
    # A flush that appended its lines and died before it could record so: the lines are in the file
    # and still waiting in the outbox.
    with queue_files.db.transaction() as conn:
        conn.executemany("INSERT INTO outbox (log, line) VALUES (?, ?)",
                         [(outbox.EVENTS, '{"n":2}'), (outbox.EVENTS, '{"n":3}')])
    with open(log, "a") as fh:
        fh.write('{"n":2}\n{"n":')  # the first line whole, the second torn
    outbox.flush(queue_files)
    assert log.read_text().splitlines() == ['{"n":1}', '{"n":2}', '{"n":3}']
    assert outbox.waiting(queue_files, outbox.EVENTS) == (0, {})


def test_a_change_written_in_part_by_a_flush_that_died_keeps_the_rest_once(queue_files, monkeypatch):
    log = queue_files.events_path
    outbox.put(queue_files, outbox.EVENTS, ['{"n":1}'])
    with queue_files.db.transaction() as conn:  # one change of three lines, two of them appended
        conn.execute("INSERT INTO outbox (log, line) VALUES (?, ?)",
                     (outbox.EVENTS, '{"n":2}\n{"n":3}\n{"n":4}'))
    with open(log, "a") as fh:
        fh.write('{"n":2}\n{"n":3}\n{"n')
    from sluice.store.files import fsutil

    def refused(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fsutil, "append_bytes", refused)  # and the rest is refused
    outbox.flush(queue_files)
    assert log.read_text().splitlines() == ['{"n":1}', '{"n":2}', '{"n":3}']
    assert outbox.waiting(queue_files, outbox.EVENTS) == (1, {})
    monkeypatch.undo()
    outbox.flush(queue_files)
    assert log.read_text().splitlines() == ['{"n":1}', '{"n":2}', '{"n":3}', '{"n":4}']
    assert outbox.waiting(queue_files, outbox.EVENTS) == (0, {})


def test_events_a_log_refuses_wait_in_the_outbox_and_are_written_once_it_accepts_them(cli, queue_files):
    log = queue_files.events_path
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    log.mkdir()  # a directory where the log belongs: every append is refused
    done = cli.run("sling", "al-1", "alpha", check=False)
    assert done.returncode == 0  # the change is made: the event waits, it is not lost
    assert len(open_contexts(queue_files.root, "alpha")) == 1
    report = cli.json("patrol", "alpha")
    assert report["events_missing"]["count"] == 1
    log.rmdir()
    cli.run("feed")  # a reader of the log writes what waits first
    assert [e["payload"]["item_id"] for e in events(queue_files.root, "Enqueued")] == ["al-1"]
    assert cli.json("patrol", "alpha")["events_missing"] is None


def test_a_read_command_writes_nothing(cli, queue_files):
    from helpers.scheduler import tree_hash

    cli.run("sling", "al-1", "alpha")
    cli.run("snapshot")  # the item index and what is kept beside it, made once
    cli.run("scheduler", "status")  # and the item facts the queue's head copies onto the contexts, once
    before = tree_hash(queue_files.root)
    for argv in (("scheduler", "status"), ("scheduler", "list"), ("export", "alpha"), ("export", "--runs")):
        cli.run(*argv)
    assert tree_hash(queue_files.root) == before


# -- sluice export ---------------------------------------------------------------------------------------


def test_export_prints_a_rigs_records_as_beads_jsonl(cli, queue_files):
    cli.run("sling", "al-1", "al-2", "alpha")
    cli.run("scheduler", "clear", "--item", "al-2")
    lines = cli.run("export", "alpha").stdout.splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["status"] for r in records] == ["open", "closed"]
    first = records[0]
    assert list(first) == ["id", "title", "description", "status", "priority", "issue_type", "ephemeral",
                           "labels", "dependencies", "created_at", "updated_at"]
    assert first["labels"] == ["sluice:sling-context"] and first["ephemeral"] is True
    [edge] = first["dependencies"]
    assert edge["type"] == "tracks" and edge["depends_on_id"] == "al-1" and edge["issue_id"] == first["id"]
    assert json.loads(first["description"])["work_bead_id"] == "al-1"
    assert records[1]["close_reason"] == "cleared" and records[1]["closed_at"]
    opened = [json.loads(line) for line in cli.run("export", "alpha", "--open").stdout.splitlines()]
    assert opened == records[:1]


def test_export_of_runs_prints_run_records_as_json_lines(cli, queue_files, memory):
    cli.run("sling", "al-1", "alpha")
    cli.run("scheduler", "run")
    runs = [json.loads(line) for line in cli.run("export", "--runs").stdout.splitlines()]
    assert [r["item_id"] for r in runs] == ["al-1"] and runs[0]["outcome"] == "running"


def test_export_of_an_unknown_rig_is_an_error(cli, queue_files):
    done = cli.run("export", "nope", check=False)
    assert done.returncode == 1 and "nope" in done.stderr and done.stdout == ""


# -- a town made by sluice 0.1.0 -------------------------------------------------------------------------

OLD_TOWN = Path(__file__).parent / "data" / "town-0.1.0"


@pytest.fixture
def old_dir(tmp_path) -> Path:
    """A copy of a small town sluice 0.1.0 made (tests/data/town-0.1.0), its rig over a fresh repository."""
    import shutil

    from helpers import make_repo

    town = tmp_path / "old"
    shutil.copytree(OLD_TOWN / "sluice", town / ".sluice")
    config = json.loads((town / ".sluice" / "config.json").read_text())
    config["rigs"]["alpha"]["repo"] = str(make_repo(tmp_path / "old-repo"))
    (town / ".sluice" / "config.json").write_text(json.dumps(config))
    return town


def _expected(name: str):
    return json.loads((OLD_TOWN / "expected" / name).read_text())


def test_a_town_made_by_0_1_0_is_migrated_whole_on_first_open(old_dir):
    from helpers import Cli

    old = Cli(old_dir)
    before = {p.relative_to(old_dir / ".sluice"): p.read_bytes()
              for p in (old_dir / ".sluice").rglob("*") if p.is_file()}
    listed = old.json("scheduler", "list")
    keys = ("id", "context_id", "enqueued_at", "dispatch_failures", "last_failure", "retry_at", "promoted_at",
            "why")
    expected = _expected("list.json")
    assert [{k: r[k] for k in keys} for r in listed] == [{k: r[k] for k in keys} for r in expected]
    moved = sorted(old_dir.joinpath(".sluice").glob("migrated-*"))
    assert len(moved) == 1
    aside = moved[0]
    assert (aside / "rigs" / "alpha" / "ephemeral.jsonl").read_bytes() == \
        before[Path("rigs/alpha/ephemeral.jsonl")]  # moved, not deleted, byte for byte
    assert not (old_dir / ".sluice" / "rigs" / "alpha" / "ephemeral.jsonl").exists()
    assert (old_dir / ".sluice" / "rigs" / "alpha" / "issues.jsonl").exists()  # items are no state: they stay
    assert not (old_dir / ".sluice" / "runtime" / "index" / "alpha.queue.json").exists()  # derived: aside too
    status, expected_status = old.json("scheduler", "status"), _expected("status.json")
    for key in ("paused", "paused_by", "last_dispatch_at", "last_dispatch_count", "throttles"):
        assert status[key] == expected_status[key], key  # the pause, the last dispatch, the throttle
    broken = old.json("scheduler", "broken")
    assert [(b["item_id"], b["failures"], b["trips"]) for b in broken] == [
        (b["item_id"], b["failures"], b["trips"]) for b in _expected("broken.json")]
    runs = [json.loads(line) for line in old.run("export", "--runs").stdout.splitlines()]
    assert sorted(r["run_id"] for r in runs) == sorted(r["run_id"] for r in _expected("runs.json"))
    from sluice.store.files.town import Town as Files

    budget = json.loads(before[Path("runtime/budget.json")])
    assert Files(old_dir).db.one("SELECT count(*) FROM budget_charges")[0] == len(budget["launches"])
    closed = [json.loads(line) for line in before[Path("rigs/alpha/ephemeral.jsonl")].splitlines()]
    exported = {r["id"]: r for r in map(json.loads, old.run("export", "alpha").stdout.splitlines())}
    latest = {r["id"]: r for r in closed}
    assert exported == latest  # every record, open and closed, exactly as 0.1.0 wrote its last version


def test_a_second_open_of_a_migrated_town_changes_nothing(old_dir):
    from helpers import Cli
    from helpers.scheduler import tree_hash

    old = Cli(old_dir)
    old.run("scheduler", "status")
    before = tree_hash(old_dir)
    old.run("scheduler", "status")
    assert tree_hash(old_dir) == before
    assert len(list(old_dir.joinpath(".sluice").glob("migrated-*"))) == 1


def test_a_0_1_0_town_is_not_opened_by_the_store_alone_without_its_migration(old_dir):
    with pytest.raises(ConfigError, match=r"made by sluice 0\.1"):
        Town(old_dir).db.conn  # noqa: B018
