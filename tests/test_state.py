"""The scheduler state and the heartbeat in the town database: zero state, round trip, pause/resume,
fresh read-modify-write, versions, and the migration of sluice 0.1's files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sluice.core.records import SchedulerState
from sluice.errors import ConfigError
from sluice.store.database import state as state_store
from sluice.store.database.state import (
    load_state,
    migrate_from_files,
    read_heartbeat,
    record_dispatch,
    set_paused,
    set_resumed,
    update_state,
    write_heartbeat,
)


def version(town) -> int:
    return town.db.versions(state_store.VERSION)[state_store.VERSION]


def test_no_row_is_the_zero_state(town_files):
    state = load_state(town_files)
    assert (state.paused, state.paused_by, state.last_dispatch_at, state.last_dispatch_count) == (
        False, None, None, 0)
    assert town_files.db.query("SELECT * FROM scheduler_state") == []
    assert not (town_files.runtime / "scheduler-state.json").exists()  # no file beside the database


def test_round_trip_keeps_every_field(town_files):
    state = SchedulerState(paused=True, paused_by="test-user", paused_at="2026-01-15T10:00:00Z",
                           last_dispatch_at="2026-01-15T09:30:00Z", last_dispatch_count=3,
                           extra={"note": "from an old file"})
    update_state(town_files, lambda _old: state)
    assert load_state(town_files) == state


def test_pause_records_who_and_when_and_is_idempotent(town_files, monkeypatch):
    monkeypatch.setenv("SLUICE_ACTOR", "admin")
    state, changed = set_paused(town_files)
    assert changed and state.paused and state.paused_by == "admin" and state.paused_at.endswith("Z")
    before = version(town_files)
    again, changed = set_paused(town_files, actor="someone-else")
    assert not changed and again.paused_by == "admin"
    assert version(town_files) == before  # nothing written: the version stands


def test_each_change_advances_the_state_version(town_files):
    versions = [version(town_files)]
    set_paused(town_files, actor="admin")
    versions.append(version(town_files))
    record_dispatch(town_files, 2)
    versions.append(version(town_files))
    set_resumed(town_files)
    versions.append(version(town_files))
    assert versions == sorted(set(versions)) and len(versions) == 4


def test_resume_clears_paused_by_and_at(town_files):
    set_paused(town_files, actor="admin")
    state, changed = set_resumed(town_files)
    assert changed and not state.paused
    [row] = town_files.db.query("SELECT paused, paused_by, paused_at FROM scheduler_state")
    assert row == (0, None, None)
    assert set_resumed(town_files)[1] is False


def test_record_dispatch_rereads_so_a_pause_in_between_survives(town_files, town_dir):
    stale_view = load_state(town_files)  # what a cycle saw when it started: not paused
    assert not stale_view.paused
    subprocess.run([sys.executable, "-m", "sluice", "--town", str(town_dir), "scheduler", "pause"],
                   check=True, capture_output=True)
    state = record_dispatch(town_files, 2)
    assert state.paused and state.last_dispatch_count == 2 and state.last_dispatch_at
    assert load_state(town_files).paused


def test_record_dispatch_writes_only_its_own_columns(town_files):
    """A cycle that read the state before a pause writes its dispatch without writing ``paused`` back."""
    stale = load_state(town_files)
    set_paused(town_files, actor="pauser")
    record_dispatch(town_files, 1, at="2026-01-15T09:30:00Z")
    state = load_state(town_files)
    assert not stale.paused and state.paused and state.paused_by == "pauser"
    assert (state.last_dispatch_at, state.last_dispatch_count) == ("2026-01-15T09:30:00Z", 1)


def test_concurrent_writers_never_lose_the_pause(town_files, town_dir):
    """Many processes recording dispatches while another pauses: the pause is never overwritten."""
    code = (
        "import sys; from sluice.store.files.town import Town;"
        " from sluice.store.database.state import record_dispatch\n"
        "t = Town(sys.argv[1])\n"
        "for n in range(15): record_dispatch(t, n)\n"
    )
    writers = [subprocess.Popen([sys.executable, "-c", code, str(town_dir)]) for _ in range(4)]
    set_paused(town_files, actor="pauser")
    assert all(p.wait(timeout=60) == 0 for p in writers)
    state = load_state(town_files)
    assert state.paused and state.paused_by == "pauser"


def test_a_change_inside_a_callers_transaction_rolls_back_with_it(town_files):
    with pytest.raises(RuntimeError), town_files.db.transaction():
        set_paused(town_files, actor="admin")
        record_dispatch(town_files, 4)
        assert load_state(town_files).paused  # the caller's transaction sees its own writes
        raise RuntimeError("the rest of the change failed")
    assert load_state(town_files) == SchedulerState() and version(town_files) == 0


def test_the_heartbeat_round_trips_and_advances_its_own_version(town_files):
    assert read_heartbeat(town_files) is None
    beat = {"pid": 42, "started_at": "2026-01-15T09:00:00Z", "interval": 60.0, "ticks": 3,
            "last_tick_at": "2026-01-15T09:02:00Z", "last_result": {"dispatched": 1, "reason": "batch"}}
    write_heartbeat(town_files, beat)
    assert read_heartbeat(town_files) == beat
    write_heartbeat(town_files, {**beat, "stopped_at": "2026-01-15T09:03:00Z"})
    assert read_heartbeat(town_files)["stopped_at"] == "2026-01-15T09:03:00Z"
    versions = town_files.db.versions(state_store.VERSION, state_store.HEARTBEAT_VERSION)
    assert versions == {state_store.VERSION: 0, state_store.HEARTBEAT_VERSION: 2}  # not the state's


# -- a town made by sluice 0.1 ----------------------------------------------------------------------


def migrate(town) -> list:
    with town.db.transaction() as conn:
        return migrate_from_files(town, conn)


def test_migration_brings_the_pause_the_last_dispatch_and_the_heartbeat(town_files):
    runtime = town_files.runtime
    runtime.mkdir(parents=True, exist_ok=True)
    (runtime / "scheduler-state.json").write_text(json.dumps({
        "paused": True, "paused_by": "ops", "paused_at": "2026-01-15T10:00:00Z",
        "last_dispatch_at": "2026-01-15T09:30:00Z", "last_dispatch_count": 3, "note": "kept"}))
    (runtime / "daemon.json").write_text(json.dumps({
        "pid": 77, "started_at": "2026-01-15T09:00:00Z", "interval": 180, "ticks": 9,
        "last_tick_at": "2026-01-15T09:30:00Z", "last_result": {"dispatched": 3}}))
    moved = migrate(town_files)
    assert sorted(p.name for p in moved) == ["daemon.json", "scheduler-state.json"]
    assert all(p.exists() for p in moved)  # the caller moves them aside; nothing is deleted here
    state = load_state(town_files)
    assert (state.paused, state.paused_by, state.paused_at) == (True, "ops", "2026-01-15T10:00:00Z")
    assert (state.last_dispatch_at, state.last_dispatch_count) == ("2026-01-15T09:30:00Z", 3)
    assert state.extra == {"note": "kept"}
    beat = read_heartbeat(town_files)
    assert (beat["pid"], beat["interval"], beat["ticks"], beat["last_result"]) == (77, 180.0, 9,
                                                                                  {"dispatched": 3})


def test_migration_of_a_town_without_the_files_brings_nothing(town_files):
    assert migrate(town_files) == []
    assert load_state(town_files) == SchedulerState() and read_heartbeat(town_files) is None


def test_a_heartbeat_that_is_not_json_is_no_heartbeat_but_is_moved_aside(town_files):
    town_files.runtime.mkdir(parents=True, exist_ok=True)
    (town_files.runtime / "daemon.json").write_text("{half a beat")
    assert [p.name for p in migrate(town_files)] == ["daemon.json"]
    assert read_heartbeat(town_files) is None


@pytest.mark.parametrize("text, says", [("{not json", "not valid JSON"), ("[1]", "expected a JSON object"),
                                        ('{"paused": "yes"}', "paused")])
def test_a_corrupt_state_file_is_an_error_naming_it_and_migrates_nothing(town_files, text, says):
    town_files.runtime.mkdir(parents=True, exist_ok=True)
    (town_files.runtime / "scheduler-state.json").write_text(text)
    with pytest.raises(ConfigError, match=r"scheduler-state\.json") as caught:
        migrate(town_files)
    assert says in str(caught.value)
    assert load_state(town_files) == SchedulerState()
