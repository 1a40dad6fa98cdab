"""The forecast's kept reading, carried past slings and clears instead of surveying the queue again.

Each test makes a reading (a forecast surveys and keeps it), changes the
queue, and compares the next forecast with a fresh survey's at the same
moment, counting the surveys: a change the reading can follow costs none,
any other costs one.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.forecast import forecast_at, fresh_forecast_at
from helpers.scheduler import configure, counted_surveys, ephemeral_path, item, memory_alpha, write_items
from sluice.scheduler import queue, queuekeep, readingtail
from sluice.scheduler.control import clear
from sluice.scheduler.runs import stamp
from sluice.scheduler.session import Session
from sluice.scheduler.sling import SlingOptions, sling
from sluice.store.town import Town


@pytest.fixture
def surveys(monkeypatch) -> list[int]:
    return counted_surveys(monkeypatch, queue)


def slung(town_dir: Path, *ids: str) -> None:
    result = sling(Town(town_dir), [*ids, "alpha"], SlingOptions())
    assert result.ok, result.errors


def order(doc: dict) -> list[tuple[str, str | None]]:
    return [(row["item_id"], row.get("why")) for row in doc["items"]]


@pytest.fixture
def read_queue(cli, rig, town_dir, clock) -> Path:
    """Rig alpha with items of mixed priority (al-6 waits on al-7, al-8 is closed), five of them queued
    and the queue read."""
    configure(town_dir, "scheduler.max_polecats", "2")
    records = [item(f"al-{n}", priority=n % 4, labels=["area:api"] if n % 2 else []) for n in range(6)]
    records += [item("al-6", deps=[("blocks", "al-7")]), item("al-7", priority=3),
                item("al-8", status="closed")]
    write_items(town_dir, "alpha", records)
    slung(town_dir, "al-0", "al-1", "al-2", "al-3", "al-4")
    forecast_at(town_dir, clock.now)
    return town_dir


def test_a_sling_is_carried_into_the_reading_where_a_survey_would_rank_it(read_queue, clock, surveys):
    slung(read_queue, "al-5", "al-6")  # al-5: priority 1, ranked inside the queue; al-6: blocked
    carried = forecast_at(read_queue, clock.now)
    assert surveys == []
    assert carried == fresh_forecast_at(read_queue, clock.now) and len(surveys) == 1
    assert ("al-6", "blocked") in order(carried) and len(carried["items"]) == 7
    ids = [row[0] for row in order(carried)]
    assert ids.index("al-1") < ids.index("al-5") < ids.index("al-2")  # priority 1 after the older one


def test_a_clear_takes_its_row_out_and_a_sling_after_it_puts_the_item_back_as_a_new_one(read_queue, clock,
                                                                                      surveys):
    clear(Town(read_queue), item_id="al-0")
    without = forecast_at(read_queue, clock.now)
    assert surveys == [] and "al-0" not in [r[0] for r in order(without)]
    assert without == fresh_forecast_at(read_queue, clock.now)
    forecast_at(read_queue, clock.now)  # the survey's reading again
    clear(Town(read_queue), item_id="al-1")
    slung(read_queue, "al-1")  # the same item, enqueued later: behind the priority-1 work it led
    back = forecast_at(read_queue, clock.now)
    assert len(surveys) == 1 and back == fresh_forecast_at(read_queue, clock.now)


def test_a_carried_reading_is_kept_for_the_next_reader(read_queue, clock, surveys):
    slung(read_queue, "al-5")
    first = forecast_at(read_queue, clock.now)
    slung(read_queue, "al-6")
    second = forecast_at(read_queue, clock.now)  # carried from the carried reading
    assert surveys == [] and len(second["items"]) == len(first["items"]) + 1
    assert second == fresh_forecast_at(read_queue, clock.now)


def _append(town_dir: Path, record: dict) -> None:
    with ephemeral_path(town_dir, "alpha").open("a") as fh:
        fh.write(json.dumps(record) + "\n")


def _latest(town_dir: Path, item_id: str) -> dict:
    lines = ephemeral_path(town_dir, "alpha").read_text().splitlines()
    return next(r for r in map(json.loads, reversed(lines)) if f'"work_bead_id":"{item_id}"' in
                r.get("description", "").replace(" ", ""))


def test_an_update_of_a_queued_context_is_surveyed(read_queue, clock, surveys):
    context = _latest(read_queue, "al-2")
    fields = json.loads(context["description"])
    _append(read_queue, {**context, "description": json.dumps({**fields, "dispatch_failures": 1})})
    assert forecast_at(read_queue, clock.now) == fresh_forecast_at(read_queue, clock.now)
    assert len(surveys) == 2  # the carry refused, then the fresh one


def test_a_second_open_context_of_a_queued_item_is_surveyed(read_queue, clock, surveys):
    context = _latest(read_queue, "al-2")
    _append(read_queue, {**context, "id": "al-wisp-zzzz"})
    assert forecast_at(read_queue, clock.now) == fresh_forecast_at(read_queue, clock.now)
    assert len(surveys) == 2


def test_another_kind_of_record_in_the_log_is_surveyed(read_queue, clock, surveys):
    _append(read_queue, {"id": "al-note", "title": "a note", "status": "open", "issue_type": "task",
                         "ephemeral": True, "dependencies": [{"issue_id": "al-note", "depends_on_id": "al-0",
                                                              "type": "blocks"}]})
    assert forecast_at(read_queue, clock.now) == fresh_forecast_at(read_queue, clock.now)
    assert len(surveys) == 2


def test_fairness_makes_a_reading_that_is_not_carried(read_queue, clock, surveys):
    Town(read_queue).policy_path.write_text(json.dumps({"weights": {"fairness": 1.0}}))
    forecast_at(read_queue, clock.now)
    assert "tail" not in json.loads(queuekeep.path(Town(read_queue), queuekeep.REPLAY_FILE).read_text())
    slung(read_queue, "al-5")
    assert forecast_at(read_queue, clock.now) == fresh_forecast_at(read_queue, clock.now)
    assert len(surveys) == 3


def test_a_change_beside_the_logs_is_surveyed(read_queue, clock, surveys):
    slung(read_queue, "al-5")
    configure(read_queue, "scheduler.batch_size", "3")
    assert forecast_at(read_queue, clock.now) == fresh_forecast_at(read_queue, clock.now)
    assert len(surveys) == 2


def test_more_lines_than_are_worth_carrying_are_surveyed(read_queue, clock, surveys, monkeypatch):
    monkeypatch.setattr(readingtail, "MOST_LINES", 1)
    slung(read_queue, "al-5", "al-6")
    assert forecast_at(read_queue, clock.now) == fresh_forecast_at(read_queue, clock.now)
    assert len(surveys) == 2


def test_a_reading_past_its_horizon_is_surveyed(read_queue, clock, surveys):
    slung(read_queue, "al-5")
    later = clock.now + queuekeep.READING_KEEP_AT_MOST + 1
    assert forecast_at(read_queue, later) == fresh_forecast_at(read_queue, later)
    assert len(surveys) == 2


def test_a_carried_reading_ends_when_a_deferred_item_comes_due(cli, rig, town_dir, clock, surveys):
    """The reading stands until the first moment the clock alone changes it: here a queued item's
    deferral ending, long before the reading's hour is up."""
    configure(town_dir, "scheduler.max_polecats", "2")
    due = clock.now + 600
    write_items(town_dir, "alpha", [item("al-0", defer_until=stamp(due)), item("al-1"), item("al-2")])
    slung(town_dir, "al-0", "al-1")
    assert ("al-0", "blocked") in order(forecast_at(town_dir, clock.now))
    slung(town_dir, "al-2")
    later = due + 60
    assert ("al-0", None) in order(forecast_at(town_dir, later))  # ready now: surveyed, not carried
    assert forecast_at(town_dir, later) == fresh_forecast_at(town_dir, later)
    assert len(surveys) == 3


