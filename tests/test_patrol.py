"""The witness patrol on a town with stale, duplicate, failing and orphaned contexts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import Cli
from helpers.scheduler import (
    configure,
    issues_path,
    item,
    open_contexts,
    put_records,
    town_with_rigs,
    tree_hash,
    write_items,
)

KEYS = {"rig", "queued", "ready", "blocked", "failing", "stale", "duplicates", "orphaned", "held", "polecats",
        "merge_queue", "executor_error", "events_missing", "source_stale", "unreadable", "other_towns",
        "fixed"}


def _append_copy(town: Path, rig: str, context: dict, new_id: str, **changes) -> dict:
    """A second context record written by hand (as a racing or damaged writer could leave it)."""
    fields = json.loads(context["description"])
    fields["enqueued_at"] = "2099-01-01T00:00:00.000000Z"  # enqueued later than the original
    copy = {**context, "id": new_id, "description": json.dumps(fields), **changes}
    put_records(town, rig, [copy])
    return copy


@pytest.fixture
def troubled(cli: Cli, tmp_path: Path) -> dict:
    """Rig ``api`` with one context of every kind, plus a healthy rig ``web``."""
    town_with_rigs(cli, tmp_path, ("api", "api"), ("web", "web"))
    configure(cli.town, "scheduler.max_polecats", "2")
    configure(cli.town, "scheduler.missing_grace", "0")  # a vanished item is orphaned at once, not held
    write_items(cli.town, "api", [
        item("api-fail", "always fails", priority=0),
        item("api-done", "finished elsewhere"),
        item("api-dup", "slung twice"),
        item("api-gone", "will vanish"),
        item("api-wait", "waits", deps=[("blocks", "api-dup")]),
        item("api-mr1", "merge one", issue_type="merge-request"),
        item("api-mr2", "merge two", issue_type="merge-request", status="in_progress"),
    ])
    write_items(cli.town, "web", [item("web-ok", "fine")])
    cli.run("sling", "api-fail", "api-done", "api-dup", "api-gone", "api-wait", "api")
    cli.run("sling", "web-ok", "web")

    # failing: a launch that cannot start, once (the breaker needs three)
    configure(cli.town, "executor.command", '["/nonexistent/agent", "{item_id}"]')
    cli.run("scheduler", "run", "--batch", "1")
    # stale: the item was closed by someone else after it was slung
    cli.run("item", "close", "api-done")
    # duplicate: a second open context for api-dup
    [dup] = open_contexts(cli.town, "api", "api-dup")
    _append_copy(cli.town, "api", dup, "api-wisp-dupe")
    # orphaned: the item of api-gone's context disappears from the store
    lines = issues_path(cli.town, "api").read_text().splitlines()
    issues_path(cli.town, "api").write_text("".join(ln + "\n" for ln in lines if '"api-gone"' not in ln))
    return {"dup": dup["id"]}


def test_patrol_reports_every_kind(cli: Cli, troubled: dict):
    report = cli.json("patrol", "api")
    assert set(report) == KEYS
    assert report["fixed"] == [] and report["executor_error"] is None
    assert report["rig"] == "api"
    queued = {row["item_id"]: row for row in report["queued"]}
    assert set(queued) == {"api-fail", "api-dup", "api-wait"}
    assert queued["api-wait"]["blocked"] is True and queued["api-dup"]["blocked"] is False
    assert report["ready"] == 2 and report["blocked"] == 1

    [failing] = report["failing"]
    assert failing["item_id"] == "api-fail" and failing["dispatch_failures"] == 1
    assert "/nonexistent/agent" in failing["last_failure"]
    # next try: retry_base (30s default) after the failure, as `scheduler list` shows it too
    [listed] = [row for row in cli.json("scheduler", "list") if row["id"] == "api-fail"]
    assert failing["retry_at"] == listed["retry_at"] and failing["retry_at"] > failing["last_failure_at"]

    assert [(r["item_id"], r["reason"]) for r in report["stale"]] == [("api-done", "stale-work-item")]
    assert [r["context_id"] for r in report["duplicates"]] == ["api-wisp-dupe"]
    assert [(r["item_id"], r["reason"]) for r in report["orphaned"]] == [("api-gone", "invalid-work-item")]
    assert report["merge_queue"] == {"queued": 1, "running": 1}
    assert report["polecats"] == []


def test_patrol_is_per_rig(cli: Cli, troubled: dict):
    web = cli.json("patrol", "web")
    assert [r["item_id"] for r in web["queued"]] == ["web-ok"]
    assert web["stale"] == web["duplicates"] == web["orphaned"] == web["failing"] == []


def test_fix_closes_only_stale_and_duplicates_and_never_touches_items(cli: Cli, troubled: dict):
    items_before = {rig: issues_path(cli.town, rig).read_bytes() for rig in ("api", "web")}
    report = cli.json("patrol", "api", "--fix")
    assert set(report) == KEYS  # the same keys with and without --fix
    assert sorted((r["reason"]) for r in report["fixed"]) == ["duplicate", "stale-work-item"]
    assert {rig: issues_path(cli.town, rig).read_bytes() for rig in ("api", "web")} == items_before

    after = cli.json("patrol", "api")
    assert after["stale"] == [] and after["duplicates"] == []
    assert [r["item_id"] for r in after["orphaned"]] == ["api-gone"]  # left for a person
    assert [r["item_id"] for r in after["failing"]] == ["api-fail"]  # still queued, still failing
    assert {r["item_id"] for r in after["queued"]} == {"api-fail", "api-dup", "api-wait"}
    # the oldest context of the duplicated item survives
    assert [c["id"] for c in open_contexts(cli.town, "api", "api-dup")] == [troubled["dup"]]


def test_patrol_without_fix_changes_nothing(cli: Cli, troubled: dict):
    before = tree_hash(cli.town / ".sluice" / "rigs")
    cli.json("patrol", "api")
    assert tree_hash(cli.town / ".sluice" / "rigs") == before


def test_patrol_sees_running_polecats(cli: Cli, troubled: dict, memory):
    cli.run("scheduler", "run")
    polecats = cli.json("patrol", "api")["polecats"]
    assert polecats and all(p["state"] == "running" for p in polecats)
    assert {p["item_id"] for p in polecats} <= {"api-fail", "api-dup"}


def test_patrol_text_and_unknown_rig(cli: Cli, troubled: dict):
    text = cli.run("patrol", "api").stdout
    assert text.startswith("patrol api: 2 ready, 1 blocked")
    assert "orphaned" in text and "duplicates" in text
    done = cli.run("patrol", "nowhere", check=False)
    assert done.returncode == 1 and "unknown rig" in done.stderr and "Traceback" not in done.stderr
