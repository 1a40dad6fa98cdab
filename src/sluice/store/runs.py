"""The run log ``<town>/.sluice/runs/runs.jsonl``: one run record for every launch.

An executor's own files say how a process ended but are forgotten when it is
reaped; the run log is the scheduler's memory of every launch.  Each line is
the whole current version of one run record (the last line for a
``run_id`` wins, as in a rig's ephemeral log): a launch appends the record
with outcome ``running``, its end appends the ended version, a usage report
appends one with ``tokens_used``.  Appends are one durable ``write()`` each
(:func:`sluice.store.fsutil.append_bytes`: fsynced, or cut back) under
``runtime/runs.lock``; readers take no lock and treat a torn last line as not
there yet.

Ending is decided under the lock (:func:`end`): only the process that
appends the ended version gets the record back, so an end's follow-ups (its
event, a throttle, a retry) happen once however many commands look at once.

Retention: :func:`compact` rewrites the log to one line per run, and runs
that ended longer ago than ``scheduler.compact_retention`` move to
``runs.archive.jsonl.gz`` first (archived before the rewrite, as contexts
are).  Running runs always stay.

:class:`RunTail` reads only what was appended since its last read (byte
offset plus inode), for readers that follow the log.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core.items import parse_ts
from sluice.core.recordclass import field, recordclass
from sluice.errors import StoreCorrupt
from sluice.store import fsutil

if TYPE_CHECKING:
    from sluice.store.town import Town

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

FIELDS = ("run_id", "polecat_id", "item_id", "rig", "context_id", "executor", "host", "started_at",
          "ended_at", "runtime_seconds", "exit_code", "outcome", "tokens_estimated", "tokens_used",
          "labels", "touches", "attempt", "issue_type", "reason")
ARCHIVE_NAME = "runs.archive.jsonl.gz"


def log_path(town: Town) -> Path:
    return town.dir / "runs" / "runs.jsonl"


def _lock(town: Town) -> fsutil.FileLock:
    return fsutil.file_lock(town.lock_path("runs"))


def _line(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def append(town: Town, records: Iterable[dict]) -> None:
    """Append versions of run records in one write (the caller need not hold the lock)."""
    lines = [_line(r) for r in records]
    if not lines:
        return
    with _lock(town):
        _append_locked(town, lines)


def _append_locked(town: Town, lines: list[str]) -> None:
    """One durable write (fsynced, or cut back and a StorageError): a launch's record survives a power cut."""
    if lines:
        fsutil.append_bytes(log_path(town), ("\n".join(lines) + "\n").encode("utf-8"))


def _parse(path: Path, data: bytes, first_line: int) -> tuple[list[dict], int]:
    """The records on the complete lines of ``data`` and how many bytes those lines take."""
    end = data.rfind(b"\n") + 1
    out = []
    for number, raw in enumerate(data[:end].split(b"\n")[:-1], start=first_line):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
            if not isinstance(record, dict) or not isinstance(record.get("run_id"), str):
                raise ValueError("not a run record")
        except (ValueError, RecursionError) as err:
            raise StoreCorrupt(path, number, f"malformed run record ({err})") from None
        out.append(record)
    return out, end


@recordclass
class RunTail:
    """What has been read of the run log, so the next :meth:`read` parses only what was appended.

    ``runs`` maps run id to its latest version (launch order).  A log
    replaced by compaction (another inode) or cut shorter is read again whole.
    """

    path: Path
    runs: dict[str, dict] = field(default_factory=dict)
    offset: int = 0
    lines: int = 0
    inode: int | None = None

    def read(self) -> list[dict]:
        """The record versions appended since the last read (all of them the first time)."""
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            self.runs, self.offset, self.lines, self.inode = {}, 0, 0, None
            return []
        with fh:
            st = os.fstat(fh.fileno())
            if st.st_ino != self.inode or st.st_size < self.offset:
                self.runs, self.offset, self.lines, self.inode = {}, 0, 0, st.st_ino
            fh.seek(self.offset)
            data = fh.read()
        records, used = _parse(self.path, data, self.lines + 1)
        self.offset += used
        self.lines += data[:used].count(b"\n")
        for record in records:
            self.runs[record["run_id"]] = record
        return records


_tails: dict[Path, RunTail] = {}


