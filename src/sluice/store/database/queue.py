"""The open queue read with SQL: plain contexts counted by their items' facts, and a group's rows.

Almost every open sling context is *plain* (the ``plain`` column, kept by
each writer of ``issues``): no failure, launch intent, missing mark, force or
promotion, so its place in the queue depends on its item alone — whether the
item is ready, blocked or ended, its priority, token estimate, labels,
touches, type and estimated minutes.  Those facts are kept on the context's
row (``f_*``, ``defer_ts``), copied from the item index of the rig the item's
prefix routes to (:mod:`sluice.store.items.index`) and tagged with the
version of that index's facts (``facts_of``).  :func:`refresh` copies them
for the rows slung since, or read under other facts (a rebuilt index; a
patched one keeps its version), in one ``UPDATE`` joined with the attached
index.  Counting 100,000 queued contexts by group is then one walk of an
index of the town database, in the grouping's order, and a group's first
rows in queue order a range of it — no join, no description or item record
parsed in Python.

A row whose item its rig's index lacks (missing, or under another rig's
prefix) or whose item is itself a context keeps no facts: the caller reads
the queue the long way (:func:`sluice.scheduler.queue.pending.survey`).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING

from sluice.core.items import CONTEXT_LABEL, DONE_STATUSES
from sluice.core.recordclass import frozen
from sluice.errors import ConfigError, StorageError
from sluice.store.database.contexts import Context, from_rows

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.store.files.town import Town

#: How an item places its plain context: ready, blocked (not ready: blocked, deferred) or stale.
READY, BLOCKED, STALE = 0, 1, 2
#: The item facts kept on a context row (``f_class``): a ready candidate (unless deferred), not one, ended
#: (or hooked), an item that is itself a sling context; NULL: no item in its rig's index.
CANDIDATE, NOT_CANDIDATE, ENDED, A_CONTEXT = 0, 1, 2, 3
#: Item statuses that make a plain (unforced) context stale: ended, or taken by someone (hooked).
STALE_STATUSES = tuple(sorted(DONE_STATUSES | {"hooked"}))

_FACTS = ("f_class", "f_priority", "f_tokens", "f_labels", "f_touches", "f_kind", "f_minutes")
_ENDED = f"i.status IN ({', '.join(repr(s) for s in STALE_STATUSES)})"
# Each fact of a context's item as its rig's index has it (``i``: the item's row, NULL when it has none).
_FILL = {
    "f_class": (f"CASE WHEN i.id IS NULL THEN NULL WHEN i.ephemeral = 1 AND i.labels LIKE :label"
                f" THEN {A_CONTEXT} WHEN {_ENDED} THEN {ENDED} WHEN i.candidate = 1 THEN {CANDIDATE}"
                f" ELSE {NOT_CANDIDATE} END"),
    "f_priority": "i.priority", "f_tokens": "i.tokens", "f_labels": "i.labels", "f_touches": "i.touches",
    "f_kind": "i.issue_type", "f_minutes": "i.minutes",
    "defer_ts": ("CASE WHEN i.defer_ts IS NULL THEN i.parent_defer_ts WHEN i.parent_defer_ts IS NULL"
                 " THEN i.defer_ts WHEN i.defer_ts > i.parent_defer_ts THEN i.defer_ts"
                 " ELSE i.parent_defer_ts END"),
}
_UNDEFERRED = "(defer_ts IS NULL OR defer_ts <= :now)"
_CONDITION = {READY: f"f_class = {CANDIDATE} AND {_UNDEFERRED}",
              BLOCKED: f"(f_class = {NOT_CANDIDATE} OR (f_class = {CANDIDATE} AND NOT {_UNDEFERRED}))"}


@frozen
class Group:
    """Plain contexts of one target rig whose items share class, priority, tokens, labels, touches, type
    and estimated minutes."""

    target_rig: str
    klass: int
    priority: int
    tokens: int
    labels: str  # the index's JSON list
    touches: str  # the index's JSON list, or ""
    issue_type: str
    minutes: int | None  # estimated minutes (the forecast reads them)
    count: int

    @property
    def label_set(self) -> frozenset[str]:
        return frozenset(json.loads(self.labels)) if self.labels not in ("", "[]") else frozenset()

    @property
    def touch_list(self) -> tuple[str, ...]:
        return tuple(json.loads(self.touches)) if self.touches else ()


def facts_tag(rig: str, version: str) -> str:
    """What a context row's ``facts_of`` says: the rig whose index its item's facts came from, and
    which version of that index's facts."""
    return f"{rig}:{version}"


