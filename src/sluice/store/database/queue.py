"""The open queue read with SQL: plain contexts counted by their items' facts, and a group's rows.

Almost every open sling context is *plain* (the ``plain`` column, kept by
each writer of ``issues``): no failure, launch intent, missing mark, force or
promotion, so its place in the queue depends on its item alone — whether the
item is ready, blocked or ended, its priority and token estimate.  Those
facts are in the rig's item index (:mod:`sluice.store.items.index`), a SQLite file
of its own: :func:`reading` attaches the indexes to the town database's
connection for one read transaction, so counting 100,000 queued contexts by
(target rig, class, priority, tokens, labels, touches) is one join inside
SQLite, and a group's first rows in queue order another, instead of
100,000 descriptions and item records parsed in Python.

An item id is looked up only in the index of the rig its prefix names
(``[prefix-, prefix.)`` as a range of ids); a caller compares the counts of
:func:`groups` with the plain contexts routed there, and reads the queue the
long way (:func:`sluice.scheduler.queue.pending.survey`) when they differ.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from sluice.core.items import CONTEXT_LABEL, DONE_STATUSES
from sluice.core.recordclass import frozen
from sluice.core.records import SlingContextFields
from sluice.store.database.contexts import Context

if TYPE_CHECKING:
    import sqlite3
    from pathlib import Path

    from sluice.store.files.town import Town

#: How an item places its plain context: ready, blocked (not ready: blocked, deferred) or stale.
READY, BLOCKED, STALE = 0, 1, 2
#: Item statuses that make a plain (unforced) context stale: ended, or taken by someone (hooked).
STALE_STATUSES = tuple(sorted(DONE_STATUSES | {"hooked"}))
#: Indexes attached at once: SQLite's default limit is ten databases besides the main one.
MAX_ATTACHED = 9

_STALE = f"i.status IN ({', '.join(repr(s) for s in STALE_STATUSES)})"
_READY_NOW = (f"NOT {_STALE} AND i.candidate = 1 AND (i.defer_ts IS NULL OR i.defer_ts <= :now)"
              " AND (i.parent_defer_ts IS NULL OR i.parent_defer_ts <= :now)")
_CONDITION = {READY: _READY_NOW, BLOCKED: f"NOT {_STALE} AND NOT ({_READY_NOW})", STALE: _STALE}


@frozen
class Group:
    """Plain contexts of one target rig whose items share class, priority, tokens, labels and touches."""

    target_rig: str
    klass: int
    priority: int
    tokens: int
    labels: str  # the index's JSON list
    touches: str  # the index's JSON list, or ""
    issue_type: str
    minutes: int | None  # estimated minutes (the forecast reads them)
    context_items: int  # how many of the items are themselves sling contexts (never work)
    count: int

    @property
    def label_set(self) -> frozenset[str]:
        return frozenset(json.loads(self.labels)) if self.labels not in ("", "[]") else frozenset()

    @property
    def touch_list(self) -> tuple[str, ...]:
        return tuple(json.loads(self.touches)) if self.touches else ()


def id_range(prefix: str) -> tuple[str, str]:
    """The ids a rig prefix routes, as a half-open range: ``prefix-`` up to ``prefix.``."""
    return f"{prefix}-", f"{prefix}."


class Reading:
    """The town database and a set of item indexes, attached, inside one read transaction."""

    def __init__(self, conn: sqlite3.Connection, aliases: dict[str, str]):
        self.conn = conn
        self.aliases = aliases  # rig → schema name

    def plain_total(self) -> int:
        return self.conn.execute("SELECT count(*) FROM issues WHERE plain = 1").fetchone()[0]

    def unusual(self) -> list[Context]:
        """Every open context that is not plain (failed, launching, missing, forced, promoted, broken)."""
        rows = self.conn.execute(
            "SELECT id, rig, description FROM issues WHERE status = 'open' AND plain = 0 AND EXISTS"
            " (SELECT 1 FROM labels l WHERE l.issue_id = issues.id AND l.label = ?)", (CONTEXT_LABEL,))
        return [Context(cid, rig, SlingContextFields.from_description(text)) for cid, rig, text in rows]

    def contexts(self, item_ids: Iterable[str]) -> dict[str, Context]:
        """The open context of each of ``item_ids`` that has one, by item."""
        out = {}
        ids = list(item_ids)
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            rows = self.conn.execute(
                f"SELECT id, rig, description, open_item FROM issues WHERE open_item IN ({_marks(chunk)})",
                chunk)
            for cid, rig, text, item in rows:
                out[item] = Context(cid, rig, SlingContextFields.from_description(text))
        return out

    def groups(self, rig: str, prefix: str, now: float, exclude: Sequence[str]) -> list[Group]:
        """The plain contexts whose items are in ``rig``'s index, counted by group.

        Contexts aimed at the item's own rig (nearly all) are counted walking
        the index in group order (``items_group``), so SQLite aggregates as it
        goes instead of sorting 100,000 rows; the few aimed elsewhere are
        counted from the contexts' side.
        """
        schema = self.aliases[rig]
        lo, hi = id_range(prefix)
        facts = ("i.candidate, i.priority, i.tokens, i.labels, i.touches, i.issue_type, i.minutes, i.status,"
                 " sum((i.defer_ts IS NULL OR i.defer_ts <= :now)"
                 " AND (i.parent_defer_ts IS NULL OR i.parent_defer_ts <= :now)),"
                 " sum(i.ephemeral = 1 AND i.labels LIKE :label), count(*)")
        params = {"now": now, "lo": lo, "hi": hi, "rig": rig, "label": f'%"{CONTEXT_LABEL}"%',
                  **_named(exclude)}
        own = (f"SELECT :rig, {facts} FROM {schema}.items i CROSS JOIN issues c"
               " WHERE i.id >= :lo AND i.id < :hi AND c.open_item = i.id AND c.plain = 1"
               f" AND c.target_rig = :rig{_not_in_named(exclude)} GROUP BY 2, 3, 4, 5, 6, 7, 8, 9")
        other = (f"SELECT c.target_rig, {facts} FROM issues c CROSS JOIN {schema}.items i"
                 " WHERE c.plain = 1 AND c.target_rig != :rig AND c.open_item >= :lo AND c.open_item < :hi"
                 f" AND i.id = c.open_item{_not_in_named(exclude)} GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9")
        counts: dict[tuple, list[int]] = {}
        for statement in (own, other):
            for target, candidate, priority, tokens, labels, touches, kind, minutes, status, undeferred, \
                    contexts, n in self.conn.execute(statement, params):
                if status in STALE_STATUSES:
                    split = [(STALE, n)]
                elif candidate:
                    split = [(READY, undeferred), (BLOCKED, n - undeferred)]
                else:
                    split = [(BLOCKED, n)]
                for klass, count in split:
                    if count:
                        key = (target, klass, priority, tokens, labels, touches, kind, minutes)
                        tally = counts.setdefault(key, [0, 0])
                        tally[0] += contexts
                        tally[1] += count
        return [Group(*key, contexts, n) for key, (contexts, n) in counts.items()]

    def rows(self, rig: str, prefix: str, group: Group, now: float, exclude: Sequence[str], limit: int,
             by_item: bool = False) -> list[tuple[str, str]]:
        """``(enqueued_at, item id)`` of a group's first ``limit`` contexts in queue order (oldest first,
        then by item id).

        ``by_item``: walk the group's items in the index and look each one's
        context up (cheap for a group that is a small part of the queue);
        else walk the target rig's contexts in queue order and look each
        one's item up, stopping at ``limit`` (cheap for a large group).
        """
        schema = self.aliases[rig]
        lo, hi = id_range(prefix)
        joined = (f"FROM {schema}.items i CROSS JOIN issues c" if by_item
                  else f"FROM issues c CROSS JOIN {schema}.items i")
        sql = (
            f"SELECT c.enqueued_at, c.open_item {joined}"
            " WHERE c.plain = 1 AND c.target_rig = :rig AND c.open_item >= :lo AND c.open_item < :hi"
            f" AND i.id = c.open_item AND {_CONDITION[group.klass]} AND i.priority = :priority"
            " AND i.tokens = :tokens AND i.labels = :labels AND i.touches = :touches"
            f" AND i.issue_type = :kind AND i.minutes IS :minutes{_not_in_named(exclude)}"
            " ORDER BY c.enqueued_at, c.open_item LIMIT :limit"
        )
        params = {"now": now, "rig": group.target_rig, "lo": lo, "hi": hi, "priority": group.priority,
                  "tokens": group.tokens, "labels": group.labels, "touches": group.touches, "limit": limit,
                  "kind": group.issue_type, "minutes": group.minutes,
                  **_named(exclude)}
        return self.conn.execute(sql, params).fetchall()

    def stale(self, rig: str, prefix: str, exclude: Sequence[str]) -> list[tuple[str, str, str]]:
        """``(context id, item id, item status)`` of the plain contexts whose item ended or is hooked."""
        schema = self.aliases[rig]
        lo, hi = id_range(prefix)
        sql = (
            f"SELECT c.id, c.open_item, i.status FROM issues c CROSS JOIN {schema}.items i"
            " WHERE c.plain = 1 AND c.open_item >= :lo AND c.open_item < :hi AND i.id = c.open_item"
            f" AND {_STALE}{_not_in_named(exclude)} ORDER BY c.enqueued_at, c.id"
        )
        return self.conn.execute(sql, {"lo": lo, "hi": hi, **_named(exclude)}).fetchall()

    def of_rigs(self, target_rigs: Iterable[str]) -> list[tuple[str, str]]:
        """``(context id, item id)`` of the plain contexts aimed at ``target_rigs``, oldest first."""
        names = sorted(target_rigs)
        if not names:
            return []
        sql = (f"SELECT id, open_item FROM issues WHERE plain = 1 AND target_rig IN ({_marks(names)})"
               " ORDER BY enqueued_at, id")
        return self.conn.execute(sql, names).fetchall()


@contextlib.contextmanager
def reading(town: Town, indexes: dict[str, Path]) -> Iterator[Reading]:
    """The town database with ``indexes`` (rig → index file) attached read-only, in one read transaction."""
    if len(indexes) > MAX_ATTACHED:
        raise ValueError(f"at most {MAX_ATTACHED} indexes at once (got {len(indexes)})")
    conn = town.db.conn
    aliases = {}
    try:
        for n, (rig, path) in enumerate(sorted(indexes.items())):
            alias = f"ix{n}"
            conn.execute(f"ATTACH DATABASE ? AS {alias}", (f"{path.as_uri()}?mode=ro",))
            aliases[rig] = alias
        conn.execute("BEGIN")
        try:
            yield Reading(conn, aliases)
        finally:
            conn.execute("COMMIT")
    finally:
        for alias in aliases.values():
            with contextlib.suppress(Exception):
                conn.execute(f"DETACH DATABASE {alias}")


def _marks(values: Sequence) -> str:
    return ",".join("?" * len(values))


def _named(exclude: Sequence[str]) -> dict[str, str]:
    return {f"x{n}": item for n, item in enumerate(exclude)}


def _not_in_named(exclude: Sequence[str]) -> str:
    if not exclude:
        return ""
    return f" AND c.open_item NOT IN ({', '.join(f':x{n}' for n in range(len(exclude)))})"
