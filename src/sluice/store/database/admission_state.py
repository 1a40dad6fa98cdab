"""What admission remembers between cycles: token spend, throttles, circuit-broken items.

Tables of the town database (``budget_charges``, ``throttles``, ``breaker``;
their schema in :mod:`sluice.store.database.db` says what a row holds and
when it goes, docs/formats.md), each change one write transaction that
advances the ``admission`` version (a caller's outer transaction makes it
part of a bigger change: a launch's intent with its budget charge).  Times
are epoch seconds (``*_ts``); the UTC text callers show is spelled from them.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from typing import TYPE_CHECKING, Any

from sluice.core.admission import Spend, Throttle
from sluice.core.clock import iso_epoch
from sluice.core.records import json_object
from sluice.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.store.files.town import Town

#: The version every change of admission's state advances (:meth:`Database.advance`).
VERSION = "admission"
#: The longest a breaker cooldown grows by doubling.
MAX_COOLDOWN = 24 * 3600.0


def utc(epoch: float) -> str:
    return iso_epoch(epoch)


# -- token budget ---------------------------------------------------------------------------

_CHARGE = "charge, at_ts, rig, item_id, context_id, polecat_id, tokens, reported"


def _charge_entry(row: tuple) -> dict:
    charge, at, rig, item_id, context_id, polecat_id, tokens, reported = row
    return {"charge": charge, "at": utc(at), "at_ts": at, "rig": rig, "item_id": item_id,
            "context_id": context_id, "polecat_id": polecat_id, "tokens": tokens, "reported": bool(reported)}


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
    launch did not happen.  The same transaction deletes the charges no
    window ending at ``now`` counts any more.
    """
    charge = os.urandom(6).hex()
    with town.db.change(VERSION) as conn:
        conn.execute("DELETE FROM budget_charges WHERE at_ts <= ?", (now - window,))
        conn.execute(f"INSERT INTO budget_charges ({_CHARGE}) VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
                     (charge, now, rig, item_id, context_id, polecat_id, int(tokens)))
    return charge


def name_charge(town: Town, charge: str, polecat_id: str, started: float) -> None:
    """Put the polecat that started on its launch's charge, so its reported usage finds it.

    The charge moves to ``started`` (when the executor said the polecat
    runs), so it leaves the window a window after the run began, not after
    the moment before its launch: never earlier than a reader of the run's
    start would expect.
    """
    with town.db.change(VERSION) as conn:
        conn.execute("UPDATE budget_charges SET polecat_id = ?,"
                     " at_ts = CASE WHEN at_ts < ? THEN ? ELSE at_ts END WHERE charge = ?",
                     (polecat_id, started, started, charge))


def withdraw_charge(town: Town, charge: str) -> None:
    """Take back the charge of a launch that did not happen."""
    with town.db.change(VERSION) as conn:
        conn.execute("DELETE FROM budget_charges WHERE charge = ?", (charge,))


def report_usage(town: Town, polecat_id: str, tokens: int, item_id: str | None = None) -> dict | None:
    """Replace the estimate of ``polecat_id``'s launch (or ``item_id``'s newest) with what it really used.

    Returns the charge, or None when no charge of the window is its launch's.
    """
    find = (f"SELECT {_CHARGE} FROM budget_charges WHERE polecat_id = ? OR item_id = ? ORDER BY seq DESC",
            (polecat_id, item_id))
    if town.db.one(*find) is None:  # no launch of the window: nothing to write
        return None
    with town.db.change(VERSION) as conn:
        row = conn.execute(*find).fetchone()
        if row is not None:
            conn.execute("UPDATE budget_charges SET tokens = ?, reported = 1 WHERE charge = ?",
                         (int(tokens), row[0]))
    return {**_charge_entry(row), "tokens": int(tokens), "reported": True} if row is not None else None