def refresh(town: Town, rig: str, prefix: str, index: Path, version: str, write: bool = True) -> bool:
    """Bring the item facts of the plain contexts ``prefix`` routes up to ``rig``'s index (``version``):
    those slung since the last read, or read under other facts; False when they could not be written
    (another writer holds the database, it is read-only, or ``write`` is False), and the caller reads
    the queue otherwise.

    The facts are derived: a write that would wait or fail is skipped, and
    made by the next read, so a view never waits for a sling to commit.
    """
    db = town.db
    conn = db.conn
    tag = facts_tag(rig, version)
    # Once every plain row of this prefix holds the facts of ``tag``, a row can only lose them by being
    # slung or changed, which leaves ``facts_of`` NULL: then a short range of the index answers.
    mark = f"facts:{prefix}"
    known = db.kept(mark) == tag
    unfilled = "facts_of IS NULL" if known else "(facts_of IS NULL OR facts_of != :tag)"
    where = f"plain = 1 AND {unfilled} AND open_item >= :lo AND open_item < :hi"
    params = {"lo": f"{prefix}-", "hi": f"{prefix}.", "tag": tag}  # the ids the prefix routes
    if conn.execute(f"SELECT EXISTS (SELECT 1 FROM issues WHERE {where})", params).fetchone()[0] == 0:
        if not known and write:
            db.keep_if_free(mark, tag)
        return True
    if conn.in_transaction or not write:
        return False
    filled = ", ".join(f"{column} = (SELECT {expr} FROM ix.items i WHERE i.id = issues.open_item)"
                       for column, expr in _FILL.items())
    try:
        conn.execute("ATTACH DATABASE ? AS ix", (f"{index.as_uri()}?mode=ro",))
    except sqlite3.Error:
        return False
    try:
        with db.without_waiting(), db.transaction() as tx:
            tx.execute(f"UPDATE issues SET {filled}, facts_of = :tag WHERE {where}",
                       {**params, "label": f'%"{CONTEXT_LABEL}"%'})
            db.keep(mark, tag)
        return True
    except (sqlite3.Error, StorageError, ConfigError):
        return False
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("DETACH DATABASE ix")


