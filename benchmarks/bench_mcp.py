"""Time `sluice_schedule_next` through `sluice mcp` over stdio: a warm server against re-opening.

Usage:  python benchmarks/bench_mcp.py [--items 100000] [--runs 5] [--calls 50] [--town DIR]
                                       [--work DIR] [--json]

Builds a throwaway town whose one rig reads a generated beads export
(``bench_ready``'s generator, as ``run_all.py`` does), or takes an existing
town with ``--town``, then drives the real ``sluice mcp`` with the official
``mcp`` client over stdio.  Every call is ``sluice_schedule_next`` with
``limit`` 5 and ``preview`` (so nothing is recorded).  Each of ``--runs``
rounds starts a fresh server and times, in it:

* the **first call** (the server imports the scheduler and opens the town);
* ``--calls`` more calls: the **warm** server (the town kept open);
* ``--calls`` more calls, each after ``config.json`` was rewritten with one
  byte of whitespace more or less (a change that means nothing but is a
  change): the server **re-opens** the town for each, config validation,
  policy, index and ready count included, which is what every call cost
  before the server kept the town open (the rewrite itself is not timed);

and the wall time from starting the server to having its first answer.
Figures are medians over all rounds.  A call's latency is measured at the
client, from sending the request to having the answer, so it includes the
JSON-RPC round trip over the pipes.  One ``schedule next`` through the CLI
builds the derived index before anything is timed.  A ``--town`` must be one
nobody else uses meanwhile: its ``config.json`` is rewritten during the
re-opening calls (and restored, byte for byte, at the end).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ARGUMENTS = {"limit": 5, "preview": True}


def sluice_argv() -> list[str]:
    found = Path(sys.executable).parent / "sluice"
    return [str(found)] if found.exists() else [sys.executable, "-m", "sluice"]


def build_town(work: Path, items: int) -> Path:
    """A town with one read-only rig of ``items`` generated beads records (bench_ready's generator)."""
    sluice = sluice_argv()
    town, repo, export = work / "town", work / "repo", work / "export" / "issues.jsonl"
    export.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.invalid"}
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "init"], check=True,
                   env=env)
    subprocess.run([sys.executable, str(HERE / "bench_ready.py"), "--items", str(items), "--generate-only",
                    str(export)], check=True, capture_output=True)
    subprocess.run([*sluice, "init", str(town)], check=True, capture_output=True)
    subprocess.run([*sluice, "--town", str(town), "rig", "add", "bench", str(repo), "--prefix", "bn",
                    "--items", str(export)], check=True, capture_output=True)
    return town


async def _round(town: Path, calls: int) -> dict[str, list[float]]:
    """One fresh server: its start, first call, warm calls and re-opening calls (seconds)."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    sluice = sluice_argv()
    params = StdioServerParameters(command=sluice[0], args=[*sluice[1:], "--town", str(town), "mcp"],
                                   env=dict(os.environ))
    config = town / ".sluice" / "config.json"
    original = config.read_bytes()

    async def timed(session) -> float:
        at = time.perf_counter()
        result = await session.call_tool("sluice_schedule_next", ARGUMENTS)
        took = time.perf_counter() - at
        if result.is_error or not json.loads(result.content[0].text):
            raise SystemExit(f"sluice_schedule_next gave no decision: {result.content[0].text}")
        return took

    began = time.perf_counter()
    out: dict[str, list[float]] = {"first": [], "start": [], "warm": [], "reopen": []}
    try:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            out["first"].append(await timed(session))
            out["start"].append(time.perf_counter() - began)
            out["warm"] += [await timed(session) for _ in range(calls)]
            for n in range(calls):
                config.write_bytes(original if n % 2 else original.rstrip() + b"\n\n")
                out["reopen"].append(await timed(session))
    finally:
        config.write_bytes(original)
    return out


def measure(town: Path, runs: int, calls: int) -> dict:
    seen: dict[str, list[float]] = {"first": [], "start": [], "warm": [], "reopen": []}
    for _ in range(runs):
        for key, values in asyncio.run(_round(town, calls)).items():
            seen[key] += values
    found: dict = {key: statistics.median(values) for key, values in seen.items()}
    return {**found, "runs": runs, "calls": calls}


def report(found: dict, items: str) -> list[str]:
    ms = lambda key: f"{found[key] * 1000:.1f}"  # noqa: E731
    runs, calls = found["runs"], found["calls"]
    return [
        f"### MCP server: `sluice_schedule_next` (limit 5, preview) over stdio on {items}"
        f" ({runs} fresh server{'s' if runs != 1 else ''}, median of all the calls)",
        "",
        "| call | latency ms |",
        "|---|---|",
        f"| first call of a fresh server | {ms('first')} |",
        f"| warm: the next {calls} calls of each server | {ms('warm')} |",
        f"| re-opening the town for each call ({calls} per server, config.json rewritten before each)"
        f" | {ms('reopen')} |",
        f"| start a server, initialise, first answer (wall) | {ms('start')} |",
        "",
        f"A warm call answers {found['reopen'] / found['warm']:.1f}× faster than one that re-opens the town,"
        f" {found['first'] / found['warm']:.1f}× faster than a fresh server's first call.",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000, help="items to generate (default 100000)")
    parser.add_argument("--runs", type=int, default=5, help="fresh servers, one round each (default 5)")
    parser.add_argument("--calls", type=int, default=50, help="warm (and re-opening) calls per server")
    parser.add_argument("--town", type=Path, help="measure this existing town instead of generating one")
    parser.add_argument("--label", help="how the report names the town (default: its path)")
    parser.add_argument("--work", type=Path, help="build the town here and keep it (default: temp dir)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.calls < 1 or args.runs < 1:
        parser.error("--calls and --runs must be at least 1")
    work = None
    if args.town is not None:
        town, label = args.town, args.label or str(args.town)
    else:
        work = args.work or Path(tempfile.mkdtemp(prefix="sluice-bench-mcp-"))
        work.mkdir(parents=True, exist_ok=True)
        town, label = build_town(work, args.items), f"a {args.items:,}-item rig"
    try:
        # Build the derived index (and the config cache) outside every timed call.
        first = [*sluice_argv(), "--town", str(town), "schedule", "next", "--preview", "--json"]
        done = subprocess.run(first, capture_output=True, text=True)
        if done.returncode != 0 or not json.loads(done.stdout or "[]"):
            raise SystemExit(f"bench_mcp.py: `sluice schedule next` in {town} gave no decision:"
                             f" {done.stderr.strip() or done.stdout.strip()}")
        found = measure(town, args.runs, args.calls)
    finally:
        if work is not None and args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(found) if args.json else "\n".join(report(found, label)))


if __name__ == "__main__":
    main()
