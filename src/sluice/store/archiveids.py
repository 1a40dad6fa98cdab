"""The ids a rig's compaction archive holds, so that a new context never takes one of them.

A context's id is drawn at random among those its rig's log does not hold
(:func:`sluice.core.clock.new_id`, four base-36 characters at first).  Once
compaction moves a closed context to ``ephemeral.archive.jsonl.gz`` its id
is no longer in the log, and a later sling could draw it again: the archive,
the events and the run records would then name two contexts by one id.  So
each compaction also appends the ids it archives to ``ephemeral.archive.ids``
(an empty first line, then one id a line as a JSON string in ASCII, so no id
holds a bare newline and ``<NEWLINE>"id"<NEWLINE>`` finds exactly one).

Why it stays exact under kill -9: compaction appends the ids, durably and in
one write, after the archive and before it replaces the log, all under the
rig lock; so an id is gone from the log only once it is in this file (a kill
in between leaves the old log, which still holds it, and at worst an id
listed twice).  A town whose archive was written before this file existed
gets it made from the archive the first time it is needed, under the rig
lock too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from sluice.logs import log
from sluice.store import fsutil
from sluice.store.jsonlog import ascii_json

#: Closed contexts compaction archived, one gzip member per compaction (see ``sluice.store.compaction``).
ARCHIVE_NAME = "ephemeral.archive.jsonl.gz"
IDS_NAME = "ephemeral.archive.ids"


def _made_from_archive(archive: Path) -> bytes:
    """The ids file's text for every record in ``archive``; a line that does not parse names no id."""
    import gzip  # here: only a town whose archive predates the ids file ever reads it
    import zlib

    keys = [b""]
    try:
        with gzip.open(archive, "rb") as fh:
            for line in fh:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and isinstance(record.get("id"), str):
                    keys.append(ascii_json(record["id"]))
    except (OSError, EOFError, zlib.error) as err:  # a member cut short: its records cannot be read back
        log.warning("%s: read up to a damaged gzip member (%s); ids after it are not reserved", archive, err)
    return b"\n".join(keys) + b"\n"


def ensure(directory: Path) -> None:
    """Make the ids file of the archive in ``directory`` when the archive has none; the caller holds
    the rig lock (no compaction appends meanwhile)."""
    path, archive = directory / IDS_NAME, directory / ARCHIVE_NAME
    if path.exists() or not archive.exists():
        return
    fsutil.atomic_write_bytes(path, _made_from_archive(archive))


def append(directory: Path, ids: Iterable[str]) -> None:
    """Add ``ids``, about to leave the log for the archive (after :func:`ensure`, before the archive
    takes them: a file made from the archive would list them twice); the caller holds the rig lock."""
    path = directory / IDS_NAME
    head = b"" if path.exists() else b"\n"
    fsutil.append_bytes(path, head + b"".join(ascii_json(context_id) + b"\n" for context_id in ids))


class ArchivedIds:
    """Whether an id is one the archive in a rig's directory holds: a search in the file's text, or,
    for a caller that asks about many (``bulk``), a set of its lines."""

    def __init__(self, directory: Path, lock_path: Path, bulk: bool = False):
        path = directory / IDS_NAME
        try:
            self.text = path.read_bytes()
        except FileNotFoundError:
            self.text = b""  # nothing archived yet, or an archive older than this file
            if (directory / ARCHIVE_NAME).exists():
                with fsutil.file_lock(lock_path):
                    ensure(directory)
                self.text = path.read_bytes()
        self.lines = set(self.text.split(b"\n")) if bulk and self.text else None

    def __contains__(self, context_id: object) -> bool:
        if not self.text:
            return False
        key = ascii_json(str(context_id))
        if self.lines is not None:
            return key in self.lines
        return b"\n" + key + b"\n" in self.text