def read_runs(town: Town) -> dict[str, dict]:
    """Every run's latest version by run id, in launch order (treat the records as read-only).

    A process keeps one :class:`RunTail` per log, so a long-lived reader (a
    live view, the daemon, the MCP server) parses only what was appended
    since it last looked.
    """
    path = log_path(town)
    tail = _tails.get(path)
    if tail is None:
        tail = _tails[path] = RunTail(path)
    tail.read()
    return tail.runs


# -- the digest: what every cycle needs, without parsing the whole log ----------------------------

DIGEST_VERSION = 1


def digest_path(town: Town) -> Path:
    return town.runtime / "runs-digest.json"


@recordclass
class Digest:
    """What the scheduler reads on every cycle, kept at a mark of the log (a cache: safe to delete).

    ``running`` are the runs still running (run id → record: what admission
    counts and what ends are looked for), ``latest`` each item's latest run
    (``run_id``, ``outcome``, ``started_at``, ``ended_at``: what sling checks),
    ``totals`` the ends seen by outcome (what the daemon's tick line counts).
    A reader parses only the lines after ``offset`` (same inode, not shorter);
    any other file is read whole again.
    """

    inode: int | None = None
    offset: int = 0
    lines: int = 0
    running: dict[str, dict] = field(default_factory=dict)
    latest: dict[str, dict] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of_runs(cls, inode: int, runs: Iterable[dict], offset: int = 0, lines: int = 0) -> Digest:
        """The digest a whole read of a log makes: ``runs`` are each run's latest version, once."""
        made = cls(inode=inode, offset=offset, lines=lines)
        for record in runs:
            made.apply(record, fresh=True)
        return made

    def apply(self, record: dict, fresh: bool) -> None:
        run_id, outcome = record["run_id"], record.get("outcome")
        if outcome == RUNNING:
            self.running[run_id] = record
        elif self.running.pop(run_id, None) is not None or fresh:
            self.totals[outcome] = self.totals.get(outcome, 0) + 1
        item = record.get("item_id")
        prior = self.latest.get(item)
        started = record.get("started_at") or ""
        if prior is None or prior["run_id"] == run_id or started >= prior["started_at"]:
            self.latest[item] = {"run_id": run_id, "outcome": outcome, "started_at": started,
                                 "ended_at": record.get("ended_at")}


def digest(town: Town) -> Digest:
    """The digest caught up with the log: its cached copy plus the lines appended since."""
    path = log_path(town)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return Digest()
    kept = _memo.get(path)  # this process's own copy, at least as fresh as the cache it read
    if kept is None or kept.inode != st.st_ino or st.st_size < kept.offset:
        kept = _load_digest(town)
    if kept is None or kept.inode != st.st_ino or st.st_size < kept.offset:
        kept = None
    if kept is not None and kept.offset == st.st_size:
        _memo[path] = kept
        return kept
    with open(path, "rb") as fh:
        fh.seek(kept.offset if kept is not None else 0)
        data = fh.read()
    start_line = kept.lines + 1 if kept is not None else 1
    records, used = _parse(path, data, start_line)
    if kept is None:  # read whole: each run once, as its latest version
        kept = Digest.of_runs(st.st_ino, {record["run_id"]: record for record in records}.values())
    else:
        for record in records:
            kept.apply(record, fresh=False)
    kept.offset += used
    kept.lines += data[:used].count(b"\n")
    _write_digest(town, kept)
    _memo[path] = kept
    return kept


def _write_digest(town: Town, kept: Digest) -> None:
    document = {"version": DIGEST_VERSION, "inode": kept.inode, "offset": kept.offset, "lines": kept.lines,
                "running": kept.running, "latest": kept.latest, "totals": kept.totals}
    fsutil.write_cache(digest_path(town), json.dumps(document, separators=(",", ":")).encode("utf-8"))


_memo: dict[Path, Digest] = {}


