"""Run records from Ray polecats, against the suite's real local Ray head."""

from __future__ import annotations

import json
import sys

import pytest

from helpers.scheduler import configure, fields, item, open_contexts, wait_for, write_items
from sluice.executors import get_executor
from sluice.scheduler.launch.dispatch import run_cycle
from sluice.scheduler.launch.sling import SlingOptions, sling
from sluice.store.database import runs as runlog
from sluice.store.files.town import Town

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # one Ray head for all of them

BY_TITLE = ("import os, sys; print('working on', os.environ['SLUICE_ITEM_ID']);"
            " sys.exit(int(sys.argv[1].split()[-1]))")


def queue(town, rig, *records) -> None:
    write_items(town, rig, list(records))
    result = sling(Town(town), [*(r["id"] for r in records), rig], SlingOptions())
    assert result.ok, result.errors


def cycle(town):
    return run_cycle(Town(town))


def records(town) -> list[dict]:
    return list(runlog.read_runs(Town(town)).values())


def test_ray_polecats_end_as_run_records_with_their_outcome(cli, rig, ray_cluster):
    configure(cli.town, "scheduler.max_polecats", "4")
    configure(cli.town, "scheduler.batch_size", "4")
    configure(cli.town, "executor.kind", "ray")
    configure(cli.town, "executor.ray.address", ray_cluster.address)
    configure(cli.town, "executor.command", json.dumps([sys.executable, "-c", BY_TITLE, "{title}"]))
    queue(cli.town, "alpha", item("al-ok", title="exit 0"), item("al-bad", title="exit 3"),
          item("al-slow", title="exit 75"))
    ray = get_executor(Town(cli.town))
    try:
        assert cycle(cli.town).dispatched == 3
        wait_for(lambda: not ray.active(), timeout=120)
    finally:
        for polecat in ray.active():
            ray.stop(polecat.id)
    cycle(cli.town)
    outcomes = {r["item_id"]: (r["outcome"], r["exit_code"]) for r in records(cli.town)}
    assert outcomes == {"al-ok": ("ok", 0), "al-bad": ("failed", 3), "al-slow": ("throttled", 75)}
    assert all(r["runtime_seconds"] is not None for r in records(cli.town))
    assert [fields(c)["work_bead_id"] for c in open_contexts(cli.town, "alpha")] == ["al-slow"]
