"""Admission in a real town: real stores, the CLI and the library on one survey.

Polecats are the in-memory executor's records and time is the test's clock
(the ``memory`` and ``clock`` fixtures): a run ends with the exit code the
test gives, a window or cooldown passes when the test advances the clock, so
nothing here waits for a process or for real seconds.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from helpers.scheduler import (
    configure,
    edit_fields,
    events,
    fields,
    item,
    open_contexts,
    write_items,
)
from sluice.errors import StorageError
from sluice.executors import get_executor
from sluice.scheduler.launch.breaker import broken_rows
from sluice.scheduler.launch.dispatch import run_cycle
from sluice.scheduler.launch.sling import SlingOptions, sling
from sluice.scheduler.launch.usage import report_usage
from sluice.scheduler.queue.requeue import queue_again
from sluice.scheduler.queue.views import explain, list_queue, status
from sluice.store.database import admission_state as kept
from sluice.store.files.town import Town


@pytest.fixture
def two_rigs_dir(town_dir, rigs, capacity, memory) -> Path:
    """Rigs alpha and beta with room for ten polecats a cycle, on the in-memory executor."""
    capacity(10, batch_size=10)
    return town_dir


def queue(town, rig, *records):
    write_items(town, rig, list(records))
    result = sling(Town(town), [*(r["id"] for r in records), rig], SlingOptions())
    assert result.ok, result.errors


def running_items(town) -> list[str]:
    """What the town's own executor counts as running (the one every cycle asks)."""
    return sorted(p.item_id for p in get_executor(Town(town)).active())


def cycle(town, **kw):
    return run_cycle(Town(town), **kw)


def test_rig_cap_is_never_exceeded_and_other_rigs_go_on(two_rigs_dir):
    configure(two_rigs_dir, "rigs.alpha.max_polecats", "2")
    queue(two_rigs_dir, "alpha", *(item(f"al-{n}", priority=0) for n in range(4)))
    queue(two_rigs_dir, "beta", item("be-1", priority=4))
    report = cycle(two_rigs_dir)
    assert report.dispatched == 3 and report.why == {"rig-cap": 2}
    assert running_items(two_rigs_dir) == ["al-0", "al-1", "be-1"]
    again = cycle(two_rigs_dir)  # the cap holds across cycles: running polecats count
    assert again.dispatched == 0 and again.reason == "rig-cap"
    rows = list_queue(Town(two_rigs_dir))
    assert [r["why"] for r in rows] == [["rig-cap"], ["rig-cap"]]
    explained = explain(Town(two_rigs_dir), "al-2")
    assert explained["queued"] and not explained["would_dispatch"]
    assert [r["code"] for r in explained["reasons"]] == ["rig-cap"]
    assert "runs 2 of its 2" in explained["reasons"][0]["detail"]


def test_label_cap_and_overlap_with_running_polecats(two_rigs_dir, memory):
    configure(two_rigs_dir, "scheduler.label_caps.gpu", "1")
    queue(two_rigs_dir, "alpha",
          item("al-g1", labels=["gpu"], priority=0),
          item("al-g2", labels=["gpu"], priority=0),
          item("al-api", metadata={"touches": ["src/api/**"]}, priority=1),
          item("al-auth", metadata={"touches": ["src/api/auth.py"]}, priority=1),
          item("al-web", metadata={"touches": ["src/web/*"]}, priority=1))
    queue(two_rigs_dir, "beta", item("be-api", metadata={"touches": ["src/api/**"]}, priority=2))
    report = cycle(two_rigs_dir)
    assert running_items(two_rigs_dir) == ["al-api", "al-g1", "al-web", "be-api"]
    assert report.why == {"label-cap": 1, "overlap": 1}
    why = {r["id"]: r["why"] for r in list_queue(Town(two_rigs_dir))}
    assert why == {"al-g2": ["label-cap"], "al-auth": ["overlap"]}
    [reason] = explain(Town(two_rigs_dir), "al-auth")["reasons"]
    assert reason["code"] == "overlap" and "al-api" in reason["detail"]
    memory.finish("al-api")
    cycle(two_rigs_dir)
    assert "al-auth" in running_items(two_rigs_dir) and "al-g2" not in running_items(two_rigs_dir)


