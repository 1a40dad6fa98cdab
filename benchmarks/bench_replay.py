"""What the queue replay (`sluice.core.replay.simulate`) costs over long queues, under each kind of cap.

Usage:  python benchmarks/bench_replay.py [--sizes 1000,10000,100000] [--runs 3] [--timeout 120]
                                          [--tree NAME=SRC ...] [--json]

Every ``scheduler forecast``, ``snapshot`` (so ``top`` and ``sluice web``),
``scheduler explain`` of a queued item and whole ``scheduler list`` replays
the queue.  Each case is a queue of ``--sizes`` items, four shapes of them
interleaved as a ranking leaves them (two rigs, two issue kinds' runtimes,
labels), replayed from a town of 1,000 slots with 20 launches a tick:

* ``no cap``: only the town's cap;
* ``rig cap 5``: one of the two rigs may hold 5 slots;
* ``own runtimes``: the rig cap, and every item its own runtime (as items
  with their own ``estimated_minutes`` have);
* ``label cap 3``: the items with label ``db`` may hold 3;
* ``touches``: each rig's items all touch ``src/**``, so one at a time per rig;
* ``budget``: a town budget of 40 launches' tokens an hour.

Each tree (default: this checkout's ``src``) replays each case in a fresh
interpreter of its own; the trees alternate case by case, and a replay
still going after ``--timeout`` seconds is stopped and reported as such
(that tree is not run on larger sizes of that case).  The figure is the
median CPU time of ``--runs`` replays, building the queue not included.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from bench_launch import trees_of  # the benchmarks' directory is the script's

CASES = ("no cap", "rig cap 5", "own runtimes", "label cap 3", "touches", "budget")

#: Run in the tree's own interpreter: builds the case's queue, replays it ``runs`` times, prints the CPU s.
PROBE = r"""
import json, sys, time
from sluice.core.replay import Limits, Queued, simulate
case, size, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
kinds = [("api", 600.0, 1500.0, frozenset({"db"})), ("web", 1800.0, 4000.0, frozenset()),
         ("api", 1800.0, 4000.0, frozenset()), ("web", 600.0, 1500.0, frozenset({"db"}))]
touches = ("src/**",) if case == "touches" else ()
own = 0.001 if case == "own runtimes" else 0.0
queue = [Queued(f"it-{n}", rig, p50 + own * n, p90 + own * n, labels=labels, touches=touches, tokens=5000)
         for n, (rig, p50, p90, labels) in ((n, kinds[(n * 7 + n // 3) % 4]) for n in range(size))]
limits = {"no cap": {}, "rig cap 5": {"rig_caps": {"api": 5}}, "own runtimes": {"rig_caps": {"api": 5}},
          "label cap 3": {"label_caps": {"db": 3}},
          "touches": {}, "budget": {"town_budget": 200_000, "budget_window": 3600.0}}[case]
limits = Limits(town_cap=1000, batch_size=20, interval=60.0, **limits)
times, drain = [], None
for _ in range(runs):
    start = time.process_time()
    drain = simulate(0.0, queue, (), limits).drain_at
    times.append(time.process_time() - start)
print(json.dumps({"cpu": sorted(times)[len(times) // 2], "drain": drain}))
"""


def replay(src: Path, case: str, size: int, runs: int, timeout: float) -> dict | None:
    """The tree's median CPU s and drain for one case, or None when it ran past ``timeout``."""
    try:
        done = subprocess.run([sys.executable, "-c", PROBE, case, str(size), str(runs)], capture_output=True,
                              text=True, timeout=timeout, env={"PYTHONPATH": str(src)}, check=True)
    except subprocess.TimeoutExpired:
        return None
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a replay is stopped")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=SRC")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    trees = trees_of(args.tree)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    results: dict[str, dict[str, dict[int, dict | None]]] = {case: {name: {} for name in trees}
                                                              for case in CASES}
    for case in CASES:
        for size in sizes:
            for name, src in trees.items():
                runs = results[case][name]
                if runs and any(found is None for found in runs.values()):
                    runs[size] = None  # ran past the timeout on a smaller queue
                    continue
                runs[size] = replay(src, case, size, args.runs, args.timeout)
            drains = {found["drain"] for found in (results[case][n][size] for n in trees) if found}
            if len(drains) > 1:
                raise SystemExit(f"{case} at {size}: the trees disagree on the drain: {sorted(drains)}")
    if args.json:
        print(json.dumps({case: {name: {str(size): found for size, found in runs.items()}
                                 for name, runs in by_tree.items()} for case, by_tree in results.items()},
                         indent=2))
        return
    names = list(trees)
    print("| case | queued | " + " | ".join(f"{name}: CPU s" for name in names) + " |")
    print("|---|---|" + "---|" * len(names))
    for case in CASES:
        for size in sizes:
            cells = []
            for name in names:
                found = results[case][name][size]
                cells.append(f"over {args.timeout:g} s" if found is None else f"{found['cpu']:.3f}")
            print(f"| {case} | {size:,} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
