"""The queue's head kept between reads: given again only for the inputs and the time it was made for.

Each test compares what a read answers with the head kept against a fresh
survey of the same files (the head removed), and counts the surveys: a read
of an unchanged queue makes none, a read after any change makes one.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.forecast import forecast_at, fresh_forecast_at
from helpers.scheduler import (
    configure,
    counted_surveys,
    ephemeral_path,
    item,
    memory_alpha,
    without_etas,
    write_items,
)
from sluice.errors import ExecutorError
from sluice.scheduler import chain, queue, queuekeep
from sluice.scheduler.dispatch import run_cycle
from sluice.scheduler.session import Session
from sluice.scheduler.sling import SlingOptions, sling
from sluice.store import admission_state
from sluice.store.town import Town


@pytest.fixture
def surveys(monkeypatch) -> list[int]:
    """One entry per survey the queue's reads make."""
    return counted_surveys(monkeypatch, queue)


@pytest.fixture
def cycle_surveys(monkeypatch) -> list[int]:
    """One entry per survey a dispatch cycle makes."""
    from sluice.scheduler import dispatch

    return counted_surveys(monkeypatch, dispatch)


def status(town_dir: Path, limit: int = 50) -> dict:
    return queue.status(Town(town_dir), limit=limit)


def fresh(town_dir: Path, limit: int = 50) -> dict:
    """The answer of a survey of the files as they are now (no head to give)."""
    queuekeep.path(Town(town_dir)).unlink(missing_ok=True)
    return status(town_dir, limit)


def queue_list(town_dir: Path) -> list[dict]:
    """``scheduler list --limit 50``: the rows with their forecast times."""
    from sluice.scheduler.forecast import list_queue

    return list_queue(Town(town_dir), limit=50)


def stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def slung(town_dir: Path, *ids: str, rig: str = "alpha") -> None:
    result = sling(Town(town_dir), [*ids, rig], SlingOptions())
    assert result.ok, result.errors


@pytest.fixture
def three_queued(cli, rig, town_dir) -> Path:
    """Rig alpha with four items, three of them queued."""
    configure(town_dir, "scheduler.max_polecats", "10")
    write_items(town_dir, "alpha", [item(f"al-{n}", priority=n % 3) for n in range(4)])
    slung(town_dir, "al-0", "al-1", "al-2")
    return town_dir


def test_a_read_of_an_unchanged_queue_answers_from_the_head_without_a_survey(three_queued, surveys):
    first = status(three_queued)
    assert len(surveys) == 1 and queuekeep.path(Town(three_queued)).exists()
    again = status(three_queued)
    assert len(surveys) == 1  # no second survey
    assert again == first == fresh(three_queued)
    assert [row["id"] for row in again["items"]] == [row["id"] for row in first["items"]]
    assert again["items_total"] == 3


def test_a_page_of_the_head_is_cut_from_it_and_a_page_past_it_surveys(three_queued, surveys):
    whole = queue.list_queue(Town(three_queued), limit=3)
    assert len(surveys) == 1
    assert queue.list_queue(Town(three_queued), limit=1, offset=1) == whole[1:2]
    assert len(surveys) == 1
    queue.list_queue(Town(three_queued))  # every row: no head holds that answer
    queue.list_queue(Town(three_queued), limit=10, offset=queuekeep.HEAD_ROWS)
    assert len(surveys) == 3


def _sling_another(town_dir, repo):
    slung(town_dir, "al-3")


def _close_an_item(town_dir, repo):
    write_items(town_dir, "alpha", [item("al-0", status="closed"), *(item(f"al-{n}") for n in range(1, 4))])


def _clear_the_queue(town_dir, repo):
    from sluice.scheduler.control import clear

    clear(Town(town_dir))


def _pause(town_dir, repo):
    from sluice.scheduler.control import pause

    pause(Town(town_dir))


def _batch_of_one(town_dir, repo):
    configure(town_dir, "scheduler.batch_size", "1")


def _throttle(town_dir, repo):
    admission_state.set_throttle(Town(town_dir), until=datetime.now(UTC).timestamp() + 3600, rig="alpha",
                                 reason="test", by="test", now=datetime.now(UTC).timestamp())


