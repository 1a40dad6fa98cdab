"""The soak's load: slingers, a tracker and a controller, each a process of its own.

``python workers.py ROLE SOAK_DIR SEED`` runs one loop until killed (the
chaos does that with SIGKILL; the supervisor starts a new one).  Every call
goes through sluice's real CLI entry point, run in this process (a new
interpreter per call would cost more CPU than the scheduler under test), and
every answer is written to the role's history *after* sluice gave it — so
the history holds exactly what was acknowledged.  A call that ends in a
traceback or an "internal error" is recorded as a ``crash``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from soak.build import GUARD_OFF, GUARD_ON, HOLD_FILE
from soak.history import History


def run_cli(args: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``sluice ARGS`` run through its entry point in this process."""
    from sluice.surfaces.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv
    sys.argv = ["sluice", *args]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException as crash:
        code, err = 99, io.StringIO(f"Traceback: escaped main(): {type(crash).__name__}: {crash}")
    finally:
        sys.argv = saved
        logging.getLogger("sluice").handlers.clear()
    return code, out.getvalue(), err.getvalue()


def crashed(code: int, stderr: str) -> bool:
    return code not in (0, 1, 2) or "Traceback" in stderr or "internal error" in stderr


class Worker:
    def __init__(self, role: str, soak: Path, seed: int):
        self.role = role
        self.soak = soak
        self.hist = History(soak / "history", f"{role}-{os.getpid()}")
        self.rng = random.Random(f"{seed}|{role}|{os.getpid()}|{time.time()}")
        self.ids = json.loads((soak / "ids.json").read_text())
        self.own_rigs = [r for r in self.ids["rigs"] if r != self.ids["read_only"]]

    def call(self, op: str, args: list[str], **extra) -> tuple[int, dict | list | None]:
        code, out, err = run_cli(args)
        data = None
        if out.strip():
            try:
                data = json.loads(out)
            except ValueError:
                data = None
        shown = [a[:200] for a in args[:8]]  # a hostile argument may be 100,000 characters
        if crashed(code, err):
            self.hist.write("crash", call=op, args=shown, code=code, stderr=err[-2000:])
        self.hist.write(op, args=shown, code=code, result=data, error=err.strip()[-300:] or None, **extra)
        return code, data

    def pause(self, low: float, high: float) -> None:
        time.sleep(self.rng.uniform(low, high))


def slinger(w: Worker) -> None:
    """Slings random work (queued, closed, epics, convoys, unknown), clears and re-slings."""
    mine: list[str] = []
    while True:
        w.pause(0.2, 1.0)
        roll = w.rng.random()
        if roll < 0.65 or not mine:
            picks = [w.rng.choice(w.ids["work"]) for _ in range(w.rng.randint(1, 4))]
            if w.rng.random() < 0.15:
                picks.append(w.rng.choice(w.ids["epics"]))
            if w.rng.random() < 0.08:
                picks.append(w.rng.choice(w.ids["convoys"]))
            if w.rng.random() < 0.03:
                picks.append("ba-nosuchitem")
            _code, data = w.call("sling", ["sling", *picks, "--json"])
            if isinstance(data, dict):
                mine.extend(row["item_id"] for row in data.get("scheduled", []))
                del mine[:-50]
        elif roll < 0.85:
            item = w.rng.choice(mine)
            w.call("clear", ["scheduler", "clear", "--item", item, "--json"], item=item)
            if w.rng.random() < 0.5:  # and at once again
                w.call("sling", ["sling", item, "--json"])
        elif roll < 0.95:
            w.call("sling", ["sling", w.rng.choice(mine), "--json"])  # already queued, most likely
        elif roll < 0.97:
            w.call("status", ["scheduler", "status", "--json"])
        else:
            hostile_call(w)


