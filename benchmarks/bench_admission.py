"""Time one dispatch cycle over 10,000 queued contexts with every admission rule on.

Usage:  python benchmarks/bench_admission.py [--items 10000] [--runs 5] [--keep DIR]

Builds a throwaway town with three rigs (real git repositories) and
``--items`` queued sling contexts whose items carry priorities, labels, token
estimates and ``metadata.touches`` (some overlapping), then measures, side by
side and alternating so machine noise hits both alike:

* ``rules off`` — only the town cap and batch, as before admission control;
* ``rules on``  — town cap, batch, a cap on every rig, label caps, a town and
  a rig token budget with spend already in the window, a throttle on one
  rig, the breaker cooldown, aging in the policy, and the overlap gate;

each as (a) the in-process cycle, ``run_cycle(dry_run=True)``: survey,
ranking and admission, what a daemon tick does before launching, and (b) the
pure :func:`sluice.core.admission.admit` alone over the ranked survey.  The
target: the cycle with all rules on stays under 1 s.  Medians of ``--runs``.
A dry run launches nothing, so the figures are the planning cost only.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RIGS = (("alpha", "al"), ("beta", "be"), ("gamma", "ga"))
LABELS = ("gpu", "db", "ui", "docs")
TOUCHES = ("src/api/**", "src/web/*", "docs/*.md", "src/api/auth.py", "tests/**")


def build_town(root: Path, items: int) -> Path:
    from sluice.scheduler.launch.sling import SlingOptions, sling
    from sluice.store.files.town import Town, init_town
    from sluice.store.items.rigs import add_rig

    town_dir = root / "town"
    init_town(town_dir)
    town = Town(town_dir)
    for name, prefix in RIGS:
        repo = root / "repos" / name
        subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=b", "-c", "user.email=b@example.invalid",
                        "commit", "-q", "--allow-empty", "-m", "init"], check=True)
        add_rig(town, name, repo, prefix)
    stamp = "2026-01-01T00:00:00Z"
    per_rig: dict[str, list[str]] = {name: [] for name, _ in RIGS}
    for n in range(items):
        name, prefix = RIGS[n % len(RIGS)]
        item_id = f"{prefix}-w{n:05d}"
        record = {"id": item_id, "title": f"work {n}", "status": "open", "priority": n % 5,
                  "issue_type": "task", "created_at": stamp, "updated_at": stamp,
                  "labels": [LABELS[n % len(LABELS)]],
                  "metadata": {"estimated_tokens": 500 + (n % 7) * 250}}
        if n % 3:
            record["metadata"]["touches"] = [TOUCHES[n % len(TOUCHES)]]
        path = town.rig_dir(name) / "issues.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
        per_rig[name].append(item_id)
    town.update_config(lambda c: _set(c, {"scheduler.max_polecats": 40, "scheduler.batch_size": 20,
                                          "executor.command": [sys.executable, "-c", "pass"]}))
    for name, ids in per_rig.items():
        result = sling(Town(town_dir), [*ids, name], SlingOptions())
        assert result.ok, result.errors[:3]
    return town_dir


def _set(config, values: dict):
    """``config`` with dotted keys set (None removes a rig cap), validated as a whole."""
    from sluice.core.models import TownConfig

    data = config.model_dump()
    for key, value in values.items():
        *parents, leaf = key.split(".")
        node = data
        for part in parents:
            node = node[part]
        node[leaf] = value
    return TownConfig.model_validate(data)


def rules(town_dir: Path, on: bool) -> None:
    from sluice.store.database import admission_state as kept
    from sluice.store.files.policy import set_policy
    from sluice.store.files.town import Town

    town = Town(town_dir)
    values = {
        "rigs.alpha.max_polecats": 6 if on else None, "rigs.beta.max_polecats": 8 if on else None,
        "rigs.gamma.max_polecats": 10 if on else None,
        "scheduler.label_caps": {"gpu": 3, "db": 4} if on else {},
        "scheduler.token_budget": 40000 if on else 0, "rigs.beta.token_budget": 6000 if on else 0,
        "scheduler.breaker_cooldown": "1h",
    }
    town.update_config(lambda c: _set(c, values))
    set_policy(town.policy_path, town.lock_path("policy"), aging=0.25 if on else 0.0, aging_max=2.0)
    now = time.time()
    if on:
        for n in range(50):
            kept.record_launch(town, rig=RIGS[n % 3][0], item_id=f"x{n}", context_id="", polecat_id=f"pc-{n}",
                               tokens=300, now=now - n, window=3600)
        kept.set_throttle(town, now + 3600, "gamma", "benchmark", "bench", now)
    else:
        kept.clear_throttle(town, "gamma", now)
        with town.db.transaction():  # the whole ledger taken back, in one transaction
            for entry in kept.charges(town, 0.0, 0.0):
                kept.withdraw_charge(town, entry["charge"])


def time_cycle(town_dir: Path) -> tuple[float, float, dict]:
    from sluice.scheduler.launch import admission
    from sluice.scheduler.launch.dispatch import run_cycle
    from sluice.scheduler.queue.pending import survey
    from sluice.store.files.town import Town
    from sluice.store.items.rigstore import Stores

    town = Town(town_dir)
    start = time.perf_counter()
    report = run_cycle(town, dry_run=True)
    cycle = time.perf_counter() - start
    town = Town(town_dir)
    config = town.reload_config()
    stores = Stores(town)
    view = survey(town, stores, config.scheduler.max_dispatch_failures, [], lambda _c: None)
    start = time.perf_counter()
    admission.assess(town, stores, view, [], config.scheduler.batch_size)
    admit = time.perf_counter() - start
    return cycle, admit, {"planned": len(report.planned), "reason": report.reason, "why": report.why}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", type=Path, default=None, help="Build the town here and keep it.")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="sluice-bench-admission-"))
    try:
        started = time.perf_counter()
        town = build_town(root, args.items)
        print(f"town with {args.items} queued contexts built in {time.perf_counter() - started:.1f} s")
        figures: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        last: dict[bool, dict] = {}
        for _ in range(args.runs):
            for on in (False, True):  # alternate, so noise from other work hits both alike
                rules(town, on)
                cycle, admit, summary = time_cycle(town)
                figures[on].append((cycle, admit))
                last[on] = summary
        for on in (False, True):
            cycle = statistics.median(c for c, _ in figures[on])
            admit = statistics.median(a for _, a in figures[on])
            name = "rules on " if on else "rules off"
            print(f"{name}: cycle (dry run) {cycle:.3f} s, admission alone {admit * 1000:.1f} ms;"
                  f" last plan {last[on]['planned']} item(s), reason {last[on]['reason']},"
                  f" held {last[on]['why']}")
        on_cycle = statistics.median(c for c, _ in figures[True])
        off_cycle = statistics.median(c for c, _ in figures[False])
        print(f"ratio rules on / off: {on_cycle / off_cycle:.2f}x; target under 1 s: "
              f"{'met' if on_cycle < 1.0 else 'NOT met'}")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
