"""A step of the wall clock, either way, neither stops every polecat nor lets one run forever.

Runtimes of local polecats are measured on the boot clock (the process's
start time from boot against ``CLOCK_BOOTTIME``), which no NTP step or
hand-set date moves; the wall clock is only the fallback where an executor
recorded no process start.  Jumps are made by handing the functions a
``now`` days away from the real one, as a clock that was just set would.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers.polecats import configure, report
from helpers.polecats import request as launch_request
from sluice.core.clock import boot_seconds, runtime_seconds
from sluice.executors import get_executor
from sluice.scheduler.launch import polecats
from sluice.store.database import admission_state as kept
from sluice.store.files.town import Town

DAYS = 30 * 86400.0
needs_boot_clock = pytest.mark.skipif(boot_seconds() is None, reason="no boot clock (CLOCK_BOOTTIME) here")


@given(started_boot=st.floats(0, 1e9), ran=st.floats(0, 1e9), started_wall=st.floats(0, 4e9),
       jump=st.floats(-4e9, 4e9))
def test_a_runtime_on_the_boot_clock_ignores_any_wall_clock_step(started_boot, ran, started_wall, jump):
    now_wall = started_wall + ran + jump
    measured = runtime_seconds(started_wall, now_wall, started_boot, started_boot + ran)
    assert measured == pytest.approx(ran, abs=1e-6)


@given(started=st.floats(0, 4e9), now=st.floats(0, 4e9))
def test_without_a_boot_start_the_wall_clock_decides_and_never_goes_negative(started, now):
    assert runtime_seconds(started, now) == max(0.0, now - started)
    assert runtime_seconds(None, now) is None


@needs_boot_clock
def test_a_forward_jump_does_not_make_a_running_polecat_overdue(town_files, real_polecats, cli):
    reports = real_polecats.reports
    executor = get_executor(town_files)
    polecat = executor.launch(launch_request(town_files, "alpha", "al-1", "al-wisp-j1"))
    report(reports, "al-wisp-j1")
    configure(cli.town, {"scheduler.polecat_timeout": "1h"})
    jumped = time.time() + DAYS
    assert polecats.overdue_polecats(executor, 3600, jumped, boot_seconds()) == []
    assert polecats.stop_overdue(Town(cli.town), executor, jumped) == []  # as the daemon calls it
    assert [p.id for p in executor.active()] == [polecat.id]
    runtime = polecats.polecat_runtime(executor.active()[0], jumped, boot_seconds())
    assert 0 <= runtime < 600  # what it really ran, not a month


@needs_boot_clock
def test_a_backward_jump_does_not_let_an_overdue_polecat_run_on(town_files, real_polecats, cli):
    reports = real_polecats.reports
    executor = get_executor(town_files)
    polecat = executor.launch(launch_request(town_files, "alpha", "al-1", "al-wisp-j2"))
    report(reports, "al-wisp-j2")
    ran = polecats.polecat_runtime(executor.active()[0], time.time(), boot_seconds())
    assert ran is not None
    set_back = time.time() - DAYS  # by the wall clock it has not started yet
    timeout = max(ran, 0.01) / 2
    overdue = polecats.overdue_polecats(executor, timeout, set_back, boot_seconds())
    assert [p.id for p in overdue] == [polecat.id]


def test_budget_spend_set_back_by_a_day_holds_at_most_two_windows(town_dir):
    town = Town(town_dir)
    window, now = 3600.0, time.time()
    kept.record_launch(town, rig="alpha", item_id="al-1", context_id="c1", polecat_id="p1", tokens=500,
                       now=now, window=window)
    assert kept.spend(town, now, window).town == 500
    assert kept.spend(town, now - window / 2, window).town == 500  # set back a little: still charged
    assert kept.spend(town, now - 86400, window).town == 0  # set back a day: not held for a day and an hour
    assert kept.spend(town, now + window + 1, window).town == 0


def test_a_throttle_set_back_by_a_day_is_lifted_not_held_for_a_day(town_dir):
    town = Town(town_dir)
    now = time.time()
    kept.set_throttle(town, now + 300, "alpha", "429", "test", now)
    assert [t.rig for t in kept.throttles(town, now + 299)] == ["alpha"]
    assert [t.rig for t in kept.throttles(town, now - 120)] == ["alpha"]  # set back a little: still held
    assert kept.throttles(town, now - 86400) == []  # set back a day: not held for a day and five minutes
    assert kept.throttle_rows(town, now - 86400) == []
    assert kept.throttles(town, now + 300) == []
    [row] = kept.throttle_rows(town, now)
    assert "at_ts" not in row and "until_ts" not in row
