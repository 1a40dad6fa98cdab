"""Storage refusals (a full disk, an unwritable file) are named errors; a command reports what it did.

A full disk is real here: a small tmpfs (tests/helpers/storage.py), skipped
where mounting is not permitted.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from helpers import Cli
from helpers.scheduler import (
    add_rig,
    configure,
    events,
    item,
    open_contexts,
    sleeper,
    write_items,
)
from helpers.scheduler import fields as fields_of
from helpers.storage import fill, small_disk
from sluice.errors import StorageError
from sluice.store.files import fsutil

#: A read command opens the town database (the scheduler state); in WAL mode it cannot be opened on a
#: full disk once its last connection removed its ``-shm`` file.  For the database's opening to settle.
FULL_DISK_OPEN = pytest.mark.xfail(reason="the town database cannot be opened on a full disk without its"
                                          " -shm file", strict=False)


@pytest.fixture
def disk(tmp_path: Path):
    with small_disk(tmp_path / "disk", "2m") as path:
        yield path


def test_a_failed_append_is_cut_back_to_the_length_before_it(disk):
    log = disk / "log.jsonl"
    fsutil.append_bytes(log, b'{"id":"a"}\n')
    fill(disk, leave=4096)
    with pytest.raises(StorageError) as caught:
        fsutil.append_bytes(log, b'{"id":"b","pad":"' + b"x" * 20000 + b'"}\n')
    assert caught.value.errno == errno.ENOSPC and str(log) in str(caught.value)
    assert log.read_bytes() == b'{"id":"a"}\n'


def test_an_append_that_cannot_open_its_file_names_the_file(tmp_path):
    target = tmp_path / "events.jsonl"
    target.mkdir()  # a directory where the log belongs: refused even to root
    with pytest.raises(StorageError) as caught:
        fsutil.append_bytes(target, b"{}\n")
    assert str(target) in str(caught.value)


@pytest.fixture
def full_cli(disk) -> Cli:
    """A town with a rig of ten items on a small disk, its index built, the disk then filled."""
    town = disk / "town"
    cli = Cli(town)
    town.mkdir()
    cli.run("init", str(town))
    add_rig(cli, disk.parent, "alpha", "al")
    configure(town, "scheduler.max_polecats", "2")  # deferred: a sling queues, the daemon launches
    write_items(town, "alpha", [item(f"al-{n}", "a task with a title " * 20) for n in range(10)])
    cli.run("item", "list", "alpha")  # the index exists before the disk fills
    cli.run("scheduler", "status")  # and the town database
    return cli


def test_a_sling_of_ten_items_on_a_full_disk_queues_none_of_them(full_cli, disk):
    cli = full_cli
    fill(disk, leave=4096)  # room for a few of the ten contexts, not all
    done = cli.run("sling", *[f"al-{n}" for n in range(10)], "alpha", check=False)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert str(cli.town / ".sluice" / "town.db") in done.stderr
    os.unlink(disk / "filler")
    assert open_contexts(cli.town, "alpha") == []
    assert events(cli.town, "Enqueued") == []
    assert json.loads(cli.run("scheduler", "status", "--json").stdout)["queued_total"] == 0


# -- the event log refuses: the change stands, a warning says so, patrol remembers ---------------


def unwritable_events(town: Path) -> None:
    """The event log as a full disk of its own: every write to it fails with ENOSPC."""
    path = town / ".sluice" / "events" / "scheduler.jsonl"
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/full")


@pytest.fixture
def queue_cli(cli, rig, capacity) -> Cli:
    """The CLI over rig alpha with al-1 and al-2 ready, in deferred mode."""
    capacity(2)
    write_items(cli.town, "alpha", [item("al-1"), item("al-2")])
    return cli


def test_a_sling_the_event_log_refuses_is_acknowledged_with_a_warning(queue_cli):
    cli = queue_cli
    unwritable_events(cli.town)
    done = cli.run("sling", "al-1", "alpha", "--json", check=False)
    assert done.returncode == 0, done.stderr
    assert [row["item_id"] for row in json.loads(done.stdout)["scheduled"]] == ["al-1"]
    assert "warning:" in done.stderr and "scheduler.jsonl" in done.stderr and "Enqueued" in done.stderr
    assert [fields_of(c)["work_bead_id"] for c in open_contexts(cli.town, "alpha")] == ["al-1"]
    report = cli.json("patrol", "alpha")
    assert report["events_missing"]["count"] == 1 and report["events_missing"]["types"] == {"Enqueued": 1}
    assert "events waiting: 1 event(s)" in cli.run("patrol", "alpha").stdout


def test_a_cycle_the_event_log_refuses_still_reports_its_launch(queue_cli):
    cli = queue_cli
    configure(cli.town, "executor.command", sleeper(0.1))
    cli.run("sling", "al-1", "alpha")
    unwritable_events(cli.town)
    done = cli.run("scheduler", "run", "--json", check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["dispatched"] == 1
    assert "warning:" in done.stderr and "Dispatched" in done.stderr
    assert open_contexts(cli.town, "alpha") == []  # closed `dispatched`, as with a working log
    assert cli.json("patrol", "alpha")["events_missing"]["types"]["Dispatched"] == 1


def test_patrol_says_nothing_is_missing_while_the_log_takes_every_event(queue_cli):
    cli = queue_cli
    cli.run("sling", "al-1", "alpha")
    assert cli.json("patrol", "alpha")["events_missing"] is None


# -- a read on a full disk without its index: answered from the source, said once ---------------



def test_read_commands_on_a_full_disk_without_an_index_read_the_items_file(full_cli, disk):
    cli = full_cli
    cli.run("sling", "al-0", "al-1", "alpha")
    for index in (cli.town / ".sluice" / "runtime" / "index").glob("*"):
        index.unlink()
    fill(disk)
    status = cli.run("scheduler", "status", "--json", check=False)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["queued_total"] == 2
    assert status.stderr.count("cannot write the index") == 1 and "alpha.sqlite" in status.stderr
    listed = cli.run("item", "list", "alpha", "--json", check=False)
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == 10
    preview = cli.run("schedule", "next", "--preview", "--json", check=False)
    assert preview.returncode == 0, preview.stderr
    assert json.loads(preview.stdout)[0]["node_id"].startswith("al-")
    slung = ("sling", *[f"al-{n}" for n in range(2, 10)], "alpha")  # more than a page: no slack left to fill
    for command in (slung, ("schedule", "next")):  # they must write: refused by name
        done = cli.run(*command, check=False)
        assert done.returncode == 1 and "internal error" not in done.stderr and "Traceback" not in done.stderr
        assert "No space left on device" in done.stderr and str(cli.town) in done.stderr


def test_a_damaged_index_is_still_rebuilt(full_cli):
    cli = full_cli
    [index] = (cli.town / ".sluice" / "runtime" / "index").glob("alpha.sqlite")
    index.write_bytes(b"not a database at all" * 100)
    assert len(cli.json("item", "list", "alpha")) == 10



def test_the_mcp_tools_answer_or_refuse_by_name_on_a_full_disk_without_an_index(full_cli, disk):
    from test_mcp import session_calls

    cli = full_cli
    cli.run("sling", "al-0", "alpha")
    for index in (cli.town / ".sluice" / "runtime" / "index").glob("*"):
        index.unlink()
    fill(disk)
    _names, results = session_calls({"SLUICE_TOWN": str(cli.town)}, [
        ("sluice_scheduler_status", {}),
        ("sluice_scheduler_list", {}),
        ("sluice_schedule_next", {"preview": True}),
        ("sluice_patrol", {"rig": "alpha"}),
        ("sluice_sling", {"item_ids": [f"al-{n}" for n in range(1, 10)], "rig": "alpha"}),
    ])
    for is_error, text in results[:4]:
        assert not is_error, text
    assert json.loads(results[0][1])["queued_total"] == 1
    is_error, text = results[4]
    assert is_error and "full" in text and "town.db" in text
    assert "internal error" not in text and "Traceback" not in text


def test_a_cycle_whose_decision_log_refuses_still_reports_its_launch(queue_cli):
    import shutil
    import subprocess

    cli = queue_cli
    configure(cli.town, "executor.command", sleeper(0.1))
    cli.run("sling", "al-1", "alpha")
    log = cli.town / ".sluice" / "schedule" / "decisions.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.touch()
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(log)]).returncode != 0:
        pytest.skip("cannot make a file immutable here (chattr +i needs CAP_LINUX_IMMUTABLE)")
    try:
        done = cli.run("scheduler", "run", "--json", check=False)
    finally:
        subprocess.run(["chattr", "-i", str(log)], check=True)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["dispatched"] == 1
    assert str(log) in done.stderr and "wait to be written" in done.stderr  # kept, not lost
    assert open_contexts(cli.town, "alpha") == []
    cli.run("schedule", "status")  # once the log takes lines again, the decision is written, once
    assert [json.loads(line)["node_id"] for line in log.read_text().splitlines()] == ["al-1"]


def test_a_daemon_whose_log_refuses_keeps_dispatching(queue_cli):
    import shutil
    import subprocess

    cli = queue_cli
    configure(cli.town, "executor.command", sleeper(0.1))
    cli.run("sling", "al-1", "alpha")
    log = cli.town / ".sluice" / "runtime" / "daemon.log"
    log.write_text("")
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(log)]).returncode != 0:
        pytest.skip("cannot make a file immutable here (chattr +i needs CAP_LINUX_IMMUTABLE)")
    try:
        done = cli.run("daemon", "--once", check=False)
    finally:
        subprocess.run(["chattr", "-i", str(log)], check=True)
    assert done.returncode == 0, done.stderr
    assert "tick 1: dispatched 1" in done.stderr
    assert "warning:" in done.stderr and "daemon.log" in done.stderr
    assert open_contexts(cli.town, "alpha") == []


def test_a_daemon_whose_heartbeat_the_database_refuses_keeps_dispatching(queue_cli, monkeypatch):
    from sluice.scheduler.unattended import daemon as daemon_module
    from sluice.scheduler.unattended.daemon import Daemon
    from sluice.store.files.town import Town

    cli = queue_cli
    configure(cli.town, "executor.command", sleeper(0.1))
    cli.run("sling", "al-1", "alpha")
    town = Town(cli.town)

    def refused(town, beat):
        raise StorageError(town.db.path, "cannot write it: database or disk is full", errno.ENOSPC)

    monkeypatch.setattr(daemon_module, "write_heartbeat", refused)
    lines: list[str] = []
    assert Daemon(town, interval=60, echo=lines.append).run(once=True) == 0
    assert any("tick 1: dispatched 1" in line for line in lines)
    assert any("warning:" in line and "town.db" in line and "disk is full" in line for line in lines)
    assert open_contexts(cli.town, "alpha") == []


def test_a_read_only_index_directory_costs_speed_not_the_answer(queue_cli):
    cli = queue_cli
    index = cli.town / ".sluice" / "runtime" / "index"
    for old in index.glob("*"):
        old.unlink()
    with small_disk(index, "1m", read_only=True):
        listed = cli.run("item", "list", "alpha", "--json", check=False)
        status = cli.run("scheduler", "status", "--json", check=False)
    assert listed.returncode == 0, listed.stderr
    assert sorted(row["id"] for row in json.loads(listed.stdout)) == ["al-1", "al-2"]
    assert "cannot write the index" in listed.stderr and "Read-only file system" in listed.stderr
    assert status.returncode == 0, status.stderr


def test_a_storage_error_crosses_a_process_boundary_whole():
    """A pool's worker that meets one hands it back with its message, not a result it cannot unpickle."""
    import pickle

    again = pickle.loads(pickle.dumps(StorageError("/t/town.db", "cannot write it: locked", errno.EIO)))
    assert (str(again), again.path, again.reason, again.errno) == (
        "/t/town.db: cannot write it: locked", "/t/town.db", "cannot write it: locked", errno.EIO)