def _a_worktree_warms_the_rig(town_dir, repo):
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", str(repo.parent / "wt"), "-b", "wt"],
                   check=True, capture_output=True)


def _hold_file(town_dir, repo):
    hold = town_dir / "hold"
    hold.write_text("maintenance\n")
    configure(town_dir, "scheduler.hold_file", str(hold))


def _policy(town_dir, repo):
    Town(town_dir).policy_path.write_text(json.dumps({"weights": {"priority": 0.0, "tokens": 5.0}}))


CHANGES = [_sling_another, _close_an_item, _clear_the_queue, _pause, _batch_of_one, _throttle,
           _a_worktree_warms_the_rig, _hold_file, _policy]


@pytest.mark.parametrize("change", CHANGES, ids=lambda f: f.__name__.strip("_"))
def test_any_change_to_what_the_survey_reads_surveys_again(three_queued, surveys, tmp_path, change):
    status(three_queued)
    status(three_queued)
    assert len(surveys) == 1
    change(three_queued, tmp_path / "repos" / "alpha")
    after = status(three_queued)
    assert len(surveys) == 2, "the head of the queue before the change was given again"
    assert after == fresh(three_queued)


def test_a_reading_kept_for_other_inputs_is_refused_by_its_first_bytes(three_queued, monkeypatch):
    """The first read after a change must not parse a long kept reading only to find its key stale."""
    status(three_queued)
    session = Session.of(Town(three_queued))
    key = queuekeep.inputs(session)
    assert queuekeep.load(session, key) is not None
    parsed: list[int] = []
    real_loads = queuekeep.json.loads
    monkeypatch.setattr(queuekeep.json, "loads", lambda data: parsed.append(len(data)) or real_loads(data))
    assert queuekeep.load(session, [*key, "another input"]) is None
    assert parsed == []
    assert queuekeep.load(session, key) is not None and len(parsed) == 1


def test_a_polecat_ending_is_a_change_though_no_queue_file_moves(cli, rig, town_dir, memory, surveys):
    configure(town_dir, "scheduler.max_polecats", "1")
    write_items(town_dir, "alpha", [item("al-0"), item("al-1")])
    slung(town_dir, "al-0", "al-1")
    assert run_cycle(Town(town_dir)).dispatched == 1
    held = status(town_dir)
    assert held["capacity"] == 0 and status(town_dir) == held
    count = len(surveys)
    memory.finish("al-0", 0)
    after = status(town_dir)
    assert len(surveys) == count + 1 and after["capacity"] == 1
    assert after == fresh(town_dir)


def test_a_deferral_that_ends_makes_its_item_ready_at_that_moment(cli, rig, town_dir, clock, surveys):
    configure(town_dir, "scheduler.max_polecats", "10")
    write_items(town_dir, "alpha", [item("al-0"), item("al-1", defer_until=stamp(clock.now + 30))])
    slung(town_dir, "al-0", "al-1")
    before = status(town_dir)
    assert before["queued_ready"] == 1
    clock.advance(20)
    assert status(town_dir) == before and len(surveys) == 1
    clock.advance(11)
    after = status(town_dir)
    assert after["queued_ready"] == 2 and len(surveys) == 2


def test_a_backoff_that_ends_makes_its_item_ready_at_that_moment(cli, rig, town_dir, memory, clock, surveys):
    configure(town_dir, "scheduler.retry_base", "10s")
    configure(town_dir, "scheduler.max_polecats", "10")
    write_items(town_dir, "alpha", [item("al-0")])
    slung(town_dir, "al-0")
    memory.fail_next("al-0")
    run_cycle(Town(town_dir))
    waiting = status(town_dir)
    assert waiting["queued_ready"] == 1 and waiting["items"][0]["retry_at"] is not None
    assert waiting["items"][0]["why"] != []
    count = len(surveys)
    clock.advance(5)
    assert status(town_dir) == waiting and len(surveys) == count
    clock.advance(6)
    after = status(town_dir)
    assert len(surveys) == count + 1 and after["items"][0]["why"] == []