def test_a_reading_carried_past_a_few_lines_is_not_written_again_until_enough_come(read_queue, clock, surveys,
                                                                                    monkeypatch):
    """Writing 100,000 rows again costs more than carrying a few lines again: the whole reading is kept
    again only once it was carried past :data:`REKEEP_LINES` lines; its first rows each time."""
    monkeypatch.setattr(readingtail, "REKEEP_LINES", 3)
    town = Town(read_queue)
    whole = queuekeep.path(town, queuekeep.REPLAY_FILE)
    head = queuekeep.path(town, queuekeep.REPLAY_HEAD_FILE)
    kept, kept_head = whole.read_bytes(), head.read_bytes()
    slung(read_queue, "al-5")  # one line
    once = forecast_at(read_queue, clock.now)
    assert whole.read_bytes() == kept and head.read_bytes() != kept_head
    assert forecast_at(read_queue, clock.now) == once  # carried again from the same marks
    slung(read_queue, "al-6")
    slung(read_queue, "al-7")  # three lines since the kept marks
    carried = forecast_at(read_queue, clock.now)
    assert surveys == [] and whole.read_bytes() != kept
    assert forecast_at(read_queue, clock.now) == carried and surveys == []  # kept for the inputs of now
    assert carried == fresh_forecast_at(read_queue, clock.now) and once != carried


