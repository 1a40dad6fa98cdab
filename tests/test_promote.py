"""The operator's word on order: promote ahead of a higher score, and run this one now.

Real towns, the CLI and the library on the same files; polecats on the in-memory executor.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.scheduler import configure, events, item, write_items
from sluice.core import admission as rules
from sluice.errors import InvalidOperation, NotAdmitted
from sluice.executors import get_executor
from sluice.scheduler.launch.dispatch import run_cycle
from sluice.scheduler.launch.sling import SlingOptions, sling
from sluice.scheduler.queue.control import pause
from sluice.scheduler.queue.promote import promote
from sluice.scheduler.queue.views import explain, list_queue
from sluice.store.files.town import Town


@pytest.fixture
def ordered_dir(town_dir, rig, capacity, memory) -> Path:
    """al-0, al-2 and al-4 queued on rig alpha, one polecat at a time, on the in-memory executor."""
    capacity(1, batch_size=1)
    # al-0 is the most urgent (P0); al-4 the least (P4): score order is al-0, al-2, al-4.
    write_items(town_dir, "alpha", [item("al-0", priority=0), item("al-2", priority=2),
                                    item("al-4", priority=4)])
    assert sling(Town(town_dir), ["al-0", "al-2", "al-4", "alpha"], SlingOptions()).ok
    return town_dir


def order(town) -> list[str]:
    return [row["id"] for row in list_queue(Town(town))]


def running(town) -> list[str]:
    return sorted(p.item_id for p in get_executor(Town(town)).active())


def test_a_promoted_item_goes_ahead_of_a_higher_score(ordered_dir):
    assert order(ordered_dir) == ["al-0", "al-2", "al-4"]
    result = promote(Town(ordered_dir), "al-4")
    assert result["changed"] and result["promoted_at"]
    assert order(ordered_dir) == ["al-4", "al-0", "al-2"]
    assert explain(Town(ordered_dir), "al-4")["would_dispatch"] is True
    assert run_cycle(Town(ordered_dir)).dispatched == 1
    assert running(ordered_dir) == ["al-4"]
    assert [e["payload"]["item_id"] for e in events(ordered_dir, "Promoted")] == ["al-4"]


def test_several_promoted_items_go_in_the_order_they_were_promoted(ordered_dir):
    promote(Town(ordered_dir), "al-4")
    promote(Town(ordered_dir), "al-2")
    assert order(ordered_dir) == ["al-4", "al-2", "al-0"]
    promote(Town(ordered_dir), "al-4")  # promoting again keeps its first place in line
    assert order(ordered_dir) == ["al-4", "al-2", "al-0"]


def test_undo_puts_an_item_back_in_score_order(ordered_dir, cli):
    promote(Town(ordered_dir), "al-4")
    data = cli.json("scheduler", "promote", "al-4", "--undo", "--json")
    assert data == {**data, "promoted": False, "changed": True, "promoted_at": None}
    assert order(ordered_dir) == ["al-0", "al-2", "al-4"]
    assert cli.json("scheduler", "promote", "al-4", "--undo", "--json")["changed"] is False


def test_a_promotion_is_kept_on_the_context_and_shown_by_list_and_explain(ordered_dir, cli):
    cli.run("scheduler", "promote", "al-2")
    # A fresh process (a restart) reads it from the context on disk.
    rows = cli.json("scheduler", "list", "--json", isolated=True)
    assert rows[0]["id"] == "al-2" and rows[0]["promoted_at"]
    assert "[promoted]" in cli.run("scheduler", "list").stdout
    assert cli.json("scheduler", "explain", "al-2", "--json")["promoted_at"] == rows[0]["promoted_at"]


def test_a_promoted_item_still_obeys_every_cap(ordered_dir):
    run_cycle(Town(ordered_dir))  # al-0 takes the only slot
    promote(Town(ordered_dir), "al-4")
    assert run_cycle(Town(ordered_dir)).dispatched == 0
    assert rules.CAPACITY in [r["code"] for r in explain(Town(ordered_dir), "al-4")["reasons"]]


def test_promoting_an_item_that_is_not_queued_is_refused(ordered_dir, cli):
    write_items(ordered_dir, "alpha", [item("al-0", priority=0), item("al-2", priority=2),
                                       item("al-4", priority=4), item("al-9")])
    with pytest.raises(InvalidOperation, match="no open sling context"):
        promote(Town(ordered_dir), "al-9")
    done = cli.run("scheduler", "promote", "al-nope", check=False)
    assert done.returncode == 1 and "al-nope" in done.stderr


def test_run_item_launches_only_that_item_ahead_of_the_queue(ordered_dir, cli):
    report = cli.json("scheduler", "run", "--item", "al-4", "--json")
    assert report["dispatched"] == 1 and [p["item_id"] for p in report["planned"]] == ["al-4"]
    assert running(ordered_dir) == ["al-4"]
    assert order(ordered_dir) == ["al-0", "al-2"]


def test_run_item_refused_by_a_cap_exits_1_with_explains_reasons(ordered_dir, cli):
    run_cycle(Town(ordered_dir))  # al-0 takes the only slot
    expected = [r for r in explain(Town(ordered_dir), "al-4")["reasons"] if r["code"] != rules.BATCH]
    done = cli.run("scheduler", "run", "--item", "al-4", check=False)
    assert done.returncode == 1
    assert "capacity: no free polecat slot" in done.stderr
    assert [r["code"] for r in expected] == [rules.CAPACITY]
    assert running(ordered_dir) == ["al-0"]


def test_run_item_is_held_by_a_gate_and_by_a_pause(ordered_dir):
    configure(ordered_dir, "scheduler.hold_file", "HOLD")
    (ordered_dir / "HOLD").write_text("freeze\n")
    with pytest.raises(NotAdmitted) as caught:
        run_cycle(Town(ordered_dir), item="al-2")
    assert [r.code for r in caught.value.reasons] == [rules.HOLD_FILE]
    (ordered_dir / "HOLD").unlink()
    pause(Town(ordered_dir), "ops")
    with pytest.raises(NotAdmitted) as caught:
        run_cycle(Town(ordered_dir), item="al-2")
    assert [r.code for r in caught.value.reasons] == [rules.PAUSED]
    assert running(ordered_dir) == []


def test_run_item_of_an_item_not_queued_says_so(ordered_dir):
    with pytest.raises(NotAdmitted) as caught:
        run_cycle(Town(ordered_dir), item="al-7")
    assert [r.code for r in caught.value.reasons] == [rules.MISSING_ITEM]
    assert running(ordered_dir) == []
