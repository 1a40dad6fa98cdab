"""One rig's items: its beads export, its command's snapshot, or its own small tracker file.

* ``issues.jsonl`` (or an external beads export, read-only) holds work items;
  writers rewrite it atomically under the rig lock.
* sluice's own records of the rig (sling contexts) are not here: they are the
  rig's ephemeral issue records in the town database
  (:mod:`sluice.store.database.contexts`), and they never change an item's readiness
  (their only edge is ``tracks``, which never blocks).

Readers take no lock.  A torn last line (a crash mid-append) is skipped with a
warning; any other bad line is a :class:`StoreCorrupt` naming file and line,
and nothing is rewritten.  Reads go through the derived
:class:`~sluice.store.items.index.DurableIndex`, rebuilt when the file changes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from sluice.core.items import normalise
from sluice.errors import (
    ConfigError,
    InvalidOperation,
    ReadOnlyStore,
    SluiceError,
    StoreCorrupt,
    UnknownItem,
    os_error_text,
)
from sluice.logs import log
from sluice.store.files import fsutil
from sluice.store.files.jsonlog import TornLine, parse_line
from sluice.store.files.town import Rig, Town
from sluice.store.items.index import DurableIndex


def read_jsonl(path: Path, warn: Callable[[str], None] | None = None) -> Iterator[tuple[int, dict, str]]:
    """(line number, normalised record, raw text) for every record line of ``path``.

    Streams the file, so a 100,000-line export never sits in memory whole.  Only
    the final line can lack its newline; if it is also unparseable it is a torn
    write and is skipped with a warning.  A priority that is not an integer 0–4
    is read as the default and warned about, naming file and line.  Warnings
    go to ``warn`` (default: the ``sluice`` logger).  A path that is not a regular file, or one
    larger than :data:`~sluice.store.files.fsutil.MAX_SOURCE_BYTES`, is a
    :class:`~sluice.store.files.fsutil.NotRegularFile` naming it, raised before anything is read.
    """
    warn = warn or log.warning
    try:
        # Not a plain open: a FIFO would block it for ever and /dev/zero fill the memory.  Anything but
        # a regular file of at most fsutil.MAX_SOURCE_BYTES is a NotRegularFile naming the path.
        fh = fsutil.open_source(path)
    except FileNotFoundError:
        return
    try:
        for number, chunk in enumerate(fh, start=1):
            try:
                parsed = parse_line(path, number, chunk, warn)
            except TornLine:
                warn(f"{path}:{number}: ignoring a torn last line (an interrupted write)")
                return
            if parsed is not None:
                yield number, parsed, chunk.decode("utf-8").rstrip("\r\n")
    finally:
        fh.close()


def decode_all(raws: Iterable[str]) -> list[dict]:
    """The normalised records of index rows' raw texts, in order.

    One JSON array parsed at once instead of one ``json.loads`` per row: a
    dispatch cycle decodes every queued item, and the per-call overhead was a
    quarter of that.  The index holds only lines that parsed as one object
    each when it was built, so the array has exactly one record per text.
    """
    return [normalise(record) for record in json.loads("[" + ",".join(raws) + "]")]


class RigStore:
    """The items of one rig."""

    def __init__(self, town: Town, rig: Rig):
        self.town = town
        self.rig = rig
        self.durable_path = town.rig_items(rig)
        self.lock_path = town.runtime / "locks" / f"rig-{rig.name}.lock"
        self.index_path = town.runtime / "index" / f"{rig.name}.sqlite"
        self.index = DurableIndex(self.index_path, self.durable_path, self._load)
        self._refresh_source()

    def _refresh_source(self) -> None:
        if self.rig.command is not None:  # a command source: its snapshot brought up to date first
            from sluice.store.items.sources import ensure_fresh

            ensure_fresh(self.town, self.rig)

    @property
    def read_only(self) -> bool:
        return self.rig.read_only

    def _load(self):
        if self.rig.command is not None and not self.durable_path.exists():
            from sluice.store.items.sources import read_state, shown

            error = read_state(self.town, self.rig.name).get("error") or "it has not run yet"
            raise ConfigError(f"rig {self.rig.name!r} reads its items through"
                              f" `{shown(self.rig.command.argv)}`, which has given no snapshot yet ({error})")
        if self.read_only and not self.durable_path.exists():
            # An own store that does not exist yet is simply empty; a vanished export is not: read as
            # empty, every queued context for its items would look orphaned and be closed.
            raise ConfigError(
                f"rig {self.rig.name!r} reads its items from {self.durable_path}, which does not exist"
                " (restore the beads export there)"
            )
        for _number, record, raw in read_jsonl(self.durable_path, self.index.warn):
            yield record, raw

    def refresh(self) -> None:
        """Forget cached reads, so the next read sees other writers' changes."""
        self.index.close()

    def recheck(self) -> None:
        """Before reusing this store for another call: forget what other writers changed since.

        The index stays open while its source file is unchanged (a new open
        would find the same index).
        """
        self._refresh_source()
        self.index.forget_if_changed()

    # -- reading -------------------------------------------------------------
    def get(self, item_id: str) -> dict | None:
        raw = self.index.get_raw(item_id)
        return normalise(json.loads(raw)) if raw is not None else None

    def get_many(self, ids: Iterable[str]) -> dict[str, dict]:
        """``get`` for many ids at once (one index query per 500 ids); unknown ids are absent."""
        found = self.index.get_raw_many(list(ids))
        return dict(zip(found, decode_all(found.values()), strict=True))

    def get_many_ready(self, ids: Iterable[str], now_ts: float
                       ) -> tuple[dict[str, dict], set[str], dict[str, int]]:
        """:meth:`get_many` of ``ids``, which of the records found are ready (:meth:`ready_among`),
        and the effective tokens of each: one query per few hundred ids answers all three."""
        rows = self.index.raw_and_ready(list(ids), now_ts)
        records = dict(zip(rows, decode_all(row[0] for row in rows.values()), strict=True))
        return (records, {rid for rid, row in rows.items() if row[1]},
                {rid: row[2] for rid, row in rows.items()})

    def require(self, item_id: str) -> dict:
        record = self.get(item_id)
        if record is None:
            raise UnknownItem(f"no item {item_id!r} in rig {self.rig.name!r}")
        return record

    def durable(self, where: str = "", params=()) -> list[dict]:
        return [normalise(json.loads(raw)) for _id, raw in self.index.rows(where, params)]

    def durable_with_edge(self, dep_type: str, targets: Iterable[str]) -> list[dict]:
        """Durable items, in file order, with a ``dep_type`` edge to one of ``targets`` (one scan)."""
        return [normalise(json.loads(raw)) for _id, raw in self.index.rows_with_edge(dep_type, targets)]

    def ready_raw(self, now_ts: float, limit: int = 0) -> list[tuple]:
        """(priority, created_ts, id, raw) of ready items in beads order."""
        return self.index.ready_rows(now_ts, limit)

    def ready_among(self, now_ts: float, ids: Iterable[str]) -> set[str]:
        """Which of ``ids`` are ready: the ids of :meth:`ready_raw` among them, without reading the rest."""
        return self.index.ready_among(now_ts, set(ids))

    def blocked(self) -> list[tuple[dict, list[str]]]:
        """Blocked items with what blocks each (K1–K5)."""
        return [(normalise(json.loads(row[3])), row[4]) for row in self.blocked_raw()]

    def blocked_by(self, item_id: str) -> list[str] | None:
        """What blocks ``item_id``, as :meth:`blocked` names it; None when it is not blocked."""
        return self.index.blocked_by(item_id)

    def blocked_raw(self) -> list[tuple]:
        """(priority, created_ts, id, raw, blocked_by) of blocked items in beads order."""
        return self.index.blocked_listing()

    def merge_queue_counts(self) -> dict[str, int]:
        """``merge-request`` items per status: open ones are queued, in_progress ones running."""
        return self.index.status_counts("merge-request")

    # -- writing durable items --------------------------------------------------
    def require_writable(self) -> None:
        """Raise ReadOnlyStore when this rig reads its items from an external export."""
        if self.rig.command is not None:
            from sluice.store.items.sources import shown

            raise ReadOnlyStore(
                f"rig {self.rig.name!r} reads its items through `{shown(self.rig.command.argv)}`;"
                " change items with beads, or `sluice item import` them into a rig of its own"
            )
        if self.read_only:
            raise ReadOnlyStore(
                f"rig {self.rig.name!r} reads its items from {self.durable_path}, a read-only beads export;"
                " change items with beads there, or `sluice item import` them into a rig of its own"
            )

    def mutate_durable(self, change: Callable[[list[dict]], object]):
        """Run ``change(records)`` on the current durable records and rewrite them atomically."""
        self.require_writable()
        with fsutil.file_lock(self.lock_path):
            records = [record for _n, record, _raw in read_jsonl(self.durable_path)]
            result = change(records)
            body = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records)
            fsutil.atomic_write_bytes(self.durable_path, body.encode("utf-8"))
        self.refresh()
        return result


