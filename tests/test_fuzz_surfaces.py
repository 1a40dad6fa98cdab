"""Fuzzed arguments: the command line and the MCP tools.

Any argv a person (or an agent) might type, and any JSON an MCP client might
send — lone surrogates and text far past every cap included — must end in an
answer or a clear error naming the argument — exit 0, 1
or 2, a ``ToolError`` over MCP — never a traceback; a scheduling command
never changes a work item, and nothing is written outside ``.sluice/``.
A few cases go through the real ``sluice`` process for the entry point.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz_helpers import FUZZ, assert_clean_exit, json_any, run_cli, snapshot, surface_text
from helpers import make_repo
from sluice.store.files.town import init_town
from sluice.store.items.rigs import add_rig

GOOD = [
    {"id": "fz-1", "title": "one", "status": "open", "priority": 1, "issue_type": "task"},
    {"id": "fz-2", "title": "two", "status": "closed", "priority": 2, "issue_type": "task"},
    {"id": "fz-3", "title": "epic", "status": "open", "priority": 2, "issue_type": "epic"},
]
# Commands that may run in a test: not daemon, mcp, demo, top or web (they run until stopped), not
# init (it makes a town where it is told), not hooks install/uninstall (they write into the rig by design).
COMMANDS = (
    ("item", "list"), ("item", "ready"), ("item", "blocked"), ("item", "show"), ("item", "create"),
    ("item", "update"), ("item", "close"), ("item", "dep", "add"), ("sling",), ("scheduler", "status"),
    ("scheduler", "list"), ("scheduler", "run", "--dry-run"), ("scheduler", "pause"), ("scheduler", "resume"),
    ("scheduler", "clear"), ("schedule", "next"), ("schedule", "status"), ("schedule", "policy", "show"),
    ("schedule", "policy", "set"), ("config", "get"), ("config", "set"), ("rig", "list"), ("patrol",),
    ("polecat", "list"), ("polecat", "logs"), ("polecat", "stop"), ("hooks", "report"),
    ("scheduler", "explain"), ("scheduler", "throttle"), ("scheduler", "broken"), ("scheduler", "reset"),
    ("polecat", "usage"), ("schedule", "policy", "unset"), ("snapshot",), ("rig", "remove"),
)
TOKENS = ("--json", "--limit", "-1", "0", "1", "99999999999999999999999", "--status", "open", "closed",
          "--priority", "fz-1", "fz-2", "fz-3", "fz", "nope", "--graph-id", "--batch", "--force", "--dry-run",
          "--fix", "--type", "--item", "--recent", "--title", "--dep", "blocks:fz-1", "--label", "--weight",
          "--priority", "nan", "inf", "-0", "1e308", "--merge-queue-threshold", "--until", "10m", "--rig",
          "--clear", "--tokens", "scheduler.max_polecats",
          "scheduler.batch_size", "scheduler.spawn_delay", "500ms", "1m30s", "-5s", "--reason", "=", "--")
token = st.one_of(st.sampled_from(TOKENS), surface_text.filter(lambda t: "\x00" not in t))


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> Path:
    """One town for the module (rig fz, deferred), its pristine copy beside it; examples start from that."""
    root = tmp_path_factory.mktemp("fuzz-args")
    town = init_town(root / "town")
    add_rig(town, "fz", make_repo(root / "repos" / "fz"), "fz")
    config = json.loads(town.config_path.read_text())
    config["scheduler"]["max_polecats"] = 2  # deferred, and no executor.command: nothing can launch
    town.config_path.write_text(json.dumps(config))
    (town.dir / "rigs" / "fz" / "issues.jsonl").write_text("".join(json.dumps(r) + "\n" for r in GOOD))
    shutil.copytree(town.dir, root / "pristine")
    return town.root


def reset(town: Path) -> Path:
    shutil.rmtree(town / ".sluice")
    shutil.copytree(town.parent / "pristine", town / ".sluice")
    return town.parent


@FUZZ
@given(command=st.sampled_from(COMMANDS), rest=st.lists(token, max_size=5))
def test_any_arguments_end_in_an_answer_or_a_clear_error(fuzz_dir, command, rest):
    if "executor" in " ".join(rest):
        return  # a fuzzed executor.command could start a real program
    root = reset(fuzz_dir)
    items = (fuzz_dir / ".sluice" / "rigs" / "fz" / "issues.jsonl").read_bytes()
    outside = snapshot(root, skip=".sluice")
    args = [*command, *rest]
    code, out, err = run_cli(fuzz_dir, *args)
    assert_clean_exit(code, err, args, out)
    if code:  # an error never repeats a long argument whole
        assert len(err) < 5_000, (args[:2], err[:500])
    if command[0] != "item":  # only the item commands may change items
        assert (fuzz_dir / ".sluice" / "rigs" / "fz" / "issues.jsonl").read_bytes() == items, args
    assert snapshot(root, skip=".sluice") == outside, args


# -- MCP ------------------------------------------------------------------------------

TOOLS = ("sluice_schedule_next", "sluice_schedule_status", "sluice_schedule_policy", "sluice_sling",
         "sluice_scheduler_status", "sluice_scheduler_list", "sluice_scheduler_run", "sluice_scheduler_pause",
         "sluice_scheduler_resume", "sluice_scheduler_clear", "sluice_patrol")
PARAMS = ("graph_id", "limit", "preview", "recent", "action", "priority", "affinity", "cost", "fairness",
          "merge_queue_threshold", "merge_pressure_penalty", "skip_on_merge_pressure", "item_ids", "rig",
          "formula", "args", "vars", "agent", "force", "dry_run", "batch", "item_id", "fix", "bogus")
mcp_value = st.one_of(json_any, st.sampled_from(["fz-1", "fz", "show", "set", ["fz-1"], ["fz-3", "fz"], 1]),
                      surface_text, st.lists(surface_text, max_size=3))
mcp_key = st.one_of(st.sampled_from(PARAMS), st.sampled_from(["\ud800", "rig\udcff", "k" * 5_000]))


@FUZZ
@given(tool=st.sampled_from(TOOLS), arguments=st.dictionaries(mcp_key, mcp_value, max_size=4))
def test_any_tool_arguments_end_in_a_result_or_a_tool_error(fuzz_dir, tool, arguments):
    from mcp.server.mcpserver.exceptions import ToolError

    from sluice.surfaces.mcp_server import build_server

    root = reset(fuzz_dir)
    items = (fuzz_dir / ".sluice" / "rigs" / "fz" / "issues.jsonl").read_bytes()
    outside = snapshot(root, skip=".sluice")
    server = build_server(str(fuzz_dir))
    try:
        result = asyncio.run(server.call_tool(tool, arguments))
        json.dumps(result, default=str, ensure_ascii=False).encode("utf-8")  # a reply that can be sent
    except ToolError as err:
        assert str(err).strip(), (tool, arguments)
        assert "Traceback" not in str(err) and "internal error" not in str(err), str(err)
        str(err).encode("utf-8")  # the refusal can be sent: nothing unencodable echoed
        assert len(str(err)) < 5_000, (tool, str(err)[:500])  # nor a long input whole
    assert (fuzz_dir / ".sluice" / "rigs" / "fz" / "issues.jsonl").read_bytes() == items, (tool, arguments)
    assert snapshot(root, skip=".sluice") == outside, (tool, arguments)


# -- the real entry point, a few hostile files ---------------------------------------------

TEN_MB = b'{"id":"fz-9","title":"' + b"z" * (10 * 1024 * 1024) + b'"}'


@pytest.mark.parametrize("line, named", [
    (b"[" * 200_000 + b"]" * 200_000, True),  # nested past any recursion limit
    (b'{"id":"fz-9","title":"\xff\xfe bad utf-8"}', True),
    (b'{"id":"fz-9","title":"nul \\u0000 inside"}', False),  # valid JSON: read like any title
    (TEN_MB, False),  # a 10 MB line is still just a record
    (b"\x00" * 64, True),
], ids=["deep", "invalid-utf8", "nul-escape", "10MB-line", "raw-nul"])
def test_the_sluice_process_names_a_hostile_line_or_reads_it(fuzz_dir, line, named):
    reset(fuzz_dir)
    store = fuzz_dir / ".sluice" / "rigs" / "fz" / "issues.jsonl"
    body = store.read_bytes() + line + b"\n" + b'{"id":"fz-10","title":"after"}\n'
    store.write_bytes(body)
    env = {**os.environ, "SLUICE_TOWN": str(fuzz_dir)}
    done = subprocess.run([sys.executable, "-m", "sluice", "item", "list", "fz", "--json"], env=env,
                          capture_output=True, timeout=120)
    stderr = done.stderr.decode(errors="replace")
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr[-2000:]
    if named:
        assert done.returncode == 1 and f"{store}:4" in stderr, stderr[-2000:]
    else:
        assert done.returncode == 0, stderr[-2000:]
        assert "fz-10" in {r["id"] for r in json.loads(done.stdout)}
    assert store.read_bytes() == body
