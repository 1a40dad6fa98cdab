"""Run records: one row of the town database's ``runs`` table for every launch.

An executor's own files say how a process ended but are forgotten when it is
reaped; the run records are the scheduler's memory of every launch.  A launch
inserts its record with outcome ``running``; its end is one ``UPDATE`` that
only a still-running row takes (:func:`end`), so an end's follow-ups (its
event, a throttle, a retry) happen once however many commands look at once;
a usage report or a Ray placement changes fields of the row (:func:`update`).

What is queried has a column and an index; everything else a record holds
stays in ``extra``, so a record reads back whole whatever it carries.  The
``run_kinds`` rows of a run (the schema says what they are) are kept by its
writer in the same transaction, so a kind's last runs are one indexed query
(:func:`samples`).

Every write is one transaction (joining the caller's, when there is one) and
advances the ``runs`` version.  Retention: :func:`compact` moves runs that
ended longer ago than ``scheduler.compact_retention`` to ``archived_runs``,
in one transaction; running runs always stay.

:func:`migrate_from_files` brings in a 0.1.0 town's ``runs/runs.jsonl`` and
its gzip archive.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core.items import parse_ts
from sluice.core.recordclass import recordclass
from sluice.core.text import encodes, json_text
from sluice.errors import StoreCorrupt

if TYPE_CHECKING:
    import sqlite3

    from sluice.core.forecast import Sample
    from sluice.store.files.town import Town

RUNNING = "running"
OK = "ok"
FAILED = "failed"
THROTTLED = "throttled"
TIMED_OUT = "timed-out"
STOPPED = "stopped"
VANISHED = "vanished"
OUTCOMES = (RUNNING, OK, FAILED, THROTTLED, TIMED_OUT, STOPPED, VANISHED)
ENDED = OUTCOMES[1:]
#: Ends that count as a failed run (retries, ``run_failures``, notifications).
FAILURES = (FAILED, TIMED_OUT, VANISHED)

#: The fields every record has, in the order a record is read back in.
FIELDS = ("run_id", "polecat_id", "item_id", "rig", "context_id", "executor", "host", "started_at",
          "ended_at", "runtime_seconds", "exit_code", "outcome", "tokens_estimated", "tokens_used",
          "labels", "touches", "attempt", "issue_type", "reason")

VERSION = "runs"  # the version every write advances
SEP = "\x1f"  # between the parts of a kind in ``run_kinds``

# The record fields kept in columns, each with what a value must be to be kept there (any other
# value, a string where a number belongs, stays in ``extra``: nothing a record says is lost).
_TEXT = ("run_id", "polecat_id", "item_id", "rig", "context_id", "issue_type", "outcome", "started_at",
         "ended_at")
_NUMBER = ("runtime_seconds", "tokens_estimated", "tokens_used")
COLUMNS = _TEXT + _NUMBER
_COLUMN_SET = frozenset(COLUMNS)
_SELECT = ", ".join(COLUMNS) + ", extra"
_SET = (*COLUMNS[1:], "extra", "started_ts", "ended_ts")  # every column a write sets, after run_id
_INSERT = (f"INSERT INTO runs ({_SELECT}, started_ts, ended_ts)"
           f" VALUES ({', '.join('?' * (len(COLUMNS) + 3))})"
           " ON CONFLICT (run_id) DO UPDATE SET "
           + ", ".join(f"{c} = excluded.{c}" for c in _SET))
_UPDATE = "UPDATE runs SET " + ", ".join(f"{c} = ?" for c in _SET) + " WHERE run_id = ?"
_ENDED = "(outcome IS NULL OR outcome <> 'running')"


_NUMBERS = (int, float)


def _row(record: Mapping) -> tuple:
    """The columns of ``record``, its other fields as ``extra``, and its times as epoch seconds.

    A launched polecat's record is kept whatever its text holds: a column
    value no encoding can hold goes to ``extra`` with the rest, escaped
    (:func:`~sluice.core.text.json_text`), and reads back as it was."""
    values, extra = [], {}
    for column in COLUMNS:
        value = record.get(column)
        kind = type(value)
        if value is None or (kind is str and encodes(value) if column in _TEXT
                             else kind in _NUMBERS and math.isfinite(value)
                             and (kind is int or column == "runtime_seconds")):
            values.append(value)
        else:
            values.append(None)
            extra[column] = value
    for key, value in record.items():
        if key not in _COLUMN_SET:
            extra[key] = value
    started, ended = parse_ts(record.get("started_at")), parse_ts(record.get("ended_at"))
    return (*values, json_text(extra), started or 0.0, ended)


def _record(row: tuple) -> dict:
    """A record read back: its fields in :data:`FIELDS` order, then whatever else it carries."""
    found = dict(zip(COLUMNS, row, strict=False))
    found.update(json.loads(row[len(COLUMNS)]))
    record = {f: found.pop(f) for f in FIELDS if f in found}
    record.update(found)
    return record


def _put(conn: sqlite3.Connection, records: Iterable[Mapping]) -> None:
    """Insert each record or replace its row's fields (a run keeps the place of its first launch), and
    its kinds; of two versions of one run, the later is the record."""
    latest = {record["run_id"]: record for record in records}
    conn.executemany(_INSERT, [_row(record) for record in latest.values()])
    _kinds(conn, latest.values())


def _kinds(conn: sqlite3.Connection, records: Iterable[Mapping]) -> None:
    """The ``run_kinds`` rows of these records, made again from what they are now."""
    ids, kinds = [], []
    for record in records:
        ids.append((record["run_id"],))
        kinds += [(kind, record["run_id"]) for kind in kinds_of(record)]
    conn.executemany("DELETE FROM run_kinds WHERE seq = (SELECT seq FROM runs WHERE run_id = ?)", ids)
    conn.executemany("INSERT INTO run_kinds (kind, seq) SELECT ?, seq FROM runs WHERE run_id = ?", kinds)


def _change(conn: sqlite3.Connection, record: Mapping, running: bool) -> bool:
    """Set every field of ``record``'s row by one ``UPDATE`` (only while the row runs, with ``running``);
    whether it took."""
    row = _row(record)
    sql = _UPDATE + (" AND outcome = ?" if running else "")
    done = conn.execute(sql, (*row[1:], record["run_id"], *((RUNNING,) if running else ())))
    if done.rowcount != 1:
        return False
    _kinds(conn, [record])
    return True


def kinds_of(record: Mapping) -> list[str]:
    """The kinds an ended run is a forecast sample of (none while it runs, or when its end says nothing
    about how long work takes)."""
    if record.get("outcome") in (RUNNING, None):
        return []
    from sluice.core.forecast import kind_keys, sample_of  # here: only a write of an end needs the model

    sample = sample_of(record)
    return [] if sample is None else [SEP.join(str(part) for part in key) for key in kind_keys(sample)]


# -- writing ---------------------------------------------------------------------------------------


def append(town: Town, records: Iterable[dict]) -> None:
    """Write whole run records (a launch's, or a new version of one): one transaction."""
    records = list(records)
    if not records:
        return
    with town.db.transaction() as conn:
        _put(conn, records)
        town.db.advance(VERSION)


def end(town: Town, ends: dict[str, dict]) -> list[dict]:
    """Set the end of each run in ``ends`` (run id → changed fields) that still runs: one transaction.

    Returns the records this call ended; a run another process ended first is
    left out, so whoever gets a record back owns its follow-ups.
    """
    if not ends or not made(town):
        return []
    out = []
    with town.db.transaction() as conn:
        for run_id, changes in ends.items():
            record = _changed(conn, run_id, changes)
            if record is not None and _change(conn, record, running=True):  # only a run still running
                out.append(record)
        if out:
            town.db.advance(VERSION)
    return out


def update(town: Town, run_id: str, changes: dict) -> dict | None:
    """Change fields of one run (``tokens_used``, ``host``); the record as it is now, None if unknown."""
    if not made(town):
        return None
    with town.db.transaction() as conn:
        record = _changed(conn, run_id, changes)
        if record is not None:
            _change(conn, record, running=False)
            town.db.advance(VERSION)
    return record


def _changed(conn: sqlite3.Connection, run_id: str, changes: dict) -> dict | None:
    """The record of ``run_id`` with ``changes``; None when there is none."""
    row = conn.execute(f"SELECT {_SELECT} FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    return {**_record(row), **changes} if row is not None else None


# -- reading ---------------------------------------------------------------------------------------


def made(town: Town) -> bool:
    """Whether the town database exists: a town whose database was never made has no runs, and a read
    does not make it (a dry run writes nothing; a full disk still answers)."""
    return town.db.path.exists()


def _select(town: Town, where: str = "", params: tuple = (), order: str = "seq",
            limit: int = 0) -> list[dict]:
    if not made(town):
        return []
    sql = f"SELECT {_SELECT} FROM runs" + (f" WHERE {where}" if where else "") + f" ORDER BY {order}"
    if limit:
        sql += f" LIMIT {int(limit)}"
    return [_record(row) for row in town.db.query(sql, params)]


def read_runs(town: Town) -> dict[str, dict]:
    """Every run not archived, by run id, in launch order."""
    return {r["run_id"]: r for r in _select(town)}


def running(town: Town) -> dict[str, dict]:
    """The runs still running, by run id, in launch order."""
    return {r["run_id"]: r for r in _select(town, "outcome = ?", (RUNNING,))}


def recent(town: Town, *, item: str | None = None, rig: str | None = None, outcome: str | None = None,
           since: float | None = None, limit: int = 0) -> list[dict]:
    """Runs newest first (by start), filtered; ``since`` an epoch: running, or started or ended since."""
    where, params = _equal(item_id=item, rig=rig, outcome=outcome)
    if since is not None:  # each part through its own index, not a walk of every run by start
        where.append("seq IN (SELECT seq FROM runs WHERE outcome = ?"
                     " UNION SELECT seq FROM runs WHERE ended_ts >= ?"
                     " UNION SELECT seq FROM runs WHERE ended_ts IS NULL AND started_ts >= ?)")
        params += [RUNNING, since, since]
    return _select(town, " AND ".join(where), tuple(params), "started_ts DESC, seq DESC", limit)


def latest(town: Town, *, item: str | None = None, polecat: str | None = None) -> dict | None:
    """The latest run (by start) of an item or a polecat (of either, given both), None if it has none."""
    where, params = _equal(item_id=item, polecat_id=polecat)
    found = _select(town, " OR ".join(where), tuple(params), "started_ts DESC, seq DESC", 1) if where else []
    return found[0] if found else None


def _equal(**values: str | None) -> tuple[list[str], list]:
    """A condition ``column = ?`` for each value given (not None), and the values."""
    given = {column: value for column, value in values.items() if value is not None}
    return [f"{column} = ?" for column in given], list(given.values())


def known_polecats(town: Town, polecat_ids: Iterable[str]) -> set[str]:
    """Which of these polecats have a run record."""
    ids = list(dict.fromkeys(polecat_ids)) if made(town) else []
    found: set[str] = set()
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        found.update(r[0] for r in town.db.query(
            f"SELECT polecat_id FROM runs WHERE polecat_id IN ({','.join('?' * len(chunk))})", chunk))
    return found


def totals(town: Town) -> dict[str, int]:
    """Ended runs not archived, by outcome."""
    if not made(town):
        return {}
    rows = town.db.query(f"SELECT outcome, COUNT(*) FROM runs WHERE {_ENDED} GROUP BY outcome")
    return {outcome: n for outcome, n in rows if outcome is not None}


def count(town: Town) -> int:
    """How many runs are kept (not archived)."""
    row = town.db.one("SELECT COUNT(*) FROM runs") if made(town) else None
    return int(row[0]) if row else 0


def archived(town: Town) -> Iterator[dict]:
    """The archived runs, in launch order."""
    if not made(town):
        return
    for row in town.db.query(f"SELECT {_SELECT} FROM archived_runs ORDER BY seq, run_id"):
        yield _record(row)


_models: dict[tuple, dict] = {}


def samples(town: Town, window: int) -> dict[tuple, list[Sample]]:
    """Each kind's last ``window`` ended runs that are samples, oldest first (launch order).

    A run takes its place by its launch, not by when it ended, so a long run
    that ends late enters its kind's window where it was launched.  One query
    per kind (found by stepping through the ``run_kinds`` index, not by
    reading it), kept in this process until a write advances the version.
    Only samples are listed in ``run_kinds`` (:func:`kinds_of`), so each row
    is made into one here without asking again.
    """
    from sluice.core.forecast import CENSORED, Sample

    if not made(town):
        return {}
    key = (str(town.db.path), window, town.db.versions(VERSION)[VERSION])
    kept = _models.get(key)
    if kept is not None:
        return kept
    kinds = [k for (k,) in town.db.query(
        "WITH RECURSIVE k (kind) AS (SELECT MIN(kind) FROM run_kinds UNION ALL"
        " SELECT (SELECT MIN(kind) FROM run_kinds WHERE kind > k.kind) FROM k WHERE k.kind IS NOT NULL)"
        " SELECT kind FROM k WHERE kind IS NOT NULL")]
    out: dict[tuple, list] = {}
    by_seq: dict[int, Sample] = {}  # a run in several kinds' windows is made once
    for kind in kinds:
        rows = town.db.query(
            "SELECT r.seq, r.rig, r.issue_type, r.outcome, r.runtime_seconds, r.tokens_used,"
            " r.tokens_estimated FROM run_kinds k JOIN runs r ON r.seq = k.seq WHERE k.kind = ?"
            f" ORDER BY k.seq DESC LIMIT {int(window)}", (kind,))
        runs = []
        for seq, rig, issue_type, outcome, runtime, used, estimated in reversed(rows):
            sample = by_seq.get(seq)
            if sample is None:
                tokens = used if used is not None else estimated  # the report, else the launch's estimate
                sample = by_seq[seq] = Sample(rig or "", issue_type or None, (), float(runtime),
                                            outcome == CENSORED,
                                            tokens if tokens is not None and tokens >= 0 else None)
            runs.append(sample)
        out[tuple(kind.split(SEP))] = runs
    _models.clear()
    _models[key] = out
    return out


# -- retention ------------------------------------------------------------------------------------


@recordclass
class CompactResult:
    """What a compaction did: runs kept before and after (``lines``, as a log's compaction says), archived."""

    lines_before: int
    lines_after: int
    archived: int

    def to_json(self) -> dict:
        return {"lines_before": self.lines_before, "lines_after": self.lines_after, "archived": self.archived}


def compact(town: Town, retention: float, now: float | None = None) -> CompactResult:
    """Move runs that ended before ``now - retention`` to ``archived_runs``: one transaction."""
    now = time.time() if now is None else now
    if not made(town):
        return CompactResult(0, 0, 0)
    with town.db.transaction() as conn:
        before = conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        moved = _archive(conn, f"{_ENDED} AND ended_ts < ?", (now - retention,), now)
        if moved:
            town.db.advance(VERSION)
    return CompactResult(before, before - moved, moved)


_MOVED = ("seq", *COLUMNS, "extra", "started_ts", "ended_ts")


def _archive(conn: sqlite3.Connection, where: str, params: tuple, now: float) -> int:
    """Move the runs ``where`` holds to ``archived_runs`` (their kinds go with them); how many."""
    from sluice.core.clock import iso_epoch

    moved = conn.execute(f"SELECT COUNT(*) FROM runs WHERE {where}", params).fetchone()[0]
    if moved:
        columns = ", ".join(_MOVED)
        conn.execute(f"INSERT INTO archived_runs ({columns}, archived_at) SELECT {columns}, ? FROM runs"
                     f" WHERE {where} ON CONFLICT (run_id) DO UPDATE SET "
                     + ", ".join(f"{c} = excluded.{c}" for c in (*_MOVED, "archived_at") if c != "run_id"),
                     (iso_epoch(now), *params))
        conn.execute(f"DELETE FROM runs WHERE {where}", params)
    return moved


# -- a town made by sluice 0.1.0 ------------------------------------------------------------------

OLD_LOG = Path("runs") / "runs.jsonl"
OLD_ARCHIVE = Path("runs") / "runs.archive.jsonl.gz"
#: What 0.1.0 derived from the log (a digest, the forecast's samples): nothing reads them any more.
OLD_DERIVED = (Path("runtime") / "runs-digest.json", Path("runtime") / "runs-samples.json")
_END_FIELDS = ("outcome", "ended_at", "runtime_seconds", "exit_code")


def migrate_from_files(town: Town, conn: sqlite3.Connection) -> list[Path]:
    """Bring a 0.1.0 town's run log and its archive into the tables through ``conn``; the files to move
    aside.

    Read as 0.1.0 read them: a torn last line is not there yet, any other
    malformed line is an error naming file and line (nothing is half
    migrated: the caller's transaction rolls back); the later line of a run
    wins, but its end is the first one (once ended, a run stays ended as it
    first did).  A run in both files is the log's.  Runs the log holds stay,
    the archive's are archived.  The files returned are the log, the archive
    and what 0.1.0 derived from them (:data:`OLD_DERIVED`), those of them that
    exist.  Nothing is committed, moved or deleted here.
    """
    log, archive = town.dir / OLD_LOG, town.dir / OLD_ARCHIVE
    found = [path for path in (log, archive, *(town.dir / p for p in OLD_DERIVED)) if path.exists()]
    live = _fold(_lines(log, log.read_bytes())) if log.exists() else {}
    old = _fold(_lines(archive, _gunzip(archive))) if archive.exists() else {}
    old = [record for run_id, record in old.items() if run_id not in live]
    last = conn.execute("SELECT MAX(seq) FROM runs").fetchone()[0] or 0
    _put(conn, old)  # older than the log's runs: they take their launch places first, then move
    _archive(conn, "seq > ?", (last,), time.time())
    _put(conn, live.values())
    if live or old:
        conn.execute("INSERT INTO versions (name, value) VALUES (?, 1)"
                     " ON CONFLICT (name) DO UPDATE SET value = versions.value + 1", (VERSION,))
    return found


def _lines(path: Path, data: bytes) -> Iterator[dict]:
    """The records on the complete lines of ``data`` (what follows the last newline is torn)."""
    for number, raw in enumerate(data[:data.rfind(b"\n") + 1].split(b"\n")[:-1], start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
            if not isinstance(record, dict) or not isinstance(record.get("run_id"), str):
                raise ValueError("not a run record")
        except (ValueError, RecursionError) as err:
            raise StoreCorrupt(path, number, f"malformed run record ({err})") from None
        yield record


def _fold(versions: Iterable[dict]) -> dict[str, dict]:
    """Each run's record from its versions in file order: the later wins, the first end stays."""
    runs: dict[str, dict] = {}
    for version in versions:
        prior = runs.get(version["run_id"])
        if prior is None:
            runs[version["run_id"]] = version
            continue
        merged = {**prior, **version}
        if prior.get("outcome") not in (RUNNING, None):
            merged.update((f, prior.get(f)) for f in _END_FIELDS)
        runs[version["run_id"]] = merged
    return runs


def _gunzip(path: Path) -> bytes:
    """The archive's members as far as they are whole (a member cut short by a crash is not there)."""
    import zlib

    out = bytearray()
    data = path.read_bytes()
    while data:
        decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            chunk = decoder.decompress(data)
        except zlib.error:
            break
        if not decoder.eof:
            break
        out += chunk
        data = decoder.unused_data
    return bytes(out)
