"""The hot commands against a bare interpreter, for one or more source trees, side by side.

Usage:  python benchmarks/bench_hot.py [--items 100000] [--queued 100] [--runs 9]
                                       [--tree NAME=SRC ...] [--work DIR] [--json]

Builds one town as ``run_all.py``'s hot reads do: one rig reading a
generated ``--items`` beads export (``bench_ready.py``'s generator),
``scheduler.max_polecats`` 4 and ``--queued`` ready items slung.  Each tree
(``--tree before=/old/src --tree after=src``; default: this checkout's
``src``) gets its own copy, so the caches it reads are the ones it wrote.
Then ``--runs`` rounds, each running once, in this order, a bare
``python -c "import json, sqlite3"`` (the baseline: an interpreter that can
read JSON and SQLite, before any sluice code) and, for every tree, every
command with bounded output:

``--version``, ``item ready --json`` (100 rows), ``item show``,
``schedule next --limit 5 --json`` (which records its decisions, so the
next ``status`` cannot take the queue's kept head: its fairness reads
them), ``scheduler status --json``, ``scheduler list --limit 50 --json``,
``scheduler explain``, ``hooks report``.

Reported: each command's median CPU time (user + system, which holds still
on a shared machine) and its ratio to the baseline's (the target is 2.5×).
Each command runs through the installed ``sluice`` program beside the
interpreter when there is one (``PYTHONPATH`` puts each tree before the
installed package), else ``python -m sluice``, which adds ``runpy``'s
imports; only the standard library is used, interpreter start-up included,
as a user sees it.
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
from pathlib import Path

from bench_launch import trees_of  # the benchmarks' directory is the script's
from run_all import git_repo, measure, sluice_argv

HERE = Path(__file__).resolve().parent
BASELINE = "bare python"


def sluice(src: Path, town: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(src), "SLUICE_TOWN": str(town)}
    done = subprocess.run([sys.executable, "-m", "sluice", *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"sluice {' '.join(args[:3])} failed: {done.stderr.strip()[-300:]}")
    return done.stdout


def build(work: Path, items: int, queued: int) -> tuple[Path, list[str]]:
    """The town (built with this checkout) and the ids it names: one ready item, one queued."""
    src = HERE.parent / "src"
    base = work / f"hot-{items}"
    town, repo, export = base / "town", base / "repo", base / "export" / "issues.jsonl"
    shutil.rmtree(base, ignore_errors=True)
    export.parent.mkdir(parents=True)
    git_repo(repo)
    subprocess.run([sys.executable, str(HERE / "bench_ready.py"), "--items", str(items), "--generate-only",
                    str(export)], check=True, capture_output=True)
    sluice(src, town, "init", str(town))
    sluice(src, town, "rig", "add", "bench", str(repo), "--prefix", "bn", "--items", str(export))
    ready = [row["id"] for row in json.loads(sluice(src, town, "item", "ready", "--json", "--limit",
                                                    str(queued + 1)))]
    sluice(src, town, "config", "set", "scheduler.max_polecats", "4")
    sluice(src, town, "sling", *ready[1:], "bench")
    return town, [ready[0], ready[1]]


def commands(shown: str, queued: str) -> dict[str, list[str]]:
    return {
        "`--version`": ["--version"],
        "`item ready --json` (100 rows)": ["item", "ready", "--json"],
        "`item show ID --json`": ["item", "show", shown, "--json"],
        "`schedule next --limit 5 --json` (records its decisions)": ["schedule", "next", "--limit", "5",
                                                                     "--json"],
        "`scheduler status --json`": ["scheduler", "status", "--json"],
        "`scheduler list --limit 50 --json`": ["scheduler", "list", "--limit", "50", "--json"],
        "`scheduler explain ID --json` (a queued item)": ["scheduler", "explain", queued, "--json"],
        "`hooks report --rig bench`": ["hooks", "report", "--rig", "bench"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--queued", type=int, default=100)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=SRC")
    parser.add_argument("--work", type=Path, default=None, help="build the town here and keep it")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    trees = trees_of(args.tree)
    work = args.work or Path(tempfile.mkdtemp(prefix="sluice-bench-hot-"))
    work.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    try:
        town, (shown, queued) = build(work, args.items, args.queued)
        towns = {}
        for name, src in trees.items():
            towns[name] = work / f"town-{name}"
            shutil.rmtree(towns[name], ignore_errors=True)
            shutil.copytree(town, towns[name], symlinks=True)
            for argv in commands(shown, queued).values():  # once each: the caches the tree reads are its own
                sluice(src, towns[name], *argv)
        seen: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.runs):
            seen.setdefault((BASELINE, BASELINE), []).append(
                measure([sys.executable, "-c", "import json, sqlite3"], dict(os.environ))[1])
            for name, src in trees.items():
                env = {**os.environ, "PYTHONPATH": str(src), "SLUICE_TOWN": str(towns[name])}
                for label, argv in commands(shown, queued).items():
                    argv = [*sluice_argv(), *argv]
                    seen.setdefault((name, label), []).append(measure(argv, env)[1])
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    medians = {key: statistics.median(values) for key, values in seen.items()}
    base = medians[(BASELINE, BASELINE)]
    found = {"baseline_cpu_s": base, "load": [load, os.getloadavg()[0]],
             "trees": {name: {label: medians[(name, label)] for label in commands("ID", "ID")}
                       for name in trees}}
    if args.json:
        print(json.dumps(found, indent=2))
        return
    print(f"{args.items:,} items, {args.queued} queued, median CPU of {args.runs} alternating runs;"
          f" load average {load:.1f} before, {found['load'][1]:.1f} after; {os.cpu_count()} CPUs")
    print(f"baseline: bare `python -c \"import json, sqlite3\"` {base * 1000:.1f} ms\n")
    print("| command | " + " | ".join(trees) + " |")
    print("|---|" + "---|" * len(trees))
    for label in commands("ID", "ID"):
        cells = [f"{found['trees'][name][label] * 1000:.1f} ms ({found['trees'][name][label] / base:.2f}×)"
                 for name in trees]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
