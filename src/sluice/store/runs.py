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
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core.items import parse_ts
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
          "labels", "touches", "attempt")
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


@dataclass
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


def end(town: Town, ends: dict[str, dict]) -> list[dict]:
    """Append the ended version of each run in ``ends`` (run id → changed fields) that still runs.

    Returns the records this call ended; a run another process ended first is
    left out, so whoever gets a record back owns its follow-ups.
    """
    if not ends:
        return []
    with _lock(town):
        current = read_runs(town)
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


@dataclass
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


def compact(town: Town, retention: float, now: float | None = None) -> CompactResult:
    """One line per run; runs that ended before ``now - retention`` go to the archive first."""
    import gzip  # here: compaction is rare

    now = time.time() if now is None else now
    path = log_path(town)
    with _lock(town):
        tail = RunTail(path)
        tail.read()
        if tail.inode is None:
            return CompactResult(0, 0, 0)
        keep, archive = [], []
        for record in tail.runs.values():
            ended = parse_ts(record.get("ended_at"))
            old = record.get("outcome") != RUNNING and ended is not None and ended < now - retention
            (archive if old else keep).append(_line(record) + "\n")
        if archive:  # archived (and synced) before the log is replaced: a crash can only archive twice
            member = gzip.compress("".join(archive).encode("utf-8"), mtime=0)
            fsutil.append_bytes(path.parent / ARCHIVE_NAME, member, mend=False)
        fsutil.atomic_write_bytes(path, "".join(keep).encode("utf-8"))
    return CompactResult(tail.lines, len(keep), len(archive))
