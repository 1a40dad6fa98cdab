"""The scheduler's lifecycle log: ``<town>/.sluice/events/scheduler.jsonl``.

One JSON object per line, ``{event_id, type, at, payload}``.  Every event of a
call is written with a single ``write()`` on an ``O_APPEND`` descriptor under
the events lock, so concurrent writers (a sling, a dispatch cycle, a git hook)
never interleave inside a line and a reader never needs a lock.

The log is for people and tools watching the town (a feed, the demo, an
audit); no scheduling decision is ever read back from it.  So events are
written after the change they report is durable, and a log that cannot take
them (a full disk, a file that is not writable) does not undo or fail that
change: it is a warning naming the file, and a note that ``patrol`` reports
(:func:`missing`), so nobody mistakes a quiet log for a quiet town.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sluice.core.clock import iso, random_id
from sluice.errors import LockBusy, StoreCorrupt
from sluice.logs import log
from sluice.store import fsutil
from sluice.store.jsonlog import tail_objects

if TYPE_CHECKING:
    from sluice.store.town import Town

# Every event type sluice writes, in one place (docs/formats.md describes their payloads).
# The dispatcher's lifecycle:
ENQUEUED = "Enqueued"
DISPATCHED = "Dispatched"
DISPATCH_FAILED = "DispatchFailed"
CIRCUIT_BROKEN = "CircuitBroken"
CONTEXT_CLOSED = "ContextClosed"
PAUSED = "Paused"
RESUMED = "Resumed"
CLEARED = "Cleared"
# admission control
THROTTLED = "Throttled"  # a throttle was set (by a person, MCP, or a polecat's exit code)
THROTTLE_CLEARED = "ThrottleCleared"
BUDGET_EXHAUSTED = "BudgetExhausted"  # a cycle first held work for the token budget
REQUEUED = "Requeued"  # a broken item after its cooldown or a reset, or a throttled polecat's item
PROMOTED = "Promoted"  # `scheduler promote` (payload `undo` true: withdrawn)
# A rig unregistered (``rig remove``):
RIG_REMOVED = "RigRemoved"
# Polecats stopped by the stall timeout:
POLECAT_TIMED_OUT = "PolecatTimedOut"
POLECAT_STOPPED = "PolecatStopped"  # `polecat stop` (or the web's stop), with who asked
# Every end of a run, once, when it is recorded (payload: run_id, polecat_id, item_id, rig, context_id,
# exit_code, outcome, runtime_seconds, attempt):
POLECAT_EXITED = "PolecatExited"
# Seen by the daemon after a tick (announced by ``scheduler.notify``): it launched the last
# queued item; a token budget became spent.
QUEUE_DRAINED = "QueueDrained"
# Advisory scoring (``schedule next``):
SCHEDULE_DECISION = "ScheduleDecision"
SCHEDULE_SKIPPED = "ScheduleSkipped"
# Git hooks reporting a rig's merge queue:
MERGE_QUEUE_DEPTH = "MergeQueueDepth"


#: How ``json.dumps(..., ensure_ascii=False)`` writes one string.
_text = json.encoder.encode_basestring


def _lock(town: Town):
    return fsutil.file_lock(town.lock_path("events"))


def make_event(event_type: str, payload: Mapping[str, Any] | None = None, at: str | None = None) -> dict:
    if not event_type or not isinstance(event_type, str):
        raise ValueError("an event needs a type")
    return {"event_id": random_id(), "type": event_type, "at": at or iso(), "payload": dict(payload or {})}


def emit_event(town: Town, event_type: str, payload: Mapping[str, Any] | None = None) -> dict:
    """Append one event and return it."""
    return emit_events(town, [(event_type, payload)])[0]


def emit_events(town: Town, events: Iterable[tuple[str, Mapping[str, Any] | None]]) -> list[dict]:
    """Append several events with one write (a sling of 1,000 items is one append).

    The events of one write share its moment (``at``).  A log that refuses
    them is a warning and a note for ``patrol``, never an error: the change
    they report has already happened.
    """
    at = iso()
    made = [make_event(event_type, payload, at) for event_type, payload in events]
    if not made:
        return made
    data = "".join(event_line(e) + "\n" for e in made)
    try:
        with _lock(town):
            fsutil.append_bytes(town.events_path, data.encode("utf-8"))
    except (OSError, LockBusy) as err:
        _note_missing(town, made, err)
    return made


def event_line(event: dict) -> str:
    """One event as one compact JSON line: the text ``json.dumps`` gives, made faster for the usual event,
    whose payload holds only strings and nulls (a clear of 100,000 contexts writes 100,000 of them)."""
    try:
        fields = ",".join([f"{_text(k)}:{'null' if v is None else _text(v)}"
                           for k, v in event["payload"].items()])
        return (f'{{"event_id":{_text(event["event_id"])},"type":{_text(event["type"])},'
                f'"at":{_text(event["at"])},"payload":{{{fields}}}}}')
    except TypeError:  # a key or value that is not a string (a count, a list): the encoder's own way
        return json.dumps(event, ensure_ascii=False, separators=(",", ":"))


def _missing_path(town: Town):
    return town.runtime / "events-missing.json"


def _note_missing(town: Town, made: list[dict], err: Exception) -> None:
    reason = getattr(err, "reason", None) or getattr(err, "strerror", None) or str(err)
    kinds = sorted({e["type"] for e in made})
    log.warning("%s: %d event(s) not recorded (%s): %s; the change they report is done",
                town.events_path, len(made), ", ".join(kinds), reason)
    note = missing(town) or {"count": 0, "since": made[0]["at"], "types": {}}
    note["count"] += len(made)
    note["last_at"] = made[-1]["at"]
    note["error"] = str(err)
    for event in made:
        note["types"][event["type"]] = note["types"].get(event["type"], 0) + 1
    fsutil.write_cache(_missing_path(town), json.dumps(note, sort_keys=True).encode("utf-8"))


def missing(town: Town) -> dict | None:
    """What the event log has missed: ``{count, since, last_at, error, types}``, or None.

    Kept in ``runtime/events-missing.json`` until someone removes it (having
    seen what ``patrol`` says); a note that cannot be written either (the
    whole disk full) leaves the warnings on stderr as the only record.
    """
    try:
        note = json.loads(_missing_path(town).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(note, dict) or not isinstance(note.get("count"), int) \
            or not isinstance(note.get("types"), dict):
        return None
    return note


def read_events(town: Town, types: Iterable[str] | None = None) -> list[dict]:
    """Every event in the log (optionally only some types); a torn last line is skipped."""
    wanted = set(types) if types is not None else None
    try:
        data = town.events_path.read_bytes()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
            if not isinstance(event, dict):
                raise ValueError("not a JSON object")
        except (ValueError, RecursionError) as err:
            if number == len(lines):  # an interrupted last write: not there yet
                break
            raise StoreCorrupt(town.events_path, number, f"malformed event ({err})") from None
        if wanted is None or event.get("type") in wanted:
            out.append(event)
    return out


def recent_events(town: Town, count: int) -> list[dict]:
    """The last ``count`` events, oldest first, reading only the end of the log.

    Live views call this every second, so it never parses the whole log.  A
    torn last line (an append in progress) is not there yet; any other bad
    line is an error naming its line, as for :func:`read_events`.
    """
    return tail_objects(town.events_path, count, "event")
