"""The dispatch cycle: capacity, breaker, pause, blockers, crashes.

Cycles killed part way and launches of real programs run real polecat
processes; the scheduler's own bookkeeping (capacity, blockers, stale and
interrupted contexts, decisions) runs on the in-memory executor (the
``memory`` fixture), whose runs end when the test says.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
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
    put_records,
    python_command,
    sleeper,
    tree_hash,
    wait_for,
    worker_records,
    write_items,
)
from sluice.executors.base import LaunchRequest
from sluice.executors.local import LocalExecutor
from sluice.store.database import contexts as ctxs
from sluice.store.database.state import load_state
from sluice.store.files.town import Town
from sluice.store.items.rigstore import Stores

SLUICE = (sys.executable, "-m", "sluice")


@pytest.fixture
def deferred_dir(town_dir, rig, capacity) -> Path:
    """Rig alpha in deferred mode, two polecats at once."""
    capacity(2)
    return town_dir


@pytest.fixture
def executor(deferred_dir):
    """The test's view of the town's polecats; every one still running at the end is stopped."""
    ex = LocalExecutor(Town(deferred_dir), stop_grace=1)
    yield ex
    for polecat in ex.active():
        ex.stop(polecat.id)


def context_of(town: Path, item_id: str, rig: str = "alpha") -> dict:
    [context] = [c for c in contexts(town, rig) if fields(c)["work_bead_id"] == item_id]
    return context


def test_capacity_is_never_exceeded_and_everything_dispatches(cli, deferred_dir, memory):
    ids = [f"al-{n}" for n in range(5)]
    write_items(deferred_dir, "alpha", [item(i) for i in ids])
    configure(cli.town, "scheduler.batch_size", "5")
    cli.run("sling", *ids, "alpha")
    samples = []
    for _cycle in range(10):  # one run ends between cycles: five items need four cycles
        if not open_contexts(deferred_dir, "alpha"):
            break
        report = cli.json("scheduler", "run")
        assert report["dispatched"] <= report["capacity"] <= 2
        samples.append(len(memory.active()))
        memory.finish(memory.active()[0].id)
    assert open_contexts(deferred_dir, "alpha") == []
    assert max(samples) <= 2 and max(samples) == 2
    launched = [r.item_id for r in memory.requests]
    assert sorted(launched) == ids  # each exactly once
    closed = contexts(deferred_dir, "alpha")
    assert {fields(c)["work_bead_id"]: c["close_reason"] for c in closed} == dict.fromkeys(
        ids, "dispatched")
    state = load_state(Town(deferred_dir))
    assert state.last_dispatch_count >= 1 and state.last_dispatch_at


def test_circuit_breaker_after_real_launch_failures(cli, deferred_dir):
    write_items(deferred_dir, "alpha", [item("al-1")])
    configure(cli.town, "executor.command", json.dumps(["/nonexistent/polecat-binary", "{item_id}"]))
    cli.run("sling", "al-1", "alpha")
    before = issues_path(deferred_dir, "alpha").read_bytes()
    first = cli.json("scheduler", "run")
    assert (first["dispatched"], first["failed"]) == (0, 1)
    f = fields(context_of(deferred_dir, "al-1"))
    assert f["dispatch_failures"] == 1 and "cannot launch" in f["last_failure"] and f["last_failure_at"]
    assert not f.get("launch_started_at")
    assert cli.json("scheduler", "list")[0]["dispatch_failures"] == 1
    held = cli.json("scheduler", "run")  # a manual run waits out the retry backoff too
    assert (held["failed"], held["backing_off"], held["why"]) == (0, 1, {"backoff": 1})
    assert cli.json("scheduler", "list")[0]["why"] == ["backoff"]
    cli.json("scheduler", "run", "--ignore-backoff")
    third = cli.json("scheduler", "run", "--ignore-backoff")
    assert third["failures"][0]["circuit_broken"] is True
    context = context_of(deferred_dir, "al-1")
    assert context["status"] == "closed" and context["close_reason"] == "circuit-broken"
    assert fields(context)["dispatch_failures"] == 3
    assert issues_path(deferred_dir, "alpha").read_bytes() == before  # the work item is untouched
    assert len(events(deferred_dir, "DispatchFailed")) == 3
    assert len(events(deferred_dir, "CircuitBroken")) == 1
    assert cli.json("scheduler", "status")["queued_total"] == 0
    assert cli.json("scheduler", "run")["failed"] == 0  # nothing left to fail
    assert worker_records(deferred_dir) == []


def test_threshold_follows_the_config(cli, deferred_dir):
    write_items(deferred_dir, "alpha", [item("al-1")])
    configure(cli.town, "executor.command", json.dumps(["/nonexistent/polecat-binary"]))
    configure(cli.town, "scheduler.max_dispatch_failures", "1")
    cli.run("sling", "al-1", "alpha")
    assert cli.json("scheduler", "run")["failures"][0]["circuit_broken"] is True
    assert context_of(deferred_dir, "al-1")["close_reason"] == "circuit-broken"


def test_a_pause_issued_during_a_cycle_survives_it(cli, deferred_dir, executor):
    ids = ["al-1", "al-2", "al-3"]
    write_items(deferred_dir, "alpha", [item(i) for i in ids])
    configure(cli.town, "scheduler.max_polecats", "5")
    configure(cli.town, "scheduler.batch_size", "3")
    # A delay far longer than any pause takes to arrive, however loaded the machine: the pause
    # lands inside it, and the cycle stops waiting when it sees the pause, not after the delay.
    configure(cli.town, "scheduler.spawn_delay", "10m")
    configure(cli.town, "executor.command", sleeper(5))
    cli.run("sling", *ids, "alpha")
    cycle = subprocess.Popen([*SLUICE, "--town", str(deferred_dir), "scheduler", "run"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # the first launch happened; the cycle is in its delay
    wait_for(lambda: events(deferred_dir, "Dispatched"))
    cli.run("scheduler", "pause", env={"SLUICE_ACTOR": "operator"})
    out, err = cycle.communicate(timeout=120)
    assert cycle.returncode == 0 and "paused during the cycle; 2 planned item(s) left queued" in err
    [launched] = events(deferred_dir, "Dispatched")
    assert f"Dispatched {launched['payload']['item_id']} → alpha" in out  # what did launch is reported
    assert "Dispatched 1, failed 0" in out
    state = cli.json("scheduler", "status")
    assert state["paused"] is True and state["paused_by"] == "operator"
    assert state["last_dispatch_count"] == 1 and state["queued_total"] == 2
    assert len(open_contexts(deferred_dir, "alpha")) == 2
    skipped = cli.run("scheduler", "run")
    assert "paused (by operator)" in skipped.stderr
    assert len(worker_records(deferred_dir)) == 1


def test_a_pause_ends_a_spawn_delay_as_soon_as_it_is_seen(cli, deferred_dir, memory):
    from sluice.scheduler.launch.dispatch import PAUSE_POLL, run_cycle

    write_items(deferred_dir, "alpha", [item("al-1"), item("al-2")])
    configure(cli.town, "scheduler.max_polecats", "5")
    configure(cli.town, "scheduler.batch_size", "2")
    configure(cli.town, "scheduler.spawn_delay", "1h")
    cli.run("sling", "al-1", "al-2", "alpha")
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 3:  # an operator pauses a little into the delay
            cli.run("scheduler", "pause")

    report = run_cycle(Town(deferred_dir), executor=memory, sleep=sleep)
    assert waits == [PAUSE_POLL] * 3  # not the hour: the delay ends at the first look after the pause
    assert (report.dispatched, report.paused, report.skipped) == (1, True, 1)


def test_a_blocked_item_waits_for_its_blocker(cli, deferred_dir, memory):
    write_items(deferred_dir, "alpha",
                [item("al-a", "blocker"), item("al-b", "blocked", deps=[("blocks", "al-a")])])
    cli.run("sling", "al-b", "alpha")
    report = cli.json("scheduler", "run")
    assert (report["dispatched"], report["reason"], report["ready"]) == (0, "none", 0)
    [row] = cli.json("scheduler", "list")
    assert (row["id"], row["blocked"]) == ("al-b", True)
    cli.run("item", "close", "al-a")
    report = cli.json("scheduler", "run")
    assert report["dispatched"] == 1 and report["planned"][0]["item_id"] == "al-b"
    assert context_of(deferred_dir, "al-b")["close_reason"] == "dispatched"


def test_untrusted_titles_reach_the_polecat_as_one_literal_argument(cli, deferred_dir, tmp_path, executor):
    titles = {"al-1": "$(touch pwned)", "al-2": "; rm -rf x; touch pwned2",
              "al-3": "`touch pwned3` 'q' \"dq\"", "al-4": "see {repo}, {context_id} and {item_id}"}
    write_items(deferred_dir, "alpha", [item(i, t) for i, t in titles.items()])
    out_dir = tmp_path / "argv"
    out_dir.mkdir()
    code = ("import json, os, sys; "
            f"path = os.path.join({str(out_dir)!r}, os.environ['SLUICE_ITEM_ID']); "
            "open(path, 'w').write(json.dumps(sys.argv[1:]))")
    configure(cli.town, "executor.command", python_command(code, "{title}", "{item_id}"))
    configure(cli.town, "scheduler.batch_size", "4")
    configure(cli.town, "scheduler.max_polecats", "4")
    cli.run("sling", *titles, "alpha")
    assert cli.json("scheduler", "run")["dispatched"] == 4
    for item_id, title in titles.items():
        got = wait_for(lambda i=item_id: (out_dir / i).exists() and (out_dir / i).read_text())
        assert json.loads(got) == [title, item_id]
    repo = tmp_path / "repos" / "alpha"
    for place in (repo, deferred_dir, tmp_path, Path.cwd()):
        assert not list(place.glob("pwned*"))


def test_dry_run_changes_nothing_on_disk(cli, deferred_dir):
    write_items(deferred_dir, "alpha", [item("al-1"), item("al-2"), item("al-3", deps=[("blocks", "al-1")])])
    configure(cli.town, "executor.command", sleeper(5))
    cli.run("sling", "al-1", "al-2", "al-3", "alpha")
    # a stale context too, which a real cycle would close
    cli.run("item", "close", "al-2")
    cli.run("scheduler", "list")
    before = tree_hash(deferred_dir)
    report = cli.json("scheduler", "run", "--dry-run", "--batch", "5")
    assert report["dry_run"] is True and report["ready"] == 1
    assert [p["item_id"] for p in report["planned"]] == ["al-1"] and report["dispatched"] == 0
    assert "Would dispatch: al-1 → alpha" in cli.run("scheduler", "run", "--dry-run").stdout
    assert tree_hash(deferred_dir) == before
    cli.run("scheduler", "pause")
    paused_before = tree_hash(deferred_dir)
    paused = cli.json("scheduler", "run", "--dry-run")
    assert paused["paused"] is True and [p["item_id"] for p in paused["planned"]] == ["al-1"]
    assert paused["reason"] == "batch"  # the plan's reason; `paused: true` says why nothing launches now
    assert "paused" in cli.run("scheduler", "run", "--dry-run").stderr
    assert tree_hash(deferred_dir) == paused_before
    assert worker_records(deferred_dir) == [] and len(open_contexts(deferred_dir, "alpha")) == 3
    assert cli.json("scheduler", "run")["reason"] == "paused"  # a real cycle while paused plans nothing


def test_dry_run_hash_is_exact(cli, deferred_dir):
    write_items(deferred_dir, "alpha", [item("al-1")])
    configure(cli.town, "executor.command", sleeper(5))
    cli.run("sling", "al-1", "alpha")
    cli.run("scheduler", "list")
    before = tree_hash(deferred_dir)
    cli.json("scheduler", "run", "--dry-run")
    assert tree_hash(deferred_dir) == before


def _mark_intent(town: Path, item_id: str) -> tuple[str, object]:
    t = Town(town)
    stores = Stores(t)
    [context] = ctxs.find_open(t, item_id)
    ctxs.mark_launch(stores.rig(context.rig), context.id)
    return context.id, t


def test_interrupted_launch_with_a_live_polecat_is_closed_not_relaunched(cli, deferred_dir, memory):
    write_items(deferred_dir, "alpha", [item("al-1")])
    cli.run("sling", "al-1", "alpha")
    context_id, t = _mark_intent(deferred_dir, "al-1")
    # the launch the crashed cycle managed to make
    polecat = memory.launch(LaunchRequest(
        item_id="al-1", rig="alpha", title="x", context_id=context_id, repo=str(t.rig("alpha").repo),
        town=str(deferred_dir), argv=("agent", "al-1")))
    report = cli.json("scheduler", "run")
    assert report["dispatched"] == 0 and report["planned"] == []
    assert {"context_id": context_id, "item_id": "al-1", "rig": "alpha", "reason": "dispatched",
            "polecat_id": polecat.id} in report["closed"]
    assert context_of(deferred_dir, "al-1")["close_reason"] == "dispatched"
    assert [p.id for p in memory.listing()] == [polecat.id]


def test_interrupted_launch_without_a_polecat_is_launched_once(cli, deferred_dir, memory):
    write_items(deferred_dir, "alpha", [item("al-1")])
    cli.run("sling", "al-1", "alpha")
    _mark_intent(deferred_dir, "al-1")
    assert cli.json("scheduler", "run")["dispatched"] == 1
    assert cli.json("scheduler", "run")["dispatched"] == 0
    assert [r.item_id for r in memory.requests] == ["al-1"]


def test_a_cycle_killed_in_its_spawn_delay_keeps_what_it_launched(cli, deferred_dir, executor):
    write_items(deferred_dir, "alpha", [item("al-1", priority=0), item("al-2")])
    configure(cli.town, "scheduler.batch_size", "2")
    configure(cli.town, "scheduler.spawn_delay", "30s")
    configure(cli.town, "executor.command", sleeper(10))
    cli.run("sling", "al-1", "al-2", "alpha")
    cycle = subprocess.Popen([*SLUICE, "--town", str(deferred_dir), "scheduler", "run"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # The launch is recorded in the state just after its context closes; once both show, the cycle
    # is asleep in its spawn delay.
    wait_for(lambda: context_of(deferred_dir, "al-1")["status"] == "closed"
             and cli.json("scheduler", "status")["last_dispatch_count"] == 1)
    os.kill(cycle.pid, signal.SIGKILL)
    cycle.wait()
    state = cli.json("scheduler", "status")
    assert state["last_dispatch_count"] == 1 and state["last_dispatch_at"]
    assert context_of(deferred_dir, "al-2")["status"] == "open"  # killed before its second launch
    assert cli.json("scheduler", "run")["launched"][0]["item_id"] == "al-2"
    assert sorted(r["item_id"] for r in worker_records(deferred_dir)) == ["al-1", "al-2"]


@pytest.mark.slow
def test_kill_9_at_any_moment_never_launches_an_item_twice(cli, deferred_dir, executor):
    ids = [f"al-{n}" for n in range(4)]
    write_items(deferred_dir, "alpha", [item(i) for i in ids])
    configure(cli.town, "scheduler.max_polecats", "5")
    configure(cli.town, "executor.command", sleeper(15))
    cli.run("sling", *ids, "alpha")
    rng = random.Random(7)
    for _attempt in range(6):  # cycles killed at assorted points, before, during and after launches
        cycle = subprocess.Popen([*SLUICE, "--town", str(deferred_dir), "scheduler", "run"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.25, 0.7))
        os.kill(cycle.pid, signal.SIGKILL)
        cycle.wait()
    while open_contexts(deferred_dir, "alpha"):
        cli.json("scheduler", "run")
    launched = sorted(r["item_id"] for r in worker_records(deferred_dir))
    assert launched == ids


def test_stale_contexts_are_closed_with_their_reasons(cli, deferred_dir, memory):
    write_items(deferred_dir, "alpha", [item("al-ok"), item("al-closed"), item("al-hooked"), item("al-fail")])
    configure(cli.town, "scheduler.max_polecats", "1")
    configure(cli.town, "scheduler.missing_grace", "0")  # a missing item closes at once, not after 10m
    cli.run("scheduler", "pause")  # nothing launches while the stage is set
    cli.run("sling", "al-ok", "al-closed", "al-hooked", "al-fail", "alpha")
    t = Town(deferred_dir)
    stores = Stores(t)
    fail_ctx = ctxs.find_open(t, "al-fail")[0]

    def tripped(f):
        f.dispatch_failures = 3
        return f

    ctxs.update_fields(stores.rig("alpha"), fail_ctx.id, tripped)
    cli.run("item", "close", "al-closed")
    cli.run("item", "update", "al-hooked", "--status", "hooked")
    put_records(deferred_dir, "alpha", [
        {"id": "al-wisp-bad", "title": "sling-context: ?", "status": "open",
         "issue_type": "task", "ephemeral": True, "labels": ["sluice:sling-context"],
         "description": "not valid json {{{"},
        {"id": "al-wisp-lost", "title": "sling-context: ?", "status": "open",
         "issue_type": "task", "ephemeral": True, "labels": ["sluice:sling-context"],
         "description": json.dumps({"version": 1, "work_bead_id": "al-missing", "target_rig": "alpha",
                                    "enqueued_at": "2026-01-01T00:00:00Z"})}])
    assert cli.json("scheduler", "status")["stale"] == 5
    cli.run("scheduler", "resume")
    before = issues_path(deferred_dir, "alpha").read_bytes()
    report = cli.json("scheduler", "run")
    reasons = {r["context_id"]: r["reason"] for r in report["closed"]}
    by_item = {fields(c).get("work_bead_id") if c["id"] != "al-wisp-bad" else "bad": c
               for c in contexts(deferred_dir, "alpha")}
    assert reasons[by_item["bad"]["id"]] == "invalid-context"
    assert reasons[by_item["al-missing"]["id"]] == "invalid-work-item"
    assert reasons[by_item["al-closed"]["id"]] == "stale-work-item"
    assert reasons[by_item["al-hooked"]["id"]] == "stale-work-item"
    assert reasons[by_item["al-fail"]["id"]] == "circuit-broken"
    assert report["dispatched"] == 1 and by_item["al-ok"]["id"] not in reasons
    assert {c["close_reason"] for c in contexts(deferred_dir, "alpha")} == {
        "invalid-context", "invalid-work-item", "stale-work-item", "circuit-broken", "dispatched"}
    assert issues_path(deferred_dir, "alpha").read_bytes() == before
    closed_events = {e["payload"]["context_id"]: e["payload"]["reason"]
                     for e in events(deferred_dir, "ContextClosed")}
    assert closed_events[by_item["bad"]["id"]] == "invalid-context"
    assert [r.item_id for r in memory.requests] == ["al-ok"]


def test_a_title_no_program_can_receive_is_a_counted_failure_not_a_crash(cli, deferred_dir):
    """A NUL byte in a title (valid JSON) cannot be passed in argv: the item fails, the cycle goes on."""
    write_items(deferred_dir, "alpha", [item("al-nul", "evil\u0000title", priority=0), item("al-2", "fine")])
    configure(cli.town, "scheduler.batch_size", "2")
    configure(cli.town, "executor.command", python_command("pass", "{title}"))
    cli.run("sling", "al-nul", "al-2", "alpha")
    report = cli.json("scheduler", "run")
    assert (report["dispatched"], report["failed"]) == (1, 1)
    [failure] = report["failures"]
    assert failure["item_id"] == "al-nul" and "NUL byte" in failure["error"]
    f = fields(context_of(deferred_dir, "al-nul"))
    assert context_of(deferred_dir, "al-nul")["status"] == "open" and f["dispatch_failures"] == 1
    assert not f.get("launch_started_at")  # nothing for the next cycle to take for a launch
    assert [r["item_id"] for r in worker_records(deferred_dir)] == ["al-2"]
    again = cli.json("scheduler", "run", "--ignore-backoff")  # tried again: the item is not dropped
    assert again["failures"][0]["failures"] == 2 and context_of(deferred_dir, "al-nul")["status"] == "open"


def test_a_forced_context_dispatches_an_in_progress_item(cli, deferred_dir, memory):
    write_items(deferred_dir, "alpha", [item("al-1", status="in_progress", assignee="ghost")])
    cli.run("sling", "al-1", "alpha", "--force")
    assert cli.json("scheduler", "list")[0]["blocked"] is False
    assert cli.json("scheduler", "run")["dispatched"] == 1


def test_no_executor_command_is_a_config_error_and_counts_nothing(cli, deferred_dir):
    write_items(deferred_dir, "alpha", [item("al-1")])
    cli.run("sling", "al-1", "alpha")
    done = cli.run("scheduler", "run", check=False)
    assert done.returncode == 1 and "executor.command is not set" in done.stderr
    f = fields(context_of(deferred_dir, "al-1"))
    assert not f.get("dispatch_failures") and not f.get("launch_started_at")
    assert "warning: executor.command is not set" in cli.run("scheduler", "run", "--dry-run").stderr


def test_a_busy_dispatch_lock(cli, deferred_dir):
    from sluice.store.files.fsutil import file_lock

    with file_lock(deferred_dir / ".sluice" / "runtime" / "dispatch.lock"):
        done = cli.run("scheduler", "run", check=False)
        assert done.returncode == 1 and "dispatch already in progress" in done.stderr
        quiet = cli.run("scheduler", "run", "--json", env={"SLUICE_DAEMON": "1"})
        assert json.loads(quiet.stdout)["reason"] == "busy" and quiet.stderr == ""


def test_direct_mode_cycle_does_nothing_but_warns_about_leftovers(cli, deferred_dir):
    write_items(deferred_dir, "alpha", [item("al-1")])
    cli.run("sling", "al-1", "alpha")
    configure(cli.town, "scheduler.max_polecats", "-1")
    done = cli.run("scheduler", "run", "--json")
    assert json.loads(done.stdout)["mode"] == "direct" and json.loads(done.stdout)["dispatched"] == 0
    text = cli.run("scheduler", "run")
    assert "1 sling context(s) still open" in text.stderr and "sluice scheduler clear" in text.stderr
    assert cli.run("scheduler", "run", env={"SLUICE_DAEMON": "1"}).stderr == ""


def test_bad_batch_values(cli, deferred_dir):
    assert cli.run("scheduler", "run", "--batch", "0", check=False).returncode == 2
    config = deferred_dir / ".sluice" / "config.json"
    data = json.loads(config.read_text())
    data["scheduler"]["batch_size"] = 0
    config.write_text(json.dumps(data))
    done = cli.run("scheduler", "run", check=False)
    assert done.returncode == 1 and "batch_size" in done.stderr


def test_each_dispatch_is_logged_as_a_decision(cli, deferred_dir, memory):
    write_items(deferred_dir, "alpha", [item("al-epic", "epic", issue_type="epic"),
                                item("al-1", "child", priority=1, assignee="ann",
                                     deps=[("parent-child", "al-epic")])])
    cli.run("sling", "al-1", "alpha")
    report = cli.json("scheduler", "run")
    [line] = (deferred_dir / ".sluice" / "schedule" / "decisions.jsonl").read_text().splitlines()
    decision = json.loads(line)
    assert (decision["node_id"], decision["graph_id"], decision["skipped"]) == ("al-1", "al-epic", False)
    assert decision["dispatch_hints"] == {"title": "child", "project": "alpha",
                                          "repository": str(Town(deferred_dir).rig("alpha").repo),
                                          "agent_id": "ann", "priority": 1}
    assert decision["sling_command"] == "sluice sling al-1 alpha"
    assert {"decision_id", "at", "score", "reasons"} <= set(decision)
    assert decision["polecat_id"] == report["launched"][0]["polecat_id"]
    [dispatched] = events(deferred_dir, "Dispatched")
    assert dispatched["payload"]["polecat_id"] == decision["polecat_id"]


def test_sling_parameters_reach_the_polecat_environment(cli, deferred_dir, tmp_path, executor):
    write_items(deferred_dir, "alpha", [item("al-1")])
    out = tmp_path / "env.json"
    code = f"import json, os; open({str(out)!r}, 'w').write(json.dumps(dict(os.environ)))"
    configure(cli.town, "executor.command", python_command(code))
    cli.run("sling", "al-1", "alpha", "--formula", "mol-x", "--var", "a=1", "--var", "b=2", "--agent", "cc")
    report = cli.json("scheduler", "run")
    env = json.loads(wait_for(lambda: out.exists() and out.read_text()))
    assert env["SLUICE_ITEM_ID"] == "al-1" and env["SLUICE_RIG"] == "alpha"
    assert env["SLUICE_CONTEXT_ID"] == report["planned"][0]["context_id"]
    assert env["SLUICE_TOWN"] == str(deferred_dir)
    assert (env["SLUICE_FORMULA"], env["SLUICE_VARS"], env["SLUICE_AGENT"]) == ("mol-x", "a=1\nb=2", "cc")
    assert "SLUICE_ARGS" not in env
    assert contexts(deferred_dir, "alpha")


# -- the cycle's bookkeeping, with an in-memory executor ------------------------------------------


def test_spawn_delay_only_follows_successful_launches(cli, deferred_dir):
    from sluice.executors.memory import MemoryExecutor
    from sluice.scheduler.launch.dispatch import run_cycle

    write_items(deferred_dir, "alpha", [item("al-1"), item("al-2"), item("al-3"), item("al-4")])
    configure(cli.town, "scheduler.max_polecats", "5")
    configure(cli.town, "scheduler.batch_size", "4")
    configure(cli.town, "scheduler.spawn_delay", "250ms")
    cli.run("sling", "al-1", "al-2", "al-3", "al-4", "alpha")
    sleeps: list[float] = []
    executor = MemoryExecutor()
    executor.fail_next("al-1", "no slot")
    executor.fail_next("al-3", "no slot")
    report = run_cycle(Town(deferred_dir), executor=executor, sleep=sleeps.append)
    assert (report.dispatched, report.failed) == (2, 2)
    assert [p.item_id for p in executor.active()] == ["al-2", "al-4"]
    assert sleeps == [0.25]  # after al-2 only: not after failures, not after the last launch


def test_an_unavailable_executor_stops_the_cycle_without_counting(cli, deferred_dir):
    from sluice.errors import ExecutorUnavailable
    from sluice.executors.memory import MemoryExecutor
    from sluice.scheduler.launch.dispatch import run_cycle

    write_items(deferred_dir, "alpha", [item("al-1")])
    cli.run("sling", "al-1", "alpha")
    executor = MemoryExecutor()
    executor.fail_next("al-1", "cluster unreachable", unavailable=True)  # at the launch itself
    with pytest.raises(ExecutorUnavailable, match="cluster unreachable"):
        run_cycle(Town(deferred_dir), executor=executor)
    f = fields(context_of(deferred_dir, "al-1"))
    assert not f.get("dispatch_failures") and not f.get("launch_started_at")
    assert context_of(deferred_dir, "al-1")["status"] == "open"
    assert events(deferred_dir, "DispatchFailed") == []


def test_a_context_that_cannot_be_closed_after_launch_is_settled_next_cycle(cli, deferred_dir, executor,
                                                                            monkeypatch):
    from sluice.scheduler.launch import dispatch

    write_items(deferred_dir, "alpha", [item("al-1")])
    configure(cli.town, "executor.command", sleeper(5))
    cli.run("sling", "al-1", "alpha")
    real_close = ctxs.close_many

    def broken_close(town_, store, closes):
        raise OSError("disk full")

    monkeypatch.setattr(dispatch.ctxs, "close_many", broken_close)
    waits: list[float] = []
    report = dispatch.run_cycle(Town(deferred_dir), sleep=waits.append)
    assert (report.dispatched, report.failed) == (0, 1) and waits == [0.5, 1.0]
    assert any("closing its context failed" in m for m in report.messages)
    context = context_of(deferred_dir, "al-1")
    assert context["status"] == "open" and fields(context)["launch_started_at"]  # the intent remains
    monkeypatch.setattr(dispatch.ctxs, "close_many", real_close)
    again = dispatch.run_cycle(Town(deferred_dir))
    assert again.dispatched == 0 and again.closed[0]["reason"] == "dispatched"
    assert len(worker_records(deferred_dir)) == 1  # launched once, never twice


def _queued_sleepers(cli, town: Path, count: int, *settings: tuple[str, str]) -> list[str]:
    """``count`` items slung to alpha, all launched by one cycle, each polecat sleeping 5 s."""
    ids = [f"al-{n}" for n in range(1, count + 1)]
    write_items(town, "alpha", [item(i) for i in ids])
    configure(cli.town, "scheduler.max_polecats", "5")
    configure(cli.town, "scheduler.batch_size", str(count))
    for key, value in settings:
        configure(cli.town, key, value)
    configure(cli.town, "executor.command", sleeper(5))
    cli.run("sling", *ids, "alpha")
    return ids


def _watched_steps(monkeypatch) -> list[str]:
    """Each watcher's start (``start``) and its report of the polecat (``report``), in the order made."""
    from sluice.executors import local

    steps: list[str] = []
    spawn, reported = local._spawn_watcher, local._reported

    def spawning(*args):
        steps.append("start")
        return spawn(*args)

    def reporting(*args):
        steps.append("report")
        return reported(*args)

    monkeypatch.setattr(local, "_spawn_watcher", spawning)
    monkeypatch.setattr(local, "_reported", reporting)
    return steps


