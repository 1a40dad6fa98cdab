"""Compaction of a rig's ephemeral log: one line per live record, old closed contexts archived.

``ephemeral.jsonl`` grows by one line per change (the last line for an id
wins), so a busy rig's log fills with superseded versions and long-closed
contexts.  Compaction rewrites it to the latest version of every record,
minus closed sling contexts whose close is older than the retention; those
are appended to ``ephemeral.archive.jsonl.gz`` first, and their ids to
``ephemeral.archive.ids`` (:mod:`sluice.store.archiveids`: no later context
takes one of them).

Safety, in order:

* it holds the rig lock, which every writer of the log takes, so no append
  is in flight and none starts until the new file is in place (slingers and
  the daemon wait, they lose nothing);
* archived records are written (one gzip member, one ``write()``, fsync)
  before the log is replaced, so a crash between the two can only archive a
  record twice, never drop it;
* the new log replaces the old one atomically (temporary file, fsync,
  rename), so a reader sees the old or the new file, never a mix; a crash
  leaves the old file and a temporary one, removed by the next compaction;
* a malformed line in the middle of the log is a StoreCorrupt and nothing is
  rewritten (a rewrite would silently drop it).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING

from sluice.core.items import DONE_STATUSES, is_context
from sluice.core.recordclass import asdict, recordclass
from sluice.store import archiveids, fsutil, openqueue
from sluice.store.archiveids import ARCHIVE_NAME
from sluice.store.jsonlog import LogTail, line_text
from sluice.store.town import compacted_path

if TYPE_CHECKING:
    from sluice.store.rigstore import RigStore


@recordclass
class CompactResult:
    rig: str
    lines_before: int
    lines_after: int
    archived: int

    @property
    def removed(self) -> int:
        """Lines that left the log: superseded versions plus archived records."""
        return self.lines_before - self.lines_after

    def to_json(self) -> dict:
        return {**asdict(self), "removed": self.removed}


def line_count(store: RigStore) -> int:
    """Lines in the rig's ephemeral log now (a cheap byte count, no parsing)."""
    try:
        with open(store.ephemeral_path, "rb") as fh:
            return sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def _closed_epoch(record: dict) -> float | None:
    stamp = record.get("closed_at") or record.get("updated_at")
    try:
        parsed = datetime.fromisoformat(str(stamp))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.timestamp()


def _expired(record: dict, cutoff: float) -> bool:
    """A closed sling context closed before ``cutoff`` (other records always stay)."""
    if record.get("status") not in DONE_STATUSES or not is_context(record):
        return False
    closed = _closed_epoch(record)
    return closed is not None and closed < cutoff


def _remove_leftovers(store: RigStore) -> None:
    """Temporary files of a compaction that was killed before its rename."""
    for leftover in store.ephemeral_path.parent.glob(f".{store.ephemeral_path.name}.*.tmp"):
        leftover.unlink(missing_ok=True)


def _append_archive(path, lines: list[str]) -> None:
    import gzip  # here: a compaction is rare, and every command imports this module

    member = gzip.compress("".join(lines).encode("utf-8"), mtime=0)
    fsutil.append_bytes(path, member, mend=False)  # one whole gzip member or none


def compact(store: RigStore, retention: float | None = None, now: float | None = None) -> CompactResult:
    """Rewrite ``store``'s log to one line per live record; see the module docstring.

    ``retention`` is in seconds; None keeps every record (only superseded
    versions go).
    """
    now = time.time() if now is None else now
    with fsutil.file_lock(store.lock_path):
        _remove_leftovers(store)
        tail = LogTail(store.ephemeral_path)
        records = tail.catch_up()
        keep, kept, archive, archived_ids = [], [], [], []
        cutoff = now - retention if retention is not None else None
        # Each record where its latest version stood: the file reads as its last lines did.
        for record in sorted(records.values(), key=lambda r: tail.positions[r["id"]]):
            text = line_text(record) + "\n"
            if cutoff is not None and _expired(record, cutoff):
                archive.append(text)
                archived_ids.append(record["id"])
            else:
                keep.append(text.encode("utf-8"))
                kept.append(record)
        result = CompactResult(store.rig.name, tail.lines, len(keep), len(archive))
        if tail.lines == 0 and not store.ephemeral_path.exists():
            return result
        if archive:
            # The archived ids are reserved before the log lets them go: no later context takes one.
            archiveids.ensure(store.ephemeral_path.parent)
            _append_archive(store.ephemeral_path.parent / ARCHIVE_NAME, archive)
            archiveids.append(store.ephemeral_path.parent, archived_ids)
        data = b"".join(keep)
        # First the mark of a compaction, then the new log: a reader that took this file's signature
        # before reading the log reads either the log as it was then or sees another signature later.
        fsutil.atomic_write_bytes(compacted_path(store.ephemeral_path), f"{now}\n".encode())
        fsutil.atomic_write_bytes(store.ephemeral_path, data)
        store.forget_digests()  # their marks name the old file, whose inode a later file may reuse
        try:  # the new file's mark, taken while no writer can have appended to it
            mark = LogTail.mark_of_written(store.ephemeral_path, data, len(keep))
        except OSError:  # the file just written cannot be looked at: the next reader reads it whole
            mark = None
    if mark is not None:
        _keep_digests(store, mark, keep, kept)
    store.refresh()
    return result


def _keep_digests(store: RigStore, mark: dict, lines: list[bytes], records: list[dict]) -> None:
    """The digests of the log just written, so that the next reader need not parse it whole.

    Compaction holds every record it wrote and knows where each line
    starts, which is all the summary and the queue digest are made of; a
    reader would otherwise read the new file whole once, about 3 s at
    100,000 open contexts.  Written after the rename and after the rig lock
    is released (writers need not wait for them): a mark names a prefix of
    the new file, which appends made meanwhile only extend, so the next
    reader takes the digest and parses the lines after it.  A crash before
    they are written leaves no digest (the reader reads the log whole, as
    before), and no other file can continue from their marks.
    """
    offsets, at = [], 0
    for line in lines:
        offsets.append(at)
        at += len(line)
    store.keep_summary_of(mark, records)
    openqueue.keep_digest_of(store, mark, zip(records, offsets, strict=True))