def test_budget_exhaustion_and_recovery_as_the_window_slides(two_rigs_dir, clock):
    configure(two_rigs_dir, "scheduler.token_budget", "2500")
    configure(two_rigs_dir, "scheduler.budget_window", "3s")
    queue(two_rigs_dir, "alpha", *(item(f"al-{n}", metadata={"estimated_tokens": 1000}) for n in range(3)))
    first = cycle(two_rigs_dir)
    assert first.dispatched == 2 and first.why == {"budget": 1}
    assert [r["code"] for r in explain(Town(two_rigs_dir), "al-2")["reasons"]] == ["budget"]
    data = status(Town(two_rigs_dir))
    assert data["budgets"] == [{"rig": None, "spent": 2000, "budget": 2500, "window": "3s"}]
    # A polecat reports what it really used: less than the estimate, so room appears at once.
    ledger = charges_of(two_rigs_dir)
    report = report_usage(Town(two_rigs_dir), ledger[0]["polecat_id"], 100)
    assert report["counted"]
    assert status(Town(two_rigs_dir))["budgets"][0]["spent"] == 1100
    assert cycle(two_rigs_dir).dispatched == 1
    write_items(two_rigs_dir, "alpha", [item("al-late", metadata={"estimated_tokens": 1000})])
    sling(Town(two_rigs_dir), ["al-late", "alpha"], SlingOptions())
    assert cycle(two_rigs_dir).reason == "budget"
    assert cycle(two_rigs_dir).reason == "budget"
    # once per spell: the first, and after the report
    assert len(events(two_rigs_dir, "BudgetExhausted")) == 2
    clock.advance(2.9)  # the first launches are still inside the window
    assert cycle(two_rigs_dir).reason == "budget"
    clock.advance(0.2)  # and now the window has slid past them
    assert cycle(two_rigs_dir).dispatched == 1


def charges_of(town) -> list[dict]:
    """Every charge the budget ledger holds."""
    return kept.charges(Town(town), 0.0, 0.0)


@pytest.fixture
def budget_disk(monkeypatch):
    """The budget ledger's writes refused with ENOSPC while ``disk["full"]`` is true, as a full disk would
    refuse the database's."""
    disk = {"full": False}

    def refusing(write):
        def refused(town, *args, **kwargs):
            if disk["full"]:
                raise StorageError(town.db.path, "cannot write it: No space left on device", errno.ENOSPC)
            return write(town, *args, **kwargs)
        return refused

    for name in ("record_launch", "name_charge", "withdraw_charge"):
        monkeypatch.setattr(kept, name, refusing(getattr(kept, name)))
    return disk


def test_a_disk_that_fills_as_a_polecat_starts_loses_none_of_its_budget_charge(
        two_rigs_dir, memory, budget_disk, monkeypatch):
    configure(two_rigs_dir, "scheduler.token_budget", "1500")
    queue(two_rigs_dir, "alpha", item("al-0", metadata={"estimated_tokens": 1000}, priority=0),
          item("al-1", metadata={"estimated_tokens": 1000}, priority=1))
    launch = memory.launch

    def filling(request):
        polecat = launch(request)
        budget_disk["full"] = True  # between the polecat's start and the bookkeeping after it
        return polecat

    monkeypatch.setattr(memory, "launch", filling)
    first = cycle(two_rigs_dir)
    assert running_items(two_rigs_dir) == ["al-0"]
    assert any("budget charge was not written" in m for m in first.messages)
    budget_disk["full"] = False
    second = cycle(two_rigs_dir)
    assert second.dispatched == 0 and second.why == {"budget": 1}
    assert status(Town(two_rigs_dir))["budgets"][0]["spent"] == 1000


