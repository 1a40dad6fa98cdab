"""What `scheduler forecast` costs at 10,000 queued over 100,000 past runs, beside `scheduler status`.

Usage:  python benchmarks/bench_forecast_cost.py [--queued 10000] [--history 100000] [--runs 5]
                                                 [--tree NAME=SRC ...] [--work DIR] [--json]

A town is built once: one rig over a real git repository reading a beads
export of ``--queued`` items in five labels and three issue types, all of
them slung, and ``--history`` past runs of those kinds in the town database,
each as a real launch leaves it once it ended.  For each tree (default:
this checkout's ``src``), on a copy of the town, the first command after
the copy (nothing kept yet) and then the median of ``--runs`` warm ones
are timed for ``scheduler status --json``, ``scheduler forecast --json
--limit 50`` and ``scheduler forecast --json``,
through the CLI, interpreter start included.  The trees and commands run
alternately, so a slow spell of a shared machine falls on all alike.

Then ``forecast after a change``: ``--runs`` times, one queued item is
cleared and slung again (its context closed, a new one appended: the queue
an operator changes between two looks), and the ``scheduler forecast
--json`` after it is timed, wall and CPU (user + system of the command).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_launch import trees_of  # the benchmarks' directory is the script's

HERE = Path(__file__).resolve().parent
STAMP = "2026-01-01T00:00:00Z"
CHUNK = 10_000
LABELS = ("area:api", "area:db", "area:ui", "size:s", "size:l")
TYPES = ("task", "bug", "feature")
COMMANDS = {"status": ["scheduler", "status", "--json"],
            "forecast --limit 50": ["scheduler", "forecast", "--json", "--limit", "50"],
            "forecast": ["scheduler", "forecast", "--json"]}
AFTER_CHANGE = "forecast after a change"


def run(src: Path, town: Path, *args: str) -> float:
    return run_cpu(src, town, *args)[0]


def run_cpu(src: Path, town: Path, *args: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one command, interpreter start included."""
    env = {**os.environ, "PYTHONPATH": str(src), "SLUICE_TOWN": str(town)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "sluice", *args], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"sluice {' '.join(args[:3])} … failed: {done.stderr.strip()[-400:]}")
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def build(base: Path, src: Path, queued: int, history: int) -> Path:
    town, repo, export = base / "town", base / "repo", base / "export" / "issues.jsonl"
    marker = base / "built"
    if marker.exists() and marker.read_text() == f"{queued}x{history}":
        return town
    shutil.rmtree(base, ignore_errors=True)
    export.parent.mkdir(parents=True)
    git = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.invalid"}
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=git)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "init"], check=True,
                   env=git)
    ids = [f"fq-w{k:06d}" for k in range(queued)]
    with export.open("w") as fh:
        for k, item_id in enumerate(ids):
            fh.write(json.dumps({"id": item_id, "title": f"work item {k}", "status": "open",
                                 "priority": k % 5, "issue_type": TYPES[k % 3], "labels": [LABELS[k % 5]],
                                 "created_at": STAMP, "updated_at": STAMP}) + "\n")
    run(src, town, "init", str(town))
    run(src, town, "rig", "add", "bench", str(repo), "--prefix", "fq", "--items", str(export))
    for key, value in (("scheduler.max_polecats", "8"), ("scheduler.batch_size", "4")):
        run(src, town, "config", "set", key, value)
    for start in range(0, queued, CHUNK):
        run(src, town, "sling", *ids[start:start + CHUNK], "bench")
    rng = random.Random(7)
    records = []
    for n in range(history):
        records.append({"run_id": f"rn-{n:07d}", "polecat_id": f"pc-{n}", "item_id": f"fq-old{n}",
                        "rig": "bench", "context_id": f"ctx-{n}", "executor": "local", "host": "bench",
                        "started_at": "2026-11-01T00:00:00Z", "ended_at": "2026-11-01T00:10:00Z",
                        "runtime_seconds": round(rng.lognormvariate(6, 0.5), 3), "exit_code": 0,
                        "outcome": "ok", "tokens_estimated": 1000, "tokens_used": rng.randrange(500, 5000),
                        "labels": [LABELS[n % 5]], "touches": [], "attempt": 1, "issue_type": TYPES[n % 3]})
    write_runs(src, town, records)
    marker.write_text(f"{queued}x{history}")
    return town