def test_a_throttle_that_lifts_lets_the_queue_go_at_that_moment(three_queued, clock, surveys):
    admission_state.set_throttle(Town(three_queued), clock.now + 30, "alpha", "test", "test", clock.now)
    held = status(three_queued)
    assert held["items"][0]["why"] and held["throttles"]
    clock.advance(29)
    assert status(three_queued) == held and len(surveys) == 1
    clock.advance(2)
    after = status(three_queued)
    assert len(surveys) == 2 and after["items"][0]["why"] == [] and after == fresh(three_queued)


def test_no_head_answers_longer_than_its_bound(three_queued, clock, surveys):
    status(three_queued)
    clock.advance(queuekeep.KEEP_AT_MOST - 1)
    status(three_queued)
    assert len(surveys) == 1
    clock.advance(2)
    status(three_queued)
    assert len(surveys) == 2


def test_a_policy_that_ages_the_queue_keeps_nothing(three_queued, surveys):
    Town(three_queued).policy_path.write_text(json.dumps({"aging": 1.0, "aging_max": 10.0}))
    status(three_queued)
    status(three_queued)
    assert len(surveys) == 2 and not queuekeep.path(Town(three_queued)).exists()


def test_a_forecast_of_an_unchanged_queue_replays_what_the_last_survey_read(three_queued, clock, surveys):
    now = clock.now
    first = forecast_at(three_queued, now)
    assert len(surveys) == 1 and queuekeep.path(Town(three_queued), queuekeep.REPLAY_FILE).exists()
    assert forecast_at(three_queued, now) == first and len(surveys) == 1
    assert [row["item_id"] for row in first["items"]] == ["al-0", "al-1", "al-2"]
    status(three_queued)  # the head and the forecast's reading are kept apart: each survey once
    assert len(surveys) == 2
    configure(three_queued, "scheduler.max_polecats", "1")  # one at a time: the items start later
    after = forecast_at(three_queued, clock.now)
    assert len(surveys) == 3 and after["drain_at"] > first["drain_at"]
    assert after == fresh_forecast_at(three_queued, clock.now)


def test_one_survey_keeps_both_the_head_and_the_forecasts_reading(three_queued, surveys):
    listed = queue_list(three_queued)
    assert len(surveys) == 1
    for name in (queuekeep.FILE, queuekeep.REPLAY_FILE):
        assert queuekeep.path(Town(three_queued), name).exists()
    assert without_etas(queue_list(three_queued)) == without_etas(listed) and len(surveys) == 1


def test_a_head_with_its_key_but_not_its_shape_is_no_head(three_queued, surveys, clock):
    now = clock.now
    forecast = forecast_at(three_queued, now)
    first = status(three_queued)
    for name in (queuekeep.FILE, queuekeep.REPLAY_FILE):
        path = queuekeep.path(Town(three_queued), name)
        kept = json.loads(path.read_bytes())
        kept.update(rows=7, works=[["al-0"]], cycle={"planned": 0, "tidy": True})
        path.write_text(json.dumps(kept))
    assert status(three_queued) == first
    assert forecast_at(three_queued, now) == forecast
    head = queuekeep.path(Town(three_queued))
    kept = json.loads(head.read_bytes())  # the survey just kept a whole head again; cut its cycle
    head.write_text(json.dumps({**kept, "cycle": {"planned": 0, "tidy": True}}))
    session = Session(Town(three_queued))
    assert queuekeep.inputs(session) == kept["key"] and queuekeep.idle_cycle(session) is None


def test_a_rig_that_cannot_be_read_keeps_nothing(three_queued, surveys):
    with ephemeral_path(three_queued, "alpha").open("a") as log:
        log.write("{not json\n")
    first = status(three_queued)
    assert first["unreadable"] and status(three_queued) == first
    assert len(surveys) == 2 and not queuekeep.path(Town(three_queued)).exists()


def test_a_cut_or_foreign_head_is_no_head(three_queued, surveys):
    first = status(three_queued)
    head = queuekeep.path(Town(three_queued))
    head.write_bytes(head.read_bytes()[:100])
    assert status(three_queued) == first and len(surveys) == 2
    kept = json.loads(head.read_bytes())
    kept["key"][0] = "another version"
    head.write_text(json.dumps(kept))
    assert status(three_queued) == first and len(surveys) == 3