def test_a_launch_whose_charge_the_disk_refuses_is_not_made_and_stays_queued(two_rigs_dir, budget_disk):
    configure(two_rigs_dir, "scheduler.token_budget", "5000")
    queue(two_rigs_dir, "alpha", item("al-0", metadata={"estimated_tokens": 1000}))
    budget_disk["full"] = True
    with pytest.raises(OSError, match="No space left"):
        cycle(two_rigs_dir)
    assert running_items(two_rigs_dir) == []
    [context] = open_contexts(two_rigs_dir, "alpha", "al-0")
    assert not fields(context).get("launch_started_at")
    budget_disk["full"] = False
    assert cycle(two_rigs_dir).dispatched == 1
    [charge] = charges_of(two_rigs_dir)
    assert charge["item_id"] == "al-0" and charge["polecat_id"].startswith("mem-")


def test_a_disk_that_refuses_the_launch_itself_blames_no_item_and_keeps_no_intent_or_charge(
        two_rigs_dir, memory, monkeypatch):
    from sluice.store.files.fsutil import storage_error

    configure(two_rigs_dir, "scheduler.token_budget", "5000")
    queue(two_rigs_dir, "alpha", item("al-0", metadata={"estimated_tokens": 1000}))

    def full(request):  # what an executor writing its record on a full disk raises
        refusal = OSError(errno.ENOSPC, "No space left on device")
        raise storage_error(Path(two_rigs_dir) / "record.json", refusal)

    monkeypatch.setattr(memory, "launch", full)
    with pytest.raises(OSError, match="No space left"):
        cycle(two_rigs_dir)
    [context] = open_contexts(two_rigs_dir, "alpha", "al-0")
    assert not fields(context).get("launch_started_at") and not fields(context).get("dispatch_failures")
    assert charges_of(two_rigs_dir) == []


def test_a_charge_counts_from_when_the_polecat_started_not_from_before_its_launch(
        two_rigs_dir, memory, clock, monkeypatch):
    configure(two_rigs_dir, "scheduler.token_budget", "1500")
    configure(two_rigs_dir, "scheduler.budget_window", "60s")
    queue(two_rigs_dir, "alpha", item("al-0", metadata={"estimated_tokens": 1000}, priority=0),
          item("al-1", metadata={"estimated_tokens": 1000}, priority=1))
    launch = memory.launch

    def slow(request):
        clock.advance(5)  # a clone or a slow executor between the charge and the start
        return launch(request)

    monkeypatch.setattr(memory, "launch", slow)
    before = clock.time()
    assert cycle(two_rigs_dir).dispatched == 1
    [charge] = charges_of(two_rigs_dir)
    assert charge["at_ts"] >= before + 5
    clock.advance(56)  # a window after the charge was taken, but not after the run began
    assert cycle(two_rigs_dir).why == {"budget": 1}
    clock.advance(5)
    assert cycle(two_rigs_dir).dispatched == 1


def test_a_launch_that_fails_takes_its_budget_charge_back(two_rigs_dir, memory):
    configure(two_rigs_dir, "scheduler.token_budget", "5000")
    queue(two_rigs_dir, "alpha", item("al-0", metadata={"estimated_tokens": 1000}))
    memory.fail_next("al-0")
    assert cycle(two_rigs_dir).failed == 1
    assert charges_of(two_rigs_dir) == []
    memory.fail_next("al-0", unavailable=True)
    with pytest.raises(Exception, match="launch refused"):
        cycle(two_rigs_dir, ignore_backoff=True)
    assert charges_of(two_rigs_dir) == []
    assert status(Town(two_rigs_dir))["budgets"][0]["spent"] == 0


