"""The queue digest ``<rig>.queue.json``: a rig's open contexts, kept beside its index for one log.

Keyed by the ephemeral log's signature (:func:`sluice.store.fsutil.file_signature`):
a process that has not read the log yet takes the open contexts from here
instead of parsing every version of every context.  The last reader that
parsed the log writes it; an append that grew the log by exactly what it
wrote carries it over (:func:`extend`), so the first read after a sling or a
close does not parse the log either.  A digest of another log or another
layout is ignored, and the reader parses the log.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from sluice.core.items import DONE_STATUSES, is_context
from sluice.core.records import SlingContextFields
from sluice.store import fsutil

if TYPE_CHECKING:
    from pathlib import Path

#: The layout of ``<rig>.queue.json``; a digest of another layout is ignored and written again.
DIGEST_VERSION = 1


def rows(path: Path, signature: str) -> list | None:
    """The ``[id, fields]`` rows of the digest kept for exactly this log, or None (no such digest)."""
    try:
        kept = json.loads(path.read_bytes())
        if kept.get("version") != DIGEST_VERSION or kept.get("sig") != signature:
            return None
        found = kept["open"]
        if all(isinstance(row, list) and len(row) == 2 and isinstance(row[0], str) for row in found):
            return found
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # absent, torn, foreign: read the log
        pass
    return None


def write(path: Path, signature: str, open_rows: list) -> None:
    body = json.dumps({"version": DIGEST_VERSION, "sig": signature, "open": open_rows},
                      separators=(",", ":"), ensure_ascii=False)
    fsutil.write_cache(path, body.encode("utf-8"))


def extend(path: Path, before: str, after: str, records: list[dict]) -> None:
    """After an append under the rig lock: the digest of the log as it was, brought up to date.

    The appender calls this only when the log (signature ``before``) grew by
    exactly ``records`` into signature ``after``; without a digest of the
    log before the append nothing is kept, and the next reader parses the log.
    """
    found = rows(path, before)
    if found is None:
        return
    open_now = dict(found)
    for record in records:
        if record.get("status", "open") not in DONE_STATUSES and is_context(record):
            fields = SlingContextFields.from_description(record.get("description"))
            open_now[record["id"]] = fields.to_compact() if fields is not None else None
        else:
            open_now.pop(record["id"], None)
    write(path, after, [[context_id, data] for context_id, data in open_now.items()])
