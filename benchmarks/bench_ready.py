"""Time `sluice item ready` and `sluice item blocked` on a 100,000-item beads rig.

Usage:  python benchmarks/bench_ready.py [--items 100000] [--runs 5] [--keep DIR]

Builds a throwaway town whose one rig reads a generated beads export
(``rig add --items``), then measures, through the installed CLI:

* ``item ready --limit 0 --json`` cold (the first run, which builds the
  derived index) and warm (median of ``--runs``);
* ``item blocked --json`` warm (median of ``--runs``);
* the peak resident memory of each command (``ru_maxrss`` from ``wait4``).

The generated rig looks like a busy real one: about 30% closed, epics with
parent-child children (some nested), ``blocks`` chains, hooked / in-progress
/ deferred items, ephemeral wisps blocking work, estimated tokens in
metadata, labels, and a few hundred bytes of description per item
(about 32 MB in all).  Only the standard library and the ``sluice`` CLI are
used, so the figures include interpreter start-up, as a user sees them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

WORDS = [
    "scheduler", "rig", "polecat", "sling", "context", "ready", "blocked", "epic", "dispatch",
    "worktree", "merge", "queue", "token", "budget", "index", "store", "ledger", "review",
    "refactor", "flaky", "test", "cache", "latency", "parser", "export", "import", "config",
    "daemon", "patrol", "witness", "convoy", "molecule", "formula", "hook", "branch", "commit",
    "rebase", "lint", "docs", "benchmark",
]
LABELS = ["backend", "cli", "docs", "perf", "infra", "ux"]


def b36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        number, rem = divmod(number, 36)
        out = digits[rem] + out
        if not number:
            return out


def stamp(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%SZ")


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def generate(path: Path, count: int, seed: int = 7, prefix: str = "bn") -> dict:
    """Write ``count`` beads records with ids ``<prefix>-…`` to ``path``; returns a summary of the mix."""
    rng = random.Random(seed)
    start = datetime(2025, 3, 1, tzinfo=UTC)
    records: list[dict] = []
    epics: list[str] = []
    mix = {"closed": 0, "epics": 0, "children": 0, "blocks": 0, "wisps": 0}

    def new(item_id: str, index: int, issue_type: str = "task") -> dict:
        created = start + timedelta(seconds=index * 240 + rng.randint(0, 200))
        status = rng.choices(
            ["closed", "open", "in_progress", "hooked", "deferred", "blocked", "pinned"],
            weights=[30, 60, 5, 1.5, 1.5, 1.8, 0.2],
        )[0]
        record = {
            "id": item_id,
            "title": sentence(rng, rng.randint(2, 6)).capitalize(),
            "description": sentence(rng, rng.randint(1, 6)),
            "status": status,
            "priority": rng.choices([0, 1, 2, 3, 4], weights=[3, 15, 50, 22, 10])[0],
            "issue_type": issue_type,
            "created_at": stamp(created),
            "updated_at": stamp(created + timedelta(hours=rng.randint(0, 400))),
        }
        if status == "closed":
            record["closed_at"] = record["updated_at"]
            record["close_reason"] = "Closed"
            mix["closed"] += 1
        if rng.random() < 0.6:
            record["metadata"] = {"estimated_tokens": rng.choice([200, 800, 1500, 4000, 12000])}
        if rng.random() < 0.4:
            record["labels"] = rng.sample(LABELS, rng.randint(1, 2))
        if status in ("hooked", "in_progress"):
            record["assignee"] = f"rig/polecats/p{rng.randint(1, 40)}"
        if rng.random() < 0.002:
            record["defer_until"] = stamp(datetime.now(UTC) + timedelta(days=30))
        return record

    def dep(source: str, target: str, dep_type: str, created: str) -> dict:
        return {"issue_id": source, "depends_on_id": target, "type": dep_type, "created_at": created,
                "metadata": "{}"}

    index = 0
    while index < count:
        roll = rng.random()
        if roll < 0.04 and index + 12 < count:  # an epic with children, sometimes grandchildren
            epic_id = f"{prefix}-{b36(index + 36**3)}"
            epic = new(epic_id, index, "epic")
            records.append(epic)
            epics.append(epic_id)
            mix["epics"] += 1
            index += 1
            for n in range(1, rng.randint(4, 12)):
                child_id = f"{epic_id}.{n}"
                child = new(child_id, index)
                child["dependencies"] = [dep(child_id, epic_id, "parent-child", child["created_at"])]
                if n > 1 and rng.random() < 0.5:  # steps of an epic often chain
                    previous = f"{epic_id}.{n - 1}"
                    child["dependencies"].append(dep(child_id, previous, "blocks", child["created_at"]))
                    mix["blocks"] += 1
                records.append(child)
                mix["children"] += 1
                index += 1
                if rng.random() < 0.15 and index < count:
                    grand_id = f"{child_id}.1"
                    grand = new(grand_id, index)
                    grand["dependencies"] = [dep(grand_id, child_id, "parent-child", grand["created_at"])]
                    records.append(grand)
                    mix["children"] += 1
                    index += 1
            continue
        if roll < 0.07:  # a molecule wisp that a hooked work item waits on
            wisp_id = f"{prefix}-wisp-{b36(index + 36**4)}"
            wisp = new(wisp_id, index)
            wisp["ephemeral"] = True
            wisp["wisp_type"] = "patrol"
            records.append(wisp)
            mix["wisps"] += 1
            index += 1
            continue
        item_id = f"{prefix}-{b36(index + 36**3)}"
        record = new(item_id, index, rng.choices(["task", "bug", "feature", "chore", "merge-request"],
                                                 weights=[60, 20, 10, 7, 3])[0])
        deps = []
        if records and rng.random() < 0.25:
            target = records[-rng.randint(1, min(len(records), 400))]["id"]
            deps.append(dep(item_id, target, "blocks", record["created_at"]))
            mix["blocks"] += 1
        if records and rng.random() < 0.05:
            target = records[rng.randrange(len(records))]["id"]
            loose = rng.choice(["related", "discovered-from"])
            deps.append(dep(item_id, target, loose, record["created_at"]))
        if rng.random() < 0.01:
            deps.append(dep(item_id, "external:other:capability", "blocks", record["created_at"]))
        if deps:
            record["dependencies"] = deps
        records.append(record)
        index += 1

    with open(path, "w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, separators=(",", ":")) + "\n")
    mix["items"] = len(records)
    mix["bytes"] = path.stat().st_size
    return mix


def sluice_argv() -> list[str]:
    found = shutil.which("sluice")
    return [found] if found else [sys.executable, "-m", "sluice"]


def measure(argv: list[str], env: dict, out_path: Path) -> tuple[float, int, float]:
    """(wall seconds, peak RSS in MiB, CPU seconds) of one command run to completion.

    Stdout goes to ``out_path``.  CPU time (user + system) is reported beside
    wall time because it barely moves when other work shares the machine.

    The peak comes from ``wait4``.  Linux carries the pre-exec memory of a
    forked child into that figure, so this process keeps itself small: the
    generator and the JSON parsing of outputs run in child processes.
    """
    with open(out_path, "wb") as out:
        began = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, env=env)
        _pid, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - began
        proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read() if proc.stderr else b""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err.decode(errors='replace')}")
    return elapsed, usage.ru_maxrss // 1024, usage.ru_utime + usage.ru_stime


def count_rows(path: Path) -> int:
    """Rows in a JSON array file, parsed in a child process (see :func:`measure`)."""
    code = "import json, sys; print(len(json.load(open(sys.argv[1]))))"
    return int(subprocess.run([sys.executable, "-c", code, str(path)], check=True, capture_output=True,
                              text=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100_000, help="items to generate (default 100000)")
    parser.add_argument("--runs", type=int, default=5, help="warm runs per command (median reported)")
    parser.add_argument("--keep", type=Path, help="build the town here and keep it (default: temp dir)")
    parser.add_argument("--generate-only", type=Path, metavar="FILE", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", default="bn", help=argparse.SUPPRESS)  # with --generate-only
    parser.add_argument("--seed", type=int, default=7, help=argparse.SUPPRESS)  # with --generate-only
    args = parser.parse_args()
    if args.generate_only:
        print(json.dumps(generate(args.generate_only, args.items, args.seed, args.prefix)))
        return

    base = args.keep or Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    try:
        run(base, args.items, args.runs)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


def run(base: Path, count: int, runs: int) -> None:
    sluice = sluice_argv()
    town, repo, items = base / "town", base / "repo", base / "export" / "issues.jsonl"
    out = base / "out.json"
    for path in (town, repo, items.parent):
        path.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SLUICE_TOWN": str(town), "GIT_CONFIG_NOSYSTEM": "1"}
    git_env = {**env, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid",
               "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.invalid"}
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=git_env)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "init"],
                   check=True, env=git_env)

    began = time.perf_counter()
    made = subprocess.run([sys.executable, __file__, "--items", str(count), "--generate-only", str(items)],
                          check=True, capture_output=True, text=True)
    mix = json.loads(made.stdout)
    took = time.perf_counter() - began
    print(f"generated {mix['items']:,} items, {mix['bytes'] / 2**20:.1f} MiB in {took:.1f} s"
          f" ({mix['closed']:,} closed, {mix['epics']:,} epics with {mix['children']:,} children,"
          f" {mix['blocks']:,} blocks edges, {mix['wisps']:,} wisps)")
    subprocess.run([*sluice, "init", str(town)], check=True, env=env, capture_output=True)
    subprocess.run([*sluice, "rig", "add", "bench", str(repo), "--prefix", "bn", "--items", str(items)],
                   check=True, env=env, capture_output=True)

    def series(label: str, argv: list[str], times: int) -> tuple:
        results = [measure(argv, env, out) for _ in range(times)]
        seconds = statistics.median(r[0] for r in results)
        cpu = statistics.median(r[2] for r in results)
        rows = count_rows(out) if argv[-1] == "--json" else 0
        return label, seconds, cpu, max(r[1] for r in results), rows

    ready = [*sluice, "item", "ready", "--limit", "0", "--json"]
    rows = [
        series("ready --limit 0 (cold: builds the index)", ready, 1),
        series(f"ready --limit 0 (warm, median of {runs})", ready, runs),
        series(f"ready (limit 100, warm, median of {runs})", [*sluice, "item", "ready", "--json"], runs),
        series(f"blocked (warm, median of {runs})", [*sluice, "item", "blocked", "--json"], runs),
        series(f"--help (median of {runs})", [*sluice, "--help"], runs),
    ]

    print()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"{'command':<42} {'wall s':>8} {'cpu s':>8} {'max RSS MiB':>12} {'rows':>8}")
    for name, seconds, cpu, rss, count_rows_ in rows:
        print(f"{name:<42} {seconds:>8.3f} {cpu:>8.3f} {rss:>12} {count_rows_:>8}")
    target = rows[1][1]
    verdict = "meets" if target < 0.5 else "MISSES"
    print(f"\nwarm ready {target:.3f} s {verdict} the 0.5 s target; "
          f"peak RSS {max(r[3] for r in rows)} MiB (limit 300 MiB)")


if __name__ == "__main__":
    main()
