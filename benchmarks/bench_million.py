# ruff: noqa: E501
"""A million-item town: index build, `schedule next`, a 10,000-context dispatch dry run.

Usage:  python benchmarks/bench_million.py [--rigs 10] [--per-rig 100000] [--contexts 10000]
                                           [--runs 5] [--work DIR]

Builds a town of ``--rigs`` rigs, each over its own real git repository and
reading its own ``--per-rig``-item beads export made by ``bench_ready``'s
generator (ids ``m0-…``, ``m1-…``, …; a different seed per rig), then
measures through the installed CLI, interpreter start-up included:

1. the first ``schedule next --limit 5 --json``, which builds the derived
   index of every rig (target: under 60 s for 10 × 100,000 items);
2. ``schedule next --limit 5 --json`` and ``item ready --json`` with no
   queue (target for ``schedule next``: 0.3 s);
3. one ``sling`` of ``--contexts`` ready items (the same number from each
   rig) into an empty queue;
4. with that queue: ``schedule next``, ``scheduler run --dry-run --json``
   (target: 0.5 s), ``scheduler status --json`` and ``scheduler list --json``.

Medians of ``--runs`` alternating runs (each command once per round), CPU
time (user + system) beside wall time, and for every command the peak
resident memory of its worst run (``ru_maxrss`` from ``wait4``; target: under
500 MB).  This process stays small (outputs are parsed in child processes),
since Linux counts a child's pre-exec memory in that figure.

Prints a Markdown section; ``run_all.py --million`` puts it in the document.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run_all import git_repo, measure, rounds, sluice_argv  # noqa: E402

TARGETS = {"build": 60.0, "next": 0.3, "dry": 0.5, "mib": 500}
# Prints the ids of the first N rows that are not epics (an epic slings its children) of a JSON array file.
_IDS = ("import json, sys; rows = [r['id'] for r in json.load(open(sys.argv[1])) if r.get('issue_type') != 'epic'];"
        " print('\\n'.join(rows[:int(sys.argv[2])]))")


def build_town(work: Path, rigs: int, per_rig: int) -> tuple[Path, dict]:
    """The town under ``work`` (made once: a kept ``--work`` is reused), and its environment."""
    town = work / "town"
    env = {**os.environ, "SLUICE_TOWN": str(town), "GIT_CONFIG_NOSYSTEM": "1"}
    done = work / "built"
    if done.exists() and done.read_text() == f"{rigs}x{per_rig}":
        return town, env
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    sluice = sluice_argv()
    subprocess.run([*sluice, "init", str(town)], check=True, env=env, capture_output=True)
    for k in range(rigs):
        repo, export = work / "repos" / f"rig{k}", work / "exports" / f"rig{k}.jsonl"
        export.parent.mkdir(parents=True, exist_ok=True)
        git_repo(repo)
        subprocess.run([sys.executable, str(HERE / "bench_ready.py"), "--items", str(per_rig), "--generate-only",
                        str(export), "--prefix", f"m{k}", "--seed", str(7 + k)], check=True, capture_output=True)
        subprocess.run([*sluice, "rig", "add", f"rig{k}", str(repo), "--prefix", f"m{k}", "--items", str(export)],
                       check=True, env=env, capture_output=True)
    done.write_text(f"{rigs}x{per_rig}")
    return town, env


def ready_ids(sluice: list[str], env: dict, work: Path, rigs: int, contexts: int) -> list[str]:
    """``contexts`` ready ids, as evenly as the rigs allow, parsed in a child process."""
    ids: list[str] = []
    listing = work / "ready.json"
    for k in range(rigs):
        want = contexts // rigs + (k < contexts % rigs)
        with open(listing, "wb") as out:
            subprocess.run([*sluice, "item", "ready", f"rig{k}", "--limit", str(want * 2), "--json"], env=env,
                           check=True, stdout=out)
        picked = subprocess.run([sys.executable, "-c", _IDS, str(listing), str(want)], check=True,
                                capture_output=True, text=True)
        ids += picked.stdout.split()
    return ids


def empty_queue(sluice: list[str], env: dict) -> None:
    """Close every queued context and compact the logs, so each run starts from the same empty queue."""
    subprocess.run([*sluice, "scheduler", "clear"], check=True, env=env, capture_output=True)
    subprocess.run([*sluice, "compact"], check=True, env=env, capture_output=True)


def row(name: str, figures: tuple, target: float | None = None) -> str:
    wall, cpu, mib = figures
    verdict = "" if target is None else (" ✓" if wall <= target else f" ✗ (target {target} s)")
    return f"| {name} | {wall:.3f}{verdict} | {cpu:.3f} | {mib} |"


def million(work: Path, rigs: int, per_rig: int, contexts: int, runs: int) -> list[str]:
    sluice = sluice_argv()
    began = time.perf_counter()
    reused = (work / "built").exists()
    town, env = build_town(work, rigs, per_rig)
    made = time.perf_counter() - began
    for key, value in (("scheduler.max_polecats", "10"), ("scheduler.compact_retention", "0s")):
        subprocess.run([*sluice, "config", "set", key, value], check=True, env=env, capture_output=True)
    empty_queue(sluice, env)
    shutil.rmtree(town / ".sluice" / "runtime" / "index", ignore_errors=True)
    nxt = [*sluice, "schedule", "next", "--limit", "5", "--json"]
    cold = measure(nxt, env)
    idle = rounds({"next": nxt, "ready": [*sluice, "item", "ready", "--json"]}, env, runs)
    ids = ready_ids(sluice, env, work, rigs, contexts)
    slung = measure([*sluice, "sling", *ids, "--json"], env)
    queued = rounds({
        "next": nxt,
        "dry": [*sluice, "scheduler", "run", "--dry-run", "--json"],
        "status": [*sluice, "scheduler", "status", "--json"],
        "list": [*sluice, "scheduler", "list", "--json"],
    }, env, runs)
    empty_queue(sluice, env)
    peak = max(f[2] for f in [cold, slung, *idle.values(), *queued.values()])
    total = rigs * per_rig
    return [
        f"### A {total:,}-item town ({rigs} rig{'s' * (rigs != 1)} × {per_rig:,}, each over its own git repository;"
        f" median of {runs} alternating runs)",
        "",
        ("The town was reused from an earlier run." if reused else
         f"Generating the exports and adding the rigs took {made:.0f} s (not part of any figure)."),
        "",
        "| command | wall s | cpu s | peak MiB |",
        "|---|---|---|---|",
        row("first `schedule next --limit 5 --json` (builds every rig's derived index)", cold, TARGETS["build"]),
        row("`schedule next --limit 5 --json`", idle["next"], TARGETS["next"]),
        row("`item ready --json` (100 rows)", idle["ready"]),
        row(f"`sling` of {len(ids):,} ready items ({len(ids) // max(rigs, 1):,} per rig), once", slung),
        row(f"`schedule next --limit 5 --json`, {len(ids):,} queued", queued["next"], TARGETS["next"]),
        row(f"`scheduler run --dry-run --json`, {len(ids):,} queued", queued["dry"], TARGETS["dry"]),
        row(f"`scheduler status --json`, {len(ids):,} queued", queued["status"]),
        row(f"`scheduler list --json`, {len(ids):,} queued", queued["list"]),
        "",
        f"Peak memory of any command: {peak} MiB ({'under' if peak < TARGETS['mib'] else 'OVER'} the {TARGETS['mib']} MB target).",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rigs", type=int, default=10)
    parser.add_argument("--per-rig", type=int, default=100_000)
    parser.add_argument("--contexts", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--work", type=Path, default=None, help="build the town here and keep it (reused when it matches)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="sluice-million-"))
    try:
        lines = million(work, args.rigs, args.per_rig, args.contexts, args.runs)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} on {os.cpu_count()} CPUs")
    print()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
