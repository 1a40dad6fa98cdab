"""Helpers for the dispatcher's tests: towns with rigs, items written as beads records, context reads."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
import time
from pathlib import Path

from helpers import Cli, make_repo

STAMP = "2026-01-01T00:00:00Z"


def add_rig(cli: Cli, tmp_path: Path, name: str, prefix: str) -> Path:
    """A real git repository registered as a rig (through the library: fixtures stay fast)."""
    from sluice.store.files.town import Town
    from sluice.store.items.rigs import add_rig as register

    repo = make_repo(tmp_path / "repos" / name)
    register(Town(cli.town), name, repo, prefix)
    return repo


def configure(town: Path, key: str, value: str) -> None:
    """What `sluice config set KEY VALUE` does, without a process per setting."""
    from sluice.core.models import apply_config_value, parse_config_value
    from sluice.store.files.town import Town

    parsed = parse_config_value(key, value)
    Town(town).update_config(lambda config: apply_config_value(config, key, parsed))


def town_with_rigs(cli: Cli, tmp_path: Path, *rigs: tuple[str, str]) -> dict[str, Path]:
    return {name: add_rig(cli, tmp_path, name, prefix) for name, prefix in rigs}


def item(item_id: str, title: str = "", status: str = "open", deps=(), **extra) -> dict:
    record = {
        "id": item_id,
        "title": title or f"work {item_id}",
        "status": status,
        "priority": extra.pop("priority", 2),
        "issue_type": extra.pop("issue_type", "task"),
        "created_at": extra.pop("created_at", STAMP),
        "updated_at": STAMP,
    }
    if deps:
        record["dependencies"] = [
            {"issue_id": item_id, "depends_on_id": target, "type": dep_type, "created_at": STAMP}
            for dep_type, target in deps
        ]
    record.update(extra)
    return record


#: The keys that come from the forecast's times: with no daemon ticking, the first launch is forecast
#: for now, so they move with the clock between two calls.
ETA_KEYS = ("start_at", "done_at", "done_p90_at")


def drop_etas(doc: dict) -> dict:
    """A queue row or an explanation without its forecast times."""
    return {k: v for k, v in doc.items() if k not in ETA_KEYS}


def without_etas(rows: list[dict]) -> list[dict]:
    """Queue rows without their forecast times, to compare two calls (or ``status`` rows, which have none)."""
    return [drop_etas(row) for row in rows]


def blank_etas(text: str) -> str:
    """JSON text with the forecast's times blanked, to compare the very bytes two calls print."""
    import re

    return re.sub(r'"(start_at|done_at|done_p90_at)":"[^"]*"', r'"\1":"…"', text)


def issues_path(town: Path, rig: str) -> Path:
    return town / ".sluice" / "rigs" / rig / "issues.jsonl"


def write_items(town: Path, rig: str, records: list[dict]) -> None:
    """Add durable items to a rig's own store (as `sluice item import` would leave them)."""
    path = issues_path(town, rig)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record) + "\n")


def records(path: Path) -> dict[str, dict]:
    """Last version of every record in a JSONL file."""
    out: dict[str, dict] = {}
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            out[record["id"]] = record
    return out


def contexts(town: Path, rig: str) -> list[dict]:
    """A rig's sling contexts, open and closed, as ``sluice export RIG`` prints them (from the database)."""
    from sluice.store.database.contexts import records as stored
    from sluice.store.files.town import Town

    found = stored(Town(town), rig)
    return [r for r in found if "sluice:sling-context" in r.get("labels", [])]


def fields(context: dict) -> dict:
    return json.loads(context["description"])


def open_contexts(town: Path, rig: str, item_id: str | None = None) -> list[dict]:
    return [c for c in contexts(town, rig) if c["status"] == "open"
            and (item_id is None or fields(c).get("work_bead_id") == item_id)]


def events(town: Path, event_type: str | None = None) -> list[dict]:
    path = town / ".sluice" / "events" / "scheduler.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if event_type is None or r["type"] == event_type]


