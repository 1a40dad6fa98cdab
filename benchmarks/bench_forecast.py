"""How accurate `scheduler forecast` is, on real polecats, against one global median for every item.

Usage:  python benchmarks/bench_forecast.py [--runs 200] [--queue 50] [--queues 1] [--cap 4]
                                            [--train-cap 16] [--scale 1] [--seed 23] [--interval 0.5]
                                            [--work DIR] [--json]

A town is built with one rig over a real git repository and a beads export
of ``--runs`` items in three kinds (labels ``size:s``, ``size:m``,
``size:l``, shuffled in equal shares) whose median runtimes stand
1 : 3 : 9 (× ``--scale`` seconds) and whose tokens stand 2,000 : 6,000 :
18,000, each drawn with log-normal noise of σ = 0.5 from a fixed seed.
``executor.command`` is a Python polecat that reads its runtime and tokens
from its title, reports the tokens with ``sluice polecat usage`` (in the
background, as a wrapper would) and sleeps.  A real ``sluice daemon`` drives
every launch.

* The first half of the items runs first, ``--train-cap`` at a time: the
  history the forecast learns from.
* The second half is held out.  Its first ``--queues`` × ``--queue`` items
  are queued ``--queue`` at a time under a town cap of ``--cap``: each queue
  is slung, ``scheduler forecast --json`` is asked at once, and the daemon
  drains it.  The rest run ``--train-cap`` at a time.

Reported, for the model and for the naive baseline (the median and 90th
percentile of every training run, whatever its kind):

* the median relative error ``|p50 − runtime| / runtime`` over the held-out
  runs, the model's learned from the first half only (target: at most half
  the baseline's);
* the share of held-out runs that ended within their p90 (target 85–95 %);
* for each queue, ``|predicted drain − real drain| / real drain``, from the
  forecast's ``at`` to the last run's end (target: within 20 %).  The
  baseline's drain is the same replay with its one median for every item.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path.insert(0, str(SRC))

from sluice.core import forecast as model  # noqa: E402

STAMP = "2026-01-01T00:00:00Z"
KINDS = (("size:s", 1.0, 2000), ("size:m", 3.0, 6000), ("size:l", 9.0, 18000))
SIGMA = 0.5

# The polecat: "w RUNTIME TOKENS" in its title; the usage report runs beside it, so it adds no runtime.
POLECAT = (
    "import os, subprocess, sys, time\n"
    "_, runtime, tokens = sys.argv[1].split()\n"
    "subprocess.Popen([sys.executable, '-m', 'sluice', 'polecat', 'usage', os.environ['SLUICE_ITEM_ID'],"
    " '--tokens', tokens], start_new_session=True)\n"
    "time.sleep(float(runtime))\n"
)


def env_for(town: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(SRC), "SLUICE_TOWN": str(town)}


def sluice(town: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "sluice", *args], env=env_for(town), capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"sluice {' '.join(args[:3])} … failed: {done.stderr.strip()[-400:]}")
    return done.stdout


def workload(runs: int, scale: float, seed: int) -> list[dict]:
    """The items: kinds in equal shares, shuffled; runtime and tokens log-normal around each kind's median."""
    rng = random.Random(seed)
    kinds = [KINDS[n % len(KINDS)] for n in range(runs)]
    rng.shuffle(kinds)
    items = []
    for n, (label, runtime, tokens) in enumerate(kinds):
        seconds = scale * runtime * math.exp(rng.gauss(0.0, SIGMA))
        used = int(tokens * math.exp(rng.gauss(0.0, SIGMA)))
        items.append({"id": f"fc-w{n:04d}", "title": f"w {seconds:.3f} {used}", "status": "open",
                      "priority": 2, "issue_type": "task", "labels": [label], "created_at": STAMP,
                      "updated_at": STAMP})
    return items


def build(work: Path, items: list[dict]) -> Path:
    town, repo, export = work / "town", work / "repo", work / "export" / "issues.jsonl"
    shutil.rmtree(work, ignore_errors=True)
    export.parent.mkdir(parents=True)
    git = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.invalid"}
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=git)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "init"], check=True,
                   env=git)
    export.write_text("".join(json.dumps(item) + "\n" for item in items))
    sluice(town, "init", str(town))
    sluice(town, "rig", "add", "bench", str(repo), "--prefix", "fc", "--items", str(export))
    sluice(town, "config", "set", "executor.command", json.dumps([sys.executable, "-c", POLECAT, "{title}"]))
    return town


def records(town: Path) -> dict[str, dict]:
    """Every run's record by item id (the latest launch of each), read from the town database."""
    from sluice.store.database import runs
    from sluice.store.files.town import Town

    return {r["item_id"]: r for r in runs.read_runs(Town(town)).values()}