def test_a_reading_is_carried_for_longer_than_a_kept_head_stands(read_queue, clock, surveys):
    """A busy queue's views carry the reading past each change for up to an hour after its survey, where
    they used to survey it once a minute; each replay of it is made at its own moment."""
    for minutes, item_id in ((5, "al-5"), (30, "al-6")):
        slung(read_queue, item_id)
        later = clock.now + minutes * 60
        carried = forecast_at(read_queue, later)
        assert surveys == [] and carried["at"] == stamp(later)
        assert carried == fresh_forecast_at(read_queue, later)
        surveys.clear()


def test_a_running_items_new_context_is_carried_as_blocked(cli, rig, town_dir, clock, memory, surveys):
    from sluice.scheduler.dispatch import run_cycle

    configure(town_dir, "scheduler.max_polecats", "1")
    write_items(town_dir, "alpha", [item(f"al-{n}", priority=n) for n in range(3)])
    slung(town_dir, "al-0", "al-1")
    assert run_cycle(Town(town_dir)).dispatched == 1  # al-0 runs, its context closed
    forecast_at(town_dir, clock.now)
    context = _latest(town_dir, "al-1")  # a context for al-0 while it runs (sling itself would say no)
    fields = json.loads(context["description"])
    _append(town_dir, {**context, "id": "al-wisp-zzzz",
                       "description": json.dumps({**fields, "work_bead_id": "al-0"})})
    carried = forecast_at(town_dir, clock.now)
    assert len(surveys) == 1 and ("al-0", "blocked") in order(carried)
    assert carried == fresh_forecast_at(town_dir, clock.now)


def test_a_first_sling_to_a_rig_with_no_log_yet_is_carried(cli, rig, town_dir, clock, surveys):
    from helpers.scheduler import add_rig

    add_rig(cli, town_dir.parent / "beta-repos", "beta", "be")
    configure(town_dir, "scheduler.max_polecats", "2")
    write_items(town_dir, "alpha", [item("al-0")])
    write_items(town_dir, "beta", [item("be-0", priority=0)])
    slung(town_dir, "al-0")
    forecast_at(town_dir, clock.now)
    assert sling(Town(town_dir), ["be-0", "beta"], SlingOptions()).ok
    carried = forecast_at(town_dir, clock.now)
    assert len(surveys) == 1 and [r[0] for r in order(carried)] == ["be-0", "al-0"]
    assert carried == fresh_forecast_at(town_dir, clock.now)


def _another(town_dir: Path, item_id: str, context_id: str = "al-wisp-zzzz", **changes) -> None:
    """Append an open context for ``item_id`` as a sling writes it, enqueued after every other, with
    ``changes`` to its fields."""
    context = json.loads(ephemeral_path(town_dir, "alpha").read_text().splitlines()[0])  # the first context
    fields = {**json.loads(context["description"]), "work_bead_id": item_id,
              "enqueued_at": "2030-01-01T00:00:00.000000Z", **changes}
    _append(town_dir, {**context, "id": context_id, "description": json.dumps(fields)})


@pytest.mark.parametrize("item_id, changes", [
    ("al-5", {"dispatch_failures": 3}),  # circuit-broken: stale
    ("al-5", {"launch_started_at": "2026-01-01T00:00:00Z"}),  # mid-launch
    ("al-5", {"target_rig": "nowhere"}),  # an unknown rig: stale
    ("al-8", {}),  # a closed item: stale
    ("al-99", {}),  # an item no rig has: held
    ("al-5", {"force": True}),  # forced: not as a sling writes a plain context
])
def test_a_new_context_a_survey_would_not_queue_is_surveyed(read_queue, clock, surveys, item_id, changes):
    _another(read_queue, item_id, **changes)
    assert forecast_at(read_queue, clock.now) == fresh_forecast_at(read_queue, clock.now)
    assert len(surveys) == 2