class Stores:
    """Every rig's store in a town, opened lazily and routed by id prefix."""

    def __init__(self, town: Town):
        self.town = town
        self._open: dict[str, RigStore] = {}
        #: Rigs with a file that cannot be read (a malformed line, an unreadable file): rig → what,
        #: naming file and line.  Their work is held, never closed, and every other rig goes on.
        self.unreadable: dict[str, str] = {}

    def hold_unreadable(self, name: str, err: Exception) -> None:
        plain = isinstance(err, OSError) and not isinstance(err, SluiceError)
        text = os_error_text(err) if plain else str(err)  # an OS refusal: the path first, no errno
        self.unreadable.setdefault(name, text)

    def rig(self, name: str) -> RigStore:
        if name not in self._open:
            self._open[name] = RigStore(self.town, self.town.rig(name))
        return self._open[name]

    def all(self) -> list[RigStore]:
        return [self.rig(r.name) for r in self.town.rigs()]

    def for_id(self, item_id: str) -> RigStore:
        """The store an id routes to, falling back to a search of every rig."""
        rig = self.town.rig_for_id(item_id)
        if rig is not None:
            store = self.rig(rig.name)
            if store.get(item_id) is not None:
                return store
        for store in self.all():
            if store.rig.name in self.unreadable:
                continue
            try:
                if store.get(item_id) is not None:
                    return store
            except (StoreCorrupt, OSError) as err:  # another rig's damage does not hide this item
                self.hold_unreadable(store.rig.name, err)
        raise UnknownItem(f"no item {item_id!r} in any rig of this town")

    def find(self, item_id: str) -> tuple[RigStore, dict]:
        store = self.for_id(item_id)
        return store, store.require(item_id)

    def find_many(self, item_ids: Iterable[str]) -> dict[str, tuple[RigStore, dict]]:
        """``find`` for many ids with a few queries per rig; ids no rig holds are absent.

        Same answer as :meth:`find` one by one: the rig an id's prefix routes
        to if it holds the id, else the first rig (in name order) that does.
        """
        wanted = list(dict.fromkeys(item_ids))
        out: dict[str, tuple[RigStore, dict]] = {}
        routed: dict[str, list[str]] = {}
        for item_id in wanted:
            rig = self.town.rig_for_id(item_id)
            if rig is not None:
                routed.setdefault(rig.name, []).append(item_id)
        for name, ids in routed.items():
            store = self.rig(name)
            out.update((rid, (store, record)) for rid, record in store.get_many(ids).items())
        for store in self.all():
            missing = [rid for rid in wanted if rid not in out]
            if not missing:
                break
            out.update((rid, (store, record)) for rid, record in store.get_many(missing).items())
        return out

    def refresh(self) -> None:
        for store in self._open.values():
            store.refresh()

    def recheck(self) -> None:
        for store in self._open.values():
            store.recheck()


def ensure_no_cycle(records_by_id: dict[str, dict], source: str, target: str) -> None:
    """Refuse a blocking edge source→target that would close a cycle."""
    seen, stack = set(), [target]
    while stack:
        current = stack.pop()
        if current == source:
            raise InvalidOperation(f"{source} → {target} would create a dependency cycle")
        if current in seen:
            continue
        seen.add(current)
        for dep in (records_by_id.get(current) or {}).get("dependencies") or ():
            if dep.get("type") in ("blocks", "conditional-blocks", "parent-child", "waits-for"):
                stack.append(dep.get("depends_on_id"))
