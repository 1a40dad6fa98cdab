"""Run records in a real town: caps that remember running work, outcomes, retries, sling's memory."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import make_repo
from helpers.scheduler import (
    add_rig,
    configure,
    events,
    fields,
    issues_path,
    item,
    open_contexts,
    python_command,
    sleeper,
    wait_for,
    write_items,
)
from sluice.executors import get_executor
from sluice.executors.local import LocalExecutor
from sluice.scheduler.launch.dispatch import run_cycle
from sluice.scheduler.launch.launching import make_request
from sluice.scheduler.launch.sling import SlingOptions, sling
from sluice.scheduler.unattended.daemon import Daemon
from sluice.store.database import admission_state as kept
from sluice.store.database import contexts as ctxs
from sluice.store.database import runs as runlog
from sluice.store.files.town import Town
from sluice.store.items.rigstore import Stores

# Exits with the status its item's title names ("exit 3"), after one line of output.
BY_TITLE = ("import os, sys; print('working on', os.environ['SLUICE_ITEM_ID']);"
            " sys.exit(int(sys.argv[1].split()[-1]))")


@pytest.fixture
def sleeper_dir(town_dir, rig, capacity) -> Iterator[Path]:
    """Rig alpha, ten polecats a cycle, each sleeping 30 seconds until stopped (all are, at the end)."""
    capacity(10, batch_size=10)
    configure(town_dir, "executor.command", sleeper(30))
    yield town_dir
    stop_all(town_dir)


def stop_all(town) -> None:
    executor = LocalExecutor(Town(town), stop_grace=1)
    for polecat in executor.active():
        executor.stop(polecat.id)


def queue(town, rig, *records) -> None:
    write_items(town, rig, list(records))
    result = sling(Town(town), [*(r["id"] for r in records), rig], SlingOptions())
    assert result.ok, result.errors


def cycle(town, **kw):
    return run_cycle(Town(town), **kw)


def running_items(town) -> list[str]:
    return sorted(p.item_id for p in LocalExecutor(Town(town)).active())


def records(town) -> list[dict]:
    """Every run's record, as the town database holds it."""
    return list(runlog.read_runs(Town(town)).values())


def finished(town) -> None:
    wait_for(lambda: not LocalExecutor(Town(town)).active(), timeout=30)


def rewrite(town, rig, *records_) -> None:
    """The item file as a tracker leaves it after an edit: rewritten whole."""
    issues_path(town, rig).write_text("".join(json.dumps(r) + "\n" for r in records_))


# -- admission counts running work from its run record --------------------------------------------


def test_a_label_cap_holds_while_the_running_items_export_is_cut_to_nothing(cli, tmp_path):
    repo = make_repo(tmp_path / "repos" / "ext")
    export = tmp_path / "export.jsonl"
    export.write_text(json.dumps(item("ex-1", labels=["area:db"])) + "\n")
    cli.run("rig", "add", "ext", str(repo), "--prefix", "ex", "--items", str(export))
    add_rig(cli, tmp_path, "own", "ow")
    write_items(cli.town, "own", [item("ow-1", labels=["area:db"])])
    for key, value in (("scheduler.max_polecats", "4"), ("scheduler.batch_size", "4"),
                       ("scheduler.label_caps.area:db", "1"), ("executor.command", '["/bin/sleep", "30"]')):
        configure(cli.town, key, value)
    try:
        cli.run("sling", "ex-1", "ext")
        assert cycle(cli.town).dispatched == 1
        cli.run("sling", "ow-1", "own")
        held = cycle(cli.town)
        assert held.dispatched == 0 and held.why == {"label-cap": 1}
        export.write_bytes(b"")  # the tracker rewrites its export: for a moment it is empty
        again = cycle(cli.town)
        assert again.dispatched == 0 and again.why == {"label-cap": 1}
        assert running_items(cli.town) == ["ex-1"]
        [run] = records(cli.town)
        assert run["labels"] == ["area:db"] and run["outcome"] == "running"
    finally:
        stop_all(cli.town)


