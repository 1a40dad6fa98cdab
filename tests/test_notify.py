"""`scheduler.notify`: a real notifier script run by the daemon on chosen events, never breaking a tick.

The notifier is a real process; the polecats are the in-memory executor's
records on the test's clock (the ``memory`` and ``clock`` fixtures), since
what is tested is which events are announced, not how a polecat runs.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from helpers.polecats import configure
from helpers.scheduler import item, python_command, write_items
from sluice.executors import get_executor
from sluice.scheduler.unattended.daemon import Daemon
from sluice.store.database.events import emit_event
from sluice.store.files.town import Town

NOTIFIER = r'''
import json, os, sys
out = sys.argv[1]
event = json.load(sys.stdin)
with open(out, "a") as fh:
    fh.write(json.dumps({"argv": sys.argv[2:], "stdin": event, "shell": os.environ.get("PS1")}) + "\n")
'''


@pytest.fixture
def alpha_files(town_files, rig, memory) -> Town:
    """Rig alpha with one item whose title a shell would run, on the in-memory executor."""
    write_items(town_files.root, "alpha", [item("al-1", "first; rm -rf / $(boom)")])
    return town_files


@pytest.fixture
def notifier(tmp_path) -> tuple[Path, Path]:
    script = tmp_path / "notifier.py"
    script.write_text(NOTIFIER)
    return script, tmp_path / "notified.jsonl"


def _use(cli, script: Path, out: Path, **settings: str) -> None:
    cli.run("config", "set", "scheduler.notify",
            json.dumps([sys.executable, str(script), str(out), "{event}", "{item_id}", "{rig}"]))
    for key, value in settings.items():
        cli.run("config", "set", f"scheduler.{key}", value)


def _notified(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def _daemon(town: Town, lines: list[str]) -> Daemon:
    """A daemon over the town's in-memory executor: handed it, the daemon runs each cycle in this process."""
    return Daemon(town, interval=1.0, echo=lambda line: lines.append(line.split(" ", 1)[1]),
                  executor=get_executor(town))


def test_circuit_broken_runs_the_notifier_with_the_event_on_stdin(cli, alpha_files, notifier, memory):
    script, out = notifier
    memory.fail_next("al-1", "cannot launch '/nonexistent/agent': no such file or command")
    configure(cli.town, {"scheduler.max_polecats": "1", "scheduler.max_dispatch_failures": "1"})
    _use(cli, script, out)
    cli.run("sling", "al-1", "alpha")
    lines: list[str] = []
    assert _daemon(alpha_files, lines).tick() is True
    [sent] = _notified(out)
    assert sent["argv"] == ["circuit-broken", "al-1", "alpha"]
    assert sent["stdin"]["event"] == "circuit-broken" and sent["stdin"]["type"] == "CircuitBroken"
    assert sent["stdin"]["payload"]["item_id"] == "al-1" and sent["stdin"]["town"] == str(cli.town)
    assert sent["shell"] is None
    assert any(line.startswith("notify circuit-broken (") and line.endswith("sent") for line in lines)


def test_queue_drained_and_a_run_timed_out_announced_once_by_default(cli, alpha_files, notifier, clock):
    script, out = notifier
    configure(cli.town, {"scheduler.max_polecats": "1", "scheduler.polecat_timeout": "1s"})
    _use(cli, script, out)
    cli.run("sling", "al-1", "alpha")
    daemon = _daemon(alpha_files, [])
    daemon.tick()
    assert [n["argv"][0] for n in _notified(out)] == ["queue-drained"]
    assert _notified(out)[0]["stdin"]["payload"] == {"dispatched": 1}
    clock.advance(0.9)
    daemon.tick()
    assert len(_notified(out)) == 1  # not yet past its timeout
    clock.advance(0.3)
    daemon.tick()
    assert [n["argv"] for n in _notified(out)][1] == ["run-timed-out", "al-1", "alpha"]
    sent = _notified(out)[1]["stdin"]
    assert sent["type"] == "PolecatExited" and sent["payload"]["outcome"] == "timed-out"
    daemon.tick()
    assert len(_notified(out)) == 2  # each event is announced once; PolecatTimedOut is not chosen by default


def test_only_the_chosen_events_and_not_the_history(cli, alpha_files, notifier):
    script, out = notifier
    # before the daemon: history
    emit_event(alpha_files, "CircuitBroken", {"item_id": "al-0", "rig": "alpha"})
    configure(cli.town, {"scheduler.max_polecats": "1"})
    _use(cli, script, out, notify_on="circuit-broken,polecat-timed-out")
    cli.run("sling", "al-1", "alpha")
    daemon = _daemon(alpha_files, [])
    daemon.tick()  # drains the queue, but queue-drained was not chosen
    assert _notified(out) == []
    emit_event(alpha_files, "CircuitBroken", {"item_id": "al-9", "rig": "alpha"})
    daemon.tick()
    assert [n["argv"][1] for n in _notified(out)] == ["al-9"]


