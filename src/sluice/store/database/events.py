"""The scheduler's lifecycle log: ``<town>/.sluice/events/scheduler.jsonl``.

One JSON object per line, ``{event_id, type, at, payload}``.  An event is put
in the town database's outbox in the same transaction as the change it
reports, and written to the log after that commit (:mod:`sluice.store.database.outbox`),
so the log holds exactly the committed changes: none missed when a process dies
between the two, none written twice.  A log that cannot take them (a full
disk, a file that is not writable) keeps them waiting in the outbox, and
``patrol`` says how many wait (:func:`missing`): nobody mistakes a quiet log
for a quiet town.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sluice.core.clock import iso, random_id, random_ids
from sluice.core.text import encodes, json_text
from sluice.store.database import outbox
from sluice.store.files.jsonlog import all_objects, tail_objects

if TYPE_CHECKING:
    from sluice.store.files.town import Town

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


def make_event(event_type: str, payload: Mapping[str, Any] | None = None, at: str | None = None,
               event_id: str | None = None) -> dict:
    if not event_type or not isinstance(event_type, str):
        raise ValueError("an event needs a type")
    return {"event_id": event_id or random_id(), "type": event_type, "at": at or iso(),
            "payload": dict(payload or {})}


def emit_event(town: Town, event_type: str, payload: Mapping[str, Any] | None = None) -> dict:
    """Append one event and return it."""
    return emit_events(town, [(event_type, payload)])[0]


def emit_events(town: Town, events: Iterable[tuple[str, Mapping[str, Any] | None]]) -> list[dict]:
    """Put several events in the outbox, in the current transaction when there is one.

    The events of one call share its moment (``at``).
    """
    at = iso()
    events = list(events)
    made = [make_event(event_type, payload, at, event_id)
            for (event_type, payload), event_id in zip(events, random_ids(len(events)), strict=True)]
    if made:
        outbox.put(town, outbox.EVENTS, [event_line(e) for e in made])
    return made


def event_line(event: dict) -> str:
    """One event as one compact JSON line: the text ``json.dumps`` gives, made faster for the usual event,
    whose payload holds only strings and nulls (a clear of 100,000 contexts writes 100,000 of them)."""
    try:
        fields = ",".join([f"{_text(k)}:{'null' if v is None else _text(v)}"
                           for k, v in event["payload"].items()])
        line = (f'{{"event_id":{_text(event["event_id"])},"type":{_text(event["type"])},'
                f'"at":{_text(event["at"])},"payload":{{{fields}}}}}')
    except TypeError:  # a key or value that is not a string (a count, a list): the encoder's own way
        return json_text(event)
    return line if encodes(line) else json_text(event)  # text no encoding holds: escaped, kept


def missing(town: Town) -> dict | None:
    """What the event log is still waiting for: ``{count, types, error}``, or None when nothing waits.

    Events a log refused stay in the outbox and are written once it accepts
    them; ``patrol`` shows this so nobody mistakes a quiet log for a quiet town.
    """
    count, kinds = outbox.waiting(town, outbox.EVENTS)
    if not count:
        return None
    return {"count": count, "types": kinds, "error": outbox.refusal(town, outbox.EVENTS)}


def read_events(town: Town, types: Iterable[str] | None = None) -> list[dict]:
    """Every event in the log (optionally only some types); a torn last line is skipped."""
    wanted = set(types) if types is not None else None
    outbox.flush_if_pending(town)
    return [event for event in all_objects(town.events_path, "event")
            if wanted is None or event.get("type") in wanted]


def recent_events(town: Town, count: int) -> list[dict]:
    """The last ``count`` events, oldest first, reading only the end of the log.

    Live views call this every second, so it never parses the whole log.  A
    torn last line (an append in progress) is not there yet; any other bad
    line is an error naming its line, as for :func:`read_events`.
    """
    outbox.flush_if_pending(town)
    return tail_objects(town.events_path, count, "event")