def test_throttle_holds_new_launches_until_it_ends_or_is_cleared(cli, two_rigs_dir):
    queue(two_rigs_dir, "alpha", item("al-1"))
    queue(two_rigs_dir, "beta", item("be-1"))
    out = cli.json("scheduler", "throttle", "--until", "1h", "--rig", "alpha",
                   "--reason", "429 from provider")
    assert out["rig"] == "alpha" and out["reason"] == "429 from provider"
    report = cycle(two_rigs_dir)
    assert running_items(two_rigs_dir) == ["be-1"] and report.why == {"throttled": 1}
    data = status(Town(two_rigs_dir))
    assert [t["rig"] for t in data["throttles"]] == ["alpha"]
    assert "429 from provider" in explain(Town(two_rigs_dir), "al-1")["reasons"][0]["detail"]
    assert cli.json("scheduler", "throttle", "--clear", "--rig", "alpha")["cleared"] is True
    cycle(two_rigs_dir)
    assert running_items(two_rigs_dir) == ["al-1", "be-1"]
    bad = cli.run("scheduler", "throttle", "--until", "yesterday", check=False)
    assert bad.returncode == 2 and "neither a duration" in bad.stderr


def test_exit_75_throttles_the_rig_and_requeues_without_a_failure(two_rigs_dir, memory, clock):
    configure(two_rigs_dir, "scheduler.throttle_for", "2s")
    queue(two_rigs_dir, "alpha", item("al-1"))
    assert cycle(two_rigs_dir).dispatched == 1
    memory.finish("al-1", exit_code=75)
    report = cycle(two_rigs_dir)
    assert [r["item_id"] for r in report.requeued] == ["al-1"]
    [context] = open_contexts(two_rigs_dir, "alpha", "al-1")
    assert fields(context).get("dispatch_failures", 0) == 0  # not a dispatch failure
    assert report.dispatched == 0 and report.why == {"throttled": 1}
    assert cycle(two_rigs_dir).requeued == []  # settled once
    assert events(two_rigs_dir, "Throttled")
    clock.advance(1.9)
    assert cycle(two_rigs_dir).why == {"throttled": 1}  # the throttle lasts its two seconds
    clock.advance(0.2)
    assert cycle(two_rigs_dir).dispatched == 1


def test_cooldown_requeues_a_broken_item_half_open_and_doubles(cli, two_rigs_dir, memory, clock):
    memory.fail_next("al-1", "cannot launch '/nonexistent/agent': no such file or command", times=2)
    configure(two_rigs_dir, "scheduler.max_dispatch_failures", "1")
    configure(two_rigs_dir, "scheduler.breaker_cooldown", "1s")
    queue(two_rigs_dir, "alpha", item("al-1"))
    cycle(two_rigs_dir)
    [row] = cli.json("scheduler", "broken")
    assert row["item_id"] == "al-1" and row["trips"] == 1 and "cannot launch" in row["last_error"]
    assert [r["code"] for r in explain(Town(two_rigs_dir), "al-1")["reasons"]] == ["circuit-broken"]
    clock.advance(0.9)
    assert cycle(two_rigs_dir).requeued == []  # still cooling down
    clock.advance(0.2)
    report = cycle(two_rigs_dir)  # half-open: queued again for one attempt, fails, broken again
    assert [r["item_id"] for r in report.requeued] == ["al-1"] and report.failed == 1
    [row] = kept.broken(Town(two_rigs_dir)).values()
    assert row["trips"] == 2 and row["cooldown"] == 2.0
    # A person resets it; with a working agent it launches and the breaker forgets it.
    out = cli.json("scheduler", "reset", "al-1")
    assert out["context_id"]
    assert fields(open_contexts(two_rigs_dir, "alpha", "al-1")[0]).get("dispatch_failures", 0) == 0
    assert cycle(two_rigs_dir).dispatched == 1
    assert cli.json("scheduler", "broken") == []


def test_breaker_cooldown_zero_latches(two_rigs_dir, memory, clock):
    memory.fail_next("al-1")
    configure(two_rigs_dir, "scheduler.max_dispatch_failures", "1")
    configure(two_rigs_dir, "scheduler.breaker_cooldown", "0")
    queue(two_rigs_dir, "alpha", item("al-1"))
    cycle(two_rigs_dir)
    [row] = broken_rows(Town(two_rigs_dir))
    assert row["next_attempt_at"] is None
    clock.advance(365 * 86400.0)
    assert cycle(two_rigs_dir).requeued == []


