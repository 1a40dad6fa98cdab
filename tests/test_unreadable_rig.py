"""One rig whose files cannot be read is held (``rig-unreadable``); every other rig dispatches as usual."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.scheduler import (
    configure,
    ephemeral_path,
    issues_path,
    item,
    open_contexts,
    sleeper,
    write_items,
)


@pytest.fixture
def slung_dir(cli, rigs, capacity) -> Path:
    """Rigs alpha and beta with two items each, one of each slung; polecats that end at once."""
    capacity(4, batch_size=4)
    configure(cli.town, "executor.command", sleeper(0.1))
    write_items(cli.town, "alpha", [item("al-1"), item("al-2")])
    write_items(cli.town, "beta", [item("be-1"), item("be-2")])
    cli.run("sling", "al-1", "alpha")
    cli.run("sling", "be-1", "beta")
    return cli.town


def test_a_malformed_line_in_one_rigs_log_holds_that_rig_only(cli, slung_dir):
    log = ephemeral_path(slung_dir, "alpha")
    with open(log, "ab") as fh:
        fh.write(b'{"id": "al-wisp-bad", oops}\n')  # complete (it ends in a newline), so not a torn tail
    damaged = log.read_bytes()
    where = f"{log}:2"
    cli.run("sling", "be-2", "beta")  # slinging into another rig still works
    report = cli.json("scheduler", "run")
    assert sorted(row["item_id"] for row in report["launched"]) == ["be-1", "be-2"]
    assert any("rig-unreadable" in m and where in m for m in report["messages"]), report["messages"]
    status = cli.json("scheduler", "status")
    assert where in status["unreadable"]["alpha"]
    assert f"Unreadable: rig alpha held (rig-unreadable): {where}" in cli.run("scheduler", "status").stdout
    patrol = cli.json("patrol", "alpha")
    assert where in patrol["unreadable"]
    assert cli.json("patrol", "beta")["unreadable"] is None
    assert log.read_bytes() == damaged  # nothing of the bad rig rewritten or closed


def test_a_malformed_line_in_one_rigs_items_holds_its_queued_work(cli, slung_dir):
    items = issues_path(slung_dir, "alpha")
    with open(items, "ab") as fh:
        fh.write(b"[1, 2]\n")
    where = f"{items}:3"
    report = cli.json("scheduler", "run")
    assert [row["item_id"] for row in report["launched"]] == ["be-1"]
    [held] = report["held"]
    assert held["item_id"] == "al-1" and held["reason"] == "rig-unreadable" and where in held["detail"]
    assert report["why"]["rig-unreadable"] == 1
    explained = cli.json("scheduler", "explain", "al-1")
    assert [r["code"] for r in explained["reasons"]] == ["rig-unreadable"]
    assert where in explained["reasons"][0]["detail"]
    cli.json("scheduler", "run")  # and again: never closed as missing, no missing clock started
    [context] = open_contexts(slung_dir, "alpha", "al-1")
    assert not json.loads(context["description"]).get("missing_since")


def test_a_torn_last_line_is_still_mended_not_held(cli, slung_dir):
    log = ephemeral_path(slung_dir, "alpha")
    with open(log, "ab") as fh:
        fh.write(b'{"id": "al-wisp-torn", "tit')  # no newline: an interrupted append
    report = cli.json("scheduler", "run")
    assert sorted(row["item_id"] for row in report["launched"]) == ["al-1", "be-1"]
    assert cli.json("scheduler", "status")["unreadable"] == {}


def test_the_views_show_the_held_rig_where_its_row_would_be(cli, slung_dir):
    log = ephemeral_path(slung_dir, "alpha")
    with open(log, "ab") as fh:
        fh.write(b"not json\n")
    rigs = cli.json("snapshot")["rigs"]  # what sluice top and sluice web draw their rig tables from
    held = rigs["alpha"]["error"]
    assert held.startswith("held (rig-unreadable): ") and f"{log}:2" in held
    assert "error" not in rigs["beta"] and rigs["beta"]["queued"] == 1


def test_schedule_next_and_the_daemons_compaction_pass_the_held_rig_by(cli, slung_dir):
    log = ephemeral_path(slung_dir, "alpha")
    with open(log, "ab") as fh:
        fh.write(b"not json\n")
    damaged = log.read_bytes()
    decisions = cli.json("schedule", "next", "--preview", "--limit", "5")
    assert decisions and {d["node_id"][:3] for d in decisions} <= {"al-", "be-"}
    said = cli.run("schedule", "next", "--preview", "--limit", "5").stderr
    assert "rig alpha left out (rig-unreadable)" in said and f"{log}:2" in said  # said, not dropped
    from sluice.scheduler.control import compact_if_long
    from sluice.store.town import Town

    cli.run("sling", "be-2", "beta")  # two lines in beta's log, past compact_at
    configure(slung_dir, "scheduler.compact_at", "1")
    rows = compact_if_long(Town(slung_dir))
    assert [row["rig"] for row in rows] == ["beta"]
    assert log.read_bytes() == damaged
