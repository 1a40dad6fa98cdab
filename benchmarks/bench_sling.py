"""Time `sluice sling` of 1,000 items in one command, and a dispatch dry run over them.

Usage:  python benchmarks/bench_sling.py [--items 1000] [--background 0] [--runs 3] [--keep DIR]

Builds a throwaway town with one rig (a real git repository) holding
``--items`` open items plus ``--background`` others (closed, so they cost
index size but are never slung), switches on deferred mode, and measures
through the installed CLI:

* ``sling ITEM... RIG --json`` with every item at once, into an empty queue
  (the target: under 2 s for 1,000 items, interpreter start-up included);
* the same command again, where every item is already queued (all no-ops);
* ``scheduler run --dry-run --json`` and ``scheduler list --json`` over the
  full queue (warm, median of ``--runs``).

Each figure is one fresh town per run for the first measurement, so nothing
is cached between runs except what a user's machine would have.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def sluice(town: Path, *args: str) -> tuple[float, str]:
    env = {**os.environ, "SLUICE_TOWN": str(town)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "sluice", *args], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"sluice {' '.join(args[:3])} … failed: {done.stderr.strip()}")
    return elapsed, done.stdout


def build_town(root: Path, items: int, background: int) -> tuple[Path, list[str]]:
    town = root / "town"
    repo = root / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=b", "-c", "user.email=b@example.invalid",
                    "commit", "-q", "--allow-empty", "-m", "init"], check=True)
    subprocess.run([sys.executable, "-m", "sluice", "init", str(town)], check=True, capture_output=True)
    sluice(town, "rig", "add", "alpha", str(repo), "--prefix", "al")
    sluice(town, "config", "set", "scheduler.max_polecats", "4")
    sluice(town, "config", "set", "executor.command", json.dumps([sys.executable, "-c", "pass"]))
    ids = [f"al-w{n:05d}" for n in range(items)]
    stamp = "2026-01-01T00:00:00Z"
    lines = []
    for n, item_id in enumerate(ids):
        lines.append(json.dumps({"id": item_id, "title": f"work item {n} for the benchmark", "status": "open",
                                 "priority": n % 5, "issue_type": "task", "created_at": stamp,
                                 "updated_at": stamp}))
    for n in range(background):
        lines.append(json.dumps({"id": f"al-b{n:06d}", "title": f"old item {n}", "status": "closed",
                                 "priority": 2, "issue_type": "task", "created_at": stamp,
                                 "updated_at": stamp}))
    store = town / ".sluice" / "rigs" / "alpha" / "issues.jsonl"
    store.write_text("\n".join(lines) + "\n")
    sluice(town, "item", "list", "--status", "deferred")  # build the derived index once
    return town, ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--background", type=int, default=0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="build the towns here and keep them")
    args = parser.parse_args()

    base = args.keep or Path(tempfile.mkdtemp(prefix="sluice-bench-sling-"))
    base.mkdir(parents=True, exist_ok=True)
    first, again, dry, listing = [], [], [], []
    try:
        for run in range(args.runs):
            town, ids = build_town(base / f"run{run}", args.items, args.background)
            seconds, out = sluice(town, "sling", *ids, "alpha", "--json")
            result = json.loads(out)
            assert len(result["scheduled"]) == args.items and not result["errors"], "sling did not queue all"
            first.append(seconds)
            seconds, out = sluice(town, "sling", *ids, "alpha", "--json")
            assert len(json.loads(out)["already"]) == args.items
            again.append(seconds)
            seconds, out = sluice(town, "scheduler", "run", "--dry-run", "--json")
            assert json.loads(out)["ready"] == args.items
            dry.append(seconds)
            seconds, _out = sluice(town, "scheduler", "list", "--json")
            listing.append(seconds)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)

    def show(name: str, values: list[float]) -> None:
        print(f"{name:<44} median {statistics.median(values):6.3f} s   (runs: "
              + ", ".join(f"{v:.3f}" for v in values) + ")")

    print(f"{args.items} items slung in one command ({args.background} background items), {args.runs} runs")
    show("sling (empty queue)", first)
    show("sling again (every item already queued)", again)
    show("scheduler run --dry-run --json (full queue)", dry)
    show("scheduler list --json (full queue)", listing)
    target = statistics.median(first)
    print(f"target: sling of 1,000 items < 2 s — {'met' if target < 2 else 'NOT met'} ({target:.3f} s)")


if __name__ == "__main__":
    main()
