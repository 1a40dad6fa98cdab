"""One rig whose files cannot be read is held (``rig-unreadable``); every other rig dispatches as usual."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.scheduler import (
    configure,
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


def test_a_torn_last_line_of_the_items_is_skipped_not_held(cli, slung_dir):
    log = issues_path(slung_dir, "alpha")
    with open(log, "ab") as fh:
        fh.write(b'{"id": "al-torn", "tit')  # no newline: an interrupted append
    report = cli.json("scheduler", "run")
    assert sorted(row["item_id"] for row in report["launched"]) == ["al-1", "be-1"]
    assert cli.json("scheduler", "status")["unreadable"] == {}


def test_the_views_show_the_held_rig_where_its_row_would_be(cli, slung_dir):
    log = issues_path(slung_dir, "alpha")
    with open(log, "ab") as fh:
        fh.write(b"not json\n")
    rigs = cli.json("snapshot")["rigs"]  # what sluice top and sluice web draw their rig tables from
    held = rigs["alpha"]["error"]
    assert held.startswith("held (rig-unreadable): ") and f"{log}:3" in held
    assert "error" not in rigs["beta"] and rigs["beta"]["queued"] == 1


def test_schedule_next_passes_the_held_rig_by_and_says_so(cli, slung_dir):
    log = issues_path(slung_dir, "alpha")
    with open(log, "ab") as fh:
        fh.write(b"not json\n")
    damaged = log.read_bytes()
    decisions = cli.json("schedule", "next", "--preview", "--limit", "5")
    assert decisions and {d["node_id"][:3] for d in decisions} <= {"be-"}
    said = cli.run("schedule", "next", "--preview", "--limit", "5").stderr
    assert "rig alpha left out (rig-unreadable)" in said and f"{log}:3" in said  # said, not dropped
    assert log.read_bytes() == damaged
