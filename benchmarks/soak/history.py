"""Append-only history logs: one JSON record per line, one ``write()`` per record.

Every soak process writes what was acknowledged to it here *after* the
acknowledgement, so a record in the history is a promise sluice made.  A
process killed mid-write leaves at most a torn last line, which
:func:`read` skips (and counts) the way sluice's own readers do.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


class History:
    """The log of one process (``<dir>/<name>.jsonl``)."""

    def __init__(self, directory: Path, name: str):
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{name}.jsonl"
        self.role = name

    def write(self, op: str, **fields) -> None:
        record = {"t": time.time(), "pid": os.getpid(), "role": self.role, "op": op, **fields}
        append(self.path, record)


def append(path: Path, record: dict) -> None:
    data = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read(path: Path) -> tuple[list[dict], int]:
    """(records, torn lines) of one log; a line that does not parse is counted, not fatal.

    Mid-file bad lines can only come from the chaos process tearing this log
    and a later append gluing onto the fragment, so they are counted too.
    """
    records, torn = [], 0
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return records, torn
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            torn += 1
            continue
        if isinstance(record, dict):
            records.append(record)
    return records, torn


def read_all(directory: Path, prefix: str = "") -> tuple[list[dict], int]:
    out, torn = [], 0
    for path in sorted(directory.glob(f"{prefix}*.jsonl")):
        records, bad = read(path)
        out.extend(records)
        torn += bad
    out.sort(key=lambda r: r.get("t", 0))
    return out, torn