def spend(town: Town, now: float, window: float) -> Spend:
    """Tokens charged inside the window ending at ``now``, town-wide and per rig.

    A charge stamped after ``now`` means the wall clock was set back since;
    it counts until ``now`` is a window past it or a window before it, so a
    clock set back by a day holds the budget for at most two windows, not a
    day and a window.
    """
    rows = town.db.query("SELECT rig, SUM(tokens) FROM budget_charges WHERE at_ts > ? AND at_ts <= ?"
                         " GROUP BY rig", (now - window, now + window))
    rigs = {rig: int(total) for rig, total in rows}
    return Spend(sum(rigs.values()), rigs)


def charges(town: Town, now: float, window: float) -> list[dict]:
    """The charges a window ending at ``now`` or later counts, oldest first (the forecast replays them)."""
    rows = town.db.query(f"SELECT {_CHARGE} FROM budget_charges WHERE at_ts > ? ORDER BY at_ts, seq",
                         (now - window,))
    return [_charge_entry(row) for row in rows]


def exhausted(town: Town) -> bool:
    """Whether the budget held work at the last cycle that looked (:func:`note_exhausted`)."""
    row = town.db.one("SELECT exhausted FROM budget_spell WHERE id = 1")
    return bool(row and row[0])


def note_exhausted(town: Town, held: bool) -> bool:
    """Note whether the budget holds work now; True when a spell of holding starts with this call.

    Writes only when the answer changes, so a cycle the budget does not
    concern costs no write.
    """
    if exhausted(town) == held:
        return False
    with town.db.change(VERSION) as conn:
        row = conn.execute("SELECT exhausted FROM budget_spell WHERE id = 1").fetchone()
        was = bool(row and row[0])
        conn.execute("INSERT INTO budget_spell (id, exhausted) VALUES (1, ?)"
                     " ON CONFLICT (id) DO UPDATE SET exhausted = excluded.exhausted", (int(held),))
    return held and not was


# -- throttles ------------------------------------------------------------------------------

#: Whether a throttle holds at ``:now``: before its end, and never longer than it was set for.  A ``now``
#: before the moment it was set means the wall clock was set back since; it then holds only while ``now``
#: is within its own length of that moment, so a clock set back by a day lifts a 5-minute throttle
#: instead of holding the rig for a day and five minutes.
_HOLDS = "(until_ts > :now AND (at_ts IS NULL OR :now >= at_ts - (until_ts - at_ts)))"
_THROTTLE = "scope, until_ts, at_ts, reason, set_by"


def _throttle_entry(row: tuple) -> dict:
    scope, until, at, reason, by = row
    return {"rig": scope or None, "until": utc(until), "until_ts": until, "reason": reason, "by": by,
            "at": utc(at) if at is not None else None, "at_ts": at}


def set_throttle(town: Town, until: float, rig: str | None, reason: str, by: str, now: float) -> dict:
    """Hold new launches (of ``rig``, or the whole town) until ``until``; a later end never shortens."""
    with town.db.change(VERSION) as conn:
        conn.execute(f"DELETE FROM throttles WHERE NOT {_HOLDS}", {"now": now})
        row = conn.execute(f"SELECT {_THROTTLE} FROM throttles WHERE scope = ?", (rig or "",)).fetchone()
        if row is not None and row[1] >= until:
            return _throttle_entry(row)
        row = (rig or "", until, now, reason, by)
        conn.execute(f"INSERT INTO throttles ({_THROTTLE}) VALUES (?, ?, ?, ?, ?)"
                     " ON CONFLICT (scope) DO UPDATE SET until_ts = excluded.until_ts,"
                     " at_ts = excluded.at_ts, reason = excluded.reason, set_by = excluded.set_by", row)
    return _throttle_entry(row)


def clear_throttle(town: Town, rig: str | None, now: float) -> bool:
    """Lift the throttle of ``rig`` (None: the town's); False when none held."""
    with town.db.change(VERSION) as conn:
        conn.execute(f"DELETE FROM throttles WHERE NOT {_HOLDS}", {"now": now})
        return conn.execute("DELETE FROM throttles WHERE scope = ?", (rig or "",)).rowcount > 0