def test_a_cycle_at_its_cap_over_an_unchanged_queue_reports_it_without_a_survey(
        cli, rig, town_dir, memory, cycle_surveys, checked):
    configure(town_dir, "scheduler.max_polecats", "1")
    write_items(town_dir, "alpha", [item(f"al-{n}") for n in range(3)])
    slung(town_dir, "al-0", "al-1", "al-2")
    assert run_cycle(Town(town_dir)).dispatched == 1
    first = run_cycle(Town(town_dir))  # at the cap: surveys, launches nothing, keeps the head
    assert first.dispatched == 0 and first.reason == "capacity" and len(cycle_surveys) == 2
    again = run_cycle(Town(town_dir))
    assert len(cycle_surveys) == 2  # the same queue, the same polecats: no survey
    assert again.to_json() == first.to_json()
    memory.finish("al-0", 0)
    freed = run_cycle(Town(town_dir))  # from the chain the capped cycle left, held to a survey
    assert len(cycle_surveys) == 2 and len(checked) == 1 and freed.dispatched == 1


def test_a_cycle_with_something_to_tidy_surveys_and_tidies(cli, rig, town_dir, memory, cycle_surveys):
    configure(town_dir, "scheduler.max_polecats", "1")
    write_items(town_dir, "alpha", [item(f"al-{n}") for n in range(3)])
    slung(town_dir, "al-0", "al-1", "al-2")
    run_cycle(Town(town_dir))
    run_cycle(Town(town_dir))
    write_items(town_dir, "alpha", [item("al-0"), item("al-1", status="closed"), item("al-2")])
    assert status(town_dir)["stale"] == 1  # a read keeps the head, and leaves the stale context open
    tidied = run_cycle(Town(town_dir))  # the head names nothing to launch, but the cycle must close it
    assert len(cycle_surveys) == 3 and tidied.closed
    assert run_cycle(Town(town_dir)).to_json()["ready"] == 1


def test_a_budget_that_holds_work_is_noted_by_a_surveying_cycle(cli, rig, town_dir, memory, cycle_surveys):
    configure(town_dir, "scheduler.max_polecats", "5")
    configure(town_dir, "scheduler.token_budget", "100")
    write_items(town_dir, "alpha", [item(f"al-{n}", estimated_tokens=80) for n in range(3)])
    slung(town_dir, "al-0", "al-1", "al-2")
    run_cycle(Town(town_dir))
    for _ in range(2):
        report = run_cycle(Town(town_dir))
        assert report.why.get("budget")
    assert len(cycle_surveys) == 3  # never cut short while the budget holds work