def test_closing_a_queued_context_whose_item_has_a_younger_duplicate_is_surveyed(read_queue, clock, surveys):
    older = _latest(read_queue, "al-2")
    _another(read_queue, "al-2")  # a duplicate: the survey keeps the older one
    forecast_at(read_queue, clock.now)
    _append(read_queue, {**older, "status": "closed", "close_reason": "cleared"})  # the duplicate takes over
    assert forecast_at(read_queue, clock.now) == fresh_forecast_at(read_queue, clock.now)
    assert len(surveys) == 3


def test_a_record_an_item_waits_on_is_surveyed(cli, rig, town_dir, clock, surveys):
    """A durable item waiting on an id no rig holds is ready; a record of that id appearing blocks it."""
    configure(town_dir, "scheduler.max_polecats", "2")
    write_items(town_dir, "alpha", [item("al-0"), item("al-1", deps=[("blocks", "al-note")]),
                                    item("al-2", deps=[("blocks", "al-wisp-zzzz")])])
    slung(town_dir, "al-0", "al-1", "al-2")
    forecast_at(town_dir, clock.now)
    _append(town_dir, {"id": "al-note", "title": "a note", "status": "open", "issue_type": "task",
                       "ephemeral": True})
    blocked = forecast_at(town_dir, clock.now)
    assert ("al-1", "blocked") in order(blocked) and blocked == fresh_forecast_at(town_dir, clock.now)
    assert len(surveys) == 3


def test_a_context_whose_id_an_item_waits_on_is_surveyed(cli, rig, town_dir, clock, surveys):
    configure(town_dir, "scheduler.max_polecats", "2")
    write_items(town_dir, "alpha", [item("al-0"), item("al-1"),
                                    item("al-2", deps=[("blocks", "al-wisp-zzzz")])])
    slung(town_dir, "al-0", "al-2")
    forecast_at(town_dir, clock.now)
    _another(town_dir, "al-1", "al-wisp-zzzz")  # a context whose very id al-2 waits on
    changed = forecast_at(town_dir, clock.now)
    assert ("al-2", "blocked") in order(changed) and changed == fresh_forecast_at(town_dir, clock.now)
    assert len(surveys) == 3


def test_promoted_work_makes_a_reading_that_is_not_carried(read_queue, clock, surveys):
    from sluice.scheduler.promote import promote

    promote(Town(read_queue), "al-4")
    forecast_at(read_queue, clock.now)
    slung(read_queue, "al-5")
    carried = forecast_at(read_queue, clock.now)
    assert order(carried)[0] == ("al-4", None) and carried == fresh_forecast_at(read_queue, clock.now)
    assert len(surveys) == 3


# -- the property: whatever lines come, a carried reading forecasts what a survey forecasts ---------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("sling"), st.lists(st.integers(0, 7), min_size=1, max_size=3)),
        st.tuples(st.just("sling"), st.lists(st.integers(0, 7), min_size=1, max_size=3)),
        st.tuples(st.just("clear"), st.integers(0, 7)),
        st.tuples(st.just("clear"), st.integers(0, 7)),
        st.tuples(st.just("cycle"), st.just(0)),
        st.tuples(st.just("finish"), st.integers(0, 7)),
        st.tuples(st.just("advance"), st.integers(1, 90)),
        st.tuples(st.just("close"), st.integers(0, 7)),
        st.tuples(st.just("dup"), st.integers(0, 7)),
        st.tuples(st.just("fail"), st.integers(0, 7)),
        st.tuples(st.just("promote"), st.integers(0, 7)),
        st.tuples(st.just("compact"), st.integers(0, 1)),
        st.tuples(st.just("throttle"), st.integers(1, 30)),
        st.tuples(st.just("defer"), st.tuples(st.integers(0, 7), st.integers(1, 900))),
        st.tuples(st.just("advance"), st.integers(60, 1500)),  # past a kept head's minute, not the reading's
    ),
    min_size=1, max_size=10,
)