def test_a_failing_a_missing_and_a_hanging_notifier_are_logged_and_the_tick_goes_on(cli, alpha_files,
                                                                                    tmp_path):
    configure(cli.town, {"scheduler.max_polecats": "1"})
    cli.run("config", "set", "scheduler.notify_timeout", "500ms")
    lines: list[str] = []
    daemon = _daemon(alpha_files, lines)
    daemon.tick()
    pid_file = tmp_path / "hanging.pid"
    for command, expected in [
        (python_command("import sys; sys.stderr.write('boom\\n'); sys.exit(3)"),
         "failed: exit status 3: boom"),
        (json.dumps(["/nonexistent/notifier"]),
         "failed: cannot run '/nonexistent/notifier': No such file or directory"),
        (python_command(f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid()));"
                        " time.sleep(60)"), "failed: still running after 0.5s; killed"),
    ]:
        cli.run("config", "set", "scheduler.notify", command)
        emit_event(alpha_files, "Throttled", {"rig": "alpha"})
        lines.clear()
        started = time.monotonic()
        assert daemon.tick() is True
        assert time.monotonic() - started < 30
        assert any(line.startswith("notify throttled (") and line.endswith(expected) for line in lines), lines
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_config_refuses_unknown_events(cli):
    done = cli.run("config", "set", "scheduler.notify_on", "circuit-broken,bogus", check=False)
    assert done.returncode == 2 and "scheduler.notify_on" in done.stderr and "queue-drained" in done.stderr
    cli.run("config", "set", "scheduler.notify_on", '["throttled"]')
    assert json.loads(cli.run("config", "get", "scheduler.notify_on").stdout) == ["throttled"]
    done = cli.run("config", "set", "scheduler.notify", "notify-send hi", check=False)
    assert done.returncode == 2 and "JSON array" in done.stderr


def test_the_daemon_announces_a_token_budget_running_out(cli, alpha_files, notifier):
    script, out = notifier
    write_items(cli.town, "alpha", [item("al-2", "second")])
    # a budget of one item's default estimate
    configure(cli.town, {"scheduler.max_polecats": "2", "scheduler.token_budget": "1000"})
    _use(cli, script, out, notify_on="budget-exhausted")
    cli.run("sling", "al-1", "al-2", "alpha")
    daemon = _daemon(alpha_files, [])
    daemon.tick()  # launches one item, spending the town's budget
    daemon.tick()
    [sent] = _notified(out)
    assert sent["argv"] == ["budget-exhausted", "", ""]
    assert sent["stdin"]["payload"] == {"spent": 1000, "rigs": {"alpha": 1000}}
    assert cli.json("scheduler", "status")["budgets"] == [
        {"rig": None, "spent": 1000, "budget": 1000, "window": "1h"}]


def _cursor(town: Town) -> dict | None:
    row = town.db.one("SELECT value FROM meta WHERE key = 'notify_cursor'")
    return json.loads(row[0]) if row is not None else None


def test_the_cursor_is_a_row_of_the_town_database_and_a_restarted_daemon_resumes_from_it(cli, alpha_files,
                                                                                      notifier):
    script, out = notifier
    configure(cli.town, {"scheduler.max_polecats": "1"})
    _use(cli, script, out, notify_on="throttled")
    first = _daemon(alpha_files, [])
    first.tick()  # starts at the log's end
    emit_event(alpha_files, "Throttled", {"rig": "alpha", "n": 1})
    first.tick()
    assert [n["stdin"]["payload"]["n"] for n in _notified(out)] == [1]
    # the daemon stops; an event is written while none runs; a new daemon (a new process, say) starts
    emit_event(alpha_files, "Throttled", {"rig": "alpha", "n": 2})
    _daemon(Town(alpha_files.root), []).tick()
    assert [n["stdin"]["payload"]["n"] for n in _notified(out)] == [1, 2]
    cursor = _cursor(alpha_files)
    assert cursor == {"inode": alpha_files.events_path.stat().st_ino,
                      "offset": alpha_files.events_path.stat().st_size}
    assert not (alpha_files.runtime / "notify-cursor.json").exists()


def test_a_cursor_an_older_sluice_left_in_a_file_is_taken_over_once(cli, alpha_files, notifier):
    script, out = notifier
    configure(cli.town, {"scheduler.max_polecats": "1"})
    _use(cli, script, out, notify_on="throttled")
    emit_event(alpha_files, "Throttled", {"rig": "alpha", "n": 1})  # announced by the older daemon
    log = alpha_files.events_path.stat()
    old = alpha_files.runtime / "notify-cursor.json"
    old.write_text(json.dumps({"inode": log.st_ino, "offset": log.st_size}))
    emit_event(alpha_files, "Throttled", {"rig": "alpha", "n": 2})  # written while no daemon ran
    _daemon(alpha_files, []).tick()
    assert [n["stdin"]["payload"]["n"] for n in _notified(out)] == [2]
    assert not old.exists() and _cursor(alpha_files)["offset"] == alpha_files.events_path.stat().st_size
