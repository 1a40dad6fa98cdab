"""What admission remembers between cycles: token spend, throttles, circuit-broken items.

Three small JSON files under ``.sluice/runtime/`` (docs/formats.md), each
rewritten atomically under its own lock by a read-modify-write of the fresh
file, as :mod:`sluice.store.state` does for the pause flag:

* ``budget.json`` — one entry per launch in the budget window (when, rig,
  item, context, polecat, tokens); a polecat's reported usage replaces the
  estimate of its entry.  Entries older than the window are dropped on
  every write, so the file stays as small as the window.
* ``throttles.json`` — at most one throttle for the whole town and one per
  rig, each with its end, reason and who set it.  Ended ones are dropped on
  every write and ignored on every read.
* ``breaker.json`` — every circuit-broken item: failures, last error, when it
  broke, how often it has broken (each trip doubles the cooldown), when it
  may be tried again and the sling parameters to queue it with.

A missing file is the empty state; a corrupt one is a ConfigError naming it.
Times are stored as UTC text and as epoch seconds (``*_ts``) so readers need
no parsing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sluice.core.admission import Spend, Throttle
from sluice.core.clock import iso_epoch
from sluice.core.records import json_object
from sluice.errors import ConfigError
from sluice.store import fsutil

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.store.town import Town

BUDGET = "budget"
THROTTLES = "throttles"
BREAKER = "breaker"
#: The longest a breaker cooldown grows by doubling.
MAX_COOLDOWN = 24 * 3600.0


def utc(epoch: float) -> str:
    return iso_epoch(epoch)


def _path(town: Town, name: str) -> Path:
    return town.runtime / f"{name}.json"


def paths(town: Town) -> tuple[Path, ...]:
    """The files admission remembers between cycles in (what a reader of the queue depends on)."""
    return tuple(_path(town, name) for name in (BUDGET, THROTTLES, BREAKER))


def read(town: Town, name: str) -> dict[str, Any]:
    path = _path(town, name)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read ({err})") from None
    return json_object(path, text)


def update(town: Town, name: str, change: Callable[[dict[str, Any]], Any]) -> Any:
    """Re-read ``name`` under its lock, let ``change`` edit it in place, write it back."""
    with fsutil.file_lock(town.lock_path(name)):
        data = read(town, name)
        result = change(data)
        fsutil.atomic_write_json(_path(town, name), data)
    return result


# -- token budget ---------------------------------------------------------------------------


def record_launch(
    town: Town,
    *,
    rig: str,
    item_id: str,
    context_id: str,
    polecat_id: str,
    tokens: int,
    now: float,
    window: float,
) -> str:
    """Charge one launch's estimated tokens to the window; returns the charge's id.

    The launch path charges *before* it asks the executor, with no polecat
    yet: a budget must hold even when the disk refuses a write or the
    process dies right after the polecat starts, so a launch whose charge
    cannot be written is not made.  :func:`name_charge` adds the polecat
    once it runs; :func:`withdraw_charge` takes the charge back when the
    launch did not happen.
    """
    charge = os.urandom(6).hex()

    def change(data: dict) -> None:
        launches = [e for e in data.get("launches", []) if e.get("at_ts", 0) > now - window]
        launches.append(
            {
                "charge": charge,
                "at": utc(now),
                "at_ts": now,
                "rig": rig,
                "item_id": item_id,
                "context_id": context_id,
                "polecat_id": polecat_id,
                "tokens": int(tokens),
                "reported": False,
            }
        )
        data["launches"] = launches

    update(town, BUDGET, change)
    return charge


def name_charge(town: Town, charge: str, polecat_id: str, started: float) -> None:
    """Put the polecat that started on its launch's charge, so its reported usage finds it.

    The charge moves to ``started`` (when the executor said the polecat
    runs), so it leaves the window a window after the run began, not after
    the moment before its launch: never earlier than a reader of the run's
    start would expect.
    """

    def change(data: dict) -> None:
        for entry in data.get("launches", []):
            if entry.get("charge") == charge:
                entry["polecat_id"] = polecat_id
                if started > entry.get("at_ts", 0):
                    entry["at"], entry["at_ts"] = utc(started), started

    update(town, BUDGET, change)


def withdraw_charge(town: Town, charge: str) -> None:
    """Take back the charge of a launch that did not happen."""

    def change(data: dict) -> None:
        data["launches"] = [e for e in data.get("launches", []) if e.get("charge") != charge]

    update(town, BUDGET, change)


def report_usage(town: Town, polecat_id: str, tokens: int, item_id: str | None = None) -> dict | None:
    """Replace the estimate of ``polecat_id``'s launch (or ``item_id``'s newest) with what it really used.

    Returns the entry, or None when the launch is not in the window.
    """

    def change(data: dict) -> dict | None:
        for entry in reversed(data.get("launches", [])):
            if entry.get("polecat_id") == polecat_id or (
                item_id is not None and entry.get("item_id") == item_id
            ):
                entry["tokens"] = int(tokens)
                entry["reported"] = True
                return dict(entry)
        return None

    return update(town, BUDGET, change)


def spend(town: Town, now: float, window: float) -> Spend:
    """Tokens charged inside the window ending at ``now``, town-wide and per rig.

    A charge stamped after ``now`` means the wall clock was set back since;
    it counts until ``now`` is a window past it or a window before it, so a
    clock set back by a day holds the budget for at most two windows, not a
    day and a window.
    """
    total, rigs = 0, {}
    for entry in read(town, BUDGET).get("launches", []):
        if now - window < entry.get("at_ts", 0) <= now + window:
            tokens = int(entry.get("tokens", 0))
            total += tokens
            rigs[entry.get("rig", "")] = rigs.get(entry.get("rig", ""), 0) + tokens
    return Spend(total, rigs)


def spend_moves_at(town: Town, now: float, window: float) -> float | None:
    """The first moment after ``now`` a charge enters or leaves :func:`spend`'s window (None: never).

    A charge counts while ``now`` lies in ``(at - window, at + window]``
    (see :func:`spend`), so the answer moves only at those ends: what a
    kept answer that depends on the spend may not outlive.
    """
    ends = []
    for entry in read(town, BUDGET).get("launches", []):
        at = entry.get("at_ts", 0)
        if not isinstance(at, (int, float)):
            continue
        ends += [end for end in (at - window, at + window) if end > now]
    return min(ends, default=None)


# -- throttles ------------------------------------------------------------------------------


def set_throttle(town: Town, until: float, rig: str | None, reason: str, by: str, now: float) -> dict:
    """Hold new launches (of ``rig``, or the whole town) until ``until``; a later end never shortens."""

    def change(data: dict) -> dict:
        _drop_ended(data, now)
        key = rig or ""
        current = data.setdefault("throttles", {}).get(key)
        if current is not None and current["until_ts"] >= until:
            return current
        entry = {
            "rig": rig,
            "until": utc(until),
            "until_ts": until,
            "reason": reason,
            "by": by,
            "at": utc(now),
            "at_ts": now,
        }
        data["throttles"][key] = entry
        return entry

    return update(town, THROTTLES, change)


def clear_throttle(town: Town, rig: str | None, now: float) -> bool:
    def change(data: dict) -> bool:
        _drop_ended(data, now)
        return data.setdefault("throttles", {}).pop(rig or "", None) is not None

    return update(town, THROTTLES, change)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _holds(entry: dict, now: float) -> bool:
    """Whether a throttle holds at ``now``: before its end, and never longer than it was set for.

    A ``now`` before the moment it was set means the wall clock was set back
    since; it then holds only while ``now`` is within its own length of that
    moment, so a clock set back by a day lifts a 5-minute throttle instead of
    holding the rig for a day and five minutes.
    """
    until, set_at = _number(entry.get("until_ts")), _number(entry.get("at_ts"))
    if until is None or until <= now:
        return False
    return set_at is None or now >= set_at - (until - set_at)


def _drop_ended(data: dict, now: float) -> None:
    data["throttles"] = {k: v for k, v in data.get("throttles", {}).items() if _holds(v, now)}


def throttles(town: Town, now: float) -> list[Throttle]:
    """The throttles still running at ``now``."""
    out = []
    for entry in read(town, THROTTLES).get("throttles", {}).values():
        if _holds(entry, now):
            out.append(
                Throttle(until=float(entry["until_ts"]), rig=entry.get("rig"), reason=entry.get("reason", ""))
            )
    return sorted(out, key=lambda t: (t.rig or "", t.until))


def throttle_rows(town: Town, now: float) -> list[dict]:
    rows = [v for v in read(town, THROTTLES).get("throttles", {}).values() if _holds(v, now)]
    return [
        {k: v for k, v in row.items() if k not in ("until_ts", "at_ts")}
        for row in sorted(rows, key=lambda r: r["rig"] or "")
    ]


# -- circuit breaker ------------------------------------------------------------------------


def cooldown_for(trips: int, base: float) -> float:
    """The wait after the ``trips``-th break: ``base``, doubling per trip, at most 24 h; 0 = forever."""
    if base <= 0:
        return 0.0
    return min(base * 2.0 ** min(max(trips - 1, 0), 64), MAX_COOLDOWN)


def trip(
    town: Town,
    *,
    item_id: str,
    rig: str,
    failures: int,
    last_error: str,
    sling: dict,
    base: float,
    now: float,
    run_failures: int = 0,
    broken_by: str = "launches",
) -> dict:
    """Book a break of ``item_id``: one more trip, a longer cooldown, the next attempt.

    ``broken_by`` says whether its launches or its runs failed (``failures``
    counts failed launches, ``run_failures`` failed runs).
    """

    def change(data: dict) -> dict:
        items = data.setdefault("items", {})
        previous = items.get(item_id, {})
        trips = int(previous.get("trips", 0)) + 1
        cooldown = cooldown_for(trips, base)
        entry = {
            "item_id": item_id,
            "rig": rig,
            "failures": failures,
            "run_failures": run_failures,
            "broken_by": broken_by,
            "last_error": last_error,
            "broken_at": utc(now),
            "trips": trips,
            "cooldown": cooldown,
            "next_attempt_at": utc(now + cooldown) if cooldown else None,
            "next_attempt_ts": now + cooldown if cooldown else None,
            "half_open": False,
            "sling": sling,
        }
        items[item_id] = entry
        return entry

    return update(town, BREAKER, change)


def broken(town: Town) -> dict[str, dict]:
    """Every item the breaker holds, by item id (half-open ones included)."""
    return dict(read(town, BREAKER).get("items", {}))


def due(town: Town, now: float) -> list[dict]:
    """Broken items whose cooldown has passed and that are not already being tried."""
    return [
        e
        for e in broken(town).values()
        if not e.get("half_open") and e.get("next_attempt_ts") is not None and e["next_attempt_ts"] <= now
    ]


def mark_half_open(town: Town, item_id: str) -> None:
    def change(data: dict) -> None:
        entry = data.get("items", {}).get(item_id)
        if entry is not None:
            entry["half_open"] = True

    update(town, BREAKER, change)


def heal(town: Town, item_id: str) -> dict | None:
    """Forget ``item_id``'s breaker record (it launched, or a person reset it)."""

    def change(data: dict) -> dict | None:
        return data.get("items", {}).pop(item_id, None)

    if item_id not in broken(town):  # the common case costs no write
        return None
    return update(town, BREAKER, change)
