# ruff: noqa: E501
"""Regenerate the figures of docs/performance.md in one command.

Usage:  python benchmarks/run_all.py [--items 100000] [--batch 1000,10000,100000] [--runs 5]
                                     [--million [10x100000]] [--million-contexts 10000]
                                     [--metagit 10000,100000,1000000] [--work DIR]

Prints one Markdown document (machine, date, load, then the tables) on
stdout; paste it into ``docs/performance.md``.  Every figure is the median of
``--runs`` runs taken alternately (each command once per round), wall time
and CPU time (user + system, which barely moves when others share the
machine) and the peak memory of the worst run, all through the installed
CLI, interpreter start-up included:

* **hot reads** on a generated ``--items`` beads rig (``bench_ready``'s
  generator): ``--version``, ``item ready``, ``item blocked``, ``item show``,
  ``schedule next``, ``scheduler status``, ``scheduler list`` and
  ``scheduler explain``, each also as its CPU time over a bare
  ``python -c "import json, sqlite3"`` timed in the same rounds (what an
  interpreter that reads JSON and SQLite costs before any sluice code);
* **MCP server**: ``benchmarks/bench_mcp.py`` on the same rig, over stdio with
  the official client: a fresh server's first ``sluice_schedule_next``, its
  warm calls, and calls that re-open the town (``--runs`` fresh servers);
* **batch work** at each ``--batch`` size N: ``sling`` of N items into an
  empty queue, the same sling again (all already queued), ``scheduler clear``
  of the N contexts, each also as wall time per context so linear growth
  shows; between rounds ``sluice compact`` (retention 0) empties the log, so
  every round starts alike.  All N ids go in one command line (100,000 ids
  of 10 characters take about 1.9 MB of Linux's 2 MB ``ARG_MAX``; a size
  that does not fit is reported, not run);
* **a million items** with ``--million`` (``RIGSxITEMS``, default 10 ×
  100,000): ``benchmarks/bench_million.py``'s index build, ``schedule next``
  and a dispatch dry run over ``--million-contexts`` queued contexts, with
  peak memory (about a minute to build, more on a busy machine);
* **metagit**: ``benchmarks/bench_next.py`` at each ``--metagit`` size, which
  needs the metagit peer scripts in ``../shared/peers/metagit`` (or
  ``METAGIT_PEER_DIR``); without them the table says so instead.  A metagit
  run still going after 10 minutes is killed and the table says it could
  not finish.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def sluice_argv() -> list[str]:
    found = Path(sys.executable).parent / "sluice"
    return [str(found)] if found.exists() else [sys.executable, "-m", "sluice"]


def measure(argv: list[str], env: dict) -> tuple[float, float, int]:
    """(wall s, cpu s, peak RSS MiB) of one run; a failure stops the benchmark with its message."""
    began = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _pid, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - began
    err = proc.stderr.read() if proc.stderr else b""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv[:6])} … failed: {err.decode(errors='replace').strip()}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss // 1024


def rounds(commands: dict[str, list[str]], env: dict, runs: int, between=None) -> dict[str, tuple]:
    """Each command once per round, ``runs`` rounds; medians of wall and CPU, worst memory."""
    seen: dict[str, list] = {name: [] for name in commands}
    for _ in range(runs):
        for name, argv in commands.items():
            seen[name].append(measure(argv, env))
        if between is not None:
            between()
    return {name: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs),
                   max(r[2] for r in rs)) for name, rs in seen.items()}


def git_repo(path: Path) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.invalid"}
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "--allow-empty", "-m", "init"], check=True, env=env)


def hot_reads(work: Path, items: int, runs: int) -> list[str]:
    sluice = sluice_argv()
    town, repo, export = work / "hot" / "town", work / "hot" / "repo", work / "hot" / "export" / "issues.jsonl"
    export.parent.mkdir(parents=True, exist_ok=True)
    git_repo(repo)
    subprocess.run([sys.executable, str(HERE / "bench_ready.py"), "--items", str(items), "--generate-only",
                    str(export)], check=True, capture_output=True)
    env = {**os.environ, "SLUICE_TOWN": str(town)}
    subprocess.run([*sluice, "init", str(town)], check=True, env=env, capture_output=True)
    subprocess.run([*sluice, "rig", "add", "bench", str(repo), "--prefix", "bn", "--items", str(export)],
                   check=True, env=env, capture_output=True)
    cold = measure([*sluice, "item", "ready", "--json"], env)
    ready = [row["id"] for row in json.loads(subprocess.run(
        [*sluice, "item", "ready", "--json", "--limit", "101"], env=env, capture_output=True, text=True,
        check=True).stdout)]
    some = ready[0]
    # A deferred queue of 100 contexts, as a working town has: status, list and explain read them.
    subprocess.run([*sluice, "config", "set", "scheduler.max_polecats", "4"], env=env, check=True,
                   capture_output=True)
    subprocess.run([*sluice, "sling", *ready[1:], "bench"], env=env, check=True, capture_output=True)
    bare = "bare `python -c \"import json, sqlite3\"` (the baseline)"
    commands = {
        bare: [sys.executable, "-c", "import json, sqlite3"],
        "`--version`": [*sluice, "--version"],
        "`item ready --json` (100 rows)": [*sluice, "item", "ready", "--json"],
        "`item ready --limit 0 --json` (every ready row)": [*sluice, "item", "ready", "--limit", "0", "--json"],
        "`item blocked --json`": [*sluice, "item", "blocked", "--json"],
        f"`item show {some} --json`": [*sluice, "item", "show", some, "--json"],
        "`schedule next --limit 5 --json` (records 5 decisions)": [*sluice, "schedule", "next", "--limit", "5",
                                                                     "--json"],
        "`scheduler status --json` (100 queued)": [*sluice, "scheduler", "status", "--json"],
        "`scheduler list --json` (100 queued)": [*sluice, "scheduler", "list", "--json"],
        "`scheduler list --limit 50 --json`": [*sluice, "scheduler", "list", "--limit", "50", "--json"],
        f"`scheduler explain {ready[1]} --json`": [*sluice, "scheduler", "explain", ready[1], "--json"],
        "`hooks report --rig bench` (what each git hook runs)": [*sluice, "hooks", "report", "--rig", "bench"],
    }
    for argv in commands.values():  # once each: the caches every later call reads are in place
        subprocess.run(argv, env=env, capture_output=True)
    found = rounds(commands, env, runs)
    lines = [f"### Hot reads on a {items:,}-item rig (median of {runs} alternating runs)", "",
             "| command | wall s | cpu s | peak MiB | cpu ÷ baseline |", "|---|---|---|---|---|",
             f"| first `item ready` (builds the derived index) | {cold[0]:.3f} | {cold[1]:.3f} | {cold[2]} | |"]
    base = found[bare][1]
    lines += [f"| {name} | {w:.3f} | {c:.3f} | {m} | {c / base:.2f}× |" for name, (w, c, m) in found.items()]
    return lines


def per_item(figures: tuple, n: int) -> str:
    wall, cpu, _mib = figures
    return f"{wall:.3f} s (cpu {cpu:.3f}) | {wall / n * 1e6:,.0f} µs"


def argv_room(argv: list[str], env: dict) -> int:
    """Bytes left for ``argv`` under the kernel's limit (strings and pointers of argv and environment)."""
    used = sum(len(os.fsencode(a)) + 1 + 8 for a in argv)
    used += sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 + 8 for k, v in env.items())
    return os.sysconf("SC_ARG_MAX") - used


