"""A derived SQLite index over one rig's durable items, so reads stay fast.

Parsing a 100,000-item beads file costs about a second before any decision
is made; the index keeps what readiness and listing need (statuses, edges,
priorities, the clock-free blocked state and each row's raw JSON) and is
rebuilt only when the source file's size, mtime or inode changes.  The JSONL
file stays the source of truth: deleting the index loses nothing.

What the read of the source had to warn about (a torn last line, an
unusable priority) is kept in the index and said again every time the index
is opened, not only by the command that happened to rebuild it: a torn tail
hides items for as long as it is there.

A rebuild writes a new database beside the old one and renames it into place,
so concurrent readers and rebuilders never see a half-built index.  An open
connection therefore reads one unchanging database: answers that do not
depend on the clock are kept for as long as it stays open, and the ready
groups until the next deferral ends.  A caller that keeps the index open
between commands (the MCP server) calls :meth:`DurableIndex.forget_if_changed`
first, which closes it when the source file is no longer the one it was
checked against.

A one-shot command needs only a few numbers of most rigs (``schedule next``
over 30 rigs: each one's ready counts and merge queue), and opening an
index for them costs 0.7 ms a rig.  Those answers are also kept beside the
index, in ``<index>.answers.json``, under the signature of the source they
were read from and with how long each holds; a later command takes them
from there (its warnings said too) while the source is the same file.

An index that cannot be written (a full disk, a read-only runtime
directory) costs speed, never an answer: the source is read into an index
in memory instead, and the command says so once.  Any other refusal of
SQLite is a :class:`~sluice.errors.StorageError` naming the index file.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from sluice.core import readiness
from sluice.core.items import effective_tokens, labels_of, minutes_of, normalise, to_node, touches_of
from sluice.core.readiness import Node
from sluice.errors import StorageError, StoreCorrupt
from sluice.logs import log
from sluice.store.files import fsutil
from sluice.store.files.fsutil import file_signature

SCHEMA_VERSION = "17"  # raised whenever a rebuild would store, or refuse, something different

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE items (
    id TEXT PRIMARY KEY,
    line INTEGER,
    status TEXT, issue_type TEXT, priority INTEGER, created_ts REAL, ephemeral INTEGER, pinned INTEGER,
    defer_ts REAL, assignee TEXT, labels TEXT, tokens INTEGER, deps TEXT, touches TEXT, minutes INTEGER,
    parent_defer_ts REAL, blocked INTEGER, candidate INTEGER, blocked_by TEXT, raw TEXT
);
CREATE TABLE outside (id TEXT PRIMARY KEY);
CREATE TABLE lines (n INTEGER PRIMARY KEY, crc INTEGER, id TEXT);
CREATE TABLE ready_order (
    seq INTEGER PRIMARY KEY,
    priority INTEGER, created_ts REAL, id TEXT, defer_ts REAL, parent_defer_ts REAL, raw TEXT
);
CREATE TABLE blocked_order (seq INTEGER PRIMARY KEY, priority INTEGER, created_ts REAL, id TEXT, line TEXT);
"""
# Filled once the blocked state is settled.  Being a candidate does not depend on the
# clock, so candidates are stored already in beads order (R10): a ready query is one
# sequential scan that only re-checks deferral against the current time.
_READY_ORDER = """
INSERT INTO ready_order (priority, created_ts, id, defer_ts, parent_defer_ts, raw)
SELECT priority, created_ts, id, defer_ts, parent_defer_ts, raw FROM items
WHERE candidate = 1 ORDER BY priority, created_ts DESC, id
"""
# Candidates that no deferral holds back stay ready whatever the clock says, so their counts per
# (priority, tokens) are kept once; only the few deferred candidates are counted at query time.
_UNDEFERRED_GROUPS = """
CREATE TABLE undeferred_groups AS SELECT priority, tokens, count(*) AS n FROM items
WHERE candidate = 1 AND defer_ts IS NULL AND parent_defer_ts IS NULL GROUP BY priority, tokens
"""
_DEFERRED = "(defer_ts IS NOT NULL OR parent_defer_ts IS NOT NULL)"  # the partial index's condition, verbatim
# Built after the rows are in: one sorted pass instead of maintaining the index per insert.
_INDEXES = f"""
CREATE INDEX items_deferred ON items (candidate, priority, tokens, defer_ts, parent_defer_ts)
WHERE {_DEFERRED};
CREATE INDEX items_blocked ON items (blocked, priority, created_ts DESC, id);
CREATE INDEX items_kind ON items (issue_type, status);
CREATE INDEX items_group ON items (
    candidate, priority, tokens, labels, touches, issue_type, minutes, status, id, defer_ts, parent_defer_ts,
    ephemeral
);
CREATE INDEX items_rank ON items (
    candidate, priority, tokens, created_ts, id, defer_ts, parent_defer_ts, issue_type, deps
);
"""
_COLUMNS = 20
# The items columns a record's facts fill (see _facts), in their order.
_FACTS = ("status, issue_type, priority, created_ts, ephemeral, pinned, defer_ts, assignee, labels, tokens,"
          " deps, touches, minutes")
