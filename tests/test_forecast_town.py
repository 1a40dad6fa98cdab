"""`scheduler forecast` on a real town: the queue, the run log and the caps as sluice keeps them."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from helpers import Cli, make_repo
from helpers.forecast import forecast_town, record
from sluice.store.database import runs as log


@pytest.fixture
def forecast_cli(cli, tmp_path) -> Cli:
    """The CLI over the forecast town of tests/helpers/forecast.py: rig be, one polecat at a time."""
    return forecast_town(cli, tmp_path)


def history(cli, runtime: float, count: int, labels=(), **extra) -> None:
    from sluice.api import open_town

    files = open_town(cli.town).files
    log.append(files, [{"run_id": f"r{runtime:g}-{n}", "polecat_id": f"pc-{n}", "item_id": f"be-old{n}",
                        "rig": "be", "started_at": "2026-11-30T20:00:00Z", "ended_at": "2026-11-30T20:10:00Z",
                        "runtime_seconds": runtime, "exit_code": 0, "outcome": "ok", "tokens_estimated": 100,
                        "tokens_used": 400 + n, "labels": list(labels), "touches": [], "attempt": 1, **extra}
                       for n in range(count)])


def seconds(at: str) -> float:
    return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()


def test_a_learned_runtime_spaces_the_queue_under_a_cap_of_one(forecast_cli):
    history(forecast_cli, 600.0, 6)
    for item in ("be-1", "be-2", "be-4"):
        forecast_cli.run("sling", item)
    out = forecast_cli.json("scheduler", "forecast")
    first, second, blocked = out["items"]
    assert first["basis"]["level"] == "rig" and first["basis"]["samples"] == 6
    assert (first["runtime_p50"], first["tokens_p50"]) == (600.0, 402)
    assert seconds(second["start_at"]) >= seconds(first["done_at"])  # one slot: strictly one after another
    assert (blocked["item_id"], blocked["start_at"], blocked["why"]) == ("be-4", None, "blocked")
    assert out["drain_at"] == second["done_at"] and out["daemon"]["running"] is False
    assert "be-2" in forecast_cli.run("scheduler", "forecast").stdout


def test_with_no_history_the_item_estimate_then_the_default_speaks(forecast_cli):
    forecast_cli.run("sling", "be-3")
    forecast_cli.run("sling", "be-1")
    by_id = {row["item_id"]: row for row in forecast_cli.json("scheduler", "forecast")["items"]}
    assert (by_id["be-3"]["runtime_p50"], by_id["be-3"]["basis"]["level"]) == (300.0, "estimated_minutes")
    assert (by_id["be-1"]["runtime_p50"], by_id["be-1"]["basis"]["level"]) == (900.0, "default")


def test_a_paused_town_starts_nothing_and_limit_cuts_the_rows(forecast_cli):
    forecast_cli.run("sling", "be-1")
    forecast_cli.run("sling", "be-2")
    forecast_cli.run("scheduler", "pause")
    out = forecast_cli.json("scheduler", "forecast", "--limit", "1")
    assert out["items_total"] == 2 and len(out["items"]) == 1
    assert (out["items"][0]["start_at"], out["items"][0]["why"]) == (None, "paused")


def test_runs_of_the_items_kind_speak_before_the_rigs(forecast_cli):
    history(forecast_cli, 600.0, 6)
    history(forecast_cli, 60.0, 5, labels=["quick"], issue_type="task")
    forecast_cli.run("sling", "be-1")
    row = forecast_cli.json("scheduler", "forecast")["items"][0]
    assert row["basis"] == {"level": "rig+type", "samples": 5, "kind": "be/task"}
    assert row["runtime_p50"] == 60.0


def test_a_live_daemon_sets_the_ticks_and_a_stale_heartbeat_is_no_daemon(forecast_cli):
    from sluice.api import open_town
    from sluice.scheduler.launch.runs import stamp
    from sluice.store.database.state import write_heartbeat

    forecast_cli.run("sling", "be-1")
    town = open_town(forecast_cli.town).files
    now = datetime.now().timestamp()
    write_heartbeat(town, {"pid": 1, "interval": 60.0, "last_tick_at": stamp(now - 20)})
    out = forecast_cli.json("scheduler", "forecast")
    assert out["daemon"] == {"running": True, "interval": 60.0}
    assert abs(seconds(out["items"][0]["start_at"]) - (now + 40)) < 0.01  # the next tick, 40 s from now
    write_heartbeat(town, {"pid": 1, "interval": 60.0, "last_tick_at": stamp(now - 3600)})
    assert forecast_cli.json("scheduler", "forecast")["daemon"] == {"running": False, "interval": 180.0}


def test_ticks_come_as_far_apart_as_the_heartbeat_shows_not_closer_than_the_interval(forecast_cli):
    from sluice.api import open_town
    from sluice.scheduler.launch.runs import stamp
    from sluice.store.database.state import write_heartbeat

    forecast_cli.run("sling", "be-1")
    now = datetime.now().timestamp()
    # Eleven ticks in 100 s at an interval of 6 s: each tick took 4 s of its own, so ticks come 10 s apart.
    write_heartbeat(open_town(forecast_cli.town).files, {"pid": 1, "interval": 6.0,
                                                         "started_at": stamp(now - 102), "ticks": 11,
                                                         "last_tick_at": stamp(now - 2)})
    out = forecast_cli.json("scheduler", "forecast")
    assert out["daemon"] == {"running": True, "interval": 10.0}
    assert abs(seconds(out["items"][0]["start_at"]) - (now + 8)) < 0.01


# -- the rules admission applies, read from the same config --------------------------------------


def rules_town(cli, tmp_path, items):
    export = tmp_path / "rules.jsonl"
    export.write_text("".join(json.dumps(r) + "\n" for r in items))
    cli.run("rig", "add", "ru", str(make_repo(tmp_path / "repos" / "ru")), "--items", str(export))
    for key, value in (("scheduler.max_polecats", "4"), ("scheduler.batch_size", "4")):
        cli.run("config", "set", key, value)
    return cli


def ru_history(cli, runtime: float, count: int) -> None:
    from sluice.api import open_town

    log.append(open_town(cli.town).files,
               [{"run_id": f"ru-{n}", "polecat_id": f"pc-{n}", "item_id": f"ru-old{n}", "rig": "ru",
                 "started_at": "2026-11-30T20:00:00Z", "ended_at": "2026-11-30T20:10:00Z",
                 "runtime_seconds": runtime, "outcome": "ok", "labels": [], "touches": [], "attempt": 1}
                for n in range(count)])


def starts_of(cli) -> dict[str, float | None]:
    out = cli.json("scheduler", "forecast")
    return {row["item_id"]: (seconds(row["start_at"]) if row["start_at"] else None) for row in out["items"]}


def test_label_caps_and_the_overlap_gate_are_replayed_from_the_config(cli, tmp_path):
    items = [record("ru-1", labels=["db"], metadata={"touches": ["src/api/**"]}),
             record("ru-2", labels=["db"]), record("ru-3", metadata={"touches": ["src/api/auth.py"]}),
             record("ru-4")]
    town = rules_town(cli, tmp_path, items)
    town.run("config", "set", "scheduler.label_caps.db", "1")
    ru_history(town, 600.0, 5)
    town.run("sling", "ru-1", "ru-2", "ru-3", "ru-4", "ru")
    at = starts_of(town)
    assert at["ru-1"] == at["ru-4"]  # both go at the first tick
    assert at["ru-2"] >= at["ru-1"] + 600 and at["ru-3"] >= at["ru-1"] + 600  # label cap, overlap


def test_a_token_budget_is_replayed_with_the_ledgers_launches(cli, tmp_path):
    items = [record(f"ru-{n}", metadata={"estimated_tokens": 600}) for n in (1, 2)]
    town = rules_town(cli, tmp_path, items)
    town.run("config", "set", "scheduler.token_budget", "1000")
    town.run("config", "set", "scheduler.budget_window", "2h")
    ru_history(town, 60.0, 5)
    town.run("sling", "ru-1", "ru-2", "ru")
    at = starts_of(town)
    assert at["ru-2"] >= at["ru-1"] + 7200  # the second waits for the first's charge to leave the window


def test_a_failed_launch_waits_out_its_backoff(cli, tmp_path):
    town = rules_town(cli, tmp_path, [record("ru-1"), record("ru-2")])
    town.run("config", "set", "executor.command", json.dumps(["/nonexistent/polecat-binary"]))
    town.run("config", "set", "scheduler.retry_base", "10m")
    town.run("sling", "ru-1", "ru")
    before = datetime.now().timestamp()
    assert town.json("scheduler", "run")["failed"] == 1
    assert starts_of(town)["ru-1"] >= before + 600  # not at the next tick: when its backoff has passed