#: Arguments no surface may take: text no encoding holds (an argument of bad bytes, as Python decodes
#: it) and text past every cap.  Each must be refused as a usage error (exit 2), never crash or hang.
HOSTILE_ARGUMENTS = (
    ["sling", "ba-\udcff", "--json"],
    ["sling", "ba-" + "x" * 5000, "--json"],
    ["scheduler", "clear", "--item", "\ud800", "--json"],
    ["scheduler", "explain", "ba-" + "y" * 5000, "--json"],
    ["scheduler", "throttle", "--until", "1s", "--reason", "r" * 100_000, "--json"],
)


def hostile_call(w: Worker) -> None:
    args = w.rng.choice(HOSTILE_ARGUMENTS)
    w.call("hostile", args)


def tracker(w: Worker) -> None:
    """Closes and reopens items and adds and removes dependencies in the own stores."""
    while True:
        w.pause(0.3, 1.2)
        rig = w.rng.choice(w.own_rigs)
        pool = w.ids["by_rig"][rig]
        item = w.rng.choice(pool)
        roll = w.rng.random()
        if roll < 0.4:
            w.hist.write("intent", change="close", item=item)
            w.call("close", ["item", "close", item, "--reason", "soak", "--json"], item=item)
        elif roll < 0.6:
            w.hist.write("intent", change="reopen", item=item)
            w.call("reopen", ["item", "update", item, "--status", "open", "--json"], item=item)
        elif roll < 0.85:
            target = w.rng.choice(pool)
            w.hist.write("intent", change="dep-add", item=item, target=target)
            w.call("dep-add", ["item", "dep", "add", item, target, "--json"], item=item, target=target)
        else:
            remove_dependency(w, rig, item)


def remove_dependency(w: Worker, rig: str, item: str) -> None:
    """There is no ``item dep remove`` command: drop one edge with the store's own locked rewrite."""
    from sluice.errors import SluiceError
    from sluice.store.files.town import find_town
    from sluice.store.items.rigstore import RigStore

    town = find_town()
    store = RigStore(town, town.rig(rig))
    removed: list[dict] = []

    def change(records: list[dict]) -> None:
        for record in records:
            if record["id"] == item and record.get("dependencies"):
                deps = record["dependencies"]
                removed.append(deps.pop(w.rng.randrange(len(deps))))

    w.hist.write("intent", change="dep-remove", item=item)
    try:
        store.mutate_durable(change)
    except SluiceError as err:  # refused whole (the disk-full phase): the file is as it was
        w.hist.write("dep-remove", item=item, code=1, removed=[], error=str(err)[-300:])
        return
    w.hist.write("dep-remove", item=item, code=0, removed=removed)


def controller(w: Worker) -> None:
    """Pause/resume, patrols with --fix, compaction, manual cycles and status reads at random moments."""
    compact = run_cli(["compact", "--help"])[0] == 0
    gates = run_cli(["config", "get", "scheduler.hold_file"])[1].strip() == HOLD_FILE
    while True:
        w.pause(1.0, 4.0)
        roll = w.rng.random()
        if roll < 0.15:
            w.call("pause", ["scheduler", "pause", "--json"])
            w.pause(0.5, 3.0)
            w.call("resume", ["scheduler", "resume", "--json"])
        elif roll < 0.45:
            rig = w.rng.choice(w.ids["rigs"])
            w.call("patrol", ["patrol", rig, "--fix", "--json"], rig=rig)
        elif roll < 0.6 and compact:
            w.call("compact", ["compact", "--json"])
        elif roll < 0.65:
            w.call("run", ["scheduler", "run", "--json"])
        elif roll < 0.85 and gates:
            toggle_gate(w)
        else:
            w.call("status", ["scheduler", "status", "--json"])
            w.call("list", ["scheduler", "list", "--json"])
            if gates:
                agreement(w)


