"""The host guard and the hold file: real readings of this machine, real files.

Polecats are the in-memory executor's, except where another process must see
them (a running daemon, a hot read started as a command): there they are real.

Limits no machine can meet (1000 TiB free, a load of 0.000001 per core) and
limits every machine meets (1 byte free, a load of a million per core) make
each reason code appear or stay away whatever the machine is doing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.scheduler import configure, item, sleeper, wait_for, write_items
from sluice.core import admission as rules
from sluice.core.gates import parse_size
from sluice.errors import UsageError
from sluice.executors import get_executor
from sluice.executors.local import LocalExecutor
from sluice.scheduler.launch.dispatch import run_cycle
from sluice.scheduler.launch.sling import SlingOptions, sling
from sluice.scheduler.queue.views import explain, status
from sluice.store.files.town import Town

IMPOSSIBLE = {
    "scheduler.host.min_free_memory": ("1000TiB", rules.HOST_MEMORY),
    "scheduler.host.min_free_disk": ("1000TiB", rules.HOST_DISK),
    "scheduler.host.max_load": ("0.000001", rules.HOST_LOAD),
}
ALWAYS_MET = {
    "scheduler.host.min_free_memory": "1B",
    "scheduler.host.min_free_disk": "1B",
    "scheduler.host.max_load": "1000000",
}


@pytest.fixture
def queued_dir(town_dir, rig, capacity, memory) -> Path:
    """Rig alpha with al-1 and al-2 ready, room for five polecats, on the in-memory executor."""
    capacity(5, batch_size=5)
    write_items(town_dir, "alpha", [item("al-1", priority=1), item("al-2", priority=2)])
    return town_dir


@pytest.fixture
def local(queued_dir):
    """The town on the local executor with sleeping polecats, each stopped at the end."""
    configure(queued_dir, "executor.kind", "local")
    configure(queued_dir, "executor.command", sleeper(30))
    yield queued_dir
    executor = LocalExecutor(Town(queued_dir), stop_grace=1)
    for polecat in executor.active():
        executor.stop(polecat.id)


def queue(town, *ids):
    result = sling(Town(town), [*ids, "alpha"], SlingOptions())
    assert result.ok, result.errors


def running(town) -> list[str]:
    return sorted(p.item_id for p in get_executor(Town(town)).active())


@pytest.mark.parametrize("key", sorted(IMPOSSIBLE))
def test_a_host_limit_no_machine_meets_holds_every_launch_with_its_code(queued_dir, key):
    value, code = IMPOSSIBLE[key]
    configure(queued_dir, key, value)
    queue(queued_dir, "al-1", "al-2")
    report = run_cycle(Town(queued_dir))
    assert report.dispatched == 0 and running(queued_dir) == []
    assert report.reason == code
    assert report.why[code] == 2
    reasons = explain(Town(queued_dir), "al-1")["reasons"]
    assert [r["code"] for r in reasons] == [code]
    assert "scheduler.host." in reasons[0]["detail"]
    doc = status(Town(queued_dir))
    assert doc["binding"]["code"] == code == doc["plan_reason"]
    assert doc["host"]["reading"] is not None and doc["host"]["read_at"]


@pytest.mark.parametrize("key", sorted(ALWAYS_MET))
def test_a_host_limit_every_machine_meets_lets_work_go(queued_dir, key):
    configure(queued_dir, key, ALWAYS_MET[key])
    queue(queued_dir, "al-1", "al-2")
    report = run_cycle(Town(queued_dir))
    assert report.dispatched == 2
    assert running(queued_dir) == ["al-1", "al-2"]
    assert status(Town(queued_dir))["host"]["guard"] is True


def test_the_read_commands_show_the_last_cycles_reading_with_its_time(queued_dir):
    configure(queued_dir, "scheduler.host.min_free_disk", "1B")
    queue(queued_dir, "al-1")
    run_cycle(Town(queued_dir))
    kept = json.loads(Town(queued_dir).db.kept("host-reading"))
    doc = status(Town(queued_dir))["host"]
    assert doc["fresh"] is False
    assert doc["reading"]["at"] == kept["at"]
    assert str(queued_dir) in doc["reading"]["free_disk"]


def test_before_any_cycle_the_read_commands_read_the_machine_themselves(queued_dir):
    configure(queued_dir, "scheduler.host.min_free_memory", "1000TiB")
    queue(queued_dir, "al-1")
    doc = status(Town(queued_dir))
    assert doc["host"]["fresh"] is True
    assert doc["binding"]["code"] == rules.HOST_MEMORY


def test_running_polecats_are_never_stopped_by_the_guard(queued_dir):
    queue(queued_dir, "al-1")
    run_cycle(Town(queued_dir))
    assert running(queued_dir) == ["al-1"]
    configure(queued_dir, "scheduler.host.min_free_memory", "1000TiB")
    queue(queued_dir, "al-2")
    report = run_cycle(Town(queued_dir))
    assert report.dispatched == 0
    assert running(queued_dir) == ["al-1"]


def test_the_hold_file_holds_every_launch_and_names_its_first_line(queued_dir):
    configure(queued_dir, "scheduler.hold_file", "HOLD")
    (queued_dir / "HOLD").write_text("deploy in progress\nsecond line\n")
    queue(queued_dir, "al-1")
    report = run_cycle(Town(queued_dir))
    assert report.dispatched == 0 and report.reason == rules.HOLD_FILE
    [reason] = explain(Town(queued_dir), "al-1")["reasons"]
    assert reason["code"] == rules.HOLD_FILE
    assert reason["detail"] == f"{queued_dir / 'HOLD'} exists: deploy in progress"
    assert status(Town(queued_dir))["binding"] == reason
    (queued_dir / "HOLD").unlink()
    assert run_cycle(Town(queued_dir)).dispatched == 1


def test_the_hold_file_and_the_guard_hold_a_direct_mode_sling(queued_dir):
    configure(queued_dir, "scheduler.max_polecats", "-1")
    configure(queued_dir, "scheduler.hold_file", str(queued_dir / "HOLD"))
    (queued_dir / "HOLD").write_text("")
    preview = sling(Town(queued_dir), ["al-1"], SlingOptions(dry_run=True))
    assert preview.dispatched == [] and preview.skipped[0]["reason"].startswith("hold-file: ")
    result = sling(Town(queued_dir), ["al-1"], SlingOptions())
    assert not result.ok and result.errors[0]["code"] == rules.HOLD_FILE
    assert running(queued_dir) == []
    (queued_dir / "HOLD").unlink()
    configure(queued_dir, "scheduler.host.min_free_disk", "1000TiB")
    result = sling(Town(queued_dir), ["al-1"], SlingOptions())
    assert result.errors[0]["code"] == rules.HOST_DISK and running(queued_dir) == []
    configure(queued_dir, "scheduler.host.min_free_disk", "off")
    assert sling(Town(queued_dir), ["al-1"], SlingOptions()).ok
    assert running(queued_dir) == ["al-1"]


def test_a_sling_held_in_direct_mode_exits_1_naming_the_gate(queued_dir, cli):
    cli.run("config", "set", "scheduler.max_polecats", "-1")
    cli.run("config", "set", "scheduler.hold_file", "HOLD")
    (queued_dir / "HOLD").write_text("maintenance\n")
    done = cli.run("sling", "al-1", check=False)
    assert done.returncode == 1
    assert "hold-file" in done.stderr and "maintenance" in done.stderr
    assert running(queued_dir) == []


def test_the_hold_file_is_obeyed_by_a_running_daemon(queued_dir, local):
    configure(queued_dir, "scheduler.hold_file", "HOLD")
    (queued_dir / "HOLD").write_text("hold on\n")
    queue(queued_dir, "al-1")
    env = {**os.environ, "SLUICE_TOWN": str(queued_dir)}
    daemon = subprocess.Popen([sys.executable, "-m", "sluice", "daemon", "--interval", "0.2"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_ticks(queued_dir, 2)
        assert running(queued_dir) == []
        assert _last_result(queued_dir)["reason"] == rules.HOLD_FILE
        (queued_dir / "HOLD").unlink()
        wait_for(lambda: running(queued_dir) == ["al-1"], timeout=60)
        (queued_dir / "HOLD").write_text("again\n")
        _wait_ticks(queued_dir, 1)  # the tick under way may have read the file before it came back
        queue(queued_dir, "al-2")
        _wait_ticks(queued_dir, 2)
        assert running(queued_dir) == ["al-1"]
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


def _beat(town) -> dict:
    from sluice.store.database.state import read_heartbeat
    from sluice.store.files.town import Town

    return read_heartbeat(Town(town)) or {}


def _last_result(town) -> dict:
    return _beat(town).get("last_result") or {}


def _wait_ticks(town, n: int) -> None:
    """Until ``n`` more daemon ticks have finished."""
    start = _beat(town).get("ticks", 0)
    wait_for(lambda: _beat(town).get("ticks", 0) >= start + n and _beat(town).get("last_result"), timeout=60)


def test_the_config_refuses_sizes_and_loads_it_cannot_use(cli, queued_dir):
    for key, bad in (("scheduler.host.min_free_memory", "lots"), ("scheduler.host.max_load", "-1"),
                     ("scheduler.host.max_load", "nan"), ("scheduler.host.min_free_disk", "2XB")):
        done = cli.run("config", "set", key, bad, check=False)
        assert done.returncode == 2, (key, bad)
        assert key in done.stderr
    cli.run("config", "set", "scheduler.host.min_free_memory", "2GiB")
    assert cli.run("config", "get", "scheduler.host.min_free_memory").stdout.strip() == "2GiB"


def test_sizes_read_binary_units():
    assert parse_size("2GiB") == 2 << 30
    assert parse_size("500M") == 500 << 20
    assert parse_size("1000TiB") == 1000 << 40
    assert parse_size("4096") == 4096
    with pytest.raises(ValueError):
        parse_size("2 parsecs")
    with pytest.raises(ValueError):
        parse_size(str(1 << 90))
    assert UsageError  # the CLI turns the ValueError into a usage error (test above)


PSUTIL_PROBE = """
import sys
sys.argv = ["sluice", *sys.argv[1:]]
from sluice.__main__ import main
try:
    main()
finally:
    sys.stderr.write("PSUTIL=" + str("psutil" in sys.modules) + "\\n")
"""


@pytest.mark.parametrize("args", [("scheduler", "status", "--json"), ("scheduler", "explain", "al-2"),
                                  ("scheduler", "list"), ("scheduler", "run", "--dry-run", "--json")],
                         ids=" ".join)
def test_hot_reads_show_the_kept_reading_without_importing_psutil(queued_dir, local, args):
    configure(queued_dir, "scheduler.host.min_free_memory", "1B")
    configure(queued_dir, "scheduler.host.max_load", "1000000")
    configure(queued_dir, "scheduler.hold_file", "HOLD")
    queue(queued_dir, "al-1", "al-2")
    run_cycle(Town(queued_dir), batch=1)  # reads the machine and keeps the reading
    for polecat in LocalExecutor(Town(queued_dir), stop_grace=1).active():  # a liveness check may import it
        LocalExecutor(Town(queued_dir), stop_grace=1).stop(polecat.id)
    LocalExecutor(Town(queued_dir)).reap()
    env = {**os.environ, "SLUICE_TOWN": str(queued_dir)}
    done = subprocess.run([sys.executable, "-c", PSUTIL_PROBE, *args], env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "PSUTIL=False"