def test_a_label_cap_holds_when_the_running_item_is_edited_to_drop_its_label(sleeper_dir):
    configure(sleeper_dir, "scheduler.label_caps.gpu", "1")
    queue(sleeper_dir, "alpha", item("al-1", labels=["gpu"], priority=0))
    assert cycle(sleeper_dir).dispatched == 1
    queue(sleeper_dir, "alpha", item("al-2", labels=["gpu"]))
    rewrite(sleeper_dir, "alpha", item("al-1", labels=[], priority=0), item("al-2", labels=["gpu"]))
    report = cycle(sleeper_dir)
    assert report.dispatched == 0 and report.why == {"label-cap": 1}
    assert running_items(sleeper_dir) == ["al-1"]


def test_the_overlap_gate_holds_when_the_running_items_touches_are_edited_away(sleeper_dir):
    shared = {"touches": ["src/db/**"]}
    queue(sleeper_dir, "alpha", item("al-a", metadata=shared, priority=0))
    assert cycle(sleeper_dir).dispatched == 1
    queue(sleeper_dir, "alpha", item("al-b", metadata={"touches": ["src/db/schema.py"]}))
    rewrite(sleeper_dir, "alpha", item("al-a", metadata={}, priority=0),
            item("al-b", metadata={"touches": ["src/db/schema.py"]}))
    report = cycle(sleeper_dir)
    assert report.dispatched == 0 and report.why == {"overlap": 1}
    [run] = records(sleeper_dir)
    assert run["touches"] == ["src/db/**"]


# -- every launch is a record, every end an outcome -----------------------------------------------


def test_a_failed_run_is_visible_everywhere_after_the_daemon_reaped_it(cli, sleeper_dir):
    configure(sleeper_dir, "executor.command", python_command(BY_TITLE, "{title}"))
    queue(sleeper_dir, "alpha", item("al-1", title="exit 3"), item("al-2", title="exit 0"))
    lines: list[str] = []
    daemon = Daemon(Town(sleeper_dir), interval=1.0, echo=lines.append)
    counted: dict[str, int] = {}
    reaped = 0
    for _ in range(2):  # the polecats end during the first tick or before the second
        daemon.tick()
        for outcome, n in daemon.last_result["runs"].items():
            counted[outcome] = counted.get(outcome, 0) + n
        reaped += daemon.last_result["reaped"]
        finished(sleeper_dir)
    assert counted == {"ok": 1, "failed": 1} and reaped == 2
    assert any("runs: " in line and "failed" in line for line in lines)
    assert LocalExecutor(Town(sleeper_dir)).listing() == []

    rows = cli.json("runs")
    ends = sorted((r["item_id"], r["outcome"], r["exit_code"]) for r in rows)
    assert ends == [("al-1", "failed", 3), ("al-2", "ok", 0)]
    failed = next(r for r in rows if r["item_id"] == "al-1")
    assert set(failed) == set(runlog.FIELDS) and failed["issue_type"] == "task"
    assert 0 <= failed["runtime_seconds"] < 30 and failed["attempt"] == 1 and failed["ended_at"]
    assert cli.json("runs", "--outcome", "failed") == [failed]
    assert "! " in cli.run("runs").stdout.splitlines()[1] + cli.run("runs").stdout.splitlines()[2]

    listed = {r["item_id"]: r for r in cli.json("polecat", "list")}
    assert (listed["al-1"]["state"], listed["al-1"]["outcome"], listed["al-1"]["exit_code"]) == (
        "failed", "failed", 3)
    assert "Ended (last hour)" in cli.run("polecat", "list").stdout
    assert cli.run("polecat", "logs", "al-1").stdout.splitlines() == ["working on al-1"]

    [exited] = [e for e in events(sleeper_dir, "PolecatExited") if e["payload"]["item_id"] == "al-1"]
    assert exited["payload"]["outcome"] == "failed" and exited["payload"]["exit_code"] == 3
    assert exited["payload"]["runtime_seconds"] == failed["runtime_seconds"]
    feed = cli.run("feed").stdout
    assert any("al-1 failed after" in line and "(exit 3)" in line for line in feed.splitlines())
    assert [r["type"] for r in cli.json("feed", "--kind", "polecat-exited")] == ["PolecatExited"] * 2
    snap = cli.json("snapshot")
    assert {r["item_id"]: r["outcome"] for r in snap["runs"]} == {"al-1": "failed", "al-2": "ok"}
    daemon.tick()  # nothing new ended: no runs on the line, nothing counted twice
    assert "runs:" not in lines[-1]
    assert len(events(sleeper_dir, "PolecatExited")) == 2


