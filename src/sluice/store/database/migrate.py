"""Opening a town made by sluice 0.1: its files become the town database, in one transaction.

sluice 0.1 kept its own state in append-only JSON lines with derived files
beside them.  The first time this sluice opens such a town (no database yet,
old files present), :func:`from_files` runs inside the transaction that creates
the schema, so a town is either wholly migrated or not at all: a kill -9
half-way leaves no database, and the next open starts again from the files,
which were not touched.

After the commit the old files are moved aside, never deleted, into
``.sluice/migrated-<UTC date and time>/`` (keeping their paths under
``.sluice/``); what a crash left unmoved is moved by the next open, since the
database remembers which files it took.  Derived files of 0.1 (digests, maps,
chains, kept readings) are moved with them: nothing reads them any more.

What comes across: every rig's ephemeral records, open and closed (the queue
in the same order with the same ids, failures, backoffs, promotions, launch
intents), the archive of closed contexts and the ids compaction reserved, and
the per-rig decision counts fairness reads.  The other kinds of state carry
their own ``migrate_from_files``, called from here.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.errors import ConfigError
from sluice.store.database import admission_state, contexts, decisions, runs, state
from sluice.store.files import fsutil
from sluice.store.files.jsonlog import TornLine, parse_line
from sluice.store.files.town import made_by_01

if TYPE_CHECKING:
    from sluice.store.files.town import Town

#: 0.1's files under ``.sluice/``, relative, that only ever held derived state (moved aside unread).
DERIVED = ("runtime/queue-chain.json", "runtime/queue-chain.tail", "runtime/queue-head.json",
           "runtime/queue-replay.json", "runtime/queue-replay-head.json", "runtime/queue-replay-summary.json",
           "runtime/decision-counts.json", "runtime/forecast.json", "runtime/host-reading.json")
#: Beside each rig's index, 0.1 kept these (``<rig>.<suffix>``).
DERIVED_SUFFIXES = (".queue.json", ".open-items", ".ephemeral.json")
PENDING_KEY = "migration_pending"


def ensure(town: Town) -> None:
    """Migrate ``town`` when it is a 0.1 town without a database; finish moving a migration's old files
    aside.  Every way into a town (``sluice``, ``sluice.open_town``, the MCP server) takes this first."""
    from sluice.store.database.db import database_path

    if not made_by_01(town):  # a few stats: every command takes this way in
        return
    if not database_path(town.dir).exists():
        default, town.db.on_create = town.db.on_create, lambda conn: from_files(town, conn)
        try:
            town.db.conn  # noqa: B018  (the database made, and the town migrated, in one transaction)
        finally:
            town.db.on_create = default
    move_aside(town)  # the old files still there: this migration's, or one a crash left half-moved


def from_files(town: Town, conn: sqlite3.Connection) -> None:
    """Bring 0.1's state into the new database through ``conn`` (inside its creating transaction)."""
    moved: list[Path] = []
    rigs = town.dir / "rigs"
    seen_open: set[str] = set()
    for rig_dir in sorted(d for d in rigs.iterdir() if d.is_dir()) if rigs.is_dir() else ():
        moved += _rig(conn, rig_dir, seen_open)
    counts = decisions.count_log(town.decisions_path)
    conn.executemany("INSERT INTO decision_counts (rig, n) VALUES (?, ?)", sorted(counts.items()))
    for migrate in (runs.migrate_from_files, state.migrate_from_files, admission_state.migrate_from_files):
        moved += migrate(town, conn)
    moved += [town.dir / rel for rel in DERIVED]
    index = town.runtime / "index"
    if index.is_dir():
        moved += [p for p in index.iterdir() if any(p.name.endswith(s) for s in DERIVED_SUFFIXES)]
    present = sorted({str(p.relative_to(town.dir)) for p in moved if p.exists()})
    conn.execute("INSERT INTO meta (key, value) VALUES ('migrated_from', '0.1')")
    conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (PENDING_KEY, json.dumps(present)))
    conn.execute("INSERT INTO versions (name, value) VALUES ('queue', 1)")


def _rig(conn: sqlite3.Connection, rig_dir: Path, seen_open: set[str]) -> list[Path]:
    rig = rig_dir.name
    log = rig_dir / "ephemeral.jsonl"
    archive = rig_dir / "ephemeral.archive.jsonl.gz"
    # The latest line of each id, kept as its text (a parsed record costs several times its line: a
    # town of 100,000 contexts would hold them all), read again in chunks as they are written.
    latest: dict[str, tuple[Path, int, bytes]] = {}
    if archive.exists():
        try:
            with gzip.open(archive, "rb") as fh:
                _latest_lines(archive, fh, latest, moved=False)
        except (OSError, EOFError) as err:
            raise ConfigError(f"{archive}: cannot read the archive to migrate it ({err})") from None
    if log.exists():
        with open(log, "rb") as fh:
            _latest_lines(log, fh, latest)
    # A second open context of an item (0.1 could be left so by hand edits) stays open, outside the
    # one-open-per-item constraint, for the cycle to close as a duplicate.
    lines = list(latest.values())
    latest.clear()
    for start in range(0, len(lines), MIGRATE_CHUNK):
        chunk = lines[start:start + MIGRATE_CHUNK]
        records = [parse_line(path, number, line) for path, number, line in chunk]
        contexts.insert(conn, rig, [r for r in records if r is not None], open_items=seen_open)
    ids = rig_dir / "ephemeral.archive.ids"
    if ids.exists():
        drawn = [(line.strip(),) for line in ids.read_text(encoding="utf-8", errors="replace").splitlines()
                 if line.strip() and not line.startswith("#")]
        conn.executemany("INSERT INTO drawn_ids (id) VALUES (?) ON CONFLICT (id) DO NOTHING", drawn)
    return [log, archive, ids, rig_dir / "ephemeral.compacted"]


#: Records parsed and written at a time by a migration.
MIGRATE_CHUNK = 5000


def _latest_lines(path: Path, fh, latest: dict[str, tuple[Path, int, bytes]], moved: bool = True) -> None:
    """Each record line of ``fh`` into ``latest`` by id, a later line taking the place of an earlier one
    (``moved``: in the order of the later line, as a log's rewrite is; else in the earlier one's)."""
    for number, line in enumerate(fh, start=1):
        try:
            record = parse_line(path, number, line)
        except TornLine:
            return  # an interrupted last write (a gzip member cut short): never acknowledged
        if record is not None:
            if moved:
                latest.pop(record["id"], None)
            latest[record["id"]] = (path, number, line)


def move_aside(town: Town) -> Path | None:
    """Move the files a migration took into ``.sluice/migrated-<stamp>/``; None when nothing is left."""
    row = town.db.one("SELECT value FROM meta WHERE key = ?", (PENDING_KEY,))
    if row is None:
        return None
    pending = [rel for rel in json.loads(row[0]) if (town.dir / rel).exists()]
    target = None
    if pending:
        target = town.dir / time.strftime("migrated-%Y%m%dT%H%M%SZ", time.gmtime())
        for rel in pending:
            destination = target / rel
            destination.parent.mkdir(parents=True, exist_ok=True)
            os.replace(town.dir / rel, destination)
        fsutil.fsync_dir(town.dir)
    with town.db.transaction() as conn:
        conn.execute("DELETE FROM meta WHERE key = ?", (PENDING_KEY,))
    with contextlib.suppress(OSError):  # 0.1's emptied folder of runs goes too (a rig's own items stay)
        (town.dir / "runs").rmdir()
    return target
