"""The scheduler state file: zero state, round trip, pause/resume, fresh read-modify-write."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sluice.core.records import SchedulerState
from sluice.errors import ConfigError
from sluice.store.state import load_state, record_dispatch, save_state, set_paused, set_resumed


def test_missing_file_is_the_zero_state(town_files):
    state = load_state(town_files)
    assert (state.paused, state.paused_by, state.last_dispatch_at, state.last_dispatch_count) == (
        False, None, None, 0)
    assert not town_files.state_path.exists()


def test_round_trip_keeps_every_field(town_files):
    state = SchedulerState(paused=True, paused_by="test-user", paused_at="2026-01-15T10:00:00Z",
                           last_dispatch_at="2026-01-15T09:30:00Z", last_dispatch_count=3)
    save_state(town_files, state)
    assert load_state(town_files) == state


def test_pause_records_who_and_when_and_is_idempotent(town_files, monkeypatch):
    monkeypatch.setenv("SLUICE_ACTOR", "admin")
    state, changed = set_paused(town_files)
    assert changed and state.paused and state.paused_by == "admin" and state.paused_at.endswith("Z")
    before = town_files.state_path.read_bytes()
    again, changed = set_paused(town_files, actor="someone-else")
    assert not changed and again.paused_by == "admin"
    assert town_files.state_path.read_bytes() == before


def test_resume_removes_paused_by_and_at_from_the_file(town_files):
    set_paused(town_files, actor="admin")
    state, changed = set_resumed(town_files)
    assert changed and not state.paused
    on_disk = json.loads(town_files.state_path.read_text())
    assert on_disk["paused"] is False and "paused_by" not in on_disk and "paused_at" not in on_disk
    assert set_resumed(town_files)[1] is False


def test_record_dispatch_rereads_so_a_pause_in_between_survives(town_files, town_dir):
    stale_view = load_state(town_files)  # what a cycle saw when it started: not paused
    assert not stale_view.paused
    subprocess.run([sys.executable, "-m", "sluice", "--town", str(town_dir), "scheduler", "pause"],
                   check=True, capture_output=True)
    state = record_dispatch(town_files, 2)
    assert state.paused and state.last_dispatch_count == 2 and state.last_dispatch_at
    assert load_state(town_files).paused


def test_concurrent_writers_never_lose_the_pause(town_files, town_dir):
    """Many processes recording dispatches while another pauses: the pause is never overwritten."""
    code = (
        "import sys; from sluice.store.town import Town; from sluice.store.state import record_dispatch\n"
        "t = Town(sys.argv[1])\n"
        "for n in range(15): record_dispatch(t, n)\n"
    )
    writers = [subprocess.Popen([sys.executable, "-c", code, str(town_dir)]) for _ in range(4)]
    set_paused(town_files, actor="pauser")
    assert all(p.wait(timeout=60) == 0 for p in writers)
    state = load_state(town_files)
    assert state.paused and state.paused_by == "pauser"


def test_corrupt_state_is_an_error_naming_the_file(town_files, cli):
    town_files.state_path.parent.mkdir(parents=True, exist_ok=True)
    town_files.state_path.write_text("{not json")
    with pytest.raises(ConfigError, match=r"scheduler-state\.json"):
        load_state(town_files)
    done = cli.run("scheduler", "status", check=False)
    assert done.returncode == 1 and "scheduler-state.json" in done.stderr and "Traceback" not in done.stderr