def test_explain_codes_for_items_not_in_the_queue(cli, two_rigs_dir):
    write_items(two_rigs_dir, "alpha", [item("al-free"), item("al-dep", deps=[("blocks", "al-free")])])
    out = cli.json("scheduler", "explain", "al-free")
    assert out == {"item_id": "al-free", "queued": False, "context_id": None, "would_dispatch": False,
                   "score": None, "promoted_at": None, "host": out["host"],
                   "estimated_minutes": None, "due_at": None, "due": None, "gates": [],
                   "start_at": None, "done_at": None, "done_p90_at": None, "runtime_p50": None,
                   "runtime_p90": None, "tokens_p90": None, "basis": None, "budget": None,  # not queued:
                   # no forecast, no budget fit
                   "reasons": [{"code": "not-queued", "detail": out["reasons"][0]["detail"]}]}
    assert [r["code"] for r in cli.json("scheduler", "explain", "al-nope")["reasons"]] == ["missing-item"]
    sling(Town(two_rigs_dir), ["al-dep", "al-free", "alpha"], SlingOptions())
    blocked = explain(Town(two_rigs_dir), "al-dep")
    assert blocked["queued"] and [r["code"] for r in blocked["reasons"]] == ["blocked"]
    assert "al-free" in blocked["reasons"][0]["detail"]
    ready = explain(Town(two_rigs_dir), "al-free")
    assert ready["would_dispatch"] and ready["reasons"] == [] and ready["score"] is not None
    cli.run("scheduler", "pause")
    assert [r["code"] for r in explain(Town(two_rigs_dir), "al-free")["reasons"]] == ["paused"]
    configure(two_rigs_dir, "scheduler.max_polecats", "-1")
    codes = [r["code"] for r in explain(Town(two_rigs_dir), "al-free")["reasons"]]
    assert codes == ["paused", "direct-mode"]
    text = cli.run("scheduler", "explain", "al-free").stdout
    assert "paused:" in text and "direct-mode:" in text


def test_batch_and_capacity_reasons_match_the_plan(two_rigs_dir):
    configure(two_rigs_dir, "scheduler.max_polecats", "3")
    configure(two_rigs_dir, "scheduler.batch_size", "1")
    queue(two_rigs_dir, "alpha", item("al-1", priority=0), item("al-2", priority=1))
    assert [r["why"] for r in list_queue(Town(two_rigs_dir))] == [[], ["batch"]]
    plan = run_cycle(Town(two_rigs_dir), dry_run=True)
    assert plan.reason == "batch" and [p["item_id"] for p in plan.planned] == ["al-1"]
    configure(two_rigs_dir, "scheduler.max_polecats", "1")
    queue(two_rigs_dir, "beta", item("be-run", priority=0))
    cycle(two_rigs_dir)
    waiting = [r for r in list_queue(Town(two_rigs_dir)) if r["id"] in ("al-1", "be-run")]
    assert [r["why"] for r in waiting] == [["capacity"]]
    assert explain(Town(two_rigs_dir), waiting[0]["id"])["reasons"][0]["code"] == "capacity"


def test_config_keys_for_caps_and_budgets(cli, two_rigs_dir):
    cli.run("config", "set", "rigs.alpha.max_polecats", "2")
    assert cli.run("config", "get", "rigs.alpha.max_polecats").stdout.strip() == "2"
    bad = cli.run("config", "set", "rigs.alpha.max_polecats", "0", check=False)
    assert bad.returncode == 2 and "rigs.alpha.max_polecats" in bad.stderr
    unknown = cli.run("config", "set", "rigs.nope.max_polecats", "2", check=False)
    assert unknown.returncode == 2 and "unknown rig 'nope'" in unknown.stderr
    cli.run("config", "set", "scheduler.label_caps.gpu", "1")
    assert cli.run("config", "get", "scheduler.label_caps.gpu").stdout.strip() == "1"
    assert cli.run("config", "set", "scheduler.budget_window", "soon", check=False).returncode == 2
    cli.run("config", "set", "rigs.beta.token_budget", "5000")
    config = json.loads((two_rigs_dir / ".sluice" / "config.json").read_text())
    assert config["rigs"]["beta"]["token_budget"] == 5000 and config["scheduler"]["label_caps"] == {"gpu": 1}


