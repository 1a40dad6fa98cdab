"""What a workspace costs a launch: dispatch cycles with ``executor.workspace`` repo and clone, side by side.

Usage:  python benchmarks/bench_workspace.py [--files 2000] [--commits 20] [--batch 5] [--cycles 3]
                                             [--work DIR] [--json]

One rig over a real repository of ``--files`` files and ``--commits``
commits, ``executor.command ["true"]``.  For each mode a fresh copy of the
town queues ``--batch`` items and runs one real cycle
(``python -m sluice scheduler run --json``), ``--cycles`` times, the modes
alternating so a slow spell of a shared machine falls on both alike.
Reported: the median cycle's wall time per launch in each mode, clone
against repo as a ratio, and the disk one workspace takes beyond the
objects it shares with the rig through hardlinks.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
GIT = {"GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid", "GIT_COMMITTER_NAME": "b",
       "GIT_COMMITTER_EMAIL": "b@example.invalid"}
STAMP = "2026-01-01T00:00:00Z"


def sluice(town: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(SRC), "SLUICE_TOWN": str(town)}
    done = subprocess.run([sys.executable, "-m", "sluice", *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"sluice {' '.join(args[:3])} failed: {done.stderr.strip()[-400:]}")
    return done.stdout


def make_repo(path: Path, files: int, commits: int) -> None:
    env = {**os.environ, **GIT}
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True, env=env)
    for c in range(commits):
        for f in range(c, files, commits):
            sub = path / f"pkg{f % 40}"
            sub.mkdir(exist_ok=True)
            (sub / f"mod{f}.py").write_text(f"# module {f}, revision {c}\n" + "x = 1\n" * 40)
        subprocess.run(["git", "-C", str(path), "add", "-A"], check=True, env=env)
        subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", f"commit {c}"], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "gc", "-q"], check=True, env=env)


def build(base: Path, files: int, commits: int) -> Path:
    town, repo = base / "town", base / "repo"
    make_repo(repo, files, commits)
    sluice(town, "init", str(town))
    sluice(town, "rig", "add", "bench", str(repo), "--prefix", "wb")
    for key, value in (("scheduler.max_polecats", "1000"), ("executor.command", '["true"]')):
        sluice(town, "config", "set", key, value)
    return town


def one_cycle(town: Path, into: Path, mode: str, batch: int, round_: int) -> tuple[float, int]:
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(town, into, symlinks=True)
    sluice(into, "config", "set", "executor.workspace", mode)
    sluice(into, "config", "set", "scheduler.batch_size", str(batch))
    ids = [f"wb-r{round_}x{k}" for k in range(batch)]
    items = into / ".sluice" / "rigs" / "bench" / "issues.jsonl"
    with items.open("a") as fh:
        for item_id in ids:
            fh.write(json.dumps({"id": item_id, "title": "t", "status": "open", "priority": 2,
                                 "issue_type": "task", "created_at": STAMP, "updated_at": STAMP}) + "\n")
    sluice(into, "sling", *ids, "bench")
    began = time.perf_counter()
    report = json.loads(sluice(into, "scheduler", "run", "--json"))
    return time.perf_counter() - began, int(report["dispatched"])


def own_bytes(directory: Path) -> int:
    """Bytes of the files under ``directory`` that are not hardlinks shared with another place."""
    total = 0
    for path in directory.rglob("*"):
        stat = path.lstat()
        if path.is_file() and stat.st_nlink == 1:
            total += stat.st_size
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--batch", type=int, default=5)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if shutil.which("git") is None:
        raise SystemExit("bench_workspace needs git on PATH")
    work = args.work or Path(tempfile.mkdtemp(prefix="sluice-bench-ws-"))
    work.mkdir(parents=True, exist_ok=True)
    town = build(work / "base", args.files, args.commits)
    seen: dict[str, list[float]] = {"repo": [], "clone": []}
    workspace_bytes = 0
    for round_ in range(args.cycles):
        for mode in seen:
            copy = work / f"run-{mode}"
            wall, launched = one_cycle(town, copy, mode, args.batch, round_)
            seen[mode].append(wall / max(launched, 1))
            if mode == "clone":
                spaces = list((copy / ".sluice" / "runtime" / "workspaces").glob("*/bench/*"))
                workspace_bytes = own_bytes(spaces[0]) if spaces else 0
    repo_size = sum(p.stat().st_size for p in (work / "base" / "repo").rglob("*") if p.is_file())
    found = {mode: statistics.median(times) for mode, times in seen.items()}
    found |= {"ratio": found["clone"] / found["repo"], "workspace_own_bytes": workspace_bytes,
              "repo_bytes": repo_size, "files": args.files, "batch": args.batch}
    if args.json:
        print(json.dumps(found))
    else:
        print(f"{args.files} files, {args.commits} commits, {args.batch} launches a cycle, median of "
              f"{args.cycles}")
        print(f"per launch: repo {found['repo'] * 1000:.0f} ms, clone {found['clone'] * 1000:.0f} ms"
              f" ({found['ratio']:.2f}x)")
        print(f"one workspace's own bytes {workspace_bytes / 1e6:.1f} MB (the rig: {repo_size / 1e6:.1f} MB,"
              " objects shared through hardlinks)")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