@pytest.mark.parametrize("rekeep", [0, readingtail.REKEEP_LINES], ids=["kept-each-time", "kept-now-and-then"])
def test_a_carried_reading_always_forecasts_what_a_survey_forecasts(clock, monkeypatch, rekeep):
    """Slings, clears and cycles (carried) among ends, failed launches, closed items, duplicates, time,
    promotions, compactions and throttles; the carried reading kept whole after each, or carried again
    from the same marks until enough lines came."""
    monkeypatch.setattr(readingtail, "REKEEP_LINES", rekeep)
    from sluice.errors import ExecutorError, SluiceError
    from sluice.executors.memory import MemoryExecutor
    from sluice.scheduler.dispatch import run_cycle
    from sluice.scheduler.promote import promote
    from sluice.store import admission_state
    from sluice.store.compaction import compact
    from sluice.store.rigstore import Stores

    tally = {"carried": 0, "checked": 0}
    real = readingtail._carried

    def counted(*args):
        found = real(*args)
        tally["carried"] += found is not None
        return found

    monkeypatch.setattr(readingtail, "_carried", counted)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(ops=OPS)
    def replay(ops):
        base = Path(tempfile.mkdtemp(prefix="tail-"))
        try:
            records = {f"al-{n}": item(f"al-{n}", priority=n % 3, labels=["area:db"] if n % 3 == 1 else [],
                                       deps=[("blocks", "al-7")] if n == 6 else ()) for n in range(8)}
            town_dir, memory = memory_alpha(base, clock, list(records.values()))
            slung(town_dir, "al-0", "al-1", "al-2")
            forecast_at(town_dir, clock.now)
            for kind, arg in ops:
                if kind == "sling":
                    sling(Town(town_dir), [*(f"al-{n}" for n in arg), "alpha"], SlingOptions())
                elif kind == "clear":
                    clear(Town(town_dir), item_id=f"al-{arg}")
                elif kind == "cycle":
                    run_cycle(Town(town_dir))
                elif kind == "finish":
                    with contextlib.suppress(ExecutorError):  # not running: nothing to end
                        memory.finish(f"al-{arg}", arg % 2)
                elif kind == "advance":
                    clock.advance(arg)
                elif kind == "fail":  # its next launch fails: it backs off
                    memory.fail_next(f"al-{arg}")
                elif kind == "promote":  # promoted work leads its list, ready or blocked
                    with contextlib.suppress(SluiceError):  # no open context: nothing to promote
                        promote(Town(town_dir), f"al-{arg}")
                elif kind == "compact":  # the log replaced (closed contexts archived, or not)
                    retention = 0.0 if arg else None
                    compact(Stores(Town(town_dir)).rig("alpha"), retention=retention, now=clock.now)
                elif kind == "throttle":
                    admission_state.set_throttle(Town(town_dir), clock.now + arg, None, "a test", "test",
                                                 clock.now)
                elif kind == "close":
                    records[f"al-{arg}"]["status"] = "closed"
                    write_items(town_dir, "alpha", list(records.values()))
                elif kind == "defer":  # ready again when the clock passes it: the reading's horizon
                    records[f"al-{arg[0]}"]["defer_until"] = stamp(clock.now + arg[1])
                    write_items(town_dir, "alpha", list(records.values()))
                elif kind == "dup" and any(c["status"] == "open" for c in _open_of(town_dir, f"al-{arg}")):
                    context = _open_of(town_dir, f"al-{arg}")[0]
                    _append(town_dir, {**context, "id": f"al-wisp-dup{arg}{len(ops)}"})
                now = clock.now
                kept = forecast_at(town_dir, now)
                assert forecast_at(town_dir, now) == kept == fresh_forecast_at(town_dir, now), (kind, arg)
                tally["checked"] += 1
            MemoryExecutor.forget_town(Town(town_dir))
        finally:
            shutil.rmtree(base, ignore_errors=True)

    replay()
    assert tally["carried"] > 0, tally  # the property was tested where it matters


def _open_of(town_dir: Path, item_id: str) -> list[dict]:
    from helpers.scheduler import open_contexts

    return open_contexts(town_dir, "alpha", item_id)


def test_a_cycles_launches_are_carried_out_of_the_reading(cli, rig, town_dir, clock, memory, surveys):
    from sluice.scheduler.dispatch import run_cycle

    configure(town_dir, "scheduler.max_polecats", "2")
    configure(town_dir, "scheduler.batch_size", "2")
    write_items(town_dir, "alpha", [item(f"al-{n}", priority=n % 3) for n in range(5)])
    slung(town_dir, *(f"al-{n}" for n in range(5)))
    forecast_at(town_dir, clock.now)
    assert run_cycle(Town(town_dir)).dispatched == 2  # two polecats, two contexts closed
    carried = forecast_at(town_dir, clock.now)
    assert len(surveys) == 1 and len(carried["items"]) == 3  # the first forecast's survey only
    assert carried == fresh_forecast_at(town_dir, clock.now)
    memory.finish("al-0", 0)  # an end: the polecat's item is no longer queued, nothing moves
    assert forecast_at(town_dir, clock.now) == fresh_forecast_at(town_dir, clock.now)
    assert len(surveys) == 3  # the two fresh ones


