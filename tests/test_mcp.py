"""The MCP server, driven through the SDK's real stdio client against a spawned `sluice mcp`."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from helpers import Cli
from helpers.scheduler import blank_etas, without_etas

TOOLS = {
    "sluice_schedule_next", "sluice_schedule_status", "sluice_schedule_policy", "sluice_sling",
    "sluice_scheduler_status", "sluice_scheduler_list", "sluice_scheduler_run", "sluice_scheduler_pause",
    "sluice_scheduler_resume", "sluice_scheduler_clear", "sluice_patrol", "sluice_scheduler_explain",
    "sluice_scheduler_throttle", "sluice_scheduler_broken", "sluice_runs", "sluice_feed",
    "sluice_scheduler_promote",
}  # fmt: skip


def session_calls(env: dict, calls: list[tuple[str, dict]], cwd: Path | None = None, after=None):
    """Start `sluice mcp`, list its tools, make each call; returns (tool names, results).

    ``after(call, result)``, when given, runs after each call, while the server still serves.
    """

    async def go():
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "sluice", "mcp"], env={**os.environ, **env},
            cwd=str(cwd) if cwd else None,
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            names = {tool.name for tool in (await session.list_tools()).tools}
            results = []
            for name, args in calls:
                result = await session.call_tool(name, args)
                text = result.content[0].text if result.content else ""
                results.append((result.is_error, text))
                if after is not None:
                    after((name, args), results[-1])
            return names, results

    return asyncio.run(asyncio.wait_for(go(), timeout=120))


def payload(result: tuple[bool, str]):
    is_error, text = result
    assert not is_error, text
    return json.loads(text)


@pytest.fixture
def queued(cli: Cli, rig: str) -> dict:
    """A deferred town with two items, one slung."""
    cli.run("config", "set", "scheduler.max_polecats", "2")
    sleeper = [sys.executable, "-c", "import time; time.sleep(1)"]
    cli.run("config", "set", "executor.command", json.dumps(sleeper))
    first = cli.json("item", "create", rig, "--title", "first", "--priority", "1")
    second = cli.json("item", "create", rig, "--title", "second", "--priority", "2")
    cli.run("sling", first["id"], rig)
    return {"first": first["id"], "second": second["id"]}


def test_lists_every_tool_and_answers_as_the_cli(cli: Cli, queued: dict):
    env = {"SLUICE_TOWN": str(cli.town)}
    names, results = session_calls(env, [
        ("sluice_scheduler_list", {}),
        ("sluice_schedule_next", {"limit": 2, "preview": True}),
        ("sluice_schedule_policy", {"action": "show"}),
        ("sluice_patrol", {"rig": "alpha"}),
    ])
    assert names >= TOOLS
    assert without_etas(payload(results[0])) == without_etas(cli.json("scheduler", "list"))
    decisions = payload(results[1])
    preview = cli.json("schedule", "next", "--limit", "2", "--preview")
    strip = lambda ds: [{k: v for k, v in d.items() if k not in ("decision_id", "at")} for d in ds]  # noqa: E731
    assert strip(decisions) == strip(preview)
    assert payload(results[2]) == cli.json("schedule", "policy", "show")
    assert payload(results[3]) == cli.json("patrol", "alpha")
    # Not only equal JSON: the very text `--json` prints (compact, one line).
    assert blank_etas(results[0][1] + "\n") == blank_etas(cli.run("scheduler", "list", "--json").stdout)
    assert results[2][1] + "\n" == cli.run("schedule", "policy", "show", "--json").stdout


def test_each_tool_call_works(cli: Cli, queued: dict):
    env = {"SLUICE_TOWN": str(cli.town)}
    epic = cli.json("item", "create", "alpha", "--title", "a graph", "--type", "epic", "--priority", "4")
    epic = epic["id"]
    _names, results = session_calls(env, [
        ("sluice_sling", {"item_ids": [queued["second"]], "rig": "alpha", "dry_run": True}),
        ("sluice_sling", {"item_ids": [queued["second"]], "rig": "alpha"}),
        ("sluice_scheduler_status", {}),
        ("sluice_scheduler_run", {"dry_run": True}),
        ("sluice_scheduler_pause", {}),
        ("sluice_scheduler_run", {}),
        ("sluice_scheduler_resume", {}),
        ("sluice_schedule_policy", {"action": "set", "priority": 2, "graph_id": epic}),
        ("sluice_schedule_next", {"limit": 1}),
        ("sluice_schedule_status", {"recent": 5}),
        ("sluice_scheduler_clear", {"item_id": queued["second"]}),
        ("sluice_scheduler_clear", {}),
        ("sluice_patrol", {"rig": "alpha", "fix": True}),
        ("sluice_schedule_policy", {"action": "unset", "graph_id": epic}),
    ])
    dry = payload(results[0])
    assert dry["dry_run"] is True and dry["scheduled"][0]["item_id"] == queued["second"]
    assert payload(results[1])["scheduled"][0]["item_id"] == queued["second"]
    status = payload(results[2])
    assert status["queued_total"] == 2 and status["mode"] == "deferred"
    assert payload(results[3])["dry_run"] is True
    assert payload(results[4])["paused"] is True
    assert payload(results[5])["dispatched"] == 0  # paused: nothing launched
    assert payload(results[6])["paused"] is False
    assert payload(results[7])["graph_overrides"][epic]["priority"] == 2.0
    [decision] = payload(results[8])
    assert decision["node_id"] == queued["first"]
    assert payload(results[9])["recent_decisions"][0]["decision_id"] == decision["decision_id"]
    assert payload(results[10])["cleared"] == 1
    assert payload(results[11])["cleared"] == 1
    assert payload(results[12])["rig"] == "alpha"
    assert payload(results[13])["graph_overrides"] == {}


BAD_CALLS = [
    ("sluice_scheduler_run", {"dry_run": "false"}),  # a string is not a boolean
    ("sluice_schedule_next", {"limit": "2"}),
    ("sluice_schedule_next", {"limit": 0}),
    ("sluice_schedule_policy", {"action": "set", "merge_queue_threshold": 0}),
    ("sluice_schedule_policy", {"action": "explode"}),
    ("sluice_schedule_policy", {"action": "set", "priority": float("nan")}),  # as the CLI refuses it
    ("sluice_schedule_policy", {"action": "set", "cost": float("inf")}),
    ("sluice_schedule_policy", {"action": "set", "merge_pressure_penalty": float("-inf")}),
    ("sluice_schedule_policy", {"action": "set", "priority": 2, "graph_id": "al-nope"}),
    ("sluice_schedule_policy", {"action": "unset"}),
    ("sluice_schedule_policy", {"action": "unset", "graph_id": "al-never-overridden"}),
    ("sluice_sling", {"item_ids": ["al-nope"], "rig": "alpha"}),
    ("sluice_patrol", {"rig": "no-such-rig"}),
]
STATUS = ("sluice_scheduler_status", {})


def test_bad_arguments_are_tool_errors_and_the_server_survives(cli: Cli, queued: dict):
    """Every bad call is a tool error, and the one server goes on serving after each, with nothing changed."""
    env = {"SLUICE_TOWN": str(cli.town)}
    seen: list[tuple] = []

    def check(call, result):
        is_error, text = result
        if call == STATUS:
            assert payload(result)["queued_total"] == 1, seen[-1]  # still serving, nothing changed
        else:
            assert is_error and text, (call, text)
            assert "Traceback" not in text, (call, text)
        assert not (cli.town / ".sluice" / "schedule" / "policy.json").exists(), call
        seen.append(call)

    session_calls(env, [c for call in BAD_CALLS for c in (call, STATUS)], after=check)
    assert seen == [c for call in BAD_CALLS for c in (call, STATUS)]


def test_unknown_arguments_are_refused_never_ignored(cli: Cli, queued: dict):
    """A misspelt `preview` must not turn an advisory call into one that records decisions."""
    env = {"SLUICE_TOWN": str(cli.town)}
    policy_file = cli.town / ".sluice" / "schedule" / "policy.json"
    _names, results = session_calls(env, [
        ("sluice_schedule_next", {"preveiw": True}),
        ("sluice_schedule_policy", {"action": "set", "weight": 3}),
        ("sluice_schedule_policy", {"action": "show", "priority": 3}),  # show changes nothing: not silently
        ("sluice_scheduler_clear", {"item": queued["first"]}),  # would clear every context if ignored
    ])
    for (is_error, text), word in zip(results, ["preveiw", "weight", "show", "item"], strict=True):
        assert is_error and word in text, text
    decisions_file = cli.town / ".sluice" / "schedule" / "decisions.jsonl"
    assert not decisions_file.exists() and not policy_file.exists()
    assert cli.json("scheduler", "status")["queued_total"] == 1


def test_a_file_the_system_cannot_read_is_a_readable_tool_error(cli: Cli, queued: dict):
    log = cli.town / ".sluice" / "schedule" / "decisions.jsonl"
    log.mkdir(parents=True)  # a directory where the file belongs
    _names, results = session_calls({"SLUICE_TOWN": str(cli.town)}, [("sluice_schedule_status", {})])
    is_error, text = results[0]
    assert is_error and f"{log}: Is a directory" in text


def test_the_published_schemas_refuse_extra_arguments(cli: Cli):
    from sluice.surfaces.mcp_server import build_server

    async def schemas():
        return {tool.name: tool.input_schema for tool in await build_server(str(cli.town)).list_tools()}

    published = asyncio.run(schemas())
    assert set(published) >= TOOLS
    for name, schema in published.items():
        assert schema.get("additionalProperties") is False, name


def test_string_false_never_runs_a_real_cycle(cli: Cli, queued: dict):
    env = {"SLUICE_TOWN": str(cli.town)}
    _names, results = session_calls(env, [("sluice_scheduler_run", {"dry_run": "false"})])
    assert results[0][0]
    assert cli.json("scheduler", "status")["queued_total"] == 1


def test_missing_town_is_a_tool_error(tmp_path: Path):
    lonely = tmp_path / "nowhere"
    lonely.mkdir()
    env = {"SLUICE_TOWN": ""}
    names, results = session_calls(env, [("sluice_scheduler_status", {}), ("sluice_schedule_status", {})],
                                   cwd=lonely)
    assert names >= TOOLS
    for is_error, text in results:
        assert is_error and "no sluice town found" in text


def test_the_text_null_is_an_id_not_a_missing_argument(cli: Cli, queued: dict):
    """The SDK turns "null" into None for optional strings; clear must not read it as "everything"."""
    env = {"SLUICE_TOWN": str(cli.town)}
    _names, results = session_calls(env, [("sluice_scheduler_clear", {"item_id": "null"})])
    is_error, text = results[0]
    assert is_error and "no item 'null'" in text  # an id no rig has, not "every item"
    assert cli.json("scheduler", "status")["queued_total"] == 1


def test_admission_tools_answer_as_the_cli(cli: Cli, queued: dict):
    env = {"SLUICE_TOWN": str(cli.town)}
    _names, results = session_calls(env, [
        ("sluice_scheduler_throttle", {"until": "1h", "rig": "alpha", "reason": "quota"}),
        ("sluice_scheduler_explain", {"item_id": queued["first"]}),
        ("sluice_scheduler_broken", {}),
        ("sluice_scheduler_throttle", {"until": "soon"}),
        ("sluice_scheduler_explain", {"item_id": ""}),
        ("sluice_scheduler_throttle", {"clear": True, "rig": "alpha"}),
    ])
    assert payload(results[0])["reason"] == "quota"
    explained = payload(results[1])
    assert [r["code"] for r in explained["reasons"]] == ["throttled"]
    same = cli.json("scheduler", "explain", queued["first"])  # the throttle is lifted by now
    assert set(same) == set(explained) and same["context_id"] == explained["context_id"]
    assert explained["queued"] and not explained["would_dispatch"] and same["would_dispatch"]
    assert payload(results[2]) == cli.json("scheduler", "broken") == []
    assert results[3][0] and "neither a duration" in results[3][1]
    assert results[4][0]
    assert payload(results[5])["cleared"] is True


def test_runs_and_feed_tools_answer_as_the_cli(cli: Cli, queued: dict):
    env = {"SLUICE_TOWN": str(cli.town)}
    _names, results = session_calls(env, [
        ("sluice_runs", {}),
        ("sluice_feed", {"kind": "enqueued"}),
        ("sluice_runs", {"outcome": "exploded"}),
        ("sluice_feed", {"since": "soon"}),
    ])
    assert payload(results[0]) == cli.json("runs") == []
    assert payload(results[1]) == cli.json("feed", "--kind", "enqueued") and payload(results[1])
    assert results[2][0] and "not one of" in results[2][1]
    assert results[3][0] and "not a duration" in results[3][1]


def test_values_beyond_the_bounds_are_tool_errors_that_say_why(cli: Cli, queued: dict):
    env = {"SLUICE_TOWN": str(cli.town)}
    _names, results = session_calls(env, [
        ("sluice_scheduler_throttle", {"until": "999999999h"}),
        ("sluice_schedule_policy", {"action": "set", "priority": 1e308, "cost": 1e308}),
        ("sluice_scheduler_status", {}),
    ])
    assert results[0][0] and "876000h" in results[0][1] and "until" in results[0][1]
    assert results[1][0] and "overflow" in results[1][1]
    assert payload(results[2])["throttles"] == []
    assert not (cli.town / ".sluice" / "schedule" / "policy.json").exists()


def test_an_unexpected_error_is_a_tool_error_with_its_reason(cli: Cli, monkeypatch):
    """A bug still answers the caller with what went wrong, never a reason-less error."""
    from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError

    from sluice.api import Town
    from sluice.surfaces.mcp_server import build_server

    def broken(self, *args, **kwargs):
        raise ValueError("year 11409972 is out of range")

    monkeypatch.setattr(Town, "status", broken)
    server = build_server(str(cli.town))
    with pytest.raises(ToolError, match="internal error: ValueError: year 11409972") as raised:
        asyncio.run(server.call_tool("sluice_scheduler_status", {}))
    assert not isinstance(raised.value, UnexpectedToolError)  # the SDK logs no traceback for it


def test_promote_and_run_one_item_answer_as_the_cli(cli: Cli, queued: dict):
    env = {"SLUICE_TOWN": str(cli.town)}
    _names, results = session_calls(env, [
        ("sluice_scheduler_promote", {"item_id": queued["first"]}),
        ("sluice_scheduler_run", {"item_id": queued["second"], "dry_run": True}),
        ("sluice_scheduler_run", {"item_id": queued["first"], "dry_run": True}),
        ("sluice_scheduler_promote", {"item_id": queued["first"], "undo": True}),
    ])
    promoted = payload(results[0])
    assert promoted["promoted"] is True and promoted["changed"] is True and promoted["promoted_at"]
    is_error, text = results[1]  # not queued: the reason is in the error, as explain says it
    assert is_error and "not launched" in text and "not-queued" in text
    assert [row["item_id"] for row in payload(results[2])["planned"]] == [queued["first"]]
    assert payload(results[3])["changed"] is True
    assert cli.json("scheduler", "list")[0]["promoted_at"] is None
