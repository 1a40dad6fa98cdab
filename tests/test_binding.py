"""The one limit that binds: ``scheduler status`` names it, the plan agrees, the next cycle does it.

Each test sets up one kind of limit in a real town (its polecats on the
in-memory executor) and
checks that ``status``'s ``binding`` has that code, equal to ``plan_reason``,
that ``explain`` of the best-ranked waiting item names it too, and that the
next real cycle stops for that very reason.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers.scheduler import configure, item, write_items
from sluice.core import admission as rules
from sluice.core.admission import Admission, Reason
from sluice.core.gates import binding
from sluice.scheduler.launch.dispatch import run_cycle
from sluice.scheduler.launch.sling import SlingOptions, sling
from sluice.scheduler.launch.throttles import throttle
from sluice.scheduler.queue.control import pause
from sluice.scheduler.queue.views import explain, status
from sluice.store.files.town import Town


@pytest.fixture
def gpu_dir(town_dir, rig, capacity, memory) -> Path:
    """Rig alpha with three gpu items queued, room for five polecats, on the in-memory executor."""
    capacity(5, batch_size=5)
    write_items(town_dir, "alpha", [
        item("al-1", priority=0, labels=["gpu"]),
        item("al-2", priority=1, labels=["gpu"]),
        item("al-3", priority=2, labels=["gpu"]),
    ])
    sling(Town(town_dir), ["al-1", "al-2", "al-3", "alpha"], SlingOptions())
    return town_dir


def agree(town, code: str) -> dict:
    """status, explain and the next cycle all name ``code``; returns status's binding."""
    doc = status(Town(town))
    assert doc["binding"]["code"] == code
    if code != rules.PAUSED:
        assert doc["plan_reason"] == code
    waiting = next(row for row in doc["items"] if row["why"])
    assert code in [r["code"] for r in explain(Town(town), waiting["id"])["reasons"]]
    report = run_cycle(Town(town))
    assert report.reason == code
    return doc["binding"]


@pytest.mark.parametrize(("key", "value", "filled_first", "code", "detail"), [
    ("scheduler.max_polecats", "1", True, rules.CAPACITY, "free polecat slot"),
    ("scheduler.batch_size", "1", False, rules.BATCH, "^ranked below"),
    ("rigs.alpha.max_polecats", "1", True, rules.RIG_CAP, "rig alpha runs 1 of its 1"),
    ("scheduler.label_caps.gpu", "2", True, rules.LABEL_CAP, "label gpu"),
    ("scheduler.token_budget", "10", False, rules.BUDGET, "town budget"),
], ids=["capacity", "batch", "rig-cap", "label-cap", "budget"])
def test_a_configured_limit_binds_when_it_is_the_smaller_one(gpu_dir, key, value, filled_first, code, detail):
    """A cap binds once a cycle has launched up to it; the batch and the budget bind before any launch."""
    configure(gpu_dir, key, value)
    if filled_first:
        run_cycle(Town(gpu_dir))
    assert re.search(detail, agree(gpu_dir, code)["detail"])


def test_a_throttle_binds(gpu_dir):
    throttle(Town(gpu_dir), until="10m", reason="provider said later")
    assert "provider said later" in agree(gpu_dir, rules.THROTTLED)["detail"]


def test_a_pause_binds_over_every_other_limit(gpu_dir):
    configure(gpu_dir, "scheduler.batch_size", "1")
    pause(Town(gpu_dir), "ops")
    doc = status(Town(gpu_dir))
    assert doc["binding"] == {"code": rules.PAUSED, "detail": "the scheduler is paused (by ops)"}
    assert run_cycle(Town(gpu_dir)).reason == rules.PAUSED


def test_nothing_binds_when_the_cycle_launches_everything_ready(gpu_dir):
    doc = status(Town(gpu_dir))
    assert doc["binding"] is None and doc["plan_reason"] == "ready"
    assert run_cycle(Town(gpu_dir)).dispatched == 3
    assert status(Town(gpu_dir))["binding"] is None


def test_the_status_text_names_the_binding_limit(gpu_dir, cli):
    configure(gpu_dir, "scheduler.batch_size", "1")
    text = cli.run("scheduler", "status").stdout
    assert "Binding:    batch: ranked below this cycle's batch of 1" in text


def test_binding_is_the_plans_reason_with_the_best_ranked_items_detail():
    admission = Admission((), {"b": (Reason("rig-cap", "second"),), "a": (Reason("rig-cap", "first"),)},
                          "rig-cap")
    assert binding(admission, ["a", "b"], paused=False) == Reason("rig-cap", "first")
    assert binding(Admission((), {}, "none"), [], paused=False) is None
    assert binding(Admission((), {}, "ready"), [], paused=True).code == "paused"
