"""The town database: sluice's own state in one SQLite file, one transaction per change.

Everything sluice keeps for itself lives here — the rigs' ephemeral issue
records (sling contexts), run records, admission state, scheduler state, the
archive and every id ever drawn — so a change is one transaction and every
index is kept by the writer that changes it, inside that transaction.  No
derived file continues from a byte mark of a log; a query answers instead.

* WAL with ``synchronous=FULL``: a commit that returned survives a power cut,
  and readers never wait for a writer.
* A write transaction starts ``BEGIN IMMEDIATE``: writers queue for the one
  write lock (``busy_timeout``) instead of failing half-way at their first
  write, so a check and the write it guards see one state.
* Transactions nest: an inner :meth:`Database.transaction` joins the outer
  one, so callers compose changes ("the launch intent with its budget
  charge") into one commit without knowing of each other.
* The JSON-lines logs (``decisions.jsonl``, ``scheduler.jsonl``) are fed from
  an outbox written in the same transaction as the fact it tells, and flushed
  to the files after commit (:mod:`sluice.store.outbox`): a committed fact is
  never missed, and never written twice.

The SQL is kept portable (standard types, ``ON CONFLICT`` upserts, no
``rowid`` tricks), so the store could move to a server database; see
docs/architecture.md.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from _thread import _local as thread_local  # threading.local itself, without importing threading
from collections.abc import Callable, Iterator
from pathlib import Path

from sluice.errors import ConfigError, StorageError

#: The schema this sluice writes.  A town whose database says more is refused, never guessed at.
SCHEMA_VERSION = 1
FILE_NAME = "town.db"
BUSY_TIMEOUT_MS = 60_000  # a sling of 100,000 items holds the write lock for a second or two

#: Every table, in the order they are created.  One place, so the whole store is read at a glance.
SCHEMA = """
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- The rigs' ephemeral issue records, in beads' shape: sling contexts.  A record belongs to the
-- issue store of ``rig``; ``seq`` is the order records were made in (the queue's order of arrival).
-- ``open_item`` is the tracked work item while the record is open and NULL once it is closed: its
-- UNIQUE constraint is "at most one open context per item", held by the database itself.
CREATE TABLE issues (
    seq          INTEGER PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,
    rig          TEXT NOT NULL,
    title        TEXT NOT NULL,
    description  TEXT NOT NULL,
    status       TEXT NOT NULL,
    priority     INTEGER NOT NULL,
    issue_type   TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    closed_at    TEXT,
    close_reason TEXT,
    work_item    TEXT,
    open_item    TEXT UNIQUE,
    extra        TEXT
);
CREATE INDEX issues_open ON issues (rig, status);
CREATE INDEX issues_work ON issues (work_item);
CREATE INDEX issues_closed ON issues (closed_at);

CREATE TABLE labels (
    issue_id TEXT NOT NULL REFERENCES issues (id) ON DELETE CASCADE,
    label    TEXT NOT NULL,
    PRIMARY KEY (issue_id, label)
);
CREATE INDEX labels_label ON labels (label, issue_id);

CREATE TABLE dependencies (
    issue_id      TEXT NOT NULL REFERENCES issues (id) ON DELETE CASCADE,
    depends_on_id TEXT NOT NULL,
    type          TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    PRIMARY KEY (issue_id, depends_on_id)
);
CREATE INDEX dependencies_target ON dependencies (depends_on_id, type);

-- Every id ever drawn for a record, archived or not: an id names one record for good.
CREATE TABLE drawn_ids (
    id TEXT PRIMARY KEY
);

-- Lines for the JSON-lines logs, written with the fact they tell and flushed after commit.
CREATE TABLE outbox (
    seq  INTEGER PRIMARY KEY,
    log  TEXT NOT NULL,
    line TEXT NOT NULL
);
-- How far each log file holds the outbox: its last flushed seq and the file's length after it.
CREATE TABLE outbox_flushed (
    log    TEXT PRIMARY KEY,
    seq    INTEGER NOT NULL,
    length INTEGER NOT NULL
);

-- Numbers every writer of a kind of fact advances in its own transaction ("queue", "runs", ...):
-- what is computed from the database is kept under the versions it read (see ``derived``).
CREATE TABLE versions (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
-- Results that are O(queue) by nature (a forecast's replay), kept under the versions they were
-- computed at; a reader takes one only while every version it names is unchanged.
CREATE TABLE derived (
    name     TEXT PRIMARY KEY,
    inputs   TEXT NOT NULL,
    value    TEXT NOT NULL
);

-- run records
-- One row per launch, ``seq`` its launch order.  The columns are what readers filter and sort on;
-- ``extra`` (a JSON object) holds every other field of the record.  ``started_ts``/``ended_ts`` are
-- the record's times in epoch seconds (``started_ts`` 0 when the record has none).
CREATE TABLE runs (
    seq              INTEGER PRIMARY KEY,
    run_id           TEXT NOT NULL UNIQUE,
    polecat_id       TEXT,
    item_id          TEXT,
    rig              TEXT,
    context_id       TEXT,
    issue_type       TEXT,
    outcome          TEXT,
    started_at       TEXT,
    ended_at         TEXT,
    runtime_seconds  DOUBLE PRECISION,
    tokens_estimated INTEGER,
    tokens_used      INTEGER,
    extra            TEXT NOT NULL,
    started_ts       DOUBLE PRECISION NOT NULL,
    ended_ts         DOUBLE PRECISION
);
CREATE INDEX runs_outcome ON runs (outcome);
CREATE INDEX runs_started ON runs (started_ts);
CREATE INDEX runs_ended ON runs (ended_ts);
CREATE INDEX runs_item ON runs (item_id, started_ts);
CREATE INDEX runs_polecat ON runs (polecat_id, started_ts);
-- Each ended run that is a forecast sample, under every kind it counts for (town, rig, rig+type,
-- rig+type+label): a kind's last N runs are the first N rows of its index entries, newest first.
CREATE TABLE run_kinds (
    kind TEXT NOT NULL,
    seq  INTEGER NOT NULL REFERENCES runs (seq) ON DELETE CASCADE,
    PRIMARY KEY (kind, seq)
);
CREATE INDEX run_kinds_seq ON run_kinds (seq);
-- Runs that ended before the retention, moved here whole by compaction (the columns of ``runs``;
-- ``seq`` their launch order, which a later run may take again in ``runs``).
CREATE TABLE archived_runs (
    run_id           TEXT PRIMARY KEY,
    seq              INTEGER NOT NULL,
    polecat_id       TEXT,
    item_id          TEXT,
    rig              TEXT,
    context_id       TEXT,
    issue_type       TEXT,
    outcome          TEXT,
    started_at       TEXT,
    ended_at         TEXT,
    runtime_seconds  DOUBLE PRECISION,
    tokens_estimated INTEGER,
    tokens_used      INTEGER,
    extra            TEXT NOT NULL,
    started_ts       DOUBLE PRECISION NOT NULL,
    ended_ts         DOUBLE PRECISION,
    archived_at      TEXT NOT NULL
);
"""


def database_path(sluice_dir: Path) -> Path:
    return sluice_dir / FILE_NAME


class Database:
    """One town's database, opened lazily, one connection per thread.

    A thread's connection is made on its first use; the schema is created (or
    checked) by the first connection of the process.  ``on_open`` runs once,
    inside the first write transaction of a new database (the migration of an
    older town's files).
    """

    def __init__(self, path: Path, on_create: Callable[[sqlite3.Connection], None] | None = None):
        self.path = Path(path)
        self._local = thread_local()
        self._checked = False
        self._on_create = on_create
        self._after_commit: list[Callable[[], None]] = []

    # -- connections -----------------------------------------------------------
    @property
    def conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            self._local.depth = 0
            self._local.after = []
        return conn

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                   timeout=BUSY_TIMEOUT_MS / 1000)
        except (OSError, sqlite3.Error) as err:
            raise self._storage_error(err, "open") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            if not self._checked:
                self._ensure_schema(conn)
                self._checked = True
        except sqlite3.DatabaseError as err:
            conn.close()
            raise self._storage_error(err, "open") from None
        return conn

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        version = _schema_version(conn)
        if version == SCHEMA_VERSION:
            return
        if version is not None and version > SCHEMA_VERSION:
            raise ConfigError(
                f"{self.path}: this town's database has schema version {version}, made by a newer sluice;"
                f" this sluice knows version {SCHEMA_VERSION} at most (upgrade sluice to open it)")
        if version is not None:  # an older schema: no older one exists yet, so nothing to upgrade from
            raise ConfigError(f"{self.path}: unknown schema version {version}")
        conn.execute("BEGIN IMMEDIATE")
        try:
            if _schema_version(conn) is None:  # another process may have made it while we waited
                for statement in _statements(SCHEMA):
                    conn.execute(statement)
                conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?)",
                             (str(SCHEMA_VERSION),))
                if self._on_create is not None:
                    self._on_create(conn)
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):  # a failed write may have rolled it back already
                conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- transactions ------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``); an inner one joins the outer one.

        Commits when the outermost block ends without an exception, rolls back
        otherwise; callbacks given to :meth:`after_commit` run after a commit.
        """
        conn = self.conn
        local = self._local
        if local.depth:
            local.depth += 1
            try:
                yield conn
            finally:
                local.depth -= 1
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as err:
            raise self._storage_error(err, "write") from None
        local.depth = 1
        local.after = []
        try:
            yield conn
        except BaseException:
            local.depth = 0
            local.after = []
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        local.depth = 0
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as err:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            local.after = []
            raise self._storage_error(err, "write") from None
        after, local.after = local.after, []
        for callback in after:
            callback()

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the current transaction commits (at once outside of one)."""
        conn = self.conn  # noqa: F841  (makes the thread's state)
        if self._local.depth:
            if callback not in self._local.after:
                self._local.after.append(callback)
        else:
            callback()

    @property
    def in_transaction(self) -> bool:
        return bool(getattr(self._local, "depth", 0))

    # -- reading -----------------------------------------------------------------
    def query(self, sql: str, params: tuple | list | dict = ()) -> list[tuple]:
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.Error as err:
            raise self._storage_error(err, "read") from None

    def one(self, sql: str, params: tuple | list | dict = ()) -> tuple | None:
        try:
            return self.conn.execute(sql, params).fetchone()
        except sqlite3.Error as err:
            raise self._storage_error(err, "read") from None

    # -- versions ------------------------------------------------------------------
    def advance(self, *names: str) -> None:
        """Advance each named version; call inside the transaction that changed what it counts."""
        conn = self.conn
        for name in names:
            conn.execute("INSERT INTO versions (name, value) VALUES (?, 1)"
                         " ON CONFLICT (name) DO UPDATE SET value = versions.value + 1", (name,))

    def versions(self, *names: str) -> dict[str, int]:
        marks = ",".join("?" * len(names))
        found = dict(self.query(f"SELECT name, value FROM versions WHERE name IN ({marks})", names))
        return {name: found.get(name, 0) for name in names}

    # -- errors ------------------------------------------------------------------
    def _storage_error(self, err: Exception, doing: str) -> Exception:
        if isinstance(err, (StorageError, ConfigError)):
            return err
        text = str(err)
        if (isinstance(err, sqlite3.DatabaseError) and not isinstance(err, sqlite3.OperationalError)
                and ("malformed" in text or "not a database" in text)):
            return ConfigError(f"{self.path}: the town database is damaged ({text});"
                               " restore it from a backup or `sluice export` output")
        if isinstance(err, OSError):
            return StorageError(self.path, f"cannot {doing} it: {err.strerror or err}", err.errno)
        return StorageError(self.path, f"cannot {doing} it: {text}")


def _schema_version(conn: sqlite3.Connection) -> int | None:
    row = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
    if row is None:
        return None
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row is not None else None


def _statements(script: str) -> Iterator[str]:
    """The statements of ``script``, comments dropped (``executescript`` would commit the transaction)."""
    lines = [line for line in script.splitlines() if not line.lstrip().startswith("--")]
    for statement in "\n".join(lines).split(";"):
        if statement.strip():
            yield statement.strip()


def exists(sluice_dir: Path) -> bool:
    return os.path.exists(database_path(sluice_dir))
