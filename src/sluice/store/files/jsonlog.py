"""Reading JSON-lines files: one record per line, torn tails tolerated.

:func:`parse_line` holds the rules for one line of an items file (shared by
every reader); :func:`tail_objects` reads only the end of a log (the newest
events and decisions), :func:`all_objects` the whole of it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from sluice.core.items import normalise, priority_problem, shape_problem, skip_record
from sluice.core.text import may_hold_unencodable, printable, unencodable_problem
from sluice.errors import StoreCorrupt
from sluice.logs import log


class TornLine(Exception):
    """The last line lacks its newline and does not parse: a write that was cut short."""


def parse_line(path: Path, number: int, chunk: bytes, warn: Callable[[str], None] | None = None
               ) -> dict | None:
    """The normalised record on one line, None for a blank or skipped line.

    Raises :class:`TornLine` for an unparseable line without its newline (only
    the last line of a file can be one) and :class:`StoreCorrupt` naming file
    and line for any other bad line, one holding text that cannot be encoded
    included (:func:`~sluice.core.text.unencodable`).  A priority that is not an integer 0–4 is
    read as the default and warned about (to ``warn``, default the logger).
    """
    if not chunk.strip():
        return None
    try:
        record = json.loads(chunk)
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
    except (ValueError, RecursionError) as err:  # RecursionError: nested too deeply to parse
        if not chunk.endswith(b"\n"):
            raise TornLine from None
        raise StoreCorrupt(path, number, f"malformed record ({str(err).split(': line')[0]})") from None
    if skip_record(record):
        return None
    if not isinstance(record.get("id"), str) or not record["id"]:
        raise StoreCorrupt(path, number, "record has no string 'id'")
    problem = shape_problem(record)
    if problem is None and may_hold_unencodable(chunk):
        problem = unencodable_problem(record)
    if problem is not None:
        raise StoreCorrupt(path, number, f"record {printable(record['id'])!r}: {problem}")
    problem = priority_problem(record.get("priority"))
    if problem is not None:
        (warn or log.warning)(f"{path}:{number}: record {printable(record['id'])}: {problem}")
    return normalise(record)


# -- the end of a log ---------------------------------------------------------------

TAIL_BLOCK = 64 * 1024


def tail_objects(path: Path, count: int, kind: str) -> list[dict]:
    """The last ``count`` JSON objects of a log, oldest first, reading only its end.

    Status commands and live views read the newest events and decisions every
    second, so they never parse the whole log.  A torn last line (an append
    in progress) is not there yet; any other bad line is a StoreCorrupt
    naming its line (``malformed <kind>``).
    """
    if count <= 0:
        return []
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return []
    with fh:
        start = fh.seek(0, os.SEEK_END)
        data = b""
        lines: list[tuple[int, bytes]] = []
        while start > 0 and len(lines) < count:
            step = min(TAIL_BLOCK, start)
            start -= step
            fh.seek(start)
            data = fh.read(step) + data
            lines = complete_lines(data, start)
    return [json_object_at(path, line, position, kind) for position, line in lines[-count:]]


def all_objects(path: Path, kind: str) -> list[dict]:
    """Every JSON object of a log, read whole; a torn last line is not there yet, as for
    :func:`tail_objects`."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return [json_object_at(path, line, position, kind) for position, line in complete_lines(data, 0)]


def complete_lines(data: bytes, start: int) -> list[tuple[int, bytes]]:
    """(offset, text) of the whole, non-blank lines in ``data``, the log's tail from byte ``start``.

    The first line is cut off unless ``data`` starts the file; bytes after the
    last newline are a torn append.
    """
    body = data[: data.rfind(b"\n") + 1]
    first = 0 if start == 0 else body.find(b"\n") + 1
    out = []
    position = start + first
    for line in body[first:].split(b"\n")[:-1]:
        if line.strip():
            out.append((position, line))
        position += len(line) + 1
    return out


def json_object_at(path: Path, line: bytes, position: int, kind: str) -> dict:
    """The JSON object on the line at byte ``position``, or StoreCorrupt naming its line number."""
    try:
        record = json.loads(line)
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
    except (ValueError, RecursionError) as err:
        raise StoreCorrupt(path, _line_number(path, position), f"malformed {kind} ({err})") from None
    return record


def _line_number(path: Path, position: int) -> int:
    """1-based number of the line starting at byte ``position`` (error path only: reads the prefix)."""
    with open(path, "rb") as fh:
        return fh.read(position).count(b"\n") + 1
