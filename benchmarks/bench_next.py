"""`sluice schedule next` against metagit 0.36.0 `schedule next` on the same work.

Usage:  python benchmarks/bench_next.py [--sizes 10000,100000,1000000] [--runs 5] [--work DIR]
                                        [--dispatch-contexts 1000] [--metagit-timeout 600]

Needs the metagit peer scripts (``run_peer.sh``, ``gen_graph.py``,
``to_sluice.py``), found in ``../shared/peers/metagit`` beside the checkout
or wherever ``METAGIT_PEER_DIR`` points; without them it stops with a message.

For each size this

1. generates a metagit workspace with the peer's ``gen_graph.py`` (10,000
   nodes per graph: 100,000 nodes in 10 graphs, as its ``time_scaled.sh``
   does, 1,000,000 in 100; 30 repositories, 200 merge documents, 10 active
   worktrees);
2. turns it into a sluice town with the peer's ``to_sluice.py`` (one real git
   rig per repository, items as a read-only beads export, merges as
   ``merge-request`` items, active worktrees as real linked worktrees);
3. installs the real metagit-cli 0.36.0 once through the peer's
   ``run_peer.sh`` (a venv under ``~/.cache/metagit-peer``; about a minute);
4. times ``sluice schedule next --limit 5 --json`` once cold (no derived
   index yet: the first run builds it), then runs
   ``metagit schedule next --limit 5 --json`` and the sluice command
   alternately, ``--runs`` times each, each in its own copy of the work, and
   prints both medians and their ratio, with sluice's peak memory; a metagit
   run still going after ``--metagit-timeout`` seconds is killed, reported as
   not finishing, and metagit is not run again at that size or larger ones;
5. at the largest size, slings ``--dispatch-contexts`` ready items
   (``scheduler.max_polecats`` 10) and times ``sluice scheduler run
   --dry-run --json``, which ranks every queued context with the same scoring.

Both sides see the same work, but not identical ready sets: metagit only
counts a dependency inside its own graph as satisfied when completed, and
beads never lets a dependency on another rig's item block, so sluice has
more ready items to score (reported).  Only the standard library, ``git``,
the ``sluice`` CLI and the peer scripts are used; figures include interpreter
start-up, as a user sees them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PEER = Path(
    os.environ.get("METAGIT_PEER_DIR", Path(__file__).resolve().parents[2] / "shared" / "peers" / "metagit")
)
PEER_VENV = Path(os.environ.get("PEER_VENV", Path.home() / ".cache" / "metagit-peer" / "venv"))


def sluice_bin() -> str:
    here = Path(sys.executable).parent / "sluice"
    found = str(here) if here.exists() else shutil.which("sluice")
    if not found:
        raise SystemExit("the sluice CLI is not installed (pip install -e .)")
    return found


class TimedOut(Exception):
    """A command ran past its time limit and was killed."""


def measure(argv: list[str], cwd: Path, env: dict, limit: float | None = None) -> tuple[float, int, bytes]:
    """(wall seconds, peak RSS MiB, stdout) of one command run to completion.

    With ``limit`` (seconds) a command still running then is killed, with its
    whole process group, and :class:`TimedOut` raised: a slow peer ends the
    comparison at that size instead of hanging it.
    """
    with tempfile.TemporaryFile() as out:
        began = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.PIPE,
                                start_new_session=limit is not None)
        killer = None
        if limit is not None:
            killer = threading.Timer(limit, lambda: _kill_group(proc.pid))
            killer.start()
        try:
            _pid, status, usage = os.wait4(proc.pid, 0)
        finally:
            if killer is not None:
                killer.cancel()
        elapsed = time.perf_counter() - began
        if limit is not None and elapsed >= limit and os.WIFSIGNALED(status):
            if proc.stderr:
                proc.stderr.close()
            spelt = f"{limit / 60:g} minutes" if limit >= 60 else f"{limit:g} s"
            raise TimedOut(f"could not finish in {spelt} (killed)")
        err = proc.stderr.read() if proc.stderr else b""
        if proc.stderr:
            proc.stderr.close()
        code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        data = out.read()
    if code != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({code}): {err.decode(errors='replace')[-2000:]}")
    return elapsed, usage.ru_maxrss // 1024, data


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


PEER_FILES = ("run_peer.sh", "gen_graph.py", "to_sluice.py")


def require_peer() -> None:
    """Stop with one line, not a traceback, when the metagit peer scripts are not there."""
    missing = [name for name in PEER_FILES if not (PEER / name).is_file()]
    if missing:
        raise SystemExit(
            f"bench_next.py compares sluice with metagit and needs the metagit peer scripts"
            f" ({', '.join(PEER_FILES)}) in {PEER}, which lacks {', '.join(missing)};"
            " point METAGIT_PEER_DIR at them (they are not part of this repository)"
        )


def ensure_metagit() -> Path:
    metagit = PEER_VENV / "bin" / "metagit"
    if not metagit.exists():
        print("installing metagit-cli 0.36.0 (about a minute) ...", flush=True)
        subprocess.run([str(PEER / "run_peer.sh")], check=True, stdout=subprocess.DEVNULL)
    return metagit


def build(work: Path, nodes: int, graphs: int, env: dict) -> tuple[Path, Path]:
    ws, town = work / f"ws-{nodes}", work / f"town-{nodes}"
    for path in (ws, town):
        shutil.rmtree(path, ignore_errors=True)
    began = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            str(PEER / "gen_graph.py"),
            "--out",
            str(ws),
            "--nodes",
            str(nodes),
            "--graphs",
            str(graphs),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(
        [sys.executable, str(PEER / "to_sluice.py"), str(ws), str(town)],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    print(
        f"built {nodes:,} nodes in {graphs} graph(s): metagit workspace and sluice town"
        f" in {time.perf_counter() - began:.1f} s",
        flush=True,
    )
    return ws, town


def compare(work: Path, nodes: int, graphs: int, runs: int, metagit: Path, env: dict,
            limit: float, gave_up: str | None = None) -> tuple[Path, dict]:
    """Both commands alternately at one size; ``gave_up``: why metagit is not run at all."""
    ws, town = build(work, nodes, graphs, env)
    mg_copy = work / f"metagit-{nodes}"
    shutil.rmtree(mg_copy, ignore_errors=True)
    shutil.copytree(ws, mg_copy, symlinks=True)
    sl_env = {**env, "SLUICE_TOWN": str(town)}
    sluice = [sluice_bin(), "schedule", "next", "--limit", "5", "--json"]
    peer = [str(metagit), "schedule", "next", "--limit", "5", "--json"]

    shutil.rmtree(town / ".sluice" / "runtime" / "index", ignore_errors=True)
    cold, cold_rss, _ = measure(sluice, town, sl_env)
    status = json.loads(
        measure([sluice_bin(), "schedule", "status", "--recent", "0", "--json"], town, sl_env)[2]
    )

    mg_times, sl_times, sl_rss, mg_rss = [], [], [], []
    mg_first, timed_out = None, gave_up
    for _ in range(runs):
        if timed_out is None:
            try:
                seconds, rss, out = measure(peer, mg_copy, env, limit)
                mg_times.append(seconds)
                mg_rss.append(rss)
                mg_first = json.loads(out)[0]
            except TimedOut as err:
                timed_out = str(err)  # once is enough: the other runs measure sluice alone
        seconds, rss, out = measure(sluice, town, sl_env)
        sl_times.append(seconds)
        sl_rss.append(rss)
        sl_first = json.loads(out)[0]
    result = {
        "nodes": nodes,
        "graphs": graphs,
        "sluice_ready": status["ready_count"],
        "metagit_median": statistics.median(mg_times) if mg_times else None,
        "metagit_timeout": timed_out,
        "sluice_median": statistics.median(sl_times),
        "sluice_cold": cold,
        "sluice_rss": max([*sl_rss, cold_rss]),
        "metagit_rss": max(mg_rss) if mg_rss else None,
        "metagit_top": (mg_first["node_id"], mg_first["score"]) if mg_first else None,
        "sluice_top": (sl_first["node_id"], sl_first["score"]),
    }
    if result["metagit_median"] is not None:
        result["ratio"] = result["metagit_median"] / result["sluice_median"]
    return town, result


def dispatch_dry_run(town: Path, contexts: int, runs: int, env: dict) -> dict:
    sl_env = {**env, "SLUICE_TOWN": str(town)}
    sluice = sluice_bin()
    ready = json.loads(
        measure([sluice, "item", "ready", "--limit", str(contexts), "--json"], town, sl_env)[2]
    )
    ids = [row["id"] for row in ready]
    subprocess.run(
        [sluice, "config", "set", "scheduler.max_polecats", "10"], check=True, env=sl_env, capture_output=True
    )
    began = time.perf_counter()
    subprocess.run([sluice, "sling", *ids], check=True, env=sl_env, capture_output=True)
    slung = time.perf_counter() - began
    argv = [sluice, "scheduler", "run", "--dry-run", "--json"]
    times = [measure(argv, town, sl_env)[0] for _ in range(runs)]
    return {"contexts": len(ids), "sling_seconds": slung, "dry_run_median": statistics.median(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="node counts (default 10000,100000)")
    parser.add_argument("--runs", type=int, default=5, help="alternating runs per command (median reported)")
    parser.add_argument("--work", type=Path, help="build everything here and keep it (default: temp dir)")
    parser.add_argument(
        "--dispatch-contexts",
        type=int,
        default=1000,
        help="contexts to sling for the dispatch dry run at the largest size (0: skip)",
    )
    parser.add_argument("--metagit-timeout", type=float, default=600.0,
                        help="seconds one metagit run may take before it is killed (default 600)")
    args = parser.parse_args()
    require_peer()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    work = args.work or Path(tempfile.mkdtemp(prefix="sluice-bench-next-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PATH": f"{Path(sluice_bin()).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    try:
        metagit = ensure_metagit()
        results = []
        town = None
        gave_up = None
        for nodes in sizes:
            # 10,000 nodes per graph, as metagit's own time_scaled.sh lays out 100,000
            graphs = max(1, nodes // 10_000)
            town, result = compare(work, nodes, graphs, args.runs, metagit, env, args.metagit_timeout,
                                   gave_up)
            if result["metagit_timeout"] is not None and gave_up is None:
                gave_up = f"not run, as it could not finish at {nodes:,} nodes"
            results.append(result)
            report(result, args.runs)
        if args.dispatch_contexts and town is not None:
            d = dispatch_dry_run(town, args.dispatch_contexts, args.runs, env)
            print(
                f"\nscheduler run --dry-run --json at {sizes[-1]:,} items,"
                f" {d['contexts']:,} queued contexts: {d['dry_run_median']:.3f} s median of {args.runs}"
                f" (the sling took {d['sling_seconds']:.2f} s)"
            )
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


def report(r: dict, runs: int) -> None:
    print(
        f"\n{r['nodes']:,} nodes in {r['graphs']} graph(s) ({r['sluice_ready']:,} ready in sluice),"
        f" median of {runs} alternating runs:"
    )
    if r["metagit_timeout"] is not None:
        print(f"  metagit 0.36.0 schedule next --limit 5 --json  {r['metagit_timeout']}")
    else:
        print(
            f"  metagit 0.36.0 schedule next --limit 5 --json  {r['metagit_median']:7.3f} s"
            f"  (peak {r['metagit_rss']} MiB; top {r['metagit_top'][0]} {r['metagit_top'][1]})"
        )
    print(
        f"  sluice schedule next --limit 5 --json          {r['sluice_median']:7.3f} s"
        f"  (peak {r['sluice_rss']} MiB; top {r['sluice_top'][0]} {r['sluice_top'][1]})"
    )
    if r["metagit_timeout"] is None:
        print(f"  ratio metagit / sluice                         {r['ratio']:7.1f}x")
    print(f"  sluice cold first run (builds the index)       {r['sluice_cold']:7.3f} s", flush=True)


if __name__ == "__main__":
    main()
