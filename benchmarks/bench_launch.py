"""Time dispatch cycles that launch polecats, at several queue sizes, for one or more source trees.

Usage:  python benchmarks/bench_launch.py [--sizes 1000,10000,100000] [--cycles 3] [--batch 20]
                                          [--drain 10000] [--drain-seconds 60] [--set KEY=VALUE ...]
                                          [--tree NAME=SRC ...] [--work DIR] [--json]

For each size N a town is built once: one rig reading a read-only beads
export of N + a margin of plain open items, ``executor.command ["true"]``,
``scheduler.max_polecats 1000``, ``scheduler.batch_size`` ``--batch``, each
``--set KEY=VALUE`` (e.g. ``scheduler.token_budget=1000000000``, to time
launches that charge a budget), and N contexts queued (``sling`` in chunks that fit a command line).  For each
tree (``--tree before=/old/src --tree after=src``; default: this checkout's
``src``) a copy of that town runs ``--cycles`` real cycles,
``python -m sluice scheduler run --json`` with ``PYTHONPATH`` set to the
tree, each launching ``--batch`` polecats through the local executor
(process start, launch intent and close included).  A tree's first command
on a copy is a dry run, so each tree starts from the caches it writes
itself.  Reported: the median cycle's wall time and the CPU time of its
process (the polecats and their watchers are not its children), its cost
per launch, and that cost against the tree's cost at the smallest size
(the flat-cost target is 1.5×; on a shared machine CPU time is the figure
that holds still).

After the cycles, each tree's copy times the views at that size
(``scheduler status --json``, ``scheduler list --json --limit 50``,
``snapshot --json --limit 50``; a tree without ``--limit`` answers every
row, and the table says so), ``--cycles`` rounds of the three: the first
round is the first read after the cycles wrote the queue, the median of
the later ones a read of a queue nothing changed since (which a tree
that keeps the queue's head answers from it).  Then ``--cycles`` rounds of:
one item not queued yet slung (the export holds :data:`MARGIN` items
never slung at build), ``scheduler status --json``, ``scheduler list
--json --limit 50`` and ``snapshot --json --limit 50`` and a cycle; then
one queued item from the back of the queue cleared (``scheduler clear
--item``), the three views and a cycle again; each timed (wall and CPU),
the sling and the clear too.  Then ``scheduler clear --json`` closes the
whole queue twice per tree: on that copy, whose digests the tree's own
commands wrote, and on a fresh copy of the town as the first tree built it
(other inodes: a tree whose marks carry a CRC of the bytes they read goes
on from the digests there, one whose marks do not reads every log whole);
reported
are its CPU time, peak memory (the process's maximum resident set) and
wall time (the target: under 3 s and 300 MB at 100,000), and what the
``scheduler status --json`` right after the clear costs (CPU, peak memory).

``--drain N`` then starts ``sluice daemon --interval 0.01`` on a fresh copy
with N queued (per tree) and counts launches for ``--drain-seconds`` (or
until the queue is empty): the sustained launch rate.

The trees run alternately, cycle by cycle, so a slow spell of a shared
machine falls on both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STAMP = "2026-01-01T00:00:00Z"
CHUNK = 10_000  # ids per sling command: well inside ARG_MAX
MARGIN = 16  # items in the export never slung when the town is built (``ln-m000`` …): slung one by one later


def run(src: Path, town: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    if not (Path(src) / "sluice" / "__init__.py").is_file():  # else the installed sluice would answer
        raise SystemExit(f"{src} holds no sluice package")
    env = {**os.environ, "PYTHONPATH": str(src), "SLUICE_TOWN": str(town)}
    done = subprocess.run([sys.executable, "-m", "sluice", *args], env=env, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise SystemExit(f"sluice {' '.join(args[:3])} … failed: {done.stderr.strip()[-400:]}")
    return done


#: ``--set KEY=VALUE`` settings for every town built (parsed in ``main``).
SETTINGS: list[tuple[str, str]] = []


def build(base: Path, src: Path, queued: int, batch: int) -> Path:
    """A town with one read-only rig of ``queued`` + margin items and ``queued`` contexts slung."""
    town, repo, export = base / "town", base / "repo", base / "export" / "issues.jsonl"
    if (base / "built").exists():
        return town
    shutil.rmtree(base, ignore_errors=True)
    export.parent.mkdir(parents=True)
    git = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.invalid"}
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=git)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "init"], check=True,
                   env=git)
    ids = [f"ln-w{k:06d}" for k in range(queued)]
    with export.open("w") as fh:
        for k, item_id in enumerate(ids + [f"ln-m{k:03d}" for k in range(MARGIN)]):
            fh.write(json.dumps({"id": item_id, "title": f"work item {k}", "status": "open",
                                 "priority": k % 5, "issue_type": "task", "created_at": STAMP,
                                 "updated_at": STAMP}) + "\n")
    run(src, town, "init", str(town))
    run(src, town, "rig", "add", "bench", str(repo), "--prefix", "ln", "--items", str(export))
    for key, value in (("scheduler.max_polecats", "1000"), ("scheduler.batch_size", str(batch)),
                       ("executor.command", '["true"]'), *SETTINGS):
        run(src, town, "config", "set", key, value)
    for start in range(0, queued, CHUNK):
        run(src, town, "sling", *ids[start:start + CHUNK], "bench")
    (base / "built").touch()
    return town


def trees_of(specs: list[str]) -> dict[str, Path]:
    """``--tree NAME=SRC`` options as name → source directory (default: this checkout's ``src``),
    each checked to hold sluice and compiled, as an installed package runs."""
    trees = {}
    for spec in specs or [f"this={HERE.parent / 'src'}"]:
        name, _, src = spec.partition("=")
        trees[name] = Path(src).resolve()
        if not (trees[name] / "sluice" / "__init__.py").is_file():
            raise SystemExit(f"--tree {spec}: {trees[name]} holds no sluice package")
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(trees[name])], check=False,
                       capture_output=True)
    return trees


def copy_town(town: Path, into: Path) -> Path:
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(town, into, symlinks=True)
    return into


def measured(src: Path, town: Path, argv: list[str]) -> tuple[float, float, float, bytes]:
    """(wall s, CPU s, peak MiB, stdout) of one command: its own process, not the polecats it starts."""
    env = {**os.environ, "PYTHONPATH": str(src), "SLUICE_TOWN": str(town)}
    began = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "sluice", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - began
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"sluice {' '.join(argv)} failed in {town}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out


def cycle(src: Path, town: Path) -> tuple[float, int, float]:
    """(wall s, launches, CPU s of the cycle's process) of one real cycle."""
    wall, cpu, _peak, out = measured(src, town, ["scheduler", "run", "--json"])
    return wall, int(json.loads(out)["dispatched"]), cpu


def clears(work: Path, trees: dict[str, Path], town: Path, copies: dict[str, Path], n: int) -> dict:
    """``scheduler clear --json`` of the whole queue, per tree, as (wall s, CPU s, peak MiB, cleared),
    and the ``scheduler status --json`` right after it (``next_cpu``, ``next_peak_mib``).

    ``kept``: on the tree's copy after its cycles and views, so with the
    digests its own commands wrote.  ``unkept``: on a fresh copy of the
    town as built (other inodes), as on a copied town.
    """
    out: dict[str, dict] = {name: {} for name in trees}
    fresh = {name: copy_town(town, work / f"clear-{n}-{name}") for name in trees}
    for case, where in (("kept", copies), ("unkept", fresh)):
        for name, src in trees.items():  # the trees alternate, case by case
            wall, cpu, peak, text = measured(src, where[name], ["scheduler", "clear", "--json"])
            _wall, next_cpu, next_peak, _text = measured(src, where[name], ["scheduler", "status", "--json"])
            out[name][case] = {"wall": wall, "cpu": cpu, "peak_mib": peak,
                               "cleared": json.loads(text)["cleared"], "next_cpu": next_cpu,
                               "next_peak_mib": next_peak}
    for path in fresh.values():
        shutil.rmtree(path, ignore_errors=True)
    return out


def launches(work: Path, trees: dict[str, Path], sizes: list[int], cycles: int, batch: int) -> dict:
    builder = next(iter(trees.values()))  # the first tree builds every town
    found: dict[str, dict[int, dict]] = {name: {} for name in trees}
    for n in sizes:
        town = build(work / f"town-{n}", builder, n, batch)
        copies = {name: copy_town(town, work / f"run-{n}-{name}") for name in trees}
        for name, src in trees.items():
            run(src, copies[name], "scheduler", "run", "--dry-run", "--json")  # its own caches
        seen: dict[str, list[tuple[float, int, float]]] = {name: [] for name in trees}
        for _ in range(cycles):
            for name, src in trees.items():
                seen[name].append(cycle(src, copies[name]))
        views: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
        for _ in range(cycles):
            for name, src in trees.items():
                for view, argv in VIEWS.items():
                    views[name].setdefault(view, []).append(timed(src, copies[name], argv))
        written = after_writes(trees, copies, cycles, n)
        cleared = clears(work, trees, town, copies, n)
        for name in trees:
            wall = statistics.median(w for w, _, _ in seen[name])
            launched = statistics.median(k for _, k, _ in seen[name])
            cpu = statistics.median(c for _, _, c in seen[name])
            # The first round reads what the cycles left; the later ones a queue nothing changed since.
            medians = {view: statistics.median(times[1:] or times) for view, times in views[name].items()}
            first_read = {view: times[0] for view, times in views[name].items()}
            found[name][n] = {"cycle": wall, "launched": launched, "per_launch": wall / max(launched, 1),
                              "cpu": cpu, "cpu_per_launch": cpu / max(launched, 1), "views": medians,
                              "views_first": first_read, "after_sling": written[name]["sling"],
                              "after_clear": written[name]["clear"],
                              "clear": cleared[name]}
            shutil.rmtree(copies[name], ignore_errors=True)
    return found


#: The views timed after one item is slung or one cleared (CPU s of the command, as with ``measured``).
SLUNG_VIEWS = {"status": ["scheduler", "status", "--json"],
               "list --limit 50": ["scheduler", "list", "--json", "--limit", "50"],
               "snapshot --limit 50": ["snapshot", "--json", "--limit", "50"]}


def after_writes(trees: dict[str, Path], copies: dict[str, Path], rounds: int, queued: int) -> dict:
    """Per tree, ``rounds`` times: one item not queued yet slung (``ln-m000`` …), then each of
    :data:`SLUNG_VIEWS` and a cycle; then one queued item from the back of the queue cleared
    (``scheduler clear --item``: at 100,000 one the cycle's chain only counts), the views and a cycle
    again.  Each timed: the median wall and CPU s
    of each, by name, under ``"sling"`` and ``"clear"``.

    The writes themselves should cost what they write, not the queue; the first read after one is
    what a daemon's operator meets between two ticks whenever anyone queues or unqueues work; a tree
    whose chain stands only while no line but the cycles' own follows it surveys the whole queue.
    """
    seen: dict[str, dict[str, dict[str, list[tuple[float, float]]]]] = {
        name: {"sling": {}, "clear": {}} for name in trees}
    last = queued - 1 - (queued - 5) % 5  # the last item of priority 4 (``k % 5``): ranked last, queued still
    for k in range(rounds):
        for name, src in trees.items():
            writes = {"sling": ["sling", f"ln-m{k:03d}", "bench"],
                      "clear": ["scheduler", "clear", "--item", f"ln-w{last - 5 * k:06d}", "--json"]}
            for what, argv in writes.items():
                times = seen[name][what]
                wall, cpu, _peak, _out = measured(src, copies[name], argv)
                times.setdefault(argv[0] if what == "sling" else "clear --item", []).append((wall, cpu))
                for view, view_argv in SLUNG_VIEWS.items():
                    wall, cpu, _peak, _out = measured(src, copies[name], view_argv)
                    times.setdefault(view, []).append((wall, cpu))
                wall, _launched, cpu = cycle(src, copies[name])
                times.setdefault("cycle", []).append((wall, cpu))
    return {name: {write: {what: {"wall": statistics.median(w for w, _ in times),
                                  "cpu": statistics.median(c for _, c in times)}
                           for what, times in found.items()} for write, found in writes.items()}
            for name, writes in seen.items()}


#: The views timed at each size; a tree that does not know ``--limit`` answers the whole queue instead.
VIEWS = {"status": ["scheduler", "status", "--json"],
         "list --limit 50": ["scheduler", "list", "--json", "--limit", "50"],
         "snapshot --limit 50": ["snapshot", "--json", "--limit", "50"]}


def timed(src: Path, town: Path, argv: list[str]) -> float:
    """Wall seconds of one view; negative when the tree refused ``--limit`` and answered everything."""
    began = time.perf_counter()
    if run(src, town, *argv, check=False).returncode == 0:
        return time.perf_counter() - began
    whole = argv[:argv.index("--limit")] if "--limit" in argv else argv
    began = time.perf_counter()
    run(src, town, *whole)
    return -(time.perf_counter() - began)


def dispatched_count(town: Path) -> int:
    log = town / ".sluice" / "events" / "scheduler.jsonl"
    try:
        return log.read_bytes().count(b'"Dispatched"')
    except FileNotFoundError:
        return 0


def drain(work: Path, trees: dict[str, Path], queued: int, seconds: float, batch: int) -> dict:
    first = next(iter(trees.values()))
    town = build(work / f"town-{queued}", first, queued, batch)
    out = {}
    for name, src in trees.items():
        copy = copy_town(town, work / f"drain-{name}")
        env = {**os.environ, "PYTHONPATH": str(src), "SLUICE_TOWN": str(copy)}
        began = time.perf_counter()
        daemon = subprocess.Popen([sys.executable, "-m", "sluice", "daemon", "--interval", "0.01"],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        count = 0
        while time.perf_counter() - began < seconds and count < queued:
            time.sleep(0.5)
            count = dispatched_count(copy)
        elapsed = time.perf_counter() - began
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=120)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        out[name] = {"launched": count, "seconds": elapsed, "rate": count / elapsed}
        shutil.rmtree(copy, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--drain", type=int, default=10_000,
                        help="queued contexts for the daemon; 0 skips it")
    parser.add_argument("--drain-seconds", type=float, default=60.0)
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=SRC")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
                        help="a config setting of every town built (with --work, use a directory of its own)")
    parser.add_argument("--work", type=Path, default=None, help="build the towns here and keep them")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    for spec in args.settings:
        key, sep, value = spec.partition("=")
        if not sep:
            raise SystemExit(f"--set {spec}: expected KEY=VALUE")
        SETTINGS.append((key, value))
    trees = trees_of(args.tree)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    work = args.work or Path(tempfile.mkdtemp(prefix="sluice-bench-launch-"))
    work.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    try:
        found = {"launches": launches(work, trees, sizes, args.cycles, args.batch) if sizes else {}}
        found["drain"] = drain(work, trees, args.drain, args.drain_seconds, args.batch) if args.drain else {}
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    found["load"] = [load, os.getloadavg()[0]]
    if args.json:
        print(json.dumps(found, indent=2))
        return
    print(f"load average {load:.1f} before, {found['load'][1]:.1f} after; {os.cpu_count()} CPUs")
    if sizes:
        print()
        heads = [f"{n}: cycle of {args.batch} (cpu) / per launch (cpu) / cpu vs {sizes[0]:,}" for n in trees]
        print(f"| queued | {' | '.join(heads)} |")
        print("|---|" + "---|" * len(trees))
        for n in sizes:
            cells = []
            for name in trees:
                row, base = found["launches"][name][n], found["launches"][name][sizes[0]]
                cells.append(f"{row['cycle']:.2f} s ({row['cpu']:.2f}) / {row['per_launch'] * 1000:.0f} ms"
                             f" ({row['cpu_per_launch'] * 1000:.0f}) /"
                             f" {row['cpu_per_launch'] / base['cpu_per_launch']:.2f}×")
            print(f"| {n:,} | {' | '.join(cells)} |")
        print()
        rounds = (("first read after the cycles", "views_first"), ("read again, nothing changed", "views"))
        for title, key in rounds:
            print(f"views, {title}:")
            print(f"| queued | {' | '.join(f'{n}: ' + ' / '.join(VIEWS) for n in trees)} |")
            print("|---|" + "---|" * len(trees))
            for n in sizes:
                cells = [" / ".join(f"{abs(t):.2f} s" + (" (all rows)" if t < 0 else "")
                                    for t in found["launches"][name][n][key].values()) for name in trees]
                print(f"| {n:,} | {' | '.join(cells)} |")
            print()
        for key, what in (("after_sling", "sling"), ("after_clear", "clear --item")):
            print(f"{what} of one item, then {' / '.join(SLUNG_VIEWS)} / the next cycle, wall s (CPU s):")
            print(f"| queued | {' | '.join(trees)} |")
            print("|---|" + "---|" * len(trees))
            for n in sizes:
                cells = [" / ".join(f"{t['wall']:.2f} ({t['cpu']:.2f})" for t in found["launches"][name][n]
                                    [key].values()) for name in trees]
                print(f"| {n:,} | {' | '.join(cells)} |")
            print()
        clear_table(found, trees, sizes, "clear, digest kept / no digest: CPU s, peak MiB (wall s)",
                    lambda c: f"{c['cpu']:.2f}, {c['peak_mib']:.0f} ({c['wall']:.2f})")
        print()
        clear_table(found, trees, sizes, "status after the clear, digest kept / no digest: CPU s, peak MiB",
                    lambda c: f"{c['next_cpu']:.2f}, {c['next_peak_mib']:.0f}")
    if args.drain:
        print()
        print(f"daemon draining {args.drain:,} queued contexts:")
        for name, row in found["drain"].items():
            print(f"  {name}: {row['launched']:,} launches in {row['seconds']:.1f} s = {row['rate']:.1f}/s")


def clear_table(found: dict, trees: dict, sizes: list[int], what: str, cell) -> None:
    """One markdown table of the clears: a row per size, a column per tree, ``cell`` of each case."""
    print(f"| queued | {' | '.join(f'{name}: {what}' for name in trees)} |")
    print("|---|" + "---|" * len(trees))
    for n in sizes:
        cells = [" / ".join(cell(c) for c in found["launches"][name][n]["clear"].values()) for name in trees]
        print(f"| {n:,} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