# The ready filter of ready_rows, for the scoring queries (two parameters: now, now).
_READY = (
    "candidate = 1 AND (defer_ts IS NULL OR defer_ts <= ?)"
    " AND (parent_defer_ts IS NULL OR parent_defer_ts <= ?)"
)
# The blocked rows with a cause to name, in ``item blocked`` order (beads': priority, newest first, id).
_BLOCKED_ROWS = (
    "SELECT priority, created_ts, id, raw, blocked_by FROM items"
    " WHERE blocked = 1 AND blocked_by != '[]' ORDER BY priority, created_ts DESC, id"
)
_BATCH = 2000
#: Changed lines of a rewritten source patched into the index in place; more, and it is rebuilt.
_PATCH_LINES = 64
#: Ids per ``IN (...)`` query: well under SQLite's cap on a query's parameters.
_IDS_PER_QUERY = 500
#: Warnings from one read of the source said (and kept) one by one; the rest are counted.
_WARNINGS_KEPT = 20
ANSWERS_VERSION = 1  # of the answers kept beside the index (``<index>.answers.json``)
#: How often a file that changes while it is being read is read again.
_REREADS = 3
#: The largest integer SQLite stores.
_SQL_INT_MAX = 2**63 - 1


def signature(path: Path) -> str:
    """What the index of ``path`` is keyed by; a text, never an error, even for a path that cannot
    be looked at (the open that reads it names what is wrong)."""
    return file_signature(path) or "missing"


