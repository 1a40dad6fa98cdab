"""Polecat control library, the stall timeout and the retry backoff, with real polecats."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers.polecats import configure, gone, report
from helpers.polecats import request as launch_request
from helpers.scheduler import contexts, fields, issues_path, item, write_items
from sluice.core.clock import iso
from sluice.core.items import parse_ts
from sluice.core.plan import retry_delay
from sluice.core.records import SlingContextFields
from sluice.errors import UnknownPolecat
from sluice.executors import get_executor
from sluice.scheduler.launch import polecats
from sluice.scheduler.launch.ends import stop_polecats
from sluice.store.database.events import POLECAT_TIMED_OUT, read_events

# -- stall timeout -------------------------------------------------------------------


def test_overdue_counts_from_the_start_and_zero_means_never(town_files, real_polecats):
    reports = real_polecats.reports
    executor = get_executor(town_files)
    polecat = executor.launch(launch_request(town_files, "alpha", "al-1", "al-wisp-t1"))
    report(reports, "al-wisp-t1")
    started = parse_ts(polecat.started_at)
    assert polecats.overdue_polecats(executor, 60, started + 59) == []
    assert [p.id for p in polecats.overdue_polecats(executor, 60, started + 60)] == [polecat.id]
    as_datetime = datetime.fromtimestamp(started, UTC) + timedelta(seconds=61)
    assert [p.id for p in polecats.overdue_polecats(executor, 60, as_datetime)] == [polecat.id]
    assert polecats.overdue_polecats(executor, 0, started + 10**6) == []  # 0 = no timeout


def test_stop_overdue_stops_the_stalled_polecat_logs_the_event_and_leaves_the_item(town_files, real_polecats,
                                                                                   cli):
    reports = real_polecats.reports
    write_items(cli.town, "alpha", [item("al-1", "stalled work"), item("al-2", "fresh work")])
    items_before = issues_path(cli.town, "alpha").read_bytes()
    executor = get_executor(town_files)
    town_files.config  # noqa: B018 - cache the config as a long-lived daemon would ...
    configure(cli.town, {"scheduler.polecat_timeout": "1s"})  # ... then the timeout is set
    stalled = executor.launch(launch_request(town_files, "alpha", "al-1", "al-wisp-t2"))
    seen = report(reports, "al-wisp-t2")
    time.sleep(1.1)
    fresh = executor.launch(launch_request(town_files, "alpha", "al-2", "al-wisp-t3"))
    report(reports, "al-wisp-t3")

    stopped = polecats.stop_overdue(town_files, executor, time.time())

    assert [p.id for p in stopped] == [stalled.id]
    assert gone(seen["pid"]) and gone(seen["child"])
    assert [p.id for p in executor.active()] == [fresh.id]
    [event] = read_events(town_files, [POLECAT_TIMED_OUT])
    assert event["payload"] == {
        "polecat_id": stalled.id,
        "item_id": "al-1",
        "rig": "alpha",
        "context_id": "al-wisp-t2",
        "executor": executor.kind,
        "started_at": stalled.started_at,
        "timeout": "1s",
    }
    assert issues_path(cli.town, "alpha").read_bytes() == items_before  # scheduling never writes an item


def test_stop_overdue_does_nothing_without_a_timeout(town_files, real_polecats):
    reports = real_polecats.reports
    executor = get_executor(town_files)
    polecat = executor.launch(launch_request(town_files, "alpha", "al-1", "al-wisp-t4"))
    report(reports, "al-wisp-t4")
    assert polecats.stop_overdue(town_files, executor, time.time() + 10**6) == []
    assert [p.id for p in executor.active()] == [polecat.id]
    assert read_events(town_files, [POLECAT_TIMED_OUT]) == []


# -- control -------------------------------------------------------------------------


def test_resolve_by_id_or_item_and_unknown_is_a_clear_error(town_files, real_polecats):
    reports = real_polecats.reports
    executor = get_executor(town_files)
    polecat = executor.launch(launch_request(town_files, "alpha", "al-1", "al-wisp-t5"))
    report(reports, "al-wisp-t5")
    assert [p.id for p in polecats.resolve(executor, polecat.id)] == [polecat.id]
    assert [p.id for p in polecats.resolve(executor, "al-1")] == [polecat.id]
    with pytest.raises(UnknownPolecat, match="no polecat with id or item id 'al-404'"):
        polecats.resolve(executor, "al-404")
    [row] = stop_polecats(town_files, "al-1")
    assert (row["id"], row["stopped"], row["state"]) == (polecat.id, True, "stopped")
    [again] = stop_polecats(town_files, "al-1")
    assert again["stopped"] is False


# -- retry backoff -------------------------------------------------------------------


def context_fields(failures: int, last_failure_at: str = "") -> SlingContextFields:
    return SlingContextFields(
        work_bead_id="al-1",
        target_rig="alpha",
        enqueued_at="2026-01-01T00:00:00Z",
        dispatch_failures=failures,
        last_failure_at=last_failure_at,
    )


def test_no_failure_or_no_failure_time_means_no_wait():
    assert polecats.retry_due_at(context_fields(0), 30, 600) is None
    assert polecats.is_retry_due(context_fields(0), 0, 30, 600)
    assert polecats.retry_due_at(context_fields(2, ""), 30, 600) is None  # nothing to measure from
    assert polecats.is_retry_due(context_fields(2, "not a time"), 0, 30, 600)


def test_backoff_doubles_from_the_base_and_stops_at_the_maximum():
    last = "2026-01-01T00:00:00.000000Z"
    due = [polecats.retry_due_at(context_fields(n, last), 30, 600) for n in range(1, 8)]
    assert due == [
        "2026-01-01T00:00:30.000000Z",
        "2026-01-01T00:01:00.000000Z",
        "2026-01-01T00:02:00.000000Z",
        "2026-01-01T00:04:00.000000Z",
        "2026-01-01T00:08:00.000000Z",
        "2026-01-01T00:10:00.000000Z",
        "2026-01-01T00:10:00.000000Z",
    ]


@given(
    failures=st.integers(min_value=1, max_value=2000),
    base=st.floats(min_value=0, max_value=3600),
    maximum=st.floats(min_value=0, max_value=86400),
    offset=st.integers(min_value=-10**8, max_value=10**8).map(lambda ms: ms / 1000),  # whole milliseconds
)
def test_a_context_is_due_exactly_when_its_delay_has_passed(failures, base, maximum, offset):
    last = 1_800_000_000.0
    fields_ = context_fields(failures, iso(datetime.fromtimestamp(last, UTC)))
    delay = retry_delay(failures, base, maximum)
    assert delay <= maximum
    assert polecats.is_retry_due(fields_, last + delay + offset, base, maximum) == (offset >= 0)


def test_a_real_failed_dispatch_waits_out_its_backoff(cli, rig):
    """The dispatcher records a failure; retry_due_at and is_retry_due read that context and the clock."""
    configure(cli.town, {
        "scheduler.max_polecats": "2",
        "executor.command": '["no-such-agent-program", "{item_id}"]',
    })
    write_items(cli.town, "alpha", [item("al-1", "flaky")])
    cli.run("sling", "al-1", "alpha")
    assert cli.json("scheduler", "run")["failed"] == 1
    [context] = contexts(cli.town, "alpha")
    failed = SlingContextFields.from_dict(fields(context))
    assert failed.dispatch_failures == 1
    due = polecats.retry_due_at(failed, 1, 600)
    assert parse_ts(due) == pytest.approx(parse_ts(failed.last_failure_at) + 1)
    assert not polecats.is_retry_due(failed, parse_ts(failed.last_failure_at) + 0.5, 1, 600)
    time.sleep(max(0.0, parse_ts(due) - time.time()) + 0.05)
    assert polecats.is_retry_due(failed, time.time(), 1, 600)
