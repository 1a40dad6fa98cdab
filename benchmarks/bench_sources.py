"""A command source against the same beads export read from a file, side by side.

Usage:  python benchmarks/bench_sources.py [--items 10000] [--runs 7] [--json]

Builds two towns over one generated export (``bench_ready.generate``): one
rig reads it with ``rig add --items FILE``, the other with
``rig add --items-command 'cat FILE'``.  Through the installed CLI it times

* ``item ready --json`` warm on each (median of ``--runs``): what checking
  that a command source's snapshot is fresh adds to every read;
* the same read when the snapshot is due (a watched path changed), which
  waits for the refresh it starts, up to ``items.read_wait``;
* ``rig refresh`` (the command run, checked and kept) on the command rig.

Figures are ratios against the file rig on the same machine at the same
time, so a loaded machine shifts both sides.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ready import generate

# Compiled modules are kept, so neither side pays for compiling sluice on every run.
ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def sluice(town: Path, *args: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sluice", "--town", str(town), *args], check=True, env=ENV,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def town_with(base: Path, name: str, source: list[str]) -> tuple[Path, Path]:
    town, repo = base / name / "town", base / name / "repo"
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".beads").mkdir()
    sluice(town, "init", str(town))
    sluice(town, "rig", "add", "bn", str(repo), *source)
    return town, repo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sluice-bench-sources-") as tmp:
        base = Path(tmp)
        export = base / "issues.jsonl"
        generate(export, args.items)
        file_town, _ = town_with(base, "file", ["--items", str(export)])
        cmd_town, cmd_repo = town_with(base, "command", ["--items-command", json.dumps(["cat", str(export)])])
        for town in (file_town, cmd_town):
            sluice(town, "config", "set", "items.refresh", "1h")
            sluice(town, "item", "ready", "--json")  # build the index
        times: dict[str, list[float]] = {"file": [], "command": []}
        for _ in range(args.runs):  # interleaved, so a change in the machine's load hits both sides
            times["file"].append(sluice(file_town, "item", "ready", "--json"))
            times["command"].append(sluice(cmd_town, "item", "ready", "--json"))
        warm = {name: statistics.median(values) for name, values in times.items()}
        due = []
        for n in range(args.runs):
            (cmd_repo / ".beads" / "touched").write_text(str(n))  # a watched path changed: due
            due.append(sluice(cmd_town, "item", "ready", "--json"))
        refresh = statistics.median(sluice(cmd_town, "rig", "refresh", "bn") for _ in range(args.runs))
    result = {
        "items": args.items,
        "ready_file_s": round(warm["file"], 4),
        "ready_command_s": round(warm["command"], 4),
        "ready_ratio": round(warm["command"] / warm["file"], 3),
        "ready_due_s": round(statistics.median(due), 4),
        "ready_due_ratio": round(statistics.median(due) / warm["file"], 3),
        "rig_refresh_s": round(refresh, 4),
        "load": round(os.getloadavg()[0], 2),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>16}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