def wait_ended(town: Path, ids: list[str], timeout: float) -> dict[str, dict]:
    """The run records of ``ids`` once every one has ended and reported its tokens."""
    deadline = time.monotonic() + timeout
    while True:
        found = records(town)
        rows = [found.get(i) for i in ids]
        if all(r is not None and r.get("outcome") not in (None, "running")
               and r.get("tokens_used") is not None for r in rows):
            return {i: found[i] for i in ids}
        if time.monotonic() > deadline:
            done = sum(1 for r in rows if r is not None and r.get("outcome") not in (None, "running"))
            raise SystemExit(f"only {done} of {len(ids)} runs ended within {timeout:.0f} s")
        time.sleep(0.2)


def seconds(at: str) -> float:
    return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()


def set_cap(town: Path, cap: int) -> None:
    sluice(town, "config", "set", "scheduler.max_polecats", str(cap))
    sluice(town, "config", "set", "scheduler.batch_size", str(cap))


def baseline_drain(at: float, rows: list[dict], started: list[dict], p50: float, p90: float, cap: int,
                   interval: float) -> float:
    """The replay the forecast makes, with one median for every item (queued and running alike)."""
    queue = [model.Queued(r["item_id"], r["rig"], p50, p90) for r in rows]
    running = [model.Running(r["rig"], model.remaining(p50, at - seconds(r["started_at"]))) for r in started]
    result = model.simulate(at, queue, running, model.Limits(town_cap=cap, batch_size=cap, interval=interval))
    return (result.drain_at or at) - at


def measure(args: argparse.Namespace, work: Path) -> dict:
    items = workload(args.runs, args.scale, args.seed)
    town = build(work, items)
    half = args.runs // 2
    train, held = [i["id"] for i in items[:half]], [i["id"] for i in items[half:]]
    longest = args.scale * max(k[1] for k in KINDS) * math.exp(4 * SIGMA)
    daemon = subprocess.Popen([sys.executable, "-m", "sluice", "daemon", "--interval", str(args.interval)],
                              env=env_for(town), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        set_cap(town, args.train_cap)
        sluice(town, "sling", *train, "bench")
        wait_ended(town, train, timeout=60 + 4 * longest * len(train) / args.train_cap)
        set_cap(town, args.cap)
        drains = []
        for start in range(0, min(len(held), args.queue * args.queues), args.queue):
            ids = held[start:start + args.queue]
            sluice(town, "sling", *ids, "bench")
            forecast = json.loads(sluice(town, "scheduler", "forecast", "--json"))
            if forecast.get("drain_at") is None:
                raise SystemExit(f"the queue of {len(ids)} had drained before its forecast was taken"
                                 " (a machine this busy needs a larger --scale)")
            ended = wait_ended(town, ids, timeout=60 + 4 * longest * len(ids) / args.cap)
            drains.append((ids, forecast, ended))
        rest = held[args.queue * args.queues:]
        if rest:  # the held-out runs no queue drained: run at the history's cap, measured one by one
            set_cap(town, args.train_cap)
            sluice(town, "sling", *rest, "bench")
            wait_ended(town, rest, timeout=60 + 4 * longest * len(rest) / args.train_cap)
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=120)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
    found = records(town)
    return score([found[i] for i in train], [found[i] for i in held], drains, args)


def finished(records: list[dict]) -> list[dict]:
    """The runs that ended with a runtime the model counts (``ok``, ``failed``)."""
    return [r for r in records if r.get("outcome") in model.COUNTED and r.get("runtime_seconds") is not None]


