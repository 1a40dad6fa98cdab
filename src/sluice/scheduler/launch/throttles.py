"""Throttles: ``scheduler throttle`` by hand, and a polecat's exit code asking for one.

A throttle holds new launches of one rig (or the town) until a time;
:func:`sluice.core.admission.admit` reads the running ones.  A polecat that
exits with ``scheduler.throttle_exit_code`` (its provider said "later"), from
any executor, throttles its rig for ``scheduler.throttle_for`` and its item
is queued again, without counting a failure (:func:`throttle_exit`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sluice.core.clock import MAX_DURATION, MAX_DURATION_TEXT, DurationTooLong, parse_duration
from sluice.core.items import parse_ts
from sluice.errors import UsageError
from sluice.scheduler.queue.requeue import queue_again
from sluice.scheduler.session import Session
from sluice.store.database import admission_state as kept
from sluice.store.database import events
from sluice.store.database.state import detect_actor

if TYPE_CHECKING:
    from sluice.store.files.town import Town
    from sluice.store.items.rigstore import Stores


def throttle(
    where: Town | Session,
    until: str | None = None,
    rig: str | None = None,
    reason: str = "",
    clear: bool = False,
    now: float | None = None,
    actor: str | None = None,
) -> dict:
    """``scheduler throttle``: hold new launches (of one rig or the town) until a time, or lift it.

    ``actor`` is who is asking (default: :func:`~sluice.store.database.state.detect_actor`).
    """
    session = Session.of(where, now=now)  # reads the config: a broken one is refused before anything else
    town, now = session.files, session.now
    if rig is not None:
        town.rig(rig)  # UnknownRig, naming the known ones (exit 1), as every command says it
    if clear:
        if until is not None:
            raise UsageError("clear and until do not go together", parameters=("clear", "until"))
        cleared = kept.clear_throttle(town, rig, now)
        if cleared:
            events.emit_event(town, events.THROTTLE_CLEARED, {"rig": rig, "by": actor or detect_actor()})
        return {"rig": rig, "cleared": cleared, "throttles": kept.throttle_rows(town, now)}
    if not until:
        raise UsageError("give until TIME|DURATION (e.g. 10m, 2026-12-01T09:00:00Z) or clear",
                         parameters=("until", "clear"))
    end = parse_until(until, now)
    entry = kept.set_throttle(town, end, rig, reason, actor or detect_actor(), now)
    payload = {"rig": rig, "until": entry["until"], "reason": entry["reason"], "by": entry["by"]}
    events.emit_event(town, events.THROTTLED, payload)
    return {**payload, "throttles": kept.throttle_rows(town, now)}


def parse_until(text: str, now: float) -> float:
    """``10m`` (a duration from now) or an ISO time; a time in the past, or too far ahead, is refused.

    Too far is more than :data:`~sluice.core.clock.MAX_DURATION` from now: a
    later end would be accepted here and break every cycle that reads it.
    """
    # How far ahead is judged on the duration itself, not as (now + d) - now: at epoch magnitudes
    # that sum rounds, and the longest accepted duration would be refused for some values of now.
    try:
        ahead = parse_duration(text)
        end = now + ahead
    except DurationTooLong as err:
        raise UsageError(f"until {text!r}: {err}", parameters=("until",)) from None
    except ValueError:
        stamp = parse_ts(text)
        if stamp is None:
            raise UsageError(f"until {text!r} is neither a duration (10m, 1h30m) nor an ISO time",
                             parameters=("until",)) from None
        end, ahead = stamp, stamp - now
    if ahead <= 0:
        raise UsageError(f"until {text!r} is not in the future", parameters=("until",))
    if ahead > MAX_DURATION:
        raise UsageError(f"until {text!r} is further ahead than sluice accepts"
                         f" ({MAX_DURATION_TEXT} from now)", parameters=("until",))
    return end


def throttle_exit(town: Town, stores: Stores, run: dict, params: dict, run_failures: int = 0,
                  now: float | None = None) -> dict:
    """A run that ended with ``scheduler.throttle_exit_code``: throttle its rig, queue its item again.

    The re-queue is not a dispatch failure (the polecat ran; the provider said
    "later").  It happens once per run: only the caller that recorded the
    run's end (:mod:`sluice.scheduler.launch.ends`) gets here, from any executor.
    """
    now = time.time() if now is None else now
    sched = town.config.scheduler
    until = now + sched.seconds("throttle_for")
    reason = f"polecat {run['polecat_id']} exited with {run['exit_code']}"
    kept.set_throttle(town, until, run["rig"], reason, "sluice", now)
    record = queue_again(town, stores, run["item_id"], run["rig"], params, 0, run_failures=run_failures)
    payload = {"item_id": run["item_id"], "rig": run["rig"], "polecat_id": run["polecat_id"],
               "until": kept.utc(until), "context_id": record["id"] if record else None}
    events.emit_event(town, events.THROTTLED, payload)
    return payload