# -- the property: whatever happens, a read with the head answers what a fresh survey answers ----------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("sling"), st.integers(0, 2)),
        st.tuples(st.just("close"), st.integers(0, 2)),
        st.tuples(st.just("defer"), st.integers(0, 2), st.integers(1, 40)),
        st.tuples(st.just("advance"), st.integers(1, 50)),
        st.tuples(st.just("advance"), st.integers(1, 50)),
        st.tuples(st.just("pause"), st.booleans()),
        st.tuples(st.just("throttle"), st.integers(1, 40)),
        st.tuples(st.just("cycle"), st.booleans()),
        st.tuples(st.just("finish"), st.integers(0, 2)),
    ),
    min_size=1, max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_a_read_with_the_head_always_answers_what_a_fresh_survey_answers(clock, cycle_surveys, checked, ops):
    """(``checked``: every cycle taken from the last cycle's queue is held to a survey too.)"""
    from sluice.executors.memory import MemoryExecutor
    from sluice.scheduler.control import pause, resume

    base = Path(tempfile.mkdtemp(prefix="keep-"))
    try:
        records = {f"al-{n}": item(f"al-{n}", priority=n % 3) for n in range(3)}
        town_dir, memory = memory_alpha(base, clock, list(records.values()))
        sling(Town(town_dir), [*records, "alpha"], SlingOptions())
        for op in ops:
            kind = op[0]
            if kind == "sling":
                sling(Town(town_dir), [f"al-{op[1]}", "alpha"], SlingOptions())
            elif kind in ("close", "defer"):
                record = records[f"al-{op[1]}"]
                if kind == "close":
                    record["status"] = "closed"
                else:
                    record["defer_until"] = stamp(clock.now + op[2])
                write_items(town_dir, "alpha", list(records.values()))
            elif kind == "advance":
                clock.advance(op[1])
            elif kind == "pause":
                (pause if op[1] else resume)(Town(town_dir))
            elif kind == "throttle":
                admission_state.set_throttle(Town(town_dir), clock.now + op[1], "alpha", "test", "test",
                                             clock.now)
            elif kind == "cycle":
                run_cycle(Town(town_dir))
            elif kind == "finish":
                with contextlib.suppress(ExecutorError):  # not running: nothing to end
                    memory.finish(f"al-{op[1]}", 0 if op[1] % 2 else 1)
            if kind == "cycle" and op[1]:  # a second cycle: an idle one answers as a surveying one would
                before = len(cycle_surveys)
                idle = run_cycle(Town(town_dir)).to_json()
                if len(cycle_surveys) == before and not idle["planned"]:  # from the head, or a chain
                    queuekeep.path(Town(town_dir)).unlink(missing_ok=True)
                    (Town(town_dir).runtime / chain.FILE).unlink(missing_ok=True)
                    assert run_cycle(Town(town_dir)).to_json() == idle, op
            first = status(town_dir)
            again = status(town_dir)
            assert again == first == fresh(town_dir), op
            now = clock.now
            shown = snapshot_times(town_dir, now)  # the last replay of this queue, if one is kept
            assert snapshot_times(town_dir, now) == shown, op
            assert shown == fresh_snapshot_times(town_dir, now), op
            replayed = forecast_at(town_dir, now)
            assert forecast_at(town_dir, now) == replayed == fresh_forecast_at(town_dir, now), op
        MemoryExecutor.forget_town(Town(town_dir))
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- a page's times, from the head of the forecast's reading ------------------------------------


@pytest.fixture
def twelve_queued(cli, rig, town_dir) -> Path:
    """Rig alpha, twelve items queued: two at a time, the first ones carrying a label capped at one."""
    configure(town_dir, "scheduler.max_polecats", "2")
    configure(town_dir, "scheduler.batch_size", "1")
    configure(town_dir, "scheduler.label_caps.db", "1")
    write_items(town_dir, "alpha", [item(f"al-{n:02}", priority=0 if n < 4 else 2,
                                         labels=["db"] if n < 4 else [])
                                    for n in range(12)])
    slung(town_dir, *[f"al-{n:02}" for n in range(12)])
    return town_dir


def page_times(town_dir: Path, now: float, limit: int, offset: int = 0) -> list[tuple]:
    from sluice.scheduler.forecast import list_queue

    rows = list_queue(Session(Town(town_dir), now=now), limit=limit, offset=offset)
    return [(row["id"], row["start_at"], row["done_at"]) for row in rows]


def whole_times(town_dir: Path, now: float) -> list[tuple]:
    """Every row's times as the replay of the whole queue gives them."""
    rows = forecast_at(town_dir, now)["items"]
    return [(row["item_id"], row["start_at"], row["done_at"]) for row in rows]


def loaded(monkeypatch) -> list[str]:
    """The kept files the reads load, by name."""
    names: list[str] = []
    real = queuekeep.load
    monkeypatch.setattr(queuekeep, "load",
                        lambda s, k, name=queuekeep.FILE: names.append(name) or real(s, k, name))
    return names


def test_a_page_shows_the_times_the_replay_of_the_whole_queue_gives(twelve_queued, clock, monkeypatch):
    now = clock.now
    whole = whole_times(twelve_queued, now)
    assert len({start for _, start, _ in whole}) > 3  # the caps spread the starts out
    names = loaded(monkeypatch)
    for limit, offset in ((1, 0), (3, 2), (5, 7), (12, 0), (50, 0), (4, 10)):
        assert page_times(twelve_queued, now, limit, offset) == whole[offset:offset + limit]
    # an unchanged queue's pages replay from the head of the reading, never loading the whole of it
    assert queuekeep.REPLAY_HEAD_FILE in names and queuekeep.REPLAY_FILE not in names