def test_a_requeue_and_a_sling_of_one_item_at_once_leave_one_open_context(two_rigs_dir, monkeypatch):
    """queue_again checks and creates in one write transaction, as a sling does: a sling of the same item
    that comes between its check and its create waits for it, then finds the item queued."""
    import threading

    from sluice.scheduler.queue import pending
    from sluice.store.items.rigstore import Stores

    write_items(two_rigs_dir, "alpha", [item("al-race")])
    real_item_store = pending.item_store
    answers: list = []
    done = threading.Event()

    def item_store_while_a_sling_runs(stores, item_id):
        # A sling of the same item, from another thread, between queue_again's check and its create.
        def racer() -> None:
            answers.append(sling(Town(two_rigs_dir), ["al-race"], SlingOptions()))
            done.set()

        threading.Thread(target=racer).start()
        assert not done.wait(0.5)  # it waits for this transaction
        return real_item_store(stores, item_id)

    monkeypatch.setattr(pending, "item_store", item_store_while_a_sling_runs)
    record = queue_again(Town(two_rigs_dir), Stores(Town(two_rigs_dir)), "al-race", "alpha", {}, 0)
    assert done.wait(30)
    assert record is not None
    assert [row["context_id"] for row in answers[0].already] == [record["id"]]
    assert [c["id"] for c in open_contexts(two_rigs_dir, "alpha", "al-race")] == [record["id"]]


def test_aging_in_the_policy_reorders_the_queue(cli, two_rigs_dir):
    configure(two_rigs_dir, "scheduler.batch_size", "1")
    write_items(two_rigs_dir, "alpha", [item("al-old", priority=3), item("al-new", priority=2)])
    sling(Town(two_rigs_dir), ["al-old", "alpha"], SlingOptions())
    edit_fields(two_rigs_dir, "alpha", lambda fields: fields.update(enqueued_at="2020-01-01T00:00:00Z"))
    sling(Town(two_rigs_dir), ["al-new", "alpha"], SlingOptions())
    assert [r["id"] for r in list_queue(Town(two_rigs_dir))] == ["al-new", "al-old"]
    policy = cli.json("schedule", "policy", "set", "--aging", "0.5", "--aging-max", "1.5")
    assert (policy["aging"], policy["aging_max"]) == (0.5, 1.5)
    rows = list_queue(Town(two_rigs_dir))
    assert [r["id"] for r in rows] == ["al-old", "al-new"] and rows[0]["why"] == []
    bad = cli.run("schedule", "policy", "set", "--aging", "-1", check=False)
    assert bad.returncode == 2 and "--aging must be >= 0" in bad.stderr


def test_a_launch_stopped_at_its_budget_charge_leaves_no_intent(two_rigs_dir, memory, monkeypatch):
    """The intent and the charge are one commit: a process stopped while it writes the charge (here a
    SystemExit, as a kill would) leaves neither, so nothing reads as launched and lost and the context
    is simply queued for the next cycle."""
    configure(two_rigs_dir, "scheduler.token_budget", "5000")
    queue(two_rigs_dir, "alpha", item("al-0", metadata={"estimated_tokens": 1000}))
    real = kept.record_launch

    def stopped(*_args, **_kwargs):
        raise SystemExit("stopped while charging")

    monkeypatch.setattr(kept, "record_launch", stopped)
    with pytest.raises(SystemExit):
        run_cycle(Town(two_rigs_dir))
    assert memory.active() == []  # nothing was launched
    [context] = open_contexts(two_rigs_dir, "alpha", "al-0")
    assert not fields(context).get("launch_started_at")
    monkeypatch.setattr(kept, "record_launch", real)
    run_cycle(Town(two_rigs_dir))
    assert [p.item_id for p in memory.active()] == ["al-0"]