def test_an_end_is_recorded_once_by_whichever_command_looks_first(cli, sleeper_dir):
    configure(sleeper_dir, "executor.command", python_command("raise SystemExit(4)"))
    queue(sleeper_dir, "alpha", item("al-1"))
    cycle(sleeper_dir)
    finished(sleeper_dir)
    [row] = cli.json("polecat", "list")  # the first to look records the end
    assert (row["outcome"], row["exit_code"]) == ("failed", 4)
    cli.json("runs")
    cycle(sleeper_dir)
    assert len(events(sleeper_dir, "PolecatExited")) == 1
    assert [r["outcome"] for r in records(sleeper_dir)] == ["failed"]
    assert Town(sleeper_dir).db.versions("runs")["runs"] == 2  # its launch and its end


def test_stopped_and_timed_out_runs_say_so(cli, sleeper_dir):
    queue(sleeper_dir, "alpha", item("al-1"), item("al-2"))
    cycle(sleeper_dir)
    cli.json("polecat", "stop", "al-1")
    configure(sleeper_dir, "scheduler.polecat_timeout", "1s")
    wait_for(lambda: any(p.item_id == "al-2" for p in LocalExecutor(Town(sleeper_dir)).active()))
    daemon = Daemon(Town(sleeper_dir), interval=1.0, echo=lambda line: None)
    wait_for(lambda: daemon.tick() and "al-2" not in running_items(sleeper_dir), timeout=30)
    outcomes = {r["item_id"]: r["outcome"] for r in records(sleeper_dir)}
    assert outcomes == {"al-1": "stopped", "al-2": "timed-out"}


def test_a_launch_interrupted_after_the_executor_started_it_gets_exactly_one_record(sleeper_dir):
    queue(sleeper_dir, "alpha", item("al-1"))
    the_town = Town(sleeper_dir)
    stores = Stores(the_town)
    [context] = ctxs.open_contexts(stores.town)
    ctxs.mark_launch(stores.rig("alpha"), context.id)  # the cycle recorded its intent …
    executor = get_executor(the_town)
    template = tuple(the_town.config.executor.command)
    executor.launch(make_request(the_town, template, item("al-1"), "alpha", context.id))  # … and died here
    assert records(sleeper_dir) == []
    report = cycle(sleeper_dir)
    assert report.dispatched == 0 and [c["reason"] for c in report.closed] == ["dispatched"]
    [run] = records(sleeper_dir)
    assert run["item_id"] == "al-1" and run["outcome"] == "running" and run["context_id"] == context.id
    cycle(sleeper_dir)
    assert len(records(sleeper_dir)) == 1


def test_a_launch_that_never_started_gets_no_record(sleeper_dir):
    configure(sleeper_dir, "executor.command", json.dumps(["/nonexistent/agent"]))
    queue(sleeper_dir, "alpha", item("al-1"))
    report = cycle(sleeper_dir)
    assert report.failed == 1 and records(sleeper_dir) == []


# -- retries of failed runs -----------------------------------------------------------------------


