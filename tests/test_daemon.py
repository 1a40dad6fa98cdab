"""`sluice daemon`: one tick, the heartbeat and log, the singleton lock, SIGTERM, reaping."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import Cli
from helpers.scheduler import (
    configure,
    events,
    issues_path,
    item,
    open_contexts,
    python_command,
    sleeper,
    wait_for,
    write_items,
)
from sluice.executors.local import LocalExecutor
from sluice.store.database.state import read_heartbeat
from sluice.store.files.town import Town


@pytest.fixture
def working_dir(town_dir, rig, capacity) -> Path:
    """Rig alpha with al-1 and al-2 ready, two polecats at once, each working half a second."""
    capacity(2)
    configure(town_dir, "executor.command", python_command("import time; time.sleep(0.5); print('working')"))
    write_items(town_dir, "alpha", [item("al-1"), item("al-2")])
    return town_dir


def heartbeat(town):
    return read_heartbeat(Town(town))


def start_daemon(town, *args):
    env = {**os.environ, "SLUICE_TOWN": str(town)}
    return subprocess.Popen([sys.executable, "-m", "sluice", "daemon", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_once_runs_one_cycle_reaps_and_records_a_heartbeat(cli, working_dir, tmp_path):
    # The polecat works until the test lets it finish, so the first tick cannot reap it already.
    release = tmp_path / "release"
    configure(cli.town, "executor.command", python_command(
        "import os, time; print('working', flush=True)\n"
        "deadline = time.time() + 120\n"
        f"while not os.path.exists({str(release)!r}) and time.time() < deadline: time.sleep(0.05)"))
    cli.run("sling", "al-1", "alpha")
    done = cli.run("daemon", "--once")
    assert "tick 1: dispatched 1" in done.stderr
    assert open_contexts(working_dir, "alpha") == []
    beat = heartbeat(working_dir)
    assert beat["pid"] > 0 and beat["started_at"] and beat["last_tick_at"] and beat["stopped_at"]
    assert beat["last_result"]["dispatched"] == 1 and beat["last_result"]["reason"] == "batch"
    log = (working_dir / ".sluice" / "runtime" / "daemon.log").read_text()
    assert "tick 1: dispatched 1, failed 0" in log and "daemon started" in log
    # once the polecat has finished, the next tick reaps it
    workers = working_dir / ".sluice" / "runtime" / "workers"
    assert len(list(workers.glob("*.json"))) == 1
    wait_for(lambda: "working" in "".join(p.read_text() for p in workers.glob("*.log")))
    release.touch()
    wait_for(lambda: not LocalExecutor(Town(working_dir)).active())
    again = cli.run("daemon", "--once")
    assert "reaped 1 finished polecat(s)" in again.stderr
    assert not list(workers.glob("*.json")) and (workers / "finished.jsonl").exists()


def test_a_failing_cycle_is_logged_and_fails_once(cli, working_dir):
    configure(cli.town, "executor.command", '["x"]')
    cli.run("sling", "al-1", "alpha")  # a queue to rank: the cycle reads the policy
    (working_dir / ".sluice" / "schedule" / "policy.json").write_text("{broken")
    done = cli.run("daemon", "--once", check=False)
    assert done.returncode == 1 and "error: " in done.stderr and "policy.json" in done.stderr
    assert "policy.json" in heartbeat(working_dir)["last_result"]["error"]


def test_the_daemon_is_a_singleton_and_stops_cleanly_on_sigterm(cli, working_dir):
    first = start_daemon(working_dir, "--interval", "60")
    try:
        beat = wait_for(lambda: (heartbeat(working_dir) or {}).get("last_tick_at") and heartbeat(working_dir))
        assert beat["pid"] == first.pid and beat["interval"] == 60
        second = cli.run("daemon", "--once", check=False)
        assert second.returncode == 1
        assert f"a sluice daemon is already running for this town (pid {first.pid})" in second.stderr
        first.send_signal(signal.SIGTERM)
        _out, err = first.communicate(timeout=20)
        assert first.returncode == 0 and "daemon stopped" in err
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert heartbeat(working_dir)["stopped_at"]
    assert cli.run("daemon", "--once").returncode == 0  # the lock went with it


def test_sigint_stops_it_too_and_ticks_repeat(cli, working_dir):
    daemon = start_daemon(working_dir, "--interval", "0.3")
    try:
        wait_for(lambda: (heartbeat(working_dir) or {}).get("ticks", 0) >= 2)
        daemon.send_signal(signal.SIGINT)
        _out, err = daemon.communicate(timeout=20)
        assert daemon.returncode == 0 and "tick 2:" in err
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


def test_bad_interval_is_a_usage_error(cli, working_dir):
    done = cli.run("daemon", "--interval", "0", check=False)
    assert done.returncode == 2 and "--interval" in done.stderr


def test_a_tick_stops_a_stalled_polecat_and_reuses_its_slot(cli: Cli, rig):
    """Stall timeout: the daemon stops the overdue polecat, then fills its slot in the same tick."""
    write_items(cli.town, "alpha", [item("al-slow", "stalls", priority=0), item("al-next", "waits its turn")])
    issues_before = issues_path(cli.town, "alpha").read_bytes()
    configure(cli.town, "scheduler.max_polecats", "1")
    configure(cli.town, "executor.command", sleeper(60))
    cli.run("sling", "al-slow", "al-next", "alpha")
    cli.run("scheduler", "run")
    [first] = cli.json("polecat", "list")
    assert first["item_id"] == "al-slow" and first["state"] == "running"
    configure(cli.town, "scheduler.polecat_timeout", "1s")
    time.sleep(1.2)
    try:
        cli.run("daemon", "--once")
        [timed_out] = events(cli.town, "PolecatTimedOut")
        assert timed_out["payload"]["item_id"] == "al-slow"
        assert timed_out["payload"]["timeout"] == "1s"
        running = [p for p in cli.json("polecat", "list") if p["state"] == "running"]
        assert [p["item_id"] for p in running] == ["al-next"]  # the freed slot was used at once
        assert issues_path(cli.town, "alpha").read_bytes() == issues_before  # items untouched
    finally:
        for polecat in cli.json("polecat", "list"):
            cli.run("polecat", "stop", polecat["id"], check=False)


def test_reap_failures_are_logged_and_each_tick_follows_the_config(cli, rig, tmp_path, monkeypatch):
    """An executor that cannot be asked is reported in the tick's line; `config set` applies next tick."""
    from sluice.scheduler.unattended.daemon import Daemon

    configure(cli.town, "executor.kind", "tmux")
    monkeypatch.setenv("PATH", str(tmp_path / "no-tmux-here"))  # this daemon cannot find tmux
    lines: list[str] = []
    daemon = Daemon(Town(cli.town), interval=60, echo=lines.append)
    assert daemon.tick()  # the cycle itself is fine (direct mode)
    assert "reaping failed: executor.kind is tmux but tmux is not installed" in lines[-1]
    assert "tmux is not installed" in daemon.last_result["reap_error"]
    assert "reaping failed" in (cli.town / ".sluice" / "runtime" / "daemon.log").read_text()
    configure(cli.town, "executor.kind", "local")
    daemon.tick()
    assert "reaping failed" not in lines[-1] and "reap_error" not in daemon.last_result


def test_a_tick_that_launches_nothing_does_not_survey_the_queue_again(cli, rig, capacity, monkeypatch):
    """Only a tick that launched something checks whether the queue drained (``QueueDrained``)."""
    from sluice.scheduler.queue import views as queue
    from sluice.scheduler.unattended.daemon import Daemon

    capacity(2)
    surveyed: list[bool] = []
    real_status = queue.status
    monkeypatch.setattr(queue, "status", lambda *a, **k: surveyed.append(True) or real_status(*a, **k))
    daemon = Daemon(Town(cli.town), interval=60, echo=lambda _line: None)
    daemon.tick()
    daemon.tick()
    assert daemon.ticks == 2 and daemon.last_result.get("dispatched", 0) == 0
    assert surveyed == [] and not events(cli.town, "QueueDrained")


