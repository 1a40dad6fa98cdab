"""A stand-in polecat for demos and tests: "works" a while, then closes its item.

``python -m sluice.demo_worker ITEM_ID`` sleeps ``SLUICE_DEMO_WORK_SECONDS``
(a number, or ``LOW-HIGH`` for a random span; default 2–5 s) and then closes
the item with ``sluice item close ITEM --reason done``, as a real agent would
when its work is finished.  The scheduler itself never closes work items.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time


def work_span(spec: str | None) -> tuple[float, float]:
    """The (low, high) seconds of ``"1.5"`` or ``"2-5"`` (default 2–5); ValueError if it is neither."""
    spec = (spec or "2-5").strip()
    low, sep, high = spec.partition("-")
    try:
        span = (float(low), float(high) if sep else float(low))
    except ValueError:
        raise ValueError(f"{spec!r} is not N or LOW-HIGH seconds") from None
    if not all(0 <= value < float("inf") for value in span):
        raise ValueError(f"{spec!r} is not N or LOW-HIGH seconds")
    return span


def work_seconds(spec: str | None) -> float:
    """Seconds to work: ``"1.5"`` exactly, ``"2-5"`` uniformly at random, default 2–5."""
    try:
        low, high = work_span(spec)
    except ValueError as err:
        raise SystemExit(f"demo worker: SLUICE_DEMO_WORK_SECONDS: {err}") from None
    return random.uniform(low, high)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m sluice.demo_worker ITEM_ID", file=sys.stderr)
        return 2
    item_id = args[0]
    seconds = work_seconds(os.environ.get("SLUICE_DEMO_WORK_SECONDS"))
    print(f"demo polecat working on {item_id} for {seconds:.1f}s", flush=True)
    time.sleep(max(0.0, seconds))
    done = subprocess.run(
        [sys.executable, "-m", "sluice", "item", "close", item_id, "--reason", "done"],
        capture_output=True,
        text=True,
    )
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    if done.returncode == 0:
        print(f"closed {item_id}", flush=True)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
