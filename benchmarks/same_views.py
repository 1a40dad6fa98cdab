"""Check that two source trees print the same views of the same towns, byte for byte.

Usage:  python benchmarks/same_views.py --tree before=OLD/src --tree after=src TOWN [TOWN ...]
                                        [--at EPOCH] [--explain N] [--work DIR]

A change meant to make the views cheaper must not change what they say.  For
each town and each tree, a fresh copy of the town answers, in order,
``scheduler status``, ``list`` (whole, and a page), ``explain`` of a few
queued items (the first, the last, ``--explain`` in all, spread over the
queue), ``snapshot``, ``scheduler forecast`` and ``scheduler run
--dry-run``, each as ``--json``, with the clock stopped at ``--at`` (default
now, the same for every tree), so times and ETAs compare too.  The first
tree's answers are the reference; any other tree's that differ are printed
(the first differing line) and the exit status is 1.

A TOWN is a town directory (``…/town``) whose rigs read files outside it,
as ``bench_launch.py`` and ``bench_forecast_cost.py`` build them; the
copies never change it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Run as ``python -c``: the clock stopped at argv[1] (epoch seconds), then the CLI on the rest.
FROZEN = """
import sys, time
from datetime import UTC, datetime
at = float(sys.argv[1])
time.time = lambda: at
import sluice.core.clock as clock
clock.now_utc = lambda: datetime.fromtimestamp(at, UTC)
sys.argv = ["sluice", *sys.argv[2:]]
from sluice.__main__ import entry
entry()
"""


def answer(src: Path, town: Path, at: float, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(src), "SLUICE_TOWN": str(town)}
    done = subprocess.run([sys.executable, "-c", FROZEN, repr(at), *args], env=env, capture_output=True,
                          text=True)
    return f"exit {done.returncode}\n{done.stdout}"


def commands(src: Path, town: Path, at: float, explained: int) -> list[list[str]]:
    """The command lines to compare: the views, and ``explain`` of queued items spread over the queue."""
    listed = json.loads(answer(src, town, at, "scheduler", "list", "--json").split("\n", 1)[1] or "[]")
    ids = [row["id"] for row in listed]
    spread = max(explained - 1, 1)
    picks = sorted({ids[k * (len(ids) - 1) // spread] for k in range(explained)}) if ids else []
    out = [["scheduler", "status", "--json"], ["scheduler", "status", "--json", "--limit", "0"],
           ["scheduler", "list", "--json"], ["scheduler", "list", "--json", "--limit", "50", "--offset", "7"],
           *(["scheduler", "explain", item, "--json"] for item in [*picks, "no-such-item"]),
           ["snapshot", "--json", "--limit", "50"], ["scheduler", "forecast", "--json"],
           ["scheduler", "forecast", "--json", "--limit", "50"], ["scheduler", "run", "--dry-run", "--json"],
           ["scheduler", "status", "--json"]]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("towns", nargs="+", type=Path)
    parser.add_argument("--tree", action="append", required=True, metavar="NAME=SRC")
    parser.add_argument("--at", type=float, default=None, help="the stopped clock, epoch seconds")
    parser.add_argument("--explain", type=int, default=4)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    trees = {name: Path(src).resolve() for name, src in (t.split("=", 1) for t in args.tree)}
    at = args.at if args.at is not None else time.time()
    work = args.work or Path(tempfile.mkdtemp(prefix="same-views-"))
    differ = 0
    for number, town in enumerate(args.towns):
        reference: dict[str, str] | None = None
        for name, src in trees.items():
            copy = work / str(number)  # one path for every tree: the snapshot names its town
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(town, copy, symlinks=True)
            if reference is None:
                lines = commands(src, copy, at, args.explain)
                shutil.rmtree(copy)
                shutil.copytree(town, copy, symlinks=True)
            answers = {" ".join(line): answer(src, copy, at, *line) for line in lines}
            shutil.rmtree(copy, ignore_errors=True)
            if reference is None:
                reference = answers
                print(f"{town}: {len(answers)} answers from {name}, {sum(map(len, answers.values()))} bytes")
                continue
            before = differ
            for line, text in answers.items():
                if text != reference[line]:
                    differ += 1
                    pairs = zip(text, reference[line] + "\0", strict=False)
                    first = next(i for i, (a, b) in enumerate(pairs) if a != b)
                    print(f"{town}: `{line}` differs in {name} at character {first}:\n"
                          f"  {next(iter(trees))}: {reference[line][max(0, first - 80):first + 80]!r}\n"
                          f"  {name}: {text[max(0, first - 80):first + 80]!r}")
            print(f"{town}: {name} {'differs' if differ > before else 'the same'}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