def test_a_batch_starts_every_watcher_before_it_waits_for_the_first(cli, deferred_dir, executor, monkeypatch):
    from sluice.scheduler.launch.dispatch import run_cycle

    ids = _queued_sleepers(cli, deferred_dir, 3)
    steps = _watched_steps(monkeypatch)
    from collections import Counter

    from sluice.store.database import runs as runlog
    from sluice.store.files import fsutil

    appends: Counter = Counter()
    append, write_runs = fsutil.append_bytes, runlog.append
    monkeypatch.setattr(fsutil, "append_bytes",
                        lambda path, *a, **k: appends.update([Path(path).name]) or append(path, *a, **k))
    monkeypatch.setattr(runlog, "append",
                        lambda town, records: appends.update(["runs"]) or write_runs(town, records))
    report = run_cycle(Town(deferred_dir))
    assert steps == ["start"] * 3 + ["report"] * 3
    # booked together: one write of the three run records, one append of the decisions
    assert appends["runs"] == 1 and appends["decisions.jsonl"] == 1
    assert [row["item_id"] for row in report.launched] == ids  # booked in plan order
    assert report.dispatched == 3 and not open_contexts(deferred_dir, "alpha")
    assert sorted(r["item_id"] for r in worker_records(deferred_dir)) == ids
    assert all(r["state"] == "running" and r["pid"] for r in worker_records(deferred_dir))
    assert [e["payload"]["item_id"] for e in events(deferred_dir, "Dispatched")] == ids
    runs = {r["polecat_id"]: r["run_id"] for r in runlog.read_runs(Town(deferred_dir)).values()}
    assert [row["run_id"] for row in report.launched] == [runs[row["polecat_id"]] for row in report.launched]
    assert [e["payload"]["run_id"] for e in events(deferred_dir, "Dispatched")] == \
        [row["run_id"] for row in report.launched]


