"""Time the local executor's start of one polecat — its watcher's start up to the reported pid — per tree.

Usage:  python benchmarks/bench_watcher.py [--launches 40] [--rounds 5] [--tree NAME=SRC ...] [--json]

Every local launch waits for a fresh watcher interpreter to start the
polecat and report its pid (``_spawn_watcher`` and ``_reported`` in
``sluice.executors.local``; ``_start_watched`` in older trees), so
that start is a floor under the cost of every launch, whatever the queue.
For each tree (``--tree before=/old/src --tree after=src``; default: this
checkout's ``src``) a child interpreter with ``PYTHONPATH`` set to the tree
starts ``--launches`` watched ``/bin/true`` polecats one after the other and
reports the wall time per launch up to the pid and the CPU time of its
children (the watchers and the polecats) per launch.  The trees run
alternately, round by round, so a slow spell of a shared machine falls on
both alike; the median round is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

PROBE = r"""
import json, os, resource, sys, tempfile, time
from pathlib import Path
try:
    from sluice.executors.local import _reported, _spawn_watcher

    def _start_watched(*args):
        return _reported(*_spawn_watcher(*args))
except ImportError:  # a tree from before the watcher's start and its report were two steps
    from sluice.executors.local import _start_watched

launches = int(sys.argv[1])
work = Path(tempfile.mkdtemp(prefix="sluice-bench-watcher-"))
started, watchers = time.perf_counter(), []
before = resource.getrusage(resource.RUSAGE_CHILDREN)
for n in range(launches):
    _pid, watcher = _start_watched(["true"], work, dict(os.environ), work / f"{n}.log", work / f"{n}.exit",
                                   work / f"{n}.started")
    watchers.append(watcher)
wall = time.perf_counter() - started
for watcher in watchers:
    watcher.wait()
after = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
print(json.dumps({"wall_ms": 1000 * wall / launches, "cpu_ms": 1000 * cpu / launches}))
"""


def measure(src: Path, launches: int) -> dict:
    if not (src / "sluice" / "executors" / "local.py").is_file():
        raise SystemExit(f"{src}: no sluice source tree there (expected sluice/executors/local.py)")
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, "-c", PROBE, str(launches)], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"the probe failed under {src}: {last}")
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=SRC")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    trees = dict(tree.split("=", 1) for tree in args.tree) or {"this": str(HERE.parent / "src")}
    rounds: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, src in trees.items():
            rounds[name].append(measure(Path(src), args.launches))
    result = {name: {key: statistics.median(r[key] for r in runs) for key in ("wall_ms", "cpu_ms")}
              for name, runs in rounds.items()}
    if args.json:
        print(json.dumps(result))
        return 0
    first = next(iter(result.values()))
    print(f"{'tree':<12} {'to pid, wall':>14} {'CPU per launch':>16} {'CPU vs first':>13}")
    for name, figures in result.items():
        print(f"{name:<12} {figures['wall_ms']:>11.1f} ms {figures['cpu_ms']:>13.1f} ms "
              f"{figures['cpu_ms'] / first['cpu_ms']:>12.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
