"""The item map ``<rig>.open-items``: which open contexts of a rig's log name which item, at a mark of it.

A sling must know whether an item is queued already, in any rig, before it
appends; a clear, a promotion or a retry of one item must find that item's
contexts.  Taking every open context for that (the queue digest: 100,000
contexts parse and check in about 1.5 s) made a sling of one item, or a
clear of one, cost what the whole queue costs.  So beside its queue digest
each rig keeps this map: a header line (the version, the log's mark, and the
length and CRC-32 of what follows) and one line per open context that names
an item, ``"item"<TAB>"context"<TAB>offset``, the two ids as JSON strings
in ASCII (no tab, newline or quote of their own is left bare in them, so
``<NEWLINE>"item"<TAB>`` starts exactly that item's lines).  A lookup is a
search in C for each item asked (a dictionary of every line for a batch
that asks many), then a read of each found context's line at its offset.

Like the queue digest it is a cache: writers never touch it, so an append
costs what it writes; the reader parses only the lines appended after its
mark (:meth:`~sluice.store.jsonlog.LogTail.resume`), in which each id's
latest line says what that record is now (open, with its item, or not),
and writes the map again, by rename, once those lines are worth it
(:func:`~sluice.store.jsonlog.worth_rewriting`).  A map whose mark the log
no longer continues from, of another version, cut or changed (its length or
CRC does not match), is no map: the reader takes the open contexts the
usual way and keeps the map of them.  Why it stays true under kill -9 at
any point: it is written whole by rename or not at all, and describes its
log exactly at its mark; every line after the mark is read and applied by
whoever uses it.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from sluice.store import fsutil
from sluice.store.jsonlog import ascii_json

if TYPE_CHECKING:
    from pathlib import Path

#: The layout of ``<rig>.open-items``; a map of another layout is ignored and written again.
VERSION = 1
#: Items asked at once past which every line is read into a dictionary instead of searched for.
BULK = 32

Row = tuple[str, str, int]  # (item id, context id, offset of the context's latest line)


def read(path: Path) -> tuple[dict, bytes] | None:
    """The mark and the lines of the kept map, or None (absent, torn, foreign, changed)."""
    try:
        data = path.read_bytes()
        end = data.index(b"\n")
        head = json.loads(data[:end])
        body = data[end:]  # from the newline before the first line: every line starts after a newline
        if head.get("version") != VERSION or head["length"] != len(body) or head["crc"] != zlib.crc32(body):
            return None
        mark = head["mark"]
        if not isinstance(mark, dict):
            return None
        return mark, body
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write(path: Path, mark: dict, rows: Iterable[Row]) -> None:
    """Keep ``rows`` as the map of the log at ``mark``."""
    lines = [b"%s\t%s\t%d" % (ascii_json(item), ascii_json(context), offset)
             for item, context, offset in rows]
    body = b"\n" + b"\n".join(lines) + b"\n" if lines else b"\n"
    head = json.dumps({"version": VERSION, "mark": mark, "length": len(body), "crc": zlib.crc32(body)},
                      separators=(",", ":")).encode("ascii")
    fsutil.write_cache(path, head + body)


def _row(line: bytes) -> Row:
    item, context, offset = line.split(b"\t")
    return json.loads(item), json.loads(context), int(offset)


def rows(body: bytes) -> list[Row]:
    """Every line of a map; ValueError when one is not a line of :func:`write`."""
    return [_row(line) for line in body.split(b"\n") if line]


def find(body: bytes, items: Iterable[str]) -> list[Row]:
    """The lines of a map for ``items``; ValueError when one of them is not a line of :func:`write`."""
    wanted = set(items)
    if len(wanted) > BULK:
        return [row for row in rows(body) if row[0] in wanted]
    out = []
    for item in wanted:
        key = b"\n" + ascii_json(item) + b"\t"
        at = body.find(key)
        while at >= 0:
            end = body.index(b"\n", at + 1)
            out.append(_row(body[at + 1:end]))
            at = body.find(key, end)
    return out


__all__ = ["BULK", "VERSION", "Row", "find", "read", "rows", "write"]
