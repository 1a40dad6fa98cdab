"""A derived SQLite index over one rig's durable items, so reads stay fast.

Parsing a 100,000-item beads file costs about a second before any decision
is made; the index keeps what readiness and listing need (statuses, edges,
priorities, the clock-free blocked state and each row's raw JSON) and is
rebuilt only when the source file's size, mtime or inode changes.  The JSONL
file stays the source of truth: deleting the index loses nothing.

A rebuild writes a new database beside the old one and renames it into place,
so concurrent readers and rebuilders never see a half-built index.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from . import readiness
from .items import effective_tokens, labels_of, to_node
from .readiness import Node

SCHEMA_VERSION = "3"
_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE items (
    id TEXT PRIMARY KEY,
    line INTEGER,
    status TEXT, issue_type TEXT, priority INTEGER, created_ts REAL,
    ephemeral INTEGER, pinned INTEGER, defer_ts REAL, parent_defer_ts REAL,
    blocked INTEGER, candidate INTEGER, assignee TEXT, labels TEXT, tokens INTEGER,
    deps TEXT, raw TEXT
);
CREATE TABLE outside (id TEXT PRIMARY KEY);
CREATE INDEX items_ready ON items (candidate, priority, created_ts);
"""


def signature(path: Path) -> str:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "missing"
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"


class DurableIndex:
    """The index of one durable items file, kept fresh on every open."""

    def __init__(self, db_path: Path, source: Path, load: Callable[[], Iterable[tuple[dict, str]]]):
        self.db_path = Path(db_path)
        self.source = Path(source)
        self._load = load  # yields (normalised record, raw JSON text) in file order
        self._conn: sqlite3.Connection | None = None

    # -- freshness -----------------------------------------------------------
    def conn(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        want = signature(self.source)
        conn = self._open_existing(want)
        if conn is None:
            self._rebuild(want)
            conn = self._open_existing(want)
            if conn is None:  # the source changed again while we built; use what we built
                conn = sqlite3.connect(self.db_path)
        self._conn = conn
        return conn

    def _open_existing(self, want: str) -> sqlite3.Connection | None:
        if not self.db_path.exists():
            return None
        try:
            conn = sqlite3.connect(self.db_path)
            meta = dict(conn.execute("SELECT key, value FROM meta"))
        except sqlite3.DatabaseError:
            return None
        if meta.get("signature") == want and meta.get("schema") == SCHEMA_VERSION:
            return conn
        conn.close()
        return None

    def _rebuild(self, sig: str) -> None:
        records = list(self._load())
        nodes: dict[str, Node] = {}
        for record, _raw in records:
            if record.get("status") == "tombstone":
                continue  # beads drops tombstones on import (L2)
            nodes[record["id"]] = to_node(record)
        blocked = readiness.blocked_state(nodes)
        outside = set()
        for node in nodes.values():
            for dep_type, target, _gate in node.deps:
                if dep_type == "tracks" or target in nodes or target.startswith("external:"):
                    continue
                if readiness.id_prefix(target) == readiness.id_prefix(node.id):
                    outside.add(target)

        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=self.db_path.name + ".", suffix=".tmp", dir=self.db_path.parent)
        os.close(fd)
        try:
            conn = sqlite3.connect(tmp)
            conn.execute("PRAGMA journal_mode=OFF")
            conn.execute("PRAGMA synchronous=OFF")
            conn.executescript(_SCHEMA)
            rows = []
            for line, (record, raw) in enumerate(records, start=1):
                rows.append(self._row(record, raw, line, nodes, blocked))
            conn.executemany("INSERT OR REPLACE INTO items VALUES (" + ",".join("?" * 17) + ")", rows)
            conn.executemany("INSERT INTO outside VALUES (?)", [(t,) for t in outside])
            conn.executemany(
                "INSERT INTO meta VALUES (?, ?)", [("signature", sig), ("schema", SCHEMA_VERSION)]
            )
            conn.commit()
            conn.close()
            os.replace(tmp, self.db_path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise

    @staticmethod
    def _row(record, raw, line, nodes, blocked) -> tuple:
        node = nodes.get(record["id"]) or to_node(record)
        is_blocked = blocked.get(node.id, False)
        parent_defer = None
        for dep_type, target, _gate in node.deps:
            if dep_type == "parent-child":
                parent = nodes.get(target)
                if parent is not None and parent.defer_ts is not None:
                    parent_defer = max(parent_defer or parent.defer_ts, parent.defer_ts)
        live = record.get("status") != "tombstone"
        return (
            node.id,
            line,
            node.status,
            node.issue_type,
            node.priority,
            node.created_ts,
            int(node.ephemeral),
            int(node.pinned),
            node.defer_ts,
            parent_defer,
            int(is_blocked and live),
            int(live and readiness.is_ready_candidate(node, is_blocked)),
            record.get("assignee") or "",
            json.dumps(labels_of(record)),
            effective_tokens(record),
            json.dumps(node.deps, separators=(",", ":")) if node.deps else "",
            raw,
        )

    # -- queries -------------------------------------------------------------
    def get_raw(self, item_id: str) -> str | None:
        row = self.conn().execute("SELECT raw FROM items WHERE id = ?", (item_id,)).fetchone()
        return row[0] if row else None

    def ids(self) -> set[str]:
        return {row[0] for row in self.conn().execute("SELECT id FROM items")}

    def outside_targets(self) -> set[str]:
        return {row[0] for row in self.conn().execute("SELECT id FROM outside")}

    def statuses(self, ids: Iterable[str]) -> dict[str, str]:
        ids = list(ids)
        out: dict[str, str] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            sql = f"SELECT id, status FROM items WHERE id IN ({','.join('?' * len(chunk))})"
            out.update(self.conn().execute(sql, chunk))
        return out

    def ready_rows(self, now_ts: float, limit: int = 0) -> list[tuple]:
        """(priority, created_ts, id, raw) of ready rows in beads order."""
        sql = (
            "SELECT priority, created_ts, id, raw FROM items WHERE candidate = 1"
            " AND (defer_ts IS NULL OR defer_ts <= ?) AND (parent_defer_ts IS NULL OR parent_defer_ts <= ?)"
            " ORDER BY priority, created_ts DESC, id"
        )
        params: list = [now_ts, now_ts]
        if limit > 0:
            sql += " LIMIT ?"
            params.append(limit)
        return self.conn().execute(sql, params).fetchall()

    def blocked_rows(self) -> list[tuple[str, str]]:
        """(id, raw) of every blocked row."""
        return self.conn().execute("SELECT id, raw FROM items WHERE blocked = 1").fetchall()

    def rows(self, where: str = "", params: Iterable = ()) -> list[tuple[str, str]]:
        sql = "SELECT id, raw FROM items WHERE status != 'tombstone'"
        if where:
            sql += f" AND ({where})"
        return self.conn().execute(sql + " ORDER BY line", list(params)).fetchall()

    def nodes(self) -> dict[str, Node]:
        """Every live row as a readiness node (the slow, exact path)."""
        out = {}
        for row in self.conn().execute(
            "SELECT id, status, issue_type, priority, created_ts, pinned, ephemeral, defer_ts, deps"
            " FROM items WHERE status != 'tombstone'"
        ):
            deps = tuple(tuple(d) for d in json.loads(row[8])) if row[8] else ()
            out[row[0]] = Node(row[0], row[1], row[2], row[3], row[4], bool(row[5]), bool(row[6]), row[7], deps)
        return out

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