def test_a_page_whose_replay_walks_past_the_kept_head_reads_the_whole_queue(twelve_queued, clock,
                                                                            monkeypatch):
    monkeypatch.setattr(queuekeep, "HEAD_ROWS", 2)  # two rows kept: the walk passes them at once
    now = clock.now
    whole = whole_times(twelve_queued, now)
    kept = json.loads(queuekeep.path(Town(twelve_queued), queuekeep.REPLAY_HEAD_FILE).read_bytes())
    assert len(kept["works"]) == 2 and kept["total"] == 12
    assert page_times(twelve_queued, now, 2) == whole[:2]  # a survey of the page: it keeps the queue's head
    names = loaded(monkeypatch)
    assert page_times(twelve_queued, now, 2) == whole[:2]
    assert names.count(queuekeep.REPLAY_HEAD_FILE) == 1 and queuekeep.REPLAY_FILE in names


def test_a_cut_or_foreign_head_of_the_reading_is_no_head(twelve_queued, clock):
    now = clock.now
    whole = whole_times(twelve_queued, now)
    path = queuekeep.path(Town(twelve_queued), queuekeep.REPLAY_HEAD_FILE)
    kept = json.loads(path.read_bytes())
    for bad in ({**kept, "total": 1}, {**kept, "total": "12"}, {**kept, "works": [["al-00"]]}):
        path.write_text(json.dumps(bad))
        assert page_times(twelve_queued, now, 5) == whole[:5]
    path.write_text(json.dumps(kept)[:40])
    assert page_times(twelve_queued, now, 5) == whole[:5]


# -- a snapshot's forecast, from the last replay of the same queue ---------------------------------


def snapshot_times(town_dir: Path, now: float, limit: int = 50) -> tuple[dict, list[tuple]]:
    """``snapshot --limit``'s forecast head and its queue rows' times, at ``now``."""
    from sluice.scheduler.snapshot import snapshot

    snap = snapshot(Session(Town(town_dir), now=now), limit=limit)
    return snap["forecast"], [(row["id"], row["start_at"], row["done_at"]) for row in snap["queue"]]


def fresh_snapshot_times(town_dir: Path, now: float, limit: int = 50) -> tuple[dict, list[tuple]]:
    """What a replay gives, at the moment the kept one was made (``now`` when none is kept).

    A kept replay answers only for the inputs it was made for, so the files
    are as they were then: a snapshot at that moment with nothing kept of
    the replay must show the same.
    """
    path = queuekeep.path(Town(town_dir), queuekeep.REPLAY_SUMMARY_FILE)
    with contextlib.suppress(OSError, ValueError):
        now = json.loads(path.read_bytes())["made_at"]
    path.unlink(missing_ok=True)
    return snapshot_times(town_dir, now, limit)


