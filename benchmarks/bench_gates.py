"""What the hold file and the host guard cost a hot read: ``scheduler status --json``, gates off and on.

Usage:  python benchmarks/bench_gates.py [--queued 1000] [--runs 7]

Builds a town with N queued contexts, then times ``python -m sluice
scheduler status --json`` in a fresh process with the gates off, and with
every gate on (a hold file configured but absent, all three host limits set
and always met, a cycle's reading kept), alternating the two, and prints
each median and their ratio.  The read shows the kept reading, so it should
cost what the plain read costs: no psutil import, one ``open`` for the hold
file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def sluice(town: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLUICE_TOWN": str(town), "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "sluice", *args], env=env, capture_output=True, text=True,
                          check=False)


def build(root: Path, queued: int) -> Path:
    town = root / "town"
    repo = root / "repo"
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    sluice(root, "init", str(town))
    sluice(town, "rig", "add", "alpha", str(repo), "--prefix", "al")
    items = town / ".sluice" / "rigs" / "alpha" / "issues.jsonl"
    stamp = "2026-01-01T00:00:00Z"
    items.write_text("".join(json.dumps({"id": f"al-{n}", "title": f"work {n}", "status": "open",
                                         "priority": n % 5, "issue_type": "task", "created_at": stamp,
                                         "updated_at": stamp}) + "\n" for n in range(queued)))
    sluice(town, "config", "set", "scheduler.max_polecats", "1")
    ids = [f"al-{n}" for n in range(queued)]
    sluice(town, "sling", *ids, "alpha")
    return town


def gates(town: Path, on: bool) -> None:
    for key, value in (("scheduler.hold_file", "HOLD" if on else ""),
                       ("scheduler.host.max_load", "1000000" if on else "off"),
                       ("scheduler.host.min_free_memory", "1B" if on else "off"),
                       ("scheduler.host.min_free_disk", "1B" if on else "off")):
        sluice(town, "config", "set", key, value)
    if on:  # what a cycle keeps for the read commands
        sys.path.insert(0, str(ROOT / "src"))
        from sluice.scheduler.launch import gates as gate_view
        from sluice.store.files.town import Town

        gate_view.current(Town(town), fresh=True)


def timed(town: Path) -> float:
    began = time.perf_counter()
    sluice(town, "scheduler", "status", "--json")
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        town = build(Path(tmp), args.queued)
        seen: dict[str, list[float]] = {"off": [], "on": []}
        for _ in range(args.runs):
            for state in seen:
                gates(town, state == "on")
                timed(town)  # the first read after a config change validates it once
                seen[state].append(timed(town))
        off, on = statistics.median(seen["off"]), statistics.median(seen["on"])
        print(f"scheduler status --json, {args.queued} queued: gates off {off:.3f} s, on {on:.3f} s"
              f" (median of {args.runs}); on/off {on / off:.2f}x")


if __name__ == "__main__":
    main()
