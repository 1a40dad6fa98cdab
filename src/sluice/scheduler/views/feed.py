"""``sluice feed``: the event log as a stream a person reads, one line per event in words.

``14:02:11 api-3f9c launched on api as pc-k2 (score 4.1)``,
``14:09:40 api-3f9c failed after 7m29s (exit 3)``.  Each row is
``{at, type, text, event}``: the time, the event type, the sentence and the
event itself, so ``--json`` keeps everything the log holds.  Item ids, rig
names and error texts are shown through :func:`sluice.core.text.printable`
(untrusted text never reaches the terminal raw).

:func:`follow` tails the log from its end (or from a byte offset), reading
only what was appended, so ``feed --follow`` costs nothing while the town is
quiet.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from sluice.core.clock import format_duration
from sluice.core.items import parse_ts
from sluice.core.text import printable
from sluice.errors import UsageError
from sluice.store.database import events

if TYPE_CHECKING:
    from sluice.store.files.town import Town


def _p(value) -> str:
    return printable(str(value)) if value not in (None, "") else "-"


def _after(seconds) -> str:
    return f" after {format_duration(round(seconds))}" if isinstance(seconds, (int, float)) else ""


def _exited(p: dict) -> str:
    code = p.get("exit_code")
    status = f" (exit {code})" if code is not None else ""
    words = {"ok": "finished", "failed": "failed", "throttled": "asked for a throttle",
             "timed-out": "timed out", "stopped": "was stopped", "vanished": "vanished"}
    word = words.get(p.get("outcome"), f"ended {_p(p.get('outcome'))}")
    after = _after(p.get("runtime_seconds"))
    return f"{_p(p.get('item_id'))} {word}{after}{status} [{_p(p.get('polecat_id'))}]"


def _of(p: dict) -> str:
    return f" of {_p(p['item_id'])}" if p.get("item_id") else ""


def _where(p: dict) -> str:
    return f"rig {_p(p['rig'])}" if p.get("rig") else "the town"


def _dispatched(p: dict) -> str:
    score = f" (score {p['score']:g})" if isinstance(p.get("score"), (int, float)) else ""
    how = " directly" if p.get("direct") else ""
    return f"{_p(p.get('item_id'))} launched{how} on {_p(p.get('rig'))} as {_p(p.get('polecat_id'))}{score}"


_WORDS: dict[str, Callable[[dict], str]] = {
    events.ENQUEUED: lambda p: f"{_p(p.get('item_id'))} queued on {_p(p.get('rig'))}",
    events.DISPATCHED: _dispatched,
    events.DISPATCH_FAILED: lambda p: (f"{_p(p.get('item_id'))} failed to launch"
                                       f" ({p.get('failures')} so far): {_p(p.get('error'))}"),
    events.CIRCUIT_BROKEN: lambda p: (f"{_p(p.get('item_id'))} circuit-broken after"
                                      f" {p.get('run_failures') or p.get('failures')} failed"
                                      f" {'runs' if p.get('broken_by') == 'runs' else 'launches'}"),
    events.CONTEXT_CLOSED: lambda p: f"{_p(p.get('item_id'))} left the queue ({_p(p.get('reason'))})",
    events.PAUSED: lambda p: f"scheduler paused by {_p(p.get('by'))}",
    events.RESUMED: lambda p: "scheduler resumed",
    events.CLEARED: lambda p: f"queue cleared ({p.get('count')} context(s){_of(p)})",
    events.THROTTLED: lambda p: (f"{_where(p)} throttled until {_p(p.get('until'))}"
                                 + (f" ({_p(p.get('reason'))})" if p.get("reason") else "")),
    events.THROTTLE_CLEARED: lambda p: f"throttle lifted on {_where(p)}",
    events.BUDGET_EXHAUSTED: lambda p: f"token budget spent ({p.get('spent')} tokens in the window)",
    events.REQUEUED: lambda p: f"{_p(p.get('item_id'))} queued again ({_p(p.get('why'))})",
    events.RIG_REMOVED: lambda p: f"rig {_p(p.get('rig'))} removed",
    events.POLECAT_TIMED_OUT: lambda p: (f"{_p(p.get('item_id'))} stopped after scheduler.polecat_timeout"
                                         f" ({_p(p.get('timeout'))}) [{_p(p.get('polecat_id'))}]"),
    events.POLECAT_EXITED: _exited,
    events.QUEUE_DRAINED: lambda p: "queue drained: the last queued item was launched",
    events.SCHEDULE_DECISION: lambda p: f"advice: {_p(p.get('node_id'))} next (score {p.get('score')})",
    events.SCHEDULE_SKIPPED: lambda p: f"advice: {_p(p.get('node_id'))} skipped (merge pressure)",
    events.MERGE_QUEUE_DEPTH: lambda p: (f"rig {_p(p.get('rig'))} merge queue: {p.get('queued')} queued,"
                                         f" {p.get('running')} running"),
}


def describe(event: dict) -> str:
    """One event in words (an unknown type shows its name and payload keys)."""
    payload = event.get("payload") if isinstance(event.get("payload"), dict) else {}
    words = _WORDS.get(event.get("type"))
    try:
        if words is not None:
            return words(payload)
    except (KeyError, TypeError, ValueError):  # a hand-edited payload: still a line
        pass
    return f"{_p(event.get('type'))} {_p(json.dumps(payload, sort_keys=True)[:200])}"


def row(event: dict) -> dict:
    return {"at": event.get("at"), "type": event.get("type"), "text": describe(event), "event": event}


def line(feed_row: dict) -> str:
    """``14:02:11 text``: the clock time (UTC) of the event and its sentence."""
    at = str(feed_row.get("at") or "")
    clock = at[11:19] if len(at) >= 19 else at or "--:--:--"
    return f"{clock} {feed_row['text']}"


def _kind_key(text: str) -> str:
    return text.replace("-", "").replace("_", "").lower()


def _matcher(rig: str | None, kind: str | None, since: float | None, now: float) -> Callable[[dict], bool]:
    wanted = None
    if kind is not None:
        known = {_kind_key(name): name for name in _WORDS}
        wanted = known.get(_kind_key(kind))
        if wanted is None:
            raise UsageError(f"kind {kind!r} is not an event type; known: {', '.join(sorted(_WORDS))}",
                             parameters=("kind",))
    cutoff = now - since if since is not None else None

    def keep(event: dict) -> bool:
        if wanted is not None and event.get("type") != wanted:
            return False
        payload = event.get("payload") if isinstance(event.get("payload"), dict) else {}
        if rig is not None and payload.get("rig") != rig:
            return False
        return not (cutoff is not None and (parse_ts(event.get("at")) or 0) < cutoff)

    return keep


def feed(town: Town, *, rig: str | None = None, kind: str | None = None, since: float | None = None,
         limit: int = 100, now: float | None = None) -> list[dict]:
    """The last ``limit`` matching events (0 = all) as feed rows, oldest first."""
    if limit < 0:
        raise UsageError(f"limit must be >= 0 (got {limit})", parameters=("limit",))
    keep = _matcher(rig, kind, since, time.time() if now is None else now)
    if rig is None and kind is None and since is None and limit:
        chosen = events.recent_events(town, limit)  # reads only the end of the log
    else:
        chosen = [e for e in events.read_events(town) if keep(e)]
        chosen = chosen[-limit:] if limit else chosen
    return [row(e) for e in chosen]


def log_end(town: Town) -> tuple[int, int | None]:
    """Where the event log ends now (size, inode): :func:`follow` starts there."""
    try:
        st = os.stat(town.events_path)
    except FileNotFoundError:
        return 0, None
    return st.st_size, st.st_ino


def follow(town: Town, *, rig: str | None = None, kind: str | None = None, poll: float = 0.5,
           stop: Callable[[], bool] | None = None, start: tuple[int, int | None] | None = None,
           seen: set[str] | None = None) -> Iterator[dict]:
    """Rows of the events appended after ``start`` (default: now), as they come, until ``stop()``.

    ``feed --follow`` takes ``start`` *before* it prints the last events and
    passes their ids as ``seen``: an event written in between is printed
    once, never lost.
    """
    keep = _matcher(rig, kind, None, time.time())
    path = town.events_path
    offset, inode = start if start is not None else log_end(town)
    seen = seen or set()
    while stop is None or not stop():
        try:
            st = os.stat(path)
        except FileNotFoundError:
            time.sleep(poll)
            continue
        if st.st_ino != inode or st.st_size < offset:
            offset, inode = 0, st.st_ino  # the log was replaced: read the new one from its start
        if st.st_size == offset:
            time.sleep(poll)
            continue
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read(st.st_size - offset)
        complete = data[: data.rfind(b"\n") + 1]
        offset += len(complete)
        for raw in complete.split(b"\n")[:-1]:
            try:
                event = json.loads(raw)
            except ValueError:
                continue  # the event log's own readers name a bad line; the feed goes on
            if isinstance(event, dict) and keep(event) and event.get("event_id") not in seen:
                yield row(event)
