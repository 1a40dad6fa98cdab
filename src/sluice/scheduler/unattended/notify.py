"""Notifications: run ``scheduler.notify`` on the events an operator wants to hear about.

The notifier is an argv template (``scheduler.notify``), never a shell
command line: each element has ``{event}``, ``{item_id}``, ``{rig}`` and
``{town}`` substituted on its own, and the event goes to its stdin as one
JSON document ``{event, type, event_id, at, town, payload}``.  It runs for the
events named in ``scheduler.notify_on`` (default:
:data:`~sluice.core.models.DEFAULT_NOTIFY_ON`, all but ``polecat-timed-out``), chosen from these:

=====================  ============================================
notify name            event type in ``events/scheduler.jsonl``
=====================  ============================================
``circuit-broken``     ``CircuitBroken``
``budget-exhausted``   ``BudgetExhausted`` (a token budget of ``scheduler status`` became spent)
``throttled``          ``Throttled``
``queue-drained``      ``QueueDrained`` (a daemon tick launched the last queued item)
``polecat-timed-out``  ``PolecatTimedOut``
``run-failed``         ``PolecatExited`` with outcome ``failed``
``run-timed-out``      ``PolecatExited`` with outcome ``timed-out``
``run-vanished``       ``PolecatExited`` with outcome ``vanished``
=====================  ============================================

**Where it runs, and why there.**  The daemon calls :func:`notify_new_events`
after each tick's cycle, in its own process: the event log is read from a
cursor (the log's inode and a byte offset, the ``notify_cursor`` row of the
town database's ``meta`` table), so an event written by anyone — the cycle
subprocess, the stall check, a manual ``scheduler run`` — is announced once,
and a notifier can never slow or break a dispatch cycle.  The cursor is
advanced in one commit after the tick's notifiers ran: a daemon killed
among them announces those events again when it restarts, never none.
Each run is bounded by ``scheduler.notify_timeout`` (the notifier's process
group is killed then) and each tick announces at most :data:`PER_TICK`
events; the rest wait for the next tick, so nothing is lost and a tick stays
bounded.  A failure is returned as a line for the daemon's log, never
raised.  A daemon that starts on a town without a cursor starts at the log's
end: history is not replayed.  (A cursor an older sluice left in
``runtime/notify-cursor.json`` is taken over once, then deleted.)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from typing import TYPE_CHECKING

from sluice.core.recordclass import recordclass
from sluice.store.database import events

if TYPE_CHECKING:
    from sluice.store.files.town import Town

EVENT_TYPES = {
    events.CIRCUIT_BROKEN: "circuit-broken",
    events.BUDGET_EXHAUSTED: "budget-exhausted",
    events.THROTTLED: "throttled",
    events.QUEUE_DRAINED: "queue-drained",
    events.POLECAT_TIMED_OUT: "polecat-timed-out",
}
#: ``PolecatExited`` is announced by its outcome; an ``ok``, ``stopped`` or ``throttled`` end is not.
RUN_OUTCOMES = {"failed": "run-failed", "timed-out": "run-timed-out", "vanished": "run-vanished"}
PER_TICK = 10


def notify_name(event: dict) -> str | None:
    """The ``scheduler.notify_on`` name of an event, None when no one can choose it."""
    kind = event.get("type", "")
    if kind == events.POLECAT_EXITED:
        payload = event.get("payload") if isinstance(event.get("payload"), dict) else {}
        return RUN_OUTCOMES.get(payload.get("outcome"))
    return EVENT_TYPES.get(kind)
PLACEHOLDERS = ("event", "item_id", "rig", "town")


@recordclass
class Outcome:
    event: str
    event_id: str
    ok: bool
    detail: str = ""

    def line(self) -> str:
        status = "sent" if self.ok else f"failed: {self.detail}"
        return f"notify {self.event} ({self.event_id[:8]}): {status}"


CURSOR_KEY = "notify_cursor"  # its row in the town database's ``meta`` table
#: Where sluice before the town database's cursor kept it (read once, then deleted).
OLD_CURSOR = "notify-cursor.json"


def _log_identity(town: Town) -> tuple[int, int] | None:
    try:
        st = os.stat(town.events_path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size


def _write_cursor(town: Town, inode: int, offset: int) -> None:
    with town.db.transaction() as conn:
        conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)"
                     " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                     (CURSOR_KEY, json.dumps({"inode": inode, "offset": offset})))


def _old_cursor(town: Town) -> tuple[int, int] | None:
    try:
        data = json.loads((town.runtime / OLD_CURSOR).read_text(encoding="utf-8"))
        return int(data["inode"]), int(data["offset"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def start_cursor(town: Town) -> None:
    """Begin at the log's end unless a cursor exists (a restarted daemon resumes where it stopped)."""
    if town.db.one("SELECT 1 FROM meta WHERE key = ?", (CURSOR_KEY,)) is not None:
        return
    old = town.runtime / OLD_CURSOR
    inode, offset = _old_cursor(town) or _log_identity(town) or (0, 0)
    _write_cursor(town, inode, offset)
    with contextlib.suppress(FileNotFoundError):
        old.unlink()