def _holding(town: Town, now: float) -> list[dict]:
    rows = town.db.query(f"SELECT {_THROTTLE} FROM throttles WHERE {_HOLDS} ORDER BY scope, until_ts",
                         {"now": now})
    return [_throttle_entry(row) for row in rows]


def throttles(town: Town, now: float) -> list[Throttle]:
    """The throttles still running at ``now``."""
    return [Throttle(until=float(t["until_ts"]), rig=t["rig"], reason=t["reason"])
            for t in _holding(town, now)]


def throttle_rows(town: Town, now: float) -> list[dict]:
    """The throttles still running at ``now`` as the views show them (rig, until, reason, by, at)."""
    return [{k: v for k, v in t.items() if k not in ("until_ts", "at_ts")} for t in _holding(town, now)]


# -- circuit breaker ------------------------------------------------------------------------

_BROKEN = ("item_id, rig, failures, run_failures, broken_by, last_error, broken_at, trips, cooldown,"
           " next_attempt_ts, half_open, sling")


def _broken_entry(row: tuple) -> dict:
    (item_id, rig, failures, run_failures, broken_by, last_error, broken_at, trips, cooldown, nxt, half_open,
     sling) = row
    return {"item_id": item_id, "rig": rig, "failures": failures, "run_failures": run_failures,
            "broken_by": broken_by, "last_error": last_error, "broken_at": broken_at, "trips": trips,
            "cooldown": cooldown, "next_attempt_at": utc(nxt) if nxt is not None else None,
            "next_attempt_ts": nxt, "half_open": bool(half_open), "sling": json.loads(sling)}


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
    with town.db.change(VERSION) as conn:
        row = conn.execute("SELECT trips FROM breaker WHERE item_id = ?", (item_id,)).fetchone()
        trips = (int(row[0]) if row is not None else 0) + 1
        cooldown = cooldown_for(trips, base)
        values = (item_id, rig, int(failures), int(run_failures), broken_by, last_error or "", utc(now),
                  trips, cooldown, now + cooldown if cooldown else None, 0, json.dumps(sling))
        conn.execute("DELETE FROM breaker WHERE item_id = ?", (item_id,))
        conn.execute(f"INSERT INTO breaker ({_BROKEN}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values)
    return _broken_entry(values)


def broken(town: Town) -> dict[str, dict]:
    """Every item the breaker holds, by item id (half-open ones included)."""
    rows = town.db.query(f"SELECT {_BROKEN} FROM breaker ORDER BY item_id")
    return {row[0]: _broken_entry(row) for row in rows}


def broken_entry(town: Town, item_id: str) -> dict | None:
    """The breaker's record of ``item_id``, or None when it is not broken."""
    row = town.db.one(f"SELECT {_BROKEN} FROM breaker WHERE item_id = ?", (item_id,))
    return _broken_entry(row) if row is not None else None


def count_broken(town: Town) -> int:
    return int(town.db.one("SELECT COUNT(*) FROM breaker")[0])


def due(town: Town, now: float) -> list[dict]:
    """Broken items whose cooldown has passed and that are not already being tried."""
    rows = town.db.query(f"SELECT {_BROKEN} FROM breaker WHERE next_attempt_ts <= ? AND half_open = 0"
                         " ORDER BY next_attempt_ts, item_id", (now,))
    return [_broken_entry(row) for row in rows]


def mark_half_open(town: Town, item_id: str) -> None:
    with town.db.change(VERSION) as conn:
        conn.execute("UPDATE breaker SET half_open = 1 WHERE item_id = ?", (item_id,))


def heal(town: Town, item_id: str) -> dict | None:
    """Forget ``item_id``'s breaker record (it launched, or a person reset it)."""
    if broken_entry(town, item_id) is None:  # the common case costs no write
        return None
    with town.db.change(VERSION) as conn:
        row = conn.execute(f"SELECT {_BROKEN} FROM breaker WHERE item_id = ?", (item_id,)).fetchone()
        conn.execute("DELETE FROM breaker WHERE item_id = ?", (item_id,))
    return _broken_entry(row) if row is not None else None


# -- a town made by sluice 0.1 ---------------------------------------------------------------------


def migrate_from_files(town: Town, conn: sqlite3.Connection) -> list[Path]:
    """Bring sluice 0.1's ``runtime/budget.json``, ``throttles.json`` and ``breaker.json`` into the tables.

    Runs inside the migration's transaction on ``conn`` (it neither begins
    nor commits).  Each file is read as 0.1 read it: a missing one is
    empty, one that is not a JSON object is a ConfigError naming it (the
    migration then changes nothing), and an entry 0.1 skipped or could not
    have used (a charge with no time, a throttle with no end, a breaker
    record that is not an object) is left behind.  Returns the files that
    were there, for the caller to move aside; nothing is deleted here.
    """
    moved = []
    for name, bring in (("budget", _migrate_budget), ("throttles", _migrate_throttles),
                        ("breaker", _migrate_breaker)):
        path = town.runtime / f"{name}.json"
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"{path}: cannot read ({err})") from None
        bring(conn, json_object(path, text))
        moved.append(path)
    return moved


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _whole(value: Any, default: int = 0) -> int:
    number = _number(value)
    return int(number) if number is not None else default