def test_at_most_so_many_launches_are_begun_before_the_cycle_waits(cli, deferred_dir, executor, monkeypatch):
    from sluice.scheduler.launch import dispatch

    ids = _queued_sleepers(cli, deferred_dir, 3)
    steps = _watched_steps(monkeypatch)
    monkeypatch.setattr(dispatch, "OVERLAP", 2)
    report = dispatch.run_cycle(Town(deferred_dir))
    assert steps == ["start", "start", "report", "report", "start", "report"]
    assert report.dispatched == 3 and [row["item_id"] for row in report.launched] == ids


def test_an_error_that_is_nobodys_fault_stops_the_cycle_before_the_next_launch_begins(
        cli, deferred_dir, executor, monkeypatch):
    from sluice.errors import ExecutorUnavailable
    from sluice.scheduler.launch.dispatch import run_cycle

    _queued_sleepers(cli, deferred_dir, 4)
    start = LocalExecutor.start

    def gone(self, request):
        if request.item_id == "al-2":
            raise ExecutorUnavailable("the executor went away")
        return start(self, request)

    monkeypatch.setattr(LocalExecutor, "start", gone)
    with pytest.raises(ExecutorUnavailable):
        run_cycle(Town(deferred_dir))
    assert [r["item_id"] for r in worker_records(deferred_dir)] == ["al-1"]  # booked, and nothing after
    assert context_of(deferred_dir, "al-1")["status"] == "closed"
    for later in ("al-2", "al-3", "al-4"):  # al-2's intent withdrawn, the others never begun
        left = fields(context_of(deferred_dir, later))
        assert not left.get("launch_started_at") and not left.get("dispatch_failures")


