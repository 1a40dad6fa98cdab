"""The decision log, ``<town>/.sluice/schedule/decisions.jsonl``, and what is read back from it.

Every scoring decision (``schedule next``) and every launch the dispatcher
makes is one JSON line.  The log only grows, so nothing here reads it whole
on a hot path:

* :func:`recent_decisions` seeks from the end and parses only the last lines;
* :func:`decision_counts` (fairness) keeps per-rig counts in
  ``runtime/decision-counts.json`` together with the byte offset, inode and
  last bytes of the log it has counted, and on each call counts only the lines
  appended since.  Appenders bring the cache up to date; readers only use
  it.  A log that was replaced, truncated or rewritten is counted again from
  the start.  The cache is derived: deleting it loses nothing.

Writers append all lines of one call with a single ``write()`` under the
decisions lock, the lock the dispatcher also takes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core.clock import random_id
from sluice.errors import StoreCorrupt
from sluice.store import fsutil
from sluice.store.jsonlog import json_object_at, tail_objects

if TYPE_CHECKING:
    from sluice.store.town import Rig, Town

COUNTS_VERSION = 1
#: Bytes before the counted offset kept in the cache to notice a rewritten log.
_GUARD = 64


def counts_cache_path(town: Town) -> Path:
    return town.runtime / "decision-counts.json"


def sling_command(item_id: str, rig: Rig) -> str:
    """The command that queues the item where the decision says, as typed.

    An item whose id does not carry its rig's prefix (an export holding
    another project's ids) needs ``--force`` past sling's cross-rig guard.
    """
    argv = ["sluice", "sling", item_id, rig.name]
    if not item_id.startswith(rig.prefix + "-"):
        argv.append("--force")
    return shlex.join(argv)


def make_decision(
    item: dict, rig: Rig, *, graph_id: str | None, score: float | None, reasons, at: str,
    skipped: bool = False, **extra,
) -> dict:
    """One decision in the shape ``schedule next`` prints and the dispatcher logs (docs/formats.md)."""
    return {
        "decision_id": random_id(),
        "at": at,
        "graph_id": graph_id,
        "node_id": item["id"],
        "score": score,
        "reasons": list(reasons),
        "dispatch_hints": {
            "title": item.get("title"),
            "project": rig.name,
            "repository": str(rig.repo),
            "agent_id": item.get("assignee") or None,
            "priority": item.get("priority"),
        },
        "sling_command": sling_command(item["id"], rig),
        "skipped": skipped,
        **extra,
    }


def append_decisions(town: Town, decisions: list[dict]) -> None:
    """Append decisions as compact JSON lines: one ``write()`` under the decisions lock."""
    if not decisions:
        return
    data = "".join(json.dumps(d, ensure_ascii=False, separators=(",", ":")) + "\n" for d in decisions)
    raw = data.encode("utf-8")
    with fsutil.file_lock(town.lock_path("decisions")):
        fsutil.append_bytes(town.decisions_path, raw, mode=0o600)
        # Writers keep the counts current; readers never write.  A bad line does not undo the
        # append that just happened: whoever needs the counts reports it.
        with contextlib.suppress(StoreCorrupt):
            decision_counts(town, persist=True)


# -- reading the newest lines ------------------------------------------------------


def recent_decisions(town: Town, count: int) -> list[dict]:
    """The last ``count`` decisions, newest first, reading only the end of the log.

    A torn last line (an append in progress or interrupted) is not there yet.
    """
    return list(reversed(tail_objects(town.decisions_path, count, "decision")))


# -- per-rig counts for fairness --------------------------------------------------


def decision_counts(town: Town, persist: bool = False) -> dict[str, int]:
    """Decisions per rig (``dispatch_hints.project``) over the whole log, skipped ones included.

    Reads only what was appended since the cached offset; see the module docstring.
    Only ``persist`` (the appender, under the decisions lock) writes the cache,
    so read-only commands such as a dry run leave the town untouched.
    """
    path = town.decisions_path
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return {}
    cache = _load_cache(town)
    counts: dict[str, int] = {}
    offset = 0
    same_log = cache is not None and cache["inode"] == st.st_ino and cache["offset"] <= st.st_size
    if same_log and _guard(path, cache["offset"]) == cache["guard"]:
        counts, offset = dict(cache["counts"]), cache["offset"]
    if offset == st.st_size:
        return counts
    with open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read(st.st_size - offset)
    complete = data.rfind(b"\n") + 1
    position = offset
    for line in data[:complete].split(b"\n")[:-1]:
        if line.strip():
            record = json_object_at(path, line, position, "decision")
            hints = record.get("dispatch_hints")
            rig = hints.get("project") if isinstance(hints, dict) else None
            if isinstance(rig, str) and rig.strip():
                counts[rig.strip()] = counts.get(rig.strip(), 0) + 1
        position += len(line) + 1
    new_offset = offset + complete
    if persist and new_offset != offset:
        _save_cache(town, {"version": COUNTS_VERSION, "inode": st.st_ino, "offset": new_offset,
                           "guard": _guard(path, new_offset), "counts": counts})
    return counts


def _guard(path: Path, offset: int) -> str:
    """Hex of the bytes just before ``offset``: if they change, the counted part was rewritten."""
    with open(path, "rb") as fh:
        start = max(0, offset - _GUARD)
        fh.seek(start)
        return fh.read(offset - start).hex()


def _load_cache(town: Town) -> dict | None:
    try:
        cache = json.loads(counts_cache_path(town).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # missing or unreadable: a derived cache is simply rebuilt
    keys = {"version", "inode", "offset", "guard", "counts"}
    if not isinstance(cache, dict) or not keys <= cache.keys() or cache["version"] != COUNTS_VERSION:
        return None
    if not isinstance(cache["counts"], dict) or not isinstance(cache["offset"], int):
        return None
    return cache


def _save_cache(town: Town, cache: dict) -> None:
    fsutil.write_cache(counts_cache_path(town), json.dumps(cache).encode("utf-8"))
