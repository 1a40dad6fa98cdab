"""The scheduler's own state — the pause flag and the last dispatch — and the daemon's heartbeat.

Both are rows of the town database (``scheduler_state``, ``heartbeat``;
docs/formats.md).  Gas Town rewrote its state file without a lock,
reloading it at the end of a cycle; a pause issued in between could be
lost (its issue #4475).  Here every change is a read-modify-write inside
one write transaction, and each writer sets only its own columns: the
dispatcher records ``last_dispatch_*`` and never writes ``paused``, so a
pause issued during a cycle survives it.  Every change advances the
``state`` version in its transaction, so what is computed from the state
knows when it moved.

No row is the zero state (not paused, never dispatched).

The daemon writes its heartbeat every tick, and the forecast and
``scheduler status`` read its interval and last tick without loading the
daemon.  A heartbeat advances the ``heartbeat`` version, not ``state``: a
tick that changes nothing else leaves what depends on the state standing.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING

from sluice.core.clock import iso
from sluice.core.records import RecordError, SchedulerState, json_object
from sluice.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.store.files.town import Town

#: The version every change of the scheduler state advances (:meth:`Database.advance`).
VERSION = "state"
#: The version every heartbeat advances.
HEARTBEAT_VERSION = "heartbeat"

_SELECT = ("SELECT paused, paused_by, paused_at, last_dispatch_at, last_dispatch_count, extra"
           " FROM scheduler_state WHERE id = 1")


def load_state(town: Town) -> SchedulerState:
    return _state(town.db.one(_SELECT))


def _state(row: tuple | None) -> SchedulerState:
    if row is None:
        return SchedulerState()
    paused, paused_by, paused_at, at, count, extra = row
    return SchedulerState(paused=bool(paused), paused_by=paused_by, paused_at=paused_at, last_dispatch_at=at,
                          last_dispatch_count=int(count), extra=json.loads(extra) if extra else {})


def _save(conn: sqlite3.Connection, state: SchedulerState) -> None:
    values = (int(state.paused), state.paused_by, state.paused_at, state.last_dispatch_at,
              int(state.last_dispatch_count), json.dumps(state.extra) if state.extra else None)
    conn.execute(
        "INSERT INTO scheduler_state (id, paused, paused_by, paused_at, last_dispatch_at,"
        " last_dispatch_count, extra) VALUES (1, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET paused = excluded.paused, paused_by = excluded.paused_by,"
        " paused_at = excluded.paused_at, last_dispatch_at = excluded.last_dispatch_at,"
        " last_dispatch_count = excluded.last_dispatch_count, extra = excluded.extra", values)


def update_state(town: Town, change: Callable[[SchedulerState], SchedulerState | None]
                 ) -> tuple[SchedulerState, bool]:
    """Read the state inside a write transaction, apply ``change`` and save; the state and whether it was
    written (None from ``change``: no write).

    The read and the write are one transaction, so no other writer's change
    falls between them.
    """
    with town.db.change() as conn:
        current = _state(conn.execute(_SELECT).fetchone())
        updated = change(current)
        if updated is None:
            return current, False
        _save(conn, updated)
        town.db.advance(VERSION)
    return updated, True


def detect_actor() -> str:
    """Who is acting: ``SLUICE_ACTOR`` if set, else the login name."""
    actor = os.environ.get("SLUICE_ACTOR")
    if actor:
        return actor
    import getpass  # only a pause asks who is acting

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        return "unknown"


def set_paused(town: Town, actor: str | None = None) -> tuple[SchedulerState, bool]:
    """Pause dispatch; returns the state and whether this call changed it."""

    def change(state: SchedulerState) -> SchedulerState | None:
        if state.paused:
            return None
        return state.copy(paused=True, paused_by=actor or detect_actor(), paused_at=iso())

    return update_state(town, change)


def set_resumed(town: Town) -> tuple[SchedulerState, bool]:
    """Resume dispatch; ``paused_by`` and ``paused_at`` are cleared."""
    return update_state(town, lambda state: state.copy(paused=False, paused_by=None, paused_at=None)
                        if state.paused else None)


def record_dispatch(town: Town, count: int, at: str | None = None) -> SchedulerState:
    """Record a cycle that launched ``count`` polecats (per cycle, not cumulative).

    Sets the two ``last_dispatch_*`` columns alone and returns the state as it
    is after them, read in the same transaction: a pause issued while the
    cycle ran is in it, and stays.
    """
    with town.db.change(VERSION) as conn:
        conn.execute(
            "INSERT INTO scheduler_state (id, last_dispatch_at, last_dispatch_count) VALUES (1, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET last_dispatch_at = excluded.last_dispatch_at,"
            " last_dispatch_count = excluded.last_dispatch_count", (at or iso(), int(count)))
        return _state(conn.execute(_SELECT).fetchone())


# -- the daemon's heartbeat ------------------------------------------------------------------------

_BEAT = ("pid", "started_at", "interval", "ticks", "last_tick_at", "last_result", "stopped_at")


def read_heartbeat(town: Town) -> dict | None:
    """The heartbeat as the daemon last wrote it, or None when no daemon ever wrote one."""
    row = town.db.one("SELECT pid, started_at, tick_interval, ticks, last_tick_at, last_result, stopped_at"
                      " FROM heartbeat WHERE id = 1")
    if row is None:
        return None
    beat = dict(zip(_BEAT, row, strict=True))
    beat["last_result"] = json.loads(beat["last_result"]) if beat["last_result"] is not None else None
    if beat["stopped_at"] is None:
        del beat["stopped_at"]
    return beat


def write_heartbeat(town: Town, beat: dict) -> None:
    """Replace the heartbeat with ``beat`` (its keys as :func:`read_heartbeat` gives them)."""
    values = _beat_values(beat)
    with town.db.change(HEARTBEAT_VERSION) as conn:
        _insert_beat(conn, values)


def _beat_values(beat: dict) -> tuple:
    def number(key: str, kind: type) -> float | int | None:
        value = beat.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return None
        return kind(value) if kind is float or value == int(value) else None

    def text(key: str) -> str | None:
        value = beat.get(key)
        return value if isinstance(value, str) else None

    result = beat.get("last_result")
    return (number("pid", int), text("started_at"), number("interval", float), number("ticks", int) or 0,
            text("last_tick_at"), json.dumps(result) if result is not None else None, text("stopped_at"))


def _insert_beat(conn: sqlite3.Connection, values: tuple) -> None:
    conn.execute("DELETE FROM heartbeat")
    conn.execute("INSERT INTO heartbeat (id, pid, started_at, tick_interval, ticks, last_tick_at,"
                 " last_result, stopped_at) VALUES (1, ?, ?, ?, ?, ?, ?, ?)", values)


# -- a town made by sluice 0.1 ---------------------------------------------------------------------


def migrate_from_files(town: Town, conn: sqlite3.Connection) -> list[Path]:
    """Bring sluice 0.1's ``runtime/scheduler-state.json`` and ``runtime/daemon.json`` into the tables.

    Runs inside the migration's transaction on ``conn`` (it neither begins
    nor commits).  The files are read as 0.1 read them: a missing one is the
    zero state, a state file that is not a JSON object of the right types is
    a ConfigError naming it (the migration then changes nothing), and a
    heartbeat that is not a JSON object is no heartbeat.  Returns the files
    that were there, for the caller to move aside; nothing is deleted here.
    """
    moved = []
    path = town.runtime / "scheduler-state.json"
    text = _read(path, "cannot read the scheduler state")
    if text is not None:
        data = json_object(path, text)
        try:
            state = SchedulerState.from_dict(data)
        except RecordError as err:
            raise ConfigError(f"{path}: {err}") from None
        _save(conn, state)
        moved.append(path)
    beat_path = town.runtime / "daemon.json"
    text = _read(beat_path, "cannot read the daemon's heartbeat")
    if text is not None:
        try:
            beat = json.loads(text)
        except (ValueError, RecursionError):
            beat = None
        values = _beat_values(beat) if isinstance(beat, dict) else None
        if values is not None and values[0] is not None:  # a heartbeat names its daemon's pid
            _insert_beat(conn, values)
        moved.append(beat_path)
    return moved


def _read(path: Path, what: str) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: {what} ({err})") from None
