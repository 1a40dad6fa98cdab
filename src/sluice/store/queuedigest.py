"""The queue digest ``<rig>.queue.json``: a rig's open contexts, kept beside its index at a mark of its log.

A process that has not read the ephemeral log yet takes the open contexts
from here and parses only the lines appended after the mark
(:meth:`sluice.store.jsonlog.LogTail.mark`), instead of every version of
every context.  Writers never touch it, so an append costs what it writes;
the reader that parsed the log whole writes it, and a reader far enough
behind (:func:`~sluice.store.jsonlog.worth_rewriting`) writes it again.  A
digest of another layout, or whose mark the log no longer continues from,
is ignored, and the reader parses the log.  See docs/formats.md for why it
stays true under kill -9.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from sluice.store import fsutil

if TYPE_CHECKING:
    from pathlib import Path

#: The layout of ``<rig>.queue.json``; a digest of another layout is ignored and written again.
DIGEST_VERSION = 2


def rows(path: Path) -> tuple[dict, list] | None:
    """The mark and ``[id, fields, offset]`` rows of the kept digest, or None (absent, torn, foreign)."""
    try:
        kept = json.loads(path.read_bytes())
        if kept.get("version") != DIGEST_VERSION:
            return None
        found = kept["open"]
        if all(isinstance(row, list) and len(row) == 3 and isinstance(row[0], str) and type(row[2]) is int
               for row in found):
            return kept["mark"], found
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # absent, torn, foreign: read the log
        pass
    return None


def write(path: Path, mark: dict, open_rows: list) -> None:
    body = json.dumps({"version": DIGEST_VERSION, "mark": mark, "open": open_rows},
                      separators=(",", ":"), ensure_ascii=False)
    fsutil.write_cache(path, body.encode("utf-8"))