def tree_hash(root: Path) -> str:
    """Names and bytes of every file under ``root`` (not mtimes); the town database by what it holds.

    The database's bytes move without a change of what it holds (a reader's
    marks in its shared memory, a checkpoint of its log when the last
    connection closes), so it is hashed as the SQL text of its rows.
    """
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.name.startswith("town.db-"):  # its write-ahead log and shared memory: in its rows
            continue
        digest.update(str(path.relative_to(root)).encode())
        if path.name == "town.db":
            digest.update(database_dump(path).encode())
        elif path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def database_dump(path: Path) -> str:
    """The SQL text of everything a town database holds."""
    conn = sqlite3.connect(path)
    try:
        return "\n".join(conn.iterdump())
    finally:
        conn.close()


def python_command(code: str, *args: str) -> str:
    """``executor.command`` JSON running ``code`` with the interpreter of the tests."""
    return json.dumps([sys.executable, "-c", code, *args])


def sleeper(seconds: float) -> str:
    return python_command(f"import time; time.sleep({seconds})")


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.05):
    """Poll until ``predicate()`` is truthy (returns it) or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def worker_records(town: Path) -> list[dict]:
    directory = town / ".sluice" / "runtime" / "workers"
    out = [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))] if directory.exists() else []
    finished = directory / "finished.jsonl"
    if finished.exists():
        out += [json.loads(line) for line in finished.read_text().splitlines() if line.strip()]
    return out


def sluice_env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}


def stop_polecats(town: Path) -> None:
    """Stop every polecat the town's configured executor still runs (a fixture's teardown)."""
    from sluice.executors import get_executor
    from sluice.store.files.town import Town

    executor = get_executor(Town(town))
    for polecat in executor.active():
        executor.stop(polecat.id)


def counted_surveys(monkeypatch, module) -> list[int]:
    """One entry per survey ``module`` makes."""
    calls: list[int] = []
    real = module.survey
    monkeypatch.setattr(module, "survey", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def memory_alpha(base: Path, clock, records: list[dict]):
    """A town under ``base`` with rig ``alpha`` (its own store holding ``records``), the memory executor
    on ``clock`` and ``max_polecats`` 2: what the property tests of the kept queue start from.
    Returns (town dir, the executor)."""
    from helpers.foundation import quick_rig, quick_town
    from sluice.executors.memory import MemoryExecutor
    from sluice.store.files.town import Town

    town_dir = quick_town(base)
    quick_rig(town_dir, base)
    configure(town_dir, "executor.kind", "memory")
    configure(town_dir, "scheduler.max_polecats", "2")
    memory = MemoryExecutor(clock).serve(Town(town_dir))
    write_items(town_dir, "alpha", records)
    return town_dir, memory


def put_records(town: Path, rig: str, records: list[dict]) -> None:
    """Write ephemeral records into a rig's store as they are (a hand-made or damaged context; a second
    open context of an item is written as a migrated town's duplicate is, outside the constraint)."""
    from sluice.store.database.contexts import insert
    from sluice.store.files.town import Town

    db = Town(town).db
    with db.transaction() as conn:
        taken = {row[0] for row in conn.execute("SELECT open_item FROM issues WHERE open_item IS NOT NULL")}
        insert(conn, rig, records, open_items=taken)
        db.advance("queue")
    db.close()


def edit_fields(town: Path, rig: str, change) -> None:
    """Change the sling-context fields (a dict) of every open context of a rig, as a hand edit would
    (the queue's columns kept as every writer keeps them)."""
    from sluice.core.records import SlingContextFields
    from sluice.store.files.town import Town

    db = Town(town).db
    with db.transaction() as conn:
        rows = conn.execute("SELECT id, description FROM issues WHERE rig = ? AND status = 'open'", (rig,))
        for context_id, text in rows.fetchall():
            fields = json.loads(text)
            change(fields)
            parsed = SlingContextFields.from_description(json.dumps(fields))
            facts = parsed.queue_facts() if parsed is not None else (None, None, 0)
            conn.execute("UPDATE issues SET description = ?, target_rig = ?, enqueued_at = ?, plain = ?"
                         " WHERE id = ?", (json.dumps(fields), *facts, context_id))
        db.advance("queue")