def toggle_gate(w: Worker) -> None:
    """Turn the hold file or the host guard on or off; the history says only what surely held.

    ``gate-on`` is written after the gate is up, ``gate-off`` before it comes
    down, so every interval between them had the gate up the whole time (a
    kill in between leaves an interval unrecorded, never a wrong one).
    """
    town = Path(os.environ["SLUICE_TOWN"])
    if w.rng.random() < 0.5:
        hold = town / HOLD_FILE
        if hold.exists():
            w.hist.write("gate-off", gate="hold-file")
            hold.unlink(missing_ok=True)
        else:
            try:
                hold.write_text(f"soak hold by {w.role}\n")
            except OSError:  # the disk-full phase: no gate went up for sure, so none is recorded
                hold.unlink(missing_ok=True)
                return
            w.hist.write("gate-on", gate="hold-file")
        return
    code, out, _err = run_cli(["config", "get", "scheduler.host.min_free_memory"])
    if code == 0 and out.strip() == GUARD_ON:
        w.hist.write("gate-off", gate="host-memory")
        w.call("guard", ["config", "set", "scheduler.host.min_free_memory", GUARD_OFF])
    else:
        code, _data = w.call("guard", ["config", "set", "scheduler.host.min_free_memory", GUARD_ON])
        if code == 0:
            w.hist.write("gate-on", gate="host-memory")


def agreement(w: Worker) -> None:
    """status, explain and the next cycle's plan (a dry run), read back to back with the town unchanged."""
    town = Path(os.environ["SLUICE_TOWN"])
    before, t0 = town_state(town), time.time()
    _code, status = w.call("status", ["scheduler", "status", "--json"])
    _code, plan = w.call("run", ["scheduler", "run", "--dry-run", "--json"])
    waiting = first_held(status)
    explained = None
    if waiting is not None:
        _code, explained = w.call("explain", ["scheduler", "explain", waiting["id"], "--json"])
    unchanged = town_state(town) == before and status is not None and plan is not None
    w.hist.write("agreement", unchanged=unchanged, seconds=round(time.time() - t0, 3),
                 binding=(status or {}).get("binding"), plan_reason=(status or {}).get("plan_reason"),
                 paused=(status or {}).get("paused"), throttles=bool((status or {}).get("throttles")),
                 retry_at=[r["retry_at"] for r in (status or {}).get("items", []) if r.get("retry_at")],
                 cycle_reason=(plan or {}).get("reason"), item=waiting and waiting["id"],
                 explain=[r["code"] for r in (explained or {}).get("reasons", [])])


def first_held(status: dict | None) -> dict | None:
    """The best-ranked ready row held by the binding limit (by anything, when nothing binds)."""
    code = ((status or {}).get("binding") or {}).get("code")
    rows = [r for r in (status or {}).get("items", []) if r.get("why") and not r["blocked"]]
    return next((r for r in rows if code is None or code in r["why"]), None)


def town_state(town: Path) -> list[tuple[str, int, int]]:
    """Every file a read command looks at, by size and time, and the town database's versions: equal twice
    means nothing changed between."""
    out = []
    for path in sorted((town / ".sluice").rglob("*")):
        # Logs that no admission rule reads, and caches, change without changing the plan; the database's
        # bytes move when nothing in it changed (a reader's marks, a checkpoint): its versions say instead.
        if path.suffix in (".lock", ".log") or "index" in path.parts or "events" in path.parts \
                or path.name == "decisions.jsonl" or path.name.endswith("-cache.json") \
                or path.name.startswith("town.db"):
            continue
        try:
            stat = path.stat()
        except OSError:
            continue
        if path.is_file():
            out.append((str(path), stat.st_size, stat.st_mtime_ns))
    hold = town / HOLD_FILE
    out.append((str(hold), int(hold.exists()), 0))
    out += database_versions(town)
    return out


def database_versions(town: Path) -> list[tuple[str, int, int]]:
    """The versions the town database's writers advance, the daemon's heartbeat's aside (it moves each
    tick without changing the plan)."""
    import sqlite3

    database = town / ".sluice" / "town.db"
    if not database.exists():
        return []
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30)
    try:
        rows = conn.execute("SELECT name, value FROM versions WHERE name <> 'heartbeat'"
                            " ORDER BY name").fetchall()
    except sqlite3.OperationalError:  # made a moment ago: no versions yet
        rows = []
    finally:
        conn.close()
    return [(f"version:{name}", value, 0) for name, value in rows]


