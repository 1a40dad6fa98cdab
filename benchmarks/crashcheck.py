"""A crash-state explorer: what could a power cut during a sluice command leave, and does sluice cope?

Usage:  python benchmarks/crashcheck.py [--scenario sling|clear|compact|cycle|all] [--plant no-fsync]
                                        [--keep DIR] [--json]

In the manner of ALICE (Pillai et al., "All File Systems Are Not Created
Equal", OSDI 2014), for each scenario it

1. builds a small town and records every file operation the command makes
   with ``strace -f`` (opens, writes, fsyncs, renames, unlinks, truncations,
   with the written bytes), its own and its children's (the watcher, the
   polecat);
2. replays them on a model of the disk that keeps, for every file, what is
   durable (what an fsync covered) apart from what is only in the page
   cache, and, for every directory, which names are durable (a rename or a
   new file is durable once its directory is fsynced);
3. after each operation, builds every state a power cut there could leave:
   only what is durable; plus, one file at a time, that file's unsynced
   appends kept whole or cut in the middle (a torn write); plus every
   pending rename applied with unsynced data lost; plus nothing lost;
4. runs sluice on each state and checks the promises:

   * every file reads, or is mended with a warning (``scheduler status``,
     ``scheduler list``, ``patrol`` answer with JSON, no internal error);
   * what the command acknowledged (its answer on stdout) before the cut is
     there: slung items queued, cleared items not queued, compaction loses
     no open context;
   * a dispatch cycle run on the state launches no context whose polecat had
     already started before the cut (the at-most-once rule).

The derived index and its caches (``runtime/index``) and the lock files are
left out of every state: sluice rebuilds the first, and a lock is empty.
``--plant no-fsync`` runs sluice with ``os.fsync`` made a no-op, a planted
bug the explorer must catch (tests/test_crashcheck.py holds it to that).
Exits 1 on any violation, 2 when strace is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIPPED = ("runtime/index/", "runtime/locks/")
#: The database's shared-memory index is rebuilt from its write-ahead log on open: no state of its own.
SKIPPED_SUFFIXES = (".lock", "-shm")
TRACED = ("open", "openat", "creat", "write", "pwrite64", "fsync", "fdatasync", "rename", "renameat",
          "renameat2", "unlink", "unlinkat", "ftruncate", "truncate")
#: sluice with its fsyncs taken away (``--plant no-fsync``): the bug the explorer must find.
PLANTED = {"no-fsync": "import os; os.fsync = lambda fd: None\n"
                        "import sluice.store.database.db as db; db.SYNCHRONOUS = 'OFF'\n"}


# -- recording ---------------------------------------------------------------------------------


def sluice_argv(plant: str | None) -> list[str]:
    prelude = PLANTED.get(plant or "", "")
    start = "import sys; from sluice.__main__ import main; sys.argv[0] = 'sluice'; main()"
    return [sys.executable, "-c", prelude + start]


def run(town: Path, args: list[str], plant: str | None = None, check: bool = True,
        trace: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLUICE_TOWN": str(town), "PYTHONPATH": str(ROOT / "src")}
    argv = sluice_argv(plant) + args
    if trace is not None:
        argv = ["strace", "-f", "-y", "-xx", "-s", "16777216", "-qq", "-o", str(trace),
                "-e", "trace=" + ",".join(TRACED), *argv]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=town, timeout=300)
    if check and done.returncode != 0:
        raise SystemExit(f"sluice {' '.join(args)} failed: {done.stderr.strip()}")
    return done


_LINE = re.compile(r"^(\d+) +(\w+)\((.*)\) += (-?\d+)(?:<([^>]*)>)?")
_FD = re.compile(r"^(\d+)<([^>]*)>")
_STR = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _bytes(text: str) -> bytes:
    return bytes.fromhex(text.replace("\\x", "")) if text else b""


def _path(text: str | None) -> str:
    """A path as strace -xx prints it (every byte as ``\\xNN``)."""
    return _bytes(text).decode("utf-8", "replace") if text and text.startswith("\\x") else (text or "")


def _lines(trace: Path):
    """Whole syscall lines: an ``<unfinished ...>`` call joined with its ``<... resumed>`` end."""
    pending: dict[str, str] = {}
    for raw in trace.read_text(errors="replace").splitlines():
        pid = raw.split(" ", 1)[0]
        if raw.endswith("<unfinished ...>"):
            pending[pid] = raw[: -len("<unfinished ...>")].rstrip()
            continue
        if "<... " in raw and " resumed>" in raw:
            raw = pending.pop(pid, "") + raw.split(" resumed>", 1)[1]
        yield raw


@dataclass
class Op:
    kind: str  # write, fsync, rename, unlink, truncate, create, ack, started
    path: str = ""
    other: str = ""
    data: bytes = b""
    length: int = 0
    offset: int | None = None  # a positioned write (pwrite64): where; None: at the end (O_APPEND logs)


def parse(trace: Path, town: Path, reports: Path, main_pid: int | None = None) -> list[Op]:
    """The operations that matter, in order: on files under ``town/.sluice``, the acknowledgement
    (the command's write to its stdout), and polecat starts (a file created under ``reports``)."""
    sluice_dir, ops, first_pid = str(town / ".sluice") + "/", [], None
    for line in _lines(trace):
        match = _LINE.match(line)
        if match is None:
            continue
        pid, name, args, result = int(match[1]), match[2], match[3], int(match[4])
        first_pid = first_pid or pid
        if result < 0:
            continue
        if name in ("open", "openat", "creat"):
            path = _path(match[5])
            flags = args.split(", ")[2 if name == "openat" else 1] if name != "creat" else "O_CREAT|O_TRUNC"
            if path.startswith(str(reports) + "/") and "O_CREAT" in flags:
                ops.append(Op("started", Path(path).name))
            elif path.startswith(sluice_dir) and ("O_CREAT" in flags or "O_TRUNC" in flags):
                ops.append(Op("create", path, length=int("O_TRUNC" in flags)))
            continue
        fd = _FD.match(args)
        if fd is not None:
            fd = (None, fd[1], _path(fd[2]))
        if name in ("write", "pwrite64") and fd is not None:
            if int(fd[1]) == 1 and pid == (main_pid or first_pid):
                ops.append(Op("ack"))
            elif fd[2].startswith(sluice_dir):
                strings = _STR.findall(args)
                data = _bytes(strings[0]) if strings else b""
                offset = int(args.rsplit(", ", 1)[1]) if name == "pwrite64" else None
                ops.append(Op("write", fd[2], data=data[:result], offset=offset))
        elif name in ("fsync", "fdatasync") and fd is not None:
            ops.append(Op("fsync", fd[2]))
        elif name == "ftruncate" and fd is not None and fd[2].startswith(sluice_dir):
            ops.append(Op("truncate", fd[2], length=int(args.rsplit(", ", 1)[1])))
        elif name.startswith("rename"):
            old, new = _STR.findall(args)[:2]
            ops.append(Op("rename", _bytes(old).decode(), _bytes(new).decode()))
        elif name.startswith("unlink"):
            ops.append(Op("unlink", _bytes(_STR.findall(args)[0]).decode()))
    return [op for op in ops if op.kind in ("ack", "started") or not _skipped(op.path, town)]


def _skipped(path: str, town: Path) -> bool:
    base = str(town / ".sluice") + "/"
    if path == base[:-1]:  # the directory itself (an fsync of it makes its new names durable)
        return False
    rel = path[len(base):]
    return not path.startswith(base) or rel.startswith(SKIPPED) or rel.endswith(SKIPPED_SUFFIXES)


# -- the model of the disk -----------------------------------------------------------------------


@dataclass
class Disk:
    """Inodes with durable and cached data; names as they are now and as they are durably."""

    data: dict[int, bytearray] = field(default_factory=dict)
    durable: dict[int, bytes] = field(default_factory=dict)
    names: dict[str, int] = field(default_factory=dict)
    durable_names: dict[str, int] = field(default_factory=dict)
    next_inode: int = 0

    @classmethod
    def of(cls, town: Path) -> Disk:
        disk = cls()
        for path in sorted((town / ".sluice").rglob("*")):
            if path.is_file() and not path.is_symlink() and not _skipped(str(path), town):
                inode = disk._new(path.read_bytes())
                disk.names[str(path)] = disk.durable_names[str(path)] = inode
                disk.durable[inode] = bytes(disk.data[inode])
        return disk

    def _new(self, content: bytes = b"") -> int:
        self.next_inode += 1
        self.data[self.next_inode] = bytearray(content)
        self.durable[self.next_inode] = b""
        return self.next_inode

    def apply(self, op: Op) -> None:
        if op.kind == "create":
            if op.path not in self.names:
                self.names[op.path] = self._new()
            elif op.length:  # O_TRUNC
                self.data[self.names[op.path]] = bytearray()
        elif op.kind == "write" and op.path in self.names:
            content = self.data[self.names[op.path]]
            if op.offset is None:
                content += op.data
            else:  # the database writes pages in place
                if len(content) < op.offset:
                    content += bytes(op.offset - len(content))
                content[op.offset:op.offset + len(op.data)] = op.data
        elif op.kind == "truncate" and op.path in self.names:
            del self.data[self.names[op.path]][op.length:]
        elif op.kind == "fsync":
            if op.path in self.names:
                inode = self.names[op.path]
                self.durable[inode] = bytes(self.data[inode])
            prefix = op.path.rstrip("/") + "/"  # a directory: its entries become durable
            for name in [n for n in self.durable_names if _in_dir(n, prefix)]:
                del self.durable_names[name]
            self.durable_names.update((n, i) for n, i in self.names.items() if _in_dir(n, prefix))
        elif op.kind == "rename" and op.path in self.names:
            self.names[op.other] = self.names.pop(op.path)
        elif op.kind == "unlink":
            self.names.pop(op.path, None)

    def states(self) -> list[tuple[str, dict[str, bytes]]]:
        """Every state a power cut now could leave, each named, as path → content."""
        def build(names: dict[str, int], content) -> dict[str, bytes]:
            return {name: content(inode) for name, inode in names.items()}

        out = [("durable only", build(self.durable_names, lambda i: self.durable[i]))]
        for name, inode in sorted(self.durable_names.items()):
            kept, now = self.durable[inode], bytes(self.data[inode])
            if now == kept:
                continue
            for label, content in (("whole", now), ("torn", _torn(kept, now))):
                state = build(self.durable_names, lambda i: self.durable[i])
                state[name] = content
                out.append((f"unsynced {label} {Path(name).name}", state))
        if self.names != self.durable_names:
            out.append(("renames applied, data unsynced", build(self.names, lambda i: self.durable[i])))
        out.append(("nothing lost", build(self.names, lambda i: bytes(self.data[i]))))
        return out


def _in_dir(name: str, prefix: str) -> bool:
    return name.startswith(prefix) and "/" not in name[len(prefix):]


def _torn(kept: bytes, now: bytes) -> bytes:
    """The unsynced change cut in the middle: of the bytes from the first that differs to the end of the
    new content, the first half reached the disk (an append's first half; half of the pages written in
    place), the rest is as it was."""
    shorter = min(len(kept), len(now))
    common = next((i for i in range(shorter) if kept[i] != now[i]), shorter)
    cut = common + max(1, (len(now) - common) // 2)
    return now[:cut] + kept[cut:]


# -- scenarios ---------------------------------------------------------------------------------


@dataclass
class Scenario:
    name: str
    prepare: list[list[str]]
    command: list[str]
    check: str  # what the acknowledgement promises, see Checker


POLECAT = "import os, sys, pathlib; pathlib.Path(sys.argv[1], sys.argv[2]).touch()"


def scenarios(reports: Path) -> dict[str, Scenario]:
    items = ["al-1", "al-2", "al-3"]
    polecat = json.dumps([sys.executable, "-c", POLECAT, str(reports), "{context_id}"])
    return {
        "sling": Scenario("sling", [], ["sling", *items, "alpha", "--json"], "queued"),
        "clear": Scenario("clear", [["sling", *items, "alpha"]], ["scheduler", "clear", "--json"], "cleared"),
        "compact": Scenario("compact", [["sling", *items, "alpha"], ["scheduler", "clear", "--item", "al-1"],
                                        ["sling", "al-1", "alpha"]], ["compact", "--json"], "kept"),
        "cycle": Scenario("cycle", [["config", "set", "executor.command", polecat],
                                    ["sling", "al-1", "al-2", "alpha"]], ["scheduler", "run", "--json"],
                          "at-most-once"),
    }


def make_town(where: Path) -> Path:
    town = where / "town"
    town.mkdir(parents=True)
    repo = where / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=c", "-c", "user.email=c@c", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(repo)], check=True)
    (repo / "README.md").write_text("rig\n")
    subprocess.run([*git, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-qm", "initial"], check=True)
    run(town, ["init", str(town)])
    run(town, ["rig", "add", "alpha", str(repo), "--prefix", "al"])
    run(town, ["config", "set", "scheduler.max_polecats", "2"])
    items = town / ".sluice" / "rigs" / "alpha" / "issues.jsonl"
    records = [{"id": f"al-{n}", "title": f"task {n}", "status": "open", "priority": 2, "issue_type": "task",
                "created_at": "2026-01-01T00:00:00Z"} for n in range(1, 4)]
    items.write_text("".join(json.dumps(record) + "\n" for record in records))
    return town


# -- checking a state ------------------------------------------------------------------------------


def materialise(town: Path, state: dict[str, bytes], into: Path) -> Path:
    """A copy of the town whose ``.sluice`` holds exactly ``state`` (paths moved to the copy)."""
    if into.exists():
        shutil.rmtree(into)
    shutil.copytree(town, into, symlinks=True, ignore=shutil.ignore_patterns(".sluice"))
    (into / ".sluice").mkdir()
    for sub in ("rigs", "runtime/workers", "schedule", "events"):
        (into / ".sluice" / sub).mkdir(parents=True, exist_ok=True)
    for name, content in state.items():
        target = into / Path(name).relative_to(town)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    return into


def queued_items(town: Path) -> tuple[set[str] | None, str]:
    """The items queued in ``town`` by ``scheduler status`` (None and the error when it fails)."""
    done = run(town, ["scheduler", "status", "--limit", "0", "--json"], check=False)
    if done.returncode != 0 or "internal error" in done.stderr or "Traceback" in done.stderr:
        return None, done.stderr.strip()
    return {row["id"] for row in json.loads(done.stdout)["items"]}, ""


def check_state(scenario: Scenario, town: Path, acked: bool, started: set[str], before: set[str],
                answer: dict | None, reports: Path) -> list[str]:
    """The promises on one crash state (see the module docstring); the problems found."""
    queued, error = queued_items(town)  # every file reads, or is mended with a warning
    if queued is None:
        return [f"`sluice scheduler status` failed: {error[:300]}"]
    problems = []
    if scenario.check == "queued" and acked:
        slung = {row["item_id"] for row in (answer or {}).get("scheduled", [])}
        if not slung <= queued:
            problems.append(f"acknowledged sling lost: {sorted(slung - queued)} not queued")
    if scenario.check == "cleared" and acked and queued:
        problems.append(f"acknowledged clear undone: {sorted(queued)} queued again")
    if scenario.check == "kept" and queued != before:
        problems.append(f"compaction changed the queue: {sorted(before)} → {sorted(queued)}")
    if scenario.check == "at-most-once" and started:
        again = reports.parent / "again"
        shutil.rmtree(again, ignore_errors=True)
        again.mkdir()
        config = town / ".sluice" / "config.json"
        document = json.loads(config.read_text())
        document.setdefault("executor", {})["command"] = [sys.executable, "-c", POLECAT, str(again),
                                                          "{context_id}"]
        config.write_text(json.dumps(document))
        done = run(town, ["scheduler", "run", "--json"], check=False)
        if done.returncode != 0 or "internal error" in done.stderr:
            return [*problems, f"`sluice scheduler run` failed: {done.stderr.strip()[:300]}"]
        twice = started & {row["context_id"] for row in json.loads(done.stdout)["launched"]}
        if twice:
            problems.append(f"launched again after the cut: {sorted(twice)}")
    return problems


@dataclass
class Outcome:
    scenario: str
    points: int = 0
    states: int = 0
    violations: list[str] = field(default_factory=list)


def explore(scenario: Scenario, work: Path, plant: str | None = None) -> Outcome:
    reports = work / "reports"
    reports.mkdir(parents=True)
    town = make_town(work)
    scenario = scenarios(reports)[scenario.name]
    for args in scenario.prepare:
        run(town, args)
    before, _ = queued_items(town)
    for index in (town / ".sluice" / "runtime" / "index").glob("*"):
        index.unlink()
    disk = Disk.of(town)
    trace = work / "trace.txt"
    done = run(town, scenario.command, plant=plant, trace=trace, check=False)
    if done.returncode != 0:
        raise SystemExit(f"sluice {' '.join(scenario.command)} failed under strace: {done.stderr.strip()}")
    answer = json.loads(done.stdout) if done.stdout.strip().startswith("{") else None
    ops = parse(trace, town, reports)
    outcome = Outcome(scenario.name)
    acked, started, seen = False, set(), set()
    for position, op in enumerate([Op("start"), *ops]):
        disk.apply(op)
        acked = acked or op.kind == "ack"
        if op.kind == "started":
            started.add(op.path)
        if op.kind not in ("start", "fsync", "rename", "ack", "write", "truncate", "unlink"):
            continue
        outcome.points += 1
        for label, state in disk.states():
            key = (acked, frozenset(started), tuple(sorted(state.items())))
            if key in seen:
                continue
            seen.add(key)
            outcome.states += 1
            copy = materialise(town, state, work / "state")
            for problem in check_state(scenario, copy, acked, started, before or set(), answer, reports):
                outcome.violations.append(f"{scenario.name} after op {position} ({op.kind} "
                                          f"{Path(op.path).name}), {label}: {problem}")
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", default="all", choices=["all", "sling", "clear", "compact", "cycle"])
    parser.add_argument("--plant", choices=sorted(PLANTED))
    parser.add_argument("--keep", type=Path, help="keep the towns and traces here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if shutil.which("strace") is None:
        sys.stderr.write("crashcheck needs strace (apt-get install strace)\n")
        return 2
    root = args.keep or Path(tempfile.mkdtemp(prefix="sluice-crash-"))
    names = ["sling", "clear", "compact", "cycle"] if args.scenario == "all" else [args.scenario]
    outcomes = []
    try:
        for name in names:
            work = root / name
            shutil.rmtree(work, ignore_errors=True)
            outcomes.append(explore(Scenario(name, [], [], ""), work, args.plant))
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    total = sum(o.states for o in outcomes)
    bad = [v for o in outcomes for v in o.violations]
    if args.json:
        print(json.dumps({"scenarios": [o.__dict__ for o in outcomes], "states": total,
                          "violations": len(bad)}, indent=2))
    else:
        for o in outcomes:
            print(f"{o.scenario:<8} {o.points:>4} crash points {o.states:>5} states"
                  f"  {len(o.violations)} violations")
        print(f"{'all':<8} {'':>4}              {total:>5} states  {len(bad)} violations")
        for violation in bad[:40]:
            print("  " + violation)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