class DurableIndex:
    """The index of one durable items file, kept fresh on every open."""

    def __init__(self, db_path: Path, source: Path, load: Callable[[], Iterable[tuple[dict, str]]]):
        self.db_path = Path(db_path)
        self.source = Path(source)
        self._load = load  # yields (normalised record, raw JSON text) in file order
        self._conn: sqlite3.Connection | None = None
        self._warnings: list[str] = []  # said while the current rebuild reads the source
        self._suppressed = 0  # warnings of this rebuild beyond the ones kept
        self._said: str | None = None  # the signature whose warnings this object has already said
        self._conn_signature: str | None = None  # the source's signature the open connection answers for
        self._kept: dict = {}  # answers read through the open connection (see the module docstring)
        self._answers: tuple[str, dict] | None = None  # (source signature, the answers kept beside the index)

    def warn(self, message: str) -> None:
        """A warning from reading the source: said now, and kept with the index to be said again.

        Only the first :data:`_WARNINGS_KEPT` are said one by one; the rest are
        counted, so an export with thousands of bad lines cannot flood every command.
        """
        self._suppressed += len(self._warnings) >= _WARNINGS_KEPT
        if len(self._warnings) < _WARNINGS_KEPT:
            log.warning("%s", message)
            self._warnings.append(message)

    def _say_once(self, want: str, messages: list[str]) -> None:
        """Say the kept warnings of the source with signature ``want``, unless this object has already."""
        if self._said != want:
            self._said = want
            for message in messages:
                log.warning("%s", message)

    def _warnings_to_keep(self) -> list[str]:
        if not self._suppressed:
            return self._warnings
        more = f"{self.source}: {self._suppressed} more warning(s) like these"
        log.warning("%s", more)
        return [*self._warnings, more]

    # -- freshness -----------------------------------------------------------
    def conn(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        # A FIFO, a device, a link loop or a file past the size limit is named now (a NotRegularFile,
        # an OSError naming the source): never waited on, never read, whatever index there is.
        found = fsutil.check_regular(self.source)
        want = fsutil.stat_signature(found) if found is not None else "missing"  # signature(), one stat
        conn = self._open_existing(want)
        if conn is None and self._patched(want):
            conn = self._open_existing(want)
        if conn is None:
            try:
                want = self._rebuild_settled(want)
                conn = self._open_existing(want)
                if conn is None:  # the source changed again while we built; use what we built
                    conn = _connect(self.db_path)
                    want = None  # not known to match anything: the next check closes it
            except (OSError, sqlite3.Error) as err:  # the index cannot be written: answer from memory
                if isinstance(err, OSError) and err.filename and Path(err.filename) == self.source:
                    raise  # the source itself cannot be read: that is the answer
                conn = self._in_memory(want, err)
        self._conn = conn
        self._conn_signature = want
        self._kept = {}
        return conn

    @property
    def facts_version(self) -> str:
        """Which version of the items' facts the open index holds: the source it was built from (a
        patch that changed only text keeps it), so the town database knows when its copies of them
        (:mod:`sluice.store.database.queue`) are still those."""
        row = self.conn().execute("SELECT value FROM meta WHERE key = 'facts'").fetchone()
        return row[0] if row else ""

    @property
    def on_disk(self) -> bool:
        """Whether the open index is the file at ``db_path`` (not one built in memory), so another
        connection may attach it."""
        return self._conn is not None and not getattr(self._conn, "in_memory", False)

    def forget_if_changed(self) -> None:
        """Close the connection unless the source is still the file it was checked against.

        A fresh open compares the same signature, so an index kept open
        between commands answers exactly as a new one would.
        """
        if self._conn is not None and signature(self.source) != self._conn_signature:
            self.close()

    def _open_existing(self, want: str) -> sqlite3.Connection | None:
        if not self.db_path.exists():
            return None
        conn = None
        try:
            conn = _connect(self.db_path)
            meta = dict(conn.execute("SELECT key, value FROM meta"))
        except (sqlite3.DatabaseError, StorageError):  # an old or damaged index is simply rebuilt
            if conn is not None:
                conn.close()
            return None
        if meta.get("signature") == want and meta.get("schema") == SCHEMA_VERSION:
            self._say_once(want, json.loads(meta.get("warnings") or "[]"))
            return conn
        conn.close()
        return None

    def _patched(self, want: str) -> bool:
        """Bring the index on disk up to a source rewritten with only a few lines' text changed — a
        title, a description, notes — in place, instead of rebuilding it (seconds at 100,000 items).

        A changed line is patched only when it is the same item and everything
        the index derives from it (status, type, priority, times, flags,
        dependencies, assignee, labels, tokens, touches, minutes) is unchanged,
        and it reads without a warning: then only its text moves.  Anything
        else — a line added, removed or moved, an item's facts changed, more
        than a few lines, a torn end — is a rebuild.
        """
        if not self.db_path.exists():
            return False
        try:
            # bounded, never waited on: a FIFO or a device is an OSError here, as a missing file is
            data = fsutil.read_regular(self.source, fsutil.MAX_SOURCE_BYTES)
        except OSError:
            return False
        if data and not data.endswith(b"\n"):
            return False  # a torn or unterminated end: the rebuild's reading decides
        conn = None
        try:
            conn = _connect(self.db_path)
            meta = dict(conn.execute("SELECT key, value FROM meta"))
            if meta.get("schema") != SCHEMA_VERSION or json.loads(meta.get("warnings") or "[]"):
                return False
            old = conn.execute("SELECT n, crc, id FROM lines ORDER BY n").fetchall()
            new = [(number, line.rstrip(b"\r")) for number, line in enumerate(data.split(b"\n"), start=1)
                   if line.strip()]
            if len(new) != len(old):
                return False
            changed = [(k, number, text) for k, (number, text) in enumerate(new)
                       if zlib.crc32(text) != old[k][1]]
            if len(changed) > _PATCH_LINES:
                return False
            updates = []
            for k, number, text in changed:
                record = self._patch_row(conn, number, text, old[k][2])
                if record is None:
                    return False
                updates.append((k + 1, zlib.crc32(text), record))
            with conn:
                for n, crc, (item_id, raw, causes) in updates:
                    conn.execute("UPDATE items SET raw = ? WHERE id = ?", (raw, item_id))
                    conn.execute("UPDATE ready_order SET raw = ? WHERE id = ?", (raw, item_id))
                    if causes:
                        conn.execute("UPDATE blocked_order SET line = ? WHERE id = ?",
                                     (blocked_line(raw, causes), item_id))
                    conn.execute("UPDATE lines SET crc = ? WHERE n = ?", (crc, n))
                conn.execute("UPDATE meta SET value = ? WHERE key = 'signature'", (want,))
            return True
        except (sqlite3.Error, StorageError, ValueError, OSError):
            return False
        finally:
            if conn is not None:
                conn.close()

    def _patch_row(self, conn: sqlite3.Connection, number: int, text: bytes, item_id: str
                   ) -> tuple[str, str, list[str]] | None:
        """``(id, new text, what blocks it)`` of a changed line whose item's facts are unchanged; None when
        the line needs a rebuild."""
        from sluice.store.files.jsonlog import parse_line

        said: list[str] = []
        try:
            record = parse_line(self.source, number, text + b"\n", said.append)
        except Exception:
            return None
        if record is None or said or record["id"] != item_id:
            return None
        if conn.execute("SELECT count(*) FROM lines WHERE id = ?", (item_id,)).fetchone()[0] != 1:
            return None  # the id is on another line too: which one wins is the rebuild's question
        stored = conn.execute(f"SELECT {_FACTS}, blocked_by FROM items WHERE id = ?", (item_id,)).fetchone()
        if stored is None or _facts(record, to_node(record)) != tuple(stored[:-1]):
            return None
        causes = json.loads(stored[-1]) if stored[-1] else []
        return item_id, text.decode("utf-8"), causes

    def _in_memory(self, want: str, err: Exception) -> sqlite3.Connection:
        """The index built in memory from the source, when it cannot be written to disk."""
        reason = getattr(err, "strerror", None) or str(err)
        log.warning("%s: cannot write the index (%s); reading %s directly, which is slower",
                    self.db_path, reason, self.source)
        conn = sqlite3.connect(":memory:", check_same_thread=False, factory=_Connection)
        conn.path = self.db_path
        conn.in_memory = True
        self._fill(conn, want)
        return conn

    def _rebuild_settled(self, want: str) -> str:
        """Rebuild, and read the file again if it changed while it was being read.

        A writer that rewrites an export in place (not by rename) can be caught
        half-way: the read then ends early at a torn line, or meets a line
        spliced from two versions.  Either way the file's signature moved, so
        the read is repeated (a few times at most) instead of answering from a
        half-written file.  The index always records the signature taken
        *before* its read, so a rebuild that raced a writer is redone next time.
        Returns the signature the index was built under.
        """
        for attempt in range(1, _REREADS + 1):
            try:
                self._rebuild(want)
            except StoreCorrupt:
                now = signature(self.source)
                if now == want or attempt == _REREADS:
                    raise  # damage that stays put is damage, not a writer at work
                want = now
                continue
            now = signature(self.source)
            if now == want:
                return want
            if attempt == _REREADS:
                log.warning("%s kept changing while it was read; answering from the last read", self.source)
                return want
            want = now
            time.sleep(0.05 * attempt)  # let the writer finish
        return want  # pragma: no cover - the loop always returns or raises

    def _rebuild(self, sig: str) -> None:
        """Stream the file into a fresh database, then settle the clock-free blocked state.

        Rows go to SQLite as they are read, so memory holds only the compact
        readiness nodes, never the records or their text.  The last line for
        an id wins; a tombstone as that last line removes the id from the graph.
        """
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        import tempfile  # only a rebuild needs it; reads start faster without

        fd, tmp = tempfile.mkstemp(prefix=self.db_path.name + ".", suffix=".tmp", dir=self.db_path.parent)
        os.close(fd)
        conn = None
        try:
            conn = sqlite3.connect(tmp)
            conn.execute("PRAGMA journal_mode=OFF")
            conn.execute("PRAGMA synchronous=OFF")
            self._fill(conn, sig)
            conn.close()
            os.replace(tmp, self.db_path)
        except BaseException:
            if conn is not None:
                conn.close()
            Path(tmp).unlink(missing_ok=True)
            raise

    def _fill(self, conn: sqlite3.Connection, sig: str) -> None:
        """Every table of the index, from one read of the source (on disk or in memory)."""
        self._warnings, self._suppressed = [], 0
        self._said = sig  # the read says its warnings as it meets them
        conn.executescript(_SCHEMA)
        nodes = self._insert_rows(conn)
        self._settle(conn, nodes)
        conn.execute(_READY_ORDER)
        self._list_blocked(conn)
        conn.execute(_UNDEFERRED_GROUPS)
        conn.executescript(_INDEXES)
        warnings = json.dumps(self._warnings_to_keep())
        conn.executemany(
            "INSERT INTO meta VALUES (?, ?)",
            [("signature", sig), ("schema", SCHEMA_VERSION), ("warnings", warnings), ("facts", sig)],
        )
        conn.commit()

    def _insert_rows(self, conn: sqlite3.Connection) -> dict[str, Node]:
        insert = "INSERT OR REPLACE INTO items VALUES (" + ",".join("?" * _COLUMNS) + ")"
        nodes: dict[str, Node] = {}
        batch: list[tuple] = []
        lines: list[tuple[int, int, str]] = []  # each record line's checksum: what a patch compares
        for line, (record, raw) in enumerate(self._load(), start=1):
            lines.append((line, zlib.crc32(raw.encode("utf-8")), record["id"]))
            node = to_node(record)
            live = record.get("status") != "tombstone"
            if live:
                nodes[node.id] = node
            else:
                nodes.pop(node.id, None)  # beads drops tombstones on import (L2)
            candidate = int(live and readiness.is_ready_candidate(node, False))
            # parent_defer_ts, blocked and blocked_by are settled below
            batch.append((node.id, line, *_facts(record, node), None, 0, candidate, "", raw))
            if len(batch) >= _BATCH:
                conn.executemany(insert, batch)
                batch.clear()
        conn.executemany(insert, batch)
        conn.executemany("INSERT INTO lines VALUES (?, ?, ?)", lines)
        return nodes

    @staticmethod
    def _settle(conn: sqlite3.Connection, nodes: dict[str, Node]) -> None:
        """Write blocked state, blocked_by (K2–K4) and parent deferral for the rows that have them."""
        blocked = readiness.blocked_state(nodes)
        causes = ((json.dumps(readiness.blocked_by(node, nodes), separators=(",", ":")), node.id)
                  for node in nodes.values() if blocked[node.id])
        conn.executemany("UPDATE items SET blocked = 1, candidate = 0, blocked_by = ? WHERE id = ?", causes)
        deferred = []
        outside = set()
        for node in nodes.values():
            parent_defer = None
            for dep_type, target, _gate in node.deps:
                local = readiness.local_target(node.id, target, nodes)
                if local is None:
                    if dep_type != "tracks" and not target.startswith("external:") and (
                        readiness.id_prefix(target) == readiness.id_prefix(node.id)
                    ):
                        outside.add(target)  # an ephemeral record with this id could block
                    continue
                if dep_type == "parent-child" and local.defer_ts is not None:
                    parent_defer = max(parent_defer or local.defer_ts, local.defer_ts)
            if parent_defer is not None:
                deferred.append((parent_defer, node.id))
        conn.executemany("UPDATE items SET parent_defer_ts = ? WHERE id = ?", deferred)
        conn.executemany("INSERT INTO outside VALUES (?)", [(t,) for t in outside])

    @staticmethod
    def _list_blocked(conn: sqlite3.Connection) -> None:
        """Store ``item blocked``'s rows, already in its order and already written out.

        Like ready candidates, blocked rows and what blocks them do not depend
        on the clock; a rig with 13,000 of them is then listed by one
        sequential read instead of a sort, a parse and a re-encoding per row.
        """
        rows = conn.execute(_BLOCKED_ROWS).fetchall()
        conn.executemany(
            "INSERT INTO blocked_order (priority, created_ts, id, line) VALUES (?, ?, ?, ?)",
            [(p, c, i, blocked_line(raw, json.loads(causes))) for p, c, i, raw, causes in rows],
        )

    # -- queries -------------------------------------------------------------
    def get_raw(self, item_id: str) -> str | None:
        row = self.conn().execute("SELECT raw FROM items WHERE id = ?", (item_id,)).fetchone()
        return row[0] if row else None

    def get_raw_many(self, ids: Iterable[str]) -> dict[str, str]:
        """``get_raw`` for many ids in a few queries (ids not in the index are absent)."""
        return dict(self._by_ids("SELECT id, raw FROM items WHERE id IN ({ids})", ids))

    def _by_ids(self, sql: str, ids: Iterable[str], before: tuple = (), after: tuple = ()) -> Iterator[tuple]:
        """The rows of ``sql`` for these ids, a few hundred per query (SQLite caps a query's parameters).

        ``{ids}`` in ``sql`` stands for the ids' placeholders; ``before`` and
        ``after`` are the parameters on either side of them.
        """
        ids = list(ids)
        for start in range(0, len(ids), _IDS_PER_QUERY):
            chunk = ids[start : start + _IDS_PER_QUERY]
            placeholders = ",".join("?" * len(chunk))
            yield from self.conn().execute(sql.format(ids=placeholders), [*before, *chunk, *after])

    def ids(self) -> set[str]:
        return {row[0] for row in self.conn().execute("SELECT id FROM items")}

    def ready_rows(self, now_ts: float, limit: int = 0) -> list[tuple]:
        """(priority, created_ts, id, raw) of ready rows in beads order."""
        sql = (
            "SELECT priority, created_ts, id, raw FROM ready_order"
            " WHERE (defer_ts IS NULL OR defer_ts <= ?) AND (parent_defer_ts IS NULL OR parent_defer_ts <= ?)"
            " ORDER BY seq"
        )
        params: list = [now_ts, now_ts]
        if limit > 0:
            sql += " LIMIT ?"
            params.append(min(limit, _SQL_INT_MAX))  # a larger limit than SQLite can hold means "all"
        return self.conn().execute(sql, params).fetchall()

    def ready_among(self, now_ts: float, ids: Iterable[str]) -> set[str]:
        """Which of ``ids`` are rows of :meth:`ready_rows` now (a few primary-key queries)."""
        # "+candidate": look the ids up by primary key, not by scanning items_rank's candidates
        sql = f"SELECT id FROM items WHERE id IN ({{ids}}) AND +{_READY}"
        return {row[0] for row in self._by_ids(sql, ids, after=(now_ts, now_ts))}

    def raw_and_ready(self, ids: Iterable[str], now_ts: float) -> dict[str, tuple[str, bool, int]]:
        """id → (``get_raw``, whether :meth:`ready_among` counts it, its effective tokens), for the
        ids in the index.

        A dispatch cycle wants all three for every queued item: one query per
        few hundred ids answers them together.
        """
        sql = f"SELECT id, raw, {_READY}, tokens FROM items WHERE id IN ({{ids}})"
        rows = self._by_ids(sql, ids, before=(now_ts, now_ts))
        return {rid: (raw, bool(ready), tokens) for rid, raw, ready, tokens in rows}

    def blocked_listing(self) -> list[tuple[int, float, str, str, list[str]]]:
        """(priority, created_ts, id, raw, blocked_by) of blocked rows with a cause to name (K2–K5).

        Both the blocked state and ``blocked_by`` depend only on statuses and
        edges, so they were settled when the index was built.
        """
        rows = self.conn().execute(_BLOCKED_ROWS)
        return [(p, c, i, raw, json.loads(causes)) for p, c, i, raw, causes in rows]

    def blocked_by(self, item_id: str) -> list[str] | None:
        """What blocks ``item_id``, as :meth:`blocked_listing` names it; None: not one of its rows."""
        sql = "SELECT blocked_by FROM items WHERE id = ? AND blocked = 1 AND blocked_by != '[]'"
        row = self.conn().execute(sql, (item_id,)).fetchone()
        return json.loads(row[0]) if row else None

    def blocked_lines(self) -> list[tuple[int, float, str, str]]:
        """(priority, created_ts, id, :func:`blocked_line`) of :meth:`blocked_listing`'s rows, same order."""
        sql = "SELECT priority, created_ts, id, line FROM blocked_order ORDER BY seq"
        return self.conn().execute(sql).fetchall()

    def rows(self, where: str = "", params: Iterable = ()) -> list[tuple[str, str]]:
        sql = "SELECT id, raw FROM items WHERE status != 'tombstone'"
        if where:
            sql += f" AND ({where})"
        return self.conn().execute(sql + " ORDER BY line", list(params)).fetchall()

    def rows_with_edge(self, dep_type: str, targets: Iterable[str]) -> list[tuple[str, str]]:
        """(id, raw) in file order of the live rows with a ``dep_type`` edge to one of ``targets``.

        One scan of the small ``deps`` column for any number of targets (an
        epic's children for every epic of a sling); only matching rows' JSON is read.
        """
        wanted = set(targets)
        if not wanted:
            return []
        scan = self.conn().execute(
            "SELECT id, deps FROM items WHERE status != 'tombstone' AND deps LIKE ? ORDER BY line",
            (f'%"{dep_type}"%',),
        )
        ids = [
            row_id for row_id, deps in scan
            if any(d[0] == dep_type and d[1] in wanted for d in json.loads(deps))
        ]
        raws = self.get_raw_many(ids)
        return [(row_id, raws[row_id]) for row_id in ids]

    def status_counts(self, issue_type: str) -> dict[str, int]:
        """How many live rows of one type are in each status (e.g. a rig's merge queue)."""
        sql = (
            "SELECT status, count(*) FROM items"
            " WHERE issue_type = ? AND status != 'tombstone' GROUP BY status"
        )
        name = f"status_counts:{issue_type}"
        if self._conn is None:  # a one-shot command: the counts kept beside the index, if for this source
            kept = (self._kept_answers() or {}).get(name)
            if isinstance(kept, dict) and all(isinstance(n, int) for n in kept.values()):
                return dict(kept)
        conn = self.conn()
        key = ("status_counts", issue_type)
        if key not in self._kept:
            self._kept[key] = dict(conn.execute(sql, (issue_type,)))
            self._keep_answer(name, self._kept[key])
        return dict(self._kept[key])

    # -- scoring queries: whole ready sets without reading their JSON ------------
    # Within one rig a ready row's score depends only on (priority, tokens) and
    # its graph, so the advisor ranks groups and reads rows only from the best.
    # items_rank covers every column these touch.

    def ready_count(self, now_ts: float) -> int:
        return sum(n for _priority, _tokens, n in self.ready_groups(now_ts))

    def ready_groups(self, now_ts: float) -> list[tuple[int, int, int]]:
        """(priority, tokens, count) of the ready rows.

        Rows only become ready as the clock passes their deferral, so the
        answer holds from ``now_ts`` until the next deferral among the
        candidates ends; it is kept for that long (the count is the slowest
        query of ``schedule next`` on a large rig).  That next deferral is
        looked up only when the answer is asked for again, so a one-shot
        command never pays for it.
        """
        if self._conn is None:  # a one-shot command: the counts kept beside the index, when they still hold
            groups = self._kept_groups(now_ts)
            if groups is not None:
                return groups
        conn = self.conn()
        kept = self._kept.get("ready_groups")
        if kept is not None:
            since, until, groups = kept
            if until is None and now_ts > since:
                until = self.next_release(since)
                self._kept["ready_groups"] = (since, until, groups)
            if since <= now_ts and (now_ts == since or now_ts < until):
                return list(groups)
        # The kept counts of undeferred candidates plus the deferred ones ready now (a partial index),
        # so no command counts every candidate of a large rig again (docs/performance.md).
        sql = (
            "SELECT priority, tokens, sum(n) FROM (SELECT priority, tokens, n FROM undeferred_groups"
            f" UNION ALL SELECT priority, tokens, count(*) FROM items WHERE {_DEFERRED} AND {_READY}"
            " GROUP BY priority, tokens) GROUP BY priority, tokens"
        )
        groups = conn.execute(sql, (now_ts, now_ts)).fetchall()
        self._kept["ready_groups"] = (now_ts, None, groups)
        until = self.next_release(now_ts)
        self._keep_answer("ready_groups", {"since": now_ts, "until": None if until == math.inf else until,
                                           "groups": groups})
        return list(groups)

    # Answers kept beside the index (``<index>.answers.json``): a ``schedule next`` over 30 rigs
    # opened 30 indexes (0.7 ms each: the connection, its schema, the meta check, the query) for a
    # few numbers per rig, its ready counts and its merge queue.  They are keyed, as the index is,
    # by the source's signature, and each says how long it holds; a reader that finds none, or one
    # for another file, asks the index and keeps the answer for the next command.

    @property
    def _answers_path(self) -> Path:
        return self.db_path.with_suffix(".answers.json")

    def _kept_answers(self) -> dict | None:
        """The answers kept for the source as it is now (its warnings said, as an open would say them)."""
        want = signature(self.source)
        if self._answers is not None and self._answers[0] == want:
            return self._answers[1]  # the same file: the same answers (more may have been kept since)
        try:
            kept = json.loads(self._answers_path.read_bytes())
            if kept["version"] != ANSWERS_VERSION or kept["schema"] != SCHEMA_VERSION:
                return None
            said, answers = [str(message) for message in kept["warnings"]], dict(kept["answers"])
        except (OSError, ValueError, KeyError, TypeError):  # none, cut short or not ours: ask the index
            return None
        if kept["signature"] != want:
            return None
        self._say_once(want, said)
        self._answers = (want, answers)
        return answers

    def _keep_answer(self, key: str, value: Any) -> None:
        from sluice.store.files.fsutil import write_cache

        if self._conn is None or self._conn_signature is None:  # not known to match its source
            return
        self._answers = None  # read the file again: another command may have kept more since
        answers = self._kept_answers() or {}
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'warnings'").fetchone()
        body = {"version": ANSWERS_VERSION, "schema": SCHEMA_VERSION, "signature": self._conn_signature,
                "warnings": json.loads(row[0]) if row and row[0] else [], "answers": {**answers, key: value}}
        write_cache(self._answers_path, json.dumps(body).encode("utf-8"))

    def _kept_groups(self, now_ts: float) -> list[tuple[int, int, int]] | None:
        """The kept ready counts, while no deferral has ended since they were counted."""
        kept = (self._kept_answers() or {}).get("ready_groups")
        try:
            since, until = float(kept["since"]), kept["until"]
            until = math.inf if until is None else float(until)
            groups = [(int(p), int(t), int(n)) for p, t, n in kept["groups"]]
        except (ValueError, KeyError, TypeError):
            return None
        return groups if since <= now_ts < until else None

    def next_release(self, now_ts: float) -> float:
        """When the next deferred candidate becomes ready (infinity when none waits)."""
        sql = (
            "SELECT min(defer_ts), (SELECT min(parent_defer_ts) FROM items"
            " WHERE candidate = 1 AND parent_defer_ts > ?)"
            " FROM items WHERE candidate = 1 AND defer_ts > ?"
        )
        found = [ts for ts in self.conn().execute(sql, (now_ts, now_ts)).fetchone() if ts is not None]
        return min(found, default=math.inf)

    def ready_in_group(self, now_ts: float, priority: int, tokens: int, limit: int) -> list[tuple]:
        """(id, created_ts) of the first ``limit`` ready rows of one (priority, tokens) group.

        Oldest first, undated (created_ts 0) last, then by id.
        """
        sql = (
            f"SELECT id, created_ts FROM items WHERE {_READY} AND priority = ? AND tokens = ?"
            " ORDER BY created_ts = 0, created_ts, id LIMIT ?"
        )
        return self.conn().execute(sql, (now_ts, now_ts, priority, tokens, limit)).fetchall()

    def ready_facts(self, now_ts: float) -> list[tuple[str, str, int, float, int, str]]:
        """(id, issue_type, priority, created_ts, tokens, deps) of every ready row (deps: JSON or '')."""
        sql = f"SELECT id, issue_type, priority, created_ts, tokens, deps FROM items WHERE {_READY}"
        return self.conn().execute(sql, (now_ts, now_ts)).fetchall()

    def types_and_deps(self, ids: Iterable[str]) -> dict[str, tuple[str, str]]:
        """id → (issue_type, deps) for the given ids that exist (parent walks)."""
        rows = self._by_ids("SELECT id, issue_type, deps FROM items WHERE id IN ({ids})", ids)
        return {row_id: (issue_type, deps) for row_id, issue_type, deps in rows}

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._kept = {}


def _facts(record: dict, node: Node) -> tuple:
    """What the index derives from one record, for the columns :data:`_FACTS` names: a patch that
    leaves them all unchanged changes only the record's text."""
    touches = touches_of(record)
    return (node.status, node.issue_type, node.priority, node.created_ts, int(node.ephemeral),
            int(node.pinned), node.defer_ts, record.get("assignee") or "", json.dumps(labels_of(record)),
            effective_tokens(record), json.dumps(node.deps, separators=(",", ":")) if node.deps else "",
            json.dumps(touches) if touches else "", minutes_of(record))


def blocked_line(raw: str, causes: list[str]) -> str:
    """A durable row as ``item blocked --json`` lists it: its line with ``blocked_by_count`` and
    ``blocked_by`` added.

    The two keys are appended to the stored text, so the record is not parsed
    and written again; a line that names ``"blocked_by`` itself is (its own
    key must not be listed twice).
    """
    extra = f'"blocked_by_count":{len(causes)},"blocked_by":{json.dumps(causes, separators=(",", ":"))}'
    body = raw.rstrip()
    if '"blocked_by' not in raw and body.endswith("}"):
        inner = body[:-1].rstrip()
        return f"{inner},{extra}}}" if not inner.endswith("{") else f"{{{extra}}}"
    record = {**normalise(json.loads(raw)), "blocked_by_count": len(causes), "blocked_by": causes}
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


class _Connection(sqlite3.Connection):
    """A connection to one index whose refusals (disk I/O error, a locked or damaged file) name it."""

    path: Path

    def execute(self, *args):
        try:
            return super().execute(*args)
        except sqlite3.Error as err:
            raise StorageError(self.path, f"the index cannot be read: {err} (it is derived from"
                               " the items file: removing it loses nothing)") from None

    def executemany(self, *args):
        try:
            return super().executemany(*args)
        except sqlite3.Error as err:
            raise StorageError(self.path, f"the index cannot be written: {err}") from None


def _connect(path: Path) -> sqlite3.Connection:
    # A server keeps one index open across calls that its SDK runs on different worker
    # threads, one at a time (the caller serialises them).
    conn = sqlite3.connect(path, check_same_thread=False, factory=_Connection)
    conn.path = path
    return conn
