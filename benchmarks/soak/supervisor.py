"""Runs the soak: starts every process, samples the executor, kills at random, restarts, stops.

The chaos lives here, beside the processes it kills: every few seconds one
of the slingers, the tracker, the controller, the daemon or the daemon's
in-flight dispatch cycle gets SIGKILL, and the supervisor starts a new one.
Once a minute it tears an append-only log: under the lock the log's writers
take, it appends a copy of the last record cut short by a random number of
bytes — exactly the tail a writer killed in the middle of its ``write()``
leaves behind.

Two phases take the disk away for a while: **disk-full** fills the small
tmpfs the town lives on (a filler file beside ``.sluice``) and frees it
again; **events-unwritable** makes the event log immutable (``chattr +i``,
which holds even for root) and writable again.  No log is torn meanwhile.

Each second it samples which polecats are alive (from the polecats' own
start records, checked against ``/proc`` with their start time, so a reused
pid is never counted) and what the executor's records say, for the cap checks.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from soak.build import Layout
from soak.history import History

HERE = Path(__file__).resolve().parent
ROLES = ("slinger-0", "slinger-1", "slinger-2", "slinger-3", "tracker", "controller", "exporter")
TARGETS = (*ROLES, "daemon", "cycle")


def proc_stat(pid: int) -> tuple[str, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        rest = data[data.rfind(b")") + 2 :].split()
        return rest[0].decode(), int(rest[19])
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int, start_time: int | None) -> bool:
    info = proc_stat(pid)
    return info is not None and info[0] not in ("Z", "X") and (start_time is None or info[1] == start_time)


def cycle_pids(town: Path) -> list[int]:
    """Dispatch cycles running for this town: the daemon's tick process, or ``sluice scheduler run``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            tick = b"sluice.scheduler.unattended.tick" in cmdline and str(town).encode() in cmdline
            if not tick and (b"scheduler" not in cmdline or b"run" not in cmdline):
                continue
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if tick or f"SLUICE_TOWN={town}".encode() in environ:
            out.append(int(entry))
    return out


@dataclass
class Samples:
    count: int = 0
    max_alive: int = 0
    max_records: int = 0
    max_by_rig: Counter = field(default_factory=Counter)
    max_by_label: Counter = field(default_factory=Counter)
    over: list[dict] = field(default_factory=list)  # samples that broke a cap