def test_launches_spaced_by_a_spawn_delay_are_made_one_by_one(cli, deferred_dir, executor, monkeypatch):
    from sluice.scheduler.launch.dispatch import run_cycle

    _queued_sleepers(cli, deferred_dir, 3, ("scheduler.spawn_delay", "10m"))
    steps = _watched_steps(monkeypatch)
    slept: list[float] = []
    report = run_cycle(Town(deferred_dir), sleep=slept.append)
    assert steps == ["start", "report"] * 3
    assert report.dispatched == 3 and len(slept) >= 2  # the delay after each launch but the last


def test_a_refused_launch_still_books_the_launches_begun_before_it(cli, deferred_dir, executor, monkeypatch):
    from sluice.errors import ExecutorError
    from sluice.scheduler.launch.dispatch import run_cycle

    _queued_sleepers(cli, deferred_dir, 4)
    last = context_of(deferred_dir, "al-4")["id"]
    start, mark = LocalExecutor.start, ctxs.mark_launch

    def refusing(self, request):
        if request.item_id == "al-2":
            raise ExecutorError("no room for this one")  # the item's own failure: counted
        return start(self, request)

    def refused_intent(store, context_id):
        if context_id == last:
            raise OSError(28, "No space left on device")  # the disk refuses: the cycle stops
        return mark(store, context_id)

    monkeypatch.setattr(LocalExecutor, "start", refusing)
    monkeypatch.setattr(ctxs, "mark_launch", refused_intent)
    with pytest.raises(OSError):
        run_cycle(Town(deferred_dir))
    # al-1 and al-3 were begun before the refusal: their polecats run and their contexts are closed
    assert sorted(r["item_id"] for r in worker_records(deferred_dir)) == ["al-1", "al-3"]
    assert all(r["state"] == "running" for r in worker_records(deferred_dir))
    assert {fields(c)["work_bead_id"] for c in open_contexts(deferred_dir, "alpha")} == {"al-2", "al-4"}
    assert [e["payload"]["item_id"] for e in events(deferred_dir, "Dispatched")] == ["al-1", "al-3"]
    failed = fields(context_of(deferred_dir, "al-2"))
    assert failed["dispatch_failures"] == 1 and "no room for this one" in failed["last_failure"]
    assert not fields(context_of(deferred_dir, "al-4")).get("launch_started_at")
    assert cli.json("scheduler", "status")["last_dispatch_count"] == 2