def test_a_failing_run_is_retried_up_to_n_times_then_broken_with_run_failures(cli, sleeper_dir):
    configure(sleeper_dir, "executor.command", python_command("raise SystemExit(3)"))
    configure(sleeper_dir, "scheduler.retry_failed_runs", "2")
    configure(sleeper_dir, "scheduler.retry_base", "0s")
    queue(sleeper_dir, "alpha", item("al-1"))
    for _ in range(3):
        cycle(sleeper_dir)
        finished(sleeper_dir)
    cycle(sleeper_dir)  # records the third failure: broken
    runs = sorted(records(sleeper_dir), key=lambda r: r["attempt"])
    assert [(r["attempt"], r["outcome"]) for r in runs] == [(1, "failed"), (2, "failed"), (3, "failed")]
    assert open_contexts(sleeper_dir, "alpha") == []
    [broken] = cli.json("scheduler", "broken")
    assert (broken["broken_by"], broken["run_failures"], broken["dispatch_failures"]) == ("runs", 3, 0)
    assert [e["payload"]["run_failures"] for e in events(sleeper_dir, "Requeued")] == [1, 2]
    [tripped] = events(sleeper_dir, "CircuitBroken")
    assert tripped["payload"]["broken_by"] == "runs"
    cli.json("scheduler", "reset", "al-1")
    [context] = open_contexts(sleeper_dir, "alpha")
    assert fields(context).get("run_failures", 0) == 0 and "al-1" not in kept.broken(Town(sleeper_dir))


def test_a_retried_run_waits_out_the_launch_backoff(cli, sleeper_dir):
    configure(sleeper_dir, "executor.command", python_command("raise SystemExit(3)"))
    configure(sleeper_dir, "scheduler.retry_failed_runs", "1")
    configure(sleeper_dir, "scheduler.retry_base", "1h")
    queue(sleeper_dir, "alpha", item("al-1"))
    cycle(sleeper_dir)
    finished(sleeper_dir)
    report = cycle(sleeper_dir)
    assert report.dispatched == 0 and report.why == {"backoff": 1}
    [context] = open_contexts(sleeper_dir, "alpha")
    assert fields(context)["run_failures"] == 1 and fields(context).get("dispatch_failures", 0) == 0
    [reason] = cli.json("scheduler", "explain", "al-1")["reasons"]
    assert reason["code"] == "backoff" and "1 failed run(s)" in reason["detail"]


def test_failed_runs_are_not_retried_by_default(sleeper_dir):
    configure(sleeper_dir, "executor.command", python_command("raise SystemExit(3)"))
    queue(sleeper_dir, "alpha", item("al-1"))
    cycle(sleeper_dir)
    finished(sleeper_dir)
    cycle(sleeper_dir)
    assert open_contexts(sleeper_dir, "alpha") == [] and events(sleeper_dir, "Requeued") == []


# -- sling remembers ------------------------------------------------------------------------------


def test_sling_refuses_an_item_whose_last_run_ended_ok_unless_forced(cli, sleeper_dir):
    configure(sleeper_dir, "executor.command", python_command(BY_TITLE, "{title}"))
    write_items(sleeper_dir, "alpha", [item("al-ok", title="exit 0"), item("al-bad", title="exit 3"),
                                item("al-epic", issue_type="epic"),
                                item("al-kid", title="exit 0", deps=[("parent-child", "al-epic")])])
    cli.run("sling", "al-ok", "al-bad", "al-kid", "alpha")
    cycle(sleeper_dir)
    finished(sleeper_dir)
    again = cli.run("sling", "al-ok", "alpha", "--json", check=False)
    assert again.returncode == 1
    [error] = json.loads(again.stdout)["errors"]
    ok_run = next(r for r in records(sleeper_dir) if r["item_id"] == "al-ok")
    assert error["reason"] == "already-ran" and error["run_id"] == ok_run["run_id"]
    assert ok_run["run_id"] in error["error"] and ok_run["ended_at"] in error["error"]
    assert cli.json("sling", "al-bad", "alpha")["scheduled"]  # a failed last run does not block
    epic = cli.json("sling", "al-epic")
    [skipped] = epic["skipped"]
    assert skipped["item_id"] == "al-kid" and "already ran" in skipped["reason"]
    forced = cli.json("sling", "al-ok", "alpha", "--force")
    assert [r["item_id"] for r in forced["scheduled"]] == ["al-ok"]


