"""The soak's verdict: every promise checked against the history and the files left behind.

Each check returns findings (one line each, empty = held).  The history is
what processes were told (slings, clears, tracker changes), what polecats
say about themselves and what the executor recorded; the files are the
town after every process has stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from soak import history
from soak.build import Layout, fingerprint

ALLOWED_ENDS = {"dispatched", "cleared", "circuit-broken", "stale-work-item", "dispatch-close-failed"}
TRACKER_FIELDS = {"status", "closed_at", "close_reason", "updated_at", "dependencies"}


@dataclass
class Evidence:
    """Everything read once after the run."""

    layout: Layout
    records: list[dict] = field(default_factory=list)  # every history record, by time
    torn_history: int = 0
    launches: dict[str, dict] = field(default_factory=dict)  # polecat id -> executor record
    contexts: dict[str, dict] = field(default_factory=dict)  # context id -> last version
    context_rig: dict[str, str] = field(default_factory=dict)
    replay: list[tuple[str, dict]] = field(default_factory=list)  # (event type, payload) in commit order
    items: dict[str, dict[str, dict]] = field(default_factory=dict)  # own rig -> id -> record

    def ops(self, *names: str) -> list[dict]:
        return [r for r in self.records if r.get("op") in names]


def gather(layout: Layout) -> Evidence:
    ev = Evidence(layout)
    ev.records, ev.torn_history = history.read_all(layout.history)
    workers = layout.town / ".sluice" / "runtime" / "workers"
    for line in _lines(workers / "finished.jsonl"):
        ev.launches[line["id"]] = line
    for path in workers.glob("*.json"):
        try:
            record = json.loads(path.read_text())
        except ValueError:
            continue
        ev.launches.setdefault(record.get("id", path.stem), record)
    for rig, record in _stored_contexts(layout.town):
        ev.contexts[record["id"]] = record
        ev.context_rig[record["id"]] = rig
    for event in _lines(layout.town / ".sluice" / "events" / "scheduler.jsonl"):
        if event.get("type") in ("Enqueued", "ContextClosed"):
            ev.replay.append((event["type"], event.get("payload") or {}))
    for rig_dir in sorted((layout.town / ".sluice" / "rigs").iterdir()):
        own = rig_dir / "issues.jsonl"
        if own.exists():
            ev.items[rig_dir.name] = {r["id"]: r for r in _lines(own)}
    return ev


def archived(path: Path, key: str = "id") -> list[dict]:
    """Records compaction moved to its gzip archive (concatenated members; a torn last one is cut)."""
    import gzip
    import zlib

    if not path.exists():
        return []
    data = path.read_bytes()
    out: list[dict] = []
    while data:
        unpack = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            text = unpack.decompress(data) + unpack.flush()
        except (zlib.error, gzip.BadGzipFile):
            break
        if not unpack.eof:
            break
        data = unpack.unused_data
        out += _records_in(text, key)
    return out


def _stored_contexts(town: Path) -> list[tuple[str, dict]]:
    """Every sling context in the town database, open and closed, with its rig (as ``sluice export``
    prints them), read straight from the database file."""
    from sluice.store.database.contexts import records
    from sluice.store.files.town import Town

    return [(record_rig, record) for record_rig, record in
            ((_rig_of(town, r), r) for r in records(Town(town)))]


def _rig_of(town: Path, record: dict) -> str:
    from sluice.store.database.contexts import rig_of
    from sluice.store.files.town import Town

    return rig_of(Town(town), record["id"]) or ""


def _lines(path: Path) -> list[dict]:
    """Complete records of a JSONL file; a torn final line is left out (it is checked elsewhere)."""
    try:
        return _records_in(path.read_bytes())
    except FileNotFoundError:
        return []


def _records_in(data: bytes, key: str = "id") -> list[dict]:
    """The records (objects with ``key``) on the complete, parseable lines of ``data``."""
    out = []
    for line in data.split(b"\n"):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and key in record:
            out.append(record)
    return out


def fields_of(context: dict) -> dict:
    try:
        fields = json.loads(context.get("description") or "")
    except ValueError:
        return {}
    return fields if isinstance(fields, dict) else {}


# -- the checks -------------------------------------------------------------------


def no_overlap(ev: Evidence) -> list[str]:
    """No item runs in two polecats at once (the polecats' item flocks say so)."""
    return [f"item {r['item']}: polecat {r['pid']} (context {r['context']}) started while {r['holder']} ran"
            for r in ev.ops("overlap")]


def one_launch_per_sling(ev: Evidence) -> list[str]:
    """No context is launched twice: by the executor's records and by the polecats' own."""
    out = []
    by_context = defaultdict(list)
    for polecat_id, record in ev.launches.items():
        if record.get("context_id"):
            by_context[record["context_id"]].append(polecat_id)
    for context, polecats in by_context.items():
        if len(polecats) > 1:
            out.append(f"context {context} launched {len(polecats)} times: {sorted(polecats)}")
    starts = Counter(r["context"] for r in ev.ops("start", "overlap") if r.get("context"))
    out += [f"context {c}: {n} polecats started for it" for c, n in starts.items() if n > 1]
    return out


def acked_slings_accounted(ev: Evidence) -> list[str]:
    """Every acknowledged sling ends dispatched, cleared, circuit-broken, stale or still queued."""
    out = []
    launched = {r.get("context_id") for r in ev.launches.values()}
    acked: dict[str, str] = {}
    for record in ev.ops("sling"):
        result = record.get("result")
        if not isinstance(result, dict):
            continue
        for row in result.get("scheduled", []) + result.get("already", []):
            if row.get("context_id"):
                acked.setdefault(row["context_id"], row["item_id"])
    for context_id, item_id in sorted(acked.items()):
        context = ev.contexts.get(context_id)
        if context is None:
            out.append(f"sling of {item_id} acknowledged as {context_id}, which is gone from every store")
            continue
        if context.get("status") != "closed":
            continue
        reason = context.get("close_reason")
        if reason not in ALLOWED_ENDS:
            out.append(f"{context_id} ({item_id}) closed as {reason!r}")
        elif reason == "dispatched" and context_id not in launched:
            out.append(f"{context_id} ({item_id}) closed dispatched, but the executor never launched it")
    for record in ev.ops("clear"):
        result = record.get("result")
        for row in (result or {}).get("contexts", []) if isinstance(result, dict) else []:
            reason = ev.contexts.get(row["context_id"], {}).get("close_reason")
            if reason != "cleared":
                out.append(f"clear of {row['context_id']} acknowledged, but it ends as {reason!r}")
    return out


def one_open_context_per_item(ev: Evidence) -> list[str]:
    """Slinging is idempotent: an item never has two open contexts at once.

    Replayed from the event log, which holds every committed opening
    (``Enqueued``) and close (``ContextClosed``) once, in commit order; and
    the database itself must hold at most one open context per item.
    """
    out, open_by_item = [], defaultdict(set)
    for kind, payload in ev.replay:
        work, context = payload.get("item_id"), payload.get("context_id")
        if not work or not context:
            continue
        if kind == "ContextClosed":
            open_by_item[work].discard(context)
            continue
        others = open_by_item[work] - {context}
        if others:
            out.append(f"item {work}: context {context} opened while {sorted(others)} was open")
        open_by_item[work].add(context)
    now_open = Counter(fields_of(c).get("work_bead_id") for c in ev.contexts.values()
                       if c.get("status") == "open" and fields_of(c).get("work_bead_id"))
    out += [f"item {work}: {n} open contexts in the database" for work, n in now_open.items() if n > 1]
    return out


def runs_recorded(ev: Evidence) -> list[str]:
    """Every launch has exactly one run record, and every run that ended has an outcome that fits.

    Asks ``sluice runs`` first, which records the ends nobody had looked at
    yet (every polecat has ended by now).  A launch the executor never saw
    start (no pid) has no record, or one that ended ``vanished``: it was
    reconciled while still pending, and what became of it nobody recorded.
    """
    done = cli(ev.layout, "runs", "--limit", "0", "--json")
    if done.returncode != 0:
        return [f"sluice runs exited {done.returncode}: {done.stderr.strip()[-300:]}"]
    latest: dict[str, dict] = {}
    for record in _run_records(ev.layout.town / ".sluice" / "town.db"):
        latest[record["run_id"]] = record
    by_polecat = defaultdict(list)
    for record in latest.values():
        by_polecat[record.get("polecat_id")].append(record["run_id"])
    out = []
    for polecat_id, record in sorted(ev.launches.items()):
        started = record.get("pid") is not None
        count = len(by_polecat.get(polecat_id, []))
        if started and count != 1:
            out.append(f"polecat {polecat_id} ({record.get('item_id')}): {count} run records")
        elif not started and count and (count > 1 or latest[by_polecat[polecat_id][0]].get("outcome")
                                        != "vanished"):
            out.append(f"polecat {polecat_id} never started, but has {count} run record(s)"
                       " that did not end vanished")
    unknown = sorted(set(by_polecat) - set(ev.launches))
    out += [f"run record of polecat {p}, which the executor never launched" for p in unknown[:10]]
    fits = {"ok": lambda c: c == 0, "throttled": lambda c: c == 75,
            "failed": lambda c: c not in (None, 0, 75), "timed-out": lambda c: True,
            "stopped": lambda c: True, "vanished": lambda c: c is None}
    for record in latest.values():
        outcome, code = record.get("outcome"), record.get("exit_code")
        if outcome not in fits:
            out.append(f"run {record['run_id']} ({record.get('item_id')}): outcome {outcome!r} after every"
                       " polecat ended")
        elif not fits[outcome](code):
            out.append(f"run {record['run_id']} ({record.get('item_id')}): {outcome} with exit {code}")
        elif not record.get("ended_at"):
            out.append(f"run {record['run_id']}: ended {outcome} without ended_at")
    return out


def _run_records(database: Path) -> list[dict]:
    """The town database's run records, the archived ones first (older), read as an outsider: SQL alone."""
    import contextlib
    import sqlite3

    if not database.exists():
        return []
    out: list[dict] = []
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as conn:
        for table, order in (("archived_runs", "started_ts"), ("runs", "seq")):
            cursor = conn.execute(f"SELECT * FROM {table} ORDER BY {order}")
            names = [column[0] for column in cursor.description]
            for row in cursor:
                record = dict(zip(names, row, strict=True))
                record.update(json.loads(record.pop("extra") or "{}"))
                for internal in ("seq", "started_ts", "ended_ts", "archived_at"):
                    record.pop(internal, None)
                out.append(record)
    return out


def caps_held(samples) -> list[str]:
    return [f"at {s['t']:.1f}: " + "; ".join(s["broken"]) for s in samples.over]


def files_parse(ev: Evidence) -> tuple[list[str], int]:
    """Every JSON file parses; JSONL files have bad lines only as a torn last line. (findings, torn tails)."""
    out, torn = [], 0
    root = ev.layout.town / ".sluice"
    for path in sorted(root.rglob("*.json")):
        try:
            json.loads(path.read_bytes())
        except ValueError as err:
            out.append(f"{path.relative_to(root)}: does not parse ({err})")
    for path in sorted(root.rglob("*.jsonl")):
        lines = path.read_bytes().split(b"\n")
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                json.loads(line)
            except ValueError:
                if number == len(lines):  # no newline after it: a torn tail, which readers skip
                    torn += 1
                else:
                    out.append(f"{path.relative_to(root)}:{number}: a corrupt line inside the log")
    return out, torn


def readers_work(layout: Layout, rigs: list[str]) -> list[str]:
    """Every read command still answers with JSON after the run."""
    commands = [["scheduler", "status"], ["scheduler", "list"], ["schedule", "status"], ["polecat", "list"]]
    commands += [["item", "list", rig] for rig in rigs] + [["patrol", rig] for rig in rigs]
    out = []
    for args in commands:
        done = cli(layout, *args, "--json")
        try:
            json.loads(done.stdout)
        except ValueError:
            out.append(f"sluice {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return out


def cli(layout: Layout, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLUICE_TOWN": str(layout.town)}
    return subprocess.run([sys.executable, "-m", "sluice", *args], env=env, capture_output=True, text=True,
                          timeout=300)


def repos_untouched(layout: Layout, before: dict[str, dict]) -> list[str]:
    out = []
    for name, prints in before.items():
        path = layout.export if name == "export" else layout.repos[name]
        after = fingerprint(path)
        changed = sorted(k for k in prints.keys() | after.keys() if prints.get(k) != after.get(k))
        if changed:
            out.append(f"{name}: {len(changed)} file(s) changed, e.g. {changed[:3]}")
    return out


def _paused(town: Path) -> bool:
    """The pause as the town database holds it, read with the stdlib alone (no sluice import here)."""
    import sqlite3

    conn = sqlite3.connect(f"file:{town / '.sluice' / 'town.db'}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT paused FROM scheduler_state WHERE id = 1").fetchone()
    finally:
        conn.close()
    return bool(row and row[0])


def status_agrees(layout: Layout, cap: int, max_failures: int) -> list[str]:
    """The final ``scheduler status`` against a recount from the files as status left them.

    The files are read again after status answers, not taken from the
    evidence gathered earlier: a read settles the runs that ended since the
    last cycle, and a run that ended throttled or failed queues its item
    again, so the queue after the soak's last reads can hold one more
    context than it did when the evidence was read.
    """
    done = cli(layout, "scheduler", "status", "--limit", "0", "--json")  # every row, not the first 50
    try:
        status = json.loads(done.stdout)
    except ValueError:
        return [f"scheduler status gave no JSON: {done.stderr.strip()[-300:]}"]
    out = []
    paused = _paused(layout.town)
    if status["paused"] != paused:
        out.append(f"paused: status {status['paused']}, town database {paused}")
    if status["max_polecats"] != cap:
        out.append(f"max_polecats: status {status['max_polecats']}, config {cap}")
    if status["active_polecats"] != 0:
        out.append(f"active_polecats {status['active_polecats']} after every polecat ended")
    expected = recount_queued(gather(layout), max_failures)
    shown = {row["id"] for row in status["items"]}
    if status["queued_total"] != len(expected) or shown != expected:
        out.append(f"queued_total {status['queued_total']} ({len(shown)} rows), recount {len(expected)};"
                   f" only in status {sorted(shown - expected)[:5]},"
                   f" only in recount {sorted(expected - shown)[:5]}")
    return out


def recount_queued(ev: Evidence, max_failures: int) -> set[str]:
    items = {}
    for store in ev.items.values():
        items.update(store)
    export = ev.layout.export
    for record in _lines(export) if export else []:
        items[record["id"]] = record
    launched = {r.get("context_id") for r in ev.launches.values()}
    queued = set()
    for context in ev.contexts.values():
        if context.get("status") == "closed":
            continue
        fields = fields_of(context)
        item = items.get(fields.get("work_bead_id", ""))
        if not fields or item is None or fields.get("dispatch_failures", 0) >= max_failures:
            continue
        status = item.get("status", "open")
        if status in ("closed", "tombstone") or (status == "hooked" and not fields.get("force")):
            continue
        if fields.get("launch_started_at") and context["id"] in launched:
            continue
        queued.add(item["id"])
    return queued


def items_only_changed_by_tracker(ev: Evidence, before: dict[str, dict[str, dict]]) -> list[str]:
    """Work items change only as the tracker asked: scheduling never writes an item."""
    out = []
    intents = defaultdict(list)
    for record in ev.ops("intent"):
        intents[record["item"]].append(record)
    for rig, initial in before.items():
        final = ev.items.get(rig, {})
        if set(initial) != set(final):
            out.append(f"rig {rig}: items added or lost: {sorted(set(initial) ^ set(final))[:5]}")
        for item_id, old in initial.items():
            new = final.get(item_id)
            if new is None:
                continue
            changed = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)} - TRACKER_FIELDS
            if changed:
                out.append(f"{item_id}: fields {sorted(changed)} changed, which the tracker never touches")
            wanted = [i["change"] for i in intents[item_id] if i["change"] in ("close", "reopen")]
            status = new.get("status")
            if status not in ("open", "closed"):
                out.append(f"{item_id}: status {status!r}, which only scheduling could have set")
            elif status != old.get("status"):
                need = "close" if status == "closed" else "reopen"
                if need not in wanted[-2:]:
                    out.append(f"{item_id}: {old.get('status')} -> {status} without the tracker asking")
    return out


def no_crash(ev: Evidence, layout: Layout) -> list[str]:
    out = [f"{r['role']}: {r['call']} {' '.join(r['args'])} -> {r['code']}: {r['stderr'][-300:]}"
           for r in ev.ops("crash")]
    for log in sorted((layout.soak / "logs").glob("*.log")):
        text = log.read_text(errors="replace")
        for marker in ("Traceback", "internal error"):
            if marker in text:
                at = text.index(marker)
                out.append(f"{log.name}: {text[max(0, at - 200): at + 400]!r}")
                break
    return out


def hostile_refused(ev: Evidence) -> tuple[list[str], int]:
    """Every hostile argument (text no encoding holds, text past every cap) refused as a usage error,
    and how many were tried."""
    tried = ev.ops("hostile")
    out = [f"{r['role']}: {' '.join(a[:40] for a in r['args'])} -> {r['code']}: "
           f"{(r.get('error') or '')[-200:]}"
           for r in tried if r["code"] != 2]
    return out, len(tried)


def budget_held(ev: Evidence, tokens: dict[str, int], budget: int, window: float) -> list[str]:
    """Token budget: the estimates of the launches in any window never add up past the budget.

    The window is shortened by a second so that the gap between when sluice
    charges a launch and when the executor stamps it can never make a held
    budget look broken.
    """
    from datetime import datetime

    launches = []
    for record in ev.launches.values():
        try:
            at = datetime.fromisoformat(record["started_at"].replace("Z", "+00:00")).timestamp()
        except (KeyError, ValueError, AttributeError):
            continue
        launches.append((at, tokens.get(record.get("item_id"), 1000), record.get("id")))
    launches.sort()
    out, start, spent = [], 0, 0
    for at, cost, polecat in launches:
        spent += cost
        while launches[start][0] <= at - (window - 1.0):
            spent -= launches[start][1]
            start += 1
        if spent > budget:
            out.append(f"{spent} tokens launched in {window:g}s up to {polecat}, budget {budget}")
    return out


#: A cycle that read the gates just before one went up may still finish the launch it is making.
GATE_SLACK = 10.0


def gates_held(ev: Evidence) -> tuple[list[str], int]:
    """No polecat starts while the hold file or the host guard is up, past the slack.

    Returns (findings, holds recorded).
    """
    marks = sorted(ev.ops("gate-on", "gate-off"), key=lambda r: r["t"])
    intervals = []
    for n, mark in enumerate(marks):
        if mark["op"] != "gate-on":
            continue
        end = next((m["t"] for m in marks[n + 1:] if m["gate"] == mark["gate"]), float("inf"))
        intervals.append((mark["gate"], mark["t"], end))
    out = []
    for start in ev.ops("start"):
        for gate, on, off in intervals:
            if on + GATE_SLACK < start["t"] < off:
                out.append(f"{start.get('context')}: a polecat started {start['t'] - on:.1f}s into a"
                           f" {gate} hold")
    return out, len(intervals)


def views_agree(ev: Evidence) -> tuple[list[str], int]:
    """status's binding and plan_reason, explain and a dry run agree when nothing changed between the reads.

    Readings taken while a throttle or a retry backoff could end between the
    reads are not compared (time alone changes those answers).
    """
    out, compared = [], 0
    for r in ev.ops("agreement"):
        if not r.get("unchanged") or r.get("throttles"):
            continue
        soon = [stamp for stamp in r.get("retry_at") or [] if abs(_epoch(stamp) - r["t"]) < 30]
        if soon:
            continue
        compared += 1
        binding, reason = r.get("binding"), r.get("plan_reason")
        when = f"at {r['t']:.1f}"
        if r.get("cycle_reason") != reason:
            out.append(f"{when}: status plan_reason {reason}, the dry run's reason {r.get('cycle_reason')}")
        if r.get("paused"):
            if not binding or binding.get("code") != "paused":
                out.append(f"{when}: paused, but status binds {binding}")
        elif reason in ("none", "ready"):
            if binding is not None:
                out.append(f"{when}: plan_reason {reason}, yet status binds {binding}")
        elif not binding or binding.get("code") != reason:
            out.append(f"{when}: plan_reason {reason}, status binds {binding}")
        if binding and r.get("item") and binding.get("code") not in r.get("explain", []):
            out.append(f"{when}: status binds {binding.get('code')},"
                       f" explain {r['item']} says {r.get('explain')}")
    return out, compared


def _epoch(stamp: str) -> float:
    from datetime import datetime

    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return 0.0


def quiet_agreement(layout: Layout, rng_seed: int, rounds: int = 8) -> tuple[list[str], int]:
    """After the run, with every process stopped: gates and a pause set at random, then the three reads.

    Nothing changes the town between the reads here, so status's binding and
    plan_reason, explain of the best-ranked item the binding limit holds and a
    dry run must agree
    every time.  The town is left as it was found (no hold, guard met, the
    pause state restored).
    """
    import random

    from soak.build import GUARD_OFF, GUARD_ON, HOLD_FILE
    from soak.workers import first_held

    rng = random.Random(rng_seed)
    hold = layout.town / HOLD_FILE
    paused = json.loads(cli(layout, "scheduler", "status", "--json").stdout or "{}").get("paused", False)
    out, compared = [], 0
    try:
        for n in range(rounds):
            hold.unlink(missing_ok=True)
            if rng.random() < 0.4:
                hold.write_text(f"quiet round {n}\n")
            cli(layout, "config", "set", "scheduler.host.min_free_memory",
                GUARD_ON if rng.random() < 0.3 else GUARD_OFF)
            cli(layout, "scheduler", "pause" if rng.random() < 0.2 else "resume", "--json")
            status = json.loads(cli(layout, "scheduler", "status", "--json").stdout)
            plan = json.loads(cli(layout, "scheduler", "run", "--dry-run", "--json").stdout)
            waiting = first_held(status)
            explained = json.loads(cli(layout, "scheduler", "explain", waiting["id"], "--json").stdout) \
                if waiting is not None else {"reasons": []}
            record = {"op": "agreement", "t": time.time(), "unchanged": True, "binding": status["binding"],
                      "plan_reason": status["plan_reason"], "paused": status["paused"],
                      "throttles": bool(status.get("throttles")),
                      "retry_at": [r["retry_at"] for r in status["items"] if r.get("retry_at")],
                      "cycle_reason": plan["reason"], "item": waiting and waiting["id"],
                      "explain": [r["code"] for r in explained["reasons"]]}
            found, counted = views_agree(_Only([record]))
            out += [f"quiet round {n}: {f}" for f in found]
            compared += counted
    finally:
        hold.unlink(missing_ok=True)
        cli(layout, "config", "set", "scheduler.host.min_free_memory", GUARD_OFF)
        cli(layout, "scheduler", "pause" if paused else "resume", "--json")
    return out, compared


class _Only:
    """Evidence holding only the given history records."""

    def __init__(self, records: list[dict]):
        self.records = records

    def ops(self, *names: str) -> list[dict]:
        return [r for r in self.records if r.get("op") in names]
