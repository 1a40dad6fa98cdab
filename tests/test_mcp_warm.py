"""The MCP server keeps the town open between calls, and never answers from what changed since.

Each test starts one real `sluice mcp` over stdio, asks it, changes the town
from outside (the CLI, or the files themselves, as another process would),
and asks the same server again: the second answer must show the change and
equal what a fresh CLI prints.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from helpers import Cli, make_repo
from helpers.advisor import add_rig, item, write_items

Call = Callable[[str, dict], Awaitable[object]]
NEXT = ("sluice_schedule_next", {"limit": 10, "preview": True})


def live(town: Path, script: Callable[[Call], Awaitable[None]]) -> None:
    """Run ``script(call)`` against one `sluice mcp` kept running for all its calls."""

    async def go():
        params = StdioServerParameters(command=sys.executable, args=["-m", "sluice", "mcp"],
                                       env={**os.environ, "SLUICE_TOWN": str(town)})
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()

            async def call(name: str, args: dict):
                result = await session.call_tool(name, args)
                text = result.content[0].text if result.content else ""
                return ("error", text) if result.is_error else json.loads(text)

            await script(call)

    asyncio.run(asyncio.wait_for(go(), timeout=120))


def ids(decisions) -> list[str]:
    assert isinstance(decisions, list), decisions
    return [d["node_id"] for d in decisions]


def same_as_cli(cli: Cli, decisions) -> None:
    """The server's decisions are the CLI's, but for their ids and times."""
    strip = lambda ds: [{k: v for k, v in d.items() if k not in ("decision_id", "at")} for d in ds]  # noqa: E731
    assert strip(decisions) == strip(cli.json("schedule", "next", "--limit", "10", "--preview"))


def test_new_closed_and_reprioritised_items_show_in_the_next_answer(cli: Cli, rig: str):
    first = cli.json("item", "create", rig, "--title", "first", "--priority", "2")["id"]

    async def script(call: Call):
        assert ids(await call(*NEXT)) == [first]
        urgent = cli.json("item", "create", rig, "--title", "urgent", "--priority", "0")["id"]
        answer = await call(*NEXT)
        assert ids(answer) == [urgent, first]
        same_as_cli(cli, answer)
        cli.run("item", "close", urgent)
        assert ids(await call(*NEXT)) == [first]
        cli.run("item", "update", first, "--status", "in_progress")
        assert ids(await call(*NEXT)) == []
        cli.run("item", "update", first, "--status", "open", "--priority", "1")
        answer = await call(*NEXT)
        assert ids(answer) == [first] and "priority=1" in answer[0]["reasons"]
        same_as_cli(cli, answer)

    live(cli.town, script)


def test_a_policy_set_elsewhere_changes_the_next_scores(cli: Cli, rig: str):
    cheap = cli.json("item", "create", rig, "--title", "cheap", "--priority", "2", "--tokens", "100")["id"]
    dear = cli.json("item", "create", rig, "--title", "dear", "--priority", "1", "--tokens", "90000")["id"]

    async def script(call: Call):
        assert ids(await call(*NEXT)) == [dear, cheap]  # priority outweighs cost by default
        cli.run("schedule", "policy", "set", "--priority", "0", "--cost", "5")
        answer = await call(*NEXT)
        assert ids(answer) == [cheap, dear]
        same_as_cli(cli, answer)
        status = await call("sluice_schedule_status", {})
        assert status["policy"]["weights"]["cost"] == 5.0

    live(cli.town, script)


def test_a_rig_added_or_removed_elsewhere_shows(cli: Cli, rig: str, tmp_path: Path):
    mine = cli.json("item", "create", rig, "--title", "mine", "--priority", "2")["id"]

    async def script(call: Call):
        assert ids(await call(*NEXT)) == [mine]
        add_rig(cli, tmp_path, "beta", "be")
        write_items(cli.town, "beta", [item("be-1", priority=0)])
        answer = await call(*NEXT)
        assert ids(answer) == ["be-1", mine]
        same_as_cli(cli, answer)
        assert (await call("sluice_schedule_status", {}))["ready_count"] == 2
        cli.run("rig", "remove", "beta")
        assert ids(await call(*NEXT)) == [mine]
        assert (await call("sluice_schedule_status", {}))["ready_count"] == 1

    live(cli.town, script)


def test_a_config_edited_elsewhere_is_read_again(cli: Cli, tmp_path: Path):
    """A rig pointed at another export, a config made invalid and mended: each shows in the next call."""
    repo = make_repo(tmp_path / "repo")
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    old.write_text(json.dumps(item("ex-old")) + "\n")
    new.write_text(json.dumps(item("ex-new")) + "\n")
    cli.run("rig", "add", "ext", str(repo), "--prefix", "ex", "--items", str(old))
    config_path = cli.town / ".sluice" / "config.json"

    async def script(call: Call):
        assert ids(await call(*NEXT)) == ["ex-old"]
        config = json.loads(config_path.read_text())
        config["rigs"]["ext"]["items"] = str(new)
        config_path.write_text(json.dumps(config))
        assert ids(await call(*NEXT)) == ["ex-new"]
        good = config_path.read_text()
        config_path.write_text("{not json")
        kind, message = await call(*NEXT)
        assert kind == "error" and "config.json" in message
        config_path.write_text(good)
        assert ids(await call(*NEXT)) == ["ex-new"]
        cli.run("config", "set", "scheduler.max_polecats", "7")
        same_as_cli(cli, await call(*NEXT))

    live(cli.town, script)


def test_an_export_rewritten_in_place_is_read_again(cli: Cli, tmp_path: Path):
    """Same inode, new bytes: the kept index is checked against the file as a fresh open checks it."""
    repo = make_repo(tmp_path / "repo")
    export = tmp_path / "issues.jsonl"
    lines = lambda a, b: f"{json.dumps(item('ex-a', priority=a))}\n{json.dumps(item('ex-b', priority=b))}\n"  # noqa: E731
    export.write_text(lines(1, 2))
    cli.run("rig", "add", "ext", str(repo), "--prefix", "ex", "--items", str(export))

    async def script(call: Call):
        assert ids(await call(*NEXT)) == ["ex-a", "ex-b"]
        inode = export.stat().st_ino
        with open(export, "r+", encoding="utf-8") as fh:  # rewritten in place, as some exporters do
            fh.write(lines(3, 2))
            fh.truncate()
        assert export.stat().st_ino == inode
        answer = await call(*NEXT)
        assert ids(answer) == ["ex-b", "ex-a"]
        same_as_cli(cli, answer)

    live(cli.town, script)


def test_a_sling_elsewhere_shows_and_slings_through_the_server_behave_as_before(cli: Cli, rig: str):
    """Direct mode: a sling launches at once and logs the launch, which schedule status lists."""
    cli.run("config", "set", "executor.command", json.dumps([sys.executable, "-c", "pass"]))
    one = cli.json("item", "create", rig, "--title", "one", "--priority", "1")["id"]
    two = cli.json("item", "create", rig, "--title", "two", "--priority", "2")["id"]

    async def script(call: Call):
        assert (await call("sluice_schedule_status", {}))["recent_decisions"] == []
        cli.run("sling", one, rig)
        [launch] = (await call("sluice_schedule_status", {}))["recent_decisions"]
        assert launch["node_id"] == one
        slung = await call("sluice_sling", {"item_ids": [two], "rig": rig})
        assert [d["item_id"] for d in slung["dispatched"]] == [two]
        recent = (await call("sluice_schedule_status", {}))["recent_decisions"]
        assert [d["node_id"] for d in recent] == [two, one]
        [decided] = await call("sluice_schedule_next", {"limit": 1})  # recorded, not a preview
        recent = (await call("sluice_schedule_status", {}))["recent_decisions"]
        assert recent[0]["decision_id"] == decided["decision_id"]

    live(cli.town, script)


def test_a_deferral_that_ends_between_calls_frees_its_item(cli: Cli, rig: str):
    """The kept ready count holds only until the next deferral ends."""
    def stamp(at: datetime) -> str:
        return at.strftime("%Y-%m-%dT%H:%M:%SZ")

    async def script(call: Call):
        window = 2
        while True:
            # The deferral's end is set once the server is up, so a slow start cannot outlast it; a
            # machine too busy to answer three calls before it ends tries again with twice the window
            # (answers given after the end would prove nothing).
            until = stamp(datetime.now(UTC) + timedelta(seconds=window))
            write_items(cli.town, rig,
                        [item("al-later", priority=0, defer_until=until), item("al-now", priority=2)])
            first, kept = ids(await call(*NEXT)), ids(await call(*NEXT))
            ready = (await call("sluice_schedule_status", {}))["ready_count"]
            if stamp(datetime.now(UTC)) < until:
                break
            window *= 2
            assert window <= 64, "three calls never answered within a minute"
        assert first == ["al-now"]
        assert kept == ["al-now"]  # kept, with the deferral's end looked up
        assert ready == 1
        while stamp(datetime.now(UTC)) <= until:  # until the server's clock, which is this one, is past it
            time.sleep(0.2)
        answer = await call(*NEXT)
        assert ids(answer) == ["al-later", "al-now"]
        same_as_cli(cli, answer)

    live(cli.town, script)


def test_concurrent_calls_share_the_kept_town(cli: Cli, rig: str):
    """The SDK runs tools on worker threads: calls sent together all answer, and answer alike."""
    for n in range(3):
        cli.run("item", "create", rig, "--title", f"item {n}", "--priority", str(n))

    async def script(call: Call):
        answers = await asyncio.gather(*(call(*NEXT) for _ in range(8)),
                                       *(call("sluice_schedule_status", {}) for _ in range(4)))
        nexts, statuses = answers[:8], answers[8:]
        assert all(ids(a) == ids(nexts[0]) and len(a) == 3 for a in nexts)
        assert all(s["ready_count"] == 3 for s in statuses)
        same_as_cli(cli, nexts[0])

    live(cli.town, script)
