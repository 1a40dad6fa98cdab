"""``runtime/scheduler-state.json``: the pause flag and the last dispatch.

Gas Town rewrote this file without a lock, reloading it at the end of a
cycle; a pause issued in between could be lost (its issue #4475).  Here
every change is a read-modify-write of the *fresh* file under the state
lock, and each writer only touches its own keys: the dispatcher records
``last_dispatch_*`` and never writes ``paused``, so a pause issued during a
cycle survives it.

A missing file is the zero state (not paused, never dispatched); a corrupt
one is a :class:`~sluice.errors.ConfigError` naming the file.

The daemon's heartbeat (``runtime/daemon.json``) is read here too: the
daemon writes it, and the forecast and ``scheduler status`` read its
interval and last tick without loading the daemon.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from sluice.core.clock import iso
from sluice.core.records import RecordError, SchedulerState, json_object
from sluice.errors import ConfigError
from sluice.store import fsutil

if TYPE_CHECKING:
    from sluice.store.town import Town


def load_state(town: Town) -> SchedulerState:
    path = town.state_path
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return SchedulerState()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read the scheduler state ({err})") from None
    data = json_object(path, text)
    try:
        return SchedulerState.from_dict(data)
    except RecordError as err:
        raise ConfigError(f"{path}: {err}") from None


def heartbeat_path(town: Town):
    """The daemon's heartbeat (``runtime/daemon.json``): its pid, interval and last tick."""
    return town.runtime / "daemon.json"


def read_heartbeat(town: Town) -> dict | None:
    """The heartbeat as the daemon last wrote it, or None when there is none (or it is not JSON)."""
    try:
        return json.loads(heartbeat_path(town).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None


def save_state(town: Town, state: SchedulerState) -> None:
    """Write the whole state atomically (callers changing it use :func:`update_state`)."""
    fsutil.atomic_write_json(town.state_path, state.to_dict(exclude_none=True))


def update_state(town: Town, change: Callable[[SchedulerState], SchedulerState | None]) -> SchedulerState:
    """Re-read the state under the lock, apply ``change``, save; None from ``change`` means no write."""
    with fsutil.file_lock(town.lock_path("state")):
        current = load_state(town)
        updated = change(current.copy())
        if updated is None:
            return current
        save_state(town, updated)
        return updated


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
    changed = []

    def change(state: SchedulerState) -> SchedulerState | None:
        if state.paused:
            return None
        state.paused = True
        state.paused_by = actor or detect_actor()
        state.paused_at = iso()
        changed.append(True)
        return state

    return update_state(town, change), bool(changed)


def set_resumed(town: Town) -> tuple[SchedulerState, bool]:
    """Resume dispatch; ``paused_by`` and ``paused_at`` disappear from the file."""
    changed = []

    def change(state: SchedulerState) -> SchedulerState | None:
        if not state.paused:
            return None
        state.paused = False
        state.paused_by = None
        state.paused_at = None
        changed.append(True)
        return state

    return update_state(town, change), bool(changed)


def record_dispatch(town: Town, count: int, at: str | None = None) -> SchedulerState:
    """Record a cycle that launched ``count`` polecats (per cycle, not cumulative)."""

    def change(state: SchedulerState) -> SchedulerState:
        state.last_dispatch_at = at or iso()
        state.last_dispatch_count = count
        return state

    return update_state(town, change)