class Polecats:
    """Polecats seen so far (from their start records) and which of them are alive."""

    def __init__(self, log: Path, labels: dict[str, list[str]]):
        self.log = log
        self.offset = 0
        self.live: dict[int, dict] = {}
        self.labels = labels

    def poll(self) -> None:
        try:
            with open(self.log, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n")
        if end < 0:
            return
        self.offset += end + 1
        for line in data[: end + 1].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("op") == "start":
                self.live[record["pid"]] = record

    def alive(self) -> list[dict]:
        for pid in [pid for pid, r in self.live.items() if not alive(pid, r.get("start_time"))]:
            del self.live[pid]
        return list(self.live.values())


class Supervisor:
    def __init__(self, layout: Layout, seed: int, cap: int, features: dict, stall: float):
        self.layout = layout
        self.seed = seed
        self.cap = cap
        self.features = features
        self.stall = stall
        self.rng = random.Random(f"chaos|{seed}")
        self.procs: dict[str, subprocess.Popen] = {}
        self.chaos = History(layout.history, "chaos")
        self.kills: Counter = Counter()
        self.restarts: Counter = Counter()
        self.tears: list[str] = []
        self.phases: list[dict] = []  # every phase run: name, seconds, what it left
        self.samples = Samples()
        ids = json.loads((layout.soak / "ids.json").read_text())
        self.polecats = Polecats(layout.history / "polecats.jsonl", ids.get("labels", {}))
        self.touches = ids.get("touches", {})
        self.rig_caps = {key.split(".")[1]: int(value) for key, value in features.items()
                         if key.startswith("rigs.") and key.endswith(".max_polecats")}
        self.label_caps = {key.split(".", 2)[2]: int(value) for key, value in features.items()
                           if key.startswith("scheduler.label_caps.")}
        self.env = {**os.environ, "SLUICE_TOWN": str(layout.town)}
        self.env.pop("SLUICE_DAEMON", None)
        (layout.soak / "logs").mkdir(exist_ok=True)

    # -- processes -------------------------------------------------------------
    def start(self, name: str) -> None:
        if name == "daemon":
            argv = [sys.executable, "-m", "sluice", "daemon", "--interval", "1", "--timeout", "30"]
        else:
            argv = [sys.executable, str(HERE / "workers.py"), name, str(self.layout.soak), str(self.seed)]
        log = open(self.layout.soak / "logs" / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it
        self.procs[name] = subprocess.Popen(argv, cwd=self.layout.town, env=self.env,
                                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def restart_dead(self, stopping: bool = False) -> None:
        for name, proc in list(self.procs.items()):
            if proc.poll() is not None and not stopping:
                self.restarts[name] += 1
                self.chaos.write("restart", target=name, exit=proc.returncode)
                self.start(name)

    # -- chaos -----------------------------------------------------------------
    def kill_one(self) -> None:
        target = self.rng.choice(TARGETS)
        if target == "cycle":  # the most interesting victim: wait a moment for one to be running
            deadline = time.monotonic() + 2.0
            while not (pids := cycle_pids(self.layout.town)) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not pids:
                return
            time.sleep(self.rng.uniform(0.0, 0.5))  # at a random point of the cycle
            pid = self.rng.choice(pids)
        else:
            proc = self.procs.get(target)
            if proc is None or proc.poll() is not None:
                return
            pid = proc.pid
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        self.kills[target] += 1
        self.chaos.write("kill", target=target, victim=pid)
        if target != "cycle":
            self.procs[target].wait()

    def tear_a_log(self) -> None:
        """Leave a torn last line in one append-only log, under the lock its writers hold."""
        from sluice.store.files import fsutil
        from sluice.store.files.town import Town

        town = Town(self.layout.town)
        choices: list[tuple[Path, Path | None]] = [(self.chaos.path, None)]
        choices += [(town.events_path, town.lock_path("outbox")),  # the flush appends under it
                    (town.decisions_path, town.lock_path("outbox")),
                    (town.workers_dir / "finished.jsonl", town.lock_path("workers"))]
        path, lock = self.rng.choice(choices)
        if not path.exists():
            return
        if path == self.chaos.path:
            cut = self._tear(path)
        else:
            with fsutil.file_lock(lock):
                cut = self._tear(path)
        if cut:
            self.tears.append(str(path.relative_to(self.layout.root)))
            self.chaos.write("tear", file=str(path), kept=cut)

    def _tear(self, path: Path) -> int:
        with open(path, "r+b") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - (1 << 20)))
            tail = fh.read()
            if not tail.endswith(b"\n"):
                return 0  # already torn: leave it to its writers to mend
            lines = tail[:-1].rsplit(b"\n", 1)
            last = lines[-1]
            if len(last) < 2:
                return 0
            kept = self.rng.randint(1, len(last) - 1)
            fh.write(last[:kept])
            return kept

    # -- sampling ----------------------------------------------------------------
    def sample(self) -> None:
        self.polecats.poll()
        live = self.polecats.alive()
        records = self._record_count()
        by_rig = Counter(r["rig"] for r in live)
        by_label = Counter(label for r in live for label in self.polecats.labels.get(r["item"], ()))
        s = self.samples
        s.count += 1
        s.max_alive = max(s.max_alive, len(live))
        s.max_records = max(s.max_records, records)
        for rig, n in by_rig.items():
            s.max_by_rig[rig] = max(s.max_by_rig[rig], n)
        for label, n in by_label.items():
            s.max_by_label[label] = max(s.max_by_label[label], n)
        broken = []
        if len(live) > self.cap:
            broken.append(f"{len(live)} polecats alive, cap {self.cap}")
        for rig, limit in self.rig_caps.items():
            if by_rig[rig] > limit:
                broken.append(f"rig {rig}: {by_rig[rig]} alive, rig cap {limit}")
        for label, limit in self.label_caps.items():
            if by_label[label] > limit:
                broken.append(f"label {label}: {by_label[label]} alive, label cap {limit}")
        if any(k.startswith("rigs.") for k in self.features):  # the overlap gate came with admission
            touching = Counter((r["rig"], touch) for r in live for touch in self.touches.get(r["item"], ()))
            broken += [f"rig {rig}: {n} polecats touch {touch} at once"
                       for (rig, touch), n in touching.items() if n > 1]
        if broken:
            s.over.append({"t": time.time(), "broken": broken,
                           "polecats": [(r["pid"], r["item"], r["context"]) for r in live]})

    def _record_count(self) -> int:
        from sluice.executors.local import pid_alive  # the executor's own reading of its records

        count = 0
        for path in (self.layout.town / ".sluice" / "runtime" / "workers").glob("*.json"):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if record.get("pid") and pid_alive(record["pid"], record.get("start_time")):
                count += 1
        return count

    # -- the run -----------------------------------------------------------------
    def run(self, seconds: float, kill_every: tuple[float, float] = (2.0, 5.0),
            tear_every: float = 60.0, phases: tuple[tuple[str, float, float], ...] = ()) -> None:
        """``phases``: (name, start, length) in seconds from the start, run one at a time."""
        self.start("daemon")
        for name in ROLES:
            self.start(name)
        began = time.monotonic()
        next_sample = began + 1.0
        next_kill = began + self.rng.uniform(*kill_every)
        next_tear = began + tear_every / 2
        waiting = sorted(phases, key=lambda phase: phase[1])
        current: tuple[str, float] | None = None  # the phase on, and when it ends
        try:
            while (now := time.monotonic()) < began + seconds:
                if now >= next_sample:
                    self.sample()
                    next_sample += 1.0
                if now >= next_kill:
                    self.kill_one()
                    next_kill = now + self.rng.uniform(*kill_every)
                if current is None and waiting and now >= began + waiting[0][1]:
                    name, _start, length = waiting.pop(0)
                    self.begin_phase(name)
                    current = (name, now + length)
                elif current is not None and now >= current[1]:
                    self.end_phase(current[0])
                    current = None
                if now >= next_tear and current is None:
                    self.tear_a_log()
                    next_tear = now + tear_every
                self.restart_dead()
                time.sleep(0.1)
        finally:  # whatever happened, leave no process of the soak behind, and the disk as it was
            if current is not None:
                self.end_phase(current[0])
            self.stop()

    # -- phases without a disk -----------------------------------------------------
    def begin_phase(self, name: str) -> None:
        self.phases.append({"name": name, "began": time.time()})
        self.chaos.write("phase", name=name, state="begin")
        if name == "disk-full":
            filler = self.layout.town / ".filler"
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                chunk = b"\0" * (1 << 20)
                while len(chunk) >= 512:
                    try:
                        if os.write(fd, chunk) < len(chunk):
                            chunk = chunk[: len(chunk) // 2]
                    except OSError:
                        chunk = chunk[: len(chunk) // 2]
            finally:
                os.close(fd)
        elif name == "events-unwritable":
            from sluice.store.files.town import Town

            events = Town(self.layout.town).events_path
            events.parent.mkdir(parents=True, exist_ok=True)
            events.touch()
            subprocess.run(["chattr", "+i", str(events)], check=True)

    def end_phase(self, name: str) -> None:
        if name == "disk-full":
            (self.layout.town / ".filler").unlink(missing_ok=True)
        elif name == "events-unwritable":
            from sluice.store.files.town import Town

            subprocess.run(["chattr", "-i", str(Town(self.layout.town).events_path)], check=True)
        self.phases[-1]["seconds"] = round(time.time() - self.phases[-1]["began"], 1)
        self.chaos.write("phase", name=name, state="end")

    def stop(self) -> None:
        """Workers killed, the daemon stopped (SIGTERM cuts its tick short), other cycles finished, polecats
        ended."""
        for name in ROLES:
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        daemon = self.procs.get("daemon")
        if daemon is not None and daemon.poll() is None:
            daemon.terminate()
            try:
                daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        deadline = time.monotonic() + 60
        while cycle_pids(self.layout.town) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in cycle_pids(self.layout.town):
            os.kill(pid, signal.SIGKILL)
        self.sample()
        for record in self.polecats.alive():
            try:
                os.killpg(record["pid"], signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + 10
        while self.polecats.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        pristine = self.layout.soak / "export.pristine"
        if pristine.exists() and self.layout.export is not None:  # the exporter may have died mid-edit
            self.layout.export.write_bytes(pristine.read_bytes())