def _read_cursor(town: Town) -> tuple[int, int]:
    row = town.db.one("SELECT value FROM meta WHERE key = ?", (CURSOR_KEY,))
    try:
        data = json.loads(row[0])
        return int(data["inode"]), int(data["offset"])
    except (TypeError, ValueError, KeyError):
        return 0, 0


def _pending(town: Town) -> tuple[int, list[tuple[dict, int]]]:
    """Where reading began, and the events after it, each with the offset just past its line.

    A torn last line (an append in progress) is left for the next call.
    """
    identity = _log_identity(town)
    if identity is None:
        return 0, []
    inode, offset = _read_cursor(town)
    if inode != identity[0] or offset > identity[1]:
        offset = 0  # the log was replaced or cut: read it from the start
    with open(town.events_path, "rb") as fh:
        fh.seek(offset)
        data = fh.read(identity[1] - offset)
    out = []
    position = offset
    for raw in data[: data.rfind(b"\n") + 1].split(b"\n")[:-1]:
        position += len(raw) + 1
        try:
            event = json.loads(raw)
        except ValueError:
            event = None  # a bad line is the event log's problem (readers name it); not a notification
        out.append((event if isinstance(event, dict) else {}, position))
    return offset, out


def _argv(template: list[str], values: dict[str, str]) -> list[str]:
    out = []
    for part in template:
        for name in PLACEHOLDERS:
            part = part.replace("{" + name + "}", values.get(name, ""))
        out.append(part)
    return out


def kill_group(process: subprocess.Popen) -> None:
    """Kill a child's process group (a notifier's, a daemon's cycle) and wait for it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.communicate()


def run_notifier(town: Town, template: list[str], event: dict, name: str, timeout: float) -> Outcome:
    """Run the notifier once for ``event``; its outcome, never an exception."""
    payload = event.get("payload") or {}
    document = {"event": name, "type": event.get("type"), "event_id": event.get("event_id", ""),
                "at": event.get("at"), "town": str(town.root), "payload": payload}
    values = {"event": name, "item_id": str(payload.get("item_id") or ""),
              "rig": str(payload.get("rig") or ""), "town": str(town.root)}
    argv = _argv(template, values)
    outcome = Outcome(name, str(event.get("event_id", "")), False)
    try:
        process = subprocess.Popen(argv, cwd=town.root, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, start_new_session=True)
    except OSError as err:
        outcome.detail = f"cannot run {argv[0]!r}: {err.strerror or err}"
        return outcome
    try:
        data = json.dumps(document, ensure_ascii=False).encode("utf-8")
        _, err = process.communicate(data, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(process)
        outcome.detail = f"still running after {timeout:g}s; killed"
        return outcome
    outcome.ok = process.returncode == 0
    if not outcome.ok:
        lines = [line for line in err.decode("utf-8", "replace").splitlines() if line.strip()]
        outcome.detail = f"exit status {process.returncode}" + (f": {lines[-1][:200]}" if lines else "")
    return outcome


def notify_new_events(town: Town) -> list[Outcome]:
    """Announce the chosen events written since the cursor (at most :data:`PER_TICK`); advance it."""
    scheduler = town.load_config().scheduler
    offset, pending = _pending(town)
    if not pending:
        return []
    identity = _log_identity(town) or (0, 0)
    template, wanted = list(scheduler.notify), set(scheduler.notify_on)
    timeout = scheduler.seconds("notify_timeout") or 10.0
    outcomes: list[Outcome] = []
    for event, end in pending:
        name = notify_name(event)
        if template and name in wanted:
            if len(outcomes) >= PER_TICK:
                break  # the rest wait for the next tick
            outcomes.append(run_notifier(town, template, event, name, timeout))
        offset = end
    _write_cursor(town, identity[0], offset)
    return outcomes