def score(train: list[dict], held: list[dict], drains: list, args: argparse.Namespace) -> dict:
    outcomes: dict[str, int] = {}
    for record in train + held:
        outcomes[record.get("outcome")] = outcomes.get(record.get("outcome"), 0) + 1
    learned = model.learn(model.sample_of(r) for r in sorted(train, key=lambda r: r["started_at"]))
    train, held = finished(train), finished(held)
    runtimes = [r["runtime_seconds"] for r in train]
    g50, g90 = model.quantile(runtimes, 0.5), model.quantile(runtimes, 0.9)
    tokens = [r["tokens_used"] for r in train]
    t50 = model.quantile(tokens, 0.5)
    errors, within, token_errors, base_errors, base_within, base_token_errors = [], [], [], [], [], []
    for record in held:
        estimate = learned.estimate(record["rig"], record.get("issue_type"), record.get("labels") or ())
        ran = record["runtime_seconds"]
        errors.append(abs(estimate.runtime_p50 - ran) / ran)
        within.append(ran <= estimate.runtime_p90)
        token_errors.append(abs(estimate.tokens_p50 - record["tokens_used"]) / record["tokens_used"])
        base_errors.append(abs(g50 - ran) / ran)
        base_within.append(ran <= g90)
        base_token_errors.append(abs(t50 - record["tokens_used"]) / record["tokens_used"])
    queues = []
    for ids, forecast, ended in drains:
        at = seconds(forecast["at"])
        real = max(seconds(r["ended_at"]) for r in ended.values()) - at
        predicted = seconds(forecast["drain_at"]) - at
        queued = [row for row in forecast["items"] if row["item_id"] in ended]
        started = [r for r in ended.values() if seconds(r["started_at"]) <= at
                   and r["item_id"] not in {row["item_id"] for row in queued}]
        base = baseline_drain(at, queued, started, g50, g90, args.cap, args.interval)
        queues.append({"items": len(ids), "running_at_forecast": len(started), "real": real,
                       "predicted": predicted, "error": abs(predicted - real) / real,
                       "baseline": base, "baseline_error": abs(base - real) / real})
    return {
        "runs": len(train) + len(held), "train": len(train), "held_out": len(held), "outcomes": outcomes,
        "model": {"p50_error": statistics.median(errors), "within_p90": sum(within) / len(within),
                  "tokens_p50_error": statistics.median(token_errors)},
        "baseline": {"p50_error": statistics.median(base_errors), "within_p90": sum(base_within) / len(held),
                     "tokens_p50_error": statistics.median(base_token_errors)},
        "drains": queues,
        "kinds": {label: learned.estimate("bench", "task", [label]).runtime_p50 for label, _, _ in KINDS},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="items in all; the first half is the history")
    parser.add_argument("--queue", type=int, default=50, help="held-out items per forecast queue")
    parser.add_argument("--queues", type=int, default=1,
                        help="held-out queues drained under --cap; the other held-out runs go at --train-cap")
    parser.add_argument("--cap", type=int, default=4, help="the town cap while a queue drains")
    parser.add_argument("--train-cap", type=int, default=16, help="the town cap of the other runs")
    parser.add_argument("--scale", type=float, default=1.0, help="seconds of the fastest kind's median")
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--interval", type=float, default=0.5, help="the daemon's interval")
    parser.add_argument("--work", type=Path, default=None, help="build the town here and keep it")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.runs < 2 * len(KINDS) or args.queue < 1 or args.cap < 1:
        raise SystemExit("--runs must be at least 6, --queue and --cap at least 1")
    work = args.work or Path(tempfile.mkdtemp(prefix="sluice-bench-forecast-"))
    load = os.getloadavg()[0]
    began = time.perf_counter()
    try:
        found = measure(args, work)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    found["seconds"] = time.perf_counter() - began
    found["load"] = [load, os.getloadavg()[0]]
    if args.json:
        print(json.dumps(found, indent=2))
        return
    m, b = found["model"], found["baseline"]
    print(f"{found['runs']} real runs ({found['train']} learned, {found['held_out']} held out),"
          f" seed {args.seed}, scale {args.scale:g} s; {found['seconds']:.0f} s,"
          f" load {load:.1f} → {found['load'][1]:.1f} on {os.cpu_count()} CPUs")
    if set(found["outcomes"]) != {"ok"}:
        print("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(found["outcomes"].items()))
              + " (only ok and failed runs are scored)")
    print("learned p50 by kind: " + ", ".join(f"{k} {v:.2f} s" for k, v in found["kinds"].items()))
    print()
    print("| figure | forecast | baseline (one global median) | target |")
    print("|---|---|---|---|")
    print(f"| median relative error of runtime p50 | {m['p50_error']:.0%} | {b['p50_error']:.0%} |"
          f" ≤ ½ baseline ({m['p50_error'] / b['p50_error']:.2f}×) |")
    print(f"| held-out runs within their p90 | {m['within_p90']:.0%} | {b['within_p90']:.0%} | 85–95 % |")
    print(f"| median relative error of tokens p50 | {m['tokens_p50_error']:.0%} |"
          f" {b['tokens_p50_error']:.0%} | |")
    for n, q in enumerate(found["drains"], start=1):
        print(f"| drain of queue {n} ({q['items']} items, cap {args.cap}; real {q['real']:.1f} s) |"
              f" {q['predicted']:.1f} s ({q['error']:.0%} off) | {q['baseline']:.1f} s"
              f" ({q['baseline_error']:.0%} off) | within 20 % |")


if __name__ == "__main__":
    main()