def _text(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _migrate_budget(conn: sqlite3.Connection, data: dict) -> None:
    launches = data.get("launches")
    for entry in launches if isinstance(launches, list) else ():
        at = _number(entry.get("at_ts")) if isinstance(entry, dict) else None
        if at is None:
            continue
        charge = _text(entry.get("charge")) or os.urandom(6).hex()
        conn.execute(
            f"INSERT INTO budget_charges ({_CHARGE}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (charge) DO NOTHING",
            (charge, at, _text(entry.get("rig")), _text(entry.get("item_id")), _text(entry.get("context_id")),
             _text(entry.get("polecat_id")), _whole(entry.get("tokens")), int(entry.get("reported") is True)))
    if data.get("exhausted"):
        conn.execute("INSERT INTO budget_spell (id, exhausted) VALUES (1, 1)"
                     " ON CONFLICT (id) DO UPDATE SET exhausted = 1")


def _migrate_throttles(conn: sqlite3.Connection, data: dict) -> None:
    held = data.get("throttles")
    for key, entry in (held.items() if isinstance(held, dict) else ()):
        until = _number(entry.get("until_ts")) if isinstance(entry, dict) else None
        if until is None:  # 0.1 never held on one
            continue
        scope = _text(entry.get("rig")) or key
        conn.execute(f"INSERT INTO throttles ({_THROTTLE}) VALUES (?, ?, ?, ?, ?)"
                     " ON CONFLICT (scope) DO NOTHING",
                     (scope, until, _number(entry.get("at_ts")), _text(entry.get("reason")),
                      _text(entry.get("by"))))


def _migrate_breaker(conn: sqlite3.Connection, data: dict) -> None:
    items = data.get("items")
    for key, entry in (items.items() if isinstance(items, dict) else ()):
        if not isinstance(entry, dict):
            continue
        sling = entry.get("sling")
        nxt = _number(entry.get("next_attempt_ts"))
        conn.execute(
            f"INSERT INTO breaker ({_BROKEN}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (item_id) DO NOTHING",
            (_text(entry.get("item_id"), key), _text(entry.get("rig")), _whole(entry.get("failures")),
             _whole(entry.get("run_failures")), _text(entry.get("broken_by"), "launches"),
             _text(entry.get("last_error")), _text(entry.get("broken_at")), _whole(entry.get("trips"), 1),
             _number(entry.get("cooldown")) or 0.0, nxt, int(bool(entry.get("half_open"))),
             json.dumps(sling if isinstance(sling, dict) else {})))
