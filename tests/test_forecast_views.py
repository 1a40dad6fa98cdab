"""The forecast where operators look: `scheduler list` rows, `explain`, `status`, the views, budget fit."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from helpers import Cli
from helpers.forecast import forecast_town
from helpers.scheduler import configure, sleeper
from sluice.store.database import runs as log


@pytest.fixture
def forecast_cli(cli, tmp_path) -> Cli:
    """The CLI over the forecast town of tests/helpers/forecast.py: rig be, one polecat at a time."""
    return forecast_town(cli, tmp_path)


def history(cli, runtime: float, count: int, tokens: int = 400) -> None:
    from sluice.api import open_town

    files = open_town(cli.town).files
    log.append(files, [{"run_id": f"r{runtime:g}-{n}", "polecat_id": f"pc-{n}", "item_id": f"be-old{n}",
                        "rig": "be", "issue_type": "task", "started_at": "2026-11-30T20:00:00Z",
                        "ended_at": "2026-11-30T20:10:00Z", "runtime_seconds": runtime, "exit_code": 0,
                        "outcome": "ok", "tokens_estimated": 100, "tokens_used": tokens + n, "labels": [],
                        "touches": [], "attempt": 1}
                       for n in range(count)])


def seconds(at: str) -> float:
    return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()


def test_list_rows_carry_when_each_item_starts_and_finishes(forecast_cli):
    history(forecast_cli, 600.0, 6)
    for item in ("be-1", "be-2", "be-4"):
        forecast_cli.run("sling", item)
    first, second, blocked = forecast_cli.json("scheduler", "list")
    assert seconds(first["done_at"]) - seconds(first["start_at"]) == pytest.approx(600.0)
    assert seconds(second["start_at"]) >= seconds(first["done_at"])  # a cap of one: one after the other
    assert (blocked["id"], blocked["start_at"], blocked["done_at"]) == ("be-4", None, None)
    [page] = forecast_cli.json("scheduler", "list", "--limit", "1", "--offset", "1")
    assert page["id"] == "be-2" and seconds(page["start_at"]) >= seconds(first["done_at"])
    header = forecast_cli.run("scheduler", "list").stdout.splitlines()[2]
    assert "START≈" in header and "DONE≈" in header
    assert "START≈" not in forecast_cli.run("scheduler", "status").stdout  # status stays cheap: no forecast


def test_explain_says_when_the_item_would_start_and_from_what(forecast_cli):
    history(forecast_cli, 600.0, 6)
    for item in ("be-1", "be-2", "be-4"):
        forecast_cli.run("sling", item)
    out = forecast_cli.json("scheduler", "explain", "be-2")
    assert seconds(out["done_at"]) - seconds(out["start_at"]) == pytest.approx(600.0)
    assert out["basis"] == {"level": "rig+type", "samples": 6, "kind": "be/task"}
    assert (out["runtime_p50"], out["done_p90_at"]) == (600.0, out["done_at"])
    text = forecast_cli.run("scheduler", "explain", "be-2").stdout
    start, done = out["start_at"][11:16], out["done_at"][11:16]
    line = next(line for line in text.splitlines() if "would start" in line)
    assert start in line and done in line and line.endswith("from 6 runs of be/task")
    blocked = forecast_cli.json("scheduler", "explain", "be-4")
    assert (blocked["start_at"], blocked["eta_why"]) == (None, "blocked")
    assert "no start forecast: blocked" in forecast_cli.run("scheduler", "explain", "be-4").stdout
    alone = forecast_cli.json("scheduler", "explain", "be-3")  # not queued: nothing to forecast
    assert (alone["queued"], alone["start_at"], alone["basis"]) == (False, None, None)


def test_the_api_and_the_mcp_tool_answer_the_same_fields(forecast_cli):
    import asyncio

    from sluice.api import open_town
    from sluice.surfaces.mcp_server import build_server

    history(forecast_cli, 600.0, 6)
    forecast_cli.run("sling", "be-1")
    api = open_town(forecast_cli.town)
    explained = api.explain("be-1")
    assert explained.start_at is not None and explained.basis["samples"] == 6
    assert api.list().entries[0].done_at is not None
    server = build_server(forecast_cli.town)

    def tool(name: str, args: dict):
        return json.loads(asyncio.run(server.call_tool(name, args)).content[0].text)

    listed, told = tool("sluice_scheduler_list", {}), tool("sluice_scheduler_explain", {"item_id": "be-1"})
    assert listed[0]["done_at"] is not None
    assert told["basis"] == explained.basis and told["start_at"] is not None


def test_status_shows_the_drain_of_the_last_forecast_kept_and_its_age(forecast_cli):
    forecast_cli.run("sling", "be-1")
    # none made yet: status replays nothing
    assert forecast_cli.json("scheduler", "status")["forecast"] is None
    assert "Drains:" not in forecast_cli.run("scheduler", "status").stdout
    made = forecast_cli.json("scheduler", "forecast")
    kept = forecast_cli.json("scheduler", "status")["forecast"]
    assert (kept["at"], kept["drain_at"], kept["drain_p90_at"]) == (made["at"], made["drain_at"],
                                                                    made["drain_p90_at"])
    assert kept["items_total"] == 1
    shown = forecast_cli.run("scheduler", "status").stdout.splitlines()
    line = next(line for line in shown if "Drains:" in line)
    assert made["drain_at"][11:16] in line and "forecast" in line and line.endswith(" ago")


def test_a_corrupt_kept_forecast_is_named_and_shown_as_none(forecast_cli):
    from sluice.api import open_town
    from sluice.store.database.forecasts import NAME

    forecast_cli.run("sling", "be-1")
    db = open_town(forecast_cli.town).files.db
    db.keep(NAME, '{"at": "2026-12-01T14:00:00Z", "drain')
    done = forecast_cli.run("scheduler", "status", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["forecast"] is None
    assert str(db.path) in done.stderr and "Traceback" not in done.stderr
    db.keep(NAME, '{"at": 3}')
    done = forecast_cli.run("scheduler", "status")
    assert "not a forecast's head" in done.stderr and "Drains:" not in done.stdout
    forecast_cli.run("scheduler", "forecast")  # a new forecast replaces it
    assert forecast_cli.json("scheduler", "status")["forecast"]["items_total"] == 1


def test_a_daemon_tick_keeps_a_forecast(forecast_cli):
    configure(forecast_cli.town, "executor.command", sleeper(30))
    for item in ("be-1", "be-2"):
        forecast_cli.run("sling", item)
    try:
        forecast_cli.run("daemon", "--once", "--interval", "60")
        kept = forecast_cli.json("scheduler", "status")["forecast"]
        assert kept is not None and kept["items_total"] == 1  # be-1 launched, be-2 left: drains after both
        assert kept["drain_at"] is not None
        forecast_cli.run("daemon", "--once", "--interval", "60")  # the one slot is taken: nothing moved
        assert forecast_cli.json("scheduler", "status")["forecast"] == kept  # an idle tick does not replay
        [polecat] = forecast_cli.json("polecat", "list")
        forecast_cli.run("polecat", "stop", polecat["id"])
        # a run ended and be-2 launched: a new forecast
        forecast_cli.run("daemon", "--once", "--interval", "60")
        again = forecast_cli.json("scheduler", "status")["forecast"]
        assert again["at"] > kept["at"] and again["items_total"] == 0
    finally:
        for polecat in forecast_cli.json("polecat", "list"):
            forecast_cli.run("polecat", "stop", polecat["id"], check=False)


def test_the_views_show_each_rows_times_and_when_the_queue_drains(forecast_cli):
    history(forecast_cli, 600.0, 6)
    for item in ("be-1", "be-2", "be-4"):
        forecast_cli.run("sling", item)
    snap = forecast_cli.json("snapshot")
    assert snap["forecast"]["items_total"] == 3 and snap["forecast"]["drain_at"] is not None
    rows = {row["id"]: row for row in snap["queue"]}
    assert seconds(rows["be-2"]["start_at"]) >= seconds(rows["be-1"]["done_at"])
    assert rows["be-4"]["start_at"] is None
    assert snap["forecast"]["drain_at"] == rows["be-2"]["done_at"]
    page = forecast_cli.json("snapshot", "--limit", "1")
    assert len(page["queue"]) == 1 and page["forecast"]["items_total"] == 3  # the whole queue replayed
    frame = forecast_cli.run("top", "--once").stdout
    assert "drains ≈" in frame and "start≈" in frame
    assert "  queue drains ≈" in forecast_cli.run("snapshot").stdout


def test_a_view_surveys_the_queue_once_for_its_rows_and_their_forecast(forecast_cli, monkeypatch):
    from sluice.api import open_town
    from sluice.scheduler.queue import views as queue_model

    for item in ("be-1", "be-2"):
        forecast_cli.run("sling", item)
    surveys = []
    real = queue_model.survey
    monkeypatch.setattr(queue_model, "survey", lambda *a, **k: surveys.append(1) or real(*a, **k))
    api = open_town(forecast_cli.town)
    for look in (api.snapshot, api.list, lambda: api.explain("be-2"), api.forecast):
        surveys.clear()
        look()
        assert len(surveys) <= 1, look  # once at most: a view that reads the queue's head surveys none


def test_budget_fit_says_whether_p90_tokens_fit_the_window_and_when_room_comes(forecast_cli):
    import time

    from sluice.api import open_town
    from sluice.store.database import admission_state as kept

    history(forecast_cli, 600.0, 6)  # tokens used 400…405: the kind's p90 is 405
    forecast_cli.run("sling", "be-1")
    assert forecast_cli.json("scheduler", "explain", "be-1")["budget"] is None  # no budget: nothing to say
    configure(forecast_cli.town, "scheduler.token_budget", "2000")
    configure(forecast_cli.town, "scheduler.budget_window", "1h")
    charged = time.time() - 600
    kept.record_launch(open_town(forecast_cli.town).files, rig="be", item_id="be-old", context_id="c",
                       polecat_id="p", tokens=1800, now=charged, window=3600)
    fit = forecast_cli.json("scheduler", "explain", "be-1")["budget"]
    assert (fit["tokens_p90"], fit["fits"], fit["remaining"], fit["scope"]) == (405, False, 200, "town")
    assert seconds(fit["room_at"]) == pytest.approx(charged + 3600, abs=1e-3)  # when that launch leaves
    line = next(line for line in forecast_cli.run("scheduler", "explain", "be-1").stdout.splitlines()
                if "budget fit:" in line)
    assert "p90 405 tokens do not fit the 200 left of the town's budget (2000 per 1h); room ≈" in line
    [row] = forecast_cli.json("scheduler", "forecast")["items"]
    assert row["budget"] == fit and row["tokens_p90"] == 405
    assert "(budget: room ≈" in forecast_cli.run("scheduler", "forecast").stdout

    configure(forecast_cli.town, "scheduler.token_budget", "5000")
    assert forecast_cli.json("scheduler", "explain", "be-1")["budget"]["fits"] is True
    # the rig's budget is smaller than the need itself
    configure(forecast_cli.town, "rigs.be.token_budget", "300")
    fit = forecast_cli.json("scheduler", "explain", "be-1")["budget"]
    assert (fit["fits"], fit["scope"], fit["room_at"]) == (False, "be", None)
    text = forecast_cli.run("scheduler", "explain", "be-1").stdout
    assert "exceed rig be's budget (300 per 1h) by themselves" in text


def test_a_forecast_that_cannot_be_kept_still_answers_and_says_so(forecast_cli, monkeypatch):
    from sluice.errors import StorageError
    from sluice.store.database import forecasts

    forecast_cli.run("sling", "be-1")

    def refused(town, head):
        raise StorageError(town.db.path, "cannot write it: No space left on device", 28)

    monkeypatch.setattr(forecasts, "keep", refused)
    done = forecast_cli.run("scheduler", "forecast", "--json")  # in this process: the write is refused
    assert done.returncode == 0 and json.loads(done.stdout)["items_total"] == 1
    assert "the forecast was not kept" in done.stderr and "town.db" in done.stderr
    done = forecast_cli.run("scheduler", "status", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["forecast"] is None


def test_times_and_ages_read_as_people_say_them():
    from sluice.surfaces.output import age_text, basis_text, clock_text

    assert clock_text("2026-12-01T14:05:09Z", today="2026-12-01") == "14:05"
    assert clock_text("2026-12-03T14:05:09Z", today="2026-12-01") == "2026-12-03 14:05"
    assert clock_text(None) == "-"
    assert [age_text(s) for s in (40, 180, 7200, 3 * 86400)] == ["40 s", "3 min", "2 h", "3 days"]
    assert basis_text({"level": "rig+type", "samples": 23, "kind": "api/task"}) == "23 runs of api/task"
    assert basis_text({"level": "town", "samples": 9, "kind": "town"}) == "9 runs of the whole town"
    assert "estimated_minutes" in basis_text({"level": "estimated_minutes", "samples": 0, "kind": ""})


def test_explain_gives_each_queued_item_the_row_the_whole_forecast_gives_it(forecast_cli):
    """explain replays the queue only until its item has started; each item's times, runtimes, basis
    and budget are still those of the whole replay at the same moment (blocked ones too)."""
    from sluice.scheduler.views.forecast import EXPLAINED, explain, forecast
    from sluice.store.files.town import Town

    history(forecast_cli, 600.0, 6)
    for item in ("be-1", "be-2", "be-3", "be-4"):
        forecast_cli.run("sling", item)
    now = datetime.fromisoformat("2026-12-01T12:00:00+00:00").timestamp()
    rows = forecast(Town(forecast_cli.town), now=now)["items"]
    assert [row["item_id"] for row in rows] == ["be-1", "be-2", "be-3", "be-4"]
    assert len({row["start_at"] for row in rows}) == 4  # one after another (be-4 blocked: None)
    for row in rows:
        explained = explain(Town(forecast_cli.town), row["item_id"], now=now)
        assert {key: explained[key] for key in EXPLAINED} == {key: row[key] for key in EXPLAINED}
        assert explained.get("eta_why") == row.get("why")


def test_explain_of_a_running_item_says_when_it_should_end(forecast_cli):
    configure(forecast_cli.town, "executor.command", sleeper(30))
    history(forecast_cli, 600.0, 6)
    forecast_cli.run("sling", "be-1")
    try:
        forecast_cli.run("scheduler", "run")
        out = forecast_cli.json("scheduler", "explain", "be-1")
        assert out["queued"] is False and out["running"] is True
        assert 500 < seconds(out["done_at"]) - seconds(out["start_at"]) <= 600.0 + 30  # its kind's 600 s
        assert out["basis"] == {"level": "rig+type", "samples": 6, "kind": "be/task"}
        line = next(line for line in forecast_cli.run("scheduler", "explain", "be-1").stdout.splitlines()
                    if "running since" in line)
        assert out["done_at"][11:16] in line and line.endswith("from 6 runs of be/task")
    finally:
        for polecat in forecast_cli.json("polecat", "list"):
            forecast_cli.run("polecat", "stop", polecat["id"], check=False)