def test_a_polecat_ending_on_an_item_still_queued_is_surveyed(cli, rig, town_dir, clock, memory, surveys):
    from sluice.scheduler.dispatch import run_cycle

    configure(town_dir, "scheduler.max_polecats", "1")
    write_items(town_dir, "alpha", [item(f"al-{n}", priority=n) for n in range(3)])
    slung(town_dir, "al-0", "al-1", "al-2")
    run_cycle(Town(town_dir))
    _another(town_dir, "al-0")  # queued again while it runs: blocked
    assert ("al-0", "blocked") in order(forecast_at(town_dir, clock.now))
    memory.finish("al-0", 0)  # now it may go
    ended = forecast_at(town_dir, clock.now)
    assert ("al-0", None) in order(ended) and ended == fresh_forecast_at(town_dir, clock.now)
    assert len(surveys) == 3


def test_a_polecat_ending_on_a_queued_item_beside_a_sling_is_surveyed(cli, rig, town_dir, clock, memory,
                                                                       surveys):
    from sluice.scheduler.dispatch import run_cycle

    configure(town_dir, "scheduler.max_polecats", "1")
    write_items(town_dir, "alpha", [item(f"al-{n}", priority=n) for n in range(4)])
    slung(town_dir, "al-0", "al-1")
    run_cycle(Town(town_dir))
    _another(town_dir, "al-0")  # queued again while it runs: blocked
    forecast_at(town_dir, clock.now)
    memory.finish("al-0", 0)
    slung(town_dir, "al-2")  # a line to carry, beside the end that unblocks al-0
    ended = forecast_at(town_dir, clock.now)
    assert ("al-0", None) in order(ended) and ended == fresh_forecast_at(town_dir, clock.now)
    assert len(surveys) == 3


def test_a_reading_with_work_backing_off_is_carried(cli, rig, town_dir, clock, memory, surveys):
    """Work waiting out a failed launch's backoff stands apart from the ranked rows; a sling is carried
    past it all the same."""
    from sluice.scheduler.dispatch import run_cycle

    configure(town_dir, "scheduler.max_polecats", "2")
    write_items(town_dir, "alpha", [item(f"al-{n}", priority=n % 3) for n in range(4)])
    slung(town_dir, "al-0", "al-1")
    memory.fail_next("al-0")
    run_cycle(Town(town_dir))
    first = forecast_at(town_dir, clock.now)
    assert first["items"][-1]["item_id"] == "al-0"  # backing off, after the ready work
    slung(town_dir, "al-2", "al-3")
    carried = forecast_at(town_dir, clock.now)
    assert len(surveys) == 1 and carried == fresh_forecast_at(town_dir, clock.now)


# -- review: holes found (each a forecast carried where a survey answers otherwise) -----------------


def test_review_a_sling_carried_past_promoted_blocked_work_stays_behind_it(cli, rig, town_dir, clock,
                                                                         surveys):
    """A promoted context leads its list whatever its score, the blocked list too: a reading whose blocked
    rows start with promoted work may not place a new blocked row by score alone."""
    from sluice.scheduler.promote import promote

    configure(town_dir, "scheduler.max_polecats", "2")
    write_items(town_dir, "alpha", [item("al-0"), item("al-1", priority=3, deps=[("blocks", "al-9")]),
                                    item("al-2", priority=0, deps=[("blocks", "al-9")]), item("al-9")])
    slung(town_dir, "al-0", "al-1")
    promote(Town(town_dir), "al-1")  # blocked, promoted: first of the blocked rows
    forecast_at(town_dir, clock.now)
    slung(town_dir, "al-2")  # blocked, priority 0: by score ahead of al-1, but al-1 is promoted
    carried = forecast_at(town_dir, clock.now)
    assert carried == fresh_forecast_at(town_dir, clock.now)