def exporter(w: Worker) -> None:
    """Rewrites the read-only export under running work, as an outside tracker does, then puts it back.

    Either the running export items lose their labels and ``metadata.touches``
    for a moment, or the file is cut to nothing for a moment.  Admission must
    go on counting the running items with what they launched with, so the
    supervisor's cap and overlap samples hold.  Only *running* items are
    edited (they cannot launch meanwhile), so no launch ever sees the edit.
    The pristine file is kept beside the history and put back first thing on
    every (re)start, so a kill mid-edit leaves nothing changed for long.
    """
    export = Path(w.ids["export"])
    pristine = w.soak / "export.pristine"
    if not pristine.exists():
        pristine.write_bytes(export.read_bytes())
    original = pristine.read_bytes()
    temp = w.soak / "export.soak-tmp"  # beside the history: a kill mid-write leaves nothing in the repo
    put_back(export, original, temp)
    prefix = w.ids["read_only"] + "-"
    while True:
        w.pause(0.3, 1.0)
        if w.rng.random() < 0.2:  # the export made hostile for a moment: only its rig may be held
            how = w.rng.choice(HOSTILE_EXPORTS)
            w.hist.write("export-edit", how=how, items=[])
            hostile_export(export, original, temp, how)
            w.pause(0.5, 2.0)
            put_back(export, original, temp)
            w.hist.write("export-restore")
            continue
        _code, rows = w.call("running", ["polecat", "list", "--running", "--json"])
        running = {r["item_id"] for r in rows or [] if str(r.get("item_id", "")).startswith(prefix)}
        if not running:
            continue
        if w.rng.random() < 0.3:
            w.hist.write("export-edit", how="emptied", items=sorted(running))
            with open(export, "r+b") as fh:  # in place, as a tool that truncates and rewrites does
                fh.truncate(0)
        else:
            w.hist.write("export-edit", how="labels-and-touches-dropped", items=sorted(running))
            put_back(export, stripped(original, running), temp)
        w.pause(0.5, 2.0)
        put_back(export, original, temp)
        w.hist.write("export-restore")


#: What the exporter may put where the export was: a line of text no encoding holds, a FIFO, a symlink
#: to an endless device, a symlink loop.
HOSTILE_EXPORTS = ("unencodable-line", "fifo", "endless-device", "symlink-loop")


def hostile_export(export: Path, original: bytes, temp: Path, how: str) -> None:
    temp.unlink(missing_ok=True)
    if how == "unencodable-line":
        record = {"id": "hostile-1", "title": "odd \ud800", "status": "open",
                  "labels": ["\udfff"]}
        temp.write_bytes(original + (json.dumps(record) + "\n").encode())
    elif how == "fifo":
        os.mkfifo(temp)
    elif how == "endless-device":
        temp.symlink_to("/dev/zero")
    else:
        temp.symlink_to(export.name)  # once renamed into place it names itself
    os.replace(temp, export)


def stripped(data: bytes, items: set[str]) -> bytes:
    out = []
    for line in data.splitlines():
        record = json.loads(line)
        if record.get("id") in items:
            record["labels"] = []
            record["metadata"] = {k: v for k, v in (record.get("metadata") or {}).items() if k != "touches"}
        out.append(json.dumps(record))
    return ("\n".join(out) + "\n").encode()


def put_back(path: Path, data: bytes, temp: Path) -> None:
    temp.write_bytes(data)
    os.replace(temp, path)


ROLES = {"slinger": slinger, "tracker": tracker, "controller": controller, "exporter": exporter}


def main(argv: list[str]) -> None:
    role, soak, seed = argv[0], Path(argv[1]), int(argv[2])
    Worker(role, soak, seed).hist.write("started")
    ROLES[role.split("-")[0]](Worker(role, soak, seed))


if __name__ == "__main__":
    main(sys.argv[1:])