def replays(monkeypatch, *, first_rows: list[int] | None = None) -> list[int]:
    """One entry per replay of the whole queue (``first_rows``: one per replay that gave the slots of its
    first rows only, of how many, each also counted in the list returned)."""
    from sluice.scheduler import forecast

    calls: list[int] = []
    real, real_first = forecast.model.simulate, forecast.model.simulate_first

    def first(now, queue, rows, *rest):
        calls.append(1)
        if first_rows is not None:
            first_rows.append(rows)
        return real_first(now, queue, rows, *rest)

    monkeypatch.setattr(forecast.model, "simulate", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(forecast.model, "simulate_first", first)
    return calls


def test_a_snapshot_of_an_unchanged_queue_shows_the_last_replay_of_it(twelve_queued, clock, monkeypatch):
    made = clock.now
    first = snapshot_times(twelve_queued, made)
    assert first[0]["at"] == forecast_at(twelve_queued, made)["at"]
    assert [row[0] for row in first[1]] == [f"al-{n:02}" for n in range(12)]
    assert all(row[1] for row in first[1])
    counted = replays(monkeypatch)
    assert snapshot_times(twelve_queued, made + 30) == first and not counted  # made at ``made``, its ``at``
    assert fresh_snapshot_times(twelve_queued, made + 30) == first and len(counted) == 1
    past = made + queuekeep.KEEP_AT_MOST + 1  # past its bound: replayed at the snapshot's own moment
    again = snapshot_times(twelve_queued, past)
    assert again[0]["at"] == forecast_at(twelve_queued, past)["at"] != first[0]["at"]
    configure(twelve_queued, "scheduler.max_polecats", "3")  # a change: replayed, never the kept one
    changed = snapshot_times(twelve_queued, past + 1)
    assert changed[0]["at"] == forecast_at(twelve_queued, past + 1)["at"] and changed[1] != first[1]


def test_a_snapshot_whose_rows_pass_the_kept_times_replays_the_queue(twelve_queued, clock, monkeypatch):
    monkeypatch.setattr(queuekeep, "HEAD_ROWS", 2)  # two rows' times kept
    now = clock.now
    first = snapshot_times(twelve_queued, now, limit=2)
    counted = replays(monkeypatch)
    assert snapshot_times(twelve_queued, now + 1, limit=2) == first and not counted
    five = snapshot_times(twelve_queued, now + 1, limit=5)
    assert len(counted) == 1 and five[0]["at"] != first[0]["at"]  # past the kept times: replayed then
    queuekeep.path(Town(twelve_queued), queuekeep.REPLAY_SUMMARY_FILE).unlink()
    assert snapshot_times(twelve_queued, now + 1, limit=5) == five


def test_a_snapshot_of_a_few_rows_replays_the_whole_queue_for_its_drain_and_slots_only_its_rows(
        twelve_queued, clock, monkeypatch):
    monkeypatch.setattr(queuekeep, "HEAD_ROWS", 2)
    now = clock.now
    whole = forecast_at(twelve_queued, now)
    queuekeep.path(Town(twelve_queued), queuekeep.REPLAY_SUMMARY_FILE).unlink()
    first_rows: list[int] = []
    replays(monkeypatch, first_rows=first_rows)
    head, rows = snapshot_times(twelve_queued, now, limit=3)
    assert first_rows == [3]  # the rows shown slotted (more than the times kept), the rest walked
    assert {key: head[key] for key in ("at", "drain_at", "drain_p90_at", "items_total")} == {
        key: whole[key] for key in ("at", "drain_at", "drain_p90_at", "items_total")}
    assert head["items_total"] == 12
    assert rows == [(row["item_id"], row["start_at"], row["done_at"]) for row in whole["items"][:3]]


def test_a_forecast_of_its_first_rows_has_the_whole_ones_head_and_rows(twelve_queued, clock, monkeypatch):
    from sluice.scheduler.forecast import forecast

    monkeypatch.setattr(queuekeep, "HEAD_ROWS", 2)
    now = clock.now
    whole = forecast_at(twelve_queued, now)
    first_rows: list[int] = []
    replays(monkeypatch, first_rows=first_rows)
    part = forecast(Session(Town(twelve_queued), now=now), limit=3)
    assert first_rows == [3]  # the daemon's kept forecast asks for one row: it slots no more than that
    assert {key: value for key, value in part.items() if key != "items"} == {
        key: value for key, value in whole.items() if key != "items"}
    assert part["items"] == whole["items"][:3]


def test_a_cut_or_foreign_kept_replay_is_no_replay(twelve_queued, clock):
    now = clock.now
    first = snapshot_times(twelve_queued, now)
    path = queuekeep.path(Town(twelve_queued), queuekeep.REPLAY_SUMMARY_FILE)
    kept = json.loads(path.read_bytes())
    for bad in ({**kept, "head": [1]}, {**kept, "times": {"al-00": "soon"}}, {**kept, "times": []}):
        path.write_text(json.dumps(bad))
        assert snapshot_times(twelve_queued, now) == first
    path.write_text(json.dumps(kept)[:40])
    assert snapshot_times(twelve_queued, now) == first