def test_review_a_compacted_log_at_the_marks_reused_inode_is_not_carried_past(read_queue, clock):
    """Compaction forgets the digests kept at marks of the old log, since a later file may take its inode
    (on ext4 a few compactions later it does); the reading's marks outlive it.  A mark of the same inode
    continues on its 64-byte guard alone, and the end of a context's line is its two stamps, the same for
    lines written in the same microsecond.  The reuse is made certain here: the marked file is kept by a
    second link, and the compacted bytes are put in it."""
    import os

    from sluice.store.compaction import compact
    from sluice.store.rigstore import Stores

    log = ephemeral_path(read_queue, "alpha")
    compact(Stores(Town(read_queue)).rig("alpha"))  # the log as compaction writes it
    forecast_at(read_queue, clock.now)  # the reading's marks: this inode, at the end of al-4's line
    marked = log.with_name("marked.jsonl")
    os.link(log, marked)
    size = log.stat().st_size
    clear(Town(read_queue), item_id="al-0")
    last = json.loads(log.read_text().splitlines()[4])  # al-4's context, which ends the marked prefix
    assert '"al-4"' in last["description"]
    # al-5 slung in the microsecond al-4 was: a line as long as al-0's, ending in the same bytes
    _append(read_queue, {**last, "id": last["id"][:-1] + ("x" if last["id"][-1] != "x" else "y"),
                         "description": last["description"].replace('"al-4"', '"al-5"')})
    compact(Stores(Town(read_queue)).rig("alpha"), retention=0.0, now=clock.now + 1)  # al-0 archived
    assert log.stat().st_size == size  # al-1…al-5 where al-0…al-4 stood
    with marked.open("r+b") as fh:  # the compacted file, at the marked inode (as a reused one would be)
        fh.write(log.read_bytes())
        fh.truncate()
    os.replace(marked, log)
    carried = forecast_at(read_queue, clock.now)
    assert carried == fresh_forecast_at(read_queue, clock.now)


def test_a_log_a_compaction_wrote_at_the_marks_inode_and_guard_is_told_by_its_mark_file(read_queue, clock,
                                                                                       surveys):
    """The marks are checked on their inode and the 64 bytes before them; a compaction's new log may
    take a freed inode and end in the same bytes.  Each compaction first rewrites the rig's
    ``ephemeral.compacted``, whose signature is in the key the reading is carried under: here the
    compacted log is put at the marked inode, as long as the marked one and ending in its very line."""
    import os

    from sluice.store.compaction import compact
    from sluice.store.rigstore import Stores

    log = ephemeral_path(read_queue, "alpha")
    compact(Stores(Town(read_queue)).rig("alpha"))  # one line per context: al-0 … al-4
    fresh_forecast_at(read_queue, clock.now)  # a reading whose marks name this inode, at al-4's line's end
    assert json.loads(queuekeep.path(Town(read_queue), queuekeep.REPLAY_FILE).read_bytes())["tail"]["marks"][
        "alpha"]["inode"] == log.stat().st_ino
    marked = log.with_name("marked.jsonl")
    os.link(log, marked)  # the marked inode, kept for the compacted bytes to go in
    lines = log.read_bytes().splitlines(keepends=True)
    first, last = json.loads(lines[0]), lines[-1]
    clear(Town(read_queue), item_id="al-0")
    # al-5 slung as long as al-0's line was, then al-4's line again as it was: the latest lines now
    twin = {**first, "id": first["id"][:-1] + ("x" if first["id"][-1] != "x" else "y"),
            "description": first["description"].replace('"al-0"', '"al-5"')}
    with log.open("ab") as fh:
        fh.write((json.dumps(twin, separators=(",", ":")) + "\n").encode())
        fh.write(last)
    compact(Stores(Town(read_queue)).rig("alpha"), retention=0.0, now=clock.now + 1)  # al-0 archived
    compacted = log.read_bytes()
    assert len(compacted) == sum(map(len, lines)) and compacted.endswith(last)  # where the marks stood
    with marked.open("r+b") as fh:
        fh.write(compacted)
        fh.truncate()
    os.replace(marked, log)
    surveys.clear()
    carried = forecast_at(read_queue, clock.now)
    assert len(surveys) == 1 and [row["item_id"] for row in carried["items"]][:1] != ["al-0"]
    assert carried == fresh_forecast_at(read_queue, clock.now)