def test_an_item_changed_since_its_run_may_be_slung_again(cli, sleeper_dir):
    configure(sleeper_dir, "executor.command", python_command("pass"))
    queue(sleeper_dir, "alpha", item("al-1"))
    cycle(sleeper_dir)
    finished(sleeper_dir)
    cli.json("runs")
    cli.run("item", "update", "al-1", "--priority", "1")  # a person looked at it again
    assert cli.json("sling", "al-1", "alpha")["scheduled"]


# -- tmux outcomes (Ray: test_runs_ray.py) ---------------------------------------------------------


def test_tmux_polecats_end_as_run_records_and_their_throttle_exit_is_acted_on(cli, sleeper_dir):
    configure(sleeper_dir, "executor.kind", "tmux")
    configure(sleeper_dir, "executor.command", python_command(BY_TITLE, "{title}"))
    queue(sleeper_dir, "alpha", item("al-ok", title="exit 0"), item("al-bad", title="exit 3"),
          item("al-slow", title="exit 75"))
    tmux = get_executor(Town(sleeper_dir))
    try:
        launched = cycle(sleeper_dir)
        assert launched.dispatched == 3, launched.failures  # a launch that failed says why
        wait_for(lambda: not tmux.active(), timeout=30)
        report = cycle(sleeper_dir)
        outcomes = {r["item_id"]: (r["outcome"], r["exit_code"]) for r in records(sleeper_dir)}
        assert outcomes == {"al-ok": ("ok", 0), "al-bad": ("failed", 3), "al-slow": ("throttled", 75)}
        assert [t.rig for t in kept.throttles(Town(sleeper_dir), time.time())] == ["alpha"]
        assert [fields(c)["work_bead_id"] for c in open_contexts(sleeper_dir, "alpha")] == ["al-slow"]
        assert report.why == {"throttled": 1}
        assert all(r["runtime_seconds"] is not None and r["host"] for r in records(sleeper_dir))
    finally:
        for polecat in tmux.active():
            tmux.stop(polecat.id)


# -- the feed -------------------------------------------------------------------------------------


def test_feed_follow_prints_each_new_event_once_in_words(cli, sleeper_dir):
    import selectors
    import subprocess

    from helpers.scheduler import sluice_env
    from sluice.store.database.events import emit_event

    env = {**sluice_env(), "SLUICE_TOWN": str(sleeper_dir)}
    argv = [sys.executable, "-m", "sluice", "feed", "--follow", "--kind", "PolecatExited"]
    follower = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    waiting = selectors.DefaultSelector()  # not select(): a worker late in a run may hold fds past 1024
    waiting.register(follower.stdout, selectors.EVENT_READ)
    try:
        # another kind: not shown
        emit_event(Town(sleeper_dir), "Enqueued", {"item_id": "al-9", "rig": "alpha"})
        emit_event(Town(sleeper_dir), "PolecatExited", {"item_id": "al-9", "polecat_id": "pc-x",
                                                        "outcome": "failed", "exit_code": 3,
                                                        "runtime_seconds": 449.2})
        ready = waiting.select(60)
        assert ready, "feed --follow printed nothing"
        line = follower.stdout.readline()
        assert line.endswith("al-9 failed after 7m29s (exit 3) [pc-x]\n") and line[2] == ":"
        emit_event(Town(sleeper_dir), "PolecatExited", {"item_id": "al-10", "outcome": "ok", "exit_code": 0})
        ready = waiting.select(60)
        assert ready and "al-10 finished" in follower.stdout.readline()
    finally:
        follower.terminate()
        follower.wait(timeout=30)
    assert cli.run("feed", "--kind", "nonsense", check=False).returncode == 2
    assert cli.run("feed", "--since", "soon", check=False).returncode == 2


