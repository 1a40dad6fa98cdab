"""Time one daemon tick (``sluice daemon --once``) of two sluice source trees side by side.

Usage:  python benchmarks/bench_tick.py --town DIR --before SRC --after SRC [--runs 5]

Each run starts ``python -m sluice daemon --once`` with ``PYTHONPATH`` set to
one tree's ``src``, alternating the trees, against the same town (which the
caller prepares: e.g. the million-item town with its queue paused, so a tick
launches nothing and only its bookkeeping is timed).  Prints each tree's
median wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def tick(src: Path, town: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(src), "SLUICE_TOWN": str(town)}
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sluice", "daemon", "--once"], env=env, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--town", type=Path, required=True)
    parser.add_argument("--before", type=Path, required=True, help="the src directory of one tree")
    parser.add_argument("--after", type=Path, required=True, help="the src directory of the other")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    trees = {"before": args.before, "after": args.after}
    for src in trees.values():
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=False)
    seen: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(args.runs):
        for name, src in trees.items():
            seen[name].append(tick(src, args.town))
    for name, times in seen.items():
        print(f"{name}: {statistics.median(times):.3f} s median of {args.runs}")


if __name__ == "__main__":
    main()