def test_review_a_replay_kept_from_a_carried_reading_ends_when_a_new_throttle_does(read_queue, clock,
                                                                                   surveys):
    """A carried reading keeps the horizon its survey worked out, with the throttles and charges of then;
    the replay of it is kept (what snapshot shows) under the inputs now, a throttle set since among them,
    until that old horizon.  A survey of the same inputs keeps it only until the throttle ends
    (queuekeep.horizon): past that end, snapshot would replay, not show the throttled plan."""
    from sluice.scheduler.forecast import kept_head
    from sluice.scheduler.session import Session
    from sluice.store import admission_state

    now = clock.now
    admission_state.set_throttle(Town(read_queue), now + 10, None, "a test", "review", now)
    throttled = forecast_at(read_queue, now)  # carried (no line since): its replay kept until the old horizon
    assert surveys == []
    rows = [{"id": row["item_id"]} for row in throttled["items"]]
    later = now + 20  # the throttle over
    carried = kept_head(Session.of(Town(read_queue), None, later), [dict(r) for r in rows])
    assert fresh_forecast_at(read_queue, now) == throttled and len(surveys) == 1  # the same plan, surveyed
    surveyed = kept_head(Session.of(Town(read_queue), None, later), [dict(r) for r in rows])
    assert surveyed is None  # kept until the throttle's end only
    assert carried == surveyed


def _cut_kind(reading):
    reading["kinds"][0] = reading["kinds"][0][:3]


def _run_past_kinds(reading):
    reading["kind_stretches"][0][0] = len(reading["kinds"])


def _one_id_more(reading):
    ids = reading["ids"]
    ids["text"] += "al-99".ljust(ids["width"], "\n")[:ids["width"]]
    ids["size"] += 1


def _run_of_none(reading):
    reading["kind_stretches"][0][1] = 0


def _score_as_text(reading):
    reading["scores"][0][0] = "high"


def _context_not_text(reading):
    reading["contexts"] = [7] * reading["contexts"]["size"]


def _slots_cut_short(reading):
    reading["orders"]["text"] = reading["orders"]["text"][:-1]


@pytest.mark.parametrize("spoil", [_cut_kind, _run_past_kinds, _one_id_more, _run_of_none, _score_as_text,
                                   _context_not_text, _slots_cut_short])
def test_a_kept_reading_not_as_written_is_surveyed_not_carried(read_queue, clock, surveys, spoil):
    path = queuekeep.path(Town(read_queue), queuekeep.REPLAY_FILE)
    kept = json.loads(path.read_bytes())
    spoil(kept["reading"])
    path.write_text(json.dumps(kept))
    slung(read_queue, "al-5")
    assert forecast_at(read_queue, clock.now) == fresh_forecast_at(read_queue, clock.now)
    assert len(surveys) == 2


@pytest.mark.parametrize("key_bytes", [queuekeep.KEY_BYTES, 40])
def test_a_kept_reading_under_a_key_it_cannot_follow_is_refused_by_its_first_bytes(read_queue, clock, surveys,
                                                                                  monkeypatch, key_bytes):
    """The key is read first (from all of the file when it is longer than the bytes read): a reading kept
    for other files is refused without reading past it, and one it can follow is carried as ever."""
    monkeypatch.setattr(queuekeep, "KEY_BYTES", key_bytes)
    path = queuekeep.path(Town(read_queue), queuekeep.REPLAY_FILE)
    data = path.read_bytes()
    slung(read_queue, "al-5")
    carried = forecast_at(read_queue, clock.now)
    assert surveys == [] and len(carried["items"]) == 6
    path.write_bytes(data)  # the reading before the sling, its rest made unreadable past the key
    cut = data.index(b',"made_at"')
    path.write_bytes(data[:cut] + b',"made_at":' + b"x" * 100_000)
    configure(read_queue, "scheduler.batch_size", "3")  # a key it cannot follow: refused by its key alone
    session = Session(Town(read_queue), now=clock.now)
    read: list[int] = []

    class Counted:  # the file, counting the bytes read from it
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def read(self, size=-1):
            chunk = self.fh.read(size)
            read.append(len(chunk))
            return chunk

    monkeypatch.setattr(queuekeep, "open", lambda *a: Counted(open(*a)), raising=False)  # noqa: SIM115
    assert queuekeep.load_whole(session, queuekeep.REPLAY_FILE, lambda key: False) is None
    whole = cut + 100_011  # the file as cut above
    assert sum(read) == (min(key_bytes, whole) if key_bytes > cut else whole)
    monkeypatch.undo()
    assert forecast_at(read_queue, clock.now) == fresh_forecast_at(read_queue, clock.now)
