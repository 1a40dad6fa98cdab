"""The JSON-lines logs fed from the database: no committed fact missed, none written twice.

``decisions.jsonl`` and ``scheduler.jsonl`` stay append-only JSON lines (the
metagit contract, read by people, ``jq`` and other tools), but the facts they
tell are committed in the town database.  A writer puts its lines in the
``outbox`` table in the same transaction as the change they tell (a row holds
up to 4,096 of a change's lines, joined by newlines), so the lines exist
exactly when the change does.  After the commit the outbox is flushed:

1. under the flush lock, the pending lines of a log are read in order;
2. the log's length is compared with the length recorded after the last
   flush.  Longer means a flush appended and died before it could record so:
   the complete lines past the recorded length are the first pending lines,
   already written — they are dropped from the outbox, not written again (a
   torn last line is cut off first; a row written in part keeps the rest).
   Shorter means a person cut or rotated the file: the flush carries on from
   its present end;
3. the rest are appended in one ``write()`` and fsynced, then the outbox rows
   are deleted and the new length recorded, in one transaction.

A log that refuses the append (full disk, read-only) keeps its lines in the
outbox; the next flush writes them, and ``patrol`` reports how many wait.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import TYPE_CHECKING

from sluice.errors import LockBusy, SluiceError, StorageError
from sluice.logs import log
from sluice.store.files import fsutil

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.store.files.town import Town

EVENTS = "events"
DECISIONS = "decisions"
FLUSH_LOCK_WAIT = 30.0
ROW_LINES = 4096  # lines in one outbox row at most: a clear of 100,000 is a few rows, none of them huge


def log_path(town: Town, name: str) -> Path:
    return town.events_path if name == EVENTS else town.decisions_path


def put(town: Town, name: str, lines: list[str]) -> None:
    """Queue ``lines`` for log ``name`` in the current transaction (or one of their own); flushed after
    commit."""
    if not lines:
        return
    db = town.db
    with db.transaction() as conn:
        conn.executemany("INSERT INTO outbox (log, line) VALUES (?, ?)",
                         [(name, "\n".join(lines[k:k + ROW_LINES])) for k in range(0, len(lines), ROW_LINES)])
        db.after_commit(_flusher(town))


def _flusher(town: Town):
    """The one after-commit flush of ``town`` (so a transaction that put many lines flushes once).

    The change is committed when it runs: whatever refuses the flush is a
    warning, and the lines wait in the outbox for the next one.
    """
    found = town.__dict__.get("_outbox_flush")
    if found is None:
        def found() -> None:
            try:
                flush(town)
            except (OSError, SluiceError) as err:
                log.warning("%s: the logs were not brought up to date (%s); what they lack waits in the"
                            " outbox and is written by the next command that writes or reads them",
                            town.db.path, err)

        town.__dict__["_outbox_flush"] = found
    return found


def flush_if_pending(town: Town) -> None:
    """Flush when anything waits (one indexed probe otherwise): readers see every committed fact."""
    if town.db.one("SELECT 1 FROM outbox LIMIT 1") is not None:
        flush(town)


def flush(town: Town) -> bool:
    """Write what waits in the outbox to its logs; False when a log refused (the lines stay queued)."""
    try:
        with fsutil.file_lock(town.lock_path("outbox"), timeout=FLUSH_LOCK_WAIT):
            ok = True
            for (name,) in town.db.query("SELECT DISTINCT log FROM outbox"):
                ok = _flush_log(town, name) and ok
            return ok
    except LockBusy:  # another process is flushing: it writes ours too
        return True


def _flush_log(town: Town, name: str) -> bool:
    db = town.db
    rows = db.query("SELECT seq, line FROM outbox WHERE log = ? ORDER BY seq", (name,))
    if not rows:
        return True
    path = log_path(town, name)
    row = db.one("SELECT length FROM outbox_flushed WHERE log = ?", (name,))
    recorded = row[0] if row is not None else None
    size = _size(path)
    written = 0  # no length recorded: a log older than the outbox, everything in it written before
    if recorded is not None and size > recorded:
        written = _lines_after(path, recorded)
    total = sum(text.count("\n") + 1 for _seq, text in rows)
    length = _size(path) if written else size  # the torn tail cut off
    try:
        if written < total:
            texts = [text for _seq, text in rows]
            if written:
                texts = "\n".join(texts).split("\n")[written:]
            data = ("\n".join(texts) + "\n").encode("utf-8", "surrogatepass")
            fsutil.append_bytes(path, data, mode=0o600 if name == DECISIONS else 0o644)
            length += len(data)
        written = total
    except OSError as err:
        _note_refusal(town, name, err)
        if not written:
            return False
    with db.transaction() as conn:
        last = _forget(conn, name, rows, written)
        conn.execute("INSERT INTO outbox_flushed (log, seq, length) VALUES (?, ?, ?)"
                     " ON CONFLICT (log) DO UPDATE SET seq = excluded.seq, length = excluded.length",
                     (name, last, length))
        conn.execute("DELETE FROM meta WHERE key = ?", (f"outbox_error:{name}",))
    return True


def _forget(conn, name: str, rows: list[tuple[int, str]], written: int) -> int:
    """Drop the outbox rows whose first ``written`` lines are in the log (a row written in part keeps the
    rest); returns the last seq dropped whole."""
    last = 0
    for seq, text in rows:
        count = text.count("\n") + 1
        if written < count:
            if written:
                conn.execute("UPDATE outbox SET line = ? WHERE seq = ?", (text.split("\n", written)[-1], seq))
            break
        written -= count
        last = seq
    conn.execute("DELETE FROM outbox WHERE log = ? AND seq <= ?", (name, last))
    return last or rows[0][0] - 1


def _lines_after(path: Path, offset: int) -> int:
    """Complete lines in ``path`` after byte ``offset``; a torn last line is cut off."""
    with open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read()
    complete = data.rfind(b"\n") + 1
    if complete < len(data):
        with contextlib.suppress(OSError):
            fsutil.mend_torn_tail(path)
    return data[:complete].count(b"\n")


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def waiting(town: Town, name: str) -> tuple[int, dict[str, int]]:
    """How many lines wait for log ``name``, and how many of each ``type`` (events) among them."""
    kinds: dict[str, int] = {}
    rows = town.db.query("SELECT line FROM outbox WHERE log = ? ORDER BY seq", (name,))
    lines = [line for (text,) in rows for line in text.split("\n")]
    for line in lines:
        try:
            kind = json.loads(line).get("type")
        except (ValueError, AttributeError):
            kind = None
        if isinstance(kind, str):
            kinds[kind] = kinds.get(kind, 0) + 1
    return len(lines), kinds


def _note_refusal(town: Town, name: str, err: OSError) -> None:
    reason = getattr(err, "reason", None) or err.strerror or str(err)
    count, kinds = waiting(town, name)
    named = f" ({', '.join(sorted(kinds))})" if kinds else ""
    log.warning("%s: %d line(s)%s wait to be written (%s); they are kept and written once it accepts them",
                log_path(town, name), count, named, reason)
    with contextlib.suppress(StorageError), town.db.transaction() as conn:
        conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)"
                     " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                     (f"outbox_error:{name}", str(err)))


def refusal(town: Town, name: str) -> str | None:
    row = town.db.one("SELECT value FROM meta WHERE key = ?", (f"outbox_error:{name}",))
    return row[0] if row is not None else None