class Reading:
    """The town database's open queue inside one read transaction."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def unfilled(self, tags: Iterable[str]) -> bool:
        """Whether a plain context's facts are not those of ``tags`` (each rig's index as it is now): none
        kept, or kept from a rig no longer there.  Asked as the ranges between the tags, each a short
        walk of ``issues_facts_of``, not one walk of every plain context."""
        bounds = sorted(tags)
        ranges = ["facts_of IS NULL"]
        ranges += ["facts_of < ?"] if bounds else ["facts_of IS NOT NULL"]
        params: list[str] = bounds[:1]
        for low, high in pairwise(bounds):
            ranges.append("(facts_of > ? AND facts_of < ?)")
            params += [low, high]
        if bounds:
            ranges.append("facts_of > ?")
            params.append(bounds[-1])
        found = " UNION ALL ".join(f"SELECT 1 FROM issues WHERE plain = 1 AND {r}" for r in ranges)
        return bool(self.conn.execute(f"SELECT EXISTS ({found})", params).fetchone()[0])

    def unusual(self) -> list[Context]:
        """Every open context that is not plain (failed, launching, missing, forced, promoted, broken)."""
        rows = self.conn.execute(
            "SELECT id, rig, description FROM issues WHERE status = 'open' AND plain = 0 AND EXISTS"
            " (SELECT 1 FROM labels l WHERE l.issue_id = issues.id AND l.label = ?)", (CONTEXT_LABEL,))
        return from_rows(rows)

    def groups(self, now: float, exclude: Sequence[str]) -> tuple[list[Group], bool]:
        """The plain contexts counted by group, and whether some item is itself a context or has none.

        One walk of ``issues_facts``, whose order is the grouping's: SQLite
        counts as it goes, without a sort.
        """
        facts = ", ".join(_FACTS)
        sql = (f"SELECT target_rig, {facts}, sum({_UNDEFERRED}), count(*) FROM issues WHERE plain = 1"
               f"{_not_in_named(exclude)} GROUP BY target_rig, {facts}")
        counts: dict[tuple, int] = {}
        odd = False
        for target, f_class, priority, tokens, labels, touches, kind, minutes, undeferred, n in \
                self.conn.execute(sql, {"now": now, **_named(exclude)}):
            if f_class is None or f_class == A_CONTEXT:
                odd = True
                continue
            if f_class == ENDED:
                split = [(STALE, n)]
            elif f_class == CANDIDATE:
                split = [(READY, undeferred), (BLOCKED, n - undeferred)]
            else:
                split = [(BLOCKED, n)]
            for klass, count in split:
                if count:
                    key = (target, klass, priority, tokens, labels, touches, kind, minutes)
                    counts[key] = counts.get(key, 0) + count
        return [Group(*key, n) for key, n in counts.items()], odd

    def rows(self, group: Group, now: float, exclude: Sequence[str], limit: int) -> list[tuple[str, str]]:
        """``(enqueued_at, item id)`` of a group's first ``limit`` contexts in queue order (oldest first,
        then by item id): a range of ``issues_facts``, already in that order."""
        sql = (
            "SELECT enqueued_at, open_item FROM issues WHERE plain = 1 AND target_rig = :rig"
            f" AND {_CONDITION[group.klass]} AND f_priority = :priority AND f_tokens = :tokens"
            " AND f_labels = :labels AND f_touches = :touches AND f_kind = :kind AND f_minutes IS :minutes"
            f"{_not_in_named(exclude)} ORDER BY enqueued_at, open_item LIMIT :limit"
        )
        params = {"now": now, "rig": group.target_rig, "priority": group.priority, "tokens": group.tokens,
                  "labels": group.labels, "touches": group.touches, "kind": group.issue_type,
                  "minutes": group.minutes, "limit": limit, **_named(exclude)}
        return self.conn.execute(sql, params).fetchall()

    def stale(self, exclude: Sequence[str]) -> list[tuple[str, str]]:
        """``(context id, item id)`` of the plain contexts whose item ended or is hooked, oldest first."""
        sql = (f"SELECT id, open_item FROM issues WHERE plain = 1 AND f_class = {ENDED}"
               f"{_not_in_named(exclude)} ORDER BY enqueued_at, id")
        return self.conn.execute(sql, _named(exclude)).fetchall()

    def of_rigs(self, target_rigs: Iterable[str]) -> list[tuple[str, str]]:
        """``(context id, item id)`` of the plain contexts aimed at ``target_rigs``, oldest first."""
        names = sorted(target_rigs)
        if not names:
            return []
        marks = ",".join("?" * len(names))
        sql = (f"SELECT id, open_item FROM issues WHERE plain = 1 AND target_rig IN ({marks})"
               " ORDER BY enqueued_at, id")
        return self.conn.execute(sql, names).fetchall()


@contextlib.contextmanager
def reading(town: Town) -> Iterator[Reading]:
    """The town database's queue in one read transaction."""
    conn = town.db.conn
    conn.execute("BEGIN")
    try:
        yield Reading(conn)
    finally:
        conn.execute("COMMIT")


def _named(exclude: Sequence[str]) -> dict[str, str]:
    return {f"x{n}": item for n, item in enumerate(exclude)}


def _not_in_named(exclude: Sequence[str]) -> str:
    if not exclude:
        return ""
    return f" AND open_item NOT IN ({', '.join(f':x{n}' for n in range(len(exclude)))})"