def _load_digest(town: Town) -> Digest | None:
    try:
        data = json.loads(digest_path(town).read_bytes())
        if data.get("version") != DIGEST_VERSION:
            return None
        return Digest(inode=data["inode"], offset=int(data["offset"]), lines=int(data["lines"]),
                      running=dict(data["running"]), latest=dict(data["latest"]), totals=dict(data["totals"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # no cache, or one cut short: read the log


def newest_first(town: Town) -> Iterator[dict]:
    """Record versions from the end of the log backwards (newest line first), reading only what is asked.

    A long log is read block by block from its end, so a reader that wants
    the last hour's runs or the latest hundred stops early.  The bytes after
    the last newline are an append in progress: not there yet.
    """
    try:
        fh = open(log_path(town), "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return
    with fh:
        position = fh.seek(0, os.SEEK_END)
        pending, first = b"", True
        while position > 0:
            start = max(0, position - TAIL_BLOCK)
            fh.seek(start)
            lines = (fh.read(position - start) + pending).split(b"\n")
            position = start
            if first:
                lines, first = lines[:-1], False  # after the last newline: torn, or nothing
            pending = lines.pop(0) if start > 0 and lines else b""
            for raw in reversed(lines):
                try:
                    record = json.loads(raw) if raw.strip() else None
                except ValueError:
                    continue  # the whole-log readers name a bad line; a backwards look skips it
                if isinstance(record, dict) and isinstance(record.get("run_id"), str):
                    yield record


TAIL_BLOCK = 1 << 16


def end(town: Town, ends: dict[str, dict]) -> list[dict]:
    """Append the ended version of each run in ``ends`` (run id → changed fields) that still runs.

    Returns the records this call ended; a run another process ended first is
    left out, so whoever gets a record back owns its follow-ups.
    """
    if not ends:
        return []
    with _lock(town):
        current = digest(town).running  # caught up under the lock: exactly what still runs
        out = []
        for run_id, changes in ends.items():
            record = current.get(run_id)
            if record is None or record.get("outcome") != RUNNING:
                continue
            out.append({**record, **changes})
        _append_locked(town, [_line(r) for r in out])
    return out


def update(town: Town, run_id: str, changes: dict) -> dict | None:
    """Append a new version of one run with ``changes`` (e.g. ``tokens_used``); None if unknown."""
    with _lock(town):
        record = read_runs(town).get(run_id)
        if record is None:
            return None
        record = {**record, **changes}
        _append_locked(town, [_line(record)])
    return record


@recordclass
class CompactResult:
    lines_before: int
    lines_after: int
    archived: int

    def to_json(self) -> dict:
        return {"lines_before": self.lines_before, "lines_after": self.lines_after, "archived": self.archived}


def line_count(town: Town) -> int:
    try:
        with open(log_path(town), "rb") as fh:
            return sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def compact(town: Town, retention: float, now: float | None = None,
            keep: Callable[[int, bytes, list[dict]], None] | None = None) -> CompactResult:
    """One line per run; runs that ended before ``now - retention`` go to the archive first.

    The run digest of the new file is written from the runs it holds (as a
    whole read of it would make it), so the next cycle does not parse the
    rewritten log; ``keep`` is handed the new file's inode (taken under the
    lock), its bytes and its runs, for what else is kept of the log (the
    forecast's samples, which live above this module).  Both are written
    after the lock is released, so writers need not wait for them: they
    describe a prefix of the new file, which appends made meanwhile only
    extend.  A crash before they are written leaves caches that no longer
    fit the file: the next reader reads the log whole, as before.
    """
    import gzip  # here: compaction is rare

    now = time.time() if now is None else now
    path = log_path(town)
    with _lock(town):
        tail = RunTail(path)
        tail.read()
        if tail.inode is None:
            return CompactResult(0, 0, 0)
        lines, kept, archive = [], [], []
        for record in tail.runs.values():
            ended = parse_ts(record.get("ended_at"))
            old = record.get("outcome") != RUNNING and ended is not None and ended < now - retention
            if old:
                archive.append(_line(record) + "\n")
            else:
                lines.append(_line(record) + "\n")
                kept.append(record)
        if archive:  # archived (and synced) before the log is replaced: a crash can only archive twice
            member = gzip.compress("".join(archive).encode("utf-8"), mtime=0)
            fsutil.append_bytes(path.parent / ARCHIVE_NAME, member, mend=False)
        data = "".join(lines).encode("utf-8")
        fsutil.atomic_write_bytes(path, data)
        try:  # taken while no writer can have appended to the new file
            inode = os.stat(path).st_ino
        except OSError:  # the file just written cannot be looked at: the next reader reads it whole
            inode = None
    if inode is not None:  # after the lock: appends made meanwhile only extend what they describe
        _write_digest(town, Digest.of_runs(inode, kept, len(data), len(lines)))
        if keep is not None:
            keep(inode, data, kept)
    return CompactResult(tail.lines, len(lines), len(archive))