WRITE_RUNS = """
import json, sys
from sluice.store.database import runs
from sluice.store.files.town import Town
runs.append(Town(sys.argv[1]), json.load(sys.stdin))
"""


def write_runs(src: Path, town: Path, records: list[dict]) -> None:
    """Past runs as the town database keeps them, written by ``src``'s own store (one transaction)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    subprocess.run([sys.executable, "-c", WRITE_RUNS, str(town)], input=json.dumps(records), text=True,
                   env=env, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--history", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=SRC")
    parser.add_argument("--work", type=Path, default=None, help="build the town here and keep it")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    trees = trees_of(args.tree)
    work = args.work or Path(tempfile.mkdtemp(prefix="sluice-bench-forecast-cost-"))
    load = os.getloadavg()[0]
    try:
        town = build(work / "built-town", next(iter(trees.values())), args.queued, args.history)
        copies = {}
        for name in trees:
            copies[name] = work / f"copy-{name}"
            shutil.rmtree(copies[name], ignore_errors=True)
            shutil.copytree(town, copies[name], symlinks=True)
        first = {name: {} for name in trees}
        warm = {name: {c: [] for c in COMMANDS} for name in trees}
        for command, argv in COMMANDS.items():  # the first of each command on a fresh copy: nothing kept
            for name, src in trees.items():
                first[name][command] = run(src, copies[name], *argv)
        for _ in range(args.runs):
            for command, argv in COMMANDS.items():
                for name, src in trees.items():
                    warm[name][command].append(run(src, copies[name], *argv))
        changed: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
        for round_ in range(args.runs):  # the first forecast after a clear and a sling of one item
            item_id = f"fq-w{(round_ * 7919) % args.queued:06d}"
            for name, src in trees.items():
                run(src, copies[name], "scheduler", "clear", "--item", item_id)
                run(src, copies[name], "sling", item_id, "bench")
                changed[name].append(run_cpu(src, copies[name], *COMMANDS["forecast"]))
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    found = {name: {command: {"first": first[name][command], "warm": statistics.median(warm[name][command])}
                    for command in COMMANDS} for name in trees}
    for name in trees:
        found[name][AFTER_CHANGE] = {"wall": statistics.median(w for w, _ in changed[name]),
                                     "cpu": statistics.median(c for _, c in changed[name])}
    found["load"] = [load, os.getloadavg()[0]]
    if args.json:
        print(json.dumps(found, indent=2))
        return
    print(f"{args.queued:,} queued, {args.history:,} past runs; load {load:.1f} → {found['load'][1]:.1f}"
          f" on {os.cpu_count()} CPUs; median of {args.runs} warm runs (first run after a copy)")
    print()
    print("| tree | " + " | ".join(COMMANDS) + " | forecast ÷ status |")
    print("|---|" + "---|" * (len(COMMANDS) + 1))
    for name in trees:
        row = found[name]
        cells = [f"{row[c]['warm']:.2f} s ({row[c]['first']:.2f})" for c in COMMANDS]
        ratio = row["forecast"]["warm"] / row["status"]["warm"]
        print(f"| {name} | " + " | ".join(cells) + f" | {ratio:.1f}× |")
    print()
    print(f"`scheduler forecast --json` after a clear and a sling of one item, median of {args.runs}:")
    print()
    print("| tree | wall | CPU |")
    print("|---|---|---|")
    for name in trees:
        row = found[name][AFTER_CHANGE]
        print(f"| {name} | {row['wall']:.2f} s | {row['cpu']:.2f} s |")


if __name__ == "__main__":
    main()
