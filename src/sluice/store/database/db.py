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
  to the files after commit (:mod:`sluice.store.database.outbox`): a committed fact is
  never missed, and never written twice.

The SQL is kept portable (standard types, ``ON CONFLICT`` upserts, no
``rowid`` tricks), so the store could move to a server database; see
docs/architecture.md.
"""

from __future__ import annotations

import _thread  # threading.local's own implementation: hot read commands never import threading
import contextlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

from sluice.errors import ConfigError, StorageError

#: The schema this sluice writes.  A town whose database says more is refused, never guessed at.
SCHEMA_VERSION = 3
FILE_NAME = "town.db"
#: ``FULL``: the write-ahead log is fsynced at every commit, so what was acknowledged survives a power cut.
SYNCHRONOUS = "FULL"
BUSY_TIMEOUT_MS = 60_000  # a sling of 100,000 items holds the write lock for a second or two

#: What schema 2 added to schema 1 (the rows are filled by :meth:`Database._upgrade`).
UPGRADE_FROM_1 = (
    "ALTER TABLE issues ADD COLUMN target_rig TEXT",
    "ALTER TABLE issues ADD COLUMN enqueued_at TEXT",
    "ALTER TABLE issues ADD COLUMN plain INTEGER NOT NULL DEFAULT 0",
    "DROP INDEX issues_status",
    "CREATE INDEX issues_status ON issues (status, plain, rig)",
    *(f"ALTER TABLE issues ADD COLUMN {column}" for column in (
        "f_class INTEGER", "f_priority INTEGER", "f_tokens INTEGER", "f_labels TEXT", "f_touches TEXT",
        "f_kind TEXT", "f_minutes INTEGER", "defer_ts DOUBLE PRECISION", "facts_of TEXT")),
)


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
-- ``target_rig``, ``enqueued_at`` (text order is time order) and ``plain`` are read off the
-- description by the writer of every row (:meth:`SlingContextFields.queue_facts`); ``f_*``,
-- ``defer_ts`` and ``facts_of`` are its item's facts, filled by the reads: the queue's columns
-- (:mod:`sluice.store.database.queue`).
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
    extra        TEXT,
    target_rig   TEXT,
    enqueued_at  TEXT,
    plain        INTEGER NOT NULL DEFAULT 0,
    f_class      INTEGER,
    f_priority   INTEGER,
    f_tokens     INTEGER,
    f_labels     TEXT,
    f_touches    TEXT,
    f_kind       TEXT,
    f_minutes    INTEGER,
    defer_ts     DOUBLE PRECISION,
    facts_of     TEXT
);
CREATE INDEX issues_status ON issues (status, plain, rig);
CREATE INDEX issues_work ON issues (work_item);
CREATE INDEX issues_facts ON issues (target_rig, f_class, f_priority, f_tokens, f_labels, f_touches, f_kind,
    f_minutes, enqueued_at, open_item, defer_ts) WHERE plain = 1;
CREATE INDEX issues_facts_of ON issues (facts_of, open_item) WHERE plain = 1;

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

-- Decisions per rig (fairness), advanced in the transaction that records a decision.
CREATE TABLE decision_counts (
    rig TEXT PRIMARY KEY,
    n   INTEGER NOT NULL
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

-- scheduler and admission state
-- The scheduler's own state (sluice.store.database.state): one row, absent until the first change (the zero
-- state: not paused, never dispatched).  Each writer sets only its own columns, inside the transaction
-- that read them, so a pause issued during a cycle survives the cycle's record of its dispatches.
CREATE TABLE scheduler_state (
    id                  INTEGER PRIMARY KEY CHECK (id = 1),
    paused              INTEGER NOT NULL DEFAULT 0,
    paused_by           TEXT,
    paused_at           TEXT,
    last_dispatch_at    TEXT,
    last_dispatch_count INTEGER NOT NULL DEFAULT 0,
    extra               TEXT
);
-- The daemon's heartbeat: one row, rewritten at its start, after every tick and at its stop.
CREATE TABLE heartbeat (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    pid           INTEGER NOT NULL,
    started_at    TEXT,
    tick_interval DOUBLE PRECISION,
    ticks         INTEGER NOT NULL DEFAULT 0,
    last_tick_at  TEXT,
    last_result   TEXT,
    stopped_at    TEXT
);
-- Token budget charges (sluice.store.database.admission_state): one row per launch charged, its estimate or
-- the usage its polecat reported.  A charge counts while now is in (at_ts - window, at_ts + window]:
-- the windows' sums read the index on at_ts alone (it covers rig and tokens), and the charges a
-- window old are deleted by the transaction of the next charge.
CREATE TABLE budget_charges (
    seq        INTEGER PRIMARY KEY,
    charge     TEXT NOT NULL UNIQUE,
    at_ts      DOUBLE PRECISION NOT NULL,
    rig        TEXT NOT NULL,
    item_id    TEXT NOT NULL,
    context_id TEXT NOT NULL,
    polecat_id TEXT NOT NULL,
    tokens     INTEGER NOT NULL,
    reported   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX budget_charges_at ON budget_charges (at_ts, rig, tokens);
CREATE INDEX budget_charges_polecat ON budget_charges (polecat_id);
CREATE INDEX budget_charges_item ON budget_charges (item_id);
-- Whether the budget held work at the last cycle: BudgetExhausted is logged once per spell.
CREATE TABLE budget_spell (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    exhausted INTEGER NOT NULL
);
-- Throttles: at most one per scope, the rig's name or '' for the whole town.  Ended ones are deleted
-- by the next throttle's transaction and ignored by every read.  at_ts is when it was set (NULL only
-- when a 0.1 file did not say).
CREATE TABLE throttles (
    scope    TEXT PRIMARY KEY,
    until_ts DOUBLE PRECISION NOT NULL,
    at_ts    DOUBLE PRECISION,
    reason   TEXT NOT NULL,
    set_by   TEXT NOT NULL
);
-- The circuit breaker: one row per broken item; next_attempt_ts NULL means never on its own.
CREATE TABLE breaker (
    item_id         TEXT PRIMARY KEY,
    rig             TEXT NOT NULL,
    failures        INTEGER NOT NULL,
    run_failures    INTEGER NOT NULL,
    broken_by       TEXT NOT NULL,
    last_error      TEXT NOT NULL,
    broken_at       TEXT NOT NULL,
    trips           INTEGER NOT NULL,
    cooldown        DOUBLE PRECISION NOT NULL,
    next_attempt_ts DOUBLE PRECISION,
    half_open       INTEGER NOT NULL DEFAULT 0,
    sling           TEXT NOT NULL
);
CREATE INDEX breaker_due ON breaker (next_attempt_ts);
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

#: Schema 3: the queue's indexes hold the plain open contexts alone (a close only deletes from them, and
#: they grow with the queue, not with its history), and the unread index of close times is gone.  The
#: queue's indexes are then made as :data:`SCHEMA` has them.
UPGRADE_FROM_2 = (
    "DROP INDEX IF EXISTS issues_closed",
    "DROP INDEX IF EXISTS issues_facts",
    "DROP INDEX IF EXISTS issues_facts_of",
)


def database_path(sluice_dir: Path) -> Path:
    return sluice_dir / FILE_NAME


_shared: dict[Path, Database] = {}


def shared(path: Path, on_create: Callable[[sqlite3.Connection], None] | None = None) -> Database:
    """The one :class:`Database` of this process for ``path``.

    Every ``Town`` over one town shares it, so every change a thread makes goes
    through that thread's one connection: an inner change joins the outer
    transaction instead of waiting, on a second connection, for the lock the
    first one holds.
    """
    found = _shared.get(path)
    if found is None:
        found = _shared[path] = Database(path, on_create)
    return found


class Database:
    """One town's database, opened lazily, one connection per thread.

    A thread's connection is made on its first use; the schema is created (or
    checked) by the first connection of the process.  ``on_create`` runs
    inside the transaction that creates the schema (the migration of an older
    town's files, :mod:`sluice.store.database.migrate`).
    """

    def __init__(self, path: Path, on_create: Callable[[sqlite3.Connection], None] | None = None):
        self.path = Path(path)
        self._threads = _thread._local()
        self._checked = False
        self.on_create = on_create

    # -- connections -----------------------------------------------------------
    @property
    def _local(self) -> _ThreadState:
        """This thread's connection and transaction depth (the web view serves from threads)."""
        state = getattr(self._threads, "state", None)
        if state is None:
            state = self._threads.state = _ThreadState()
        return state

    @property
    def conn(self) -> sqlite3.Connection:
        local = self._local
        if local.conn is None:
            local.conn = self._connect()
        return local.conn

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # As a URI, so a read may attach another database read-only (``file:…?mode=ro``).
            conn = sqlite3.connect(self.path.absolute().as_uri(), uri=True, isolation_level=None,
                                   check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
        except (OSError, sqlite3.Error) as err:
            raise self._storage_error(err, "open") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")
            conn.execute("PRAGMA foreign_keys = ON")
            if not self._checked:
                self._ensure_schema(conn)
        except sqlite3.OperationalError as err:
            conn.close()
            conn = self._read_only(err)
        except sqlite3.DatabaseError as err:
            conn.close()
            raise self._storage_error(err, "open") from None
        self._checked = True
        return conn

    def _read_only(self, err: sqlite3.OperationalError) -> sqlite3.Connection:
        """A connection that can only read, for a disk that refuses the database's shared-memory file
        (full, or read-only): reads answer from the write-ahead log kept in memory, and a write is a
        :class:`~sluice.errors.StorageError` naming the file, as on any refusal."""
        if not self.path.exists():
            raise self._storage_error(err, "open")
        try:
            conn = sqlite3.connect(f"{self.path.as_uri()}?mode=ro", uri=True, isolation_level=None,
                                   check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            version = _schema_version(conn)
        except sqlite3.Error:
            raise self._storage_error(err, "open") from None
        if version != SCHEMA_VERSION:
            conn.close()
            raise self._storage_error(err, "open")
        return conn

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        version = _schema_version(conn)
        if version == SCHEMA_VERSION:
            return
        if version is not None and version > SCHEMA_VERSION:
            raise ConfigError(
                f"{self.path}: this town's database has schema version {version}, made by a newer sluice;"
                f" this sluice knows version {SCHEMA_VERSION} at most (upgrade sluice to open it)")
        if version not in (None, 1, 2):
            raise ConfigError(f"{self.path}: unknown schema version {version}")
        with _immediate(conn):
            if _schema_version(conn) != version:  # another process made or upgraded it while we waited
                return
            if version is not None:
                self._upgrade(conn, version)
                return
            for statement in _statements(SCHEMA):
                conn.execute(statement)
            conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            if self.on_create is not None:
                self.on_create(conn)

    @staticmethod
    def _upgrade(conn: sqlite3.Connection, version: int) -> None:
        """An older schema to this one: schema 1's open contexts get their queue columns from their
        descriptions, and every older schema gets the queue's indexes as :data:`SCHEMA` has them."""
        from sluice.core.records import SlingContextFields

        if version == 1:
            for statement in UPGRADE_FROM_1:
                conn.execute(statement)
            rows = conn.execute("SELECT id, description FROM issues WHERE open_item IS NOT NULL").fetchall()
            fields = [(SlingContextFields.from_description(text), issue_id) for issue_id, text in rows]
            conn.executemany("UPDATE issues SET target_rig = ?, enqueued_at = ?, plain = ? WHERE id = ?",
                             [(*f.queue_facts(), issue_id) for f, issue_id in fields if f is not None])
        for statement in UPGRADE_FROM_2:
            conn.execute(statement)
        for statement in _statements(SCHEMA):
            if statement.startswith("CREATE INDEX issues_facts"):
                conn.execute(statement)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))

    def close(self) -> None:
        local = self._local
        if local.conn is not None:
            local.conn.close()
            local.conn = None

    # -- transactions ------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``); an inner one joins the outer one.

        Commits when the outermost block ends without an exception, rolls back
        otherwise; callbacks given to :meth:`after_commit` run after a commit.
        A write the database refuses (full, read-only, damaged) rolls the whole
        transaction back and is a :class:`~sluice.errors.StorageError` naming the
        file and saying nothing was changed: no caller can take a refused write
        for an empty answer.
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
        except BaseException as err:
            local.depth = 0
            local.after = []
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if _refused(err):  # the store refused a write inside: its error, and nothing kept
                raise self._storage_error(err, "write") from None
            if isinstance(err, UnicodeEncodeError):  # text no encoding holds got past its reader
                raise StorageError(self.path, "cannot write text no encoding can hold (a lone surrogate);"
                                              " nothing was changed") from None
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

    @contextlib.contextmanager
    def change(self, *versions: str) -> Iterator[sqlite3.Connection]:
        """A :meth:`transaction` that advances ``versions`` when its block ends."""
        with self.transaction() as conn:
            yield conn
            self.advance(*versions)

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the current transaction commits (at once outside of one)."""
        conn = self.conn  # noqa: F841  (makes the thread's state)
        if self._local.depth:
            if callback not in self._local.after:
                self._local.after.append(callback)
        else:
            callback()

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

    def keep(self, name: str, value: str, *inputs: str) -> None:
        """Keep ``value`` as the derived result ``name``, under the versions ``inputs`` stand at now."""
        with self.transaction() as conn:
            kept_under = json.dumps(self.versions(*inputs), sort_keys=True) if inputs else "{}"
            conn.execute("INSERT INTO derived (name, inputs, value) VALUES (?, ?, ?)"
                         " ON CONFLICT (name) DO UPDATE SET inputs = excluded.inputs, value = excluded.value",
                         (name, kept_under, value))

    @contextlib.contextmanager
    def without_waiting(self) -> Iterator[None]:
        """Writes of derived results in this block neither wait for another writer nor fsync: one
        lost costs its reader the work again (:meth:`keep_if_free`, the queue's item facts)."""
        conn = self.conn
        conn.execute("PRAGMA busy_timeout = 0")
        conn.execute("PRAGMA synchronous = NORMAL")
        try:
            yield
        finally:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")

    def keep_if_free(self, name: str, value: str) -> bool:
        """:meth:`keep` a result that is cheap to work out again (a validated copy of a file, a
        repository's warmth): never inside a caller's change, never waiting for another writer, never
        fsynced, so a read command that keeps one is not slowed; False when it was not kept (busy,
        read-only, full, damaged — the next read works it out again)."""
        try:
            if self.kept(name) == value:
                return True
            conn = self.conn
            if conn.in_transaction:
                return False  # not inside a caller's change: the next read outside one keeps it
            with self.without_waiting():
                self.keep(name, value)
        except (StorageError, ConfigError, sqlite3.Error):
            return False
        return True

    def kept(self, name: str, *inputs: str) -> str | None:
        """The derived result ``name``; with ``inputs``, only while every one of those versions is as it
        was when it was kept (None otherwise, or when none was kept)."""
        row = self.one("SELECT inputs, value FROM derived WHERE name = ?", (name,))
        if row is None:
            return None
        if inputs and json.loads(row[0]) != self.versions(*inputs):
            return None
        return row[1]

    def versions(self, *names: str) -> dict[str, int]:
        marks = ",".join("?" * len(names))
        found = dict(self.query(f"SELECT name, value FROM versions WHERE name IN ({marks})", names))
        return {name: found.get(name, 0) for name in names}

    # -- errors ------------------------------------------------------------------
    def _storage_error(self, err: Exception, doing: str) -> Exception:
        if isinstance(err, (StorageError, ConfigError)):
            return err
        text = str(err)
        damaged = "malformed" in text or "not a database" in text
        if damaged and not isinstance(err, sqlite3.OperationalError):
            return ConfigError(f"{self.path}: the town database is damaged ({text});"
                                   " restore it from a backup or `sluice export` output")
        if isinstance(err, OSError):
            return StorageError(self.path, f"cannot {doing} it: {err.strerror or err}", err.errno)
        kept = "; nothing was changed" if doing == "write" else ""
        if getattr(err, "sqlite_errorname", "") == "SQLITE_FULL":
            return StorageError(self.path, f"cannot {doing} it: No space left on device ({text}){kept}", 28)
        return StorageError(self.path, f"cannot {doing} it: {text}{kept}")


class _ThreadState:
    __slots__ = ("after", "conn", "depth")

    def __init__(self) -> None:
        self.conn: sqlite3.Connection | None = None
        self.depth = 0
        self.after: list[Callable[[], None]] = []


def _refused(err: BaseException) -> bool:
    """Whether ``err`` is the database refusing a write (full, read-only, I/O, damaged), not a broken
    rule of the schema (a constraint) or of its use, which callers handle or which is a bug."""
    return isinstance(err, sqlite3.OperationalError) or type(err) is sqlite3.DatabaseError


def _schema_version(conn: sqlite3.Connection) -> int | None:
    row = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
    if row is None:
        return None
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row is not None else None


@contextlib.contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` on a connection of its own, committed when the block ends, else rolled back."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        with contextlib.suppress(sqlite3.Error):  # a failed write may have rolled it back already
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _statements(script: str) -> Iterator[str]:
    """The statements of ``script``, comments dropped (``executescript`` would commit the transaction)."""
    lines = [line for line in script.splitlines() if not line.lstrip().startswith("--")]
    for statement in "\n".join(lines).split(";"):
        if statement.strip():
            yield statement.strip()