def mcp_server(work: Path, items: int, runs: int) -> list[str]:
    """bench_mcp.py on hot_reads' town (built there first), its own Markdown section."""
    town = work / "hot" / "town"
    where = ["--town", str(town), "--label", f"the {items:,}-item rig"] if town.is_dir() else [
        "--items", str(items), "--work", str(work / "mcp")]
    done = subprocess.run([sys.executable, str(HERE / "bench_mcp.py"), *where, "--runs", str(runs)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench_mcp.py failed: {(done.stderr or done.stdout).strip()[-400:]}")
    return done.stdout.strip().splitlines()


def batch_work(work: Path, sizes: list[int], runs: int) -> list[str]:
    sluice = sluice_argv()
    lines = [f"### Batch work over N sling contexts (median of {runs} alternating runs; 100k: fewer, see the N column)",
             "",
             "Each cell: wall time (CPU time), then wall time per context. All N ids go in one command line.",
             "",
             "| N | `sling` N items | per context | `sling` again (all queued) | per context | `scheduler clear` | per context | peak MiB |",
             "|---|---|---|---|---|---|---|---|"]
    for n in sizes:
        base = work / f"batch-{n}"
        town, repo = base / "town", base / "repo"
        git_repo(repo)
        env = {**os.environ, "SLUICE_TOWN": str(town)}
        subprocess.run([*sluice, "init", str(town)], check=True, env=env, capture_output=True)
        subprocess.run([*sluice, "rig", "add", "alpha", str(repo), "--prefix", "al"], check=True, env=env,
                       capture_output=True)
        for key, value in (("scheduler.max_polecats", "4"), ("scheduler.compact_retention", "0s")):
            subprocess.run([*sluice, "config", "set", key, value], check=True, env=env, capture_output=True)
        ids = [f"al-w{k:06d}" for k in range(n)]
        store = town / ".sluice" / "rigs" / "alpha" / "issues.jsonl"
        store.write_text("".join(json.dumps({"id": i, "title": f"work item {i}", "status": "open",
                                             "priority": k % 5, "issue_type": "task",
                                             "created_at": "2026-01-01T00:00:00Z"}) + "\n"
                                 for k, i in enumerate(ids)))
        subprocess.run([*sluice, "item", "list", "--status", "deferred"], check=True, env=env, capture_output=True)
        sling = [*sluice, "sling", *ids, "alpha", "--json"]
        room = argv_room(sling, env)
        if room < 0:  # 100,000 ids of 10 characters take about 1.9 MB of Linux's 2 MB
            lines.append(f"| {n:,} | not run: {n:,} ids do not fit one command line ({-room:,} bytes over"
                         " the system's ARG_MAX) | | | | | | |")
            continue
        commands = {"sling": sling, "again": sling, "clear": [*sluice, "scheduler", "clear", "--json"]}
        here = runs if n <= 10_000 else max(1, min(runs, 2))
        found = rounds(commands, env, here,
                       between=lambda env=env: subprocess.run([*sluice, "compact"], env=env, capture_output=True))
        peak = max(v[2] for v in found.values())
        cells = " | ".join(per_item(found[k], n) for k in ("sling", "again", "clear"))
        lines.append(f"| {n:,}{'' if here == runs else f' ({here} runs)'} | {cells} | {peak} |")
    return lines


def metagit(sizes: list[int], runs: int) -> list[str]:
    lines = ["### Against metagit 0.36.0 `schedule next` (benchmarks/bench_next.py)", ""]
    peer = Path(os.environ.get("METAGIT_PEER_DIR", HERE.parents[1] / "shared" / "peers" / "metagit"))
    if not (peer / "run_peer.sh").is_file():
        return [*lines, f"Not measured: the metagit peer scripts are not in {peer} (set METAGIT_PEER_DIR)."]
    # Each metagit run is killed after 10 minutes (bench_next.py --metagit-timeout), so this ends.
    done = subprocess.run([sys.executable, str(HERE / "bench_next.py"), "--sizes", ",".join(map(str, sizes)),
                           "--runs", str(runs), "--metagit-timeout", "600"], capture_output=True, text=True)
    if done.returncode != 0:
        return [*lines, f"Not measured: bench_next.py failed: {(done.stderr or done.stdout).strip()[-400:]}"]
    return [*lines, "```", done.stdout.strip(), "```"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000, help="hot reads on a rig this big; 0 skips them")
    parser.add_argument("--batch", default="1000,10000,100000", help="batch sizes; '' skips them")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--metagit", default="10000,100000", help="sizes for bench_next.py; '' skips it")
    parser.add_argument("--million", nargs="?", const="10x100000", default="",
                        help="RIGSxITEMS town for bench_million.py (default 10x100000 when given bare)")
    parser.add_argument("--million-contexts", type=int, default=10_000)
    parser.add_argument("--work", type=Path, default=None, help="build the towns here and keep them")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="sluice-run-all-"))
    work.mkdir(parents=True, exist_ok=True)
    # Start-up is measured as an installed wheel runs: with sluice's bytecode compiled.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(HERE.parent / "src" / "sluice")], check=False,
                   capture_output=True)
    load_before = os.getloadavg()
    try:
        sections = []
        if args.items:
            sections.append(hot_reads(work, args.items, args.runs))
            sections.append(mcp_server(work, args.items, args.runs))  # on the hot reads' town
        sizes = [int(s) for s in args.batch.split(",") if s]
        if sizes:
            sections.append(batch_work(work, sizes, args.runs))
        if args.million:
            from bench_million import million

            rigs, per_rig = (int(v) for v in args.million.lower().split("x"))
            sections.append(million(work / "million", rigs, per_rig, args.million_contexts, args.runs))
        if args.metagit:
            sections.append(metagit([int(s) for s in args.metagit.split(",") if s], args.runs))
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    print(f"Measured {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC on {platform.node() or 'a host'}:"
          f" {os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()},"
          f" load average {load_before[0]:.1f} before and {load_after[0]:.1f} after.")
    for section in sections:
        print()
        print("\n".join(section))


if __name__ == "__main__":
    main()