def test_a_launch_settled_as_never_started_gets_no_record(sleeper_dir):
    queue(sleeper_dir, "alpha", item("al-1"))
    the_town = Town(sleeper_dir)
    stores = Stores(the_town)
    [context] = ctxs.open_contexts(stores.town)
    ctxs.mark_launch(stores.rig("alpha"), context.id)
    # The launcher died after writing its pending record and before the polecat started.
    record = {"id": "pc-lost", "executor": "local", "state": "pending", "item_id": "al-1", "rig": "alpha",
              "context_id": context.id, "launcher_pid": 2 ** 22 + 7, "created_ts": time.time() - 3600,
              "started_at": "2026-12-01T00:00:00.000000Z"}
    (the_town.workers_dir / "pc-lost.json").write_text(json.dumps(record))
    assert get_executor(the_town).find(context.id).state == "lost"
    report = cycle(sleeper_dir)
    assert [c["reason"] for c in report.closed] == ["dispatched"]  # crash recovery settles it
    assert records(sleeper_dir) == []


def test_runtime_is_the_process_own_time_not_the_time_until_someone_looked(cli, sleeper_dir):
    configure(sleeper_dir, "executor.command", python_command("import time; time.sleep(1.0)"))
    queue(sleeper_dir, "alpha", item("al-1"))
    cycle(sleeper_dir)
    finished(sleeper_dir)
    time.sleep(2.0)  # nobody looks for a while after it ended (the test is that gap)
    [run] = cli.json("runs")
    assert run["outcome"] == "ok" and 0.9 <= run["runtime_seconds"] < 2.9  # looked at after 3 s or more


# -- the forecast learns from real runs -----------------------------------------------------------

SLEEP_BY_TITLE = "import sys, time; time.sleep(float(sys.argv[1].split()[-1]))"


def test_the_forecast_learns_two_kinds_of_real_runs_apart(cli, sleeper_dir):
    configure(sleeper_dir, "executor.command", python_command(SLEEP_BY_TITLE, "{title}"))
    fast = [item(f"al-f{n}", title="sleep 0.1", issue_type="bug") for n in range(5)]
    slow = [item(f"al-s{n}", title="sleep 2.0", issue_type="feature") for n in range(5)]
    queue(sleeper_dir, "alpha", *fast, *slow)
    daemon = Daemon(Town(sleeper_dir), interval=1.0, echo=lambda line: None)
    daemon.tick()
    finished(sleeper_dir)
    daemon.tick()  # reaps and records every end
    assert sorted(r["outcome"] for r in records(sleeper_dir)) == ["ok"] * 10
    queue(sleeper_dir, "alpha", item("al-f9", title="sleep 0.1", issue_type="bug"),
          item("al-s9", title="sleep 2.0", issue_type="feature"))
    rows = {row["item_id"]: row for row in cli.json("scheduler", "forecast")["items"]}
    quick, long = rows["al-f9"], rows["al-s9"]
    assert quick["basis"] == {"level": "rig+type", "samples": 5, "kind": "alpha/bug"}
    assert long["basis"] == {"level": "rig+type", "samples": 5, "kind": "alpha/feature"}
    assert long["runtime_p50"] >= 2.0 and quick["runtime_p90"] < long["runtime_p50"]
    ran = {r["item_id"]: r["runtime_seconds"] for r in records(sleeper_dir)}
    # Each kind's runs lie on its own side: a fast run is shorter than the slow kind's median, and so on.
    assert all(ran[f["id"]] < long["runtime_p50"] for f in fast)
    assert all(ran[s["id"]] > quick["runtime_p90"] for s in slow)
